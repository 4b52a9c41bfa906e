/* SPDX-License-Identifier: MIT */
/*
 * spawn_await: start one task, do something else meanwhile, then wait for
 * its result (asyncio.create_task then await, a goroutine and a channel,
 * a promise awaited later, tokio::spawn and its JoinHandle).
 *
 * A page needs the user's unread count, their profile and its settings.
 * weft_future_spawn starts the count as a task and returns a future that
 * the task's status settles; weft_future_await waits for it. The count
 * (40 ms) and the settings (25 ms) overlap: both are there at 40 ms, not
 * 65. A result larger than an int (the profile) is written through arg,
 * and read once the scope's join says the task has finished.
 *
 * Then a count that takes 500 ms: the await gives up at its 100 ms
 * deadline and leaves the task running; weft_future_cancel stops it, and
 * the next await returns -ECANCELED once it has returned.
 * Exits 1 unless every result and instant is as said.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "weft.h"

#define MS WEFT_MSEC
#define NOW_MS ((long long)(weft_now() / MS))

/* Counts the user's unread messages: takes *arg ms, returns the count. */
static int count_unread(void *arg)
{
    int rc = weft_sleep_for(*(int64_t *)arg * MS); /* the remote call */
    if (rc != 0)
        return rc; /* < 0: the future is rejected with it */
    return 7;      /* >= 0: the future is resolved with this int */
}

typedef struct profile {
    int id;
    char name[16]; /* filled by fetch_profile */
} profile;

static int fetch_profile(void *arg)
{
    profile *p = arg;
    int rc = weft_sleep_for(40 * MS); /* the remote call */
    if (rc == 0)
        snprintf(p->name, sizeof p->name, "ada (%d)", p->id);
    return rc;
}

static int load_settings(void)
{
    return weft_sleep_for(25 * MS);
}

static int run(void *arg)
{
    /* An int result: through the future. */
    int64_t quick = 40;
    weft_future *unread_f;
    if (weft_future_spawn(NULL, count_unread, &quick, &unread_f) < 0)
        return -1;
    int rc1 = load_settings(); /* meanwhile: 25 ms */
    int unread = -1;
    int rc2 = weft_future_await(unread_f, &unread, WEFT_NEVER);
    weft_future_unref(unread_f);
    weft_time t1 = weft_now(); /* 40 ms: the two overlapped */
    printf("t=%3lld ms  %d unread\n", NOW_MS, unread);

    /* A larger result: through arg, read once the scope's join returns. */
    profile p = {.id = 42};
    weft_scope *s;
    weft_scope_open(&s, NULL);
    weft_spawn(s, fetch_profile, &p);
    int rc3 = load_settings();    /* meanwhile: 25 ms */
    int rc4 = weft_scope_join(s); /* 0: p is filled in */
    weft_scope_free(s);
    weft_time t2 = weft_now();
    printf("t=%3lld ms  profile: %s\n", NOW_MS, p.name);

    /* Too slow for the caller: the await gives up, the task does not. */
    int64_t slow = 500;
    weft_future *f;
    if (weft_future_spawn(NULL, count_unread, &slow, &f) < 0)
        return -1;
    int rc5 = weft_future_await(f, NULL, weft_now() + 100 * MS);
    /* -ETIMEDOUT, and the task still runs: cancel it, then wait for it. */
    weft_future_cancel(f);
    int rc6 = weft_future_await(f, NULL, WEFT_NEVER); /* -ECANCELED */
    weft_future_unref(f);
    weft_time t3 = weft_now();
    printf("t=%3lld ms  slow count: await %s, then %s\n", NOW_MS,
           weft_strerror(rc5), weft_strerror(rc6));

    return rc1 == 0 && rc2 == 0 && unread == 7 && t1 == 40 * MS && rc3 == 0 &&
                   rc4 == 0 && strcmp(p.name, "ada (42)") == 0 &&
                   t2 == 80 * MS && rc5 == -ETIMEDOUT && rc6 == -ECANCELED &&
                   t3 == 180 * MS
               ? 0
               : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
