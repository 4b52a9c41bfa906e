/* SPDX-License-Identifier: MIT */
/*
 * Scopes: structured concurrency, policies, cancellation, deadlines,
 * shields and misuse. Times are exact: every test that measures time runs
 * on the virtual clock.
 */
#include "t.h"
#include "weft.h"

#include "scope/cases.h"
#include "scope/struct.h" /* weft__scope_footprint, weft__scope_status_cap */
#include "wait/many.h"
#include "wait/seen.h"
#include "wait/wake.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

static weft_scope *open_scope(weft_policy policy, weft_time deadline,
                              int shield)
{
    weft_scope *s = NULL;
    weft_scope_opts o = {
        .policy = policy, .deadline = deadline, .shield = shield};
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    ASSERT(s != NULL);
    ASSERT(weft_scope_current() == s);
    return s;
}

/* A child that sleeps, records what its sleep returned and when, then
 * returns the sleep's error or, if it slept in full, `ret`. */
struct kid {
    int64_t sleep; /* how long to sleep */
    int ret;       /* status to return after a full sleep */
    int got;       /* what weft_sleep_for returned */
    weft_time at;  /* weft_now() when it returned */
    int done;
};

static int kid_fn(void *arg)
{
    struct kid *k = arg;
    k->got = weft_sleep_for(k->sleep);
    k->at = weft_now();
    k->done = 1;
    return k->got ? k->got : k->ret;
}

static void spawn_kids(weft_scope *s, struct kid *k, int n)
{
    for (int i = 0; i < n; i++)
        ASSERT_EQ(weft_spawn(s, kid_fn, &k[i]), i);
    ASSERT_EQ(weft_scope_spawned(s), n);
}

/* ---- deadlines ------------------------------------------------------- */

static struct kid dl_kids[3];

static int deadline_root(void *arg)
{
    (void)arg;
    dl_kids[0] = (struct kid){.sleep = 1 * WEFT_SEC};
    dl_kids[1] = (struct kid){.sleep = 10 * WEFT_SEC};
    dl_kids[2] = (struct kid){.sleep = 20 * WEFT_SEC};
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 5 * WEFT_SEC, 0);
    spawn_kids(s, dl_kids, 3);
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 5 * WEFT_SEC);
    ASSERT(weft_scope_cancelled(s));
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT(weft_scope_current() != s);
    /* The root's own scope is not cancelled by the child scope's deadline */
    ASSERT_EQ(weft_cancelled(), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    return 0;
}

TEST(deadline_cancels_children_at_exactly_t)
{
    ASSERT_EQ(t_run_virtual(1, deadline_root, NULL), 0);
    ASSERT_EQ(dl_kids[0].got, 0);
    ASSERT_EQ(dl_kids[0].at, 1 * WEFT_SEC);
    for (int i = 1; i < 3; i++) {
        ASSERT_EQ(dl_kids[i].got, -ECANCELED);
        ASSERT_EQ(dl_kids[i].at, 5 * WEFT_SEC);
    }
}

/* The owner blocked in join is woken when the deadline passes even if it
 * has no child at all. */
static int deadline_empty_root(void *arg)
{
    (void)arg;
    weft_scope *s = open_scope(WEFT_COLLECT, 2 * WEFT_SEC, 0);
    ASSERT_EQ(weft_sleep_for(5 * WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(deadline_cancels_owner_sleep)
{
    ASSERT_EQ(t_run_virtual(1, deadline_empty_root, NULL), 0);
}

/* An inner deadline earlier than the outer one; then an inner deadline
 * later than the outer one (the outer's cancellation reaches in). */
static struct kid nd_kids[2];

static int nested_deadline_root(void *arg)
{
    (void)arg;
    nd_kids[0] = (struct kid){.sleep = 10 * WEFT_SEC};
    nd_kids[1] = (struct kid){.sleep = 10 * WEFT_SEC};
    weft_scope *outer = open_scope(WEFT_FAIL_FAST, 10 * WEFT_SEC, 0);
    weft_scope *inner = open_scope(WEFT_FAIL_FAST, 3 * WEFT_SEC, 0);
    ASSERT_EQ(weft_spawn(inner, kid_fn, &nd_kids[0]), 0);
    ASSERT_EQ(weft_scope_join(inner), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(inner), 0);
    ASSERT(weft_scope_current() == outer);
    ASSERT(!weft_scope_cancelled(outer));

    inner = open_scope(WEFT_FAIL_FAST, 50 * WEFT_SEC, 0);
    ASSERT_EQ(weft_spawn(inner, kid_fn, &nd_kids[1]), 0);
    ASSERT_EQ(weft_scope_join(inner), -ECANCELED); /* outer's deadline */
    ASSERT_EQ(weft_now(), 10 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(inner), 0);
    ASSERT_EQ(weft_scope_join(outer), -ETIMEDOUT);
    ASSERT_EQ(weft_scope_free(outer), 0);
    return 0;
}

TEST(nested_deadlines)
{
    ASSERT_EQ(t_run_virtual(1, nested_deadline_root, NULL), 0);
    ASSERT_EQ(nd_kids[0].got, -ECANCELED);
    ASSERT_EQ(nd_kids[0].at, 3 * WEFT_SEC);
    ASSERT_EQ(nd_kids[1].got, -ECANCELED);
    ASSERT_EQ(nd_kids[1].at, 10 * WEFT_SEC);
}

static struct kid sd_kids[2];

static int set_deadline_root(void *arg)
{
    (void)arg;
    sd_kids[0] = (struct kid){.sleep = 10 * WEFT_SEC};
    sd_kids[1] = (struct kid){.sleep = 10 * WEFT_SEC};
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 8 * WEFT_SEC, 0);
    spawn_kids(s, sd_kids, 1);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    /* Move it earlier, then later again, then earlier: the last wins. */
    ASSERT_EQ(weft_scope_set_deadline(s, 2 * WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_set_deadline(s, WEFT_NEVER), 0);
    ASSERT_EQ(weft_scope_set_deadline(s, 4 * WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 4 * WEFT_SEC);
    ASSERT_EQ(weft_scope_set_deadline(s, 9 * WEFT_SEC), -ESHUTDOWN);
    ASSERT_EQ(weft_scope_free(s), 0);

    /* A deadline already past cancels at once. */
    s = open_scope(WEFT_FAIL_FAST, 0, 0);
    spawn_kids(s, &sd_kids[1], 1);
    ASSERT_EQ(weft_scope_set_deadline(s, weft_now() - 1), 0);
    ASSERT(weft_scope_cancelled(s));
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 4 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_scope_set_deadline(NULL, WEFT_SEC), -EINVAL);
    return 0;
}

TEST(set_deadline_moves_and_past_deadline_cancels)
{
    ASSERT_EQ(t_run_virtual(1, set_deadline_root, NULL), 0);
    ASSERT_EQ(sd_kids[0].at, 4 * WEFT_SEC);
    ASSERT_EQ(sd_kids[0].got, -ECANCELED);
    ASSERT_EQ(sd_kids[1].at, 4 * WEFT_SEC);
    ASSERT_EQ(sd_kids[1].got, -ECANCELED);
}

/* weft_scope_set_deadline takes an absolute time, and only WEFT_NEVER means
 * none: 0 is an instant long past (as for every deadline argument), so it
 * cancels at once instead of dropping the deadline the scope had. */
static struct kid zd_kid;

static int set_deadline_zero_root(void *arg)
{
    (void)arg;
    zd_kid = (struct kid){.sleep = 10 * WEFT_SEC};
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 5 * WEFT_SEC, 0);
    spawn_kids(s, &zd_kid, 1);
    ASSERT_EQ(weft_scope_set_deadline(s, 0), 0);
    ASSERT(weft_scope_cancelled(s));
    ASSERT_EQ(weft_deadline(), 0);
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(set_deadline_zero_is_past_not_none)
{
    ASSERT_EQ(t_run_virtual(1, set_deadline_zero_root, NULL), 0);
    ASSERT_EQ(zd_kid.got, -ECANCELED);
    ASSERT_EQ(zd_kid.at, WEFT_SEC);
}

/* ---- policies ---------------------------------------------------------- */

static struct kid ff_kids[4];

static int fail_fast_root(void *arg)
{
    (void)arg;
    ff_kids[0] = (struct kid){.sleep = 1 * WEFT_SEC, .ret = 0};
    ff_kids[1] = (struct kid){.sleep = 2 * WEFT_SEC, .ret = -EIO};
    ff_kids[2] = (struct kid){.sleep = 3 * WEFT_SEC, .ret = -ENOENT};
    ff_kids[3] = (struct kid){.sleep = 5 * WEFT_SEC, .ret = 0};
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 0, 0);
    spawn_kids(s, ff_kids, 4);
    ASSERT_EQ(weft_scope_join(s), -EIO);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);
    ASSERT(weft_scope_cancelled(s));
    ASSERT_EQ(weft_scope_failed(s), 3); /* -EIO and two -ECANCELED */
    ASSERT_EQ(weft_scope_spawned(s), 4);
    int st = 12345;
    ASSERT_EQ(weft_scope_status(s, 0, &st), -ENODATA);
    ASSERT_EQ(weft_scope_status(s, 1, &st), -ENODATA);
    ASSERT_EQ(st, 12345);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(fail_fast_first_error_cancels_siblings)
{
    ASSERT_EQ(t_run_virtual(1, fail_fast_root, NULL), 0);
    ASSERT_EQ(ff_kids[0].got, 0);
    ASSERT_EQ(ff_kids[0].at, 1 * WEFT_SEC);
    ASSERT_EQ(ff_kids[1].got, 0);
    ASSERT_EQ(ff_kids[1].at, 2 * WEFT_SEC);
    for (int i = 2; i < 4; i++) {
        ASSERT_EQ(ff_kids[i].got, -ECANCELED);
        ASSERT_EQ(ff_kids[i].at, 2 * WEFT_SEC);
    }
}

/* "First" is by time, not by spawn index. */
static struct kid ff2_kids[3];

static int fail_fast_by_time_root(void *arg)
{
    (void)arg;
    ff2_kids[0] = (struct kid){.sleep = 3 * WEFT_SEC, .ret = -ENOENT};
    ff2_kids[1] = (struct kid){.sleep = 2 * WEFT_SEC, .ret = -EPIPE};
    ff2_kids[2] = (struct kid){.sleep = 1 * WEFT_SEC, .ret = -EIO};
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 0, 0);
    spawn_kids(s, ff2_kids, 3);
    ASSERT_EQ(weft_scope_join(s), -EIO);
    ASSERT_EQ(weft_now(), 1 * WEFT_SEC);
    ASSERT_EQ(weft_scope_failed(s), 3);
    ASSERT_EQ(weft_scope_free(s), 0);

    /* All succeed: 0, nothing failed, nothing cancelled. */
    struct kid ok[3] = {{.sleep = 1}, {.sleep = 2}, {.sleep = 3}};
    s = open_scope(WEFT_FAIL_FAST, 0, 0);
    spawn_kids(s, ok, 3);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_failed(s), 0);
    ASSERT(!weft_scope_cancelled(s));
    ASSERT_EQ(weft_scope_free(s), 0);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(ok[i].got, 0);
    return 0;
}

TEST(fail_fast_first_error_is_by_time)
{
    ASSERT_EQ(t_run_virtual(1, fail_fast_by_time_root, NULL), 0);
    ASSERT_EQ(ff2_kids[0].got, -ECANCELED);
    ASSERT_EQ(ff2_kids[1].got, -ECANCELED);
    ASSERT_EQ(ff2_kids[2].got, 0);
}

/* A fail-fast error before the deadline wins over the deadline. */
static int fail_fast_beats_deadline_root(void *arg)
{
    (void)arg;
    struct kid k[2] = {{.sleep = 1 * WEFT_SEC, .ret = -EIO},
                       {.sleep = 10 * WEFT_SEC}};
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 5 * WEFT_SEC, 0);
    spawn_kids(s, k, 2);
    ASSERT_EQ(weft_sleep_for(7 * WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_now(), 1 * WEFT_SEC);
    ASSERT_EQ(weft_scope_join(s), -EIO);
    ASSERT_EQ(weft_now(), 1 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(k[1].got, -ECANCELED);
    return 0;
}

TEST(fail_fast_error_beats_later_deadline)
{
    ASSERT_EQ(t_run_virtual(1, fail_fast_beats_deadline_root, NULL), 0);
}

static int collect_root(void *arg)
{
    (void)arg;
    struct kid k[5] = {
        {.sleep = 1 * WEFT_SEC, .ret = 0},
        {.sleep = 2 * WEFT_SEC, .ret = -EIO},
        {.sleep = 5 * WEFT_SEC, .ret = 0},
        {.sleep = 3 * WEFT_SEC, .ret = -ENOENT},
        {.sleep = 4 * WEFT_SEC, .ret = -EPIPE},
    };
    weft_scope *s = open_scope(WEFT_COLLECT, 0, 0);
    spawn_kids(s, k, 5);
    int st;
    ASSERT_EQ(weft_scope_status(s, 0, &st), -EAGAIN);
    ASSERT_EQ(weft_sleep_for(2500 * WEFT_MSEC), 0); /* not cancelled */
    ASSERT_EQ(weft_scope_status(s, 0, &st), 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(weft_scope_status(s, 1, &st), 0);
    ASSERT_EQ(st, -EIO);
    ASSERT_EQ(weft_scope_status(s, 2, &st), -EAGAIN);
    ASSERT_EQ(weft_scope_failed(s), 1);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_now(), 5 * WEFT_SEC); /* every child ran to the end */
    ASSERT(!weft_scope_cancelled(s));
    ASSERT_EQ(weft_scope_failed(s), 3);
    ASSERT_EQ(weft_scope_spawned(s), 5);
    int want[5] = {0, -EIO, 0, -ENOENT, -EPIPE};
    for (int i = 0; i < 5; i++) {
        st = 999;
        ASSERT_EQ(weft_scope_status(s, i, &st), 0);
        ASSERT_EQ(st, want[i]);
        ASSERT_EQ(k[i].got, 0);
        ASSERT_EQ(k[i].at, k[i].sleep);
    }
    ASSERT_EQ(weft_scope_status(s, 5, &st), -ENOENT);
    ASSERT_EQ(weft_scope_status(s, -1, &st), -ENOENT);
    ASSERT_EQ(weft_scope_status(s, 1000000, &st), -ENOENT);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(collect_keeps_every_status)
{
    ASSERT_EQ(t_run_virtual(1, collect_root, NULL), 0);
}

/* Collect with a deadline: unfinished children are cancelled and join
 * reports the timeout; finished statuses are kept. */
static int collect_deadline_root(void *arg)
{
    (void)arg;
    struct kid k[2] = {{.sleep = 1 * WEFT_SEC, .ret = -EIO},
                       {.sleep = 9 * WEFT_SEC}};
    weft_scope *s = open_scope(WEFT_COLLECT, 3 * WEFT_SEC, 0);
    spawn_kids(s, k, 2);
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    int st;
    ASSERT_EQ(weft_scope_status(s, 0, &st), 0);
    ASSERT_EQ(st, -EIO);
    ASSERT_EQ(weft_scope_status(s, 1, &st), 0);
    ASSERT_EQ(st, -ECANCELED);
    ASSERT_EQ(weft_scope_failed(s), 2);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(collect_with_deadline)
{
    ASSERT_EQ(t_run_virtual(1, collect_deadline_root, NULL), 0);
}

static int first_root(void *arg)
{
    (void)arg;
    struct kid k[4] = {
        {.sleep = 1 * WEFT_SEC, .ret = -EIO},
        {.sleep = 2 * WEFT_SEC, .ret = 0},
        {.sleep = 5 * WEFT_SEC, .ret = 0},
        {.sleep = 3 * WEFT_SEC, .ret = 0},
    };
    weft_scope *s = open_scope(WEFT_FIRST, 0, 0);
    ASSERT_EQ(weft_scope_winner(s), -ENOENT);
    spawn_kids(s, k, 4);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);
    ASSERT_EQ(weft_scope_winner(s), 1);
    ASSERT(weft_scope_cancelled(s));
    int st;
    ASSERT_EQ(weft_scope_status(s, 0, &st), 0);
    ASSERT_EQ(st, -EIO);
    ASSERT_EQ(weft_scope_status(s, 1, &st), 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(weft_scope_status(s, 2, &st), 0);
    ASSERT_EQ(st, -ECANCELED);
    ASSERT_EQ(weft_scope_status(s, 3, &st), 0);
    ASSERT_EQ(st, -ECANCELED);
    ASSERT_EQ(weft_scope_status(s, 4, &st), -ENOENT);
    ASSERT_EQ(weft_scope_failed(s), 3);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(k[2].at, 2 * WEFT_SEC);
    ASSERT_EQ(k[3].at, 2 * WEFT_SEC);
    return 0;
}

TEST(first_winner_and_losers_cancelled)
{
    ASSERT_EQ(t_run_virtual(1, first_root, NULL), 0);
}

static int first_all_fail_root(void *arg)
{
    (void)arg;
    struct kid k[3] = {
        {.sleep = 3 * WEFT_SEC, .ret = -ENOENT},
        {.sleep = 1 * WEFT_SEC, .ret = -EIO},
        {.sleep = 2 * WEFT_SEC, .ret = -EPIPE},
    };
    weft_scope *s = open_scope(WEFT_FIRST, 0, 0);
    spawn_kids(s, k, 3);
    ASSERT_EQ(weft_scope_join(s), -EIO);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC); /* failures cancel nobody */
    ASSERT_EQ(weft_scope_winner(s), -ENOENT);
    ASSERT_EQ(weft_scope_failed(s), 3);
    int want[3] = {-ENOENT, -EIO, -EPIPE};
    for (int i = 0; i < 3; i++) {
        int st;
        ASSERT_EQ(weft_scope_status(s, i, &st), 0);
        ASSERT_EQ(st, want[i]);
        ASSERT_EQ(k[i].got, 0);
    }
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(first_all_fail_returns_first_failure)
{
    ASSERT_EQ(t_run_virtual(1, first_all_fail_root, NULL), 0);
}

/* A winner before the deadline: join returns 0, not -ETIMEDOUT. */
static int first_beats_deadline_root(void *arg)
{
    (void)arg;
    struct kid k[2] = {{.sleep = 1 * WEFT_SEC}, {.sleep = 10 * WEFT_SEC}};
    weft_scope *s = open_scope(WEFT_FIRST, 4 * WEFT_SEC, 0);
    spawn_kids(s, k, 2);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_winner(s), 0);
    ASSERT_EQ(weft_now(), 1 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(s), 0);
    /* No winner by the deadline: -ETIMEDOUT. */
    struct kid k2[2] = {{.sleep = 1 * WEFT_SEC, .ret = -EIO},
                        {.sleep = 10 * WEFT_SEC}};
    s = open_scope(WEFT_FIRST, 4 * WEFT_SEC, 0);
    spawn_kids(s, k2, 2);
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    ASSERT_EQ(weft_scope_winner(s), -ENOENT);
    ASSERT_EQ(weft_now(), 4 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(first_with_deadline)
{
    ASSERT_EQ(t_run_virtual(1, first_beats_deadline_root, NULL), 0);
}

/* WEFT_RACE: the first child to finish wins, even with a failure; join
 * returns its status (positive ones too) and the rest are cancelled. */
static int race_root(void *arg)
{
    (void)arg;
    struct kid k[3] = {
        {.sleep = 3 * WEFT_SEC, .ret = 0},
        {.sleep = 1 * WEFT_SEC, .ret = -EIO},
        {.sleep = 2 * WEFT_SEC, .ret = 0},
    };
    weft_scope *s = open_scope(WEFT_RACE, 0, 0);
    ASSERT_EQ(weft_scope_winner(s), -ENOENT);
    spawn_kids(s, k, 3);
    ASSERT_EQ(weft_scope_join(s), -EIO);
    ASSERT_EQ(weft_now(), 1 * WEFT_SEC);
    ASSERT_EQ(weft_scope_winner(s), 1);
    int want[3] = {-ECANCELED, -EIO, -ECANCELED};
    for (int i = 0; i < 3; i++) {
        int st;
        ASSERT_EQ(weft_scope_status(s, i, &st), 0);
        ASSERT_EQ(st, want[i]);
    }
    ASSERT_EQ(k[0].at, 1 * WEFT_SEC);
    ASSERT_EQ(k[2].at, 1 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(s), 0);

    struct kid k2[2] = {{.sleep = 2 * WEFT_SEC, .ret = -EIO},
                        {.sleep = 1 * WEFT_SEC, .ret = 7}};
    s = open_scope(WEFT_RACE, 0, 0);
    spawn_kids(s, k2, 2);
    ASSERT_EQ(weft_scope_join(s), 7);
    ASSERT_EQ(weft_scope_winner(s), 1);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(s), 0);

    /* Nobody finishes by the deadline: -ETIMEDOUT, no winner. */
    struct kid k3[2] = {{.sleep = 5 * WEFT_SEC}, {.sleep = 6 * WEFT_SEC}};
    s = open_scope(WEFT_RACE, 4 * WEFT_SEC, 0);
    spawn_kids(s, k3, 2);
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    ASSERT_EQ(weft_scope_winner(s), -ENOENT);
    ASSERT_EQ(weft_now(), 4 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(s), 0);

    /* No child at all. */
    s = open_scope(WEFT_RACE, 0, 0);
    ASSERT_EQ(weft_scope_join(s), -ENOENT);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(race_first_to_finish_wins)
{
    ASSERT_EQ(t_run_virtual(1, race_root, NULL), 0);
}

/* weft_deadline(): the earliest deadline up the scope chain, stopping at a
 * shield; children see their parents' deadlines. */
static int deadline_seen_child(void *arg)
{
    *(weft_time *)arg = weft_deadline();
    return 0;
}

static int effective_deadline_root(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_deadline(), WEFT_NEVER);
    weft_scope *a = open_scope(WEFT_FAIL_FAST, 10 * WEFT_SEC, 0);
    ASSERT_EQ(weft_deadline(), 10 * WEFT_SEC);
    weft_scope *b = open_scope(WEFT_FAIL_FAST, 20 * WEFT_SEC, 0);
    ASSERT_EQ(weft_deadline(), 10 * WEFT_SEC); /* the outer one is earlier */
    weft_time seen = 0;
    ASSERT_EQ(weft_spawn(b, deadline_seen_child, &seen), 0);
    ASSERT_EQ(weft_scope_set_deadline(b, 5 * WEFT_SEC), 0);
    ASSERT_EQ(weft_deadline(), 5 * WEFT_SEC);
    weft_scope *sh = open_scope(WEFT_FAIL_FAST, 0, 1);
    ASSERT_EQ(weft_deadline(), WEFT_NEVER); /* a shield hides the rest */
    ASSERT_EQ(weft_scope_set_deadline(sh, 30 * WEFT_SEC), 0);
    ASSERT_EQ(weft_deadline(), 30 * WEFT_SEC);
    ASSERT_EQ(weft_scope_join(sh), 0);
    ASSERT_EQ(weft_scope_free(sh), 0);
    ASSERT_EQ(weft_scope_join(b), 0);
    ASSERT(seen == 10 * WEFT_SEC || seen == 5 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(b), 0);
    ASSERT_EQ(weft_deadline(), 10 * WEFT_SEC);
    ASSERT_EQ(weft_scope_join(a), 0);
    ASSERT_EQ(weft_scope_free(a), 0);
    ASSERT_EQ(weft_deadline(), WEFT_NEVER);
    return 0;
}

TEST(effective_deadline)
{
    ASSERT_EQ(weft_deadline(), WEFT_NEVER); /* outside a runtime */
    ASSERT_EQ(t_run_virtual(1, effective_deadline_root, NULL), 0);
}

/* ---- level-triggered cancellation ------------------------------------ */

static atomic_int lt_checked;

static int level_child(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_cancelled(), 0);
    ASSERT_EQ(weft_sleep_for(100 * WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_now(), 1 * WEFT_SEC);
    for (int i = 0; i < 5; i++) {
        ASSERT_EQ(weft_cancelled(), 1);
        ASSERT_EQ(weft_sleep_for(WEFT_SEC), -ECANCELED);
        ASSERT_EQ(weft_sleep_until(WEFT_NEVER), -ECANCELED);
        ASSERT_EQ(weft_yield(), 0); /* not a cancellation point */
        ASSERT_EQ(weft_now(), 1 * WEFT_SEC);
    }
    /* A scope opened inside a cancelled scope starts cancelled, and
     * nothing can be spawned into it. */
    weft_scope *in;
    ASSERT_EQ(weft_scope_open(&in, NULL), 0);
    ASSERT(weft_scope_cancelled(in));
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_spawn(in, level_child, NULL), -ECANCELED);
    ASSERT_EQ(weft_spawn(NULL, level_child, NULL), -ECANCELED);
    ASSERT_EQ(weft_scope_join(in), -ECANCELED);
    ASSERT_EQ(weft_scope_free(in), 0);
    ASSERT_EQ(weft_cancelled(), 1);
    atomic_fetch_add(&lt_checked, 1);
    return -ECANCELED;
}

static int level_root(void *arg)
{
    (void)arg;
    weft_scope *s = open_scope(WEFT_COLLECT, 0, 0);
    for (int i = 0; i < 3; i++)
        ASSERT(weft_spawn(s, level_child, NULL) >= 0);
    /* The owner's current scope is s: it is cancelled along with it. */
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0); /* idempotent */
    ASSERT_EQ(weft_cancelled(), 1);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_cancelled(), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);
    return 0;
}

TEST(cancellation_is_level_triggered)
{
    ASSERT_EQ(t_run_virtual(1, level_root, NULL), 0);
    ASSERT_EQ(atomic_load(&lt_checked), 3);
}

/* After leaving a cancelled inner scope the task can block again. */
static int leave_cancelled_root(void *arg)
{
    (void)arg;
    weft_scope *outer = weft_scope_current();
    ASSERT(outer != NULL);
    weft_scope *in = open_scope(WEFT_FAIL_FAST, 0, 0);
    ASSERT_EQ(weft_scope_cancel(in), 0);
    ASSERT_EQ(weft_cancelled(), 1);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(weft_sleep_for(WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_scope_join(in), -ECANCELED);
    ASSERT(weft_scope_current() == outer);
    ASSERT_EQ(weft_cancelled(), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(weft_scope_free(in), 0);
    ASSERT(!weft_scope_cancelled(outer));
    return 0;
}

TEST(leaving_cancelled_scope_allows_blocking_again)
{
    ASSERT_EQ(t_run_virtual(1, leave_cancelled_root, NULL), 0);
}

/* ---- cancellation through nested levels ------------------------------ */

#define NEST_DEPTH 4
#define NEST_LEAVES 5
static atomic_int nest_cancelled_sleeps, nest_join_ecanceled;

static int nest_leaf(void *arg)
{
    (void)arg;
    int r = weft_sleep_for(1000 * WEFT_SEC);
    if (r == -ECANCELED && weft_now() == WEFT_SEC)
        atomic_fetch_add(&nest_cancelled_sleeps, 1);
    return r;
}

static int nest_level(void *arg)
{
    int level = (int)(intptr_t)arg;
    weft_scope *s = open_scope(WEFT_COLLECT, 0, 0);
    if (level + 1 < NEST_DEPTH)
        ASSERT(weft_spawn(s, nest_level, (void *)(intptr_t)(level + 1)) >= 0);
    for (int i = 0; i < NEST_LEAVES; i++)
        ASSERT(weft_spawn(s, nest_leaf, NULL) >= 0);
    nest_leaf(NULL); /* the level's task sleeps too */
    int r = weft_scope_join(s);
    if (r == -ECANCELED)
        atomic_fetch_add(&nest_join_ecanceled, 1);
    ASSERT(weft_scope_cancelled(s));
    ASSERT_EQ(weft_scope_free(s), 0);
    return r;
}

static int nest_root(void *arg)
{
    (void)arg;
    weft_scope *top = open_scope(WEFT_COLLECT, 0, 0);
    ASSERT(weft_spawn(top, nest_level, (void *)(intptr_t)0) >= 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(top), 0);
    ASSERT_EQ(weft_scope_join(top), -ECANCELED);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    int st;
    ASSERT_EQ(weft_scope_status(top, 0, &st), 0);
    ASSERT_EQ(st, -ECANCELED);
    ASSERT_EQ(weft_scope_free(top), 0);
    return 0;
}

TEST(cancellation_flows_through_nested_levels)
{
    ASSERT_EQ(t_run_virtual(1, nest_root, NULL), 0);
    ASSERT_EQ(atomic_load(&nest_cancelled_sleeps),
              NEST_DEPTH * (NEST_LEAVES + 1));
    ASSERT_EQ(atomic_load(&nest_join_ecanceled), NEST_DEPTH);
}

TEST(cancellation_flows_through_nested_levels_4_workers)
{
    ASSERT_EQ(t_run_virtual(4, nest_root, NULL), 0);
    ASSERT_EQ(atomic_load(&nest_cancelled_sleeps),
              NEST_DEPTH * (NEST_LEAVES + 1));
    ASSERT_EQ(atomic_load(&nest_join_ecanceled), NEST_DEPTH);
}

/* Cancelling an inner scope does not cancel its parent or siblings. */
static int inner_only_root(void *arg)
{
    (void)arg;
    struct kid a = {.sleep = 5 * WEFT_SEC}, b = {.sleep = 5 * WEFT_SEC};
    weft_scope *outer = open_scope(WEFT_FAIL_FAST, 0, 0);
    ASSERT_EQ(weft_spawn(outer, kid_fn, &a), 0);
    weft_scope *inner = open_scope(WEFT_FAIL_FAST, 0, 0);
    ASSERT_EQ(weft_spawn(inner, kid_fn, &b), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(inner), 0);
    ASSERT_EQ(weft_scope_join(inner), -ECANCELED);
    ASSERT_EQ(weft_scope_free(inner), 0);
    ASSERT(!weft_scope_cancelled(outer));
    ASSERT_EQ(weft_scope_join(outer), 0);
    ASSERT_EQ(weft_scope_free(outer), 0);
    ASSERT_EQ(b.got, -ECANCELED);
    ASSERT_EQ(b.at, WEFT_SEC);
    ASSERT_EQ(a.got, 0);
    ASSERT_EQ(a.at, 5 * WEFT_SEC);
    return 0;
}

TEST(cancel_inner_does_not_reach_outer)
{
    ASSERT_EQ(t_run_virtual(1, inner_only_root, NULL), 0);
}

/* ---- shields ---------------------------------------------------------- */

static atomic_int shield_steps;

static int cleanup_helper(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    atomic_fetch_add(&shield_steps, 1);
    return 0;
}

static int shielded_child(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep_for(10 * WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_now(), 1 * WEFT_SEC);
    /* Cleanup under a shield may block. */
    weft_scope *sh = open_scope(WEFT_FAIL_FAST, 0, 1);
    ASSERT_EQ(weft_cancelled(), 0);
    ASSERT(!weft_scope_cancelled(sh));
    ASSERT(weft_spawn(sh, cleanup_helper, NULL) >= 0);
    ASSERT_EQ(weft_sleep_for(2 * WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    /* A scope nested in the shield is protected too. */
    weft_scope *in = open_scope(WEFT_FAIL_FAST, 0, 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_join(in), 0);
    ASSERT_EQ(weft_scope_free(in), 0);
    ASSERT_EQ(weft_scope_join(sh), 0);
    ASSERT_EQ(weft_scope_free(sh), 0);
    ASSERT_EQ(weft_now(), 4 * WEFT_SEC);
    atomic_fetch_add(&shield_steps, 1);
    /* Out of the shield: cancelled again. */
    ASSERT_EQ(weft_cancelled(), 1);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), -ECANCELED);

    /* The shield's own deadline still applies. */
    sh = open_scope(WEFT_FAIL_FAST, weft_now() + 500 * WEFT_MSEC, 1);
    ASSERT_EQ(weft_sleep_for(5 * WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_now(), 4500 * WEFT_MSEC);
    ASSERT_EQ(weft_scope_join(sh), -ETIMEDOUT);
    ASSERT_EQ(weft_scope_free(sh), 0);

    /* And so does weft_scope_cancel on the shield itself. */
    sh = open_scope(WEFT_FAIL_FAST, 0, 1);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(sh), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_scope_join(sh), -ECANCELED);
    ASSERT_EQ(weft_scope_free(sh), 0);
    ASSERT_EQ(weft_now(), 5500 * WEFT_MSEC);
    atomic_fetch_add(&shield_steps, 1);
    return 0;
}

static int shield_root(void *arg)
{
    (void)arg;
    weft_scope *s = open_scope(WEFT_COLLECT, 0, 0);
    ASSERT(weft_spawn(s, shielded_child, NULL) >= 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_now(), 5500 * WEFT_MSEC);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(shield_lets_cleanup_block_after_cancel)
{
    ASSERT_EQ(t_run_virtual(1, shield_root, NULL), 0);
    ASSERT_EQ(atomic_load(&shield_steps), 3);
}

/* A shield opened in an already-cancelled scope starts uncancelled. */
static int shield_in_cancelled_root(void *arg)
{
    (void)arg;
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 0, 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    weft_scope *sh = open_scope(WEFT_FAIL_FAST, 0, 1);
    ASSERT(!weft_scope_cancelled(sh));
    ASSERT(weft_spawn(sh, cleanup_helper, NULL) >= 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_join(sh), 0);
    ASSERT_EQ(weft_scope_free(sh), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    return 0;
}

TEST(shield_opened_in_cancelled_scope)
{
    ASSERT_EQ(t_run_virtual(1, shield_in_cancelled_root, NULL), 0);
    ASSERT_EQ(atomic_load(&shield_steps), 1);
}

/* ---- misuse ----------------------------------------------------------- */

static int noop(void *arg)
{
    (void)arg;
    return 0;
}

static int never_ok(void *arg)
{
    (void)arg;
    T_FAIL("a task that must not run ran");
    return 0;
}

static int misuse_join_twice_root(void *arg)
{
    (void)arg;
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 0, 0);
    ASSERT(weft_spawn(s, noop, NULL) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_join(s), -EINVAL);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(misuse_join_twice)
{
    ASSERT_EQ(t_run_virtual(1, misuse_join_twice_root, NULL), 0);
}

struct foreign {
    weft_scope *s;
    int join_r, free_r, deadline_r, cancel_r;
};

static int foreign_joiner(void *arg)
{
    struct foreign *f = arg;
    f->join_r = weft_scope_join(f->s);
    f->deadline_r = weft_scope_set_deadline(f->s, WEFT_SEC);
    return 0;
}

static int foreign_freer(void *arg)
{
    struct foreign *f = arg;
    f->free_r = weft_scope_free(f->s);
    f->cancel_r = weft_scope_cancel(f->s);
    return 0;
}

static int misuse_owner_root(void *arg)
{
    struct foreign *f = arg;
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 0, 0);
    f->s = s;
    ASSERT(weft_spawn(s, foreign_joiner, f) >= 0);
    ASSERT(weft_spawn(s, noop, NULL) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(f->join_r, -EPERM);
    ASSERT_EQ(f->deadline_r, -EPERM);
    /* Joined now: a non-owner still may not free it. */
    weft_scope *s2 = open_scope(WEFT_FAIL_FAST, 0, 0);
    ASSERT(weft_spawn(s2, foreign_freer, f) >= 0);
    ASSERT_EQ(weft_scope_join(s2), 0);
    ASSERT_EQ(weft_scope_free(s2), 0);
    ASSERT_EQ(f->free_r, -EPERM);
    ASSERT_EQ(f->cancel_r, -ESHUTDOWN);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(misuse_join_or_free_by_non_owner)
{
    struct foreign f = {0};
    ASSERT_EQ(t_run_virtual(1, misuse_owner_root, &f), 0);
    ASSERT_EQ(t_run_virtual(2, misuse_owner_root, &f), 0);
}

static atomic_int late_ran;

static int late_child(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    atomic_fetch_add(&late_ran, 1);
    return 0;
}

static int misuse_free_early_root(void *arg)
{
    (void)arg;
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 0, 0);
    ASSERT(weft_spawn(s, late_child, NULL) >= 0);
    ASSERT_EQ(weft_scope_free(s), -EBUSY);
    /* Still usable: current, open, spawnable, joinable. */
    ASSERT(weft_scope_current() == s);
    ASSERT_EQ(weft_spawn(s, late_child, NULL), 1);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(atomic_load(&late_ran), 2);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(misuse_free_before_join_is_ebusy)
{
    ASSERT_EQ(t_run_virtual(1, misuse_free_early_root, NULL), 0);
}

static int misuse_joined_root(void *arg)
{
    (void)arg;
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 0, 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_cancel(s), -ESHUTDOWN);
    ASSERT_EQ(weft_spawn(s, never_ok, NULL), -ESHUTDOWN);
    ASSERT_EQ(weft_scope_set_deadline(s, WEFT_SEC), -ESHUTDOWN);
    ASSERT_EQ(weft_scope_spawned(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(misuse_joined_scope_is_shutdown)
{
    ASSERT_EQ(t_run_virtual(1, misuse_joined_root, NULL), 0);
}

static int misuse_cancelled_spawn_root(void *arg)
{
    (void)arg;
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 0, 0);
    ASSERT_EQ(weft_spawn(s, noop, NULL), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_spawn(s, never_ok, NULL), -ECANCELED);
    ASSERT_EQ(weft_spawn(NULL, never_ok, NULL), -ECANCELED);
    ASSERT_EQ(weft_scope_spawned(s), 1);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    /* The root scope is fine again. */
    ASSERT(weft_spawn(NULL, noop, NULL) >= 0);
    return 0;
}

TEST(misuse_spawn_into_cancelled_scope)
{
    ASSERT_EQ(t_run_virtual(1, misuse_cancelled_spawn_root, NULL), 0);
}

static int misuse_null_root(void *arg)
{
    (void)arg;
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 0, 0);
    ASSERT_EQ(weft_spawn(s, NULL, NULL), -EINVAL);
    ASSERT_EQ(weft_spawn(NULL, NULL, NULL), -EINVAL);
    weft_spawn_opts o = {.name = "x"};
    ASSERT_EQ(weft_spawn_ex(s, NULL, NULL, &o), -EINVAL);
    ASSERT_EQ(weft_scope_spawned(s), 0);
    ASSERT_EQ(weft_scope_open(NULL, NULL), -EINVAL);
    ASSERT(weft_scope_current() == s);
    ASSERT_EQ(weft_scope_join(NULL), -EINVAL);
    ASSERT_EQ(weft_scope_cancel(NULL), -EINVAL);
    ASSERT_EQ(weft_scope_free(NULL), -EINVAL);
    ASSERT_EQ(weft_scope_set_deadline(NULL, WEFT_SEC), -EINVAL);
    ASSERT_EQ(weft_call_for(NULL, NULL, WEFT_SEC), -EINVAL);
    ASSERT(!weft_scope_cancelled(s));
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(misuse_null_arguments_are_einval)
{
    ASSERT_EQ(t_run_virtual(1, misuse_null_root, NULL), 0);
}

static int misuse_bad_opts_root(void *arg)
{
    (void)arg;
    weft_scope *s = (weft_scope *)0x1;
    weft_scope_opts o = {.policy = (weft_policy)42};
    ASSERT_EQ(weft_scope_open(&s, &o), -EINVAL);
    ASSERT(s == (weft_scope *)0x1);
    o.policy = (weft_policy)-1;
    ASSERT_EQ(weft_scope_open(&s, &o), -EINVAL);
    return 0;
}

TEST(misuse_bad_policy_is_einval)
{
    ASSERT_EQ(t_run_virtual(1, misuse_bad_opts_root, NULL), 0);
}

static int misuse_order_root(void *arg)
{
    (void)arg;
    weft_scope *a = open_scope(WEFT_FAIL_FAST, 0, 0);
    weft_scope *b = open_scope(WEFT_FAIL_FAST, 0, 0);
    ASSERT_EQ(weft_scope_join(a), -EINVAL); /* b is innermost */
    ASSERT(weft_scope_current() == b);
    ASSERT_EQ(weft_spawn(a, noop, NULL), 0); /* a still open */
    ASSERT_EQ(weft_scope_join(b), 0);
    ASSERT(weft_scope_current() == a);
    ASSERT_EQ(weft_scope_join(a), 0);
    ASSERT_EQ(weft_scope_free(b), 0);
    ASSERT_EQ(weft_scope_free(a), 0);
    return 0;
}

TEST(misuse_join_not_innermost_is_einval)
{
    ASSERT_EQ(t_run_virtual(1, misuse_order_root, NULL), 0);
}

/* ---- weft_call_for ------------------------------------------------ */

static int sleep_then_ret(void *arg)
{
    struct kid *k = arg;
    return kid_fn(k);
}

static int ignore_cancel(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep_for(10 * WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_cancelled(), 1);
    return 0;
}

static struct kid wt_kids[3];

static int spawn_then_sleep(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++) {
        wt_kids[i] = (struct kid){.sleep = 10 * WEFT_SEC};
        ASSERT(weft_spawn(NULL, kid_fn, &wt_kids[i]) >= 0);
    }
    return weft_sleep_for(10 * WEFT_SEC);
}

static int inner_timeout(void *arg)
{
    struct kid *k = arg;
    /* The inner deadline is later than the outer one. */
    int r = weft_call_for(sleep_then_ret, k, 100 * WEFT_SEC);
    ASSERT_EQ(r, -ECANCELED);
    return r;
}

static int with_timeout_root(void *arg)
{
    (void)arg;
    struct kid fast = {.sleep = WEFT_SEC, .ret = 0};
    ASSERT_EQ(weft_call_for(sleep_then_ret, &fast, 2 * WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 1 * WEFT_SEC);

    struct kid fail = {.sleep = WEFT_SEC, .ret = -EIO};
    ASSERT_EQ(weft_call_for(sleep_then_ret, &fail, 2 * WEFT_SEC), -EIO);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);

    struct kid slow = {.sleep = 5 * WEFT_SEC, .ret = 0};
    ASSERT_EQ(weft_call_for(sleep_then_ret, &slow, 2 * WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(slow.got, -ECANCELED);
    ASSERT_EQ(slow.at, 4 * WEFT_SEC);
    ASSERT_EQ(weft_now(), 4 * WEFT_SEC);
    ASSERT_EQ(weft_cancelled(), 0); /* the timeout scope is gone */

    /* fn that swallows the cancellation: its result stands. */
    ASSERT_EQ(weft_call_for(ignore_cancel, NULL, WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 5 * WEFT_SEC);

    /* Children spawned by fn into its scope are cancelled at the deadline
     * and waited for. */
    ASSERT_EQ(weft_call_for(spawn_then_sleep, NULL, 3 * WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 8 * WEFT_SEC);
    for (int i = 0; i < 3; i++) {
        ASSERT(wt_kids[i].done);
        ASSERT_EQ(wt_kids[i].got, -ECANCELED);
        ASSERT_EQ(wt_kids[i].at, 8 * WEFT_SEC);
    }

    /* Nested: the outer deadline cancels fn inside the inner one. */
    struct kid nested = {.sleep = 50 * WEFT_SEC};
    ASSERT_EQ(weft_call_for(inner_timeout, &nested, 2 * WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(nested.at, 10 * WEFT_SEC);
    ASSERT_EQ(weft_now(), 10 * WEFT_SEC);

    /* A long timeout that fn beats leaves no timer behind. */
    struct kid quick = {.sleep = 1, .ret = 0};
    ASSERT_EQ(weft_call_for(sleep_then_ret, &quick, 1000 * WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 10 * WEFT_SEC + 1);
    return 0;
}

TEST(with_timeout_fast_slow_exact)
{
    ASSERT_EQ(t_run_virtual(1, with_timeout_root, NULL), 0);
}

/* fn returns leaving a scope it opened unjoined (with a child asleep in
 * it): weft_call_for joins it (the child runs to the timeout's
 * deadline, which cancels it), restores the caller's scope, and leaves no
 * deadline behind to cancel the caller later. */
static struct kid leftover_kid;

static int leaves_scope_open(void *arg)
{
    int ret = (int)(intptr_t)arg;
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 0, 0);
    leftover_kid = (struct kid){.sleep = 10 * WEFT_SEC};
    ASSERT_EQ(weft_spawn(s, kid_fn, &leftover_kid), 0);
    return ret;
}

static int sleep_one_sec(void *arg)
{
    (void)arg;
    return weft_sleep_for(WEFT_SEC);
}

static int with_timeout_leftover_root(void *arg)
{
    (void)arg;
    /* A timeout of 0 (or less) is a deadline that has come, even at the
     * virtual clock's start: fn runs cancelled. */
    ASSERT_EQ(weft_now(), 0);
    ASSERT_EQ(weft_call_for(sleep_one_sec, NULL, 0), -ETIMEDOUT);
    ASSERT_EQ(weft_call_for(sleep_one_sec, NULL, -5), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 0);
    weft_scope *mine = weft_scope_current();
    ASSERT_EQ(
        weft_call_for(leaves_scope_open, (void *)(intptr_t)-EIO, WEFT_SEC),
        -ETIMEDOUT);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(leftover_kid.got, -ECANCELED);
    ASSERT_EQ(leftover_kid.at, WEFT_SEC);
    ASSERT(weft_scope_current() == mine);
    ASSERT_EQ(weft_sleep_for(5 * WEFT_SEC), 0); /* nothing left to cancel us */
    /* Success: the result stands, the leftover is joined all the same. */
    ASSERT_EQ(weft_call_for(leaves_scope_open, (void *)7, WEFT_SEC), 7);
    ASSERT_EQ(weft_now(), 7 * WEFT_SEC);
    ASSERT(weft_scope_current() == mine);
    ASSERT_EQ(weft_sleep_for(5 * WEFT_SEC), 0);
    return 0;
}

TEST(with_timeout_joins_scopes_fn_left_open)
{
    ASSERT_EQ(t_run_virtual(1, with_timeout_leftover_root, NULL), 0);
}

/* Misuse: fn joins the scope weft_call_for opened for it. The scopes
 * around the call are the caller's and stay so: weft_call_for joins
 * nothing above its own scope (it used to join the caller's scope P and
 * orphan it, or spin on -EPERM with the root's). */
static int joins_its_own_scope(void *arg)
{
    (void)arg;
    weft_scope *mine = weft_scope_current();
    ASSERT_EQ(weft_scope_join(mine), 0);
    return 7;
}

static int with_timeout_misuse_root(void *arg)
{
    (void)arg;
    weft_scope *p = open_scope(WEFT_COLLECT, 0, 0);
    ASSERT_EQ(weft_call_for(joins_its_own_scope, NULL, WEFT_SEC), 7);
    ASSERT(weft_scope_current() == p);
    ASSERT(weft_spawn(p, sleep_one_sec, NULL) >= 0);
    ASSERT_EQ(weft_scope_join(p), 0);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(weft_scope_free(p), 0);
    /* Straight under the root's scope too. */
    ASSERT_EQ(weft_call_for(joins_its_own_scope, NULL, WEFT_SEC), 7);
    return 0;
}

TEST(with_timeout_fn_joining_its_scope_leaves_callers_alone)
{
    ASSERT_EQ(t_run_virtual(1, with_timeout_misuse_root, NULL), 0);
}

/* ---- a task returning with unjoined scopes ---------------------------- */

#define UNJOINED_KIDS 10
static atomic_int unjoined_done, unjoined_ran;

static int unjoined_grandchild(void *arg)
{
    int64_t d = (int64_t)(intptr_t)arg;
    int r = weft_sleep_for(d);
    if (r == 0 && weft_now() == d)
        atomic_fetch_add(&unjoined_done, 1);
    if (r == 0)
        atomic_fetch_add(&unjoined_ran, 1);
    return r;
}

static weft_scope *unjoined_scope; /* left open by returns_without_join */

static int returns_without_join(void *arg)
{
    int64_t scale = (int64_t)(intptr_t)arg;
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 0, 0);
    unjoined_scope = s; /* freed by the parent, or by weft_run at its end */
    for (int i = 0; i < UNJOINED_KIDS; i++)
        ASSERT(weft_spawn(s, unjoined_grandchild,
                          (void *)(intptr_t)((i + 1) * scale)) >= 0);
    return 0;
}

static int unjoined_root(void *arg)
{
    (void)arg;
    weft_scope *p = open_scope(WEFT_COLLECT, 0, 0);
    ASSERT(weft_spawn(p, returns_without_join, (void *)(intptr_t)WEFT_SEC) >=
           0);
    ASSERT_EQ(weft_scope_join(p), 0);
    /* Every grandchild finished before the parent's scope could join. */
    ASSERT_EQ(atomic_load(&unjoined_done), UNJOINED_KIDS);
    ASSERT_EQ(weft_now(), UNJOINED_KIDS * WEFT_SEC);
    int st;
    ASSERT_EQ(weft_scope_status(p, 0, &st), 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(weft_scope_free(p), 0);
    /* The orphan was joined at its owner's exit: any task may free it. */
    ASSERT_EQ(weft_scope_join(unjoined_scope), -EPERM);
    ASSERT_EQ(weft_scope_free(unjoined_scope), 0);
    return 0;
}

TEST(task_exit_waits_for_unjoined_scope)
{
    ASSERT_EQ(t_run_virtual(1, unjoined_root, NULL), 0);
    atomic_store(&unjoined_done, 0);
    ASSERT_EQ(t_run_virtual(4, unjoined_root, NULL), 0);
}

/* The root itself returns with an open scope: weft_run waits. */
TEST(root_exit_waits_for_unjoined_scope)
{
    ASSERT_EQ(
        t_run_virtual(1, returns_without_join, (void *)(intptr_t)WEFT_SEC), 0);
    ASSERT_EQ(atomic_load(&unjoined_done), UNJOINED_KIDS);
    atomic_store(&unjoined_ran, 0);
    ASSERT_EQ(t_run_mono(2, returns_without_join, (void *)(intptr_t)1000), 0);
    ASSERT_EQ(atomic_load(&unjoined_ran), UNJOINED_KIDS);
}

/* Cancelling the parent's scope reaches the orphaned-then-adopted scope. */
static atomic_int unjoined_cancelled;

static int forever_sleeper(void *arg)
{
    (void)arg;
    int r = weft_sleep_for(1000 * WEFT_SEC);
    if (r == -ECANCELED && weft_now() == WEFT_SEC)
        atomic_fetch_add(&unjoined_cancelled, 1);
    return r;
}

static int returns_leaving_sleepers(void *arg)
{
    (void)arg;
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 0, 0);
    for (int i = 0; i < 5; i++)
        ASSERT(weft_spawn(s, forever_sleeper, NULL) >= 0);
    return 0;
}

static int unjoined_cancel_root(void *arg)
{
    (void)arg;
    weft_scope *p = open_scope(WEFT_COLLECT, 0, 0);
    ASSERT(weft_spawn(p, returns_leaving_sleepers, NULL) >= 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(p), 0);
    ASSERT_EQ(weft_scope_join(p), -ECANCELED);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(atomic_load(&unjoined_cancelled), 5);
    ASSERT_EQ(weft_scope_free(p), 0);
    return 0;
}

TEST(cancel_reaches_scope_left_unjoined_by_exited_task)
{
    ASSERT_EQ(t_run_virtual(1, unjoined_cancel_root, NULL), 0);
}

/* ---- cross-worker cancellation ---------------------------------------- */

struct mass {
    weft_scope *s;
    long n;
    atomic_long parked, cancelled_ok, wrong;
    atomic_long per_worker[4];
    atomic_int canceller_worker;
};

static int mass_sleeper(void *arg)
{
    struct mass *m = arg;
    int id = weft_worker_id();
    ASSERT(id >= 0 && id < 4);
    atomic_fetch_add(&m->per_worker[id], 1);
    atomic_fetch_add(&m->parked, 1);
    int r = weft_sleep_for(1000L * 86400 * WEFT_SEC);
    if (r == -ECANCELED && weft_now() == WEFT_SEC && weft_worker_id() == id)
        atomic_fetch_add(&m->cancelled_ok, 1);
    else
        atomic_fetch_add(&m->wrong, 1);
    return r;
}

static int mass_root(void *arg)
{
    struct mass *m = arg;
    m->s = open_scope(WEFT_COLLECT, 0, 0);
    for (long i = 0; i < m->n; i++)
        ASSERT(weft_spawn(m->s, mass_sleeper, m) >= 0);
    /* The virtual clock reaches 1 s only once every task is blocked. */
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(atomic_load(&m->parked), m->n);
    ASSERT_EQ(atomic_load(&m->cancelled_ok), 0);
    ASSERT_EQ(weft_scope_cancel(m->s), 0);
    ASSERT_EQ(weft_scope_join(m->s), -ECANCELED);
    ASSERT_EQ(weft_scope_failed(m->s), m->n);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(weft_scope_free(m->s), 0);
    return 0;
}

static int workers_used(struct mass *m)
{
    int used = 0;
    long sum = 0;
    for (int i = 0; i < 4; i++) {
        used += atomic_load(&m->per_worker[i]) > 0;
        sum += atomic_load(&m->per_worker[i]);
    }
    ASSERT_EQ(sum, m->n);
    return used;
}

TEST(cross_worker_mass_cancel_100k)
{
    static struct mass m;
    m.n = T_LIVE(100000);
    ASSERT_EQ(t_run_virtual(4, mass_root, &m), 0);
    ASSERT_EQ(atomic_load(&m.cancelled_ok), m.n);
    ASSERT_EQ(atomic_load(&m.wrong), 0);
    ASSERT(workers_used(&m) >= 2); /* spread over the workers */
}

static int mass_canceller(void *arg)
{
    struct mass *m = arg;
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(atomic_load(&m->parked), m->n);
    atomic_store(&m->canceller_worker, weft_worker_id());
    ASSERT_EQ(weft_scope_cancel(m->s), 0);
    return 0;
}

static int cancel_other_worker_root(void *arg)
{
    struct mass *m = arg;
    spawn_on(0, mass_canceller, m);
    m->s = open_scope(WEFT_COLLECT, 0, 0);
    for (long i = 0; i < m->n; i++)
        spawn_on((int)i, mass_sleeper, m); /* into m->s, now current */
    ASSERT_EQ(weft_scope_join(m->s), -ECANCELED);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(weft_scope_free(m->s), 0);
    return 0;
}

TEST(cancel_from_another_worker)
{
    static struct mass m;
    m.n = T_LIVE(20000);
    ASSERT_EQ(t_run_virtual(4, cancel_other_worker_root, &m), 0);
    ASSERT_EQ(atomic_load(&m.cancelled_ok), m.n);
    ASSERT_EQ(atomic_load(&m.wrong), 0);
    /* The canceller on worker 0, sleepers spawned on every worker. */
    ASSERT_EQ(atomic_load(&m.canceller_worker), 0);
    ASSERT_EQ(workers_used(&m), 4);
}

/* From a plain pthread, while every worker is parked (real clock). */
static int mono_sleeper(void *arg)
{
    struct mass *m = arg;
    atomic_fetch_add(&m->parked, 1);
    int r = weft_sleep_for(3600 * WEFT_SEC);
    if (r == -ECANCELED)
        atomic_fetch_add(&m->cancelled_ok, 1);
    else
        atomic_fetch_add(&m->wrong, 1);
    return r;
}

static void *pthread_canceller(void *arg)
{
    struct mass *m = arg;
    while (atomic_load(&m->parked) < m->n)
        sched_yield();
    ASSERT(weft_scope_current() == NULL);
    ASSERT_EQ(weft_scope_cancel(m->s), 0);
    /* Idempotent while open; the first cancel may already have let the
     * join finish (the root frees the scope only after joining us). */
    int again = weft_scope_cancel(m->s);
    ASSERT(again == 0 || again == -ESHUTDOWN);
    return NULL;
}

static int pthread_cancel_root(void *arg)
{
    struct mass *m = arg;
    m->s = open_scope(WEFT_FAIL_FAST, 0, 0);
    for (long i = 0; i < m->n; i++)
        ASSERT(weft_spawn(m->s, mono_sleeper, m) >= 0);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, pthread_canceller, m), 0);
    ASSERT_EQ(weft_scope_join(m->s), -ECANCELED);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(weft_scope_free(m->s), 0);
    return 0;
}

TEST(cancel_from_plain_pthread)
{
    static struct mass m;
    m.n = T_LIVE(10000);
    ASSERT_EQ(t_run_mono(4, pthread_cancel_root, &m), 0);
    ASSERT_EQ(atomic_load(&m.cancelled_ok), m.n);
    ASSERT_EQ(atomic_load(&m.wrong), 0);
}

/* Virtual clock: the pthread cancels at virtual 1 s while the root task
 * holds its worker in pthread_join; the other workers must be woken. */
static void *pthread_cancel_now(void *arg)
{
    struct mass *m = arg;
    ASSERT_EQ(weft_scope_cancel(m->s), 0);
    return NULL;
}

static int pthread_cancel_virtual_root(void *arg)
{
    struct mass *m = arg;
    weft_scope *outer = open_scope(WEFT_COLLECT, 0, 0);
    m->s = open_scope(WEFT_COLLECT, 0, 0);
    for (long i = 0; i < m->n; i++)
        ASSERT(weft_spawn(m->s, mass_sleeper, m) >= 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(atomic_load(&m->parked), m->n);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, pthread_cancel_now, m), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(weft_scope_join(m->s), -ECANCELED);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(weft_scope_free(m->s), 0);
    ASSERT(!weft_scope_cancelled(outer));
    ASSERT_EQ(weft_scope_join(outer), 0);
    ASSERT_EQ(weft_scope_free(outer), 0);
    return 0;
}

TEST(cancel_from_plain_pthread_virtual_clock)
{
    static struct mass m;
    m.n = T_LIVE(20000);
    ASSERT_EQ(t_run_virtual(4, pthread_cancel_virtual_root, &m), 0);
    ASSERT_EQ(atomic_load(&m.cancelled_ok), m.n);
    ASSERT_EQ(atomic_load(&m.wrong), 0);
}

/* ---- index limits ------------------------------------------------------ */

/* The statuses array grows by doubling; from 2^30 entries on, doubling an
 * int overflowed (UBSan: signed multiplication). It stops at INT_MAX,
 * enough for every index a scope can give. */
TEST(status_capacity_does_not_overflow)
{
    ASSERT_EQ(weft__scope_status_cap(0), 16);
    ASSERT_EQ(weft__scope_status_cap(16), 32);
    ASSERT_EQ(weft__scope_status_cap(1 << 29), 1 << 30);
    ASSERT_EQ(weft__scope_status_cap(1 << 30), INT_MAX);
    ASSERT_EQ(weft__scope_status_cap(INT_MAX / 2 + 1), INT_MAX);
    ASSERT_EQ(weft__scope_status_cap(INT_MAX - 1), INT_MAX);
}

/* A scope that has given INT_MAX indexes refuses the next spawn with
 * -EOVERFLOW (every policy that numbers its children); WEFT_SERVE numbers
 * none and spawns on, its count stopping at INT_MAX. The count is set by
 * hand: 2^31 tasks would take too long. */
static int index_limit_root(void *arg)
{
    (void)arg;
    weft_policy numbered[] = {WEFT_FAIL_FAST, WEFT_COLLECT, WEFT_FIRST,
                              WEFT_RACE};
    for (int i = 0; i < 4; i++) {
        weft_scope *s = open_scope(numbered[i], 0, 0);
        s->spawned = INT_MAX;
        ASSERT_EQ(weft_spawn(s, noop, NULL), -EOVERFLOW);
        ASSERT_EQ(weft_scope_spawned(s), INT_MAX);
        s->spawned = 0;
        ASSERT_EQ(weft_spawn(s, noop, NULL), 0);
        weft_scope_join(s);
        ASSERT_EQ(weft_scope_free(s), 0);
    }
    weft_scope *s = open_scope(WEFT_SERVE, 0, 0);
    s->spawned = INT_MAX - 1;
    ASSERT_EQ(weft_spawn(s, noop, NULL), 0);
    ASSERT_EQ(weft_spawn(s, noop, NULL), 0);
    ASSERT_EQ(weft_scope_spawned(s), INT_MAX);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(index_limit_is_eoverflow_except_serve)
{
    ASSERT_EQ(t_run_virtual(1, index_limit_root, NULL), 0);
}

/* Joining a WEFT_FIRST or WEFT_RACE scope that had no child: no winner,
 * -ENOENT; a cancel still says -ECANCELED. */
static int empty_first_race_root(void *arg)
{
    (void)arg;
    weft_policy p[] = {WEFT_FIRST, WEFT_RACE};
    for (int i = 0; i < 2; i++) {
        weft_scope *s = open_scope(p[i], 0, 0);
        ASSERT_EQ(weft_scope_join(s), -ENOENT);
        ASSERT_EQ(weft_scope_winner(s), -ENOENT);
        ASSERT_EQ(weft_scope_free(s), 0);
        s = open_scope(p[i], 0, 0);
        ASSERT_EQ(weft_scope_cancel(s), 0);
        ASSERT_EQ(weft_scope_join(s), -ECANCELED);
        ASSERT_EQ(weft_scope_free(s), 0);
    }
    return 0;
}

TEST(empty_first_or_race_join_is_enoent)
{
    ASSERT_EQ(t_run_virtual(1, empty_first_race_root, NULL), 0);
}

/* ---- weft_spawn_ex with a compound literal ------------------------------ */

static int name_and_worker(void *arg)
{
    int *seen = arg;
    seen[0] = weft_worker_id();
    seen[1] = strcmp(weft_task_name(), "a") == 0;
    return 0;
}

static int spawn_ex_literal_root(void *unused)
{
    (void)unused;
    int seen[2] = {-1, 0};
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 0, 0);
    void *arg = seen;
    weft_fn fn = name_and_worker;
    /* The line as a user writes it: the macro must not split the literal
     * at its commas. */
    // clang-format off
    int rc = weft_spawn_ex(s, fn, arg, &(weft_spawn_opts){.name = "a", .worker = 1});
    // clang-format on
    ASSERT_EQ(rc, 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(seen[0], 0);
    ASSERT_EQ(seen[1], 1);
    return 0;
}

TEST(spawn_ex_takes_a_compound_literal)
{
    ASSERT_EQ(t_run_virtual(2, spawn_ex_literal_root, NULL), 0);
}

/* ---- WEFT_SERVE -------------------------------------------------------- */

struct serve {
    long n;
    unsigned char *seen; /* per child: how often the handler saw it */
    atomic_long calls, wrong, long_sleep_ok;
    weft_scope *s;
};

/* Child i fails with -(i + 1) if i % 3 == 1, else succeeds; each yields
 * once first, so children overlap. */
static int serve_child(void *arg)
{
    long i = (long)(intptr_t)arg;
    weft_yield();
    return i % 3 == 1 ? (int)-(i + 1) : 0;
}

static struct serve *serve_state;

static void serve_handler(void *ctx, const weft_child_failure *f)
{
    struct serve *v = ctx;
    long i = -(long)f->status - 1;
    atomic_fetch_add(&v->calls, 1);
    if (v != serve_state || i < 0 || i >= v->n || i % 3 != 1 ||
        strcmp(f->file, __FILE__) != 0 || f->name != NULL)
        atomic_fetch_add(&v->wrong, 1);
    else
        v->seen[i]++; /* one task per child: each index is its own */
}

/* A sibling that sleeps through all the failures: not cancelled. */
static int serve_long_sibling(void *arg)
{
    struct serve *v = arg;
    if (weft_sleep_for(WEFT_SEC) == 0 && weft_now() == WEFT_SEC)
        atomic_fetch_add(&v->long_sleep_ok, 1);
    return 0;
}

static int serve_many_root(void *arg)
{
    struct serve *v = arg;
    weft_scope_opts o = {
        .policy = WEFT_SERVE, .on_failure = serve_handler, .failure_ctx = v};
    ASSERT_EQ(weft_scope_open(&v->s, &o), 0);
    size_t at_open = weft__scope_footprint(v->s);
    ASSERT_EQ(weft_spawn(v->s, serve_long_sibling, v), 0);
    for (long i = 0; i < v->n; i++) {
        ASSERT_EQ(weft_spawn(v->s, serve_child, (void *)(intptr_t)i), 0);
        if (i % 1000 == 0)
            ASSERT_EQ(weft__scope_footprint(v->s), at_open);
    }
    ASSERT_EQ(weft_scope_join(v->s), 0);
    ASSERT_EQ(weft__scope_footprint(v->s), at_open);
    ASSERT(!weft_scope_cancelled(v->s));
    ASSERT_EQ(weft_scope_spawned(v->s), v->n + 1);
    ASSERT_EQ(weft_scope_failed(v->s), v->n / 3);
    int st;
    ASSERT_EQ(weft_scope_status(v->s, 0, &st), -ENODATA);
    ASSERT_EQ(weft_scope_winner(v->s), -ENOENT);
    ASSERT_EQ(weft_scope_free(v->s), 0);

    /* The accessor does measure: a collecting scope grows with its
     * children. */
    weft_scope *c = open_scope(WEFT_COLLECT, 0, 0);
    size_t collect_open = weft__scope_footprint(c);
    for (int i = 0; i < 1000; i++)
        ASSERT_EQ(weft_spawn(c, noop, NULL), i);
    ASSERT(weft__scope_footprint(c) >= collect_open + 1000 * sizeof(int64_t));
    ASSERT_EQ(weft_scope_join(c), 0);
    ASSERT_EQ(weft_scope_free(c), 0);
    return 0;
}

/* 200k children come and go; the scope's memory does not move, every
 * failure reaches the handler once with its own status, and no failure
 * cancels a sibling. */
TEST(serve_memory_constant_and_failures_reported_once)
{
    static struct serve v;
    v.n = T_SCALE(200000);
    v.n -= v.n % 3; /* so that exactly n / 3 fail */
    v.seen = calloc((size_t)v.n, 1);
    ASSERT(v.seen != NULL);
    serve_state = &v;
    ASSERT_EQ(t_run_virtual(2, serve_many_root, &v), 0);
    ASSERT_EQ(atomic_load(&v.wrong), 0);
    ASSERT_EQ(atomic_load(&v.calls), v.n / 3);
    for (long i = 0; i < v.n; i++)
        if (v.seen[i] != (i % 3 == 1))
            T_FAIL("child %ld reported %d times", i, v.seen[i]);
    ASSERT_EQ(atomic_load(&v.long_sleep_ok), 1);
    free(v.seen);
}

/* The handler gets the child's name and spawn site, on the child's own
 * task, before the child counts as finished. */
static int handler_line;
static atomic_int handler_ok;

static void site_handler(void *ctx, const weft_child_failure *f)
{
    weft_scope *s = *(weft_scope **)ctx;
    int ok = f->status == -EIO && f->name && strcmp(f->name, "conn") == 0 &&
             strcmp(f->file, __FILE__) == 0 && f->line == handler_line &&
             strcmp(weft_task_name(), "conn") == 0 && weft_scope_current() == s;
    /* It may block as the child could; join waits for it. */
    ok = ok && weft_sleep_for(WEFT_SEC) == 0;
    atomic_store(&handler_ok, ok);
}

static int fail_eio(void *arg)
{
    (void)arg;
    return -EIO;
}

static int serve_site_root(void *arg)
{
    (void)arg;
    static weft_scope *s;
    weft_scope_opts o = {
        .policy = WEFT_SERVE, .on_failure = site_handler, .failure_ctx = &s};
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    weft_spawn_opts so = {.name = "conn"};
    handler_line = __LINE__ + 1;
    ASSERT_EQ(weft_spawn_ex(s, fail_eio, NULL, &so), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(atomic_load(&handler_ok), 1);
    ASSERT_EQ(weft_scope_failed(s), 1);
    ASSERT_EQ(weft_scope_free(s), 0);

    /* on_failure belongs to WEFT_SERVE. */
    weft_scope *bad = (weft_scope *)0x1;
    o.policy = WEFT_COLLECT;
    ASSERT_EQ(weft_scope_open(&bad, &o), -EINVAL);
    ASSERT(bad == (weft_scope *)0x1);
    return 0;
}

TEST(serve_handler_sees_name_and_spawn_site)
{
    ASSERT_EQ(t_run_virtual(1, serve_site_root, NULL), 0);
}

/* The scope's cancel and its deadline still reach every child, on every
 * worker; the cancelled children reach the handler too. */
static atomic_long serve_cancelled_seen, serve_woken_ok;
static weft_time serve_expect_at;

static void count_cancelled(void *ctx, const weft_child_failure *f)
{
    (void)ctx;
    if (f->status == -ECANCELED)
        atomic_fetch_add(&serve_cancelled_seen, 1);
}

/* Sleeps "forever"; counts a wake by cancel at serve_expect_at, on the
 * worker it slept on. */
static int serve_sleeper(void *arg)
{
    struct mass *m = arg;
    int id = weft_worker_id();
    atomic_fetch_add(&m->per_worker[id], 1);
    atomic_fetch_add(&m->parked, 1);
    int r = weft_sleep_for(1000L * 86400 * WEFT_SEC);
    if (r == -ECANCELED && weft_now() == serve_expect_at &&
        weft_worker_id() == id)
        atomic_fetch_add(&serve_woken_ok, 1);
    return r;
}

static int serve_cancel_root(void *arg)
{
    struct mass *m = arg;
    for (int round = 0; round < 2; round++) {
        atomic_store(&m->parked, 0);
        serve_expect_at = round == 0 ? 3 * WEFT_SEC : 5 * WEFT_SEC;
        weft_scope_opts o = {.policy = WEFT_SERVE,
                             .on_failure = count_cancelled,
                             .deadline = round == 0 ? 3 * WEFT_SEC : 0};
        ASSERT_EQ(weft_scope_open(&m->s, &o), 0);
        for (long i = 0; i < m->n; i++) {
            weft_spawn_opts so = {.worker = (int)(i % 4) + 1};
            ASSERT_EQ(weft_spawn_ex(m->s, serve_sleeper, m, &so), 0);
        }
        if (round == 1) {
            ASSERT_EQ(weft_sleep_for(2 * WEFT_SEC), 0); /* all parked by then */
            ASSERT_EQ(atomic_load(&m->parked), m->n);
            ASSERT_EQ(weft_scope_cancel(m->s), 0);
        }
        ASSERT_EQ(weft_scope_join(m->s), round == 0 ? -ETIMEDOUT : -ECANCELED);
        ASSERT_EQ(weft_now(), serve_expect_at);
        ASSERT_EQ(weft_scope_failed(m->s), m->n);
        ASSERT_EQ(weft_scope_free(m->s), 0);
    }
    return 0;
}

TEST(serve_cancel_and_deadline_reach_all_children)
{
    static struct mass m;
    m.n = T_LIVE(4000);
    ASSERT_EQ(t_run_virtual(4, serve_cancel_root, &m), 0);
    ASSERT_EQ(atomic_load(&serve_woken_ok), 2 * m.n);
    ASSERT_EQ(atomic_load(&serve_cancelled_seen), 2 * m.n);
    for (int i = 0; i < 4; i++)
        ASSERT(atomic_load(&m.per_worker[i]) > 0);
}

/* Without a handler, failures are lines on stderr: none for -ECANCELED,
 * at most 10 a second, the rest counted on the next line or at join. */
struct logrun {
    int fail_now, cancelled_now, fail_later;
};

static int return_arg(void *arg)
{
    return (int)(intptr_t)arg;
}

static int serve_log_root(void *arg)
{
    struct logrun *r = arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_SERVE}), 0);
    weft_spawn_opts named = {.name = "conn"};
    for (int i = 0; i < r->fail_now; i++)
        ASSERT_EQ(
            weft_spawn_ex(s, return_arg, (void *)(intptr_t)-EPIPE, &named), 0);
    for (int i = 0; i < r->cancelled_now; i++)
        ASSERT_EQ(weft_spawn(s, return_arg, (void *)(intptr_t)-ECANCELED), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0); /* a new window */
    for (int i = 0; i < r->fail_later; i++)
        ASSERT_EQ(weft_spawn(s, return_arg, (void *)(intptr_t)-EIO), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_failed(s),
              r->fail_now + r->cancelled_now + r->fail_later);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

static int count_substr(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

TEST(serve_default_log_is_rate_limited)
{
    FILE *log = tmpfile();
    ASSERT(log != NULL);
    fflush(stderr);
    int saved = dup(2);
    ASSERT(saved >= 0);
    ASSERT(dup2(fileno(log), 2) == 2);
    struct logrun r = {.fail_now = 25, .cancelled_now = 5, .fail_later = 13};
    int rc = t_run_virtual(1, serve_log_root, &r);
    fflush(stderr);
    ASSERT(dup2(saved, 2) == 2);
    close(saved);
    ASSERT_EQ(rc, 0);
    char buf[8192];
    rewind(log);
    size_t len = fread(buf, 1, sizeof buf - 1, log);
    buf[len] = 0;
    fclose(log);
    /* First window: 10 of 25 shown, 15 left out; second window: the first
     * line says so, 9 more, then 3 left out and said at join. */
    ASSERT_EQ(count_substr(buf, "weft: task \"conn\" spawned at "), 10);
    ASSERT_EQ(count_substr(buf, "failed: "), 10 + 10);
    ASSERT_EQ(count_substr(buf, "(15 earlier failures not shown)"), 1);
    ASSERT_EQ(count_substr(buf, "weft: 3 more failed tasks"), 1);
    ASSERT_EQ(count_substr(buf, "\n"), 10 + 10 + 1);
    ASSERT_EQ(count_substr(buf, "(-32)"), 10); /* -EPIPE */
    ASSERT_EQ(count_substr(buf, "(-5)"), 10);  /* -EIO */
    ASSERT_EQ(count_substr(buf, __FILE__), 20);
}

/* ================= the join on the wait layer, select's case ============ */

struct sleeper {
    weft_time ns;
    int status;
    weft_task *owner;
    weft_scope *s;
    const weft__wait_kind *kind;
    const void *obj;
};

static int sleeper_fn(void *arg)
{
    struct sleeper *p = arg;
    if (p->owner) { /* the owner is parked in join by now (one worker) */
        p->kind = weft__task_wait_kind(p->owner);
        p->obj = weft__task_wait_obj(p->owner);
    }
    weft_sleep_for(p->ns);
    return p->status;
}

/* One scope case through the select protocol of wait.h: check, lock,
 * try, wait_many on its queue if it is not ready, then won in both
 * paths. Returns the case's index (0) or an error. */
static int scope_case_select(weft_case *c, int64_t deadline)
{
    int rc = weft__scope_case_check(c);
    if (rc)
        return rc;
    weft__arm a;
    memset(&a, 0, sizeof a);
    a.lock = weft__scope_case_lock(c);
    weft__lock *order[1];
    int k = weft__locks_order(&a, 1, order);
    weft__locks_acquire(order, k);
    weft__chain woken;
    weft__chain_init(&woken);
    rc = weft__scope_case_try(c, &a, &woken);
    int code = 0;
    if (rc == 0) {
        weft__locks_release(order, k);
        weft__wake_chain(woken.head, 0);
    } else {
        ASSERT_EQ(rc, -EAGAIN);
        ASSERT(a.q != NULL);
        rc = weft__wait_many(order, k, &a, 1, WEFT__W_SELECT, c, deadline,
                             &code);
    }
    if (rc >= 0)
        weft__scope_case_won(c, code);
    return rc;
}

static int join_records_root(void *arg)
{
    (void)arg;
    weft_scope *s = open_scope(WEFT_FAIL_FAST, 0, 0);
    struct sleeper p = {.ns = WEFT_SEC, .owner = weft__current(), .s = s};
    ASSERT(weft_spawn(s, sleeper_fn, &p) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT(p.kind == &weft__wk_scope);
    ASSERT(p.obj == (const void *)s);
    ASSERT(weft__waitq_empty(&s->done));
    ASSERT_EQ(weft_scope_free(s), 0);

    /* Firm: a cancel of the scope does not end the join early. */
    s = open_scope(WEFT_FAIL_FAST, 0, 0);
    struct sleeper q = {.ns = 2 * WEFT_SEC};
    ASSERT(weft_spawn(s, sleeper_fn, &q) >= 0);
    ASSERT_EQ(weft_scope_set_deadline(s, 3 * WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(join_waits_on_the_wait_layer)
{
    ASSERT_EQ(t_run_virtual(1, join_records_root, NULL), 0);
}

struct foreign_case {
    weft_scope *s;
    int rc;
};

static int foreign_case_fn(void *arg)
{
    struct foreign_case *f = arg;
    weft_case c;
    memset(&c, 0, sizeof c);
    c.op = WEFT_OP_SCOPE;
    c.scope = f->s;
    f->rc = weft__scope_case_check(&c);
    return 0;
}

static int scope_case_root(void *arg)
{
    (void)arg;
    weft_case c;
    memset(&c, 0, sizeof c);
    c.op = WEFT_OP_SCOPE;
    ASSERT_EQ(weft__scope_case_check(&c), 1); /* off */

    /* The scope is the select's task's current one: a cancel of it (here
     * by its policy, when the winner ends) ends the select, a cancellation
     * point, before the last exit; the join comes after. */
    weft_scope *s = open_scope(WEFT_RACE, 0, 0);
    c.scope = s;
    ASSERT_EQ(weft__scope_case_check(&c), 0);
    struct sleeper a = {.ns = WEFT_SEC, .status = -EIO};
    struct sleeper b = {.ns = 2 * WEFT_SEC};
    ASSERT(weft_spawn(s, sleeper_fn, &a) >= 0);
    ASSERT(weft_spawn(s, sleeper_fn, &b) >= 0);
    c.rc = 99;
    ASSERT_EQ(scope_case_select(&c, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(c.rc, 99);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT(weft_scope_current() == s);
    ASSERT_EQ(weft_scope_join(s), -EIO); /* the winner's status */
    ASSERT(weft_scope_current() != s);
    ASSERT_EQ(weft__scope_case_check(&c), -EINVAL); /* joined already */
    ASSERT(weft__waitq_empty(&s->done));
    ASSERT_EQ(weft_scope_free(s), 0);

    /* Children running: the select waits for the last one, whose exit
     * claims its waiter, then joins: rc is the join's. */
    s = open_scope(WEFT_COLLECT, 0, 0);
    c.scope = s;
    a = (struct sleeper){.ns = WEFT_SEC, .status = -EIO};
    b = (struct sleeper){.ns = 2 * WEFT_SEC};
    ASSERT(weft_spawn(s, sleeper_fn, &a) >= 0);
    ASSERT(weft_spawn(s, sleeper_fn, &b) >= 0);
    struct foreign_case fc = {s, 99};
    /* A task of the scope is not its owner: -EPERM. */
    ASSERT(weft_spawn(s, foreign_case_fn, &fc) >= 0);
    weft_time t0 = weft_now();
    c.rc = 99;
    ASSERT_EQ(scope_case_select(&c, WEFT_NEVER), 0);
    ASSERT_EQ(fc.rc, -EPERM);
    ASSERT_EQ(c.rc, 0);
    ASSERT_EQ(weft_now(), t0 + 2 * WEFT_SEC);
    ASSERT(weft_scope_current() != s);
    int st = 0;
    ASSERT_EQ(weft_scope_status(s, 0, &st), 0);
    ASSERT_EQ(st, -EIO);
    ASSERT_EQ(weft_scope_free(s), 0);

    /* No child running: try is ready, won joins without waiting. */
    s = open_scope(WEFT_COLLECT, 0, 0);
    c.scope = s;
    struct sleeper z = {.ns = 0, .status = -EPIPE};
    ASSERT(weft_spawn(s, sleeper_fn, &z) >= 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    c.rc = 99;
    ASSERT_EQ(scope_case_select(&c, WEFT_NEVER), 0);
    ASSERT_EQ(c.rc, 0); /* COLLECT */
    ASSERT_EQ(weft_scope_status(s, 0, &st), 0);
    ASSERT_EQ(st, -EPIPE);
    ASSERT_EQ(weft_scope_free(s), 0);
    s = open_scope(WEFT_FIRST, 0, 0); /* no child at all */
    c.scope = s;
    ASSERT_EQ(scope_case_select(&c, WEFT_NEVER), 0);
    ASSERT_EQ(c.rc, -ENOENT);
    ASSERT_EQ(weft_scope_free(s), 0);

    /* Not the innermost open scope: -EINVAL, as join says. */
    s = open_scope(WEFT_FAIL_FAST, 0, 0);
    weft_scope *inner = open_scope(WEFT_FAIL_FAST, 0, 0);
    c.scope = s;
    ASSERT_EQ(weft__scope_case_check(&c), -EINVAL);
    scope_end(inner);
    ASSERT_EQ(weft__scope_case_check(&c), 0);

    /* A select that times out leaves the scope as it was, with no waiter
     * on its queue; a join afterwards waits as usual. */
    struct sleeper l = {.ns = 5 * WEFT_SEC};
    ASSERT(weft_spawn(s, sleeper_fn, &l) >= 0);
    t0 = weft_now();
    ASSERT_EQ(scope_case_select(&c, t0 + WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + WEFT_SEC);
    ASSERT(weft__waitq_empty(&s->done));
    ASSERT(weft_scope_current() == s);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_now(), t0 + 5 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(select_scope_case_functions)
{
    ASSERT_EQ(t_run_virtual(1, scope_case_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, scope_case_root, NULL), 0);
}

/* The policy tables (policy.h) driven directly: what each decides. */
static unsigned pol_done(const weft__policy *p, weft__policy_state *st, int i,
                         int status)
{
    return weft__policy_child_done(p, st, i, status, false);
}

TEST(policy_tables)
{
    const unsigned dc = WEFT__POL_DECIDED | WEFT__POL_CANCEL;
    ASSERT(weft__policy_of(WEFT_FAIL_FAST) == &weft__policy_fail_fast);
    ASSERT(weft__policy_of(WEFT_COLLECT) == &weft__policy_collect);
    ASSERT(weft__policy_of(WEFT_FIRST) == &weft__policy_first);
    ASSERT(weft__policy_of(WEFT_RACE) == &weft__policy_race);
    ASSERT(weft__policy_of(WEFT_SERVE) == &weft__policy_serve);
    ASSERT(weft__policy_of((weft_policy)5) == NULL);
    ASSERT(weft__policy_of((weft_policy)-1) == NULL);

    weft__policy_state st;
    const weft__policy *p = &weft__policy_fail_fast;
    weft__policy_start(&st);
    ASSERT_EQ(pol_done(p, &st, 0, 3), 0u);
    ASSERT_EQ(pol_done(p, &st, 1, -EIO), dc);
    ASSERT_EQ(p->result(&st, -ETIMEDOUT, 2), -EIO);
    weft__policy_start(&st);
    ASSERT_EQ(p->done(&st, 0, -EIO, true), 0u); /* after a cancel */
    ASSERT_EQ(p->result(&st, -ECANCELED, 1), -ECANCELED);
    ASSERT_EQ(p->result(&st, 0, 1), 0);

    p = &weft__policy_collect;
    weft__policy_start(&st);
    ASSERT_EQ(pol_done(p, &st, 0, -EIO), 0u);
    ASSERT_EQ(pol_done(p, &st, 1, 0), 0u);
    ASSERT_EQ(p->result(&st, 0, 2), 0);
    ASSERT_EQ(p->result(&st, -ETIMEDOUT, 2), -ETIMEDOUT);

    p = &weft__policy_first;
    weft__policy_start(&st);
    ASSERT_EQ(pol_done(p, &st, 0, -EIO), 0u);
    ASSERT_EQ(pol_done(p, &st, 1, -EPIPE), 0u);
    ASSERT_EQ(p->result(&st, 0, 2), -EIO); /* every one failed: the first */
    ASSERT_EQ(p->result(&st, -ECANCELED, 2), -ECANCELED);
    ASSERT_EQ(pol_done(p, &st, 2, 5), dc);
    ASSERT_EQ(st.winner, 2);
    ASSERT_EQ(pol_done(p, &st, 3, 0), 0u); /* one winner */
    ASSERT_EQ(st.winner, 2);
    ASSERT_EQ(p->result(&st, -ECANCELED, 4), 0);
    weft__policy_start(&st);
    ASSERT_EQ(p->result(&st, 0, 0), -ENOENT);
    ASSERT_EQ(p->done(&st, 0, 0, true), 0u); /* a success after a cancel */
    ASSERT_EQ(st.winner, -1);

    p = &weft__policy_race;
    weft__policy_start(&st);
    ASSERT_EQ(pol_done(p, &st, 1, -EPIPE), dc);
    ASSERT_EQ(pol_done(p, &st, 0, 0), 0u);
    ASSERT_EQ(st.winner, 1);
    ASSERT_EQ(p->result(&st, -ECANCELED, 2), -EPIPE);
    weft__policy_start(&st);
    ASSERT_EQ(p->result(&st, 0, 0), -ENOENT);
    ASSERT_EQ(p->result(&st, -ETIMEDOUT, 3), -ETIMEDOUT);

    p = &weft__policy_serve;
    weft__policy_start(&st);
    ASSERT_EQ(pol_done(p, &st, 0, -EIO), 0u);
    ASSERT_EQ(p->result(&st, 0, 1), 0);
    ASSERT(p->flags & WEFT__POL_UNINDEXED);
    ASSERT(p->flags & WEFT__POL_REPORT);
}

/* ---- background children ---- */

static int bg_fail_when_set(void *arg)
{
    weft_event *e = arg;
    int rc = weft_event_wait(e);
    return rc ? rc : -EIO;
}

static int bg_ok(void *arg)
{
    (void)arg;
    return 0;
}

static int background_root(void *arg)
{
    (void)arg;
    weft_event e = WEFT_EVENT_INIT;
    weft_task_handle h;
    const weft_spawn_opts bg = {.background = 1, .handle = &h};

    /* Fail-fast: the background child's failure cancels nobody and is not
     * the scope's result; it has no index and is not counted. */
    weft_scope *s = NULL;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT_EQ(weft_spawn_ex(s, bg_fail_when_set, &e, &bg), 0);
    ASSERT_EQ(weft_spawn(s, bg_ok, NULL), 0); /* the first index */
    ASSERT_EQ(weft_scope_spawned(s), 1);
    ASSERT_EQ(weft_event_set(&e), 0);
    ASSERT_EQ(weft_scope_join(s), 0); /* waits for it all the same */
    ASSERT_EQ(weft_scope_failed(s), 0);
    ASSERT_EQ(weft_scope_cancelled(s), 0);
    int st = 0;
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(st, -EIO);
    ASSERT_EQ(weft_scope_free(s), 0);

    /* A cancel of the scope reaches it like any child. */
    ASSERT_EQ(weft_event_reset(&e), 0);
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT_EQ(weft_spawn_ex(s, bg_fail_when_set, &e, &bg), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(st, -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);

    /* A race of background children alone has no winner. */
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_RACE}), 0);
    ASSERT_EQ(
        weft_spawn_ex(s, bg_ok, NULL, &(weft_spawn_opts){.background = 1}), 0);
    ASSERT_EQ(weft_scope_join(s), -ENOENT);
    ASSERT_EQ(weft_scope_winner(s), -ENOENT);
    ASSERT_EQ(weft_scope_free(s), 0);

    /* Collect: no status slot for it; the ordinary child is number 0. */
    ASSERT_EQ(weft_event_set(&e), 0);
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_COLLECT}),
              0);
    ASSERT_EQ(
        weft_spawn_ex(s, bg_ok, NULL, &(weft_spawn_opts){.background = 1}), 0);
    ASSERT_EQ(weft_spawn(s, bg_fail_when_set, &e), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_spawned(s), 1);
    ASSERT_EQ(weft_scope_status(s, 0, &st), 0);
    ASSERT_EQ(st, -EIO);
    ASSERT_EQ(weft_scope_status(s, 1, &st), -ENOENT);
    ASSERT_EQ(weft_scope_free(s), 0);

    ASSERT_EQ(
        weft_spawn_ex(NULL, bg_ok, NULL, &(weft_spawn_opts){.background = 2}),
        -EINVAL);
    return 0;
}

/* weft_spawn_opts.background: waited for and cancelled with its scope,
 * never seen by the scope's policy, on one worker and across two. */
TEST(background_children_are_outside_the_policy)
{
    ASSERT_EQ(t_run_virtual(1, background_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, background_root, NULL), 0);
}
