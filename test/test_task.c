/* SPDX-License-Identifier: MIT */
/*
 * Task handles: cancel one task, join it for its status, release it; the
 * handle's lifetime, stale and foreign handles, and how a handle's task
 * still lives in its scope. Times are exact: the virtual clock.
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define FOREVER (1000L * 86400 * WEFT_SEC)

/* Spawns fn(arg) into s with a handle, or fails the test. */
static weft_task_handle spawn_h(weft_scope *s, weft_fn fn, void *arg)
{
    weft_task_handle h = {0};
    ASSERT(weft_spawn_ex(s, fn, arg, &(weft_spawn_opts){.handle = &h}) >= 0);
    ASSERT(h.id != 0);
    return h;
}

/* Sleeps `ns`, records what the sleep returned and when, then returns the
 * sleep's result, or `ret` after a full sleep. */
struct sleeper {
    int64_t ns;
    int ret;
    int got, again, cancelled_flag;
    weft_time at;
    int worker, woke_on;
};

static int sleeper_fn(void *arg)
{
    struct sleeper *k = arg;
    k->worker = weft_worker_id();
    k->got = weft_sleep_for(k->ns);
    k->at = weft_now();
    k->woke_on = weft_worker_id();
    k->cancelled_flag = weft_cancelled();
    k->again = weft_sleep_for(WEFT_SEC); /* level-triggered: fails at once */
    return k->got ? k->got : k->ret;
}

/* ---- cancel ---------------------------------------------------------- */

/* A cancel wakes the task blocked in a cancellation point, and every later
 * one fails too; its scope and its sibling are not cancelled. */
static int cancel_root(void *arg)
{
    (void)arg;
    static struct sleeper a = {.ns = FOREVER}, b = {.ns = 2 * WEFT_SEC};
    weft_scope *s = scope_open();
    weft_task_handle ha = spawn_h(s, sleeper_fn, &a);
    weft_task_handle hb = spawn_h(s, sleeper_fn, &b);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_task_cancel(ha), 0);
    ASSERT_EQ(weft_task_cancel(ha), 0); /* idempotent */
    int st = 0;
    ASSERT_EQ(weft_task_join(ha, &st), 0);
    ASSERT_EQ(st, -ECANCELED);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(a.got, -ECANCELED);
    ASSERT_EQ(a.at, WEFT_SEC);
    ASSERT_EQ(a.again, -ECANCELED);
    ASSERT_EQ(a.cancelled_flag, 1);
    ASSERT(!weft_scope_cancelled(s));
    ASSERT_EQ(weft_cancelled(), 0);
    ASSERT_EQ(weft_task_join(hb, &st), 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(b.got, 0);
    ASSERT_EQ(b.at, 2 * WEFT_SEC);
    ASSERT_EQ(b.again, 0); /* not cancelled: slept its second in full */
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    scope_end(s); /* fail-fast: -ECANCELED of a did not cancel b */
    return 0;
}

TEST(cancel_wakes_the_task_alone_level_triggered)
{
    ASSERT_EQ(t_run_virtual(1, cancel_root, NULL), 0);
}

/* The cancel flows into the scopes the task opens (and their children),
 * not into a shielded one. */
static struct sleeper inner_kid = {.ns = FOREVER};
static int shielded_sleep;

static int opener(void *arg)
{
    (void)arg;
    weft_scope *in = scope_open();
    ASSERT_EQ(weft_spawn(in, sleeper_fn, &inner_kid), 0);
    int rc = weft_scope_join(in); /* the cancel reaches inner_kid */
    ASSERT_EQ(weft_scope_free(in), 0);
    ASSERT_EQ(weft_cancelled(), 1);
    weft_scope *sh;
    ASSERT_EQ(weft_scope_open(&sh, &(weft_scope_opts){.shield = 1}), 0);
    shielded_sleep = weft_sleep_for(WEFT_SEC);
    ASSERT_EQ(weft_scope_join(sh), 0);
    ASSERT_EQ(weft_scope_free(sh), 0);
    return rc;
}

static int cancel_nested_root(void *arg)
{
    (void)arg;
    weft_scope *s = scope_open();
    weft_task_handle h = spawn_h(s, opener, NULL);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_task_cancel(h), 0);
    int st = 0;
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(st, -ECANCELED);
    ASSERT_EQ(inner_kid.got, -ECANCELED);
    ASSERT_EQ(inner_kid.at, WEFT_SEC);
    ASSERT_EQ(shielded_sleep, 0);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);
    ASSERT(!weft_scope_cancelled(s));
    scope_end(s);
    return 0;
}

TEST(cancel_reaches_scopes_the_task_opens_not_shields)
{
    ASSERT_EQ(t_run_virtual(1, cancel_nested_root, NULL), 0);
}

/* The task's scope still rules: its cancel and its deadline reach a task
 * with a handle; a failure of such a task in a fail-fast scope cancels its
 * siblings as any child's would. */
static int fail_later(void *arg)
{
    (void)arg;
    int rc = weft_sleep_for(WEFT_SEC);
    return rc ? rc : -EIO;
}

static int scope_rules_root(void *arg)
{
    (void)arg;
    static struct sleeper k = {.ns = FOREVER};
    weft_scope *s = scope_open();
    weft_task_handle h = spawn_h(s, sleeper_fn, &k);
    ASSERT_EQ(weft_scope_spawned(s), 1);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED); /* it waited for the task */
    ASSERT_EQ(k.got, -ECANCELED);
    ASSERT_EQ(k.at, WEFT_SEC);
    ASSERT_EQ(weft_scope_failed(s), 1);
    ASSERT_EQ(weft_scope_free(s), 0);
    int st = 0;
    ASSERT_EQ(weft_task_join(h, &st), 0); /* after the scope: still valid */
    ASSERT_EQ(st, -ECANCELED);

    weft_scope *d;
    weft_scope_opts o = {.deadline = 3 * WEFT_SEC};
    ASSERT_EQ(weft_scope_open(&d, &o), 0);
    k = (struct sleeper){.ns = FOREVER};
    h = spawn_h(d, sleeper_fn, &k);
    ASSERT_EQ(weft_scope_join(d), -ETIMEDOUT);
    ASSERT_EQ(k.at, 3 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(d), 0);
    ASSERT_EQ(weft_task_detach(h), 0);

    s = scope_open();
    k = (struct sleeper){.ns = FOREVER};
    h = spawn_h(s, fail_later, NULL);
    ASSERT_EQ(weft_spawn(s, sleeper_fn, &k), 1);
    ASSERT_EQ(weft_scope_join(s), -EIO);
    ASSERT_EQ(k.got, -ECANCELED);
    ASSERT_EQ(k.at, 4 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(st, -EIO);
    return 0;
}

TEST(scope_cancel_deadline_and_policy_still_apply)
{
    ASSERT_EQ(t_run_virtual(1, scope_rules_root, NULL), 0);
}

/* A task stopped through its handle that returns -ECANCELED is not a
 * result for its scope's policy: no fail-fast cancel (cancel_root), no
 * WEFT_RACE win, no WEFT_FIRST first failure; its status is kept. A task
 * cancelled from above is no such exception. */
static int policy_root(void *arg)
{
    (void)arg;
    static struct sleeper a = {.ns = FOREVER}, b = {.ns = 2 * WEFT_SEC};
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_RACE}), 0);
    b.ret = 9;
    weft_task_handle h = spawn_h(s, sleeper_fn, &a);
    ASSERT_EQ(weft_spawn(s, sleeper_fn, &b), 1);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_task_cancel(h), 0);
    ASSERT_EQ(weft_scope_join(s), 9);
    ASSERT_EQ(weft_scope_winner(s), 1);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    int st;
    ASSERT_EQ(weft_scope_status(s, 0, &st), 0);
    ASSERT_EQ(st, -ECANCELED);
    ASSERT_EQ(weft_scope_failed(s), 1);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_task_detach(h), 0);

    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_FIRST}), 0);
    a = (struct sleeper){.ns = FOREVER};
    b = (struct sleeper){.ns = 2 * WEFT_SEC, .ret = -EIO};
    h = spawn_h(s, sleeper_fn, &a);
    ASSERT_EQ(weft_spawn(s, sleeper_fn, &b), 1);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_task_cancel(h), 0);
    ASSERT_EQ(weft_scope_join(s), -EIO); /* not a's -ECANCELED */
    ASSERT_EQ(weft_scope_failed(s), 2);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(st, -ECANCELED);
    return 0;
}

TEST(handle_cancel_is_not_a_result_for_the_policy)
{
    ASSERT_EQ(t_run_virtual(1, policy_root, NULL), 0);
}

/* ---- join ------------------------------------------------------------ */

static int returns_arg_after(void *arg)
{
    int ret = (int)(intptr_t)arg;
    weft_sleep_for(2 * WEFT_SEC);
    return ret;
}

static int returns_arg(void *arg)
{
    return (int)(intptr_t)arg;
}

static int join_root(void *arg)
{
    (void)arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_COLLECT}),
              0);
    /* Before the exit: join blocks until it. */
    weft_task_handle h = spawn_h(s, returns_arg_after, (void *)(intptr_t)7);
    int st = 0;
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(st, 7);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);
    ASSERT_EQ(weft_task_join(h, &st), -ESRCH); /* joined: released */
    ASSERT_EQ(weft_task_cancel(h), -ESRCH);
    ASSERT_EQ(weft_task_detach(h), -ESRCH);

    /* After the exit: the status waits in the handle. */
    h = spawn_h(s, returns_arg, (void *)(intptr_t)-EPIPE);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_task_cancel(h), 0); /* finished: nothing to do */
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(st, -EPIPE);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_status(s, 1, &st), 0); /* the scope saw it too */
    ASSERT_EQ(st, -EPIPE);
    ASSERT_EQ(weft_scope_free(s), 0);

    /* status may be NULL */
    s = scope_open();
    h = spawn_h(s, returns_arg, NULL);
    ASSERT_EQ(weft_task_join(h, NULL), 0);
    scope_end(s);
    return 0;
}

TEST(join_before_and_after_exit)
{
    ASSERT_EQ(t_run_virtual(1, join_root, NULL), 0);
}

/* Join is a cancellation point; a cancelled or timed-out join leaves the
 * handle as it was, to be joined again. */
static int join_cancel_root(void *arg)
{
    (void)arg;
    weft_scope *s = scope_open();
    weft_task_handle h = spawn_h(s, returns_arg_after, (void *)(intptr_t)3);
    int st = 99;
    ASSERT_EQ(weft_task_join_until(h, &st, WEFT_SEC / 2), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), WEFT_SEC / 2);
    weft_scope *in;
    ASSERT_EQ(weft_scope_open(&in, &(weft_scope_opts){.deadline = WEFT_SEC}),
              0);
    ASSERT_EQ(weft_task_join(h, &st), -ECANCELED);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    ASSERT_EQ(weft_scope_join(in), -ETIMEDOUT);
    ASSERT_EQ(weft_scope_free(in), 0);
    ASSERT_EQ(st, 99);
    /* Already finished, but the joiner's scope is cancelled: still a
     * checkpoint, and the handle stays joinable. */
    ASSERT_EQ(weft_sleep_for(2 * WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_open(&in, NULL), 0);
    ASSERT_EQ(weft_scope_cancel(in), 0);
    ASSERT_EQ(weft_task_join(h, &st), -ECANCELED);
    ASSERT_EQ(weft_scope_join(in), -ECANCELED);
    ASSERT_EQ(weft_scope_free(in), 0);
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(st, 3);
    scope_end(s);
    return 0;
}

TEST(join_is_a_cancellation_point_and_stays_joinable)
{
    ASSERT_EQ(t_run_virtual(1, join_cancel_root, NULL), 0);
}

/* Two joiners: the first to find the task finished gets the status, the
 * other -ESRCH; a joiner waiting when the handle is released: -ESRCH; a
 * task joining itself: -EDEADLK. */
struct joiner {
    weft_task_handle h;
    int rc, st;
};

static int joiner_fn(void *arg)
{
    struct joiner *j = arg;
    j->rc = weft_task_join(j->h, &j->st);
    return 0;
}

static weft_task_handle self_handle;
static int self_join_rc;

static int joins_itself(void *arg)
{
    (void)arg;
    weft_yield(); /* the spawner has stored the handle */
    int st;
    self_join_rc = weft_task_join(self_handle, &st);
    return 5;
}

static int joiners_root(void *arg)
{
    (void)arg;
    weft_scope *s = scope_open();
    weft_task_handle h = spawn_h(s, returns_arg_after, (void *)(intptr_t)4);
    struct joiner j[2] = {{.h = h}, {.h = h}};
    ASSERT(weft_spawn(s, joiner_fn, &j[0]) >= 0);
    ASSERT(weft_spawn(s, joiner_fn, &j[1]) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT((j[0].rc == 0) != (j[1].rc == 0));
    ASSERT_EQ(j[0].rc + j[1].rc, -ESRCH);
    ASSERT_EQ(j[0].rc == 0 ? j[0].st : j[1].st, 4);

    s = scope_open();
    h = spawn_h(s, returns_arg_after, NULL);
    struct joiner w = {.h = h};
    ASSERT(weft_spawn(s, joiner_fn, &w) >= 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_task_detach(h), 0);
    ASSERT_EQ(weft_scope_join(s), 0); /* the released task still counts */
    ASSERT_EQ(weft_now(), 4 * WEFT_SEC);
    ASSERT_EQ(w.rc, -ESRCH);
    ASSERT_EQ(weft_scope_free(s), 0);

    s = scope_open();
    self_handle = spawn_h(s, joins_itself, NULL);
    int st;
    ASSERT_EQ(weft_task_join(self_handle, &st), 0);
    ASSERT_EQ(st, 5);
    ASSERT_EQ(self_join_rc, -EDEADLK);
    scope_end(s);
    return 0;
}

TEST(several_joiners_release_while_joining_self_join)
{
    ASSERT_EQ(t_run_virtual(1, joiners_root, NULL), 0);
}

/* ---- release, stale and foreign handles ------------------------------- */

static int stale_root(void *arg)
{
    (void)arg;
    weft_task_handle zero = {0};
    ASSERT_EQ(weft_task_cancel(zero), -EINVAL);
    ASSERT_EQ(weft_task_join(zero, NULL), -EINVAL);
    ASSERT_EQ(weft_task_detach(zero), -EINVAL);
    /* an index no record was made for */
    weft_task_handle forged = {((uint64_t)1 << 24) | 0xFFFFFF};
    ASSERT_EQ(weft_task_cancel(forged), -EINVAL);

    weft_scope *s = scope_open();
    weft_task_handle h = spawn_h(s, returns_arg_after, (void *)(intptr_t)1);
    weft_task_handle copy = h;
    ASSERT_EQ(weft_task_detach(h), 0);
    ASSERT_EQ(weft_task_detach(h), -ESRCH); /* double release */
    ASSERT_EQ(weft_task_detach(copy), -ESRCH);
    ASSERT_EQ(weft_task_cancel(h), -ESRCH); /* and the task runs on */
    ASSERT_EQ(weft_task_join(h, NULL), -ESRCH);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);
    ASSERT_EQ(weft_scope_free(s), 0);

    /* The record is reused many times: the first id never matches again. */
    s = scope_open();
    for (int i = 0; i < 1000; i++) {
        weft_task_handle n = spawn_h(s, returns_arg, (void *)(intptr_t)i);
        int st;
        ASSERT(n.id != h.id);
        ASSERT_EQ(weft_task_cancel(h), -ESRCH);
        if (i % 2) {
            ASSERT_EQ(weft_task_join(n, &st), 0);
            ASSERT_EQ(st, i);
        } else {
            ASSERT_EQ(weft_task_detach(n), 0);
        }
        ASSERT_EQ(weft_task_detach(n), -ESRCH);
    }
    scope_end(s);

    /* A failed spawn gives a zero handle. */
    s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    h.id = 12345;
    ASSERT_EQ(
        weft_spawn_ex(s, returns_arg, NULL, &(weft_spawn_opts){.handle = &h}),
        -ECANCELED);
    ASSERT_EQ(h.id, 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(double_release_stale_and_zero_handles)
{
    ASSERT_EQ(t_run_virtual(1, stale_root, NULL), 0);
    /* Outside a runtime: join needs a task, the others do not. */
    ASSERT_EQ(weft_task_join((weft_task_handle){0}, NULL), -EPERM);
    ASSERT_EQ(weft_task_detach((weft_task_handle){0}), -EINVAL);
}

/* A handle nobody joined or released outlives its runtime only as an id:
 * the record is reclaimed when weft_run returns. */
static weft_task_handle leaked;

static int leak_root(void *arg)
{
    (void)arg;
    leaked = spawn_h(NULL, returns_arg, (void *)(intptr_t)8);
    return 0;
}

static int late_join_root(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_task_join(leaked, NULL), -ESRCH);
    return 0;
}

TEST(handle_of_a_runtime_that_returned_is_esrch)
{
    ASSERT_EQ(t_run_virtual(1, leak_root, NULL), 0);
    ASSERT_EQ(weft_task_cancel(leaked), -ESRCH);
    ASSERT_EQ(weft_task_detach(leaked), -ESRCH);
    ASSERT_EQ(t_run_virtual(1, late_join_root, NULL), 0);
}

/* Two runtimes at once: the other's join is refused, its cancel (any
 * thread) and release are not. */
static atomic_uint_fast64_t foreign_id;
static atomic_int foreign_checked;
static int foreign_status;

static int foreign_task(void *arg)
{
    (void)arg;
    return weft_sleep_for(FOREVER);
}

static int runtime_a(void *arg)
{
    (void)arg;
    weft_scope *s = scope_open();
    weft_task_handle h = spawn_h(s, foreign_task, NULL);
    weft_task_handle mine = spawn_h(s, returns_arg, (void *)(intptr_t)6);
    atomic_store(&foreign_id, h.id);
    ASSERT_EQ(weft_scope_join(s), 0); /* until B has cancelled it */
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_task_join(mine, &foreign_status), 0);
    return 0;
}

static void *thread_a(void *arg)
{
    (void)arg;
    ASSERT_EQ(t_run_mono(1, runtime_a, NULL), 0);
    return NULL;
}

static int runtime_b(void *arg)
{
    (void)arg;
    weft_task_handle h = {atomic_load(&foreign_id)};
    ASSERT_EQ(weft_task_join(h, NULL), -EINVAL);
    ASSERT_EQ(weft_task_cancel(h), 0);
    ASSERT_EQ(weft_task_detach(h), 0);
    ASSERT_EQ(weft_task_detach(h), -ESRCH);
    atomic_store(&foreign_checked, 1);
    return 0;
}

TEST(handle_of_another_runtime)
{
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, thread_a, NULL), 0);
    while (atomic_load(&foreign_id) == 0)
        sched_yield();
    ASSERT_EQ(t_run_virtual(1, runtime_b, NULL), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(atomic_load(&foreign_checked), 1);
    ASSERT_EQ(foreign_status, 6);
}

/* ---- inside the task: its handle's scope is invisible ------------------ */

static weft_scope *outer_scope;
static struct sleeper grandchild = {.ns = 5 * WEFT_SEC};
static int current_ok;

static int spawns_into_current(void *arg)
{
    (void)arg;
    current_ok = weft_scope_current() == outer_scope;
    /* Into the current scope: the spawner's, not the handle's, so it is a
     * sibling that outlives this task. */
    ASSERT_EQ(weft_spawn(NULL, sleeper_fn, &grandchild), 1);
    ASSERT_EQ(weft_scope_join(weft_scope_current()), -EPERM);
    return 0;
}

static int invisible_root(void *arg)
{
    (void)arg;
    outer_scope = scope_open();
    weft_task_handle h = spawn_h(outer_scope, spawns_into_current, NULL);
    ASSERT_EQ(weft_task_join(h, NULL), 0);
    ASSERT_EQ(weft_now(), 0);
    ASSERT_EQ(weft_scope_spawned(outer_scope), 2);
    ASSERT_EQ(weft_scope_join(outer_scope), 0);
    ASSERT_EQ(weft_now(), 6 * WEFT_SEC); /* 5 s, then its second sleep */
    ASSERT_EQ(grandchild.got, 0);
    ASSERT_EQ(weft_scope_free(outer_scope), 0);
    ASSERT_EQ(current_ok, 1);
    return 0;
}

TEST(handle_scope_is_invisible_to_the_task)
{
    ASSERT_EQ(t_run_virtual(1, invisible_root, NULL), 0);
}

/* In a WEFT_SERVE scope too: spawn returns 0, the handle works. */
static int serve_handle_root(void *arg)
{
    (void)arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_SERVE}), 0);
    static struct sleeper k = {.ns = FOREVER};
    weft_task_handle h = {0};
    ASSERT_EQ(
        weft_spawn_ex(s, sleeper_fn, &k, &(weft_spawn_opts){.handle = &h}), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_task_cancel(h), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(k.at, WEFT_SEC);
    ASSERT_EQ(weft_scope_failed(s), 1);
    ASSERT_EQ(weft_scope_free(s), 0);
    int st;
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(st, -ECANCELED);
    return 0;
}

TEST(handle_in_a_serve_scope)
{
    ASSERT_EQ(t_run_virtual(1, serve_handle_root, NULL), 0);
}

/* ---- across workers and threads -------------------------------------- */

/* Tasks with handles on every worker, blocked; a task on worker 0 cancels
 * the even ones, a plain pthread the odd ones of a second half; the rest
 * are left alone and finish their sleep. Each cancelled task wakes on its
 * own worker at the instant of its cancel. */
struct many {
    long n;
    struct sleeper *k;
    weft_task_handle *h;
    atomic_int canceller_worker;
};

static int canceller(void *arg)
{
    struct many *m = arg;
    atomic_store(&m->canceller_worker, weft_worker_id());
    for (long i = 0; i < m->n / 2; i += 2)
        ASSERT_EQ(weft_task_cancel(m->h[i]), 0);
    return 0;
}

static void *pthread_canceller(void *arg)
{
    struct many *m = arg;
    ASSERT(weft_scope_current() == NULL);
    for (long i = m->n / 2; i < m->n; i += 2)
        ASSERT_EQ(weft_task_cancel(m->h[i]), 0);
    return NULL;
}

static int across_root(void *arg)
{
    struct many *m = arg;
    weft_scope *s = scope_open();
    for (long i = 0; i < m->n; i++) {
        m->k[i] = (struct sleeper){.ns = 5 * WEFT_SEC, .ret = (int)i};
        weft_spawn_opts o = {.worker = (int)(i % 4) + 1, .handle = &m->h[i]};
        ASSERT_EQ(weft_spawn_ex(s, sleeper_fn, &m->k[i], &o), i);
    }
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0); /* every task parked */
    weft_spawn_opts on0 = {.worker = 1};
    ASSERT_EQ(weft_spawn_ex(s, canceller, m, &on0), m->n);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    /* At 2 s: the plain thread, while this worker waits for it. */
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, pthread_canceller, m), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    for (long i = 0; i < m->n; i++) {
        int st = 0;
        ASSERT_EQ(weft_task_join(m->h[i], &st), 0);
        struct sleeper *k = &m->k[i];
        ASSERT_EQ(k->woke_on, k->worker);
        if (i % 2 == 0) {
            ASSERT_EQ(st, -ECANCELED);
            ASSERT_EQ(k->at, i < m->n / 2 ? WEFT_SEC : 2 * WEFT_SEC);
            ASSERT_EQ(k->again, -ECANCELED);
        } else {
            ASSERT_EQ(st, (int)i);
            ASSERT_EQ(k->at, 5 * WEFT_SEC);
            ASSERT_EQ(k->again, 0);
        }
    }
    ASSERT_EQ(weft_now(), 6 * WEFT_SEC);
    ASSERT(!weft_scope_cancelled(s));
    ASSERT_EQ(weft_scope_join(s), 0); /* the cancels were the tasks' own */
    ASSERT_EQ(weft_scope_failed(s), m->n / 2);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(cancel_from_another_worker_and_a_pthread)
{
    static struct many m;
    m.n = T_LIVE(2000);
    m.n -= m.n % 4;
    m.k = calloc((size_t)m.n, sizeof(*m.k));
    m.h = calloc((size_t)m.n, sizeof(*m.h));
    ASSERT(m.k && m.h);
    ASSERT_EQ(t_run_virtual(4, across_root, &m), 0);
    ASSERT_EQ(atomic_load(&m.canceller_worker), 0);
    int used[4] = {0};
    for (long i = 0; i < m.n; i++)
        used[m.k[i].worker] = 1;
    ASSERT_EQ(used[0] + used[1] + used[2] + used[3], 4);
    free(m.k);
    free(m.h);
}

/* Cancels racing the tasks' exits, from every worker, with the real
 * clock: each cancel either wakes its task or finds it finished. */
struct race {
    long n;
    weft_task_handle *h;
    atomic_long cancelled;
};

static int brief(void *arg)
{
    struct race *r = arg;
    int rc = weft_sleep_for(WEFT_USEC);
    if (rc == -ECANCELED)
        atomic_fetch_add(&r->cancelled, 1);
    return rc;
}

static int racing_canceller(void *arg)
{
    struct race *r = arg;
    for (long i = 0; i < r->n; i++)
        ASSERT_EQ(weft_task_cancel(r->h[i]), 0);
    return 0;
}

static int race_root(void *arg)
{
    struct race *r = arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_COLLECT}),
              0);
    for (long i = 0; i < r->n; i++) {
        weft_spawn_opts o = {.worker = (int)(i % 4) + 1, .handle = &r->h[i]};
        ASSERT_EQ(weft_spawn_ex(s, brief, r, &o), i);
    }
    for (int w = 0; w < 4; w++) {
        weft_spawn_opts o = {.worker = w + 1};
        ASSERT(weft_spawn_ex(s, racing_canceller, r, &o) >= 0);
    }
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    long failed = 0;
    for (long i = 0; i < r->n; i++) {
        int st = 1;
        ASSERT_EQ(weft_task_join(r->h[i], &st), 0);
        failed += st == -ECANCELED;
        ASSERT(st == 0 || st == -ECANCELED);
    }
    ASSERT_EQ(failed, atomic_load(&r->cancelled));
    return 0;
}

TEST(cancels_racing_exits)
{
    static struct race r;
    r.n = T_LIVE(5000);
    r.h = calloc((size_t)r.n, sizeof(*r.h));
    ASSERT(r.h != NULL);
    ASSERT_EQ(t_run_mono(4, race_root, &r), 0);
    free(r.h);
}
