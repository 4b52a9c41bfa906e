/* SPDX-License-Identifier: MIT */
/*
 * Scopes: structured concurrency, policies, cancellation, deadlines,
 * shields and misuse. Times are exact: every test that measures time runs
 * on the virtual clock.
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

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
    int got;       /* what weft_sleep returned */
    weft_time at;  /* weft_now() when it returned */
    int done;
};

static int kid_fn(void *arg)
{
    struct kid *k = arg;
    k->got = weft_sleep(k->sleep);
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
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
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
    ASSERT_EQ(weft_sleep(5 * WEFT_SEC), -ECANCELED);
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
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
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
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
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
    ASSERT_EQ(weft_sleep(7 * WEFT_SEC), -ECANCELED);
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
    ASSERT_EQ(weft_sleep(2500 * WEFT_MSEC), 0); /* not cancelled */
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
    ASSERT_EQ(weft_sleep(100 * WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_now(), 1 * WEFT_SEC);
    for (int i = 0; i < 5; i++) {
        ASSERT_EQ(weft_cancelled(), 1);
        ASSERT_EQ(weft_sleep(WEFT_SEC), -ECANCELED);
        ASSERT_EQ(weft_sleep_until(WEFT_NEVER), -ECANCELED);
        ASSERT_EQ(weft_yield(), 0); /* not a cancellation point */
        ASSERT_EQ(weft_now(), 1 * WEFT_SEC);
    }
    /* A scope opened inside a cancelled scope starts cancelled, and
     * nothing can be spawned into it. */
    weft_scope *in;
    ASSERT_EQ(weft_scope_open(&in, NULL), 0);
    ASSERT(weft_scope_cancelled(in));
    ASSERT_EQ(weft_sleep(WEFT_SEC), -ECANCELED);
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
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0); /* idempotent */
    ASSERT_EQ(weft_cancelled(), 1);
    ASSERT_EQ(weft_sleep(WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_cancelled(), 0);
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
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
        ASSERT_EQ(weft_sleep(WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_scope_join(in), -ECANCELED);
    ASSERT(weft_scope_current() == outer);
    ASSERT_EQ(weft_cancelled(), 0);
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
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
    int r = weft_sleep(1000 * WEFT_SEC);
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
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
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
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
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
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
    atomic_fetch_add(&shield_steps, 1);
    return 0;
}

static int shielded_child(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep(10 * WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_now(), 1 * WEFT_SEC);
    /* Cleanup under a shield may block. */
    weft_scope *sh = open_scope(WEFT_FAIL_FAST, 0, 1);
    ASSERT_EQ(weft_cancelled(), 0);
    ASSERT(!weft_scope_cancelled(sh));
    ASSERT(weft_spawn(sh, cleanup_helper, NULL) >= 0);
    ASSERT_EQ(weft_sleep(2 * WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    /* A scope nested in the shield is protected too. */
    weft_scope *in = open_scope(WEFT_FAIL_FAST, 0, 0);
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_join(in), 0);
    ASSERT_EQ(weft_scope_free(in), 0);
    ASSERT_EQ(weft_scope_join(sh), 0);
    ASSERT_EQ(weft_scope_free(sh), 0);
    ASSERT_EQ(weft_now(), 4 * WEFT_SEC);
    atomic_fetch_add(&shield_steps, 1);
    /* Out of the shield: cancelled again. */
    ASSERT_EQ(weft_cancelled(), 1);
    ASSERT_EQ(weft_sleep(WEFT_SEC), -ECANCELED);

    /* The shield's own deadline still applies. */
    sh = open_scope(WEFT_FAIL_FAST, weft_now() + 500 * WEFT_MSEC, 1);
    ASSERT_EQ(weft_sleep(5 * WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_now(), 4500 * WEFT_MSEC);
    ASSERT_EQ(weft_scope_join(sh), -ETIMEDOUT);
    ASSERT_EQ(weft_scope_free(sh), 0);

    /* And so does weft_scope_cancel on the shield itself. */
    sh = open_scope(WEFT_FAIL_FAST, 0, 1);
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(sh), 0);
    ASSERT_EQ(weft_sleep(WEFT_SEC), -ECANCELED);
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
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
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
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
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
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
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
    ASSERT_EQ(weft_with_timeout(WEFT_SEC, NULL, NULL), -EINVAL);
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

/* ---- weft_with_timeout ------------------------------------------------ */

static int sleep_then_ret(void *arg)
{
    struct kid *k = arg;
    return kid_fn(k);
}

static int ignore_cancel(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep(10 * WEFT_SEC), -ECANCELED);
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
    return weft_sleep(10 * WEFT_SEC);
}

static int inner_timeout(void *arg)
{
    struct kid *k = arg;
    /* The inner deadline is later than the outer one. */
    int r = weft_with_timeout(100 * WEFT_SEC, sleep_then_ret, k);
    ASSERT_EQ(r, -ECANCELED);
    return r;
}

static int with_timeout_root(void *arg)
{
    (void)arg;
    struct kid fast = {.sleep = WEFT_SEC, .ret = 0};
    ASSERT_EQ(weft_with_timeout(2 * WEFT_SEC, sleep_then_ret, &fast), 0);
    ASSERT_EQ(weft_now(), 1 * WEFT_SEC);

    struct kid fail = {.sleep = WEFT_SEC, .ret = -EIO};
    ASSERT_EQ(weft_with_timeout(2 * WEFT_SEC, sleep_then_ret, &fail), -EIO);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);

    struct kid slow = {.sleep = 5 * WEFT_SEC, .ret = 0};
    ASSERT_EQ(weft_with_timeout(2 * WEFT_SEC, sleep_then_ret, &slow),
              -ETIMEDOUT);
    ASSERT_EQ(slow.got, -ECANCELED);
    ASSERT_EQ(slow.at, 4 * WEFT_SEC);
    ASSERT_EQ(weft_now(), 4 * WEFT_SEC);
    ASSERT_EQ(weft_cancelled(), 0); /* the timeout scope is gone */

    /* fn that swallows the cancellation: its result stands. */
    ASSERT_EQ(weft_with_timeout(WEFT_SEC, ignore_cancel, NULL), 0);
    ASSERT_EQ(weft_now(), 5 * WEFT_SEC);

    /* Children spawned by fn into its scope are cancelled at the deadline
     * and waited for. */
    ASSERT_EQ(weft_with_timeout(3 * WEFT_SEC, spawn_then_sleep, NULL),
              -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 8 * WEFT_SEC);
    for (int i = 0; i < 3; i++) {
        ASSERT(wt_kids[i].done);
        ASSERT_EQ(wt_kids[i].got, -ECANCELED);
        ASSERT_EQ(wt_kids[i].at, 8 * WEFT_SEC);
    }

    /* Nested: the outer deadline cancels fn inside the inner one. */
    struct kid nested = {.sleep = 50 * WEFT_SEC};
    ASSERT_EQ(weft_with_timeout(2 * WEFT_SEC, inner_timeout, &nested),
              -ETIMEDOUT);
    ASSERT_EQ(nested.at, 10 * WEFT_SEC);
    ASSERT_EQ(weft_now(), 10 * WEFT_SEC);

    /* A long timeout that fn beats leaves no timer behind. */
    struct kid quick = {.sleep = 1, .ret = 0};
    ASSERT_EQ(weft_with_timeout(1000 * WEFT_SEC, sleep_then_ret, &quick), 0);
    ASSERT_EQ(weft_now(), 10 * WEFT_SEC + 1);
    return 0;
}

TEST(with_timeout_fast_slow_exact)
{
    ASSERT_EQ(t_run_virtual(1, with_timeout_root, NULL), 0);
}

/* fn returns leaving a scope it opened unjoined (with a child asleep in
 * it): weft_with_timeout joins it (the child runs to the timeout's
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
    return weft_sleep(WEFT_SEC);
}

static int with_timeout_leftover_root(void *arg)
{
    (void)arg;
    /* A timeout of 0 (or less) is a deadline that has come, even at the
     * virtual clock's start: fn runs cancelled. */
    ASSERT_EQ(weft_now(), 0);
    ASSERT_EQ(weft_with_timeout(0, sleep_one_sec, NULL), -ETIMEDOUT);
    ASSERT_EQ(weft_with_timeout(-5, sleep_one_sec, NULL), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 0);
    weft_scope *mine = weft_scope_current();
    ASSERT_EQ(
        weft_with_timeout(WEFT_SEC, leaves_scope_open, (void *)(intptr_t)-EIO),
        -ETIMEDOUT);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(leftover_kid.got, -ECANCELED);
    ASSERT_EQ(leftover_kid.at, WEFT_SEC);
    ASSERT(weft_scope_current() == mine);
    ASSERT_EQ(weft_sleep(5 * WEFT_SEC), 0); /* nothing left to cancel us */
    /* Success: the result stands, the leftover is joined all the same. */
    ASSERT_EQ(weft_with_timeout(WEFT_SEC, leaves_scope_open, (void *)7), 7);
    ASSERT_EQ(weft_now(), 7 * WEFT_SEC);
    ASSERT(weft_scope_current() == mine);
    ASSERT_EQ(weft_sleep(5 * WEFT_SEC), 0);
    return 0;
}

TEST(with_timeout_joins_scopes_fn_left_open)
{
    ASSERT_EQ(t_run_virtual(1, with_timeout_leftover_root, NULL), 0);
}

/* Misuse: fn joins the scope weft_with_timeout opened for it. The scopes
 * around the call are the caller's and stay so: weft_with_timeout joins
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
    ASSERT_EQ(weft_with_timeout(WEFT_SEC, joins_its_own_scope, NULL), 7);
    ASSERT(weft_scope_current() == p);
    ASSERT(weft_spawn(p, sleep_one_sec, NULL) >= 0);
    ASSERT_EQ(weft_scope_join(p), 0);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(weft_scope_free(p), 0);
    /* Straight under the root's scope too. */
    ASSERT_EQ(weft_with_timeout(WEFT_SEC, joins_its_own_scope, NULL), 7);
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
    int r = weft_sleep(d);
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
    int r = weft_sleep(1000 * WEFT_SEC);
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
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
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
    int r = weft_sleep(1000L * 86400 * WEFT_SEC);
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
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
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
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
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
    int r = weft_sleep(3600 * WEFT_SEC);
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
    ASSERT_EQ(weft_sleep(WEFT_SEC), 0);
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
