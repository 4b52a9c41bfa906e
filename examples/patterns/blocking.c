/* SPDX-License-Identifier: MIT */
/*
 * blocking: run a call that blocks its thread (a synchronous client
 * library, read(2) on a blocking descriptor, fsync, a long computation)
 * without stopping the other tasks (asyncio.to_thread, what Go's runtime
 * does for every system call, Node's worker threads, Tokio's
 * spawn_blocking).
 *
 * weft_blocking(fn, arg) runs fn on a thread of the runtime's blocking
 * pool while the calling task waits, and its worker runs other tasks. Here
 * fn is a read(2) on a pipe in blocking mode, and the only writer is
 * another task on the same, single, worker: were the read made on the
 * worker, the writer could never run and the program would hang. Through
 * the pool it returns at 10 ms, when the writer has written.
 *
 * Then a read that nothing answers: weft_blocking_until gives up at its
 * deadline (-ETIMEDOUT at exactly 110 ms of the virtual clock). A read
 * cannot be interrupted: it keeps its pool thread until the pipe is
 * closed, and its result is discarded; weft_run returns only after it has
 * returned. Exits 1 unless each call returned what and when this says.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "weft.h"

#define MS WEFT_MSEC
#define NOW_MS ((long long)(weft_now() / MS))

typedef struct reply {
    int fd;          /* the read end, in blocking mode */
    char buf[16];    /* what was read */
    atomic_int done; /* read_reply has returned */
} reply;

/* The blocking call, as a synchronous client library makes it. */
static int read_reply(void *arg)
{
    reply *r = arg;
    ssize_t n = read(r->fd, r->buf, sizeof r->buf - 1);
    int rc = n < 0 ? -errno : (int)n; /* errno: this pool thread's own */
    atomic_store(&r->done, 1);
    return rc;
}

/* The other side: answers after 10 ms. A task on the same worker. */
static int server(void *arg)
{
    int rc = weft_sleep_for(10 * MS);
    if (rc == 0 && write(*(int *)arg, "pong", 4) != 4)
        rc = -EIO;
    return rc;
}

/* Static, not on the task's stack: an abandoned call outlives its caller. */
static reply quick, hung;
static int quick_pipe[2], hung_pipe[2];

static int run(void *arg)
{
    weft_scope *s;
    weft_scope_open(&s, NULL);
    weft_spawn(s, server, &quick_pipe[1]);
    int n = weft_blocking(read_reply, &quick); /* the worker runs server */
    weft_time t1 = weft_now();
    int rc1 = weft_scope_join(s);
    weft_scope_free(s);
    printf("t=%3lld ms  read %d bytes: %s\n", NOW_MS, n, quick.buf);

    int rc2 = weft_blocking_until(read_reply, &hung, weft_now() + 100 * MS);
    weft_time t2 = weft_now();
    weft_blocking_info info;
    weft_blocking_stats_get(&info); /* the abandoned read still runs */
    printf("t=%3lld ms  the hung read: %s, %d call still running\n", NOW_MS,
           weft_strerror(rc2), info.running);
    close(hung_pipe[1]); /* now it returns 0 (end of file), to nobody */

    return n == 4 && strcmp(quick.buf, "pong") == 0 && t1 == 10 * MS &&
                   rc1 == 0 && rc2 == -ETIMEDOUT && t2 == 110 * MS &&
                   info.running == 1
               ? 0
               : -1;
}

int main(void)
{
    if (pipe(quick_pipe) != 0 || pipe(hung_pipe) != 0)
        return 1;
    quick.fd = quick_pipe[0];
    hung.fd = hung_pipe[0];
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    int rc = weft_run(&cfg, run, NULL);
    int hung_done = atomic_load(&hung.done); /* weft_run waited for it */
    printf("after weft_run: the hung read has %s\n",
           hung_done ? "returned" : "NOT returned");
    close(quick_pipe[0]);
    close(quick_pipe[1]);
    close(hung_pipe[0]);
    return rc == 0 && hung_done ? 0 : 1;
}
