/* SPDX-License-Identifier: MIT */
/*
 * echo_server: echoes every byte back, one task per connection.
 *
 * Shows the shape of a weft server: a listening socket, an accept loop
 * that spawns a task per connection into a scope of its own, straight-line
 * reads and writes that suspend only the connection's task, an idle
 * deadline per connection, and graceful shutdown: on SIGINT/SIGTERM
 * (weft_main) every blocked call returns -ECANCELED, the loops end, and
 * the scopes join.
 *
 * The connections' scope is a WEFT_SERVE scope: a connection that fails
 * cancels no other, its error becomes a line on stderr (at most 10 a
 * second; weft_scope_opts.on_failure would take them instead), and the
 * scope keeps nothing per connection, so a server that runs for months
 * uses the same memory for it as on its first day.
 *
 *   echo_server [PORT]    default 7777; try `nc 127.0.0.1 7777`
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "weft.h"

#define IDLE_TIMEOUT (60 * WEFT_SEC)

static int echo(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[4096];
    int err = 0;
    for (;;) {
        ptrdiff_t n = weft_read(fd, buf, sizeof buf, weft_now() + IDLE_TIMEOUT);
        if (n <= 0) {
            err = (int)n; /* 0: closed by the client */
            break;
        }
        if ((err = weft_write_all(fd, buf, (size_t)n, NULL, WEFT_NEVER)) < 0)
            break;
    }
    weft_close(fd);
    return err == -ECANCELED || err == -ETIMEDOUT ? 0 : err;
}

static int root(void *arg)
{
    int port = *(int *)arg;
    int lfd = weft_tcp_listen("127.0.0.1", port, 128, 0);
    if (lfd < 0)
        return lfd;
    fprintf(stderr, "echo_server: listening on 127.0.0.1:%d\n",
            weft_local_port(lfd));
    weft_scope *conns;
    int err = weft_scope_open(&conns, &(weft_scope_opts){.policy = WEFT_SERVE});
    if (err < 0) {
        weft_close(lfd);
        return err;
    }
    for (;;) {
        int fd = weft_accept(lfd, NULL, WEFT_NEVER);
        if (fd == -ECANCELED)
            break; /* shutting down */
        if (fd < 0)
            continue; /* a failed handshake; EMFILE already backed off */
        if (weft_spawn(conns, echo, (void *)(intptr_t)fd) < 0)
            weft_close(fd);
    }
    weft_close(lfd);
    weft_scope_join(conns); /* the connections see the same cancel */
    weft_scope_free(conns);
    return 0;
}

int main(int argc, char **argv)
{
    int port = argc > 1 ? atoi(argv[1]) : 7777;
    int err = weft_main(root, &port);
    if (err < 0) {
        fprintf(stderr, "echo_server: %s\n", weft_strerror(err));
        return 1;
    }
    return 0;
}
