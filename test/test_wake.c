/* SPDX-License-Identifier: MIT */
/*
 * Wakes from plain threads racing the end of weft_run. A plain thread
 * settles a future, sets an event, sends on a channel or tells an actor
 * while the one task it wakes is all that keeps the runtime alive: the
 * task runs, returns, and weft_run ends and frees its workers, perhaps
 * while the thread is still inside the call that woke it. Each test
 * does that many times in a row (one runtime a round, the thread joined
 * after weft_run returns).
 *
 * The TSan build is the one that holds this: it sees the free race with
 * the waker's last touch of the worker whatever the timing, and without
 * weft_run's wait for such wakers every test fails in its first rounds.
 * ASan would see the touch only if it came after the free, which the
 * waker's few instructions almost never do; the release and ASan builds
 * run these tests as a smoke test of the wakes themselves.
 *
 * The deadlock detector is off in these runs: the root waits for what
 * only the plain thread provides, and a thread descheduled for longer
 * than the grace on a loaded machine would look like a deadlock.
 *
 * Then a run that ends with a task still asleep: the deadlock report
 * gives up on a task in a shielded scope, and a plain thread wakes it
 * after weft_run has returned. That runtime's workers and the task's
 * slot are kept for that wake; ASan sees the touch of freed memory
 * without it.
 */
#include "sched/scheduler.h" /* weft__current, PARK_STATE: is the task parked */
#include "t.h"
#include "weft.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

enum { K_FUTURE, K_EVENT, K_CHAN, K_ACTOR };

struct round {
    int kind;
    int workers;
    weft_clock_kind clock;
    /* The task the thread wakes, published by itself before it waits. */
    _Atomic(weft_task *) task;
    weft_future *f;
    weft_event ev;
    weft_chan *c;
    _Atomic(weft_actor *) a; /* the thread's reference (the root's) */
    int got;                 /* what the woken task received */
};

static void publish_self(struct round *r)
{
    atomic_store(&r->task, weft__current());
}

/* Returns once the published task is parked: its wait is queued (or
 * about to be, under the object's lock), so the thread's call wakes it
 * from this thread. The task cannot end before that wake. */
static void wait_parked(struct round *r)
{
    weft_task *t;
    while (!(t = atomic_load(&r->task)))
        sched_yield();
    while (PARK_STATE(atomic_load(&t->park)) == PARK_RUNNING)
        sched_yield();
}

static void *waker(void *arg)
{
    struct round *r = arg;
    int v = 42;
    switch (r->kind) {
    case K_FUTURE:
        wait_parked(r);
        ASSERT_EQ(weft_future_resolve(r->f, &v), 0);
        break;
    case K_EVENT:
        wait_parked(r);
        ASSERT_EQ(weft_event_set(&r->ev), 0);
        break;
    case K_CHAN: { /* unbuffered: only a parked receiver takes it */
        wait_parked(r);
        int rc;
        while ((rc = weft_chan_try_send(r->c, &v)) == -EAGAIN)
            sched_yield();
        ASSERT_EQ(rc, 0);
        break;
    }
    case K_ACTOR: {
        weft_actor *a;
        while (!(a = atomic_load(&r->a)))
            sched_yield();
        wait_parked(r);
        ASSERT_EQ(weft_actor_try_tell(a, &v), 0);
        ASSERT_EQ(weft_actor_unref(a), 0);
        break;
    }
    }
    return NULL;
}

static int actor_start(void *state)
{
    publish_self(state);
    return 0;
}

static int actor_fn(void *state, weft_actor_msg *m)
{
    struct round *r = state;
    r->got = *(int *)m->data;
    return WEFT_ACTOR_STOP; /* its exit ends the runtime */
}

/* Waits for the thread and returns at once: that ends the runtime. */
static int root(void *arg)
{
    struct round *r = arg;
    switch (r->kind) {
    case K_FUTURE:
        publish_self(r);
        ASSERT_EQ(weft_future_await(r->f, &r->got, WEFT_NEVER), 0);
        break;
    case K_EVENT:
        publish_self(r);
        ASSERT_EQ(weft_event_wait(&r->ev), 0);
        r->got = 42;
        break;
    case K_CHAN:
        publish_self(r);
        ASSERT_EQ(weft_chan_recv(r->c, &r->got), 0);
        break;
    case K_ACTOR: { /* the actor is the last task: root leaves first */
        weft_actor_opts o = {.fn = actor_fn,
                             .state = r,
                             .msg_size = sizeof(int),
                             .capacity = 1,
                             .on_start = actor_start};
        weft_actor *a = NULL;
        ASSERT_EQ(weft_actor_spawn(NULL, &o, &a), 0);
        atomic_store(&r->a, a);
        break;
    }
    }
    return 0;
}

static void one_round(struct round *r)
{
    switch (r->kind) {
    case K_FUTURE:
        ASSERT_EQ(weft_future_new(&r->f, sizeof(int)), 0);
        break;
    case K_EVENT:
        r->ev = (weft_event)WEFT_EVENT_INIT;
        break;
    case K_CHAN:
        ASSERT_EQ(weft_chan_new(&r->c, sizeof(int), 0), 0);
        break;
    }
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, waker, r), 0);
    /* No deadlock detector: the root waits for the thread, which may be
     * descheduled for longer than the grace on a loaded machine. */
    weft_config cfg = {.workers = r->workers,
                       .clock = r->clock,
                       .deadlock = WEFT_DEADLOCK_IGNORE};
    ASSERT_EQ(weft_run(&cfg, root, r), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(r->got, 42);
    switch (r->kind) {
    case K_FUTURE:
        ASSERT_EQ(weft_future_unref(r->f), 0);
        break;
    case K_EVENT:
        ASSERT_EQ(weft_event_destroy(&r->ev), 0);
        break;
    case K_CHAN:
        ASSERT_EQ(weft_chan_unref(r->c), 0);
        break;
    }
}

/* Rounds on one worker and on two, with either clock (the virtual one
 * does more in the wake: the clock's books). */
static void rounds(int kind, long n)
{
    for (long i = 0; i < n; i++) {
        struct round r = {
            .kind = kind,
            .workers = 1 + (int)(i & 1),
            .clock = (i & 2) ? WEFT_CLOCK_VIRTUAL : WEFT_CLOCK_MONOTONIC,
        };
        one_round(&r);
    }
}

TEST(future_resolve_racing_the_end)
{
    rounds(K_FUTURE, T_SCALE(2000));
}

TEST(event_set_racing_the_end)
{
    rounds(K_EVENT, T_SCALE(2000));
}

TEST(chan_try_send_racing_the_end)
{
    rounds(K_CHAN, T_SCALE(2000));
}

TEST(actor_try_tell_racing_the_end)
{
    rounds(K_ACTOR, T_SCALE(2000));
}

/* ---- a wake after a run that ended with a task still asleep ---- */

struct late {
    weft_event ev;
    atomic_int reports;
    int woke; /* set if the sleeper ever runs again: it must not */
};

static void on_deadlock(void *ctx, weft_deadlock_kind kind)
{
    struct late *l = ctx;
    ASSERT_EQ(kind, WEFT_DEADLOCK_ALL_ASLEEP);
    atomic_fetch_add(&l->reports, 1);
}

static int late_sleeper(void *arg)
{
    struct late *l = arg;
    weft_event_wait(&l->ev); /* shielded: the deadlock's cancel misses it */
    l->woke = 1;
    return 0;
}

/* Opens a shielded scope, and waits in it for a task that waits for an
 * event nobody in the runtime sets: every task asleep, a deadlock, and
 * its cancel reaches neither, so the runtime gives up on both. */
static int late_root(void *arg)
{
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.shield = 1}), 0);
    ASSERT(weft_spawn_ex(s, late_sleeper, arg,
                         &(weft_spawn_opts){.name = "late sleeper"}) >= 0);
    weft_scope_join(s);
    weft_scope_free(s);
    return 0;
}

/* The event is set by a plain thread (this one) after weft_run has
 * returned -EDEADLK: its wake must find the task, its worker and its
 * runtime where they were. The detector's grace is 1 ns, so the report
 * and the give-up come as soon as the workers are idle. */
TEST(a_wake_after_a_run_that_left_a_task_asleep)
{
    for (int workers = 1; workers <= 2; workers++) {
        struct late *l = calloc(1, sizeof *l);
        ASSERT(l);
        l->ev = (weft_event)WEFT_EVENT_INIT;
        weft_config cfg = {.workers = workers,
                           .clock = WEFT_CLOCK_VIRTUAL,
                           .deadlock = WEFT_DEADLOCK_CALLBACK,
                           .on_deadlock = on_deadlock,
                           .deadlock_ctx = l,
                           .deadlock_grace_ns = 1};
        ASSERT_EQ(weft_run(&cfg, late_root, l), -EDEADLK);
        ASSERT_EQ(atomic_load(&l->reports), 1);
        ASSERT_EQ(weft_event_set(&l->ev), 0);
        ASSERT_EQ(l->woke, 0); /* made runnable, never run */
        ASSERT_EQ(weft_event_destroy(&l->ev), 0);
        free(l);
    }
}
