/* SPDX-License-Identifier: MIT */
/*
 * graceful_shutdown: on SIGTERM or SIGINT, stop taking work, finish what
 * was taken, and exit, losing nothing (signal.NotifyContext and
 * http.Server.Shutdown(ctx) in Go, asyncio.run's SIGINT handling,
 * tokio::signal::ctrl_c).
 *
 * weft_main runs the root task like weft_run and turns the first SIGINT
 * or SIGTERM into a shutdown request. With weft_config.shutdown_drain_ns
 * set, nothing is cancelled by it: intake sees the request and stops, the
 * rest drains, and the root scope is cancelled only if tasks still run at
 * the drain deadline (here 5 s, which the producer narrows to 2 s when it
 * sees the request). Here a producer takes a job every millisecond and
 * three consumers take 10 ms a job, so jobs queue up; the program sends
 * SIGTERM to itself after 20 ms (real time). Exits 1 unless every job
 * produced was consumed and nothing was cancelled.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "weft.h"

#define CONSUMERS 3
static atomic_int produced, consumed;
static size_t queued; /* jobs waiting when intake stopped */

static int producer(void *arg)
{
    weft_chan *jobs = arg;
    /* Intake until shutdown is requested: a job every millisecond. */
    for (int id = 0; weft_shutdown_wait(weft_now() + WEFT_MSEC) == -ETIMEDOUT;
         id++) {
        if (weft_chan_send(jobs, &id) != 0)
            break;
        atomic_fetch_add(&produced, 1);
    }
    queued = weft_chan_len(jobs);
    /* Drain within 2 s. */
    weft_shutdown_set_deadline(weft_now() + 2 * WEFT_SEC);
    weft_chan_close(jobs); /* no more jobs: the consumers drain the rest */
    return 0;
}

static int consumer(void *arg)
{
    weft_chan *jobs = arg;
    int id, rc;
    while ((rc = weft_chan_recv(jobs, &id)) == 0) {
        if ((rc = weft_sleep_for(10 * WEFT_MSEC)) != 0) /* handle the job */
            break;
        atomic_fetch_add(&consumed, 1);
    }
    return rc == -EPIPE ? 0 : rc; /* -EPIPE: closed and drained */
}

static int root(void *arg)
{
    weft_chan *jobs;
    weft_chan_new(&jobs, sizeof(int), 64);
    weft_scope *s;
    weft_scope_open(&s, NULL);
    weft_spawn(s, producer, jobs);
    for (int i = 0; i < CONSUMERS; i++)
        weft_spawn(s, consumer, jobs);

    weft_sleep_for(20 * WEFT_MSEC);
    kill(getpid(), SIGTERM); /* what `kill <pid>` or systemd would send */

    int rc = weft_scope_join(s); /* waits for the drain */
    weft_scope_free(s);
    weft_chan_unref(jobs);
    printf("pipeline: %s; %d jobs produced, %zu of them queued at the "
           "request, %d consumed; cancelled: %s\n",
           weft_strerror(rc), atomic_load(&produced), queued,
           atomic_load(&consumed), weft_cancelled() ? "yes" : "no");
    return rc == 0 && atomic_load(&consumed) == atomic_load(&produced) &&
                   !weft_cancelled()
               ? 0
               : -1;
}

int main(void)
{
    /* A request first; the root scope is cancelled only if the tasks are
     * still running 5 s later. */
    weft_config cfg = {.shutdown_drain_ns = 5 * WEFT_SEC};
    return weft_main_cfg(&cfg, root, NULL) == 0 ? 0 : 1;
}
