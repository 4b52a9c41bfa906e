/* SPDX-License-Identifier: MIT */
/*
 * A program written against weft 0.2's names, kept as it was: it must
 * still build (each old name warns, -Wdeprecated-declarations, naming its
 * replacement) and run as before until 0.4 removes the names. Among them
 * are calls whose parameters moved in 0.3 (weft_with_timeout,
 * weft_with_fallback, weft_gather, weft_map): the old order must still
 * mean what it meant. scripts/header-check.sh checks the warnings;
 * ctest runs it (compat_v02). Exits 0 when every check holds.
 */
#include <errno.h>
#include <stdio.h>

#include "weft.h"

static int failures;
#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "v02.c:%d: %s\n", __LINE__, #cond);                \
            failures++;                                                        \
        }                                                                      \
    } while (0)

static int sleepy(void *arg)
{
    return weft_sleep(*(int64_t *)arg) == 0 ? 7 : -ECANCELED;
}

static int fails(void *arg)
{
    (void)arg;
    return -EIO;
}

static int fallback(void *arg)
{
    return *(int *)arg;
}

static int square(void *arg)
{
    int *x = arg;
    *x = *x * *x;
    return 0;
}

static int stop_at_once(void *state, weft_actor_msg *m)
{
    (void)state;
    (void)m;
    return WEFT_ACTOR_STOP;
}

static int child(void *arg)
{
    (void)arg;
    return weft_sleep_until(WEFT_NEVER) == -ECANCELED ? 0 : -EIO;
}

static int once_fn(void *arg)
{
    (void)arg;
    return 0;
}

static int root(void *arg)
{
    (void)arg;
    weft_time t0 = weft_now();

    /* Renamed, same parameters. */
    CHECK(weft_sleep(5 * WEFT_MSEC) == 0);
    CHECK(weft_now() - t0 == 5 * WEFT_MSEC);

    weft_mutex m = WEFT_MUTEX_INIT;
    CHECK(weft_mutex_trylock(&m) == 0);
    CHECK(weft_mutex_trylock(&m) == -EBUSY);
    CHECK(weft_mutex_unlock(&m) == 0);

    weft_rwlock l = WEFT_RWLOCK_INIT;
    CHECK(weft_rwlock_tryrdlock(&l) == 0);
    CHECK(weft_rwlock_trywrlock(&l) == -EBUSY);
    CHECK(weft_rwlock_rdunlock(&l) == 0);

    weft_future *f;
    CHECK(weft_future_new(&f, sizeof(int)) == 0);
    int v = 0, forty_two = 42;
    CHECK(weft_future_try(f, &v) == -EINPROGRESS);
    CHECK(weft_future_resolve(f, &forty_two) == 0);
    CHECK(weft_future_try(f, &v) == 0 && v == 42);
    weft_future_unref(f);

    weft_limiter *lim;
    CHECK(weft_limiter_new(&lim, 1, WEFT_SEC, 1) == 0);
    CHECK(weft_limiter_try(lim, 1) == 0);
    CHECK(weft_limiter_try(lim, 1) == -EAGAIN);
    weft_limiter_free(lim);

    weft_once o = WEFT_ONCE_INIT;
    CHECK(weft_once_done(&o) == 0);
    CHECK(weft_once_do(&o, once_fn, NULL) == 0);
    CHECK(weft_once_done(&o) == 1);

    weft_blocking_info bi;
    CHECK(weft_blocking_stats(&bi) == 0);

    weft_task_handle h;
    weft_spawn_ex(NULL, child, NULL, &(weft_spawn_opts){.handle = &h});
    CHECK(weft_task_cancel(h) == 0);
    CHECK(weft_task_release(h) == 0);

    weft_actor *a;
    weft_actor_opts ao = {.fn = stop_at_once, .msg_size = 1, .capacity = 1};
    CHECK(weft_actor_spawn(NULL, &ao, &a) == 0);
    char byte = 1;
    CHECK(weft_actor_tell(a, &byte, WEFT_NEVER) == 0);
    int status = -1;
    CHECK(weft_actor_wait(a, &status, WEFT_NEVER) == 0 && status == 0);
    weft_actor_unref(a);

    weft_sup *sup;
    weft_child_spec spec = {.name = "c", .start = child};
    CHECK(weft_sup_spawn(NULL, &(weft_sup_opts){0}, &spec, 1, &sup) == 0);
    CHECK(weft_sleep(WEFT_MSEC) == 0);
    int running = -1;
    long restarts = -1;
    CHECK(weft_sup_counts(sup, &running, &restarts) == 0);
    CHECK(running == 1 && restarts == 0);
    CHECK(weft_sup_counts(NULL, NULL, NULL) == -EINVAL);
    CHECK(weft_sup_stop(sup) == 0);
    CHECK(weft_sup_wait(sup, &status, WEFT_NEVER) == 0 && status == 0);
    CHECK(weft_sup_free(sup) == 0);

    /* Parameters that moved: 0.2's order. */
    int64_t short_nap = WEFT_MSEC, long_nap = WEFT_SEC;
    CHECK(weft_with_timeout(10 * WEFT_MSEC, sleepy, &short_nap) == 7);
    CHECK(weft_with_timeout(10 * WEFT_MSEC, sleepy, &long_nap) == -ETIMEDOUT);
    int cached = 99;
    CHECK(weft_with_fallback(10 * WEFT_MSEC, fails, NULL, fallback, &cached) ==
          99);

    weft_fn fns[2] = {fails, sleepy};
    void *args[2] = {NULL, &short_nap};
    int st[2], winner = -1;
    CHECK(weft_gather(WEFT_FIRST, WEFT_NEVER, 2, fns, args, st, &winner) == 0);
    CHECK(winner == 1 && st[0] == -EIO && st[1] == 7);

    int items[4] = {1, 2, 3, 4}, ist[4];
    CHECK(weft_map(4, 2, square, items, sizeof items[0], WEFT_COLLECT,
                   WEFT_NEVER, ist) == 0);
    CHECK(items[0] == 1 && items[1] == 4 && items[2] == 9 && items[3] == 16);

    CHECK(weft_shutdown_deadline(WEFT_NEVER) == 0);
    return failures ? -EIO : 0;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    int rc = weft_run(&cfg, root, NULL);
    if (rc != 0 || failures) {
        fprintf(stderr, "v02: %d check(s) failed, weft_run returned %d\n",
                failures, rc);
        return 1;
    }
    puts("v02: every 0.2 name still works");
    return 0;
}
