/* SPDX-License-Identifier: MIT */
/*
 * gather: run several calls at once and combine their results: all,
 * all-settled, any, race (asyncio.gather, Promise.all / allSettled / any /
 * race, errgroup, futures::join_all / select_ok / select_all).
 *
 * Three mirrors serve the same file: A in 80 ms, B in 30 ms, and C fails
 * after 10 ms. weft_gather_tasks runs them as tasks of one scope whose policy
 * says how they combine, and returns once every task has finished: the
 * losers of a race are cancelled, not left running.
 *   all (WEFT_FAIL_FAST)      the first failure: C's, at 10 ms
 *   all-settled (WEFT_COLLECT) every status, at 80 ms
 *   any (WEFT_FIRST)          the first success: B, at 30 ms
 *   race (WEFT_RACE)          the first to finish: C (a failure), at 10 ms
 * The same over futures (weft_future_any and friends) suits results that
 * come from elsewhere, such as a callback. Exits 1 unless every result,
 * winner and instant is as listed.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "weft.h"

#define MS WEFT_MSEC

typedef struct mirror {
    int64_t ms;
    int fails;
} mirror;

static mirror mirrors[] = {{80, 0}, {30, 0}, {10, 1}}; /* A, B, C */

static int download(void *arg)
{
    mirror *m = arg;
    int rc = weft_sleep_for(m->ms * MS);
    return rc == 0 && m->fails ? -ECONNREFUSED : rc;
}

/* A status in one letter: o(k), c(ancelled), r(efused). */
static char letter(int rc)
{
    return rc == 0 ? 'o' : rc == -ECANCELED ? 'c' : 'r';
}

typedef struct expect {
    const char *name;
    weft_policy policy;
    int rc, winner, ms;
    const char *statuses; /* of A, B, C */
} expect;

static int run(void *arg)
{
    const weft_fn fns[] = {download, download, download};
    void *const args[] = {&mirrors[0], &mirrors[1], &mirrors[2]};
    const expect cases[] = {
        {"all", WEFT_FAIL_FAST, -ECONNREFUSED, -1, 10, "ccr"},
        {"all-settled", WEFT_COLLECT, 0, -1, 80, "oor"},
        {"any", WEFT_FIRST, 0, 1, 30, "cor"},
        {"race", WEFT_RACE, -ECONNREFUSED, 2, 10, "ccr"},
    };
    int ok = 1;
    printf("mirrors A (80 ms), B (30 ms), C (fails at 10 ms); "
           "o: ok, c: cancelled, r: refused\n");
    for (int i = 0; i < 4; i++) {
        const expect *e = &cases[i];
        int st[3], winner;
        weft_time start = weft_now();
        int rc =
            weft_gather_tasks(e->policy, 3, fns, args, st, &winner, WEFT_NEVER);
        int64_t ms = (weft_now() - start) / MS;
        char got[4] = {letter(st[0]), letter(st[1]), letter(st[2]), 0};
        printf("%-11s %-18s after %2lld ms, winner %2d, A B C: %s\n", e->name,
               weft_strerror(rc), (long long)ms, winner, got);
        ok &= rc == e->rc && winner == e->winner && ms == e->ms &&
              strcmp(got, e->statuses) == 0;
    }

    /* any over futures: start now, combine later. A collect scope, so that
     * C's failure does not cancel its siblings (the combinator decides). */
    weft_scope *s;
    weft_future *fs[3];
    weft_time start = weft_now();
    weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_COLLECT});
    for (int i = 0; i < 3; i++)
        weft_future_spawn(s, download, &mirrors[i], &fs[i]);
    int first = weft_future_any(fs, 3, WEFT_NEVER); /* cancels the others */
    int64_t ms = (weft_now() - start) / MS;
    weft_scope_join(s);
    weft_scope_free(s);
    for (int i = 0; i < 3; i++)
        weft_future_unref(fs[i]);
    printf("weft_future_any: future %d, after %lld ms\n", first, (long long)ms);
    return ok && first == 1 && ms == 30 ? 0 : -1;
}

int main(void)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    return weft_run(&cfg, run, NULL) == 0 ? 0 : 1;
}
