/* SPDX-License-Identifier: MIT */
/*
 * Channels and select, through the public API only: blocking and close
 * semantics for every capacity, FIFO and arrival order, the try variants,
 * exact multisets under many-producer many-consumer stress, select
 * readiness, fairness and cleanup, cancel safety under cross-worker
 * contention, reference counting and misuse. Times are exact: every test
 * that measures time runs on the virtual clock.
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

static const size_t caps[] = {0, 1, 2, 5, 16, 100};
#define NCAPS ((int)(sizeof caps / sizeof caps[0]))

static weft_chan *mkchan(size_t elem_size, size_t cap)
{
    weft_chan *c = NULL;
    ASSERT_EQ(weft_chan_new(&c, elem_size, cap), 0);
    ASSERT(c != NULL);
    ASSERT_EQ(weft_chan_cap(c), cap);
    ASSERT_EQ(weft_chan_len(c), 0);
    return c;
}

/* Buffers the ints 0 .. n-1 without waiting. */
static void fill(weft_chan *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int v = (int)i;
        ASSERT_EQ(weft_chan_try_send(c, &v), 0);
    }
    ASSERT_EQ(weft_chan_len(c), n);
}

/* A task that sends or receives one int and records how it went. */
struct waiter {
    weft_chan *c;
    int val;      /* value to send, or the value received */
    int rc;       /* what the call returned */
    weft_time at; /* weft_now() when it returned */
    int arrive;   /* seconds to sleep before the call */
};

static int wait_send(void *arg)
{
    struct waiter *w = arg;
    ASSERT_EQ(weft_sleep_for(w->arrive * WEFT_SEC), 0);
    w->rc = weft_chan_send(w->c, &w->val);
    w->at = weft_now();
    return 0;
}

static int wait_recv(void *arg)
{
    struct waiter *w = arg;
    ASSERT_EQ(weft_sleep_for(w->arrive * WEFT_SEC), 0);
    w->val = -1;
    w->rc = weft_chan_recv(w->c, &w->val);
    w->at = weft_now();
    return 0;
}

/* Like wait_recv/wait_send, but bounded (10 s), so that a value stolen by
 * a stale waiter fails an assertion instead of hanging the test. */
static int recv_10s(void *arg)
{
    struct waiter *w = arg;
    w->val = -1;
    w->rc = weft_chan_recv_until(w->c, &w->val, weft_now() + 10 * WEFT_SEC);
    w->at = weft_now();
    return 0;
}

static int send_10s(void *arg)
{
    struct waiter *w = arg;
    w->rc = weft_chan_send_until(w->c, &w->val, weft_now() + 10 * WEFT_SEC);
    w->at = weft_now();
    return 0;
}

static int close_after_1s(void *arg)
{
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_chan_close(arg), 0);
    return 0;
}

/* ---- try_send / try_recv, len and cap, every capacity ------------------ */

static void check_try_ops(size_t cap)
{
    weft_chan *c = mkchan(sizeof(int), cap);
    int v, out;
    fill(c, cap);
    v = -1;
    ASSERT_EQ(weft_chan_try_send(c, &v), -EAGAIN);
    ASSERT_EQ(weft_chan_len(c), cap);
    ASSERT_EQ(weft_chan_cap(c), cap);
    for (size_t i = 0; i < cap; i++) {
        out = -1;
        ASSERT_EQ(weft_chan_try_recv(c, &out), 0);
        ASSERT_EQ(out, (int)i);
        ASSERT_EQ(weft_chan_len(c), cap - i - 1);
    }
    out = 12345;
    ASSERT_EQ(weft_chan_try_recv(c, &out), -EAGAIN);
    ASSERT_EQ(out, 12345);
    /* Keep the buffer half full while the ring wraps around many times. */
    int next_in = 0, next_out = 0;
    if (cap > 0) {
        for (size_t i = 0; i < cap / 2; i++) {
            v = next_in++;
            ASSERT_EQ(weft_chan_try_send(c, &v), 0);
        }
        for (size_t k = 0; k < 5 * cap + 7; k++) {
            v = next_in++;
            ASSERT_EQ(weft_chan_try_send(c, &v), 0);
            ASSERT_EQ(weft_chan_try_recv(c, &out), 0);
            ASSERT_EQ(out, next_out++);
        }
        while (next_out < next_in) {
            ASSERT_EQ(weft_chan_try_recv(c, &out), 0);
            ASSERT_EQ(out, next_out++);
        }
    }
    ASSERT_EQ(weft_chan_try_recv(c, &out), -EAGAIN);
    ASSERT_EQ(weft_chan_len(c), 0);
    ASSERT_EQ(weft_chan_unref(c), 0);
}

static int try_ops_root(void *arg)
{
    (void)arg;
    for (int k = 0; k < NCAPS; k++)
        check_try_ops(caps[k]);
    return 0;
}

TEST(try_ops_len_cap_every_capacity)
{
    /* The try variants work from plain threads as well as from tasks. */
    ASSERT_EQ(try_ops_root(NULL), 0);
    ASSERT_EQ(t_run_virtual(1, try_ops_root, NULL), 0);
}

/* ---- blocking: full and empty channels wait, exactly ------------------- */

struct blk {
    weft_chan *c;
    size_t cap;
    weft_time t0;
};

static int late_receiver(void *arg)
{
    struct blk *b = arg;
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    /* The buffered values, then the blocked sender's, all at 1 s. */
    for (size_t i = 0; i <= b->cap; i++) {
        int out = -1;
        ASSERT_EQ(weft_chan_recv(b->c, &out), 0);
        ASSERT_EQ(out, (int)i);
        ASSERT_EQ(weft_now(), b->t0 + WEFT_SEC);
    }
    int out;
    ASSERT_EQ(weft_chan_try_recv(b->c, &out), -EAGAIN);
    return 0;
}

static int late_sender(void *arg)
{
    struct blk *b = arg;
    ASSERT_EQ(weft_sleep_for(2 * WEFT_SEC), 0);
    int v = 42;
    /* Buffered: room; rendezvous: the receiver is already waiting. */
    ASSERT_EQ(weft_chan_send(b->c, &v), 0);
    ASSERT_EQ(weft_now(), b->t0 + 2 * WEFT_SEC);
    return 0;
}

static int blocking_root(void *arg)
{
    (void)arg;
    for (int k = 0; k < NCAPS; k++) {
        struct blk b = {.c = mkchan(sizeof(int), caps[k]), .cap = caps[k]};
        b.t0 = weft_now();
        fill(b.c, b.cap);
        weft_scope *s = scope_open();
        spawn(late_receiver, &b);
        int v = (int)b.cap;
        ASSERT_EQ(weft_chan_send(b.c, &v), 0);
        ASSERT_EQ(weft_now(), b.t0 + WEFT_SEC); /* waited for the receive */
        scope_end(s);

        b.t0 = weft_now();
        s = scope_open();
        spawn(late_sender, &b);
        int out = -1;
        ASSERT_EQ(weft_chan_recv(b.c, &out), 0);
        ASSERT_EQ(out, 42);
        ASSERT_EQ(weft_now(), b.t0 + 2 * WEFT_SEC);
        scope_end(s);
        ASSERT_EQ(weft_chan_len(b.c), 0);
        ASSERT_EQ(weft_chan_unref(b.c), 0);
    }
    return 0;
}

TEST(blocking_every_capacity)
{
    ASSERT_EQ(t_run_virtual(1, blocking_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, blocking_root, NULL), 0);
}

/* ---- close ------------------------------------------------------------- */

static int close_root(void *arg)
{
    (void)arg;
    for (int k = 0; k < NCAPS; k++) {
        size_t cap = caps[k];
        weft_chan *c = mkchan(sizeof(int), cap);
        fill(c, cap);
        weft_time t0 = weft_now();
        ASSERT_EQ(weft_chan_close(c), 0);
        ASSERT_EQ(weft_chan_close(c), -EPIPE);
        int v = 777;
        ASSERT_EQ(weft_chan_try_send(c, &v), -EPIPE);
        ASSERT_EQ(weft_chan_send(c, &v), -EPIPE);
        ASSERT_EQ(weft_chan_send_until(c, &v, t0 + WEFT_SEC), -EPIPE);
        ASSERT_EQ(weft_chan_len(c), cap);
        /* The buffered values drain in order, by any kind of receive. */
        for (size_t i = 0; i < cap; i++) {
            int out = -1;
            switch (i % 3) {
            case 0:
                ASSERT_EQ(weft_chan_recv(c, &out), 0);
                break;
            case 1:
                ASSERT_EQ(weft_chan_try_recv(c, &out), 0);
                break;
            default:
                ASSERT_EQ(weft_chan_recv_until(c, &out, WEFT_NEVER), 0);
            }
            ASSERT_EQ(out, (int)i);
            ASSERT_EQ(weft_chan_len(c), cap - i - 1);
        }
        int out = -1;
        ASSERT_EQ(weft_chan_recv(c, &out), -EPIPE);
        ASSERT_EQ(weft_chan_try_recv(c, &out), -EPIPE);
        ASSERT_EQ(weft_chan_recv_until(c, &out, t0 + WEFT_SEC), -EPIPE);
        ASSERT_EQ(weft_chan_recv(c, &out), -EPIPE);
        ASSERT_EQ(out, -1);
        ASSERT_EQ(weft_now(), t0); /* nothing waited */
        ASSERT_EQ(weft_chan_close(c), -EPIPE);
        ASSERT_EQ(weft_chan_unref(c), 0);
    }
    return 0;
}

TEST(close_drains_then_epipe_every_capacity)
{
    ASSERT_EQ(t_run_virtual(1, close_root, NULL), 0);
}

#define CW 4

static int close_wakes_root(void *arg)
{
    (void)arg;
    for (int k = 0; k < NCAPS; k++) {
        size_t cap = caps[k];
        weft_chan *c = mkchan(sizeof(int), cap);
        fill(c, cap);
        struct waiter w[CW];
        weft_time t0 = weft_now();
        weft_scope *s = scope_open();
        for (int i = 0; i < CW; i++) {
            w[i] = (struct waiter){.c = c, .val = 1000 + i};
            spawn(wait_send, &w[i]);
        }
        spawn(close_after_1s, c);
        scope_end(s);
        for (int i = 0; i < CW; i++) {
            ASSERT_EQ(w[i].rc, -EPIPE);
            ASSERT_EQ(w[i].at, t0 + WEFT_SEC);
        }
        /* Only the values buffered before the close come out. */
        for (size_t i = 0; i < cap; i++) {
            int out = -1;
            ASSERT_EQ(weft_chan_recv(c, &out), 0);
            ASSERT_EQ(out, (int)i);
        }
        int out = -1;
        ASSERT_EQ(weft_chan_recv(c, &out), -EPIPE);
        ASSERT_EQ(out, -1);
        ASSERT_EQ(weft_chan_unref(c), 0);

        c = mkchan(sizeof(int), cap);
        t0 = weft_now();
        s = scope_open();
        for (int i = 0; i < CW; i++) {
            w[i] = (struct waiter){.c = c};
            spawn(wait_recv, &w[i]);
        }
        spawn(close_after_1s, c);
        scope_end(s);
        for (int i = 0; i < CW; i++) {
            ASSERT_EQ(w[i].rc, -EPIPE);
            ASSERT_EQ(w[i].val, -1);
            ASSERT_EQ(w[i].at, t0 + WEFT_SEC);
        }
        ASSERT_EQ(weft_chan_unref(c), 0);
    }
    return 0;
}

TEST(close_wakes_blocked_senders_and_receivers)
{
    ASSERT_EQ(t_run_virtual(1, close_wakes_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(4, close_wakes_root, NULL), 0);
}

/* Close from a plain pthread while tasks wait on two other workers. */
#define PC_N 8
struct pclose {
    weft_chan *empty, *full;
    atomic_int parked, epipe;
};

static int pc_recv(void *arg)
{
    struct pclose *p = arg;
    int out = -1;
    atomic_fetch_add(&p->parked, 1);
    if (weft_chan_recv(p->empty, &out) == -EPIPE && out == -1)
        atomic_fetch_add(&p->epipe, 1);
    return 0;
}

static int pc_send(void *arg)
{
    struct pclose *p = arg;
    int v = 5000;
    atomic_fetch_add(&p->parked, 1);
    if (weft_chan_send(p->full, &v) == -EPIPE)
        atomic_fetch_add(&p->epipe, 1);
    return 0;
}

static void *pc_thread(void *arg)
{
    struct pclose *p = arg;
    while (atomic_load(&p->parked) < 2 * PC_N)
        sched_yield();
    ASSERT(weft_scope_current() == NULL);
    ASSERT_EQ(weft_chan_close(p->empty), 0);
    ASSERT_EQ(weft_chan_close(p->full), 0);
    ASSERT_EQ(weft_chan_close(p->full), -EPIPE);
    return NULL;
}

static int pclose_root(void *arg)
{
    struct pclose *p = arg;
    weft_scope *s = scope_open();
    for (int i = 0; i < PC_N; i++) {
        spawn(pc_recv, p);
        spawn(pc_send, p);
    }
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, pc_thread, p), 0);
    scope_end(s);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(atomic_load(&p->epipe), 2 * PC_N);
    int out;
    ASSERT_EQ(weft_chan_recv(p->full, &out), 0);
    ASSERT_EQ(out, 0);
    ASSERT_EQ(weft_chan_recv(p->full, &out), 0);
    ASSERT_EQ(out, 1);
    ASSERT_EQ(weft_chan_recv(p->full, &out), -EPIPE);
    return 0;
}

TEST(close_from_plain_pthread_wakes_tasks)
{
    struct pclose p = {.empty = mkchan(sizeof(int), 3),
                       .full = mkchan(sizeof(int), 2)};
    fill(p.full, 2);
    ASSERT_EQ(t_run_mono(2, pclose_root, &p), 0);
    ASSERT_EQ(weft_chan_unref(p.empty), 0);
    ASSERT_EQ(weft_chan_unref(p.full), 0);
}

/* ---- arrival order ----------------------------------------------------- */

#define NARR 5
static const int arrivals[NARR] = {3, 1, 5, 2, 4};

static int arrival_root(void *arg)
{
    (void)arg;
    for (int k = 0; k < NCAPS; k++) {
        size_t cap = caps[k];
        /* Senders blocked on a full channel go in the order they came. */
        weft_chan *c = mkchan(sizeof(int), cap);
        fill(c, cap);
        struct waiter w[NARR];
        weft_time t0 = weft_now();
        weft_scope *s = scope_open();
        for (int i = 0; i < NARR; i++) {
            w[i] = (struct waiter){
                .c = c, .arrive = arrivals[i], .val = 100 + arrivals[i]};
            spawn(wait_send, &w[i]);
        }
        ASSERT_EQ(weft_sleep_for(10 * WEFT_SEC), 0);
        for (size_t i = 0; i < cap; i++) {
            int out = -1;
            ASSERT_EQ(weft_chan_recv(c, &out), 0);
            ASSERT_EQ(out, (int)i);
        }
        for (int a = 1; a <= NARR; a++) {
            int out = -1;
            ASSERT_EQ(weft_chan_recv(c, &out), 0);
            ASSERT_EQ(out, 100 + a);
        }
        scope_end(s);
        for (int i = 0; i < NARR; i++) {
            ASSERT_EQ(w[i].rc, 0);
            ASSERT_EQ(w[i].at, t0 + 10 * WEFT_SEC);
        }
        int out;
        ASSERT_EQ(weft_chan_try_recv(c, &out), -EAGAIN);
        ASSERT_EQ(weft_chan_unref(c), 0);

        /* Receivers waiting on an empty channel too: the k-th to come gets
         * the k-th value. */
        c = mkchan(sizeof(int), cap);
        t0 = weft_now();
        s = scope_open();
        for (int i = 0; i < NARR; i++) {
            w[i] = (struct waiter){.c = c, .arrive = arrivals[i]};
            spawn(wait_recv, &w[i]);
        }
        ASSERT_EQ(weft_sleep_for(10 * WEFT_SEC), 0);
        for (int a = 1; a <= NARR; a++)
            ASSERT_EQ(weft_chan_send(c, &a), 0);
        scope_end(s);
        for (int i = 0; i < NARR; i++) {
            ASSERT_EQ(w[i].rc, 0);
            ASSERT_EQ(w[i].val, w[i].arrive);
            ASSERT_EQ(w[i].at, t0 + 10 * WEFT_SEC);
        }
        ASSERT_EQ(weft_chan_unref(c), 0);
    }
    return 0;
}

TEST(waiters_served_in_arrival_order)
{
    for (uint64_t seed = 1; seed <= 6; seed++)
        ASSERT_EQ(
            t_run(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed), arrival_root, NULL), 0);
}

/* ---- try variants meeting blocked peers -------------------------------- */

static int try_peers_root(void *arg)
{
    (void)arg;
    weft_chan *c = mkchan(sizeof(int), 0);
    struct waiter w = {.c = c};
    int v, out;

    /* Rendezvous, a receiver waits: try_send hands the value over. */
    weft_scope *s = scope_open();
    spawn(wait_recv, &w);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    v = 42;
    ASSERT_EQ(weft_chan_try_send(c, &v), 0);
    v = 43;
    ASSERT_EQ(weft_chan_try_send(c, &v), -EAGAIN); /* nobody waits now */
    scope_end(s);
    ASSERT_EQ(w.rc, 0);
    ASSERT_EQ(w.val, 42);

    /* Rendezvous, a sender waits: try_recv takes its value. */
    w = (struct waiter){.c = c, .val = 7};
    s = scope_open();
    spawn(wait_send, &w);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    out = -1;
    ASSERT_EQ(weft_chan_try_recv(c, &out), 0);
    ASSERT_EQ(out, 7);
    ASSERT_EQ(weft_chan_try_recv(c, &out), -EAGAIN);
    scope_end(s);
    ASSERT_EQ(w.rc, 0);
    ASSERT_EQ(w.at, 2 * WEFT_SEC);

    /* Full buffer, a sender waits: try_recv takes the head and the waiting
     * value goes in behind the rest. */
    weft_chan *b = mkchan(sizeof(int), 2);
    fill(b, 2);
    w = (struct waiter){.c = b, .val = 9};
    s = scope_open();
    spawn(wait_send, &w);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_chan_try_recv(b, &out), 0);
    ASSERT_EQ(out, 0);
    scope_end(s);
    ASSERT_EQ(w.rc, 0);
    ASSERT_EQ(weft_chan_len(b), 2);
    ASSERT_EQ(weft_chan_try_recv(b, &out), 0);
    ASSERT_EQ(out, 1);
    ASSERT_EQ(weft_chan_try_recv(b, &out), 0);
    ASSERT_EQ(out, 9);
    ASSERT_EQ(weft_chan_try_recv(b, &out), -EAGAIN);

    /* Empty buffer, a receiver waits: try_send reaches it. */
    w = (struct waiter){.c = b};
    s = scope_open();
    spawn(wait_recv, &w);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    v = 5;
    ASSERT_EQ(weft_chan_try_send(b, &v), 0);
    scope_end(s);
    ASSERT_EQ(w.rc, 0);
    ASSERT_EQ(w.val, 5);
    ASSERT_EQ(weft_chan_len(b), 0);

    /* Cancelled waiters leave nothing behind. */
    w = (struct waiter){.c = c};
    weft_time t0 = weft_now();
    s = scope_open();
    spawn(wait_recv, &w);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(w.rc, -ECANCELED);
    ASSERT_EQ(w.val, -1);
    ASSERT_EQ(w.at, t0 + WEFT_SEC);
    v = 44;
    ASSERT_EQ(weft_chan_try_send(c, &v), -EAGAIN);

    w = (struct waiter){.c = c, .val = 13};
    s = scope_open();
    spawn(wait_send, &w);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(w.rc, -ECANCELED);
    ASSERT_EQ(weft_chan_try_recv(c, &out), -EAGAIN);

    fill(b, 2);
    w = (struct waiter){.c = b, .val = 14};
    s = scope_open();
    spawn(wait_send, &w);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(w.rc, -ECANCELED);
    ASSERT_EQ(weft_chan_try_recv(b, &out), 0);
    ASSERT_EQ(out, 0);
    ASSERT_EQ(weft_chan_try_recv(b, &out), 0);
    ASSERT_EQ(out, 1);
    ASSERT_EQ(weft_chan_try_recv(b, &out), -EAGAIN); /* 14 never went in */

    ASSERT_EQ(weft_chan_unref(b), 0);
    ASSERT_EQ(weft_chan_unref(c), 0);
    return 0;
}

TEST(try_ops_meet_blocked_peers)
{
    ASSERT_EQ(t_run_virtual(1, try_peers_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, try_peers_root, NULL), 0);
}

/* try_send / try_recv from a plain thread against tasks that block. */
#define PT_N 2000
static void *pt_try_sender(void *arg)
{
    weft_chan *c = arg;
    for (int i = 0; i < PT_N; i++) {
        int rc;
        while ((rc = weft_chan_try_send(c, &i)) == -EAGAIN)
            sched_yield();
        ASSERT_EQ(rc, 0);
    }
    return NULL;
}

static void *pt_try_receiver(void *arg)
{
    weft_chan *c = arg;
    for (int i = 0; i < PT_N; i++) {
        int rc, out = -1;
        while ((rc = weft_chan_try_recv(c, &out)) == -EAGAIN)
            sched_yield();
        ASSERT_EQ(rc, 0);
        ASSERT_EQ(out, i);
    }
    int rc, out;
    while ((rc = weft_chan_try_recv(c, &out)) == -EAGAIN)
        sched_yield();
    ASSERT_EQ(rc, -EPIPE);
    return NULL;
}

static int pt_root(void *arg)
{
    size_t cap = (size_t)(uintptr_t)arg;
    weft_chan *c = mkchan(sizeof(int), cap);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, pt_try_sender, c), 0);
    for (int i = 0; i < PT_N; i++) {
        int out = -1;
        ASSERT_EQ(weft_chan_recv(c, &out), 0);
        ASSERT_EQ(out, i);
    }
    ASSERT_EQ(pthread_join(th, NULL), 0);

    ASSERT_EQ(pthread_create(&th, NULL, pt_try_receiver, c), 0);
    for (int i = 0; i < PT_N; i++)
        ASSERT_EQ(weft_chan_send(c, &i), 0);
    ASSERT_EQ(weft_chan_close(c), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(weft_chan_unref(c), 0);
    return 0;
}

TEST(try_ops_from_plain_pthread)
{
    ASSERT_EQ(t_run_mono(2, pt_root, (void *)(uintptr_t)0), 0);
    ASSERT_EQ(t_run_mono(2, pt_root, (void *)(uintptr_t)3), 0);
}

/* ---- values of every size are copied exactly ---------------------------- */

static unsigned char pattern(size_t size, int seq, size_t i)
{
    return (unsigned char)(size * 7 + (size_t)seq * 31 + i * 13 + (i >> 8));
}

struct esz {
    weft_chan *c;
    size_t size;
};

#define ESZ_N 10
#define GUARD 16

static int esz_sender(void *arg)
{
    struct esz *e = arg;
    unsigned char *buf = malloc(e->size);
    ASSERT(buf != NULL);
    for (int seq = 0; seq < ESZ_N; seq++) {
        for (size_t i = 0; i < e->size; i++)
            buf[i] = pattern(e->size, seq, i);
        ASSERT_EQ(weft_chan_send(e->c, buf), 0);
        memset(buf, 0xee, e->size); /* the channel holds a copy */
    }
    free(buf);
    return 0;
}

static int esz_root(void *arg)
{
    (void)arg;
    static const size_t sizes[] = {1, 3, 24, 1000, 65536};
    static const size_t ecaps[] = {0, 1, 3};
    for (int si = 0; si < 5; si++) {
        for (int ci = 0; ci < 3; ci++) {
            struct esz e = {.c = mkchan(sizes[si], ecaps[ci]),
                            .size = sizes[si]};
            unsigned char *out = malloc(e.size + GUARD);
            ASSERT(out != NULL);
            weft_scope *s = scope_open();
            spawn(esz_sender, &e);
            for (int seq = 0; seq < ESZ_N; seq++) {
                memset(out, 0xa5, e.size + GUARD);
                if (seq % 2)
                    ASSERT_EQ(weft_yield(), 0); /* let it fill */
                ASSERT_EQ(weft_chan_recv(e.c, out), 0);
                for (size_t i = 0; i < e.size; i++)
                    if (out[i] != pattern(e.size, seq, i))
                        T_FAIL("size %zu cap %zu value %d byte %zu wrong",
                               e.size, ecaps[ci], seq, i);
                for (size_t i = e.size; i < e.size + GUARD; i++)
                    ASSERT_EQ(out[i], 0xa5); /* nothing written past it */
            }
            scope_end(s);
            ASSERT_EQ(weft_chan_unref(e.c), 0);
            free(out);
        }
    }
    return 0;
}

TEST(values_of_every_size_copied_exactly)
{
    ASSERT_EQ(t_run_virtual(1, esz_root, NULL), 0);
    ASSERT_EQ(t_run_mono(2, esz_root, NULL), 0);
}

/* ---- many producers, many consumers: an exact multiset ------------------ */

#define MP_PRODUCERS 4
#define MP_CONSUMERS 4

struct mpmc {
    weft_chan *c;
    uint32_t n; /* the values 0 .. n-1, producer p sends those = p mod 4 */
    _Atomic unsigned char *seen;
    atomic_long received;
    atomic_int next_producer;
};

static int mp_producer(void *arg)
{
    struct mpmc *m = arg;
    uint32_t p = (uint32_t)atomic_fetch_add(&m->next_producer, 1);
    ASSERT(p < MP_PRODUCERS);
    for (uint32_t v = p; v < m->n; v += MP_PRODUCERS)
        ASSERT_EQ(weft_chan_send(m->c, &v), 0);
    return 0;
}

static int mp_consumer(void *arg)
{
    struct mpmc *m = arg;
    int64_t last[MP_PRODUCERS];
    for (int p = 0; p < MP_PRODUCERS; p++)
        last[p] = -1;
    uint32_t v;
    long got = 0;
    int rc;
    while ((rc = weft_chan_recv(m->c, &v)) == 0) {
        ASSERT(v < m->n);
        /* One sender's values arrive in the order sent. */
        ASSERT((int64_t)v > last[v % MP_PRODUCERS]);
        last[v % MP_PRODUCERS] = v;
        ASSERT_EQ(atomic_fetch_add(&m->seen[v], 1), 0);
        got++;
    }
    ASSERT_EQ(rc, -EPIPE);
    atomic_fetch_add(&m->received, got);
    return 0;
}

static int mp_closer(void *arg)
{
    struct mpmc *m = arg;
    weft_scope *s = scope_open();
    for (int i = 0; i < MP_PRODUCERS; i++)
        spawn(mp_producer, m);
    scope_end(s);
    ASSERT_EQ(weft_chan_close(m->c), 0);
    return 0;
}

static int mp_root(void *arg)
{
    struct mpmc *m = arg;
    weft_scope *s = scope_open();
    for (int i = 0; i < MP_CONSUMERS; i++)
        spawn(mp_consumer, m);
    spawn(mp_closer, m);
    scope_end(s);
    ASSERT_EQ(atomic_load(&m->received), m->n);
    for (uint32_t v = 0; v < m->n; v++)
        if (atomic_load(&m->seen[v]) != 1)
            T_FAIL("value %u received %d times", v, (int)m->seen[v]);
    return 0;
}

static void run_mpmc(int workers, size_t cap, long n)
{
    struct mpmc m = {.c = mkchan(sizeof(uint32_t), cap), .n = (uint32_t)n};
    m.seen = calloc((size_t)n, 1);
    ASSERT(m.seen != NULL);
    ASSERT_EQ(t_run_mono(workers, mp_root, &m), 0);
    ASSERT_EQ(weft_chan_unref(m.c), 0);
    free((void *)m.seen);
}

TEST(mpmc_exact_multiset_cap1024)
{
    run_mpmc(2, 1024, T_SCALE(1000000));
    run_mpmc(4, 1024, T_SCALE(1000000));
}

TEST(mpmc_exact_multiset_rendezvous)
{
    run_mpmc(2, 0, T_SCALE(1000000));
    run_mpmc(4, 0, T_SCALE(1000000));
}

/* ---- select: exactly one ready case is always taken -------------------- */

static int one_ready_root(void *arg)
{
    (void)arg;
    weft_chan *e0 = mkchan(sizeof(int), 0); /* recv: nobody sends */
    weft_chan *e1 = mkchan(sizeof(int), 4); /* recv: empty buffer */
    weft_chan *f = mkchan(sizeof(int), 1);  /* send: full buffer */
    weft_chan *z = mkchan(sizeof(int), 0);  /* send: nobody receives */
    weft_chan *r = mkchan(sizeof(int), 1);  /* the ready one */
    fill(f, 1);
    long iters = T_SCALE(100000);
    for (long i = 0; i < iters; i++) {
        int pos = (int)(i % 6), send = (int)((i / 6) % 2);
        int val = (int)i, out = -1, junk = -1, sendv = -7;
        weft_case idle[5] = {
            {.chan = e0, .op = WEFT_OP_RECV, .elem = &junk, .rc = 0},
            {.chan = e1, .op = WEFT_OP_RECV, .elem = &junk, .rc = 0},
            {.chan = f, .op = WEFT_OP_SEND, .elem = &sendv, .rc = 0},
            {.chan = z, .op = WEFT_OP_SEND, .elem = &sendv, .rc = 0},
            {.chan = NULL, .op = WEFT_OP_RECV, .elem = &junk, .rc = 0}};
        weft_case cs[6];
        for (int k = 0, j = 0; k < 6; k++) {
            if (k == pos) {
                cs[k] = (weft_case){.chan = r,
                                    .op = send ? WEFT_OP_SEND : WEFT_OP_RECV,
                                    .elem = send ? (void *)&val : (void *)&out,
                                    .rc = 99};
            } else {
                cs[k] = idle[j++];
                cs[k].rc = 99;
            }
        }
        if (!send)
            ASSERT_EQ(weft_chan_try_send(r, &val), 0);
        int idx = (i / 12) % 2 ? weft_select(cs, 6, WEFT_NEVER)
                               : weft_try_select(cs, 6);
        if (idx != pos)
            T_FAIL("iteration %ld: select returned %d, ready case is %d", i,
                   idx, pos);
        ASSERT_EQ(cs[pos].rc, 0);
        if (send) {
            ASSERT_EQ(weft_chan_try_recv(r, &out), 0);
            ASSERT_EQ(out, val);
        } else {
            ASSERT_EQ(out, val);
        }
        ASSERT_EQ(weft_chan_len(r), 0);
        ASSERT_EQ(junk, -1);
    }
    int out;
    ASSERT_EQ(weft_chan_try_recv(e0, &out), -EAGAIN);
    ASSERT_EQ(weft_chan_try_recv(e1, &out), -EAGAIN);
    ASSERT_EQ(weft_chan_try_recv(z, &out), -EAGAIN);
    ASSERT_EQ(weft_chan_len(f), 1);
    ASSERT_EQ(weft_chan_try_recv(f, &out), 0);
    ASSERT_EQ(out, 0);
    weft_chan *all[5] = {e0, e1, f, z, r};
    for (int k = 0; k < 5; k++)
        ASSERT_EQ(weft_chan_unref(all[k]), 0);
    return 0;
}

TEST(select_one_ready_always_taken)
{
    ASSERT_EQ(t_run_virtual(1, one_ready_root, NULL), 0);
}

/* Go's TestNonblockSelectRace: while another task moves values around, at
 * least one of the two channels holds a value at every instant, so the
 * non-blocking select must always find one. */
struct nbs {
    weft_chan *c1, *c2, *done;
};

struct nbs_result {
    int idx, val;
};

static int nbs_selector(void *arg)
{
    struct nbs *r = arg;
    int a = -1, b = -1;
    weft_case cs[2] = {
        {.chan = r->c1, .op = WEFT_OP_RECV, .elem = &a, .rc = 0},
        {.chan = r->c2, .op = WEFT_OP_RECV, .elem = &b, .rc = 0}};
    struct nbs_result res = {weft_try_select(cs, 2), -1};
    if (res.idx >= 0) {
        ASSERT_EQ(cs[res.idx].rc, 0);
        res.val = res.idx == 0 ? a : b;
    }
    ASSERT_EQ(weft_chan_send(r->done, &res), 0);
    return 0;
}

static int nbs_root(void *arg)
{
    (void)arg;
    long iters = T_SCALE(20000);
    for (long i = 0; i < iters; i++) {
        struct nbs r = {mkchan(sizeof(int), 1), mkchan(sizeof(int), 1),
                        mkchan(sizeof(struct nbs_result), 1)};
        int one = 1, two = 2, a = -1, b = -1;
        ASSERT_EQ(weft_chan_try_send(r.c1, &one), 0);
        spawn(nbs_selector, &r);
        ASSERT_EQ(weft_chan_try_send(r.c2, &two), 0);
        weft_case cs[2] = {
            {.chan = r.c1, .op = WEFT_OP_RECV, .elem = &a, .rc = 0},
            {.chan = r.c2, .op = WEFT_OP_RECV, .elem = &b, .rc = 0}};
        int idx = weft_select(cs, 2, WEFT_NEVER);
        ASSERT(idx == 0 || idx == 1);
        ASSERT_EQ(cs[idx].rc, 0);
        struct nbs_result res;
        ASSERT_EQ(weft_chan_recv(r.done, &res), 0);
        if (res.idx < 0)
            T_FAIL("iteration %ld: try_select returned %d with a value ready",
                   i, res.idx);
        /* Each took one value, not the same one. */
        ASSERT_EQ(res.val + (idx == 0 ? a : b), 3);
        ASSERT_EQ(weft_chan_len(r.c1) + weft_chan_len(r.c2), 0);
        ASSERT_EQ(weft_chan_unref(r.c1), 0);
        ASSERT_EQ(weft_chan_unref(r.c2), 0);
        ASSERT_EQ(weft_chan_unref(r.done), 0);
    }
    return 0;
}

TEST(try_select_race_with_moving_values)
{
    ASSERT_EQ(t_run_mono(2, nbs_root, NULL), 0);
}

/* Go's TestNonblockRecvRace: a buffered value stays ready while the
 * channel is closed under the selector: it must take the value or see the
 * close, never "not ready", and the value is taken exactly once. */
struct nrr {
    weft_chan *c, *done;
};

static int nrr_selector(void *arg)
{
    struct nrr *r = arg;
    int v = -1;
    weft_case cs[1] = {
        {.chan = r->c, .op = WEFT_OP_RECV, .elem = &v, .rc = 99}};
    int res[3];
    res[0] = weft_try_select(cs, 1);
    res[1] = cs[0].rc;
    res[2] = v;
    ASSERT_EQ(weft_chan_send(r->done, res), 0);
    return 0;
}

static int nrr_root(void *arg)
{
    (void)arg;
    long iters = T_SCALE(20000);
    for (long i = 0; i < iters; i++) {
        struct nrr r = {mkchan(sizeof(int), 1), mkchan(3 * sizeof(int), 1)};
        int one = 1, v = -1, res[3];
        ASSERT_EQ(weft_chan_try_send(r.c, &one), 0);
        spawn(nrr_selector, &r);
        ASSERT_EQ(weft_chan_close(r.c), 0);
        int rc = weft_chan_recv(r.c, &v);
        ASSERT_EQ(weft_chan_recv(r.done, res), 0);
        if (res[0] != 0)
            T_FAIL("iteration %ld: try_select returned %d", i, res[0]);
        if (rc == 0) {
            ASSERT_EQ(v, 1);
            ASSERT_EQ(res[1], -EPIPE);
        } else {
            ASSERT_EQ(rc, -EPIPE);
            ASSERT_EQ(res[1], 0);
            ASSERT_EQ(res[2], 1);
        }
        ASSERT_EQ(weft_chan_unref(r.c), 0);
        ASSERT_EQ(weft_chan_unref(r.done), 0);
    }
    return 0;
}

TEST(try_select_race_with_close)
{
    ASSERT_EQ(t_run_mono(2, nrr_root, NULL), 0);
}

/* ---- select: the choice among ready cases is uniform ------------------- */

static void uniform_round(int blocking)
{
    weft_chan *r0 = mkchan(sizeof(int), 1), *r1 = mkchan(sizeof(int), 1);
    weft_chan *s2 = mkchan(sizeof(int), 1), *e = mkchan(sizeof(int), 2);
    int a = -1, b = -1, junk = -1, sv = 3, one = 1, out;
    ASSERT_EQ(weft_chan_try_send(r0, &one), 0);
    ASSERT_EQ(weft_chan_try_send(r1, &one), 0);
    /* Ready cases at 0, 2 and 4 with idle ones between: a random start
     * followed by a scan would favour 2 and 4. */
    weft_case cs[5] = {
        {.chan = r0, .op = WEFT_OP_RECV, .elem = &a, .rc = 0},
        {.chan = e, .op = WEFT_OP_RECV, .elem = &junk, .rc = 0},
        {.chan = r1, .op = WEFT_OP_RECV, .elem = &b, .rc = 0},
        {.chan = NULL, .op = WEFT_OP_RECV, .elem = &junk, .rc = 0},
        {.chan = s2, .op = WEFT_OP_SEND, .elem = &sv, .rc = 0}};
    const long n = 30000;
    long count[5] = {0};
    for (long i = 0; i < n; i++) {
        int idx =
            blocking ? weft_select(cs, 5, WEFT_NEVER) : weft_try_select(cs, 5);
        ASSERT(idx == 0 || idx == 2 || idx == 4);
        ASSERT_EQ(cs[idx].rc, 0);
        count[idx]++;
        if (idx == 0)
            ASSERT_EQ(weft_chan_try_send(r0, &one), 0);
        else if (idx == 2)
            ASSERT_EQ(weft_chan_try_send(r1, &one), 0);
        else
            ASSERT_EQ(weft_chan_try_recv(s2, &out), 0);
    }
    for (int k = 0; k < 5; k += 2)
        if (count[k] < n * 25 / 100 || count[k] > n * 42 / 100)
            T_FAIL("case %d chosen %ld times of %ld (%s)", k, count[k], n,
                   blocking ? "select" : "try_select");
    ASSERT_EQ(junk, -1);
    ASSERT_EQ(weft_chan_unref(r0), 0);
    ASSERT_EQ(weft_chan_unref(r1), 0);
    ASSERT_EQ(weft_chan_unref(s2), 0);
    ASSERT_EQ(weft_chan_unref(e), 0);
}

static int uniform_root(void *arg)
{
    (void)arg;
    uniform_round(0);
    uniform_round(1);
    return 0;
}

TEST(select_uniform_among_ready)
{
    ASSERT_EQ(t_run_virtual(1, uniform_root, NULL), 0);
}

/* ---- select: deadline and cancellation leave no trace ------------------ */

struct trace {
    weft_chan *a; /* cap 0: recv case */
    weft_chan *b; /* cap 1 holding 11: send case of 99 */
    weft_chan *c; /* cap 3, empty: recv case */
    weft_chan *d; /* cap 0: send case of 98 */
    int outa, outc, vb, vd, junk;
    weft_case cs[5];
    int rc;
    weft_time at;
};

static void trace_init(struct trace *t)
{
    *t = (struct trace){.a = mkchan(sizeof(int), 0),
                        .b = mkchan(sizeof(int), 1),
                        .c = mkchan(sizeof(int), 3),
                        .d = mkchan(sizeof(int), 0),
                        .outa = -1,
                        .outc = -1,
                        .vb = 99,
                        .vd = 98,
                        .junk = -1};
    int eleven = 11;
    ASSERT_EQ(weft_chan_try_send(t->b, &eleven), 0);
    t->cs[0] = (weft_case){
        .chan = t->a, .op = WEFT_OP_RECV, .elem = &t->outa, .rc = 77};
    t->cs[1] =
        (weft_case){.chan = t->b, .op = WEFT_OP_SEND, .elem = &t->vb, .rc = 77};
    t->cs[2] = (weft_case){
        .chan = NULL, .op = WEFT_OP_RECV, .elem = &t->junk, .rc = 77};
    t->cs[3] = (weft_case){
        .chan = t->c, .op = WEFT_OP_RECV, .elem = &t->outc, .rc = 77};
    t->cs[4] =
        (weft_case){.chan = t->d, .op = WEFT_OP_SEND, .elem = &t->vd, .rc = 77};
}

/* After a select that returned an error: nothing moved, and no waiter of
 * it is left on any channel to steal or inject a value. */
static void check_no_trace(struct trace *t)
{
    ASSERT_EQ(t->outa, -1);
    ASSERT_EQ(t->outc, -1);
    ASSERT_EQ(t->junk, -1);
    ASSERT_EQ(weft_chan_len(t->a), 0);
    ASSERT_EQ(weft_chan_len(t->b), 1);
    ASSERT_EQ(weft_chan_len(t->c), 0);
    ASSERT_EQ(weft_chan_len(t->d), 0);
    int x = 5, out = -1;
    ASSERT_EQ(weft_chan_try_send(t->a, &x), -EAGAIN);   /* no receiver */
    ASSERT_EQ(weft_chan_try_recv(t->d, &out), -EAGAIN); /* no sender */
    ASSERT_EQ(weft_chan_try_recv(t->b, &out), 0);
    ASSERT_EQ(out, 11);
    ASSERT_EQ(weft_chan_try_recv(t->b, &out), -EAGAIN); /* 99 never sent */
    x = 6;
    ASSERT_EQ(weft_chan_try_send(t->c, &x), 0);
    ASSERT_EQ(weft_chan_len(t->c), 1); /* nobody took it on the way */
    ASSERT_EQ(weft_chan_try_recv(t->c, &out), 0);
    ASSERT_EQ(out, 6);
    /* Later plain transfers meet plain peers. */
    weft_time t0 = weft_now();
    struct waiter wr = {.c = t->a}, ws = {.c = t->d, .val = 31};
    weft_scope *s = scope_open();
    spawn(recv_10s, &wr);
    spawn(send_10s, &ws);
    x = 30;
    ASSERT_EQ(weft_chan_send_until(t->a, &x, t0 + 10 * WEFT_SEC), 0);
    out = -1;
    ASSERT_EQ(weft_chan_recv_until(t->d, &out, t0 + 10 * WEFT_SEC), 0);
    ASSERT_EQ(out, 31);
    scope_end(s);
    ASSERT_EQ(wr.rc, 0);
    ASSERT_EQ(wr.val, 30);
    ASSERT_EQ(ws.rc, 0);
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(t->outa, -1);
}

static void trace_free(struct trace *t)
{
    ASSERT_EQ(weft_chan_unref(t->a), 0);
    ASSERT_EQ(weft_chan_unref(t->b), 0);
    ASSERT_EQ(weft_chan_unref(t->c), 0);
    ASSERT_EQ(weft_chan_unref(t->d), 0);
}

static int select_in_task(void *arg)
{
    struct trace *t = arg;
    t->rc = weft_select(t->cs, 5, WEFT_NEVER);
    t->at = weft_now();
    return 0;
}

static int select_deadline_root(void *arg)
{
    (void)arg;
    struct trace t;
    trace_init(&t);
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_select(t.cs, 5, t0 + 3 * WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + 3 * WEFT_SEC);
    check_no_trace(&t);
    trace_free(&t);

    /* A deadline already passed: no waiting at all. */
    trace_init(&t);
    t0 = weft_now();
    ASSERT_EQ(weft_select(t.cs, 5, t0), -ETIMEDOUT);
    ASSERT_EQ(weft_select(t.cs, 5, t0 - WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(weft_try_select(t.cs, 5), -EAGAIN);
    check_no_trace(&t);
    trace_free(&t);

    /* Cancelled while waiting, from another task. */
    trace_init(&t);
    t0 = weft_now();
    weft_scope *s = scope_open();
    spawn(select_in_task, &t);
    ASSERT_EQ(weft_sleep_for(2 * WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(t.rc, -ECANCELED);
    ASSERT_EQ(t.at, t0 + 2 * WEFT_SEC);
    check_no_trace(&t);
    trace_free(&t);

    /* In a scope already cancelled: at once. */
    trace_init(&t);
    t0 = weft_now();
    s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_select(t.cs, 5, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_select(t.cs, 5, t0 + WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    check_no_trace(&t);
    trace_free(&t);

    /* Only switched-off cases: a pure timeout. */
    int x = 0;
    weft_case nc[2] = {{.chan = NULL, .op = WEFT_OP_RECV, .elem = &x, .rc = 0},
                       {.chan = NULL, .op = WEFT_OP_SEND, .elem = &x, .rc = 0}};
    t0 = weft_now();
    ASSERT_EQ(weft_select(nc, 2, t0 + 2 * WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + 2 * WEFT_SEC);
    ASSERT_EQ(weft_try_select(nc, 2), -EAGAIN);
    return 0;
}

TEST(select_timeout_and_cancel_leave_no_trace)
{
    ASSERT_EQ(t_run_virtual(1, select_deadline_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, select_deadline_root, NULL), 0);
}

/* A deadline already past only skips the wait: a case ready now is taken
 * (a buffered value, room to send, a waiting peer, a closed channel),
 * with no time passing; -ETIMEDOUT comes at once only when none is. */
static int past_deadline_root(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0); /* so that 0 is in the past */
    weft_time t0 = weft_now();
    weft_time past[] = {0, t0 - 1, t0};
    weft_chan *empty = mkchan(sizeof(int), 1);
    weft_chan *full = mkchan(sizeof(int), 1);
    fill(full, 1);
    for (size_t k = 0; k < sizeof past / sizeof past[0]; k++) {
        /* A buffered value to receive. */
        weft_chan *buf = mkchan(sizeof(int), 2);
        int v = 40 + (int)k, got = -1;
        ASSERT_EQ(weft_chan_try_send(buf, &v), 0);
        weft_case rc[2] = {
            {.chan = empty, .op = WEFT_OP_RECV, .elem = &got, .rc = 0},
            {.chan = buf, .op = WEFT_OP_RECV, .elem = &got, .rc = 0}};
        ASSERT_EQ(weft_select(rc, 2, past[k]), 1);
        ASSERT_EQ(rc[1].rc, 0);
        ASSERT_EQ(got, 40 + (int)k);
        /* Room to send. */
        int out = 7;
        weft_case sc[2] = {
            {.chan = full, .op = WEFT_OP_SEND, .elem = &out, .rc = 0},
            {.chan = buf, .op = WEFT_OP_SEND, .elem = &out, .rc = 0}};
        ASSERT_EQ(weft_select(sc, 2, past[k]), 1);
        ASSERT_EQ(sc[1].rc, 0);
        ASSERT_EQ(weft_chan_len(buf), 1);
        /* A closed, drained channel is ready with -EPIPE. */
        ASSERT_EQ(weft_chan_try_recv(buf, &got), 0);
        ASSERT_EQ(weft_chan_close(buf), 0);
        ASSERT_EQ(weft_select(rc, 2, past[k]), 1);
        ASSERT_EQ(rc[1].rc, -EPIPE);
        ASSERT_EQ(weft_chan_unref(buf), 0);
        /* Nothing ready: -ETIMEDOUT at once, nothing left waiting. */
        weft_case none[2] = {
            {.chan = empty, .op = WEFT_OP_RECV, .elem = &got, .rc = 0},
            {.chan = full, .op = WEFT_OP_SEND, .elem = &out, .rc = 0}};
        ASSERT_EQ(weft_select(none, 2, past[k]), -ETIMEDOUT);
        ASSERT_EQ(weft_now(), t0);
    }
    /* A sender waiting on a rendezvous channel is a ready case too. */
    weft_chan *z = mkchan(sizeof(int), 0);
    struct waiter w = {.c = z, .val = 99};
    weft_scope *s = scope_open();
    spawn(wait_send, &w);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0); /* it is parked in its send */
    int got = -1;
    weft_case zc[1] = {{.chan = z, .op = WEFT_OP_RECV, .elem = &got, .rc = 0}};
    ASSERT_EQ(weft_select(zc, 1, 0), 0);
    ASSERT_EQ(got, 99);
    scope_end(s);
    ASSERT_EQ(w.rc, 0);
    ASSERT_EQ(weft_chan_len(full), 1);
    ASSERT_EQ(weft_chan_len(empty), 0);
    ASSERT_EQ(weft_chan_unref(z), 0);
    ASSERT_EQ(weft_chan_unref(empty), 0);
    ASSERT_EQ(weft_chan_unref(full), 0);
    return 0;
}

TEST(select_past_deadline_takes_ready_case)
{
    ASSERT_EQ(t_run_virtual(1, past_deadline_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, past_deadline_root, NULL), 0);
}

/* ---- select: send cases, closed channels, losers ----------------------- */

static int recv_after_1s(void *arg)
{
    struct waiter *w = arg;
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    w->val = -1;
    w->rc = weft_chan_recv(w->c, &w->val);
    w->at = weft_now();
    return 0;
}

static int send_after_1s(void *arg)
{
    struct waiter *w = arg;
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    w->rc = weft_chan_send(w->c, &w->val);
    w->at = weft_now();
    return 0;
}

static int select_send_root(void *arg)
{
    (void)arg;
    weft_chan *s1 = mkchan(sizeof(int), 0), *s2 = mkchan(sizeof(int), 0);
    weft_chan *r = mkchan(sizeof(int), 0);
    int v1 = 1, v2 = 2, outr = -1, out;
    weft_case cs[3] = {{.chan = s1, .op = WEFT_OP_SEND, .elem = &v1, .rc = 0},
                       {.chan = r, .op = WEFT_OP_RECV, .elem = &outr, .rc = 0},
                       {.chan = s2, .op = WEFT_OP_SEND, .elem = &v2, .rc = 0}};
    /* A receiver comes to s2 after 1 s: the send case completes then. */
    struct waiter w = {.c = s2};
    weft_time t0 = weft_now();
    weft_scope *s = scope_open();
    spawn(recv_after_1s, &w);
    ASSERT_EQ(weft_select(cs, 3, WEFT_NEVER), 2);
    ASSERT_EQ(cs[2].rc, 0);
    ASSERT_EQ(weft_now(), t0 + WEFT_SEC);
    scope_end(s);
    ASSERT_EQ(w.rc, 0);
    ASSERT_EQ(w.val, 2);
    ASSERT_EQ(w.at, t0 + WEFT_SEC);
    ASSERT_EQ(outr, -1);
    ASSERT_EQ(weft_chan_try_recv(s1, &out), -EAGAIN);
    ASSERT_EQ(weft_chan_try_recv(s2, &out), -EAGAIN);
    out = 1;
    ASSERT_EQ(weft_chan_try_send(r, &out), -EAGAIN);

    /* A sender comes to r after 1 s: the receive case completes. */
    w = (struct waiter){.c = r, .val = 55};
    t0 = weft_now();
    s = scope_open();
    spawn(send_after_1s, &w);
    ASSERT_EQ(weft_select(cs, 3, WEFT_NEVER), 1);
    ASSERT_EQ(cs[1].rc, 0);
    ASSERT_EQ(outr, 55);
    ASSERT_EQ(weft_now(), t0 + WEFT_SEC);
    scope_end(s);
    ASSERT_EQ(w.rc, 0);
    ASSERT_EQ(weft_chan_try_recv(s1, &out), -EAGAIN);
    ASSERT_EQ(weft_chan_try_recv(s2, &out), -EAGAIN);

    /* Send cases on full buffers: the one that gets room takes the value,
     * behind what was there. */
    weft_chan *b1 = mkchan(sizeof(int), 2), *b2 = mkchan(sizeof(int), 1);
    fill(b1, 2);
    fill(b2, 1);
    int x1 = 71, x2 = 72;
    weft_case bs[2] = {{.chan = b1, .op = WEFT_OP_SEND, .elem = &x1, .rc = 0},
                       {.chan = b2, .op = WEFT_OP_SEND, .elem = &x2, .rc = 0}};
    w = (struct waiter){.c = b2};
    t0 = weft_now();
    s = scope_open();
    spawn(recv_after_1s, &w);
    ASSERT_EQ(weft_select(bs, 2, WEFT_NEVER), 1);
    ASSERT_EQ(bs[1].rc, 0);
    ASSERT_EQ(weft_now(), t0 + WEFT_SEC);
    scope_end(s);
    ASSERT_EQ(w.val, 0);
    ASSERT_EQ(weft_chan_len(b2), 1);
    ASSERT_EQ(weft_chan_try_recv(b2, &out), 0);
    ASSERT_EQ(out, 72);
    ASSERT_EQ(weft_chan_len(b1), 2);
    ASSERT_EQ(weft_chan_try_recv(b1, &out), 0);
    ASSERT_EQ(out, 0);
    ASSERT_EQ(weft_chan_try_recv(b1, &out), 0);
    ASSERT_EQ(out, 1);
    ASSERT_EQ(weft_chan_try_recv(b1, &out), -EAGAIN);

    weft_chan *all[5] = {s1, s2, r, b1, b2};
    for (int k = 0; k < 5; k++)
        ASSERT_EQ(weft_chan_unref(all[k]), 0);
    return 0;
}

TEST(select_send_cases)
{
    ASSERT_EQ(t_run_virtual(1, select_send_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, select_send_root, NULL), 0);
}

static int select_closed_root(void *arg)
{
    (void)arg;
    weft_chan *a = mkchan(sizeof(int), 0); /* never ready */
    weft_chan *cl = mkchan(sizeof(int), 2);
    ASSERT_EQ(weft_chan_close(cl), 0);
    int out = -1, v = 8;
    weft_time t0 = weft_now();

    /* A receive from a closed, drained channel is ready at once. */
    weft_case cs[2] = {{.chan = a, .op = WEFT_OP_RECV, .elem = &out, .rc = 0},
                       {.chan = cl, .op = WEFT_OP_RECV, .elem = &out, .rc = 0}};
    ASSERT_EQ(weft_try_select(cs, 2), 1);
    ASSERT_EQ(cs[1].rc, -EPIPE);
    cs[1].rc = 0;
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), 1);
    ASSERT_EQ(cs[1].rc, -EPIPE);
    ASSERT_EQ(out, -1);

    /* So is a send to a closed channel; nothing is delivered. */
    weft_case ss[2] = {{.chan = a, .op = WEFT_OP_RECV, .elem = &out, .rc = 0},
                       {.chan = cl, .op = WEFT_OP_SEND, .elem = &v, .rc = 0}};
    ASSERT_EQ(weft_try_select(ss, 2), 1);
    ASSERT_EQ(ss[1].rc, -EPIPE);
    ss[1].rc = 0;
    ASSERT_EQ(weft_select(ss, 2, t0 + WEFT_SEC), 1);
    ASSERT_EQ(ss[1].rc, -EPIPE);
    ASSERT_EQ(weft_chan_len(cl), 0);
    ASSERT_EQ(weft_now(), t0);

    /* Closed with a value buffered: the value first, then -EPIPE. */
    weft_chan *cb = mkchan(sizeof(int), 2);
    fill(cb, 1);
    ASSERT_EQ(weft_chan_close(cb), 0);
    weft_case bs[2] = {{.chan = a, .op = WEFT_OP_RECV, .elem = &out, .rc = 0},
                       {.chan = cb, .op = WEFT_OP_RECV, .elem = &out, .rc = 0}};
    ASSERT_EQ(weft_select(bs, 2, WEFT_NEVER), 1);
    ASSERT_EQ(bs[1].rc, 0);
    ASSERT_EQ(out, 0);
    out = -1;
    ASSERT_EQ(weft_select(bs, 2, WEFT_NEVER), 1);
    ASSERT_EQ(bs[1].rc, -EPIPE);
    ASSERT_EQ(out, -1);

    /* A select waiting on receives is woken by a close at 1 s; the other
     * channel keeps no waiter. */
    weft_chan *x = mkchan(sizeof(int), 0), *y = mkchan(sizeof(int), 0);
    weft_case ws[2] = {{.chan = x, .op = WEFT_OP_RECV, .elem = &out, .rc = 0},
                       {.chan = y, .op = WEFT_OP_RECV, .elem = &out, .rc = 0}};
    weft_scope *s = scope_open();
    spawn(close_after_1s, y);
    ASSERT_EQ(weft_select(ws, 2, WEFT_NEVER), 1);
    ASSERT_EQ(ws[1].rc, -EPIPE);
    ASSERT_EQ(weft_now(), t0 + WEFT_SEC);
    scope_end(s);
    ASSERT_EQ(out, -1);
    ASSERT_EQ(weft_chan_try_send(x, &v), -EAGAIN);
    ASSERT_EQ(weft_chan_unref(y), 0);

    /* The same with send cases. */
    y = mkchan(sizeof(int), 0);
    int v1 = 1, v2 = 2;
    weft_case sw[2] = {{.chan = x, .op = WEFT_OP_SEND, .elem = &v1, .rc = 0},
                       {.chan = y, .op = WEFT_OP_SEND, .elem = &v2, .rc = 0}};
    s = scope_open();
    spawn(close_after_1s, y);
    ASSERT_EQ(weft_select(sw, 2, WEFT_NEVER), 1);
    ASSERT_EQ(sw[1].rc, -EPIPE);
    ASSERT_EQ(weft_now(), t0 + 2 * WEFT_SEC);
    scope_end(s);
    ASSERT_EQ(weft_chan_try_recv(x, &out), -EAGAIN);
    ASSERT_EQ(weft_chan_try_recv(y, &out), -EPIPE);

    weft_chan *all[5] = {a, cl, cb, x, y};
    for (int k = 0; k < 5; k++)
        ASSERT_EQ(weft_chan_unref(all[k]), 0);
    return 0;
}

TEST(select_on_closed_channels)
{
    ASSERT_EQ(t_run_virtual(1, select_closed_root, NULL), 0);
}

struct lose {
    weft_chan *c1, *c2;
    int op, idx;
    int v1, v2; /* sent, or received */
    weft_case cs[2];
};

static int lose_selector(void *arg)
{
    struct lose *l = arg;
    l->cs[0] = (weft_case){.chan = l->c1, .op = l->op, .elem = &l->v1};
    l->cs[1] = (weft_case){.chan = l->c2, .op = l->op, .elem = &l->v2};
    l->idx = weft_select(l->cs, 2, WEFT_NEVER);
    return 0;
}

static int losing_root(void *arg)
{
    (void)arg;
    for (int it = 0; it < 20; it++) {
        size_t cap = (size_t)(it % 2);
        /* Receiving select: a value comes on c1; c2 keeps no waiter. */
        struct lose l = {.c1 = mkchan(sizeof(int), cap),
                         .c2 = mkchan(sizeof(int), cap),
                         .op = WEFT_OP_RECV,
                         .idx = -9,
                         .v1 = -1,
                         .v2 = -1};
        weft_scope *s = scope_open();
        spawn(lose_selector, &l);
        ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
        int v = 1;
        ASSERT_EQ(weft_chan_send(l.c1, &v), 0);
        scope_end(s);
        ASSERT_EQ(l.idx, 0);
        ASSERT_EQ(l.cs[0].rc, 0);
        ASSERT_EQ(l.v1, 1);
        ASSERT_EQ(l.v2, -1);
        v = 2;
        if (cap == 0) {
            ASSERT_EQ(weft_chan_try_send(l.c2, &v), -EAGAIN);
            struct waiter w = {.c = l.c2};
            s = scope_open();
            spawn(recv_10s, &w);
            ASSERT_EQ(weft_chan_send_until(l.c2, &v, weft_now() + WEFT_SEC), 0);
            scope_end(s);
            ASSERT_EQ(w.rc, 0);
            ASSERT_EQ(w.val, 2);
        } else {
            ASSERT_EQ(weft_chan_try_send(l.c2, &v), 0);
            ASSERT_EQ(weft_chan_len(l.c2), 1);
            int out = -1;
            ASSERT_EQ(weft_chan_recv(l.c2, &out), 0);
            ASSERT_EQ(out, 2);
        }
        ASSERT_EQ(l.v2, -1);
        ASSERT_EQ(weft_chan_unref(l.c1), 0);
        ASSERT_EQ(weft_chan_unref(l.c2), 0);

        /* Sending select: c1 makes room; c2 keeps no waiting sender. */
        l = (struct lose){.c1 = mkchan(sizeof(int), cap),
                          .c2 = mkchan(sizeof(int), cap),
                          .op = WEFT_OP_SEND,
                          .idx = -9,
                          .v1 = 10,
                          .v2 = 20};
        fill(l.c1, cap);
        fill(l.c2, cap);
        s = scope_open();
        spawn(lose_selector, &l);
        ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
        int out = -1;
        ASSERT_EQ(weft_chan_recv(l.c1, &out), 0);
        ASSERT_EQ(out, cap ? 0 : 10);
        scope_end(s);
        ASSERT_EQ(l.idx, 0);
        ASSERT_EQ(l.cs[0].rc, 0);
        if (cap) {
            ASSERT_EQ(weft_chan_try_recv(l.c1, &out), 0);
            ASSERT_EQ(out, 10);
            ASSERT_EQ(weft_chan_try_recv(l.c2, &out), 0);
            ASSERT_EQ(out, 0);
        }
        ASSERT_EQ(weft_chan_try_recv(l.c2, &out), -EAGAIN); /* no 20 */
        struct waiter w = {.c = l.c2, .val = 21};
        s = scope_open();
        spawn(send_10s, &w);
        out = -1;
        ASSERT_EQ(weft_chan_recv_until(l.c2, &out, weft_now() + WEFT_SEC), 0);
        ASSERT_EQ(out, 21);
        scope_end(s);
        ASSERT_EQ(w.rc, 0);
        ASSERT_EQ(weft_chan_unref(l.c1), 0);
        ASSERT_EQ(weft_chan_unref(l.c2), 0);
    }
    return 0;
}

TEST(losing_select_leaves_no_waiter)
{
    ASSERT_EQ(t_run_virtual(1, losing_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, losing_root, NULL), 0);
}

/* Two cases on one channel; and Go's TestSelfSelect: a select with both a
 * send and a receive on a rendezvous channel never meets itself. */
static int same_chan_root(void *arg)
{
    (void)arg;
    weft_chan *c = mkchan(sizeof(int), 1);
    int a = -1, b = -1, v = 4;
    fill(c, 1);
    weft_case rr[2] = {{.chan = c, .op = WEFT_OP_RECV, .elem = &a, .rc = 0},
                       {.chan = c, .op = WEFT_OP_RECV, .elem = &b, .rc = 0}};
    int idx = weft_select(rr, 2, WEFT_NEVER);
    ASSERT(idx == 0 || idx == 1);
    ASSERT_EQ(idx == 0 ? a : b, 0);
    ASSERT_EQ(idx == 0 ? b : a, -1); /* taken once */
    ASSERT_EQ(weft_chan_len(c), 0);
    /* Empty buffer: only the send case is ready. */
    a = -1;
    weft_case rs[2] = {{.chan = c, .op = WEFT_OP_RECV, .elem = &a, .rc = 0},
                       {.chan = c, .op = WEFT_OP_SEND, .elem = &v, .rc = 0}};
    ASSERT_EQ(weft_try_select(rs, 2), 1);
    ASSERT_EQ(weft_chan_len(c), 1);
    /* Full buffer: only the receive case is. */
    ASSERT_EQ(weft_try_select(rs, 2), 0);
    ASSERT_EQ(a, 4);
    ASSERT_EQ(weft_chan_len(c), 0);
    ASSERT_EQ(weft_chan_unref(c), 0);
    /* Rendezvous: a lone select on send+recv of one channel waits. */
    c = mkchan(sizeof(int), 0);
    rs[0].chan = rs[1].chan = c;
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_select(rs, 2, t0 + WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + WEFT_SEC);
    ASSERT_EQ(weft_chan_unref(c), 0);
    return 0;
}

TEST(select_same_channel_twice)
{
    ASSERT_EQ(t_run_virtual(1, same_chan_root, NULL), 0);
}

struct self_sel {
    weft_chan *c;
    size_t cap;
    atomic_int ids;
};

static int self_selector(void *arg)
{
    struct self_sel *ss = arg;
    int p = atomic_fetch_add(&ss->ids, 1);
    for (int i = 0; i < 1000; i++) {
        int out = -1, v = p;
        weft_case cs[2];
        if ((p + i) % 2) {
            cs[0] = (weft_case){
                .chan = ss->c, .op = WEFT_OP_SEND, .elem = &v, .rc = 0};
            cs[1] = (weft_case){
                .chan = ss->c, .op = WEFT_OP_RECV, .elem = &out, .rc = 0};
        } else {
            cs[0] = (weft_case){
                .chan = ss->c, .op = WEFT_OP_RECV, .elem = &out, .rc = 0};
            cs[1] = (weft_case){
                .chan = ss->c, .op = WEFT_OP_SEND, .elem = &v, .rc = 0};
        }
        int idx = weft_select(cs, 2, WEFT_NEVER);
        ASSERT(idx == 0 || idx == 1);
        ASSERT_EQ(cs[idx].rc, 0);
        if (cs[idx].op == WEFT_OP_RECV && ss->cap == 0 && out == p)
            T_FAIL("select received its own value (task %d, round %d)", p, i);
    }
    return 0;
}

static int self_select_root(void *arg)
{
    (void)arg;
    static const size_t sc[2] = {0, 10};
    for (int k = 0; k < 2; k++) {
        struct self_sel ss = {mkchan(sizeof(int), sc[k]), sc[k], 0};
        weft_scope *s = scope_open();
        spawn(self_selector, &ss);
        spawn(self_selector, &ss);
        scope_end(s);
        ASSERT_EQ(weft_chan_unref(ss.c), 0);
    }
    return 0;
}

TEST(select_never_meets_itself)
{
    ASSERT_EQ(t_run_mono(2, self_select_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(1, self_select_root, NULL), 0);
}

/* ---- select on both sides under stress --------------------------------- */

#define SB_CHANS 3

struct sb {
    weft_chan *ch[SB_CHANS];
    size_t cap;
    uint32_t n;
    _Atomic unsigned char *seen;
    atomic_long received;
    atomic_int next_producer;
};

static int sb_producer(void *arg)
{
    struct sb *m = arg;
    uint32_t p = (uint32_t)atomic_fetch_add(&m->next_producer, 1);
    for (uint32_t v = p; v < m->n; v += MP_PRODUCERS) {
        weft_case cs[SB_CHANS];
        for (int k = 0; k < SB_CHANS; k++)
            cs[k] = (weft_case){
                .chan = m->ch[k], .op = WEFT_OP_SEND, .elem = &v, .rc = 0};
        int idx = weft_select(cs, SB_CHANS, WEFT_NEVER);
        ASSERT(idx >= 0 && idx < SB_CHANS);
        ASSERT_EQ(cs[idx].rc, 0);
    }
    return 0;
}

static int sb_consumer(void *arg)
{
    struct sb *m = arg;
    int64_t last[MP_PRODUCERS];
    for (int p = 0; p < MP_PRODUCERS; p++)
        last[p] = -1;
    uint32_t val[SB_CHANS];
    weft_case cs[SB_CHANS];
    for (int k = 0; k < SB_CHANS; k++)
        cs[k] = (weft_case){
            .chan = m->ch[k], .op = WEFT_OP_RECV, .elem = &val[k], .rc = 0};
    int open = SB_CHANS;
    long got = 0;
    while (open > 0) {
        int idx = weft_select(cs, SB_CHANS, WEFT_NEVER);
        ASSERT(idx >= 0 && idx < SB_CHANS);
        if (cs[idx].rc == -EPIPE) {
            cs[idx].chan = NULL; /* switched off, as Go's nil channel */
            open--;
            continue;
        }
        ASSERT_EQ(cs[idx].rc, 0);
        uint32_t v = val[idx];
        ASSERT(v < m->n);
        /* Rendezvous: a send completes only when its value is taken, so
         * one producer's values reach one consumer in order. (Buffered,
         * they sit in different channels and may be taken in any order.) */
        if (m->cap == 0)
            ASSERT((int64_t)v > last[v % MP_PRODUCERS]);
        last[v % MP_PRODUCERS] = v;
        ASSERT_EQ(atomic_fetch_add(&m->seen[v], 1), 0);
        got++;
    }
    atomic_fetch_add(&m->received, got);
    return 0;
}

static int sb_closer(void *arg)
{
    struct sb *m = arg;
    weft_scope *s = scope_open();
    for (int i = 0; i < MP_PRODUCERS; i++)
        spawn(sb_producer, m);
    scope_end(s);
    for (int k = 0; k < SB_CHANS; k++)
        ASSERT_EQ(weft_chan_close(m->ch[k]), 0);
    return 0;
}

static int sb_root(void *arg)
{
    struct sb *m = arg;
    weft_scope *s = scope_open();
    for (int i = 0; i < MP_CONSUMERS; i++)
        spawn(sb_consumer, m);
    spawn(sb_closer, m);
    scope_end(s);
    ASSERT_EQ(atomic_load(&m->received), m->n);
    for (uint32_t v = 0; v < m->n; v++)
        if (atomic_load(&m->seen[v]) != 1)
            T_FAIL("value %u received %d times", v, (int)m->seen[v]);
    return 0;
}

TEST(select_both_sides_exact_multiset)
{
    static const size_t sc[2] = {0, 8};
    for (int w = 2; w <= 4; w += 2) {
        for (int k = 0; k < 2; k++) {
            struct sb m = {.n = (uint32_t)T_SCALE(200000), .cap = sc[k]};
            for (int i = 0; i < SB_CHANS; i++)
                m.ch[i] = mkchan(sizeof(uint32_t), sc[k]);
            m.seen = calloc(m.n, 1);
            ASSERT(m.seen != NULL);
            ASSERT_EQ(t_run_mono(w, sb_root, &m), 0);
            for (int i = 0; i < SB_CHANS; i++)
                ASSERT_EQ(weft_chan_unref(m.ch[i]), 0);
            free((void *)m.seen);
        }
    }
}

/* ---- cancellation and timeouts at every blocking point ----------------- */

/* Senders and receivers on channels of several capacities use every kind
 * of send and receive, with short deadlines, and their scope is cancelled
 * after a random number of operations (or by its own deadline). Every
 * value a sender saw delivered must be received exactly once, and no value
 * whose send failed may ever be received. */
#define CS_CHANS 6
#define CS_SENDERS 6
#define CS_RECVERS 6
#define CS_QUOTA 300

static const size_t cs_caps[CS_CHANS] = {0, 0, 1, 2, 8, 64};

struct cs;
struct cs_task {
    struct cs *m;
    uint32_t base; /* first value of a sender */
    uint64_t rng;
};

struct cs {
    weft_chan *ch[CS_CHANS];
    int rounds;
    int64_t max_wait;     /* deadlines are now + [0, max_wait) */
    int64_t round_budget; /* the round scope's deadline */
    uint64_t seed;
    uint32_t nvalues;
    unsigned char *delivered;        /* set by the value's sender on 0 */
    _Atomic unsigned char *received; /* receipts per value */
    weft_scope *round;
    long threshold; /* the operation that cancels the round */
    atomic_long ops;
    atomic_int senders_left;
    atomic_long sent, unsent, got, cancelled, timedout;
    struct cs_task tasks[CS_SENDERS + CS_RECVERS];
};

static void cs_op_done(struct cs *m, int rc)
{
    if (rc == -ECANCELED)
        atomic_fetch_add(&m->cancelled, 1);
    else if (rc == -ETIMEDOUT)
        atomic_fetch_add(&m->timedout, 1);
    if (atomic_fetch_add(&m->ops, 1) + 1 == m->threshold)
        ASSERT_EQ(weft_scope_cancel(m->round), 0);
}

static weft_time cs_deadline(struct cs_task *t, uint64_t r)
{
    if (r % 4 == 0)
        return WEFT_NEVER;
    return weft_now() + (int64_t)(rnd(&t->rng) % (uint64_t)t->m->max_wait);
}

static void cs_record(struct cs *m, uint32_t v)
{
    if (v >= m->nvalues)
        T_FAIL("received %u, never sent", v);
    int old = atomic_fetch_add(&m->received[v], 1);
    if (old != 0)
        T_FAIL("value %u received twice", v);
    atomic_fetch_add(&m->got, 1);
}

static int cs_sender(void *arg)
{
    struct cs_task *t = arg;
    struct cs *m = t->m;
    for (uint32_t i = 0; i < CS_QUOTA; i++) {
        uint32_t v = t->base + i;
        uint64_t r = rnd(&t->rng);
        int k = (int)(r % CS_CHANS);
        int k2 = (k + 1 + (int)((r >> 8) % (CS_CHANS - 1))) % CS_CHANS;
        weft_chan *c = m->ch[k];
        int rc;
        switch ((r >> 16) % 5) {
        case 0:
            rc = weft_chan_send(c, &v);
            break;
        case 1:
            rc = weft_chan_send_until(c, &v, cs_deadline(t, r >> 24));
            break;
        case 2:
            rc = weft_chan_try_send(c, &v);
            break;
        default: {
            weft_case cs[3] = {
                {.chan = c, .op = WEFT_OP_SEND, .elem = &v, .rc = 1},
                {.chan = NULL, .op = WEFT_OP_SEND, .elem = &v, .rc = 1},
                {.chan = m->ch[k2], .op = WEFT_OP_SEND, .elem = &v, .rc = 1}};
            int idx = weft_select(cs, 3, cs_deadline(t, r >> 24));
            ASSERT(idx != 1);
            rc = idx >= 0 ? cs[idx].rc : idx;
        }
        }
        if (rc == 0) {
            m->delivered[v] = 1;
            atomic_fetch_add(&m->sent, 1);
        } else {
            if (rc != -ECANCELED && rc != -ETIMEDOUT && rc != -EAGAIN)
                T_FAIL("send returned %d", rc);
            atomic_fetch_add(&m->unsent, 1);
        }
        cs_op_done(m, rc);
        if (rc == -ECANCELED || weft_cancelled())
            break;
    }
    if (atomic_fetch_sub(&m->senders_left, 1) == 1)
        ASSERT_EQ(weft_scope_cancel(m->round), 0);
    return 0;
}

static int cs_receiver(void *arg)
{
    struct cs_task *t = arg;
    struct cs *m = t->m;
    for (;;) {
        uint64_t r = rnd(&t->rng);
        int k = (int)(r % CS_CHANS);
        weft_chan *c = m->ch[k];
        uint32_t v = UINT32_MAX;
        int rc;
        switch ((r >> 16) % 5) {
        case 0:
            rc = weft_chan_recv(c, &v);
            break;
        case 1:
            rc = weft_chan_recv_until(c, &v, cs_deadline(t, r >> 24));
            break;
        case 2:
            rc = weft_chan_try_recv(c, &v);
            break;
        default: {
            uint32_t vals[3] = {UINT32_MAX, UINT32_MAX, UINT32_MAX};
            weft_case cs[3];
            for (int j = 0; j < 3; j++)
                cs[j] = (weft_case){.chan = m->ch[(k + 2 * j) % CS_CHANS],
                                    .op = WEFT_OP_RECV,
                                    .elem = &vals[j],
                                    .rc = 1};
            int idx = weft_select(cs, 3, cs_deadline(t, r >> 24));
            rc = idx >= 0 ? cs[idx].rc : idx;
            if (idx >= 0)
                v = vals[idx];
            for (int j = 0; j < 3; j++)
                if (j != idx && vals[j] != UINT32_MAX)
                    T_FAIL("select wrote case %d, chose %d", j, idx);
        }
        }
        if (rc == 0) {
            cs_record(m, v);
        } else {
            if (rc != -ECANCELED && rc != -ETIMEDOUT && rc != -EAGAIN)
                T_FAIL("receive returned %d", rc);
            if (v != UINT32_MAX)
                T_FAIL("a failed receive (%d) wrote %u", rc, v);
        }
        cs_op_done(m, rc);
        if (rc == -ECANCELED || weft_cancelled())
            return 0;
        if (rc == -EAGAIN)
            weft_yield();
    }
}

static int cs_root(void *arg)
{
    struct cs *m = arg;
    uint64_t rng = m->seed;
    for (int round = 0; round < m->rounds; round++) {
        m->threshold = 1 + (long)(rnd(&rng) % (3 * CS_SENDERS * CS_QUOTA));
        atomic_store(&m->ops, 0);
        atomic_store(&m->senders_left, CS_SENDERS);
        weft_scope_opts o = {.policy = WEFT_COLLECT,
                             .deadline = weft_now() + m->round_budget};
        ASSERT_EQ(weft_scope_open(&m->round, &o), 0);
        for (int i = 0; i < CS_SENDERS + CS_RECVERS; i++) {
            struct cs_task *t = &m->tasks[i];
            *t = (struct cs_task){
                m, (uint32_t)((round * CS_SENDERS + i) * CS_QUOTA), rnd(&rng)};
            /* The round may end before every task is spawned. */
            int r = weft_spawn(m->round,
                               i < CS_SENDERS ? cs_sender : cs_receiver, t);
            ASSERT(r >= 0 || r == -ECANCELED);
        }
        int rc = weft_scope_join(m->round);
        ASSERT(rc == -ECANCELED || rc == -ETIMEDOUT);
        ASSERT_EQ(weft_scope_free(m->round), 0);
    }
    /* Close everything and take what is still buffered. */
    for (int k = 0; k < CS_CHANS; k++) {
        ASSERT_EQ(weft_chan_close(m->ch[k]), 0);
        uint32_t v;
        int rc;
        while ((rc = weft_chan_try_recv(m->ch[k], &v)) == 0)
            cs_record(m, v);
        ASSERT_EQ(rc, -EPIPE);
    }
    return 0;
}

static void run_cancel_stress(int workers, weft_clock_kind clock, uint64_t seed)
{
    struct cs *m = calloc(1, sizeof *m);
    ASSERT(m != NULL);
    m->rounds = (int)T_SCALE(200);
    m->seed = seed;
    if (clock == WEFT_CLOCK_VIRTUAL) {
        m->max_wait = 50 * WEFT_USEC;
        m->round_budget = WEFT_SEC;
    } else {
        m->max_wait = 50 * WEFT_USEC;
        m->round_budget = 20 * WEFT_MSEC;
    }
    m->nvalues = (uint32_t)(m->rounds * CS_SENDERS * CS_QUOTA);
    m->delivered = calloc(m->nvalues, 1);
    m->received = calloc(m->nvalues, 1);
    ASSERT(m->delivered && m->received);
    for (int k = 0; k < CS_CHANS; k++)
        m->ch[k] = mkchan(sizeof(uint32_t), cs_caps[k]);
    ASSERT_EQ(t_run(workers, clock, seed, cs_root, m), 0);
    long delivered = 0;
    for (uint32_t v = 0; v < m->nvalues; v++) {
        int got = atomic_load(&m->received[v]);
        if (got != m->delivered[v])
            T_FAIL("value %u: send %s, received %d times", v,
                   m->delivered[v] ? "returned 0" : "failed", got);
        delivered += got;
    }
    ASSERT_EQ(delivered, atomic_load(&m->sent));
    ASSERT_EQ(delivered, atomic_load(&m->got));
    ASSERT(atomic_load(&m->sent) > 0);
    ASSERT(atomic_load(&m->cancelled) > 0);
    for (int k = 0; k < CS_CHANS; k++)
        ASSERT_EQ(weft_chan_unref(m->ch[k]), 0);
    free(m->delivered);
    free((void *)m->received);
    free(m);
}

TEST(cancel_and_timeout_lose_nothing_virtual)
{
    for (uint64_t seed = 1; seed <= 3; seed++)
        run_cancel_stress(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed));
}

TEST(cancel_and_timeout_lose_nothing_2_workers)
{
    run_cancel_stress(2, WEFT_CLOCK_MONOTONIC, T_SEED(11));
}

TEST(cancel_and_timeout_lose_nothing_4_workers)
{
    run_cancel_stress(4, WEFT_CLOCK_MONOTONIC, T_SEED(12));
}

/* In a cancelled scope the blocking calls return -ECANCELED even when they
 * would not have to wait (level-triggered, as in Trio), and move nothing;
 * the try variants still work. */
static int level_root(void *arg)
{
    (void)arg;
    weft_chan *c = mkchan(sizeof(int), 2);
    fill(c, 1); /* room to send, and a value to receive */
    weft_chan *cl = mkchan(sizeof(int), 1);
    ASSERT_EQ(weft_chan_close(cl), 0);
    weft_scope *s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    weft_time t0 = weft_now();
    int v = 9, out = -1;
    weft_case cs[2] = {{.chan = c, .op = WEFT_OP_RECV, .elem = &out, .rc = 0},
                       {.chan = c, .op = WEFT_OP_SEND, .elem = &v, .rc = 0}};
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(weft_chan_send(c, &v), -ECANCELED);
        ASSERT_EQ(weft_chan_send_until(c, &v, t0 + WEFT_SEC), -ECANCELED);
        ASSERT_EQ(weft_chan_recv(c, &out), -ECANCELED);
        ASSERT_EQ(weft_chan_recv_until(c, &out, WEFT_NEVER), -ECANCELED);
        ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), -ECANCELED);
        ASSERT_EQ(weft_chan_len(c), 1);
        ASSERT_EQ(out, -1);
    }
    ASSERT_EQ(weft_now(), t0);
    ASSERT_EQ(weft_try_select(cs, 1), 0); /* not a cancellation point */
    ASSERT_EQ(out, 0);
    ASSERT_EQ(weft_chan_try_send(c, &v), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_chan_recv(c, &out), 0);
    ASSERT_EQ(out, 9);
    ASSERT_EQ(weft_chan_unref(c), 0);
    ASSERT_EQ(weft_chan_unref(cl), 0);
    return 0;
}

TEST(cancelled_scope_blocking_calls_return_ecanceled)
{
    ASSERT_EQ(t_run_virtual(1, level_root, NULL), 0);
}

/* ---- reference counting ------------------------------------------------- */

TEST(refcount_last_unref_frees)
{
    weft_chan *c = mkchan(sizeof(int), 4);
    ASSERT(weft_chan_ref(c) == c);
    ASSERT(weft_chan_ref(c) == c);
    int v = 1, out = -1;
    ASSERT_EQ(weft_chan_try_send(c, &v), 0);
    ASSERT_EQ(weft_chan_unref(c), 0);
    ASSERT_EQ(weft_chan_unref(c), 0);
    /* Still alive: one reference is left (ASan would see a use after
     * free otherwise). */
    ASSERT_EQ(weft_chan_len(c), 1);
    ASSERT_EQ(weft_chan_try_recv(c, &out), 0);
    ASSERT_EQ(out, 1);
    ASSERT_EQ(weft_chan_unref(c), 0);
    ASSERT_EQ(weft_chan_unref(NULL), -EINVAL);

    /* Freed with values (large ones) still buffered: LSan sees any leak. */
    c = mkchan(65536, 3);
    unsigned char *big = calloc(1, 65536);
    ASSERT(big != NULL);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(weft_chan_try_send(c, big), 0);
    free(big);
    ASSERT_EQ(weft_chan_unref(c), 0);

    /* Freed closed, and freed with nothing ever sent. */
    c = mkchan(8, 0);
    ASSERT_EQ(weft_chan_close(c), 0);
    ASSERT_EQ(weft_chan_unref(c), 0);
    c = mkchan(1, 1000);
    ASSERT_EQ(weft_chan_unref(c), 0);
}

/* Each task holds its own reference and drops it when done; the creator
 * drops its own first. */
static int rc_sender(void *arg)
{
    weft_chan *c = arg;
    for (int i = 0; i < 1000; i++)
        ASSERT_EQ(weft_chan_send(c, &i), 0);
    ASSERT_EQ(weft_chan_unref(c), 0);
    return 0;
}

static atomic_long rc_received;

static int rc_receiver(void *arg)
{
    weft_chan *c = arg;
    for (int i = 0; i < 1000; i++) {
        int out;
        ASSERT_EQ(weft_chan_recv(c, &out), 0);
        ASSERT(out >= 0 && out < 1000);
        atomic_fetch_add(&rc_received, 1);
    }
    ASSERT_EQ(weft_chan_unref(c), 0);
    return 0;
}

static int rc_churn(void *arg)
{
    weft_chan *c = arg;
    for (int i = 0; i < 20000; i++) {
        ASSERT(weft_chan_ref(c) == c);
        if (i % 64 == 0)
            weft_yield();
        ASSERT_EQ(weft_chan_unref(c), 0);
    }
    ASSERT_EQ(weft_chan_unref(c), 0);
    return 0;
}

static int rc_root(void *arg)
{
    (void)arg;
    weft_chan *c = mkchan(sizeof(int), 0);
    weft_scope *s = scope_open();
    for (int i = 0; i < 4; i++) {
        spawn(rc_sender, weft_chan_ref(c));
        spawn(rc_receiver, weft_chan_ref(c));
        spawn(rc_churn, weft_chan_ref(c));
    }
    ASSERT_EQ(weft_chan_unref(c), 0); /* the tasks keep it alive */
    scope_end(s);
    ASSERT_EQ(atomic_load(&rc_received), 4000);
    return 0;
}

TEST(refcount_shared_between_tasks)
{
    ASSERT_EQ(t_run_mono(4, rc_root, NULL), 0);
}

/* ---- argument errors and calls outside a task --------------------------- */

TEST(argument_errors)
{
    weft_chan *c = NULL;
    ASSERT_EQ(weft_chan_new(NULL, 4, 1), -EINVAL);
    ASSERT_EQ(weft_chan_new(&c, 0, 1), -EINVAL);
    ASSERT_EQ(weft_chan_new(&c, 0, 0), -EINVAL);
    ASSERT_EQ(weft_chan_new(&c, 65537, 1), -EINVAL);
    ASSERT_EQ(weft_chan_new(&c, (size_t)1 << 40, 0), -EINVAL);
    ASSERT_EQ(weft_chan_new(&c, 65536, 0), 0);
    ASSERT_EQ(weft_chan_cap(c), 0);
    ASSERT_EQ(weft_chan_unref(c), 0);
    ASSERT_EQ(weft_chan_new(&c, 1, 1), 0);
    ASSERT_EQ(weft_chan_unref(c), 0);

    int v = 0;
    ASSERT_EQ(weft_chan_try_send(NULL, &v), -EINVAL);
    ASSERT_EQ(weft_chan_try_recv(NULL, &v), -EINVAL);
    ASSERT_EQ(weft_chan_close(NULL), -EINVAL);
    ASSERT_EQ(weft_chan_unref(NULL), -EINVAL);
}

/* Blocking calls are for tasks only, even when they would not block. */
TEST(blocking_calls_outside_a_task_eperm)
{
    weft_chan *c = mkchan(sizeof(int), 2);
    int v = 3, out = -1;
    ASSERT_EQ(weft_chan_send(c, &v), -EPERM);
    ASSERT_EQ(weft_chan_send_until(c, &v, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_chan_len(c), 0);
    ASSERT_EQ(weft_chan_try_send(c, &v), 0);
    ASSERT_EQ(weft_chan_recv(c, &out), -EPERM);
    ASSERT_EQ(weft_chan_recv_until(c, &out, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_chan_len(c), 1);
    ASSERT_EQ(out, -1);
    weft_case cs[1] = {{.chan = c, .op = WEFT_OP_RECV, .elem = &out, .rc = 0}};
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_chan_len(c), 1);
    ASSERT_EQ(weft_chan_try_recv(c, &out), 0);
    ASSERT_EQ(out, 3);
    ASSERT_EQ(weft_chan_unref(c), 0);
}

static int errors_in_task_root(void *arg)
{
    (void)arg;
    int v = 1;
    weft_chan *c = mkchan(sizeof(int), 1);
    ASSERT_EQ(weft_chan_send(NULL, &v), -EINVAL);
    ASSERT_EQ(weft_chan_recv(NULL, &v), -EINVAL);
    ASSERT_EQ(weft_chan_send_until(NULL, &v, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_chan_recv_until(NULL, &v, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_select(NULL, 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_try_select(NULL, 1), -EINVAL);
    weft_case cs[2] = {{.chan = c, .op = WEFT_OP_SEND, .elem = &v, .rc = 0},
                       {.chan = c, .op = WEFT_OP_RECV, .elem = &v, .rc = 0}};
    ASSERT_EQ(weft_select(cs, -1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_try_select(cs, -1), -EINVAL);
    weft_case bad[1] = {{.chan = c, .op = (weft_op)99, .elem = &v}};
    ASSERT_EQ(weft_select(bad, 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_try_select(bad, 1), -EINVAL);
    ASSERT_EQ(weft_chan_len(c), 0);
    ASSERT_EQ(weft_now(), 0);
    ASSERT_EQ(weft_chan_unref(c), 0);
    return 0;
}

TEST(argument_errors_in_a_task)
{
    ASSERT_EQ(t_run_virtual(1, errors_in_task_root, NULL), 0);
}

/* Freed channels do not pile up: a debug build keeps only the last 1024
 * husks (so a call on a channel just freed is -EINVAL), and frees older
 * ones; before, it kept every channel it ever freed. */
TEST(freed_channels_do_not_pile_up)
{
    weft_chan *c;
    ASSERT_EQ(weft_chan_new(&c, sizeof(int), 4), 0);
    ASSERT_EQ(weft_chan_unref(c), 0);
#if !defined(NDEBUG) && !defined(WEFT_ASAN)
    ASSERT_EQ(weft_chan_unref(c), -EINVAL);
    ASSERT_EQ(weft_chan_close(c), -EINVAL);
#endif
    struct mallinfo2 before = mallinfo2();
    for (int i = 0; i < 100000; i++) {
        ASSERT_EQ(weft_chan_new(&c, sizeof(int), 4), 0);
        ASSERT_EQ(weft_chan_unref(c), 0);
    }
    struct mallinfo2 after = mallinfo2();
    ASSERT(after.uordblks < before.uordblks + (1u << 20));
}
