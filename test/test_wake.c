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
 */
#include "scheduler.h" /* weft__current, PARK_STATE: is the task parked */
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
