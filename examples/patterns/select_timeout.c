/* SPDX-License-Identifier: MIT */
/*
 * select_timeout: wait for whichever comes first of several channels, a
 * descriptor, a future and a timeout (Go's select with time.After,
 * tokio::select! with sleep, asyncio.wait with a timeout).
 *
 * A watcher waits for updates, a quit signal, a command on its control
 * socket and the result of a configuration load started in the
 * background, and sends a heartbeat when no update has come for 100 ms.
 * Updates come at 50, 120 and 350 ms; the configuration is loaded at
 * 150 ms; a command arrives at 250 ms; quit is closed at 400 ms.
 * weft_select takes an absolute deadline, renewed after each update; when
 * it passes, it returns -ETIMEDOUT and no case happened: nothing was taken
 * from any channel (cancel-safe), so no update is ever lost to a timeout.
 * A closed channel is ready at once, with rc -EPIPE: closing is how to
 * broadcast "stop" to any number of watchers. A case whose object is NULL
 * (or whose fd is negative) is switched off. Exits 1 unless the events
 * came in this order at these instants.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "weft.h"

#define MS WEFT_MSEC
#define NOW_MS ((long long)(weft_now() / MS))

typedef struct feeds {
    weft_chan *updates, *quit;
    weft_future *config; /* an int: the configuration's version */
    int control[2];      /* the watcher reads control[0] */
} feeds;

static int source(void *arg)
{
    feeds *f = arg;
    const int64_t at[] = {50, 120, 350};
    for (int i = 0; i < 3; i++) {
        weft_sleep_until(at[i] * MS);
        int update = i + 1;
        weft_chan_send(f->updates, &update);
    }
    weft_sleep_until(400 * MS);
    return weft_chan_close(f->quit);
}

static int load_config(void *arg)
{
    feeds *f = arg;
    weft_sleep_until(150 * MS);
    int version = 7;
    return weft_future_resolve(f->config, &version);
}

static int operator(void *arg)
{
    feeds *f = arg;
    weft_sleep_until(250 * MS);
    return write(f->control[1], "status\n", 7) == 7 ? 0 : -EIO;
}

static int watch(void *arg)
{
    feeds *f = arg;
    int update, version;
    char stop;
    weft_case cases[] = {
        {.chan = f->updates, .op = WEFT_OP_RECV, .elem = &update},
        {.chan = f->quit, .op = WEFT_OP_RECV, .elem = &stop},
        {.op = WEFT_OP_READ, .fd = f->control[0]},
        {.op = WEFT_OP_FUTURE, .future = f->config, .elem = &version},
    };
    char seen[12] = ""; /* u: update, h: heartbeat, c: command,
                         * v: configuration, q: quit */
    weft_time at[12];
    int n = 0;
    weft_time deadline = weft_now() + 100 * MS;
    while (n < 11) {
        int i = weft_select(cases, 4, deadline);
        char what = 'q';
        if (i == 0) {
            printf("t=%3lld ms  update %d\n", NOW_MS, update);
            deadline = weft_now() + 100 * MS; /* heard from it: renew */
            what = 'u';
        } else if (i == -ETIMEDOUT) {
            printf("t=%3lld ms  quiet for 100 ms: heartbeat\n", NOW_MS);
            deadline += 100 * MS;
            what = 'h';
        } else if (i == 2) {
            char cmd[16];
            ssize_t got = read(f->control[0], cmd, sizeof cmd - 1);
            cmd[got > 0 ? got - 1 : 0] = '\0';
            printf("t=%3lld ms  command '%s'\n", NOW_MS, cmd);
            what = 'c';
        } else if (i == 3) {
            printf("t=%3lld ms  configuration v%d loaded\n", NOW_MS, version);
            cases[3].future = NULL; /* settled for good: switch it off */
            what = 'v';
        } else { /* i == 1, rc -EPIPE: quit was closed (or an error) */
            printf("t=%3lld ms  quit\n", NOW_MS);
        }
        at[n] = weft_now();
        seen[n++] = what;
        if (what == 'q')
            break;
    }
    const int64_t want[] = {50, 120, 150, 220, 250, 320, 350, 400};
    int ok = strcmp(seen, "uuvhchuq") == 0 && version == 7;
    for (int k = 0; k < 8 && ok; k++)
        ok = at[k] == want[k] * MS;
    return ok ? 0 : -1;
}

static int run(void *arg)
{
    (void)arg;
    feeds f;
    weft_scope *s;
    weft_chan_new(&f.updates, sizeof(int), 0);
    weft_chan_new(&f.quit, 1, 0);
    weft_future_new(&f.config, sizeof(int));
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, f.control))
        return -errno;
    weft_scope_open(&s, NULL);
    weft_spawn(s, source, &f);
    weft_spawn(s, load_config, &f);
    weft_spawn(s, operator, & f);
    weft_spawn(s, watch, &f);
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    weft_chan_unref(f.updates);
    weft_chan_unref(f.quit);
    weft_future_unref(f.config);
    weft_close(f.control[0]);
    weft_close(f.control[1]);
    return rc;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
