/* SPDX-License-Identifier: MIT */
/*
 * graceful_shutdown: on SIGTERM or SIGINT, stop taking work, let what is
 * in flight finish its cleanup, and exit (signal.NotifyContext in Go,
 * asyncio.run's SIGINT handling, tokio::signal::ctrl_c).
 *
 * weft_main runs the root task like weft_run and adds this: the first
 * SIGINT or SIGTERM cancels the root scope, so every blocking call in
 * every task returns -ECANCELED; the tasks then have a grace period
 * (weft_config.shutdown_grace_ns, 5 s by default) to finish, and a second
 * signal ends the process at once. Here three servers handle requests
 * until the signal, then each flushes its state in a shielded scope (with
 * its own deadline, so cleanup cannot hang). The program sends SIGTERM to
 * itself after 20 ms (real time). Exits 1 unless every server flushed.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "weft.h"

#define SERVERS 3
static atomic_int served, flushed;

static int server(void *arg)
{
    while (weft_sleep(2 * WEFT_MSEC) == 0) /* a request */
        atomic_fetch_add(&served, 1);

    /* Cancelled: shutting down. Block once more, shielded and bounded. */
    weft_scope *cleanup;
    weft_scope_opts o = {.shield = 1, .deadline = weft_now() + WEFT_SEC};
    weft_scope_open(&cleanup, &o);
    int rc = weft_sleep(5 * WEFT_MSEC); /* flush, say goodbye */
    weft_scope_join(cleanup);
    weft_scope_free(cleanup);
    if (rc == 0)
        atomic_fetch_add(&flushed, 1);
    return 0;
}

static int root(void *arg)
{
    weft_scope *s;
    weft_scope_open(&s, NULL);
    for (int i = 0; i < SERVERS; i++)
        weft_spawn(s, server, NULL);

    weft_sleep(20 * WEFT_MSEC);
    kill(getpid(), SIGTERM); /* what `kill <pid>` or systemd would send */

    int rc = weft_scope_join(s); /* waits for the servers' cleanup */
    weft_scope_free(s);
    printf("servers: %s; %d requests served, %d of %d flushed\n",
           weft_strerror(rc), atomic_load(&served), atomic_load(&flushed),
           SERVERS);
    return rc == -ECANCELED && atomic_load(&flushed) == SERVERS ? 0 : -1;
}

int main(void)
{
    return weft_main(root, NULL) == 0 ? 0 : 1;
}
