/* SPDX-License-Identifier: MIT */
/*
 * weft_select's cases over the waits beyond channels, descriptors,
 * futures, scopes and semaphores (test_select.c has those): task joins,
 * events, wait groups, actors' exits and tells, limiters, mutexes, rwlocks,
 * bulkheads, and a blocking call started as a future. For each: chosen
 * when ready, waits and is woken, a case not chosen leaves its object as
 * it was, misuse, and a cancel or deadline leaves nothing behind; then a
 * lock-step race over one case of each kind on two workers.
 *
 * Times are on the virtual clock and checked exactly.
 */
#include "t.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MS WEFT_MSEC

static weft_case join_case(weft_task_handle h, int *status)
{
    return (weft_case){.op = WEFT_OP_JOIN, .task = h, .elem = status};
}
static weft_case event_case(weft_event *e)
{
    return (weft_case){.op = WEFT_OP_EVENT, .event = e};
}
static weft_case wg_case(weft_wg *wg)
{
    return (weft_case){.op = WEFT_OP_WG, .wg = wg};
}
static weft_case exit_case(weft_actor *a, int *status)
{
    return (weft_case){.op = WEFT_OP_ACTOR_JOIN, .actor = a, .elem = status};
}
static weft_case tell_case(weft_actor *a, int *msg)
{
    return (weft_case){.op = WEFT_OP_TELL, .actor = a, .elem = msg};
}
static weft_case limiter_case(weft_limiter *l, int64_t n)
{
    return (weft_case){.op = WEFT_OP_LIMITER, .limiter = l, .n = n};
}
static weft_case rw_case(weft_rwlock *l, weft_op op)
{
    return (weft_case){.op = op, .rwlock = l};
}
static weft_case mutex_case(weft_mutex *m)
{
    return (weft_case){.op = WEFT_OP_MUTEX, .mutex = m};
}
static weft_case bulkhead_case(weft_bulkhead *b)
{
    return (weft_case){.op = WEFT_OP_BULKHEAD, .bulkhead = b};
}
static weft_case sem_case(weft_sem *s)
{
    return (weft_case){.op = WEFT_OP_SEM, .sem = s};
}
static weft_case deadline_case(weft_time t)
{
    return (weft_case){.op = WEFT_OP_DEADLINE, .deadline = t};
}

/* A case, then a DEADLINE case `after` from now: the select's result. */
static int with_deadline(weft_case c, weft_time after)
{
    weft_case cs[2] = {c, deadline_case(weft_now() + after)};
    int rc = weft_select(cs, 2, WEFT_NEVER);
    return rc == 0 ? cs[0].rc : rc == 1 ? 1000 : rc;
}
#define TIMED_OUT 1000 /* with_deadline: the DEADLINE case was chosen */

/* Sleeps `ms`, then runs a step. */
struct later {
    weft_time ms;
    void (*step)(void *);
    void *arg;
};
static int later_task(void *arg)
{
    struct later *l = arg;
    ASSERT_EQ(weft_sleep_for(l->ms * MS), 0);
    l->step(l->arg);
    return 0;
}
static void later(struct later *l)
{
    spawn(later_task, l);
}

/* ---- JOIN ---- */

static int sleeper(void *arg)
{
    ASSERT_EQ(weft_sleep_for((weft_time)(intptr_t)arg * MS), 0);
    return (int)(intptr_t)arg;
}

static weft_task_handle spawn_h(int ms)
{
    weft_task_handle h;
    weft_spawn_opts o = {.handle = &h};
    ASSERT(weft_spawn_ex(NULL, sleeper, (void *)(intptr_t)ms, &o) >= 0);
    return h;
}

static int join_selector(void *arg)
{
    weft_task_handle *h = arg;
    weft_case cs[1] = {join_case(*h, NULL)};
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), -ECANCELED);
    return 0;
}

static int join_main(void *arg)
{
    (void)arg;
    weft_time t0 = weft_now();
    weft_task_handle h = spawn_h(5);
    int st = -1;
    /* Not chosen: the handle is as it was. */
    ASSERT_EQ(with_deadline(join_case(h, &st), 2 * MS), TIMED_OUT);
    ASSERT_EQ(st, -1);
    /* Waits, woken by the exit: joined, status out. */
    weft_case cs[1] = {join_case(h, &st)};
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), 0);
    ASSERT_EQ(cs[0].rc, 0);
    ASSERT_EQ(st, 5);
    ASSERT_EQ(weft_now(), t0 + 5 * MS);
    /* Used up, as after weft_task_join. */
    ASSERT_EQ(weft_task_join(h, NULL), -ESRCH);
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), -ESRCH);
    /* Done already: chosen at once, try_select too. */
    h = spawn_h(0);
    ASSERT_EQ(weft_sleep_for(MS), 0);
    cs[0] = join_case(h, &st);
    ASSERT_EQ(weft_try_select(cs, 1), 0);
    ASSERT_EQ(st, 0);
    /* Ready next to a join: the join not chosen can still be joined. */
    weft_sem sem;
    ASSERT_EQ(weft_sem_init(&sem, 1), 0);
    h = spawn_h(3);
    weft_case two[2] = {join_case(h, &st), sem_case(&sem)};
    ASSERT_EQ(weft_select(two, 2, WEFT_NEVER), 1);
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(st, 3);
    /* A zero handle is off. */
    cs[0] = join_case((weft_task_handle){0}, NULL);
    ASSERT_EQ(weft_try_select(cs, 1), -EAGAIN);
    /* Cancelled while it waits: nothing joined, no waiter left. */
    h = spawn_h(4);
    weft_scope *s = scope_open();
    ASSERT(weft_spawn(s, join_selector, &h) >= 0);
    ASSERT_EQ(weft_sleep_for(MS), 0);
    scope_cancel_end(s);
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(st, 4);
    /* The select's deadline: likewise. */
    h = spawn_h(4);
    cs[0] = join_case(h, &st);
    ASSERT_EQ(weft_select(cs, 1, weft_now() + MS), -ETIMEDOUT);
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(weft_sem_destroy(&sem), 0);
    return 0;
}

TEST(join_case)
{
    ASSERT_EQ(t_run_virtual(1, join_main, NULL), 0);
}

static int own_join(void *arg)
{
    weft_event *go = arg;
    ASSERT_EQ(weft_event_wait(go), 0);
    return 0;
}

struct own {
    weft_task_handle h;
    weft_event go;
    int rc;
};

static int own_selector(void *arg)
{
    struct own *o = arg;
    ASSERT_EQ(weft_event_wait(&o->go), 0);
    weft_case cs[1] = {join_case(o->h, NULL)};
    o->rc = weft_select(cs, 1, WEFT_NEVER);
    return 0;
}

static int own_main(void *arg)
{
    (void)arg;
    struct own o = {0};
    weft_spawn_opts so = {.handle = &o.h};
    ASSERT(weft_spawn_ex(NULL, own_selector, &o, &so) >= 0);
    ASSERT_EQ(weft_event_set(&o.go), 0);
    ASSERT_EQ(weft_task_join(o.h, NULL), 0);
    ASSERT_EQ(o.rc, -EDEADLK); /* its own handle */
    (void)own_join;
    return 0;
}

TEST(join_case_own_handle)
{
    ASSERT_EQ(t_run_virtual(2, own_main, NULL), 0);
}

/* ---- EVENT and WAITGROUP ---- */

static void set_event(void *e)
{
    ASSERT_EQ(weft_event_set(e), 0);
}
static void wg_done(void *wg)
{
    ASSERT_EQ(weft_wg_done(wg), 0);
}

static int cond_selector(void *arg)
{
    weft_case *c = arg;
    weft_case cs[1] = {*c};
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), -ECANCELED);
    return 0;
}

static int event_wg_main(void *arg)
{
    (void)arg;
    weft_time t0 = weft_now();
    weft_event e = WEFT_EVENT_INIT;
    weft_wg wg = WEFT_WG_INIT;
    ASSERT_EQ(with_deadline(event_case(&e), 2 * MS), TIMED_OUT);
    ASSERT_EQ(weft_wg_add(&wg, 1), 0);
    ASSERT_EQ(with_deadline(wg_case(&wg), 2 * MS), TIMED_OUT);
    weft_scope *s = scope_open();
    struct later set = {3, set_event, &e}, done = {5, wg_done, &wg};
    later(&set);
    later(&done);
    weft_case cs[2] = {event_case(&e), wg_case(&wg)};
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), 0);
    ASSERT_EQ(cs[0].rc, 0);
    ASSERT_EQ(weft_now(), t0 + 7 * MS);
    ASSERT_EQ(weft_event_is_set(&e), 1); /* not consumed */
    ASSERT_EQ(weft_event_reset(&e), 0);
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), 1);
    ASSERT_EQ(cs[1].rc, 0);
    ASSERT_EQ(weft_now(), t0 + 9 * MS);
    scope_end(s);
    /* Set: ready at once, try_select too. */
    ASSERT_EQ(weft_try_select(cs, 2), 1);
    /* NULL: off. */
    cs[1] = wg_case(NULL);
    cs[0] = event_case(NULL);
    ASSERT_EQ(weft_try_select(cs, 2), -EAGAIN);
    /* Cancel and deadline: no waiter left (destroy says -EBUSY if one
     * were). */
    ASSERT_EQ(weft_wg_add(&wg, 1), 0);
    weft_case c = wg_case(&wg);
    s = scope_open();
    ASSERT(weft_spawn(s, cond_selector, &c) >= 0);
    weft_case c2 = event_case(&e);
    ASSERT(weft_spawn(s, cond_selector, &c2) >= 0);
    ASSERT_EQ(weft_sleep_for(MS), 0);
    ASSERT_EQ(weft_wg_destroy(&wg), -EBUSY);
    scope_cancel_end(s);
    cs[0] = event_case(&e);
    ASSERT_EQ(weft_select(cs, 1, weft_now() + MS), -ETIMEDOUT);
    ASSERT_EQ(weft_event_destroy(&e), 0);
    ASSERT_EQ(weft_wg_done(&wg), 0);
    ASSERT_EQ(weft_wg_destroy(&wg), 0);
    return 0;
}

TEST(event_and_waitgroup_cases)
{
    ASSERT_EQ(t_run_virtual(1, event_wg_main, NULL), 0);
}

/* ---- ACTOR_JOIN and TELL ---- */

/* An actor whose every message waits for a permit of gate, then is
 * recorded: the mailbox stays full while gate is empty. */
struct mbox {
    weft_sem gate;
    int got[64];
    int ngot;
    int self_rc;         /* message -1: its select on its own exit */
    _Atomic int entered; /* messages that came to the gate */
};

static int mbox_fn(void *state, weft_actor_msg *m)
{
    struct mbox *b = state;
    int v;
    memcpy(&v, m->data, sizeof v);
    if (v == -1) {
        weft_case cs[1] = {exit_case(weft_actor_self(), NULL)};
        b->self_rc = weft_select(cs, 1, WEFT_NEVER);
        return 0;
    }
    b->entered++;
    ASSERT_EQ(weft_sem_acquire(&b->gate, 1), 0);
    if (b->ngot < 64)
        b->got[b->ngot] = v;
    b->ngot++;
    return 0;
}

static weft_actor *mbox_spawn(struct mbox *b, int cap)
{
    weft_actor_opts o = {
        .fn = mbox_fn, .state = b, .msg_size = sizeof(int), .capacity = cap};
    weft_actor *a;
    ASSERT_EQ(weft_actor_spawn(NULL, &o, &a), 0);
    return a;
}

static void open_gate(void *b)
{
    ASSERT_EQ(weft_sem_release(&((struct mbox *)b)->gate, 1), 0);
}

static void stop_drain(void *a)
{
    ASSERT_EQ(weft_actor_stop(a, WEFT_STOP_DRAIN), 0);
}

static int tell_selector(void *arg)
{
    weft_actor *a = arg;
    int m = 99;
    weft_case cs[2] = {tell_case(a, &m), exit_case(a, NULL)};
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), -ECANCELED);
    return 0;
}

static int actor_main(void *arg)
{
    (void)arg;
    weft_time t0 = weft_now();
    struct mbox b = {0};
    weft_scope *s = scope_open();
    weft_actor *a = mbox_spawn(&b, 1);
    int m1 = 1, m2 = 2, m3 = 3, st = -7;
    ASSERT_EQ(weft_actor_tell(a, &m1, WEFT_NEVER), 0);
    ASSERT_EQ(weft_sleep_for(MS), 0); /* the actor waits at the gate with m1 */
    ASSERT_EQ(weft_actor_tell(a, &m2, WEFT_NEVER), 0); /* full now */
    /* Not chosen: m3 not told; the actor has not exited. */
    ASSERT_EQ(with_deadline(tell_case(a, &m3), 2 * MS), TIMED_OUT);
    ASSERT_EQ(with_deadline(exit_case(a, &st), 2 * MS), TIMED_OUT);
    ASSERT_EQ(st, -7);
    ASSERT_EQ((int)weft_actor_queued(a), 1);
    /* Waits for room, woken when the actor takes m2. */
    struct later open = {2, open_gate, &b};
    later(&open);
    weft_case cs[2] = {exit_case(a, &st), tell_case(a, &m3)};
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), 1);
    ASSERT_EQ(cs[1].rc, 0);
    ASSERT_EQ(st, -7);
    ASSERT_EQ(weft_now(), t0 + 7 * MS);
    ASSERT_EQ((int)weft_actor_queued(a), 1);
    /* Cancelled while it waits: nothing told. */
    weft_scope *c = scope_open();
    ASSERT(weft_spawn(c, tell_selector, a) >= 0);
    ASSERT_EQ(weft_sleep_for(MS), 0);
    scope_cancel_end(c);
    ASSERT_EQ((int)weft_actor_queued(a), 1);
    /* The exit: stop, open the gate for m2 and m3, woken by the exit
     * (the TELL off: it would find room). */
    struct later stop = {1, stop_drain, a};
    later(&stop);
    ASSERT_EQ(weft_sem_release(&b.gate, 2), 0);
    cs[1] = tell_case(NULL, NULL);
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), 0);
    ASSERT_EQ(cs[0].rc, 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(b.ngot, 3);
    ASSERT_EQ(b.got[0], 1);
    ASSERT_EQ(b.got[1], 2);
    ASSERT_EQ(b.got[2], 3);
    /* Exited: both ready, tell refused (-ESRCH, nothing told). */
    cs[0] = tell_case(a, &m3);
    cs[1] = exit_case(NULL, NULL);
    ASSERT_EQ(weft_try_select(cs, 2), 0);
    ASSERT_EQ(cs[0].rc, -ESRCH);
    cs[0] = exit_case(a, &st);
    ASSERT_EQ(weft_try_select(cs, 1), 0);
    /* NULL is off; a TELL without a message is malformed. */
    cs[0] = tell_case(NULL, NULL);
    ASSERT_EQ(weft_try_select(cs, 2), -EAGAIN);
    cs[0] = tell_case(a, NULL);
    ASSERT_EQ(weft_try_select(cs, 1), -EINVAL);
    scope_end(s);
    ASSERT_EQ(weft_actor_unref(a), 0);
    /* The actor's own exit: -EDEADLK. */
    struct mbox b2 = {0};
    s = scope_open();
    a = mbox_spawn(&b2, 1);
    int mm = -1;
    ASSERT_EQ(weft_actor_tell(a, &mm, WEFT_NEVER), 0);
    ASSERT_EQ(weft_actor_stop(a, WEFT_STOP_DRAIN), 0);
    ASSERT_EQ(weft_actor_join_until(a, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(b2.self_rc, -EDEADLK);
    scope_end(s);
    ASSERT_EQ(weft_actor_unref(a), 0);
    return 0;
}

TEST(actor_exit_and_tell_cases)
{
    ASSERT_EQ(t_run_virtual(1, actor_main, NULL), 0);
}

/* ---- LIMITER ---- */

static int limiter_main(void *arg)
{
    (void)arg;
    weft_time t0 = weft_now();
    weft_limiter *l;
    ASSERT_EQ(weft_limiter_new(&l, 1, 10 * MS, 2), 0);
    weft_case cs[1] = {limiter_case(l, 2)};
    ASSERT_EQ(weft_try_select(cs, 1), 0); /* the full bucket */
    /* Not chosen: nothing taken, nothing reserved. */
    ASSERT_EQ(with_deadline(limiter_case(l, 0), 3 * MS), TIMED_OUT);
    ASSERT_EQ(weft_sleep_for(7 * MS), 0);
    ASSERT_EQ(weft_limiter_try_acquire(l, 1), 0); /* due at t0 + 10 ms */
    ASSERT_EQ(weft_now(), t0 + 10 * MS);
    /* Waits until its tokens are due, exactly. */
    cs[0] = limiter_case(l, 1);
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), 0);
    ASSERT_EQ(cs[0].rc, 0);
    ASSERT_EQ(weft_now(), t0 + 20 * MS);
    /* Tokens due at the deadline are still taken. */
    ASSERT_EQ(weft_select(cs, 1, t0 + 30 * MS), 0);
    ASSERT_EQ(weft_now(), t0 + 30 * MS);
    ASSERT_EQ(weft_select(cs, 1, t0 + 39 * MS), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + 39 * MS);
    ASSERT_EQ(weft_limiter_try_acquire(l, 1),
              -EAGAIN); /* nothing was taken... */
    ASSERT_EQ(weft_sleep_for(MS), 0);
    ASSERT_EQ(weft_limiter_try_acquire(l, 1), 0); /* ...the token is there */
    /* Misuse: more than the burst; NULL is off. */
    cs[0] = limiter_case(l, 3);
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), -EINVAL);
    cs[0] = limiter_case(NULL, 1);
    ASSERT_EQ(weft_try_select(cs, 1), -EAGAIN);
    ASSERT_EQ(weft_limiter_free(l), 0);
    return 0;
}

TEST(limiter_case)
{
    ASSERT_EQ(t_run_virtual(1, limiter_main, NULL), 0);
}

/* A reservation made while the case waits pushes it back: it looks again
 * when its tokens are due then. */
struct resv {
    weft_limiter *l;
    weft_time at;
};
static int reserver(void *arg)
{
    struct resv *r = arg;
    ASSERT_EQ(weft_sleep_for(MS), 0);
    ASSERT_EQ(weft_limiter_acquire(r->l, 1, WEFT_NEVER), 0);
    r->at = weft_now();
    return 0;
}

static int limiter_resv_main(void *arg)
{
    (void)arg;
    weft_time t0 = weft_now();
    struct resv r = {0};
    ASSERT_EQ(weft_limiter_new(&r.l, 1, 10 * MS, 1), 0);
    ASSERT_EQ(weft_limiter_try_acquire(r.l, 1), 0);
    weft_scope *s = scope_open();
    spawn(reserver, &r);
    weft_case cs[1] = {limiter_case(r.l, 1)};
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), 0);
    ASSERT_EQ(r.at, t0 + 10 * MS); /* the reservation went first */
    ASSERT_EQ(weft_now(), t0 + 20 * MS);
    scope_end(s);
    ASSERT_EQ(weft_limiter_free(r.l), 0);
    return 0;
}

TEST(limiter_case_after_a_reservation)
{
    ASSERT_EQ(t_run_virtual(1, limiter_resv_main, NULL), 0);
}

/* ---- RDLOCK and WRLOCK ---- */

struct rw {
    weft_rwlock l;
    weft_time at;
};

static int rw_writer(void *arg) /* holds it for writing 5 ms */
{
    struct rw *r = arg;
    ASSERT_EQ(weft_rwlock_wrlock(&r->l), 0);
    ASSERT_EQ(weft_sleep_for(5 * MS), 0);
    ASSERT_EQ(weft_rwlock_wrunlock(&r->l), 0);
    return 0;
}

static int rw_reader(void *arg) /* holds it for reading 10 ms */
{
    struct rw *r = arg;
    ASSERT_EQ(weft_rwlock_rdlock(&r->l), 0);
    ASSERT_EQ(weft_sleep_for(10 * MS), 0);
    ASSERT_EQ(weft_rwlock_rdunlock(&r->l), 0);
    return 0;
}

static int rw_late_reader(void *arg) /* queues at 1 ms */
{
    struct rw *r = arg;
    ASSERT_EQ(weft_sleep_for(MS), 0);
    ASSERT_EQ(weft_rwlock_rdlock(&r->l), 0);
    r->at = weft_now();
    ASSERT_EQ(weft_rwlock_rdunlock(&r->l), 0);
    return 0;
}

static int rwlock_main(void *arg)
{
    (void)arg;
    weft_time t0 = weft_now();
    struct rw r = {0};
    weft_scope *s = scope_open();
    spawn(rw_writer, &r);
    ASSERT_EQ(weft_yield(), 0);
    /* Not chosen: nothing held. */
    ASSERT_EQ(with_deadline(rw_case(&r.l, WEFT_OP_RDLOCK), 2 * MS), TIMED_OUT);
    /* Waits; the writer's unlock hands it over. */
    weft_case cs[1] = {rw_case(&r.l, WEFT_OP_RDLOCK)};
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), 0);
    ASSERT_EQ(cs[0].rc, 0);
    ASSERT_EQ(weft_now(), t0 + 5 * MS);
    ASSERT_EQ(weft_rwlock_try_wrlock(&r.l), -EBUSY);
    ASSERT_EQ(weft_rwlock_rdunlock(&r.l), 0);
    scope_end(s);
    /* Free: both kinds at once; the writer's own WRLOCK or RDLOCK is
     * -EDEADLK. */
    cs[0] = rw_case(&r.l, WEFT_OP_WRLOCK);
    ASSERT_EQ(weft_try_select(cs, 1), 0);
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), -EDEADLK);
    cs[0] = rw_case(&r.l, WEFT_OP_RDLOCK);
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), -EDEADLK);
    ASSERT_EQ(weft_rwlock_wrunlock(&r.l), 0);
    cs[0] = rw_case(NULL, WEFT_OP_WRLOCK);
    ASSERT_EQ(weft_try_select(cs, 1), -EAGAIN);
    ASSERT_EQ(weft_rwlock_destroy(&r.l), 0);
    return 0;
}

TEST(rwlock_cases)
{
    ASSERT_EQ(t_run_virtual(1, rwlock_main, NULL), 0);
}

/* A WRLOCK case waiting at the head of the queue keeps the readers that
 * queue behind it out; when another case wins, they go in at once. */
static int rw_lost_main(void *arg)
{
    (void)arg;
    weft_time t0 = weft_now();
    struct rw r = {0};
    weft_scope *s = scope_open();
    spawn(rw_reader, &r);
    spawn(rw_late_reader, &r);
    ASSERT_EQ(weft_yield(), 0);
    ASSERT_EQ(with_deadline(rw_case(&r.l, WEFT_OP_WRLOCK), 3 * MS), TIMED_OUT);
    scope_end(s);
    ASSERT_EQ(r.at, t0 + 3 * MS); /* not at 10 ms, the reader's unlock */
    ASSERT_EQ(weft_rwlock_destroy(&r.l), 0);
    return 0;
}

TEST(rwlock_case_not_chosen_lets_readers_in)
{
    ASSERT_EQ(t_run_virtual(1, rw_lost_main, NULL), 0);
}

/* ---- MUTEX ---- */

static int mutex_holder(void *arg) /* holds it 5 ms */
{
    ASSERT_EQ(weft_mutex_lock(arg), 0);
    ASSERT_EQ(weft_sleep_for(5 * MS), 0);
    ASSERT_EQ(weft_mutex_unlock(arg), 0);
    return 0;
}

static int mutex_selector(void *arg)
{
    weft_case cs[1] = {mutex_case(arg)};
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), -ECANCELED);
    return 0;
}

static int mutex_main(void *arg)
{
    (void)arg;
    weft_time t0 = weft_now();
    weft_mutex m = WEFT_MUTEX_INIT;
    weft_scope *s = scope_open();
    spawn(mutex_holder, &m);
    ASSERT_EQ(weft_yield(), 0);
    /* Not chosen, or cancelled: nothing held, nobody left waiting. */
    ASSERT_EQ(with_deadline(mutex_case(&m), MS), TIMED_OUT);
    weft_scope *c = scope_open();
    ASSERT(weft_spawn(c, mutex_selector, &m) >= 0);
    ASSERT_EQ(weft_sleep_for(MS), 0);
    scope_cancel_end(c);
    /* Waits (less than the 1 ms after which any waiter is handed the
     * mutex); the unlock hands it over: the caller holds it. */
    ASSERT_EQ(weft_sleep_until(t0 + 5 * MS - MS / 4), 0);
    weft_case cs[1] = {mutex_case(&m)};
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), 0);
    ASSERT_EQ(cs[0].rc, 0);
    ASSERT_EQ(weft_now(), t0 + 5 * MS);
    ASSERT_EQ(weft_mutex_try_lock(&m), -EBUSY);
    /* The caller's own: -EDEADLK. */
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), -EDEADLK);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);
    scope_end(s);
    /* Free: at once, try_select too. */
    ASSERT_EQ(weft_try_select(cs, 1), 0);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);
    /* No state left: destroy finds it idle. */
    ASSERT_EQ(weft_mutex_destroy(&m), 0);
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), -EINVAL);
    cs[0] = mutex_case(NULL);
    ASSERT_EQ(weft_try_select(cs, 1), -EAGAIN);
    return 0;
}

TEST(mutex_case)
{
    ASSERT_EQ(t_run_virtual(1, mutex_main, NULL), 0);
}

/* ---- BULKHEAD ---- */

static void bh_leave(void *b)
{
    ASSERT_EQ(weft_bulkhead_leave(b), 0);
}

static int bh_selector(void *arg)
{
    weft_case cs[1] = {bulkhead_case(arg)};
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), -ECANCELED);
    return 0;
}

static int bulkhead_main(void *arg)
{
    (void)arg;
    weft_time t0 = weft_now();
    weft_bulkhead *b;
    ASSERT_EQ(weft_bulkhead_new(&b, 1, 1), 0);
    weft_case cs[1] = {bulkhead_case(b)};
    ASSERT_EQ(weft_try_select(cs, 1), 0); /* the one turn */
    /* Not chosen: it waits no more (the queue's one place is free). */
    ASSERT_EQ(with_deadline(bulkhead_case(b), 2 * MS), TIMED_OUT);
    /* Cancelled: likewise. */
    weft_scope *s = scope_open();
    spawn(bh_selector, b);
    ASSERT_EQ(weft_sleep_for(MS), 0);
    scope_cancel_end(s);
    /* Waits in the queue's one place; the leave hands it the turn. */
    s = scope_open();
    struct later leave = {2, bh_leave, b};
    later(&leave);
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), 0);
    ASSERT_EQ(cs[0].rc, 0);
    ASSERT_EQ(weft_now(), t0 + 5 * MS);
    scope_end(s);
    /* The queue full (a waiter in its place): -EBUSY at once. */
    s = scope_open();
    spawn(bh_selector, b);
    ASSERT_EQ(weft_sleep_for(MS), 0);
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), 0);
    ASSERT_EQ(cs[0].rc, -EBUSY);
    scope_cancel_end(s);
    ASSERT_EQ(weft_bulkhead_leave(b), 0);
    cs[0] = bulkhead_case(NULL);
    ASSERT_EQ(weft_try_select(cs, 1), -EAGAIN);
    ASSERT_EQ(weft_bulkhead_free(b), 0); /* nothing held, nobody waits */
    return 0;
}

TEST(bulkhead_case)
{
    ASSERT_EQ(t_run_virtual(1, bulkhead_main, NULL), 0);
}

/* ---- a blocking call, started as a future ---- */

static int blocking_fn(void *arg)
{
    int *p = arg;
    char c;
    ssize_t n = read(p[0], &c, 1); /* blocks its pool thread */
    return n == 1 ? 42 : -EIO;
}

static int blocking_task(void *arg)
{
    return weft_blocking(blocking_fn, arg);
}

static int blocking_main(void *arg)
{
    (void)arg;
    static int p[2]; /* outlives a cancelled call */
    ASSERT_EQ(pipe(p), 0);
    weft_scope *s = scope_open();
    weft_future *f;
    ASSERT(weft_future_spawn(s, blocking_task, p, &f) >= 0);
    int v = 0;
    weft_case cs[2] = {{.op = WEFT_OP_FUTURE, .future = f, .elem = &v},
                       deadline_case(weft_now() + 2 * MS)};
    /* The call runs on: the deadline is chosen, the future untouched. */
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), 1);
    ASSERT_EQ(weft_future_try_await(f, NULL), -EINPROGRESS);
    /* Its completion is chosen. */
    ASSERT_EQ(write(p[1], "x", 1), 1);
    cs[1] = deadline_case(WEFT_NEVER);
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), 0);
    ASSERT_EQ(cs[0].rc, 0);
    ASSERT_EQ(v, 42);
    ASSERT_EQ(weft_future_unref(f), 0);
    /* Cancelled through its future: the call running is abandoned (it
     * finishes on its thread), the future rejected with -ECANCELED. */
    ASSERT(weft_future_spawn(s, blocking_task, p, &f) >= 0);
    cs[0].future = f;
    cs[1] = deadline_case(weft_now() + MS);
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), 1);
    ASSERT_EQ(weft_future_cancel(f), 0);
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), 0);
    ASSERT_EQ(cs[0].rc, -ECANCELED);
    ASSERT_EQ(weft_future_unref(f), 0);
    scope_end(s);
    ASSERT_EQ(write(p[1], "y", 1), 1); /* lets the abandoned call end */
    return 0;
}

TEST(blocking_call_as_future_case)
{
    ASSERT_EQ(t_run_virtual(1, blocking_main, NULL), 0);
}

/* ---- one case of each kind ----
 * A world of objects, none ready, and a maker per kind that makes its
 * case ready at the instant `at`, all at once. The selector waits over
 * one case of each; afterwards each case not chosen must have left its
 * object as it was, and the books (joins, permits, tokens, messages,
 * holds) must add up. */

enum {
    K_JOIN,
    K_EVENT,
    K_WG,
    K_EXIT,
    K_TELL,
    K_LIMITER,
    K_RDLOCK,
    K_WRLOCK,
    K_BULKHEAD,
    K_SEM,
    K_MUTEX,
    K_DEADLINE,
    NKINDS
};

struct world {
    weft_time at;       /* when every maker acts */
    weft_task_handle h; /* JOIN: a child waiting for jgate */
    weft_sem jgate;
    weft_event ev;
    weft_wg wg;
    weft_actor *exiter; /* ACTOR_JOIN: stopped at `at` */
    weft_actor *mbox;   /* TELL: kept full; its gate opened once at `at` */
    struct mbox *mb;
    weft_limiter *lim;  /* LIMITER: one token each ms */
    weft_rwlock rd, wr; /* held for writing / reading until `at` */
    weft_bulkhead *bh;  /* its one turn held until `at` */
    weft_sem sem;
    weft_mutex mu; /* held until `at` */
    weft_wg held;  /* the holders hold */
    uint64_t seed;
    long told;  /* messages into mbox, every way */
    int opened; /* permits given to mbox's gate */
    int msg;
};

struct maker {
    struct world *w;
    int kind;
    bool yield;
};

static int jchild(void *arg)
{
    struct world *w = arg;
    ASSERT_EQ(weft_sem_acquire(&w->jgate, 1), 0);
    return 5;
}

static int exiter_fn(void *state, weft_actor_msg *m)
{
    (void)state;
    (void)m;
    return 0;
}

static void make_ready(struct world *w, int kind)
{
    switch (kind) {
    case K_JOIN:
        ASSERT_EQ(weft_sem_release(&w->jgate, 1), 0);
        break;
    case K_EVENT:
        ASSERT_EQ(weft_event_set(&w->ev), 0);
        break;
    case K_WG:
        ASSERT_EQ(weft_wg_done(&w->wg), 0);
        break;
    case K_EXIT:
        ASSERT_EQ(weft_actor_stop(w->exiter, WEFT_STOP_DRAIN), 0);
        break;
    case K_TELL:
        ASSERT_EQ(weft_sem_release(&w->mb->gate, 1), 0);
        break;
    case K_RDLOCK:
        ASSERT_EQ(weft_rwlock_wrunlock(&w->rd), 0);
        break;
    case K_WRLOCK:
        ASSERT_EQ(weft_rwlock_rdunlock(&w->wr), 0);
        break;
    case K_BULKHEAD:
        ASSERT_EQ(weft_bulkhead_leave(w->bh), 0);
        break;
    case K_SEM:
        ASSERT_EQ(weft_sem_release(&w->sem, 1), 0);
        break;
    case K_MUTEX:
        ASSERT_EQ(weft_mutex_unlock(&w->mu), 0);
        break;
    default: /* LIMITER, DEADLINE: the clock makes them ready */
        break;
    }
}

static int maker_task(void *arg)
{
    struct maker *m = arg;
    struct world *w = m->w;
    if (m->kind == K_RDLOCK)
        ASSERT_EQ(weft_rwlock_wrlock(&w->rd), 0);
    else if (m->kind == K_WRLOCK)
        ASSERT_EQ(weft_rwlock_rdlock(&w->wr), 0);
    else if (m->kind == K_BULKHEAD)
        ASSERT_EQ(weft_bulkhead_enter(w->bh, WEFT_NEVER), 0);
    else if (m->kind == K_MUTEX)
        ASSERT_EQ(weft_mutex_lock(&w->mu), 0);
    if (m->kind == K_RDLOCK || m->kind == K_WRLOCK || m->kind == K_BULKHEAD ||
        m->kind == K_MUTEX)
        ASSERT_EQ(weft_wg_done(&w->held), 0);
    ASSERT_EQ(weft_sleep_until(w->at), 0);
    if (m->yield)
        ASSERT_EQ(weft_yield(), 0);
    make_ready(w, m->kind);
    return 0;
}

/* Fills mbox's mailbox, once its actor waits at its gate with the
 * message after the last one the gate let through. */
static void mbox_fill(struct world *w)
{
    while (w->mb->entered != w->opened + 1)
        ASSERT_EQ(weft_sleep_for(MS / 10), 0);
    int v = 7;
    while (weft_actor_try_tell(w->mbox, &v) == 0)
        w->told++;
}

/* The objects of a round and its makers, spawned into the current scope
 * in an order of the seed's; returns when the holders hold. */
static void world_round(struct world *w, struct maker *mk)
{
    /* The token due now (or at once): the next one is due at `at`. */
    ASSERT_EQ(weft_limiter_acquire(w->lim, 1, WEFT_NEVER), 0);
    w->at = weft_now() + MS;
    weft_spawn_opts o = {.handle = &w->h};
    ASSERT(weft_spawn_ex(NULL, jchild, w, &o) >= 0);
    ASSERT_EQ(weft_wg_add(&w->wg, 1), 0);
    weft_actor_opts ao = {.fn = exiter_fn, .msg_size = 1, .capacity = 1};
    ASSERT_EQ(weft_actor_spawn(NULL, &ao, &w->exiter), 0);
    ASSERT_EQ(weft_wg_add(&w->held, 4), 0);
    int order[NKINDS];
    for (int i = 0; i < NKINDS; i++) {
        int j = (int)(rnd(&w->seed) % (uint64_t)(i + 1));
        order[i] = order[j];
        order[j] = i;
    }
    for (int i = 0; i < NKINDS; i++) {
        mk[i] = (struct maker){w, order[i], rnd(&w->seed) & 1};
        spawn(maker_task, &mk[i]);
    }
    ASSERT_EQ(weft_wg_wait(&w->held), 0);
}

static void world_cases(struct world *w, weft_case *cs, int *status)
{
    cs[K_JOIN] = join_case(w->h, status);
    cs[K_EVENT] = event_case(&w->ev);
    cs[K_WG] = wg_case(&w->wg);
    cs[K_EXIT] = exit_case(w->exiter, NULL);
    cs[K_TELL] = tell_case(w->mbox, &w->msg);
    cs[K_LIMITER] = limiter_case(w->lim, 1);
    cs[K_RDLOCK] = rw_case(&w->rd, WEFT_OP_RDLOCK);
    cs[K_WRLOCK] = rw_case(&w->wr, WEFT_OP_WRLOCK);
    cs[K_BULKHEAD] = bulkhead_case(w->bh);
    cs[K_SEM] = sem_case(&w->sem);
    cs[K_MUTEX] = mutex_case(&w->mu);
    cs[K_DEADLINE] = deadline_case(w->at);
}

/* After the round's makers have all acted: took[k] selects took effect
 * through case k (and gave back any lock or turn they got); every other
 * case left its object as it was. Undoes both. */
static void world_settle(struct world *w, const int *took)
{
    int st = -1;
    ASSERT(took[K_JOIN] <= 1 && took[K_LIMITER] <= 1 && took[K_SEM] <= 1);
    if (!took[K_JOIN])
        ASSERT_EQ(weft_task_join(w->h, &st), 0);  /* not joined */
    ASSERT_EQ(weft_task_join(w->h, &st), -ESRCH); /* joined once */
    ASSERT_EQ(weft_event_reset(&w->ev), 0);
    ASSERT_EQ(weft_actor_join_until(w->exiter, &st, WEFT_NEVER), 0);
    ASSERT_EQ(weft_actor_unref(w->exiter), 0);
    w->told += took[K_TELL];
    w->opened++;
    mbox_fill(w);
    /* The token due at `at`: a select's, or still there. */
    ASSERT_EQ(weft_limiter_try_acquire(w->lim, 1),
              took[K_LIMITER] ? -EAGAIN : 0);
    ASSERT_EQ(weft_rwlock_try_wrlock(&w->rd), 0); /* nobody holds it */
    ASSERT_EQ(weft_rwlock_wrunlock(&w->rd), 0);
    ASSERT_EQ(weft_rwlock_try_wrlock(&w->wr), 0);
    ASSERT_EQ(weft_rwlock_wrunlock(&w->wr), 0);
    ASSERT_EQ(weft_bulkhead_leave(w->bh), -EINVAL); /* no turn held */
    ASSERT_EQ(weft_mutex_try_lock(&w->mu), 0);
    ASSERT_EQ(weft_mutex_unlock(&w->mu), 0);
    if (!took[K_SEM])
        ASSERT_EQ(weft_sem_try_acquire(&w->sem, 1), 0);
    ASSERT_EQ(weft_sem_available(&w->sem), 0);
}

static void world_open(struct world *w, uint64_t seed)
{
    *w = (struct world){.seed = seed};
    w->mb = calloc(1, sizeof(*w->mb));
    ASSERT(w->mb != NULL);
    w->mbox = mbox_spawn(w->mb, 1);
    ASSERT_EQ(weft_limiter_new(&w->lim, 1, MS, 1), 0);
    ASSERT_EQ(weft_bulkhead_new(&w->bh, 1, 4), 0);
    int v = 7;
    ASSERT_EQ(weft_actor_tell(w->mbox, &v, WEFT_NEVER), 0);
    w->told = 1;
    mbox_fill(w); /* once the actor has taken it */
}

/* Every message told was handled once; every object is idle. */
static void world_close(struct world *w)
{
    ASSERT_EQ(weft_actor_stop(w->mbox, WEFT_STOP_DRAIN), 0);
    ASSERT_EQ(weft_sem_release(&w->mb->gate, 1 << 20), 0);
    ASSERT_EQ(weft_actor_join_until(w->mbox, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(w->mb->ngot, w->told);
    ASSERT_EQ(weft_actor_unref(w->mbox), 0);
    free(w->mb);
    ASSERT_EQ(weft_limiter_free(w->lim), 0);
    ASSERT_EQ(weft_bulkhead_free(w->bh), 0);
    ASSERT_EQ(weft_rwlock_destroy(&w->rd), 0);
    ASSERT_EQ(weft_rwlock_destroy(&w->wr), 0);
    ASSERT_EQ(weft_event_destroy(&w->ev), 0);
    ASSERT_EQ(weft_wg_destroy(&w->wg), 0);
    ASSERT_EQ(weft_sem_destroy(&w->sem), 0);
    ASSERT_EQ(weft_sem_destroy(&w->jgate), 0);
    ASSERT_EQ(weft_mutex_destroy(&w->mu), 0); /* idle: no waiter bit left */
}

struct sel_run {
    struct world *w;
    int rc;
};

static int world_selector(void *arg)
{
    struct sel_run *r = arg;
    weft_case cs[NKINDS];
    world_cases(r->w, cs, NULL);
    cs[K_DEADLINE] = deadline_case(WEFT_NEVER);
    r->rc = weft_select(cs, NKINDS, WEFT_NEVER);
    return 0;
}

/* A cancel, or the select's deadline, before any case is ready: nothing
 * taken, nothing left queued. */
static int nothing_left_main(void *arg)
{
    (void)arg;
    struct world w;
    struct maker mk[NKINDS];
    world_open(&w, 1);
    for (int round = 0; round < 2; round++) {
        weft_scope *s = scope_open();
        world_round(&w, mk);
        weft_case cs[NKINDS];
        world_cases(&w, cs, NULL);
        cs[K_DEADLINE] = deadline_case(WEFT_NEVER);
        if (round == 0) {
            ASSERT_EQ(weft_select(cs, NKINDS, w.at - MS / 2), -ETIMEDOUT);
        } else {
            struct sel_run r = {&w, 0};
            weft_scope *c = scope_open();
            ASSERT(weft_spawn(c, world_selector, &r) >= 0);
            ASSERT_EQ(weft_sleep_for(MS / 2), 0);
            scope_cancel_end(c);
            ASSERT_EQ(r.rc, -ECANCELED);
        }
        scope_end(s); /* every maker has acted */
        int none[NKINDS] = {0};
        world_settle(&w, none);
    }
    world_close(&w);
    return 0;
}

TEST(cancel_and_deadline_leave_every_kind_as_it_was)
{
    ASSERT_EQ(t_run_virtual(2, nothing_left_main, NULL), 0);
}

/* The race: rounds in which SELECTORS tasks each select over a case of
 * each kind, against the makers that make them all ready at one instant,
 * on two workers. A select that gets a lock or a turn gives it back at
 * once (so another select may get it next); the books are settled once
 * every task of the round is done. */
#define SELECTORS 3

struct racer {
    struct world *w;
    int got, rc;
    weft_time when;
};

static int racer_task(void *arg)
{
    struct racer *r = arg;
    weft_case cs[NKINDS];
    int status = -1;
    world_cases(r->w, cs, &status);
    r->got = weft_select(cs, NKINDS, WEFT_NEVER);
    ASSERT(r->got >= 0 && r->got < NKINDS);
    r->rc = cs[r->got].rc;
    r->when = weft_now();
    if (r->rc != 0)
        return 0;
    switch (r->got) {
    case K_JOIN:
        ASSERT_EQ(status, 5);
        break;
    case K_RDLOCK:
        ASSERT_EQ(weft_rwlock_rdunlock(&r->w->rd), 0);
        break;
    case K_WRLOCK:
        ASSERT_EQ(weft_rwlock_wrunlock(&r->w->wr), 0);
        break;
    case K_MUTEX:
        ASSERT_EQ(weft_mutex_unlock(&r->w->mu), 0);
        break;
    case K_BULKHEAD:
        ASSERT_EQ(weft_bulkhead_leave(r->w->bh), 0);
        break;
    default:
        break;
    }
    return 0;
}

static int lockstep_main(void *arg)
{
    uint64_t seed = *(uint64_t *)arg;
    struct world w;
    struct maker mk[NKINDS];
    struct racer rs[SELECTORS];
    world_open(&w, seed);
    long rounds = T_SCALE(200), count[NKINDS] = {0};
    for (long i = 0; i < rounds; i++) {
        weft_scope *s = scope_open();
        world_round(&w, mk);
        for (int j = 0; j < SELECTORS; j++) {
            rs[j] = (struct racer){.w = &w, .got = -1};
            spawn(racer_task, &rs[j]);
        }
        scope_end(s);
        int took[NKINDS] = {0};
        for (int j = 0; j < SELECTORS; j++) {
            ASSERT_EQ(rs[j].when, w.at); /* nothing is ready before */
            /* A join that another select made first: -ESRCH. */
            ASSERT(rs[j].rc == 0 ||
                   (rs[j].got == K_JOIN && rs[j].rc == -ESRCH));
            took[rs[j].got] += rs[j].rc == 0;
            count[rs[j].got]++;
        }
        world_settle(&w, took);
    }
    long total = 0;
    for (int k = 0; k < NKINDS; k++)
        total += count[k];
    ASSERT_EQ(total, rounds * SELECTORS);
    world_close(&w);
    return 0;
}

TEST(lockstep_every_kind_two_workers)
{
    for (uint64_t s = 1; s <= 4; s++) {
        uint64_t seed = T_SEED(0x5e1ec7 + s);
        ASSERT_EQ(t_run(2, WEFT_CLOCK_VIRTUAL, seed, lockstep_main, &seed), 0);
    }
}

/* Outside a task: the cases that need one are -EPERM. */
/* No cases: only the deadline or a cancel ends the wait (Go's select {}),
 * and a try has nothing to take. */
static int sleeper_no_cases(void *arg)
{
    *(int *)arg = weft_select(NULL, 0, WEFT_NEVER);
    return 0;
}

static int no_cases_main(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_try_select(NULL, 0), -EAGAIN);
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_select(NULL, 0, t0 + 5 * MS), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + 5 * MS);
    weft_case off[2] = {{.op = WEFT_OP_EVENT}, {.op = WEFT_OP_JOIN}};
    ASSERT_EQ(weft_select(off, 2, weft_now() + MS), -ETIMEDOUT);
    int got = 1;
    weft_scope *s = scope_open();
    ASSERT(weft_spawn(s, sleeper_no_cases, &got) >= 0);
    ASSERT_EQ(weft_sleep_for(MS), 0);
    ASSERT_EQ(got, 1); /* still waiting */
    scope_cancel_end(s);
    ASSERT_EQ(got, -ECANCELED);
    ASSERT_EQ(weft_select(NULL, -1, WEFT_NEVER), -EINVAL);
    return 0;
}

TEST(no_cases_waits_for_the_deadline_or_a_cancel)
{
    ASSERT_EQ(t_run_virtual(1, no_cases_main, NULL), 0);
}

TEST(cases_outside_a_task)
{
    weft_rwlock l = WEFT_RWLOCK_INIT;
    weft_case cs[1] = {rw_case(&l, WEFT_OP_RDLOCK)};
    ASSERT_EQ(weft_try_select(cs, 1), -EPERM);
    cs[0] = join_case((weft_task_handle){1}, NULL);
    ASSERT_EQ(weft_try_select(cs, 1), -EPERM);
    weft_event e = WEFT_EVENT_INIT;
    cs[0] = event_case(&e);
    ASSERT_EQ(weft_event_set(&e), 0);
    ASSERT_EQ(weft_try_select(cs, 1), 0); /* any thread */
}
