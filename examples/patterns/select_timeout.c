/* SPDX-License-Identifier: MIT */
/*
 * select_timeout: wait on several channels at once, with a timeout (Go's
 * select with time.After, tokio::select! with sleep, asyncio.wait with a
 * timeout).
 *
 * A watcher waits for updates or a quit signal, and sends a heartbeat
 * when nothing has happened for 100 ms. Updates come at 50, 120 and
 * 350 ms; quit is closed at 400 ms. weft_select takes an absolute
 * deadline, renewed after each update; when it passes, it returns
 * -ETIMEDOUT and no case happened: nothing was taken from any channel
 * (cancel-safe), so no update is ever lost to a timeout.
 * A closed channel is ready at once, with rc -EPIPE: closing is how to
 * broadcast "stop" to any number of watchers. Exits 1 unless the events
 * came in this order at these instants.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "weft.h"

#define MS WEFT_MSEC
#define NOW_MS ((long long)(weft_now() / MS))

typedef struct feeds {
    weft_chan *updates, *quit;
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

static int watch(void *arg)
{
    feeds *f = arg;
    int update;
    char stop;
    weft_case cases[] = {
        {.chan = f->updates, .op = WEFT_OP_RECV, .elem = &update},
        {.chan = f->quit, .op = WEFT_OP_RECV, .elem = &stop},
    };
    char seen[8] = ""; /* u: update, h: heartbeat, q: quit */
    weft_time at[8];
    int n = 0;
    weft_time deadline = weft_now() + 100 * MS;
    while (n < 7) {
        int i = weft_select(cases, 2, deadline);
        if (i == 0) {
            printf("t=%3lld ms  update %d\n", NOW_MS, update);
            deadline = weft_now() + 100 * MS; /* heard from it: renew */
        } else if (i == -ETIMEDOUT) {
            printf("t=%3lld ms  quiet for 100 ms: heartbeat\n", NOW_MS);
            deadline += 100 * MS;
        } else { /* i == 1, rc -EPIPE: quit was closed (or an error) */
            printf("t=%3lld ms  quit\n", NOW_MS);
        }
        at[n] = weft_now();
        seen[n++] = i == 0 ? 'u' : i == -ETIMEDOUT ? 'h' : 'q';
        if (seen[n - 1] == 'q')
            break;
    }
    const int64_t want[] = {50, 120, 220, 320, 350, 400};
    int ok = strcmp(seen, "uuhhuq") == 0;
    for (int k = 0; k < 6 && ok; k++)
        ok = at[k] == want[k] * MS;
    return ok ? 0 : -1;
}

static int run(void *arg)
{
    feeds f;
    weft_scope *s;
    weft_chan_new(&f.updates, sizeof(int), 0);
    weft_chan_new(&f.quit, 1, 0);
    weft_scope_open(&s, NULL);
    weft_spawn(s, source, &f);
    weft_spawn(s, watch, &f);
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    weft_chan_unref(f.updates);
    weft_chan_unref(f.quit);
    return rc;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
