/* SPDX-License-Identifier: MIT */
/*
 * Condition variable, once and barrier. Counts are exact, across workers;
 * who is woken, and when, is checked exactly on the virtual clock under
 * several scheduling seeds; the races that matter (a signal at the instant
 * a waiter's deadline passes, a cancel as a generation completes or as a
 * failed initialiser hands over) run under seeds and across workers with
 * exact accounting.
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

static void run_seeds(weft_fn fn)
{
    for (uint64_t seed = 1; seed <= 6; seed++)
        ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed), fn, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, fn, NULL), 0);
}

#define TICK (100 * WEFT_MSEC)

/* ===================== condition variable ============================== */

/* A task that arrives at `arrive` ticks, locks m, waits on c once (with a
 * deadline if set) and records how it came back. */
struct cw {
    weft_cond *c;
    weft_mutex *m;
    int arrive;
    weft_time deadline; /* 0: none */
    int rc;
    weft_time at;
    int order; /* order of return among the tasks of a run */
    int held;  /* 1 if it held m on return */
};

static int cw_next;      /* under the test's mutex */
static atomic_int cw_in; /* tasks inside m: at most one */

static int cw_task(void *arg)
{
    struct cw *w = arg;
    ASSERT_EQ(weft_sleep_for(w->arrive * TICK), 0);
    ASSERT_EQ(weft_mutex_lock(w->m), 0);
    w->rc = w->deadline ? weft_cond_wait_until(w->c, w->m, w->deadline)
                        : weft_cond_wait(w->c, w->m);
    w->at = weft_now();
    ASSERT_EQ(atomic_exchange(&cw_in, 1), 0);
    w->order = cw_next++;
    ASSERT_EQ(weft_yield(), 0); /* still alone in m across a switch */
    atomic_store(&cw_in, 0);
    w->held = weft_mutex_unlock(w->m) == 0;
    return 0;
}

static int cw_returned(struct cw *w, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += w[i].at != 0;
    return k;
}

#define CW_N 5
static const int cw_arrive[CW_N] = {3, 1, 5, 2, 4};

/* ---- signal wakes exactly one, the longest waiter ---------------------- */

static int signal_root(void *arg)
{
    (void)arg;
    weft_mutex m = WEFT_MUTEX_INIT;
    weft_cond c = WEFT_COND_INIT;
    struct cw w[CW_N];
    cw_next = 0;
    /* Nobody waits: a signal is not remembered. */
    ASSERT_EQ(weft_cond_signal(&c), 0);
    ASSERT_EQ(weft_cond_broadcast(&c), 0);
    ASSERT_EQ(weft_mutex_lock(&m), 0);
    ASSERT_EQ(weft_cond_wait_until(&c, &m, 5 * TICK), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 5 * TICK);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);

    weft_scope *s = scope_open();
    for (int i = 0; i < CW_N; i++) {
        w[i] = (struct cw){
            .c = &c, .m = &m, .arrive = cw_arrive[i], .rc = 99, .order = -1};
        spawn(cw_task, &w[i]);
    }
    ASSERT_EQ(weft_sleep_for(10 * TICK), 0); /* until 15 */
    for (int k = 0; k < CW_N; k++) {
        if (k % 2) { /* signal holding the mutex, or not */
            ASSERT_EQ(weft_mutex_lock(&m), 0);
            ASSERT_EQ(weft_cond_signal(&c), 0);
            ASSERT_EQ(weft_mutex_unlock(&m), 0);
        } else {
            ASSERT_EQ(weft_cond_signal(&c), 0);
        }
        ASSERT_EQ(weft_sleep_for(TICK), 0);
        ASSERT_EQ(cw_returned(w, CW_N), k + 1); /* exactly one more */
        for (int i = 0; i < CW_N; i++) {
            if (w[i].arrive != k + 1)
                continue;
            ASSERT_EQ(w[i].rc, 0);
            ASSERT_EQ(w[i].order, k);
            ASSERT_EQ(w[i].at, (15 + k) * TICK);
        }
    }
    scope_end(s);
    for (int i = 0; i < CW_N; i++)
        ASSERT(w[i].held);
    return 0;
}

TEST(cond_signal_wakes_one_in_arrival_order)
{
    run_seeds(signal_root);
}

/* ---- broadcast wakes all ----------------------------------------------- */

static int broadcast_root(void *arg)
{
    (void)arg;
    weft_mutex m = WEFT_MUTEX_INIT;
    weft_cond c = WEFT_COND_INIT;
    struct cw w[CW_N];
    cw_next = 0;
    weft_scope *s = scope_open();
    for (int i = 0; i < CW_N; i++) {
        w[i] = (struct cw){.c = &c,
                           .m = &m,
                           .arrive = cw_arrive[i],
                           .deadline = i % 2 ? 100 * TICK : 0,
                           .rc = 99};
        spawn(cw_task, &w[i]);
    }
    ASSERT_EQ(weft_sleep_for(10 * TICK), 0);
    ASSERT_EQ(weft_cond_broadcast(&c), 0);
    ASSERT_EQ(weft_cond_signal(&c), 0); /* nobody left: no effect */
    scope_end(s);
    /* Each returns holding m, so after the broadcast they take m in turn.
     * On one worker nobody waits for it on the clock. On two, a waiter
     * that loses m to a task on the other worker looks again a few
     * microseconds later (the mutex's snooze), and the virtual clock moves
     * on while all are snoozing: by less than a millisecond each, since a
     * waiter starved that long is handed the lock. */
    weft_time slack = weft_workers() == 1 ? 0 : CW_N * WEFT_MSEC;
    for (int i = 0; i < CW_N; i++) {
        ASSERT_EQ(w[i].rc, 0);
        ASSERT(w[i].at >= 10 * TICK && w[i].at <= 10 * TICK + slack);
        ASSERT(w[i].held);
    }
    ASSERT_EQ(cw_next, CW_N);
    return 0;
}

TEST(cond_broadcast_wakes_all)
{
    run_seeds(broadcast_root);
}

/* ---- wait_until: exact timeout, returns holding the mutex -------------- */

struct hold {
    weft_mutex *m;
    int at, until; /* ticks after t0: lock at `at`, unlock at `until` */
    weft_time t0;
    int locked_at_once; /* trylock at `at` worked: the waiter let go of m */
};

static int hold_task(void *arg)
{
    struct hold *h = arg;
    ASSERT_EQ(weft_sleep_until(h->t0 + h->at * TICK), 0);
    h->locked_at_once = weft_mutex_try_lock(h->m) == 0;
    if (!h->locked_at_once)
        ASSERT_EQ(weft_mutex_lock(h->m), 0);
    ASSERT_EQ(weft_sleep_until(h->t0 + h->until * TICK), 0);
    ASSERT_EQ(weft_mutex_unlock(h->m), 0);
    return 0;
}

static int timeout_root(void *arg)
{
    (void)arg;
    weft_mutex m = WEFT_MUTEX_INIT;
    weft_cond c = WEFT_COND_INIT;
    ASSERT_EQ(weft_mutex_lock(&m), 0);
    /* Times out exactly at the deadline; m held again. */
    ASSERT_EQ(weft_cond_wait_until(&c, &m, 3 * TICK), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 3 * TICK);
    ASSERT_EQ(weft_mutex_try_lock(&m), -EBUSY); /* ours */
    /* A deadline already past: at once, m held. */
    ASSERT_EQ(weft_cond_wait_until(&c, &m, TICK), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 3 * TICK);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);

    /* The waiter lets go of m while it waits, and when its deadline passes
     * while another task holds m, it returns once it has m again. */
    weft_time t0 = weft_now();
    struct hold h = {.m = &m, .at = 1, .until = 5, .t0 = t0};
    weft_scope *s = scope_open();
    spawn(hold_task, &h);
    ASSERT_EQ(weft_mutex_lock(&m), 0);
    ASSERT_EQ(weft_cond_wait_until(&c, &m, t0 + 3 * TICK), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + 5 * TICK);
    ASSERT(h.locked_at_once);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);
    scope_end(s);
    ASSERT_EQ(weft_mutex_unlock(&m), -EPERM);
    return 0;
}

TEST(cond_wait_until_times_out_exactly_holding_mutex)
{
    run_seeds(timeout_root);
}

/* ---- cancel: returns -ECANCELED holding the mutex, not signalled ------- */

static int cancel_root(void *arg)
{
    (void)arg;
    weft_mutex m = WEFT_MUTEX_INIT;
    weft_cond c = WEFT_COND_INIT;
    cw_next = 0;

    /* a (to be cancelled) waits first, b second. Cancelled at 3, a returns
     * at once holding m; the signal at 4 goes to b. */
    struct cw a = {.c = &c, .m = &m, .arrive = 1, .rc = 99};
    struct cw b = {.c = &c, .m = &m, .arrive = 2, .rc = 99};
    weft_scope *outer = scope_open();
    spawn(cw_task, &b);
    weft_scope *inner = scope_open();
    spawn(cw_task, &a);
    ASSERT_EQ(weft_sleep_for(3 * TICK), 0);
    scope_cancel_end(inner);
    ASSERT_EQ(a.rc, -ECANCELED);
    ASSERT_EQ(a.at, 3 * TICK);
    ASSERT(a.held);
    ASSERT_EQ(b.at, 0); /* still waiting */
    ASSERT_EQ(weft_sleep_for(TICK), 0);
    ASSERT_EQ(weft_cond_signal(&c), 0);
    scope_end(outer);
    ASSERT_EQ(b.rc, 0);
    ASSERT_EQ(b.at, 4 * TICK);
    ASSERT(b.held);

    /* Cancelled while another task holds m: -ECANCELED once it has m. */
    weft_time t0 = weft_now();
    struct hold h = {.m = &m, .at = 1, .until = 6, .t0 = t0};
    a = (struct cw){.c = &c, .m = &m, .arrive = 0, .rc = 99};
    outer = scope_open();
    spawn(hold_task, &h);
    inner = scope_open();
    spawn(cw_task, &a);
    ASSERT_EQ(weft_sleep_for(3 * TICK), 0);
    ASSERT_EQ(weft_scope_cancel(inner), 0);
    ASSERT_EQ(weft_scope_join(inner), -ECANCELED);
    ASSERT_EQ(weft_scope_free(inner), 0);
    ASSERT_EQ(a.rc, -ECANCELED);
    ASSERT_EQ(a.at, t0 + 6 * TICK);
    ASSERT(a.held);
    scope_end(outer);

    /* In a cancelled scope: -ECANCELED at once, m never let go. */
    ASSERT_EQ(weft_mutex_lock(&m), 0);
    weft_scope *sc = scope_open();
    ASSERT_EQ(weft_scope_cancel(sc), 0);
    t0 = weft_now();
    ASSERT_EQ(weft_cond_wait(&c, &m), -ECANCELED);
    ASSERT_EQ(weft_cond_wait_until(&c, &m, t0 + TICK), -ECANCELED);
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(weft_cond_signal(&c), 0); /* never blocks: works */
    ASSERT_EQ(weft_scope_join(sc), -ECANCELED);
    ASSERT_EQ(weft_scope_free(sc), 0);
    ASSERT_EQ(weft_mutex_unlock(&m), 0);
    return 0;
}

TEST(cond_cancel_returns_holding_mutex)
{
    run_seeds(cancel_root);
}

/* ---- misuse: EPERM, EINVAL; signal from a plain thread ----------------- */

static int other_holder(void *arg)
{
    weft_mutex *m = arg;
    weft_cond c = WEFT_COND_INIT;
    ASSERT_EQ(weft_cond_wait(&c, m), -EPERM); /* the root holds it */
    ASSERT_EQ(weft_cond_wait_until(&c, m, WEFT_NEVER), -EPERM);
    return 0;
}

static int misuse_root(void *arg)
{
    (void)arg;
    weft_mutex m = WEFT_MUTEX_INIT;
    weft_cond c;
    memset(&c, 0, sizeof c); /* zeroed: ready */
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_cond_wait(&c, &m), -EPERM); /* not held */
    ASSERT_EQ(weft_cond_wait_until(&c, &m, t0 + TICK), -EPERM);
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(weft_mutex_lock(&m), 0);
    weft_scope *s = scope_open();
    spawn(other_holder, &m);
    scope_end(s);
    ASSERT_EQ(weft_cond_wait(NULL, &m), -EINVAL);
    ASSERT_EQ(weft_cond_wait(&c, NULL), -EINVAL);
    ASSERT_EQ(weft_cond_wait_until(NULL, &m, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_cond_signal(NULL), -EINVAL);
    ASSERT_EQ(weft_cond_broadcast(NULL), -EINVAL);
    ASSERT_EQ(weft_mutex_unlock(&m), 0); /* still held: nothing done */
    return 0;
}

TEST(cond_misuse_errors)
{
    ASSERT_EQ(t_run_virtual(1, misuse_root, NULL), 0);
    weft_mutex m = WEFT_MUTEX_INIT;
    weft_cond c = WEFT_COND_INIT;
    ASSERT_EQ(weft_cond_wait(&c, &m), -EPERM); /* outside a task */
    ASSERT_EQ(weft_cond_wait_until(&c, &m, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_cond_signal(&c), 0); /* any thread */
    ASSERT_EQ(weft_cond_broadcast(&c), 0);
}

#define PT_N 4
struct pt {
    weft_mutex m;
    weft_cond c;
    atomic_int waiting; /* counted before waiting, under m */
    atomic_int ok;      /* counted after waking */
};

static int pt_task(void *arg)
{
    struct pt *p = arg;
    ASSERT_EQ(weft_mutex_lock(&p->m), 0);
    atomic_fetch_add(&p->waiting, 1);
    ASSERT_EQ(weft_cond_wait(&p->c, &p->m), 0); /* no spurious wake-ups */
    atomic_fetch_add(&p->ok, 1);
    ASSERT_EQ(weft_mutex_unlock(&p->m), 0);
    return 0;
}

static void *pt_thread(void *arg)
{
    struct pt *p = arg;
    /* A plain thread cannot lock m, so it cannot know the last waiter has
     * queued: two signals wake two of those queued (at least three are),
     * then broadcasts wake the rest, however late they queue. */
    while (atomic_load(&p->waiting) < PT_N)
        sched_yield();
    ASSERT_EQ(weft_cond_signal(&p->c), 0);
    ASSERT_EQ(weft_cond_signal(&p->c), 0);
    while (atomic_load(&p->ok) < 2)
        sched_yield();
    for (int i = 0; i < 100; i++)
        sched_yield();
    ASSERT_EQ(atomic_load(&p->ok), 2); /* two signals: two woken */
    while (atomic_load(&p->ok) < PT_N) {
        ASSERT_EQ(weft_cond_broadcast(&p->c), 0);
        sched_yield();
    }
    return NULL;
}

static int pt_root(void *arg)
{
    struct pt *p = arg;
    weft_scope *s = scope_open();
    for (int i = 0; i < PT_N; i++)
        spawn(pt_task, p);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, pt_thread, p), 0);
    scope_end(s);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(atomic_load(&p->ok), PT_N);
    return 0;
}

TEST(cond_signal_from_plain_pthread)
{
    static struct pt p;
    ASSERT_EQ(t_run_mono(2, pt_root, &p), 0);
}

/* ---- ping-pong across workers: one lost wake-up deadlocks it ----------- */

/* Two tasks, on two workers, take turns, each waiting (no deadline that
 * matters) until it is its turn: a signal lost between a waiter's unlock
 * and its park would leave both waiting. The long deadline only turns
 * such a hang into a failure. */
struct pp {
    weft_mutex m;
    weft_cond c;
    int turn;        /* under m: whose turn, 0 or 1 */
    int stop;        /* under m: the last turn has been taken */
    long count;      /* under m: turns taken, by both */
    long turns;      /* at most, in all */
    weft_time until; /* or until then: on a busy machine a hand-off
                      * between workers may wait for a core */
    int spread;      /* place the two on different workers */
    atomic_int started[2];
    int worker[2];
};

struct pparg {
    struct pp *x;
    int me;
};

static int pp_task(void *arg)
{
    struct pparg *a = arg;
    struct pp *x = a->x;
    x->worker[a->me] = weft_worker_id();
    atomic_store(&x->started[a->me], 1);
    /* The first holds its worker until the second has started, so the
     * second starts elsewhere. */
    while (x->spread && a->me == 0 && !atomic_load(&x->started[1]))
        sched_yield();
    ASSERT_EQ(weft_mutex_lock(&x->m), 0);
    for (;;) {
        while (x->turn != a->me && !x->stop) {
            int rc =
                weft_cond_wait_until(&x->c, &x->m, weft_now() + 10 * WEFT_SEC);
            if (rc == -ETIMEDOUT)
                T_FAIL("turn %ld: the other task's signal was lost", x->count);
            ASSERT_EQ(rc, 0);
        }
        if (x->stop)
            break;
        if (++x->count == x->turns || weft_now() >= x->until)
            x->stop = 1;
        x->turn = !a->me;
        ASSERT_EQ(weft_cond_signal(&x->c), 0);
    }
    ASSERT_EQ(weft_mutex_unlock(&x->m), 0);
    return 0;
}

static int pp_root(void *arg)
{
    struct pp *x = arg;
    struct pparg a[2] = {{x, 0}, {x, 1}};
    x->spread = weft_workers() > 1;
    x->until = weft_now() + 300 * WEFT_MSEC;
    weft_scope *s = scope_open();
    spawn(pp_task, &a[0]);
    /* Keep this worker busy until an idle one has taken the first. */
    while (x->spread && !atomic_load(&x->started[0]))
        sched_yield();
    spawn(pp_task, &a[1]);
    scope_end(s);
    ASSERT(x->count >= 1 && x->count <= x->turns);
    if (x->spread)
        ASSERT(x->worker[0] != x->worker[1]);
    return 0;
}

TEST(cond_ping_pong_across_workers)
{
    static struct pp x;
    int workers[] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        memset(&x, 0, sizeof x);
        x.turns = T_SCALE(40000);
        ASSERT_EQ(t_run_mono(workers[k], pp_root, &x), 0);
    }
}

/* ---- producer/consumer with a predicate loop across workers ------------ */

#define PC_PROD 4
#define PC_CONS 4
#define PC_CAP 8

struct pc {
    weft_mutex m;
    weft_cond not_empty, not_full;
    long buf[PC_CAP]; /* ring; all below under m */
    int head, len;
    long consumed;
    long per_prod;
    unsigned char *seen; /* per value: times consumed */
    long timeouts;
    atomic_long per_worker[4];
};

/* Waits on cv (plain, or with a short deadline: a timed-out waiter just
 * checks the predicate again, so a signal it missed must reach another). */
static void pc_wait(struct pc *x, weft_cond *cv, int timed)
{
    if (!timed) {
        ASSERT_EQ(weft_cond_wait(cv, &x->m), 0);
        return;
    }
    int rc = weft_cond_wait_until(cv, &x->m, weft_now() + 20 * WEFT_USEC);
    ASSERT(rc == 0 || rc == -ETIMEDOUT);
    x->timeouts += rc == -ETIMEDOUT;
}

struct pcarg {
    struct pc *x;
    int id;
};

static int pc_producer(void *arg)
{
    struct pcarg *a = arg;
    struct pc *x = a->x;
    atomic_fetch_add(&x->per_worker[weft_worker_id() & 3], 1);
    for (long i = 0; i < x->per_prod; i++) {
        ASSERT_EQ(weft_mutex_lock(&x->m), 0);
        while (x->len == PC_CAP)
            pc_wait(x, &x->not_full, a->id % 2);
        x->buf[(x->head + x->len++) % PC_CAP] = a->id * x->per_prod + i;
        ASSERT_EQ(weft_cond_signal(&x->not_empty), 0);
        ASSERT_EQ(weft_mutex_unlock(&x->m), 0);
    }
    return 0;
}

static int pc_consumer(void *arg)
{
    struct pcarg *a = arg;
    struct pc *x = a->x;
    long total = PC_PROD * x->per_prod;
    atomic_fetch_add(&x->per_worker[weft_worker_id() & 3], 1);
    ASSERT_EQ(weft_mutex_lock(&x->m), 0);
    for (;;) {
        while (x->len == 0 && x->consumed < total)
            pc_wait(x, &x->not_empty, a->id % 2);
        if (x->consumed == total)
            break;
        long v = x->buf[x->head];
        x->head = (x->head + 1) % PC_CAP;
        x->len--;
        x->seen[v]++;
        if (++x->consumed == total) /* wake the other consumers to leave */
            ASSERT_EQ(weft_cond_broadcast(&x->not_empty), 0);
        ASSERT_EQ(weft_cond_signal(&x->not_full), 0);
        if (v % 64 == 0) { /* let others at the mutex now and then */
            ASSERT_EQ(weft_mutex_unlock(&x->m), 0);
            ASSERT_EQ(weft_yield(), 0);
            ASSERT_EQ(weft_mutex_lock(&x->m), 0);
        }
    }
    ASSERT_EQ(weft_mutex_unlock(&x->m), 0);
    return 0;
}

static int pc_root(void *arg)
{
    struct pc *x = arg;
    struct pcarg args[PC_PROD + PC_CONS];
    weft_scope *s = scope_open();
    for (int i = 0; i < PC_CONS; i++) {
        args[i] = (struct pcarg){x, i};
        spawn(pc_consumer, &args[i]);
    }
    for (int i = 0; i < PC_PROD; i++) {
        args[PC_CONS + i] = (struct pcarg){x, i};
        spawn(pc_producer, &args[PC_CONS + i]);
    }
    scope_end(s);
    ASSERT_EQ(x->consumed, PC_PROD * x->per_prod);
    ASSERT_EQ(x->len, 0);
    for (long v = 0; v < PC_PROD * x->per_prod; v++)
        if (x->seen[v] != 1)
            T_FAIL("value %ld consumed %d times", v, x->seen[v]);
    return 0;
}

static void run_pc(int workers)
{
    static struct pc x;
    memset(&x, 0, sizeof x);
    x.per_prod = T_SCALE(5000);
    x.seen = calloc((size_t)(PC_PROD * x.per_prod), 1);
    ASSERT(x.seen != NULL);
    ASSERT_EQ(t_run_mono(workers, pc_root, &x), 0);
    free(x.seen);
}

TEST(cond_producer_consumer_across_workers)
{
    run_pc(1);
    run_pc(2);
    run_pc(4);
}

/* ---- no lost signal when a deadline passes as the signal comes --------- */

/* Each round: K_DL waiters with deadlines right around the moment the root
 * signals, and K_PLAIN waiters without. The root sends K_PLAIN signals:
 * since at least that many waiters never leave, every signal must wake
 * one, so exactly K_PLAIN waits return 0 (none lost to a waiter that was
 * leaving, none doubled) and the other deadline waiters time out; a
 * broadcast then releases the plain waiters left. On the virtual clock the
 * deadlines fall one nanosecond before, at, and after the signals, and the
 * seed decides whether the signaller runs before the waiters whose
 * deadline has just passed have left the queue. */
#define K_DL 4
#define K_PLAIN 3

struct ls {
    weft_mutex m;
    weft_cond c, done;
    int queued, woken_dl, woken_plain, timedout; /* under m */
    long total_woken, total_timedout;            /* over all rounds */
};

struct lsw {
    struct ls *x;
    weft_time deadline; /* 0: none */
};

static int ls_waiter(void *arg)
{
    struct lsw *w = arg;
    struct ls *x = w->x;
    ASSERT_EQ(weft_mutex_lock(&x->m), 0);
    x->queued++;
    ASSERT_EQ(weft_cond_signal(&x->done), 0); /* queued once m is let go */
    int rc = w->deadline ? weft_cond_wait_until(&x->c, &x->m, w->deadline)
                         : weft_cond_wait(&x->c, &x->m);
    if (rc == 0 && w->deadline)
        x->woken_dl++;
    else if (rc == 0)
        x->woken_plain++;
    else if (rc == -ETIMEDOUT && w->deadline)
        x->timedout++;
    else
        T_FAIL("wait returned %d", rc);
    ASSERT_EQ(weft_cond_signal(&x->done), 0);
    ASSERT_EQ(weft_mutex_unlock(&x->m), 0);
    return 0;
}

/* Under m: waits on `done` until pred holds; a long silence means a lost
 * wake-up (on the virtual clock it costs no real time). */
#define LS_AWAIT(x, pred)                                                      \
    do {                                                                       \
        while (!(pred)) {                                                      \
            int rc_ = weft_cond_wait_until(&(x)->done, &(x)->m,                \
                                           weft_now() + 10 * WEFT_SEC);        \
            if (rc_ == -ETIMEDOUT && !(pred))                                  \
                T_FAIL("stuck waiting for %s", #pred);                         \
        }                                                                      \
    } while (0)

static void ls_round(struct ls *x, uint64_t *rng, int64_t spread)
{
    struct lsw w[K_DL + K_PLAIN];
    int virt = weft_workers() == 1;
    x->queued = x->woken_dl = x->woken_plain = x->timedout = 0;
    weft_time at = weft_now() + TICK;
    weft_scope *s = scope_open();
    for (int i = 0, dl = 0, pl = 0; i < K_DL + K_PLAIN; i++) {
        /* Deadline and plain waiters in random queue order. */
        int is_dl = pl == K_PLAIN || (dl < K_DL && rnd(rng) % 2);
        int64_t off = (int64_t)(rnd(rng) % (uint64_t)(2 * spread + 1));
        w[i] = (struct lsw){x, 0};
        if (is_dl) /* virtual: around `at`; real: around now */
            w[i].deadline = virt ? at - spread + off : weft_now() + off;
        dl += is_dl;
        pl += !is_dl;
        spawn(ls_waiter, &w[i]);
    }
    ASSERT_EQ(weft_mutex_lock(&x->m), 0);
    LS_AWAIT(x, x->queued == K_DL + K_PLAIN);
    ASSERT_EQ(weft_mutex_unlock(&x->m), 0);
    if (virt)
        ASSERT_EQ(weft_sleep_until(at), 0); /* as deadlines pass */
    for (int k = 0; k < K_PLAIN; k++)
        ASSERT_EQ(weft_cond_signal(&x->c), 0);
    ASSERT_EQ(weft_mutex_lock(&x->m), 0);
    /* Each signal woke one waiter; each deadline waiter is done. */
    LS_AWAIT(x, x->woken_dl + x->woken_plain >= K_PLAIN &&
                    x->woken_dl + x->timedout == K_DL);
    ASSERT_EQ(x->woken_dl + x->woken_plain, K_PLAIN);
    ASSERT_EQ(weft_cond_broadcast(&x->c), 0);
    LS_AWAIT(x, x->woken_plain == K_PLAIN);
    ASSERT_EQ(x->woken_dl + x->timedout, K_DL);
    x->total_woken += x->woken_dl;
    x->total_timedout += x->timedout;
    ASSERT_EQ(weft_mutex_unlock(&x->m), 0);
    scope_end(s);
}

static int ls_root(void *arg)
{
    struct ls *x = arg;
    uint64_t rng = 99;
    int64_t spread = weft_workers() == 1 ? 1 : 20 * WEFT_USEC;
    for (int round = 0; round < (int)T_SCALE(300); round++)
        ls_round(x, &rng, spread);
    return 0;
}

static void run_ls(int workers, weft_clock_kind clock, uint64_t seed)
{
    static struct ls x;
    memset(&x, 0, sizeof x);
    ASSERT_EQ(t_run(workers, clock, seed, ls_root, &x), 0);
    ASSERT(x.total_timedout > 0);
}

TEST(cond_no_lost_signal_when_deadline_races)
{
    for (uint64_t seed = 1; seed <= 4; seed++)
        run_ls(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed));
    run_ls(2, WEFT_CLOCK_MONOTONIC, 0);
    run_ls(4, WEFT_CLOCK_MONOTONIC, 0);
}

/* ============================ once ===================================== */

/* ---- exactly one run under many concurrent callers --------------------- */

struct oc {
    weft_once o;
    atomic_int runs, arrived, ok;
    int want; /* callers that must be inside once_do while fn runs */
    long n;
    atomic_long per_worker[4];
};

static int oc_init(void *arg)
{
    struct oc *x = arg;
    atomic_fetch_add(&x->runs, 1);
    /* Hold the initialisation open until others have come to wait. */
    while (atomic_load(&x->arrived) < x->want)
        ASSERT_EQ(weft_yield(), 0);
    for (int i = 0; i < 20; i++)
        ASSERT_EQ(weft_yield(), 0);
    return 42;
}

static int oc_task(void *arg)
{
    struct oc *x = arg;
    atomic_fetch_add(&x->per_worker[weft_worker_id() & 3], 1);
    atomic_fetch_add(&x->arrived, 1);
    ASSERT_EQ(weft_once_do(&x->o, oc_init, x), 42);
    ASSERT(weft_once_is_done(&x->o));
    atomic_fetch_add(&x->ok, 1);
    return 0;
}

static int oc_never(void *arg)
{
    (void)arg;
    T_FAIL("a second initialisation ran");
    return -1;
}

static void *oc_thread(void *arg)
{
    struct oc *x = arg;
    ASSERT_EQ(weft_once_do(&x->o, oc_never, NULL), 42); /* done: any thread */
    return NULL;
}

static int oc_root(void *arg)
{
    struct oc *x = arg;
    ASSERT(!weft_once_is_done(&x->o));
    weft_scope *s = scope_open();
    for (long i = 0; i < x->n; i++)
        spawn(oc_task, x);
    scope_end(s);
    ASSERT_EQ(atomic_load(&x->runs), 1);
    ASSERT_EQ(atomic_load(&x->ok), x->n);
    /* Done: no blocking, fn not run, even in a cancelled scope. */
    weft_scope *sc = scope_open();
    ASSERT_EQ(weft_scope_cancel(sc), 0);
    ASSERT_EQ(weft_once_do(&x->o, oc_never, NULL), 42);
    ASSERT_EQ(weft_once_do_until(&x->o, oc_never, NULL, 0), 42);
    ASSERT_EQ(weft_scope_join(sc), -ECANCELED);
    ASSERT_EQ(weft_scope_free(sc), 0);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, oc_thread, x), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    return 0;
}

TEST(once_runs_exactly_once_across_workers)
{
    static struct oc x;
    int workers[] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        for (int rep = 0; rep < (int)T_SCALE(20); rep++) {
            memset(&x, 0, sizeof x);
            x.n = T_LIVE(200);
            x.want = x.n < 16 ? (int)x.n : 16;
            ASSERT_EQ(t_run_mono(workers[k], oc_root, &x), 0);
        }
    }
    ASSERT_EQ(weft_once_do(&x.o, oc_never, NULL), 42); /* outside weft_run */
    ASSERT(weft_once_is_done(&x.o));
}

/* ---- a failed initialisation is retried -------------------------------- */

/* A caller arriving at `arrive` ticks whose fn takes `takes` ticks and
 * returns `status`. */
struct oa {
    weft_once *o;
    int arrive, takes, status;
    weft_time deadline; /* 0: weft_once_do */
    int rc;
    weft_time at;
    int ran; /* its fn ran */
};

static int oa_fn(void *arg)
{
    struct oa *a = arg;
    a->ran++;
    int r = weft_sleep_for(a->takes * TICK);
    return r ? r : a->status;
}

static int oa_task(void *arg)
{
    struct oa *a = arg;
    ASSERT_EQ(weft_sleep_for(a->arrive * TICK), 0);
    a->rc = a->deadline ? weft_once_do_until(a->o, oa_fn, a, a->deadline)
                        : weft_once_do(a->o, oa_fn, a);
    a->at = weft_now();
    return 0;
}

static int retry_root(void *arg)
{
    (void)arg;
    weft_once o = WEFT_ONCE_INIT;
    /* a fails; b, the first waiter, tries and fails; c, next in line,
     * succeeds; d gets c's status. */
    struct oa a = {&o, 0, 2, -EIO, 0, 99, 0, 0};
    struct oa b = {&o, 1, 2, -EAGAIN, 0, 99, 0, 0};
    struct oa c = {&o, 2, 2, 7, 0, 99, 0, 0};
    struct oa d = {&o, 3, 2, 8, 0, 99, 0, 0};
    weft_scope *s = scope_open();
    spawn(oa_task, &d); /* spawn order does not matter, arrival does */
    spawn(oa_task, &c);
    spawn(oa_task, &b);
    spawn(oa_task, &a);
    ASSERT_EQ(weft_sleep_for(TICK), 0); /* a's fn runs, b waits */
    ASSERT_EQ(weft_once_destroy(&o), -EBUSY);
    scope_end(s);
    ASSERT_EQ(a.rc, -EIO);
    ASSERT_EQ(a.at, 2 * TICK);
    ASSERT_EQ(b.rc, -EAGAIN);
    ASSERT_EQ(b.at, 4 * TICK);
    ASSERT_EQ(c.rc, 7);
    ASSERT_EQ(c.at, 6 * TICK);
    ASSERT_EQ(d.rc, 7);
    ASSERT_EQ(d.at, 6 * TICK);
    ASSERT_EQ(a.ran + b.ran + c.ran + d.ran, 3);
    ASSERT_EQ(d.ran, 0);
    ASSERT(weft_once_is_done(&o));
    ASSERT_EQ(weft_once_do(&o, oa_fn, &d), 7);
    ASSERT_EQ(d.ran, 0);

    /* A failure with nobody waiting: the next caller runs its own fn. */
    weft_once o2;
    memset(&o2, 0, sizeof o2); /* zeroed: ready */
    struct oa e = {&o2, 0, 1, -EIO, 0, 99, 0, 0};
    struct oa f = {&o2, 0, 0, 0, 0, 99, 0, 0};
    ASSERT_EQ(weft_once_do(&o2, oa_fn, &e), -EIO);
    ASSERT(!weft_once_is_done(&o2));
    ASSERT_EQ(weft_once_do(&o2, oa_fn, &e), -EIO); /* and again */
    ASSERT_EQ(e.ran, 2);
    ASSERT_EQ(weft_once_do(&o2, oa_fn, &f), 0);
    ASSERT(weft_once_is_done(&o2));
    ASSERT_EQ(weft_once_do(&o2, oa_fn, &e), 0);
    ASSERT_EQ(e.ran + f.ran, 3);
    /* Destroyed when idle: reset to not done, so it runs again. */
    ASSERT_EQ(weft_once_destroy(&o2), 0);
    ASSERT(!weft_once_is_done(&o2));
    ASSERT_EQ(weft_once_do(&o2, oa_fn, &f), 0);
    ASSERT_EQ(f.ran, 2);
    ASSERT_EQ(weft_once_destroy(NULL), -EINVAL);
    return 0;
}

TEST(once_failure_then_retry)
{
    run_seeds(retry_root);
}

/* ---- cancelled and timed-out waiters ----------------------------------- */

static int o_cancel_root(void *arg)
{
    (void)arg;
    weft_once o = WEFT_ONCE_INIT;
    /* a initialises for 5 ticks; w1 is cancelled at 2, w2 gives up at 3,
     * w3 gets a's status; the initialiser keeps running throughout. */
    struct oa a = {&o, 0, 5, 3, 0, 99, 0, 0};
    struct oa w1 = {&o, 1, 1, 10, 0, 99, 0, 0};
    struct oa w2 = {&o, 1, 1, 11, 3 * TICK, 99, 0, 0};
    struct oa w3 = {&o, 1, 1, 12, 100 * TICK, 99, 0, 0};
    weft_scope *outer = scope_open();
    spawn(oa_task, &a);
    spawn(oa_task, &w2);
    spawn(oa_task, &w3);
    weft_scope *inner = scope_open();
    spawn(oa_task, &w1);
    ASSERT_EQ(weft_sleep_for(2 * TICK), 0);
    scope_cancel_end(inner);
    ASSERT_EQ(w1.rc, -ECANCELED);
    ASSERT_EQ(w1.at, 2 * TICK);
    scope_end(outer);
    ASSERT_EQ(w2.rc, -ETIMEDOUT);
    ASSERT_EQ(w2.at, 3 * TICK);
    ASSERT_EQ(a.rc, 3);
    ASSERT_EQ(a.at, 5 * TICK);
    ASSERT_EQ(w3.rc, 3);
    ASSERT_EQ(w3.at, 5 * TICK);
    ASSERT_EQ(a.ran, 1);
    ASSERT_EQ(w1.ran + w2.ran + w3.ran, 0);

    /* In a cancelled scope, before it is done: -ECANCELED, fn not run. */
    weft_once o2 = WEFT_ONCE_INIT;
    struct oa b = {&o2, 0, 0, 5, 0, 99, 0, 0};
    weft_scope *sc = scope_open();
    ASSERT_EQ(weft_scope_cancel(sc), 0);
    ASSERT_EQ(weft_once_do(&o2, oa_fn, &b), -ECANCELED);
    ASSERT_EQ(weft_once_do_until(&o2, oa_fn, &b, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(b.ran, 0);
    ASSERT_EQ(weft_scope_join(sc), -ECANCELED);
    ASSERT_EQ(weft_scope_free(sc), 0);
    ASSERT(!weft_once_is_done(&o2));
    ASSERT_EQ(weft_once_do_until(&o2, oa_fn, &b, 0), 5); /* runs: no wait */
    ASSERT_EQ(b.ran, 1);
    return 0;
}

TEST(once_cancelled_waiter_leaves_initialiser_runs)
{
    run_seeds(o_cancel_root);
}

/* A failed initialiser hands the turn to the first waiter, and cancels
 * that waiter's scope before it runs: the waiter returns -ECANCELED
 * without running its fn and hands the turn on to the next waiter. */
struct ob {
    struct oa a;
    weft_scope *victim; /* cancelled by a right after its fn failed */
};

static int ob_task(void *arg)
{
    struct ob *b = arg;
    ASSERT_EQ(weft_sleep_for(b->a.arrive * TICK), 0);
    b->a.rc = weft_once_do(b->a.o, oa_fn, &b->a);
    b->a.at = weft_now();
    ASSERT_EQ(weft_scope_cancel(b->victim), 0);
    return 0;
}

static int handover_root(void *arg)
{
    (void)arg;
    weft_once o = WEFT_ONCE_INIT;
    struct oa w1 = {&o, 1, 1, 10, 0, 99, 0, 0};
    struct oa w2 = {&o, 2, 1, 20, 0, 99, 0, 0};
    weft_scope *outer = scope_open();
    spawn(oa_task, &w2);
    weft_scope *inner = scope_open();
    spawn(oa_task, &w1);
    /* a lives in the outer scope but cancels the inner one. */
    struct ob a = {{&o, 0, 3, -EIO, 0, 99, 0, 0}, inner};
    ASSERT(weft_spawn(outer, ob_task, &a) >= 0);
    ASSERT_EQ(weft_scope_join(inner), -ECANCELED);
    ASSERT_EQ(weft_scope_free(inner), 0);
    scope_end(outer);
    ASSERT_EQ(a.a.rc, -EIO);
    ASSERT_EQ(a.a.at, 3 * TICK);
    ASSERT_EQ(w1.rc, -ECANCELED);
    ASSERT_EQ(w1.at, 3 * TICK);
    ASSERT_EQ(w1.ran, 0);
    ASSERT_EQ(w2.rc, 20);
    ASSERT_EQ(w2.at, 4 * TICK);
    ASSERT_EQ(w2.ran, 1);
    ASSERT(weft_once_is_done(&o));
    return 0;
}

TEST(once_turn_handed_to_cancelled_waiter_passes_on)
{
    /* One worker: a cancels w1's scope before w1 runs again (with two, w1
     * may start its own fn first, and that fn is then cancelled). */
    for (uint64_t seed = 1; seed <= 6; seed++)
        ASSERT_EQ(
            t_run(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed), handover_root, NULL), 0);
}

/* ---- misuse -------------------------------------------------------------- */

static weft_once om_once = WEFT_ONCE_INIT;

static int om_inner(void *arg)
{
    (void)arg;
    return 1;
}

static int om_fn(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_once_do(&om_once, om_inner, NULL), -EDEADLK);
    return 9;
}

static int om_root(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_once_do(NULL, om_fn, NULL), -EINVAL);
    ASSERT_EQ(weft_once_do(&om_once, NULL, NULL), -EINVAL);
    ASSERT_EQ(weft_once_do_until(NULL, om_fn, NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_once_do(&om_once, om_fn, NULL), 9);
    ASSERT_EQ(weft_once_do(&om_once, NULL, NULL), -EINVAL);
    return 0;
}

TEST(once_misuse_errors)
{
    ASSERT_EQ(weft_once_is_done(NULL), 0);
    ASSERT_EQ(weft_once_do(&om_once, om_fn, NULL), -EPERM); /* not done */
    ASSERT(!weft_once_is_done(&om_once));
    ASSERT_EQ(t_run_virtual(1, om_root, NULL), 0);
    ASSERT_EQ(weft_once_do(&om_once, om_fn, NULL), 9); /* done: any thread */
}

/* =========================== barrier =================================== */

/* ---- generations across workers: one leader each ----------------------- */

#define BG_N 6

struct bg {
    weft_barrier b;
    long rounds;
    atomic_long phase[BG_N];
    atomic_int *leaders; /* per round */
    atomic_long per_worker[4];
};

struct bgarg {
    struct bg *x;
    int id;
};

static int bg_task(void *arg)
{
    struct bgarg *a = arg;
    struct bg *x = a->x;
    atomic_fetch_add(&x->per_worker[weft_worker_id() & 3], 1);
    for (long r = 0; r < x->rounds; r++) {
        atomic_store(&x->phase[a->id], r);
        int rc = r % 3 == 2 ? weft_barrier_wait_until(&x->b, WEFT_NEVER)
                            : weft_barrier_wait(&x->b);
        ASSERT(rc == 0 || rc == 1);
        if (rc == 1)
            atomic_fetch_add(&x->leaders[r], 1);
        /* Everyone arrived in round r; nobody is past round r + 1. */
        for (int j = 0; j < BG_N; j++) {
            long p = atomic_load(&x->phase[j]);
            if (p < r || p > r + 1)
                T_FAIL("task %d in round %ld saw task %d in %ld", a->id, r, j,
                       p);
        }
    }
    return 0;
}

static int bg_root(void *arg)
{
    struct bg *x = arg;
    struct bgarg args[BG_N];
    weft_scope *s = scope_open();
    for (int i = 0; i < BG_N; i++) {
        args[i] = (struct bgarg){x, i};
        spawn(bg_task, &args[i]);
    }
    scope_end(s);
    for (long r = 0; r < x->rounds; r++)
        if (atomic_load(&x->leaders[r]) != 1)
            T_FAIL("round %ld had %d leaders", r, atomic_load(&x->leaders[r]));
    ASSERT_EQ(weft_barrier_destroy(&x->b), 0);
    return 0;
}

static void run_bg(int workers, weft_clock_kind clock, uint64_t seed)
{
    static struct bg x;
    memset(&x, 0, sizeof x);
    x.rounds = T_SCALE(500);
    x.leaders = calloc((size_t)x.rounds, sizeof *x.leaders);
    ASSERT(x.leaders != NULL);
    ASSERT_EQ(weft_barrier_init(&x.b, BG_N), 0);
    ASSERT_EQ(t_run(workers, clock, seed, bg_root, &x), 0);
    free(x.leaders);
}

TEST(barrier_generations_across_workers)
{
    run_bg(1, WEFT_CLOCK_VIRTUAL, T_SEED(4));
    run_bg(1, WEFT_CLOCK_MONOTONIC, 0);
    run_bg(2, WEFT_CLOCK_MONOTONIC, 0);
    run_bg(4, WEFT_CLOCK_MONOTONIC, 0);
}

/* ---- cancel and timeout withdraw the arrival --------------------------- */

struct ba {
    weft_barrier *b;
    int arrive;
    weft_time deadline; /* 0: none */
    int rc;
    weft_time at;
};

static int ba_task(void *arg)
{
    struct ba *a = arg;
    ASSERT_EQ(weft_sleep_for(a->arrive * TICK), 0);
    a->rc = a->deadline ? weft_barrier_wait_until(a->b, a->deadline)
                        : weft_barrier_wait(a->b);
    a->at = weft_now();
    return 0;
}

static int withdraw_root(void *arg)
{
    (void)arg;
    weft_barrier b;
    ASSERT_EQ(weft_barrier_init(&b, 3), 0);
    /* b2 gives up at 4: c's arrival at 5 is the second, d's at 6 the
     * third. */
    struct ba a = {&b, 1, 0, 99, 0};
    struct ba b2 = {&b, 2, 4 * TICK, 99, 0};
    struct ba c = {&b, 5, 100 * TICK, 99, 0};
    struct ba d = {&b, 6, 0, 99, 0};
    weft_scope *s = scope_open();
    spawn(ba_task, &a);
    spawn(ba_task, &b2);
    spawn(ba_task, &c);
    spawn(ba_task, &d);
    ASSERT_EQ(weft_sleep_for(5 * TICK + 1), 0);
    ASSERT_EQ(weft_barrier_destroy(&b), -EBUSY); /* a and c wait */
    scope_end(s);
    ASSERT_EQ(b2.rc, -ETIMEDOUT);
    ASSERT_EQ(b2.at, 4 * TICK);
    ASSERT_EQ(a.rc, 0);
    ASSERT_EQ(c.rc, 0);
    ASSERT_EQ(d.rc, 1); /* the leader */
    ASSERT_EQ(a.at, 6 * TICK);
    ASSERT_EQ(c.at, 6 * TICK);
    ASSERT_EQ(d.at, 6 * TICK);

    /* Next generation: e is cancelled at 2, so f, g and h make it. */
    weft_time t0 = weft_now();
    struct ba e = {&b, 1, 0, 99, 0};
    struct ba f = {&b, 3, 0, 99, 0};
    struct ba g = {&b, 4, 0, 99, 0};
    struct ba h = {&b, 5, 0, 99, 0};
    weft_scope *outer = scope_open();
    spawn(ba_task, &f);
    spawn(ba_task, &g);
    spawn(ba_task, &h);
    weft_scope *inner = scope_open();
    spawn(ba_task, &e);
    ASSERT_EQ(weft_sleep_for(2 * TICK), 0);
    scope_cancel_end(inner);
    ASSERT_EQ(e.rc, -ECANCELED);
    ASSERT_EQ(e.at, t0 + 2 * TICK);
    ASSERT_EQ(weft_barrier_destroy(&b), 0); /* nobody left waiting */
    ASSERT_EQ(weft_barrier_init(&b, 3), 0);
    scope_end(outer);
    ASSERT_EQ(f.rc + g.rc + h.rc, 1);
    ASSERT_EQ(h.rc, 1);
    ASSERT_EQ(f.at, t0 + 5 * TICK);
    ASSERT_EQ(g.at, t0 + 5 * TICK);
    ASSERT_EQ(h.at, t0 + 5 * TICK);

    /* In a cancelled scope: -ECANCELED, no arrival counted. */
    weft_barrier one;
    ASSERT_EQ(weft_barrier_init(&one, 2), 0);
    weft_scope *sc = scope_open();
    ASSERT_EQ(weft_scope_cancel(sc), 0);
    ASSERT_EQ(weft_barrier_wait(&one), -ECANCELED);
    ASSERT_EQ(weft_barrier_wait_until(&one, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_scope_join(sc), -ECANCELED);
    ASSERT_EQ(weft_scope_free(sc), 0);
    ASSERT_EQ(weft_barrier_destroy(&one), 0);
    ASSERT_EQ(weft_barrier_destroy(&b), 0);
    return 0;
}

TEST(barrier_cancel_and_timeout_withdraw_arrival)
{
    run_seeds(withdraw_root);
}

/* A waiter's deadline (or its scope's) passes at the very instant the last
 * arrival comes. Either the arrival came first: the generation completes
 * with the waiter counted, so it returns 0 although its deadline passed,
 * and the newcomer leads; or the waiter withdrew first: the newcomer waits
 * for the next arrival. Either way nothing is left behind. */
static int race_outcomes[2];

static int race_root(void *arg)
{
    (void)arg;
    for (int cancel = 0; cancel < 2; cancel++) {
        weft_barrier b;
        ASSERT_EQ(weft_barrier_init(&b, 2), 0);
        weft_time t0 = weft_now();
        struct ba a = {&b, 0, cancel ? 0 : t0 + 3 * TICK, 99, 0};
        struct ba l = {&b, 3, 0, 99, 0};
        struct ba z = {&b, 4, t0 + 10 * TICK, 99, 0};
        weft_scope *outer = scope_open();
        spawn(ba_task, &l);
        spawn(ba_task, &z);
        weft_scope_opts o = {.deadline = cancel ? t0 + 3 * TICK : 0};
        weft_scope *inner = NULL;
        ASSERT_EQ(weft_scope_open(&inner, &o), 0);
        spawn(ba_task, &a);
        int rc = weft_scope_join(inner); /* not a cancellation point */
        ASSERT(rc == 0 || rc == -ETIMEDOUT);
        ASSERT_EQ(weft_scope_free(inner), 0);
        scope_end(outer);
        ASSERT_EQ(a.at, t0 + 3 * TICK);
        if (a.rc == 0) { /* released with l; z comes alone, gives up */
            ASSERT_EQ(l.rc, 1);
            ASSERT_EQ(l.at, t0 + 3 * TICK);
            ASSERT_EQ(z.rc, -ETIMEDOUT);
            ASSERT_EQ(z.at, t0 + 10 * TICK);
        } else { /* withdrew: l and z make the generation */
            ASSERT_EQ(a.rc, cancel ? -ECANCELED : -ETIMEDOUT);
            ASSERT_EQ(l.rc, 0);
            ASSERT_EQ(z.rc, 1);
            ASSERT_EQ(l.at, t0 + 4 * TICK);
            ASSERT_EQ(z.at, t0 + 4 * TICK);
        }
        race_outcomes[a.rc == 0]++;
        ASSERT_EQ(weft_barrier_destroy(&b), 0);
    }
    return 0;
}

TEST(barrier_deadline_racing_last_arrival)
{
    for (uint64_t seed = 1; seed <= 16; seed++)
        ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed), race_root, NULL),
                  0);
    ASSERT_EQ(t_run_virtual(2, race_root, NULL), 0);
    /* The seeds reach both orders (about half each). */
    ASSERT(race_outcomes[0] > 0);
    ASSERT(race_outcomes[1] > 0);
}

/* ---- withdrawals under cross-worker stress ----------------------------- */

/* More tasks than parties wait with random short deadlines while a random
 * one cancels the round. Each generation releases exactly BS_N tasks, one
 * of them the leader, so successes == BS_N * leaders exactly; and at the
 * end of each round nobody is left counted. */
#define BS_N 3
#define BS_TASKS 8

struct bs {
    weft_barrier b;
    weft_scope *round;
    long threshold;
    atomic_long ops, released, leaders, timedout;
    int64_t max_wait;
    uint64_t rng[BS_TASKS];
};

static struct bs *bs_cur;

static int bs_task(void *arg)
{
    uint64_t *rng = arg;
    struct bs *x = bs_cur;
    for (;;) {
        uint64_t r = rnd(rng);
        /* Arrive late now and then, so that everyone is blocked at times
         * and deadlines pass (on the virtual clock, only then). */
        if ((r >> 40) % 4 == 0) {
            int sr =
                weft_sleep_for((int64_t)((r >> 24) % (uint64_t)x->max_wait));
            if (sr == -ECANCELED)
                return 0;
        }
        int rc =
            r % 3 == 0
                ? weft_barrier_wait(&x->b)
                : weft_barrier_wait_until(
                      &x->b,
                      weft_now() + (int64_t)((r >> 8) % (uint64_t)x->max_wait));
        if (rc == 0 || rc == 1) {
            atomic_fetch_add(&x->released, 1);
            atomic_fetch_add(&x->leaders, rc);
        } else if (rc == -ETIMEDOUT) {
            atomic_fetch_add(&x->timedout, 1);
        } else if (rc != -ECANCELED) {
            T_FAIL("barrier wait returned %d", rc);
        }
        if (atomic_fetch_add(&x->ops, 1) + 1 == x->threshold)
            ASSERT_EQ(weft_scope_cancel(x->round), 0);
        if (rc == -ECANCELED || weft_cancelled())
            return 0;
    }
}

static int bs_root(void *arg)
{
    struct bs *x = arg;
    int64_t budget = weft_workers() > 1 ? 5 * WEFT_MSEC : WEFT_SEC;
    uint64_t rng = 5;
    /* At least the scaled rounds, and on until a wait has timed out (on
     * the real clock, under a sanitizer's slowness, a few rounds may
     * pass with none: the assertion below wants one), 400 at most. */
    for (int round = 0; round < (int)T_SCALE(40) ||
                        (atomic_load(&x->timedout) == 0 && round < 400);
         round++) {
        x->threshold = 1 + (long)(rnd(&rng) % 3000);
        atomic_store(&x->ops, 0);
        weft_scope_opts o = {.policy = WEFT_COLLECT,
                             .deadline = weft_now() + budget};
        ASSERT_EQ(weft_scope_open(&x->round, &o), 0);
        for (int i = 0; i < BS_TASKS; i++) {
            x->rng[i] = rnd(&rng);
            int rc = weft_spawn(x->round, bs_task, &x->rng[i]);
            ASSERT(rc >= 0 || rc == -ECANCELED);
        }
        int rc = weft_scope_join(x->round);
        ASSERT(rc == -ECANCELED || rc == -ETIMEDOUT);
        ASSERT_EQ(weft_scope_free(x->round), 0);
        ASSERT_EQ(weft_barrier_destroy(&x->b), 0); /* nobody left counted */
        ASSERT_EQ(weft_barrier_init(&x->b, BS_N), 0);
        ASSERT_EQ(atomic_load(&x->released), BS_N * atomic_load(&x->leaders));
    }
    return 0;
}

static void run_bs(int workers, weft_clock_kind clock, uint64_t seed)
{
    static struct bs x;
    memset(&x, 0, sizeof x);
    ASSERT_EQ(weft_barrier_init(&x.b, BS_N), 0);
    x.max_wait = 30 * WEFT_USEC;
    bs_cur = &x;
    ASSERT_EQ(t_run(workers, clock, seed, bs_root, &x), 0);
    ASSERT(atomic_load(&x.leaders) > 0);
    ASSERT(atomic_load(&x.timedout) > 0);
}

TEST(barrier_withdrawals_under_stress)
{
    run_bs(1, WEFT_CLOCK_VIRTUAL, T_SEED(8));
    run_bs(2, WEFT_CLOCK_MONOTONIC, 0);
    run_bs(4, WEFT_CLOCK_MONOTONIC, 0);
}

/* ---- misuse -------------------------------------------------------------- */

static int bm_root(void *arg)
{
    (void)arg;
    weft_barrier b;
    memset(&b, 0, sizeof b); /* zeroed: not initialised */
    ASSERT_EQ(weft_barrier_wait(&b), -EINVAL);
    ASSERT_EQ(weft_barrier_wait_until(&b, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_barrier_init(&b, 0), -EINVAL);
    ASSERT_EQ(weft_barrier_init(&b, -3), -EINVAL);
    ASSERT_EQ(weft_barrier_init(NULL, 2), -EINVAL);
    ASSERT_EQ(weft_barrier_wait(NULL), -EINVAL);
    ASSERT_EQ(weft_barrier_wait_until(NULL, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_barrier_destroy(NULL), -EINVAL);
    /* n = 1: every wait leads its own generation, without waiting. */
    ASSERT_EQ(weft_barrier_init(&b, 1), 0);
    weft_time t0 = weft_now();
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(weft_barrier_wait(&b), 1);
        ASSERT_EQ(weft_barrier_wait_until(&b, t0 - 1), 1);
    }
    ASSERT_EQ(weft_now(), t0);
    /* Alone at a barrier for two: times out, withdrawn. */
    ASSERT_EQ(weft_barrier_init(&b, 2), 0);
    ASSERT_EQ(weft_barrier_wait_until(&b, t0 + TICK), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + TICK);
    ASSERT_EQ(weft_barrier_destroy(&b), 0);
    ASSERT_EQ(weft_barrier_wait(&b), -EINVAL); /* destroyed */
    return 0;
}

TEST(barrier_misuse_errors)
{
    ASSERT_EQ(t_run_virtual(1, bm_root, NULL), 0);
    weft_barrier b;
    ASSERT_EQ(weft_barrier_init(&b, 1), 0); /* any thread */
    ASSERT_EQ(weft_barrier_wait(&b), -EPERM);
    ASSERT_EQ(weft_barrier_wait_until(&b, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_barrier_destroy(&b), 0);
}

/* ---- cond destroy: -EBUSY while a task waits --------------------------- */

struct cdw {
    weft_mutex m;
    weft_cond c;
    int ready;
};

static int cdw_waiter(void *arg)
{
    struct cdw *x = arg;
    ASSERT_EQ(weft_mutex_lock(&x->m), 0);
    while (!x->ready)
        ASSERT_EQ(weft_cond_wait(&x->c, &x->m), 0);
    ASSERT_EQ(weft_mutex_unlock(&x->m), 0);
    return 0;
}

static int cond_destroy_root(void *arg)
{
    (void)arg;
    struct cdw x = {.m = WEFT_MUTEX_INIT, .c = WEFT_COND_INIT};
    weft_scope *s = scope_open();
    spawn(cdw_waiter, &x);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_cond_destroy(&x.c), -EBUSY); /* it waits */
    ASSERT_EQ(weft_mutex_lock(&x.m), 0);
    x.ready = 1;
    ASSERT_EQ(weft_cond_signal(&x.c), 0); /* the waiter was not disturbed */
    ASSERT_EQ(weft_mutex_unlock(&x.m), 0);
    scope_end(s);
    ASSERT_EQ(weft_cond_destroy(&x.c), 0);
    ASSERT_EQ(weft_cond_destroy(NULL), -EINVAL);
    return 0;
}

TEST(cond_destroy_waited_is_ebusy)
{
    ASSERT_EQ(t_run_virtual(1, cond_destroy_root, NULL), 0);
}
