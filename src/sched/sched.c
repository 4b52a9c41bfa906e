/* SPDX-License-Identifier: MIT */
/*
 * Workers, run queues, stealing, park and wake.
 *
 * How a worker chooses what runs next (pick):
 *   1. runnext: a task woken by the task that is running now (Go's runnext:
 *      a ping-pong pair runs back to back); at most RUNNEXT_STREAK times
 *      in a row, so such a pair cannot starve the rest.
 *   2. runq: woken tasks, FIFO.
 *   3. the deque of tasks not started yet, newest first: a node's newest
 *      child runs next, so trees (skynet, recursive fan-out) are walked
 *      depth first and a few stacks are live at a time, not millions.
 *      Idle workers steal the oldest half from the other end.
 *   4. the inbox: tasks woken by other threads (a lock-free stack).
 *   5. timers that are due (the clock is read only if a timer is armed).
 *   6. yieldq: tasks that called weft_yield, so yielding lets everything
 *      else run first.
 * Every FAIR_EVERY decisions the order starts with the inbox, timers,
 * yieldq and the deque instead, so nothing waits forever; and every
 * DEQUE_EVERY decisions a task not started yet goes first. So tasks
 * spawned together start soon even while woken tasks keep the runq busy,
 * before their age invites a thief: tasks that talk to each other over a
 * channel then stay on one worker (chanflow: ~45 Mmsg/s when its 8 tasks
 * share a worker, ~6 when one is stolen, as every message then crosses
 * cores; that split happened in half the runs with the deque served
 * every 61 decisions, in 1 of 8 with every 8).
 *
 * Stealing: an idle worker spins for SPIN_ROUNDS rounds (about 130 us)
 * before it sleeps, and steals half of a victim's deque if its oldest task
 * has waited STEAL_AGE of the victim's scheduling decisions (the victim
 * will not get to it soon: in a tree, that task is a whole subtree), if
 * the victim has a backlog (STEAL_BACKLOG tasks), or if it is stuck: it
 * has taken no decision and spawned nothing for STUCK_ROUNDS rounds (about
 * 130 us), and since then its thread has run STUCK_CPU_NS more on its CPU
 * clock (a long task) or sleeps in the kernel (a blocking call: /proc's
 * state), see victim_stuck. Not less: a task that sends a channel's worth
 * of values, or a few first touches of fresh stack pages (~20 us each
 * here, and spawning one task measured up to 200 us of CPU under load),
 * take that long, and stealing a task that then talks to the victim's
 * tasks across cores costs far more than the wait (chanflow split in 3 of
 * 5 runs with 44 us, in 1 of 10 with 130). And not a victim whose thread
 * is merely not running: on a loaded machine the kernel gives its core to
 * another thread for milliseconds, and an idle worker that took the
 * tasks it had just spawned split the pairs among them (an actor and its
 * client: every ask then crosses cores, ~30x slower) in 2 of 15 runs of
 * ask2.
 * Looking is not free: each look reads cache lines the victim keeps
 * writing (its deque ends, its tick), and each costs the victim a miss,
 * so a thief looks every ~11 us rather than every few (measured: spawn
 * on two workers 90 ns/task when looking every 2.7 us, 72 at 11 us).
 * A victim that is getting through its queue keeps it: moving a task's
 * cache lines to another core costs more than running a short task where
 * it was spawned (a cache-line transfer is ~250 ns on the 2-core VMs we measure
 * on, a short task's whole life ~60 ns), and a worker stalled for a page
 * fault or a syscall is not worth robbing.
 *
 * A task switches straight to the next task (no detour through the
 * scheduler's stack): one context switch per park or yield. Only when
 * nothing is runnable does it switch to the worker's own context, which
 * idles as the runtime's clock has it (clock.h: the monotonic clock spins
 * and steals, then sleeps until the next timer; the virtual one moves
 * time when every worker is idle), through the sleep below.
 *
 * What the scheduler does not know: scopes and handles (spawn.c
 * registers a task in its scope, then hands it over with
 * weft__task_submit; at a task's exit the runtime's exit hook, the scope
 * layer's, does the rest), descriptors (the worker's poller, poller.h,
 * and the pending hook, weft__pending_add, say whether to poll it and
 * sleep in it), and which clock runs.
 *
 * Parking: the park word of a task holds a generation and a state. A
 * blocking primitive calls weft__park_prepare (new generation, state
 * "parked") while it still holds its own lock, publishes the token next to
 * the task in its wait list, unlocks and calls weft__park_commit. Wakers
 * (the primitive's event, the deadline timer, a cancel) race with a CAS
 * from the token to "running": exactly one wins, sets the wake code and
 * queues the task on its own worker (locally, or through the inbox). A
 * token from an older park never matches, so a late waker is harmless.
 *
 * Sleeping: an idle worker announces itself (sleeping = its mode,
 * nsleeping++), looks once more for work, and only then waits on a futex
 * (or in its poller, while its tasks wait for descriptors). Whoever makes
 * work (an inbox push, a spawn) stores first and checks the flag second;
 * both sides use seq_cst so at least one sees the other.
 *
 * Wakes from outside: a thread that is none of the runtime's workers (a
 * plain thread settling a future, the blocking pool) pushes to the inbox
 * and then notifies; in between the task may run and end the runtime, so
 * such a thread counts itself on the worker for that span, and weft_run
 * waits for the count before freeing (inbox_push_foreign).
 */
#include "context/ctx.h"
#include "sched/poller.h"
#include "sched/scheduler.h"
#include "timer/timer.h"
#include "util/fault.h"
#include "util/runlog.h"
#include "util/tsan.h"

#if defined(WEFT_ASAN)
#include <sanitizer/asan_interface.h>
#endif

#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- context switches, told to the sanitizers ---- */

#if defined(WEFT_ASAN)
/* The stack a target context runs on, for ASan. */
static inline void ctx_target_stack(weft_worker *w, weft_task *to,
                                    const void **lo, size_t *size)
{
    if (to) {
        *lo = to->stack_lo;
        *size = (size_t)(to->stack_hi - to->stack_lo);
    } else {
        *lo = w->stack_lo;
        *size = w->stack_size;
    }
}
#endif

/* Saves `from` (a task, or the scheduler if NULL) and resumes `to` (a task,
 * or the scheduler if NULL). Returns when from is resumed; or, `dying`
 * (from will never run again), never, and saves nothing of from. */
static inline __attribute__((always_inline)) void
ctx_switch(weft_worker *w, weft_task *from, weft_task *to, bool dying)
{
    weft__ctx *fc = from ? &from->ctx : &w->sched_ctx;
    weft__ctx *tc = to ? &to->ctx : &w->sched_ctx;
    /* A compact task's stack given back while it was parked: copied in
     * again, here on the stack we leave (stack.c). */
    if (to && WEFT_UNLIKELY(to->flags & (TASK_PENDING | TASK_RELEASED)))
        weft__stack_resume(w, to);
#if defined(WEFT_ASAN)
    void *fake = NULL;
    const void *lo;
    size_t size;
    ctx_target_stack(w, to, &lo, &size);
    __sanitizer_start_switch_fiber(dying ? NULL : &fake, lo, size);
#else
    WEFT_UNUSED(dying);
#endif
#if defined(WEFT_TSAN)
    __tsan_switch_to_fiber(to ? to->tsan_fiber : w->tsan_fiber, 0);
#endif
#if defined(WEFT__ASSERTS)
    /* No task runs on two workers at once: `to` is on no CPU, and `from`
     * is off this one once the other side of the switch says so
     * (finish_switch). */
    if (to)
        WEFT_ASSERT_MSG(
            atomic_exchange_explicit(&to->on_cpu, 1, memory_order_relaxed) == 0,
            "a task resumed while it runs or switches away");
    w->off_cpu = from;
#endif
    if (dying) /* a constant where inlined */
        ctx_exit(tc);
    ctx_jump(fc, tc);
#if defined(WEFT_ASAN)
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

#define RUNNEXT_STREAK 16
#define FAIR_EVERY 61
#define SPAWN_BUDGET                                                           \
    32 /* spawns before a spawner lets others run: less                        \
        * than FAIR_EVERY, so its children keep up */
#define SPIN_ROUNDS 12
#define SPIN_PAUSES 512 /* pauses between looks: ~11 us on AMD EPYC */
#define STUCK_ROUNDS 12
#define STUCK_CPU_NS (250 * 1000) /* and this much CPU time after them */
#define STEAL_BACKLOG 64
#define STEAL_AGE 128
/* How long an idle worker that found tasks queued only on workers that
 * keep running them sleeps before it looks again (weft__nap_deferring):
 * it used to spin for as long as they had any queued, a whole core. */
#define DEFER_NS (500 * WEFT_USEC)
#define DEQUE_EVERY 8
#define IO_SPIN_ROUNDS 1 /* idle rounds while tasks wait for descriptors */
#define IO_POLL_NS (20 * WEFT_USEC) /* poller polled before sleeping in it */
#define DEQUE_INITIAL 256
/* Moves (see "moves" below): parks in a row woken from one other worker
 * before a movable task goes there; an idle worker asks for a share of
 * the yielded movable tasks of a worker that has at least SHARE_MIN. */
#define MOVE_STREAK 16
#define SHARE_MIN 2

WEFT_TLS weft_worker *weft__tl_worker;

/* ---- futex ---- */

static void futex_wait(atomic_int *addr, int val, int64_t timeout_ns)
{
    struct timespec ts, *tp = NULL;
    if (timeout_ns != WEFT_NEVER) {
        if (timeout_ns < 0)
            timeout_ns = 0;
        ts.tv_sec = timeout_ns / WEFT_SEC;
        ts.tv_nsec = timeout_ns % WEFT_SEC;
        tp = &ts;
    }
    syscall(SYS_futex, (int *)addr, FUTEX_WAIT_PRIVATE, val, tp, NULL, 0);
}

static void futex_wake(atomic_int *addr)
{
    syscall(SYS_futex, (int *)addr, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* ---- FIFO queues (owner only) ---- */

static inline void q_push(weft__queue *q, weft_task *t)
{
    WEFT_ASSERT_MSG(t != q->tail, "a task queued twice");
    t->next = NULL;
    if (q->tail)
        q->tail->next = t;
    else
        q->head = t;
    q->tail = t;
    st_rlx(&q->len, ld_rlx(&q->len) + 1);
}

static inline __attribute__((always_inline)) weft_task *q_pop(weft__queue *q)
{
    weft_task *t = q->head;
    if (t) {
        q->head = t->next;
        if (!q->head)
            q->tail = NULL;
        st_rlx(&q->len, ld_rlx(&q->len) - 1);
    }
    return t;
}

/* ---- Chase-Lev deque ----
 * After Le, Pop, Cohen and Zappa Nardelli, "Correct and efficient
 * work-stealing for weak memory models" (PPoPP 2013), with the fences
 * folded into seq_cst accesses of top and bottom, which ThreadSanitizer
 * understands. */

static weft__dqbuf *dq_buf_new(int64_t cap)
{
    size_t head = sizeof(weft__dqbuf) + (size_t)cap * sizeof(weft_task *);
    weft__dqbuf *b = weft__malloc(head + (size_t)cap * sizeof(atomic_uint));
    if (b) {
        b->mask = cap - 1;
        b->retired = NULL;
        b->stamp = (atomic_uint *)((char *)b + head);
    }
    return b;
}

static int dq_init(weft__deque *d)
{
    weft__dqbuf *b = dq_buf_new(DEQUE_INITIAL);
    if (!b)
        return -ENOMEM;
    atomic_init(&d->top, 0);
    atomic_init(&d->bottom, 0);
    atomic_init(&d->buf, b);
    return 0;
}

static void dq_fini(weft__deque *d)
{
    weft__dqbuf *b = ld_rlx(&d->buf);
    while (b) {
        weft__dqbuf *old = b->retired;
        free(b);
        b = old;
    }
}

/* Stores t at b, stamped, and publishes it. */
static inline __attribute__((always_inline)) void
dq_put(weft__deque *d, weft__dqbuf *buf, int64_t b, weft_task *t,
       unsigned stamp)
{
    st_rlx(&buf->a[b & buf->mask], t);
    st_rlx(&buf->stamp[b & buf->mask], stamp);
    /* Pairs with the load of nsleeping in wake_idle_worker (Dekker). */
    st_sc(&d->bottom, b + 1);
}

/* dq_push into a full deque: its tasks [top, b) are copied into a buffer
 * twice as large first. Thieves may still read the old one, so it is
 * kept (retired) until the deque dies. Cold and out of line, and the
 * push's last call: the push stays a leaf that saves no register. */
WEFT_COLD static int dq_push_grow(weft__deque *d, weft__dqbuf *buf, int64_t top,
                                  int64_t b, weft_task *t, unsigned stamp)
{
    weft__dqbuf *nb = dq_buf_new((buf->mask + 1) * 2);
    if (!nb)
        return -ENOMEM;
    for (int64_t i = top; i < b; i++) {
        st_rlx(&nb->a[i & nb->mask], ld_rlx(&buf->a[i & buf->mask]));
        st_rlx(&nb->stamp[i & nb->mask], ld_rlx(&buf->stamp[i & buf->mask]));
    }
    nb->retired = buf;
    st_rel(&d->buf, nb);
    dq_put(d, nb, b, t, stamp);
    return 0;
}

static int dq_push(weft__deque *d, weft_task *t, unsigned stamp)
{
    int64_t b = ld_rlx(&d->bottom);
    int64_t top = ld_acq(&d->top);
    weft__dqbuf *buf = ld_rlx(&d->buf);
    if (WEFT_UNLIKELY(b - top > buf->mask))
        return dq_push_grow(d, buf, top, b, t, stamp);
    dq_put(d, buf, b, t, stamp);
    return 0;
}

static weft_task *dq_pop(weft__deque *d)
{
    /* Cheap emptiness test first: bottom is ours, and a stale top can only
     * make the deque look fuller than it is, which the full path handles. */
    if (ld_rlx(&d->bottom) <= ld_rlx(&d->top))
        return NULL;
    int64_t b = ld_rlx(&d->bottom) - 1;
    weft__dqbuf *buf = ld_rlx(&d->buf);
    st_sc(&d->bottom, b);
    int64_t top = ld_sc(&d->top);
    if (top > b) {
        st_rlx(&d->bottom, b + 1);
        return NULL;
    }
    weft_task *t = ld_rlx(&buf->a[b & buf->mask]);
    if (top == b) { /* the last one: race the thieves for it */
        if (!cas_sc(&d->top, &top, top + 1))
            t = NULL;
        st_rlx(&d->bottom, b + 1);
    }
    return t;
}

/* Returns a task, or NULL if empty; *lost is set when a race was lost. */
static weft_task *dq_steal(weft__deque *d, bool *lost)
{
    int64_t top = ld_sc(&d->top);
    int64_t b = ld_sc(&d->bottom);
    if (top >= b)
        return NULL;
    weft__dqbuf *buf = ld_acq(&d->buf);
    weft_task *t = ld_rlx(&buf->a[top & buf->mask]);
    if (!cas_sc(&d->top, &top, top + 1)) {
        *lost = true;
        return NULL;
    }
    return t;
}

/* How many of the owner's scheduling decisions ago the oldest task was
 * pushed (0 if empty). Racy by nature: only a hint for thieves. */
static unsigned dq_oldest_age(weft__deque *d, unsigned now_tick)
{
    int64_t top = ld_acq(&d->top);
    if (top >= ld_acq(&d->bottom))
        return 0;
    weft__dqbuf *buf = ld_acq(&d->buf);
    return now_tick - ld_rlx(&buf->stamp[top & buf->mask]);
}

static inline bool dq_nonempty(weft__deque *d)
{
    return ld_sc(&d->top) < ld_sc(&d->bottom);
}

/* Whether v's queue of avail tasks is worth taking whatever v does: long
 * (STEAL_BACKLOG), or its oldest task waited STEAL_AGE of v's picks. */
static bool dq_worth_stealing(weft_worker *v, int64_t avail)
{
    return avail >= STEAL_BACKLOG ||
           dq_oldest_age(&v->deque, ld_rlx(&v->tick)) >= STEAL_AGE;
}

/* ---- making tasks runnable ---- */

static void ready_push(weft_worker *w, weft_task *t)
{
    if (w->nready == w->capready) {
        size_t cap = w->capready ? w->capready * 2 : 1024;
        /* Plain realloc, not a fault site: a wake has no way to fail, so
         * running out of memory here ends the process. */
        weft_task **n = realloc(w->ready, cap * sizeof(*n));
        if (!n)
            weft__fatal("weft: out of memory growing the seeded run queue");
        w->ready = n;
        w->capready = cap;
    }
    w->ready[w->nready++] = t;
}

/* Queues t on its own worker w, from w's thread. next: t was woken by the
 * running task and should run right after it; unless it is the task that
 * ran just before (two tasks taking turns: warm), the top of its stack is
 * asked for now, to be in cache by the switch, which is soon (a ring of
 * 1,000 actors: 0.87x the time a hop; the two tasks of pingpong pay one
 * compare). Inlined always: gcc stopped inlining it into wake_finish once
 * that had the instrument's branch (callgrind: +18 instructions a
 * wake-up). usual: w->unusual is known false (see pick_inner). */
static inline __attribute__((always_inline)) void
make_ready_local_as(weft_worker *w, weft_task *t, bool next, bool usual)
{
    if (!usual && w->rt->seeded) {
        ready_push(w, t);
    } else if (next) {
        if (w->runnext)
            q_push(&w->runq, w->runnext);
        w->runnext = t;
        if (t != w->prev)
            weft__ctx_prefetch(&t->ctx);
    } else {
        q_push(&w->runq, t);
    }
}

/* make_ready_local_as on any worker. */
static inline __attribute__((always_inline)) void
make_ready_local(weft_worker *w, weft_task *t, bool next)
{
    make_ready_local_as(w, t, next, false);
}

void weft__make_ready(weft_worker *w, weft_task *t)
{
    make_ready_local(w, t, false);
}

static void inbox_push(weft_worker *w, weft_task *t)
{
    weft_task *old = ld_rlx(&w->inbox);
    do {
        t->next = old;
    } while (!atomic_compare_exchange_weak_explicit(
        &w->inbox, &old, t, memory_order_seq_cst, memory_order_relaxed));
    weft__worker_notify(w);
}

/* inbox_push by a thread that is none of w's runtime's workers: a plain
 * thread settling a future, the blocking pool, a signal thread cancelling,
 * another runtime's task. Once t is in the inbox it may run, return and
 * end the runtime, and weft_run then frees w and the runtime, perhaps
 * while this thread is still in the notify. The runtime's own workers are
 * joined before that; this thread is not, so it counts itself on w
 * before it publishes t and uncounts itself as its last touch of the
 * runtime, and weft_run waits for the count to drop to 0
 * (weft__worker_quiesce). Wakes between workers of one runtime do not
 * pay for it. */
static __attribute__((noinline)) void inbox_push_foreign(weft_worker *w,
                                                         weft_task *t)
{
    /* Relaxed: the push's release publishes it with t, and weft_run only
     * looks once t has run (through the inbox's acquire) and ended. */
    add_rlx(&w->wakers, 1);
    inbox_push(w, t);
    /* The last touch: weft_run may free w as soon as it reads 0. */
    add_acq_rel(&w->wakers, -1);
}

void weft__worker_quiesce(weft_worker *w)
{
    /* Pairs with the waker's decrement: its notify happened before. */
    while (ld_acq(&w->wakers) != 0)
        sched_yield();
}

/* ---- moves ----
 * A task that may move (weft_task.mobile: opted in with
 * weft_spawn_opts.movable or its scope's, or an actor waiting for its
 * next message) changes workers only while it is runnable and not
 * running, handed over by the worker that holds it: that worker owns its
 * saved context, its timer and its queue links, and the hand-over is an
 * inbox push (release), which the new worker's drain acquires. Two ways:
 *
 * - Toward its traffic (Go's runnext and Tokio's LIFO slot put a woken
 *   task on the waker's processor at every wake; here with hysteresis):
 *   a waker on another worker of the runtime counts the parks in a row it
 *   woke (the park's generation says "in a row": one woken by anyone else
 *   in between breaks the streak), and at MOVE_STREAK it asks for the
 *   task (move_to). The task's worker sees the request when its inbox
 *   gives it the task (it is off every CPU then, unless it is the very
 *   task switching away, which stays) and forwards it to the waker's
 *   inbox. So a pair that talks ends up on one worker after a few round
 *   trips, and a task woken from everywhere stays where it is: a streak
 *   of 16 from one worker among two equal ones comes once in ~65,000
 *   wakes.
 * - Toward idle workers: an idle worker that finds nothing to steal asks
 *   a worker with SHARE_MIN or more yielded tasks for a share (share_to);
 *   that worker, at its next fair round, hands half of its yielded
 *   movable tasks over. Only yielded ones: a task that yields computes,
 *   and has no conversation to split; a woken one goes where its waker
 *   is, as above.
 *
 * A task tied to its worker (anchor: a scope deadline on the wheel, work
 * pending there) stays. Its park's timer is on the old wheel: disarmed
 * there before the hand-over (it has been woken; its timer would find
 * nothing to do). */

/* Hands t, runnable, off every CPU and held by w (not in w's queues), to
 * worker `to`. */
static void move_out(weft_worker *w, weft_task *t, weft_worker *to)
{
    WEFT_ASSERT_MSG(t->mobile & (WEFT__MOBILE_TASK | WEFT__MOBILE_IDLE),
                    "moving a task that may not move");
    if (weft__timer_armed(&t->timer))
        weft__wheel_disarm(&w->wheel, &t->timer);
    t->worker = to;
    weft__stat_add(&w->st.moved, 1);
    inbox_push(to, t);
}

/* Whether w, which holds t runnable, may hand it over now: t may move,
 * is not the task switching away on w, and nothing ties it to w. A
 * compact task never moves (its stack is noted in its worker's ring, or
 * given back and copied in, by that worker: stack.c); an actor's task
 * in a compact scope is one. */
static bool movable_now(weft_worker *w, weft_task *t)
{
    return t != ld_rlx(&w->cur) && t->anchor == 0 &&
           (t->mobile & (WEFT__MOBILE_TASK | WEFT__MOBILE_IDLE)) &&
           !(t->flags & TASK_COMPACT);
}

/* t came out of w's inbox with a waker's request (move_to). */
WEFT_COLD static void move_asked(weft_worker *w, weft_task *t)
{
    weft_worker *to = t->move_to;
    t->move_to = NULL;
    if (to != w && movable_now(w, t))
        move_out(w, t, to);
    else
        make_ready_local(w, t, false);
}

/* The waker w (a worker of t's runtime, not t's) claimed t's park: counts
 * the streak, and asks for t at MOVE_STREAK. */
WEFT_COLD static void move_hint(weft_worker *w, weft_task *t)
{
    uint64_t gen = ld_rlx(&t->park) >> 2;
    if (t->far_w == w->id && gen == t->far_gen + 1) {
        if (++t->streak >= MOVE_STREAK) {
            t->streak = 0;
            t->move_to = w;
        }
    } else {
        t->far_w = w->id;
        t->streak = 1;
    }
    t->far_gen = gen;
}

/* Serves an idle worker's request (share_to): hands it every other
 * movable task of w's yield queue. */
WEFT_COLD static void share(weft_worker *w, int to_id)
{
    st_rlx(&w->share_to, 0);
    weft_worker *to = &w->rt->workers[to_id];
    weft__queue keep = {0};
    atomic_init(&keep.len, 0);
    bool give = true;
    weft_task *t;
    while ((t = q_pop(&w->yieldq)) != NULL) {
        if (give && movable_now(w, t)) {
            move_out(w, t, to);
            give = false;
        } else {
            if (t->mobile)
                give = true;
            q_push(&keep, t);
        }
    }
    w->yieldq.head = keep.head;
    w->yieldq.tail = keep.tail;
    st_rlx(&w->yieldq.len, ld_rlx(&keep.len));
}

/* Moves the inbox into the run queue, oldest first. */
static bool inbox_drain(weft_worker *w)
{
    if (!ld_rlx(&w->inbox))
        return false;
    weft_task *list = xchg_acq_rel(&w->inbox, NULL);
    weft_task *rev = NULL;
    uint64_t n_in = 0;
    while (list) {
        weft_task *n = list->next;
        list->next = rev;
        rev = list;
        list = n;
        n_in++;
    }
    weft__stat_add(&w->st.inbox, n_in);
    while (rev) {
        weft_task *n = rev->next;
        if (WEFT_UNLIKELY(rev->move_to != NULL))
            move_asked(w, rev);
        else
            make_ready_local(w, rev, false);
        rev = n;
    }
    return true;
}

/* How an idle worker sleeps: on its futex, or (when its tasks wait for
 * descriptors) in its poller, which the poller's wake interrupts. */
enum { SLEEP_NONE = 0, SLEEP_FUTEX = 1, SLEEP_POLLER = 2 };

void weft__wake_sleeper(weft_worker *w)
{
    /* Pairs with the sleeper's store of `sleeping` (Dekker). */
    if (!ld_sc(&w->sleeping))
        return;
    int was = xchg_sc(&w->sleeping, SLEEP_NONE);
    if (was == SLEEP_FUTEX)
        futex_wake(&w->sleeping);
    else if (was == SLEEP_POLLER)
        weft__io_wake(w);
}

/* Sleeps until woken or `timeout` ns pass (WEFT_NEVER: no limit), the
 * caller having announced it and checked for work. Returns true if the
 * poller reported events (dispatched already). */
bool weft__sleep(weft_worker *w, int mode, int64_t timeout)
{
    if (mode == SLEEP_POLLER)
        return weft__io_poll(w, timeout) > 0;
    futex_wait(&w->sleeping, SLEEP_FUTEX, timeout);
    return false;
}

void weft__worker_notify(weft_worker *w)
{
    const weft__clock_ops *c = w->rt->clock_ops;
    /* A wake-up can cost its waker hundreds of microseconds of CPU in the
     * kernel on a loaded VM (measured: 460 us for one futex wake): that
     * is the runtime's own work, not a long task, so thieves are told. */
    weft_worker *me = weft__tl_worker;
    if (me)
        st_rlx(&me->notifying, 1);
    if (WEFT_UNLIKELY(c->unidle != NULL))
        c->unidle(w);
    weft__wake_sleeper(w);
    if (me)
        st_rlx(&me->notifying, 0);
}

bool weft__wake_claim(weft_task *t, uint64_t token)
{
    if (PARK_STATE(token) == PARK_RUNNING)
        return false;
    uint64_t expected = token;
    return cas_sc(&t->park, &expected, token & ~(uint64_t)3);
}

/* The lag histogram's sample: one wake in WEFT__LAG_EVERY by a worker
 * stamps the task with the real time; the worker that runs it next
 * records the delay (pick). Not the clock at every wake and run:
 * clock_gettime measured 110 to 140 ns on the shared 2-core VM we build
 * on, a pingpong round trip is 60. Wakes by threads that are no worker
 * (the blocking pool's) are not sampled. The wake's instrument hook and
 * the sample share one countdown (wake_countdown): per wake, a decrement
 * and a predictable branch, and the slow path (wake_watch) every wake
 * with an instrument, every WEFT__LAG_EVERY without. */
static inline bool wake_due(weft_worker *w)
{
    if (!WEFT__STATS)
        return WEFT_UNLIKELY(w->instr != NULL);
    return WEFT_UNLIKELY(--w->wake_countdown == 0);
}

/* ---- instrument hooks: the calls (scheduler.h) ---- */

/* The task w runs that caused a wake made now, or NULL: none, or the
 * scheduler at work between tasks (a timer, the poller's events) while
 * the task it switches away from is parking or leaving. */
static weft_task *instr_waker(weft_worker *w, weft_runtime *rt, bool timer)
{
    if (!w || w->rt != rt || timer || !w->cur || (w->dead == w->cur))
        return NULL;
    return PARK_STATE(ld_rlx(&w->cur->park)) == PARK_RUNNING ? w->cur : NULL;
}

WEFT_COLD static void instr_wake(const weft_instrument *in, weft_task *t,
                                 weft_task *by, int code)
{
    if (!in->wake)
        return;
    weft_task_info ti, bi;
    weft__task_info(t, &ti);
    if (by)
        weft__task_info(by, &bi);
    in->wake(in->ctx, &ti, by ? &bi : NULL, code);
}

WEFT_COLD static void instr_run(const weft_instrument *in, weft_task *t)
{
    if (!in->run)
        return;
    weft_task_info ti;
    weft__task_info(t, &ti);
    in->run(in->ctx, &ti);
}

WEFT_COLD static void instr_exit(const weft_instrument *in, weft_task *t)
{
    if (!in->exit)
        return;
    weft_task_info ti;
    weft__task_info(t, &ti);
    in->exit(in->ctx, &ti, t->status);
}

WEFT_COLD void weft__instr_park(const weft_instrument *in, weft_task *t,
                                int kind, const void *obj)
{
    if (!in->park)
        return;
    weft_task_info ti;
    weft__task_info(t, &ti);
    in->park(in->ctx, &ti, (weft_wait_kind)kind,
             kind == WEFT_WAIT_YIELD ? NULL : obj);
}

WEFT_COLD void weft__instr_spawn(const weft_instrument *in, weft_task *t,
                                 weft_task *parent)
{
    if (!in->spawn)
        return;
    weft_task_info ti, pi;
    weft__task_info(t, &ti);
    if (parent)
        weft__task_info(parent, &pi);
    in->spawn(in->ctx, &ti, parent ? &pi : NULL);
}

WEFT_COLD void weft__instr_scope_cancel(const weft_instrument *in,
                                        weft_scope *s, int reason,
                                        weft_task *by)
{
    if (!in->scope_cancel)
        return;
    weft_task_info bi;
    if (by)
        weft__task_info(by, &bi);
    in->scope_cancel(in->ctx, s, (weft_cancel_reason)reason, by ? &bi : NULL);
}

WEFT_COLD static void instr_wake_by(weft_worker *w, weft_worker *tw,
                                    weft_task *t, bool timer)
{
    instr_wake(tw->rt->instr, t, instr_waker(w, tw->rt, timer), t->wake_code);
}

/* timer: the park's deadline woke it (no task did). The wake hook runs
 * before t can run: on its own worker, after the queueing (only this
 * thread runs it; and the call comes last, so that the path without an
 * instrument keeps no register across it), else before the push to its
 * inbox, after which t may run, and finish, over there. */
/* The slow path of a wake by worker w (wake_due): the lag sample, one in
 * WEFT__LAG_EVERY, and the instrument's hook. */
WEFT_COLD static void wake_watch(weft_worker *w, weft_worker *tw, weft_task *t,
                                 bool timer)
{
    w->wake_countdown = w->instr ? 1 : WEFT__LAG_EVERY;
    if (WEFT__STATS && --w->lag_left == 0) {
        w->lag_left = w->instr ? WEFT__LAG_EVERY : 1;
        /* Not t->flags: t may still be switching away on its worker,
         * which reads them (stack check); nothing there reads this. */
        t->lag_since = weft__real_now(w->rt);
    }
    if (w->instr)
        instr_wake_by(w, tw, t, timer);
}

/* wake_finish of a task of another worker's (tw), by worker w or by a
 * thread that is none (w NULL). */
static __attribute__((noinline)) void
wake_remote(weft_worker *w, weft_worker *tw, weft_task *t, bool timer)
{
    if (WEFT_UNLIKELY(t->mobile != 0) && w && w->rt == tw->rt && !w->rt->seeded)
        move_hint(w, t);
    if (w ? wake_due(w) : WEFT_UNLIKELY(tw->rt->instr != NULL)) {
        if (w)
            wake_watch(w, tw, t, timer);
        else
            instr_wake_by(w, tw, t, timer);
    }
    if (WEFT_LIKELY(w != NULL && w->rt == tw->rt))
        inbox_push(tw, t); /* a worker of t's runtime: joined at the end */
    else
        inbox_push_foreign(tw, t);
}

/* wake_finish of a task of this worker's (usual: as in pick_inner). */
static inline __attribute__((always_inline)) void
wake_local(weft_worker *w, weft_task *t, bool next, bool timer, bool usual)
{
    make_ready_local_as(w, t, next && ld_rlx(&w->cur) != NULL, usual);
    if (wake_due(w))
        wake_watch(w, w, t, timer);
}

/* wake_local on a seeded or instrumented worker, out of line. */
static __attribute__((noinline)) void
wake_local_unusual(weft_worker *w, weft_task *t, bool next, bool timer)
{
    wake_local(w, t, next, timer, false);
}

/* Every call here is a tail call, so that the usual wake of a task of
 * this worker's saves no register. */
static void wake_finish(weft_task *t, int code, bool next, bool timer)
{
    /* Only the waker that claimed t's park finishes the wake, once. */
    WEFT_ASSERT_MSG(!weft__task_parked(t), "finishing an unclaimed wake");
    WEFT_ASSERT(t->worker != NULL);
    t->wake_code = code;
    weft_worker *w = weft__tl_worker, *tw = t->worker;
    if (w != tw) {
        wake_remote(w, tw, t, timer);
        return;
    }
    if (WEFT_UNLIKELY(w->unusual))
        wake_local_unusual(w, t, next, timer);
    else
        wake_local(w, t, next, timer, true);
}

void weft__wake_finish(weft_task *t, int code)
{
    wake_finish(t, code, true, false);
}

static bool wake_ex(weft_task *t, uint64_t token, int code, bool next,
                    bool timer)
{
    if (!weft__wake_claim(t, token))
        return false;
    wake_finish(t, code, next, timer);
    return true;
}

bool weft__wake(weft_task *t, uint64_t token, int code)
{
    return wake_ex(t, token, code, true, false);
}

void weft__wake_if_cancelled(weft_task *t)
{
    uint64_t token = ld_sc(&t->park);
    if (PARK_STATE(token) != PARK_CANCELLABLE)
        return;
    atomic_int *c = ld_acq(&t->cancel); /* another thread's task */
    if (c && ld_sc(c) != 0)
        wake_ex(t, token, -ECANCELED, false, false);
}

static void lag_count(weft_worker *w, int64_t d);

/* A timer woke t (parked on w, this thread), due at `due`: its lag is
 * counted if 1 ms or more, whether the timer fired late (a task held
 * the worker past it) or t waits in the queue behind one, which sampled
 * wakes would miss every time. On the monotonic clock from the deadline
 * to the run (pick reads the clock then), on the virtual one how late the
 * timer fired, with the wheel's time. */
static void timer_lag(weft_worker *w, weft_task *t, int64_t due)
{
    if (w->rt->clock == WEFT_CLOCK_MONOTONIC) {
        t->lag_since = due; /* queued, not running: ours to write */
        t->flags |= TASK_LAG_TIMER;
    } else if (w->wheel.now - due >= WEFT__LAG_LATE_NS) {
        lag_count(w, w->wheel.now - due);
    }
}

static void park_timeout(weft__timer *tm)
{
    weft_task *t = (weft_task *)((char *)tm - offsetof(weft_task, timer));
    if (wake_ex(t, ld_rlx(&t->park), -ETIMEDOUT, false, true) && WEFT__STATS)
        timer_lag(t->worker, t, tm->when);
}

/* ---- choosing the next task ---- */

static void start_task(weft_worker *w, weft_task *t)
{
    t->worker = w;
#if defined(WEFT__ASSERTS)
    t->home = w; /* read by pick's assert alone */
#endif
    t->flags |= TASK_STARTED;
#if defined(WEFT_TSAN)
    /* A fiber belongs to the slot and serves its tasks one after another:
     * creating one per task costs TSan 40 us (clang) to 27 ms (gcc 12). */
    if (!t->tsan_fiber)
        t->tsan_fiber = __tsan_create_fiber(0);
#endif
}

static void poll_timers(weft_worker *w)
{
    if (ld_rlx(&w->wheel.count))
        weft__wheel_advance(&w->wheel, weft__now(w->rt));
}

static uint64_t rng_next(weft_worker *w);

uint64_t weft__rand(void)
{
    static WEFT_TLS uint64_t fallback = 0x853C49E6748FEA9Bull;
    weft_worker *w = weft__tl_worker;
    if (w)
        return rng_next(w);
    fallback ^= fallback << 13; /* plain threads: xorshift64 */
    fallback ^= fallback >> 7;
    fallback ^= fallback << 17;
    return fallback;
}

static uint64_t rng_next(weft_worker *w)
{
    uint64_t x = w->rng; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    w->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Logs t's resume for the determinism check (util/runlog.h): its id, but
 * 0 for a task made outside a worker (the root task), whose count is
 * process-wide, and the virtual time. */
WEFT_COLD static void runlog_resume(weft_worker *w, weft_task *t)
{
    uint64_t id = ld_rlx(&t->id);
    weft__runlog_add(WEFT_SWARM_EVENT_RESUME, id >> WEFT__ID_BITS ? id : 0,
                     (uint64_t)weft__now(w->rt));
}

/* Schedule exploration (util/runlog.h): the ready task of highest
 * priority, after a change point with a chance of 1 in 2^shift. */
WEFT_COLD static size_t pick_pct(weft_worker *w, unsigned shift)
{
    if ((rng_next(w) & ((UINT64_C(1) << shift) - 1)) == 0)
        weft__pct_change();
    size_t at = 0;
    uint64_t best = 0;
    for (size_t k = 0; k < w->nready; k++) {
        uint64_t id = ld_rlx(&w->ready[k]->id);
        uint64_t p = weft__pct_priority(id >> WEFT__ID_BITS ? id : 0);
        if (p >= best) {
            best = p;
            at = k;
        }
    }
    return at;
}

static weft_task *pick_seeded(weft_worker *w)
{
    inbox_drain(w);
    if (!w->nready)
        poll_timers(w);
    if (!w->nready)
        return NULL;
    unsigned pct = ld_rlx(&weft__pct_shift);
    size_t i = WEFT_UNLIKELY(pct) ? pick_pct(w, pct)
                                  : (size_t)(rng_next(w) % w->nready);
    weft_task *t = w->ready[i];
    w->ready[i] = w->ready[--w->nready];
    if (w->rt->on_pick)
        w->rt->on_pick(w, t);
    if (WEFT_UNLIKELY(ld_rlx(&weft__runlog_on))) /* the determinism check */
        runlog_resume(w, t);
    return t;
}

static inline __attribute__((always_inline)) weft_task *
take_local(weft_worker *w)
{
    weft_task *t;
    if (w->runnext) {
        t = w->runnext;
        w->runnext = NULL;
        if (++w->runnext_streak <= RUNNEXT_STREAK || !w->runq.head)
            return t;
        q_push(&w->runq, t); /* let the others have a turn */
    }
    w->runnext_streak = 0;
    if ((t = q_pop(&w->runq)) != NULL)
        return t;
    return dq_pop(&w->deque);
}

/* usual: w->unusual is known false (neither seeded nor instrumented). */
static inline __attribute__((always_inline)) weft_task *
pick_inner(weft_worker *w, unsigned tick, bool usual)
{
    weft_task *t;
    if (!usual && WEFT_UNLIKELY(w->rt->seeded))
        return pick_seeded(w);
    if (WEFT_UNLIKELY(tick % FAIR_EVERY == 0)) {
        int to = ld_rlx(&w->share_to);
        if (to)
            share(w, to - 1);
        inbox_drain(w);
        poll_timers(w);
        if (weft__pending(w, WEFT__PENDING_IO))
            weft__io_poll(w, 0);
        if ((t = q_pop(&w->yieldq)) != NULL)
            return t;
        if ((t = dq_pop(&w->deque)) != NULL)
            return t;
    }
    if (tick % DEQUE_EVERY == 0 && (t = dq_pop(&w->deque)) != NULL)
        return t;
    if ((t = take_local(w)) != NULL)
        return t;
    if (inbox_drain(w) && (t = take_local(w)) != NULL)
        return t;
    if (ld_rlx(&w->wheel.count)) {
        poll_timers(w);
        if ((t = take_local(w)) != NULL)
            return t;
    }
    if (weft__pending(w, WEFT__PENDING_IO) && weft__io_poll(w, 0) &&
        (t = take_local(w)) != NULL)
        return t;
    return q_pop(&w->yieldq);
}

/* Counts a delay of d ns in w's lag histogram and maximum. */
static void lag_count(weft_worker *w, int64_t d)
{
    int b = d > 1 ? 63 - __builtin_clzll((unsigned long long)d) : 0;
    if (b >= WEFT_LAG_BUCKETS)
        b = WEFT_LAG_BUCKETS - 1;
    weft__stat_add(&w->st.lag[b], 1);
    if (d > ld_rlx(&w->st.lag_max))
        st_rlx(&w->st.lag_max, d);
}

/* Records a sampled wake's delay (wake_watch) in w's histogram. */
WEFT_COLD static void lag_record(weft_worker *w, weft_task *t)
{
    int64_t d = weft__real_now(w->rt) - t->lag_since;
    t->lag_since = 0;
    if (t->flags & TASK_LAG_TIMER) { /* timer_lag: only the late ones */
        t->flags &= ~TASK_LAG_TIMER;
        if (d < WEFT__LAG_LATE_NS)
            return;
    }
    lag_count(w, d);
}

/* Inlined: a task's first run is rare for a park, but every run a spawn
 * makes is one. */
static inline __attribute__((always_inline)) void pick_rare(weft_worker *w,
                                                            weft_task *t)
{
    if (!(t->flags & TASK_STARTED))
        start_task(w, t);
    if (WEFT_UNLIKELY(t->lag_since != 0))
        lag_record(w, t);
}

static inline __attribute__((always_inline)) weft_task *pick(weft_worker *w,
                                                             bool usual)
{
    unsigned tick = ld_rlx(&w->tick) + 1;
    weft_task *t = pick_inner(w, tick, usual);
    if (t) {
        WEFT_ASSERT_MSG(t->worker == w || !(t->flags & TASK_STARTED),
                        "a started task picked by another worker");
        /* A task that may not move (the default) runs where it started,
         * at every resume. */
        WEFT_ASSERT_MSG((t->mobile & WEFT__MOBILE_EVER) ||
                            !(t->flags & TASK_STARTED) || t->home == w,
                        "a task that may not move resumed on another worker");
        WEFT_ASSERT(!weft__task_parked(t));
        /* One test for both rare cases, a first run and a sampled wake,
         * on one value (two tests had gcc place the second in the cold
         * section, jumped to and back at every pick). */
        if (WEFT_UNLIKELY(
                ((uint64_t)t->lag_since | (~t->flags & TASK_STARTED)) != 0))
            pick_rare(w, t);
    }
    /* Release, once t is taken (from the inbox, a deque, a queue): the
     * watchdog (stats.c) acquires the tick before it reads the task's
     * name and spawn site, written by its spawner, maybe on another
     * thread (a plain store on x86, as before the pick). */
    st_rel(&w->tick, tick);
    return t;
}

/* ---- switching ---- */

/* For asserts: t is in none of w's own queues. */
static inline __attribute__((unused)) bool task_unlinked(weft_worker *w,
                                                         const weft_task *t)
{
    return t != ld_rlx(&w->cur) && t != w->runnext && t != w->runq.head &&
           t != w->runq.tail && t != w->yieldq.head && t != w->yieldq.tail &&
           t != ld_rlx(&w->inbox);
}

static void recycle(weft_worker *w, weft_task *t)
{
    WEFT_ASSERT_MSG(task_unlinked(w, t), "a finished task still queued");
    WEFT_ASSERT(!weft__task_parked(t) && !weft__timer_armed(&t->timer));
    weft__task_free(w, t);
}

/* Runs right after every switch, on the stack that was switched to. */
static inline __attribute__((always_inline)) void finish_switch(weft_worker *w)
{
#if defined(WEFT__ASSERTS)
    if (w->off_cpu) {
        st_rlx(&w->off_cpu->on_cpu, 0);
        w->off_cpu = NULL;
    }
#endif
    weft_task *d = w->dead;
    if (d) {
        w->dead = NULL;
        if (WEFT_UNLIKELY((uintptr_t)d & 1)) {
            /* A compact task that parked: its stack is still and nothing
             * but it touches it (TASK_MAY_RELEASE); it runs again only
             * here, after this (ctx_switch resumes it). */
            weft__stack_park(w, (weft_task *)((uintptr_t)d - 1));
        } else {
            recycle(w, d);
        }
    }
}

/* A task is about to run on w (at each switch to it): what it may do
 * before it must let others run starts afresh, its spawns (SPAWN_BUDGET)
 * and its blocking calls that do not wait (WEFT__BUDGET). */
static inline __attribute__((always_inline)) void turn_begins(weft_worker *w)
{
    w->spawns = 0;
    w->budget = WEFT__BUDGET;
}

/* Switching away from self, whose stack has no guard page (its canary
 * is checked) or which parks in a wait that lets its stack be given back
 * (a compact task: noted, and handled once off its stack, by
 * finish_switch). */
static WEFT_COLD void leave_unusual(weft_worker *w, weft_task *self, int kind)
{
    weft__stack_check(self);
    if (kind != WEFT_WAIT_YIELD && (self->flags & TASK_MAY_RELEASE))
        w->dead = (weft_task *)((uintptr_t)self | 1);
}

/* Switches from the running task self to whatever runs next; returns when
 * self runs again. */
static inline __attribute__((always_inline)) bool
run_next_plain(weft_worker *w, weft_task *self, int kind, bool usual)
{
    weft_task *next = pick(w, usual);
    bool switched = next != self; /* else woken before it even left */
    if (switched) {
        /* One test for the common case, a guarded stack that stays. */
        if (WEFT_UNLIKELY((self->flags & (TASK_GUARDED | TASK_MAY_RELEASE)) !=
                          TASK_GUARDED))
            leave_unusual(w, self, kind);
        st_rlx(&w->cur, next);
        turn_begins(w);
        w->prev = self;
        /* A constant where inlined: one counter, chosen at compile time */
        weft__stat_add(kind == WEFT_WAIT_YIELD ? &w->st.yields : &w->st.parks,
                       1);
        ctx_switch(w, self, next, false);
        w = self->worker; /* another one, if self moved */
        finish_switch(w);
    }
    WEFT_ASSERT(ld_rlx(&w->cur) == self && weft__tl_worker == w);
    return switched;
}

/* run_next on an unusual worker: seeded (picks at random), or with an
 * instrument (self's park, kind or WEFT_WAIT_YIELD, is told before, its
 * run again after). Cold: the usual path pays a single branch per park
 * for both. */
WEFT_COLD static bool run_next_unusual(weft_worker *w, weft_task *self,
                                       int kind)
{
    if (w->instr == NULL)
        return run_next_plain(w, self, kind, false);
    const void *obj = NULL;
    if (kind < 0) /* a wait: the wait layer knows on what */
        kind = w->rt->hooks.wait_of(self, &obj);
    weft__instr_park(w->instr, self, kind, obj);
    bool switched = run_next_plain(w, self, kind, false);
    instr_run(w->instr, self);
    return switched;
}

/* Switches from self, parking (kind -1: its wait record says on what) or
 * yielding (WEFT_WAIT_YIELD), to whatever runs next; returns when self runs
 * again, true if it switched (false: woken before it even left). */
static inline __attribute__((always_inline)) bool
run_next(weft_worker *w, weft_task *self, int kind)
{
    if (WEFT_UNLIKELY(w->unusual))
        return run_next_unusual(w, self, kind);
    return run_next_plain(w, self, kind, true);
}

static atomic_int asym_fence; /* the cancel fence's choice, below */

WEFT_COLD static void watch_wait(weft_worker *w, weft_task *t)
{
    while (ld_acq(&w->hazard) == t)
        cpu_relax();
}

/* t's function has returned: the watchdog may be reading its name, spawn
 * site and id under its hazard pointer (stats.c). Marked as its worker's
 * leaving task, t is not read again (the watchdog checks the mark after
 * publishing its hazard), and a read in progress is waited for (a few
 * hundred nanoseconds), before t's end is known (its name may be freed)
 * and its slot is reused or unmapped. The mark is cleared when the worker
 * leaves t for good (task_run). A Dekker pair like the cancel fence's:
 * the watchdog pays for the fence (membarrier), this side a compiler
 * barrier. */
static inline __attribute__((always_inline)) void watch_leave(weft_worker *w,
                                                              weft_task *t)
{
    st_rlx(&w->leaving, t);
    if (WEFT_LIKELY(ld_rlx(&asym_fence) == 1))
        atomic_signal_fence(memory_order_seq_cst); /* compiler only */
    else
        atomic_thread_fence(memory_order_seq_cst);
    if (WEFT_UNLIKELY(ld_acq(&w->hazard) == t))
        watch_wait(w, t);
}

void weft__watch_leave(weft_worker *w, weft_task *t)
{
    watch_leave(w, t);
}

/* A task's life on its own stack, up to its last switch: runs it, tells
 * the layers above, and returns the task to switch to (NULL: the
 * scheduler). Out of line under TSan, so that it has returned (its frame
 * gone from the fiber's shadow stack) when weft__task_main switches
 * away. */
#if defined(WEFT_TSAN)
#define TASK_RUN_INLINE __attribute__((noinline))
#else
#define TASK_RUN_INLINE inline
#endif
static TASK_RUN_INLINE weft_task *task_run(weft_task *t)
{
    weft_worker *w = t->worker;
    WEFT_ASSERT(w == weft__tl_worker && ld_rlx(&w->cur) == t);
    finish_switch(w);
    if (WEFT_UNLIKELY(w->instr != NULL))
        instr_run(w->instr, t);
    t->status = t->fn(t->arg);
    w = t->worker;        /* another one, if t moved */
    watch_leave(w, t);    /* before its end is known: its name's life ends */
    w->rt->hooks.exit(t); /* the layers above: its scopes, its handle */
    /* The layers above are done with t: nothing waits, nothing is armed. */
    WEFT_ASSERT(ld_rlx(&w->cur) == t && !weft__task_parked(t));
    WEFT_ASSERT(!weft__timer_armed(&t->timer));
    if (WEFT_UNLIKELY(w->instr != NULL))
        instr_exit(w->instr, t);
    weft__stack_check(t);
    w->dead = t;
    weft__stat_add(&w->st.finished, 1);
    weft_task *next = pick(w, false);
    st_rlx(&w->cur, next);
    /* Release: a watchdog that sees the mark cleared sees cur moved. */
    st_rel(&w->leaving, NULL);
    turn_begins(w);
    return next;
}

/* The bottom frame of every task (weft__ctx_make), never returned from.
 * WEFT_NO_TSAN: the slot's TSan fiber serves the slot's next task, so this
 * task must leave no frame on the fiber's shadow stack; task_run has
 * returned, and ctx_switch and ctx_jump are inlined. */
WEFT_NO_TSAN void weft__task_main(void *arg)
{
    weft_task *t = arg;
    ctx_entered();
    weft_task *next = task_run(t);
#if defined(WEFT_TSAN_HOOKS_KEPT)
    /* This compiler gave this function (and ctx_uc_entry) entry hooks
     * anyway: pop their frames. */
    __tsan_func_exit();
#if defined(WEFT_UCONTEXT)
    __tsan_func_exit();
#endif
#endif
    ctx_switch(t->worker, t, next, true);
    weft__fatal("weft: a finished task was resumed");
}

/* ---- park ---- */

/* ---- the cancel fence ----
 * A parker stores its park word, then reads its scope's cancelled flag; a
 * canceller stores the flag, then reads park words. One of them must see
 * the other's store (Dekker), which needs a full fence on both sides. Parks
 * are frequent and cancels rare, so where the kernel has membarrier() the
 * canceller pays for both (an asymmetric fence, as in liburcu and folly):
 * membarrier makes every running thread of the process pass a full
 * barrier, and the parker gets by with a plain store (a seq_cst store costs
 * an xchg, ~7 ns, twice per channel round trip). Elsewhere both sides use
 * seq_cst. The choice is made once, before the first task runs. */

static atomic_int asym_fence = -1; /* -1: not probed, 0: no, 1: membarrier */

void weft__fence_init(void)
{
    if (ld_acq(&asym_fence) >= 0)
        return;
    int ok = 0;
#if defined(SYS_membarrier)
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0,
                0) == 0)
        ok = 1;
#endif
    int expected = -1;
    atomic_compare_exchange_strong(&asym_fence, &expected, ok);
}

void weft__cancel_fence(void)
{
#if defined(SYS_membarrier)
    if (ld_acq(&asym_fence) == 1 &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
        return;
#endif
    atomic_thread_fence(memory_order_seq_cst);
}

uint64_t weft__park_prepare(weft_task *t, bool cancellable)
{
    /* The running task parks itself (or a task not started yet is made
     * to look parked, so that one wake starts it: weft__wake_new). */
    WEFT_ASSERT_MSG(weft__task_is_current(t) || !(t->flags & TASK_STARTED),
                    "a task parked by another");
    WEFT_ASSERT_MSG(!weft__task_parked(t), "a task parked twice");
    uint64_t gen = (ld_rlx(&t->park) >> 2) + 1;
    uint64_t token = (gen << 2) | (cancellable ? PARK_CANCELLABLE : PARK_FIRM);
    /* Pairs with weft__cancel_fence (see above). */
    if (WEFT_LIKELY(ld_rlx(&asym_fence) == 1)) {
        st_rel(&t->park, token);
        atomic_signal_fence(memory_order_seq_cst); /* compiler only */
    } else {
        st_sc(&t->park, token);
    }
    return token;
}

/* Inlined into the wait layer's parks where the build allows (LTO): a
 * call here saved the registers that the switch saves again. */
__attribute__((always_inline)) inline int
weft__park_commit(weft_worker *w, weft_task *t, int64_t deadline)
{
    WEFT_ASSERT_MSG(w == weft__tl_worker && t->worker == w &&
                        ld_rlx(&w->cur) == t,
                    "a task parks only itself, on its own worker");
    WEFT_ASSERT(!weft__timer_armed(&t->timer));
    uint64_t token = ld_rlx(&t->park);
    if (PARK_STATE(token) == PARK_CANCELLABLE && weft__task_cancelled(t)) {
        uint64_t expected = token;
        if (cas_sc(&t->park, &expected, token & ~(uint64_t)3))
            return -ECANCELED;
        /* Someone else won and is queueing us: go through the queue. */
    }
    if (deadline != WEFT_NEVER)
        weft__wheel_arm(&w->wheel, &t->timer, deadline);
    run_next(w, t, -1);
    /* Runs again only once its park was claimed (or it cancelled it). */
    WEFT_ASSERT(!weft__task_parked(t));
    if (weft__timer_armed(&t->timer)) /* not if t moved: disarmed then */
        weft__wheel_disarm(&t->worker->wheel, &t->timer);
    return t->wake_code;
}

WEFT_COLD static void yield_unusual(weft_worker *w, weft_task *self)
{
    if (w->rt->seeded)
        ready_push(w, self);
    else
        q_push(&w->yieldq, self);
    run_next_unusual(w, self, WEFT_WAIT_YIELD);
}

/* weft__yield's body, inlined into weft_yield too (the yield is its
 * caller's only work: a call would save and restore the registers that
 * the switch saves anyway). */
static inline __attribute__((always_inline)) int yield_now(weft_worker *w)
{
    weft_task *self = ld_rlx(&w->cur);
    WEFT_ASSERT(w == weft__tl_worker && self != NULL && self->worker == w);
    if (WEFT_UNLIKELY(w->unusual)) {
        yield_unusual(w, self);
    } else {
        q_push(&w->yieldq, self);
        run_next_plain(w, self, WEFT_WAIT_YIELD, true);
    }
    return 0;
}

int weft__yield(weft_worker *w)
{
    return yield_now(w);
}

void weft__budget_spent(weft_worker *w)
{
    w->budget = WEFT__BUDGET; /* if nothing else runs: no switch sets it */
    weft__yield(w);
}

/* ---- spawn ---- */

/* After a push to self's deque: wakes a sleeping worker to take from it,
 * unless one spins already, or every sleeper will look again soon (it
 * defers, weft__nap_deferring) and the queue is not worth stealing yet:
 * such a sleeper would find the spawner running its tasks and decline
 * (victim_ready), and the wake would cost the spawner a system call. */
static void wake_idle_worker(weft_runtime *rt, weft_worker *self)
{
    /* A queue that had tasks before this push, and is short: a worker
     * that went to sleep since saw them (its look at the deques follows
     * its announcement, Dekker with the push that made the queue
     * nonempty, which did this whole test) and defers; one that slept
     * before was woken by that push if it slept for good. top is read
     * seq_cst: a steal that emptied the queue, which a sleeper saw, is
     * seen here too, and the push takes the whole test. */
    int64_t avail = ld_rlx(&self->deque.bottom) - ld_sc(&self->deque.top);
    if (avail > 1 && avail < STEAL_BACKLOG)
        return;
    /* Pairs with the deque's bottom store (Dekker with the sleeper). */
    if (ld_sc(&rt->nsleeping) == 0 || ld_rlx(&rt->nspinning) > 0)
        return;
    int worth = -1; /* not computed yet */
    for (int i = 1; i < rt->nworkers; i++) {
        weft_worker *v = &rt->workers[(self->id + i) % rt->nworkers];
        if (!ld_rlx(&v->sleeping))
            continue;
        if (ld_rlx(&v->deferring)) {
            if (worth < 0)
                worth = dq_worth_stealing(self, avail);
            if (!worth)
                continue;
        }
        weft__worker_notify(v);
        return;
    }
}

/* A new task's id (weft_task.id): a count of the spawning worker's, no
 * shared atomic on the spawn path; the rare task made outside a worker
 * (the root task, the shutdown keeper) counts on a process-wide one. */
static uint64_t task_id(void)
{
    static _Atomic uint64_t outside;
    weft_worker *w = weft__tl_worker;
    if (!w)
        return add_rlx(&outside, 1) + 1;
    return ((uint64_t)(w->id + 1) << WEFT__ID_BITS) |
           (++w->next_id & ((UINT64_C(1) << WEFT__ID_BITS) - 1));
}

void weft__task_prepare(weft_task *t, weft_fn fn, void *arg,
                        const weft_spawn_opts *o, const char *file, int line)
{
    t->flags &= TASK_GUARDED | TASK_CUSTOM | TASK_CHECK_BELOW | TASK_CHECK_OWN |
                TASK_COMPACT;
    t->worker = NULL;
    t->next = NULL;
    t->wake_code = 0;
    t->mobile = WEFT__CAN_MOVE && o && o->movable > 0 && !o->worker
                    ? WEFT__MOBILE_TASK | WEFT__MOBILE_EVER
                    : 0; /* the scope layer adds its scope's choice */
    t->anchor = 0;
    t->far_w = -1; /* no streak (move_hint); home is set at the start */
    WEFT_ASSERT_MSG(t->move_to == NULL, "a slot reused with a move asked");
    t->lag_since = 0;
    t->timer.next = t->timer.prev = NULL;
    t->timer.fn = park_timeout;
    t->status = 0;
    st_rlx(&t->cancel, NULL); /* the scope layer sets it at registration */
    t->fn = fn;
    t->arg = arg;
    st_rlx(&t->name, o ? o->name : NULL);
    st_rlx(&t->file, file);
    st_rlx(&t->line, line);
    st_rlx(&t->id, task_id()); /* the slice monitor reads it (stats.c) */
#if defined(WEFT_ASAN)
    /* The slot's previous task left through a switch, not by returning, so
     * ASan still marks its frames' redzones: clear them for the new life. */
    __asan_unpoison_memory_region(t->stack_lo,
                                  (size_t)(t->stack_hi - t->stack_lo));
#endif
    weft__ctx_make(&t->ctx, t->stack_lo, t->stack_hi, weft__task_main, t);
}

/* Runs on w's thread, t prepared and registered in its scope. */
void weft__task_submit(weft_worker *w, weft_task *t, weft_worker *pin)
{
    WEFT_ASSERT(w == weft__tl_worker);
    WEFT_ASSERT_MSG(!(t->flags & TASK_STARTED) && ld_rlx(&t->cancel) != NULL,
                    "submitting a task not prepared and registered");
    if (pin && pin != w) {
        inbox_push(pin, t);
    } else if (w->rt->seeded) {
        ready_push(w, t);
    } else if (pin) { /* not in a deque: nobody may steal it */
        q_push(&w->runq, t);
    } else if (dq_push(&w->deque, t, ld_rlx(&w->tick)) != 0) {
        q_push(&w->runq, t); /* no memory to grow: runs here, unstealable */
    } else {
        wake_idle_worker(w->rt, w);
    }
    st_rlx(&w->spawned, ld_rlx(&w->spawned) + 1);
    if (++w->spawns >= SPAWN_BUDGET)
        weft__yield(w);
}

/* ---- the worker's own loop ---- */

/* ---- is a victim stuck? ---- */

/* Called by the worker's own thread when its loop starts: lets thieves
 * read its thread's CPU clock and state. */
static void probe_publish(weft_worker *w)
{
    w->tid = (int)syscall(SYS_gettid);
    if (pthread_getcpuclockid(pthread_self(), &w->cpu_clock) != 0)
        return; /* probe_ready stays 0: thieves go by rounds alone */
    st_rel(&w->probe_ready, 1);
}

/* The victim thread's scheduler state from /proc ('R' running or
 * runnable, 'S' or 'D' asleep in the kernel, ...), or 0 if it cannot be
 * read. The file is opened once per worker, by the first thief to ask,
 * and read with pread from then on. */
static char probe_state(weft_worker *v)
{
    int fd = ld_acq(&v->stat_fd);
    if (fd == -1) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%d/stat", v->tid);
        int nfd = open(path, O_RDONLY | O_CLOEXEC);
        int want = nfd >= 0 ? nfd : -2;
        int expect = -1;
        if (cas_acq_rel(&v->stat_fd, &expect, want)) {
            fd = want;
        } else {
            if (nfd >= 0)
                close(nfd);
            fd = expect;
        }
    }
    if (fd < 0)
        return 0;
    char buf[256]; /* "tid (comm) S ...": comm is at most 16 bytes */
    ssize_t len = pread(fd, buf, sizeof buf - 1, 0);
    if (len <= 0)
        return 0;
    buf[len] = 0;
    const char *close_paren = strrchr(buf, ')');
    return close_paren && close_paren[1] == ' ' ? close_paren[2] : 0;
}

/* Whether a victim that has taken no decision and spawned nothing for
 * STUCK_ROUNDS of our rounds is stuck for real: its thread has since run
 * STUCK_CPU_NS more on its CPU clock (a long task), or sleeps in the
 * kernel (a task in a blocking call). A thread that is merely not running
 * (the kernel gave its core to another thread: on a loaded machine, often
 * for milliseconds) is not: it will get back to its queue as soon as it
 * runs, while a task taken from it that talks to its tasks would cross
 * cores for the rest of its life. Where the probe cannot be read, the
 * rounds alone decide. */
static bool victim_stuck(weft_worker *v, struct weft__seen *seen)
{
    if (!ld_acq(&v->probe_ready))
        return true;
    if (ld_rlx(&v->notifying)) { /* waking another worker: not its task */
        seen->cpu = -1;
        return false;
    }
    struct timespec ts;
    if (clock_gettime(v->cpu_clock, &ts) != 0)
        return true;
    int64_t cpu = (int64_t)ts.tv_sec * WEFT_SEC + ts.tv_nsec;
    if (seen->cpu < 0) {
        seen->cpu = cpu;
    } else if (cpu - seen->cpu >= STUCK_CPU_NS) {
        return true;
    }
    char state = probe_state(v);
    return state != 'R';
}

/* Whether w may take from v, which has avail tasks queued, on this round
 * (round < 0: always): a victim with a short, young queue is left alone
 * unless it has made no progress for STUCK_ROUNDS of w's rounds and is
 * stuck (victim_stuck), so that a worker that will run its own tasks soon
 * keeps them together. */
static bool victim_ready(weft_worker *w, weft_worker *v, int64_t avail,
                         int round)
{
    unsigned vtick = ld_rlx(&v->tick);
    if (round < 0 || dq_worth_stealing(v, avail))
        return true;
    struct weft__seen *seen = &w->seen[v->id];
    unsigned progress = vtick + (unsigned)ld_rlx(&v->spawned);
    if (progress != seen->progress) {
        seen->progress = progress;
        seen->round = (unsigned)round;
        seen->cpu = -1;
        return false;
    }
    return (unsigned)round - seen->round >= STUCK_ROUNDS &&
           victim_stuck(v, seen);
}

/* Moves half of v's avail queued tasks (at least one) to w's deque (its
 * run queue if that is full). Returns how many came. */
static int steal_half(weft_worker *w, weft_worker *v, int64_t avail)
{
    int64_t want = avail > 1 ? avail / 2 : 1;
    int got = 0;
    for (int64_t k = 0; k < want; k++) {
        bool lost = false;
        weft_task *t = dq_steal(&v->deque, &lost);
        if (!t) {
            if (lost) {
                k--;
                continue;
            }
            break;
        }
        WEFT_ASSERT_MSG(!(t->flags & TASK_STARTED),
                        "a started task in a deque");
        if (dq_push(&w->deque, t, ld_rlx(&w->tick)) != 0)
            q_push(&w->runq, t);
        got++;
    }
    return got;
}

/* Nothing to steal: asks a worker with yielded tasks for a share of its
 * movable ones (it answers at its next fair round, through w's inbox).
 * Every 4th round (every look: round < 0, the virtual clock's): its yield
 * queue's length is on the line it keeps writing, and each look costs it
 * a miss. */
static void ask_share(weft_worker *w, int start, int round)
{
    weft_runtime *rt = w->rt;
    int n = rt->nworkers;
    for (int i = 0; (round < 0 || (round & 3) == 3) && i < n; i++) {
        weft_worker *v = &rt->workers[(start + i) % n];
        if (v != w && ld_rlx(&v->yieldq.len) >= SHARE_MIN &&
            ld_rlx(&v->share_to) == 0) {
            st_rlx(&v->share_to, w->id + 1);
            break;
        }
    }
}

/* round >= 0: take only from a victim with a backlog, one whose oldest
 * task is old, or one that is stuck (victim_stuck after STUCK_ROUNDS
 * rounds without progress); round < 0: take from anyone. */
static bool steal(weft_worker *w, int round)
{
    weft_runtime *rt = w->rt;
    int n = rt->nworkers;
    if (n == 1)
        return false;
    int start = (int)(rng_next(w) % (uint64_t)n);
    for (int i = 0; i < n; i++) {
        weft_worker *v = &rt->workers[(start + i) % n];
        if (v == w)
            continue;
        int64_t avail = ld_sc(&v->deque.bottom) - ld_sc(&v->deque.top);
        if (avail <= 0 || !victim_ready(w, v, avail, round))
            continue;
        int got = steal_half(w, v, avail);
        if (got) {
            weft__stat_add(&w->st.steals, (uint64_t)got);
            return true;
        }
    }
    ask_share(w, start, round);
    return false;
}

/* What work w can see: its inbox or the end (WORK_HERE), else tasks not
 * started in some worker's deque (WORK_QUEUED), else none. */
enum { WORK_NONE, WORK_QUEUED, WORK_HERE };

static int work_seen(weft_worker *w)
{
    weft_runtime *rt = w->rt;
    if (ld_sc(&w->inbox) || ld_acq(&rt->done))
        return WORK_HERE;
    for (int i = 0; i < rt->nworkers; i++)
        if (dq_nonempty(&rt->workers[i].deque))
            return WORK_QUEUED;
    return WORK_NONE;
}

bool weft__work_visible(weft_worker *w)
{
    return work_seen(w) != WORK_NONE;
}

int weft__sleep_announce(weft_worker *w)
{
    int mode = weft__pending(w, WEFT__PENDING_IO) ? SLEEP_POLLER : SLEEP_FUTEX;
    st_sc(&w->sleeping, mode);
    add_sc(&w->rt->nsleeping, 1);
    if (WEFT__STATS) /* next to a system call: the clock reads are cheap */
        w->asleep_from = weft__real_now(w->rt);
    return mode;
}

void weft__sleep_done(weft_worker *w)
{
    if (WEFT__STATS)
        weft__stat_add(&w->st.idle_ns,
                       (uint64_t)(weft__real_now(w->rt) - w->asleep_from));
    st_sc(&w->sleeping, SLEEP_NONE);
    add_sc(&w->rt->nsleeping, -1);
}

/* weft__nap, and with `defer` weft__nap_deferring. */
static bool nap(weft_worker *w, int64_t timeout, bool defer)
{
    bool events = false;
    int mode = weft__sleep_announce(w);
    int seen = timeout > 0 ? work_seen(w) : WORK_HERE;
    if (seen == WORK_NONE) {
        events = weft__sleep(w, mode, timeout);
    } else if (seen == WORK_QUEUED && defer) {
        /* Set after the look: a spawner that reads it may skip the wake,
         * and this sleep ends within DEFER_NS anyway. */
        st_rlx(&w->deferring, 1);
        events = weft__sleep(w, mode, timeout < DEFER_NS ? timeout : DEFER_NS);
        st_rlx(&w->deferring, 0);
        /* The nap counts as the rounds a spin would have taken, for the
         * victims' stuck rule (victim_ready), and the next look is one
         * round: the tasks it saw are not its to take yet. */
        w->rounds += STUCK_ROUNDS;
        w->deferred = true;
    }
    weft__sleep_done(w);
    return events;
}

bool weft__nap(weft_worker *w, int64_t timeout)
{
    return nap(w, timeout, false);
}

bool weft__nap_deferring(weft_worker *w, int64_t timeout)
{
    return nap(w, timeout, true);
}

int64_t weft__idle_forever_enter(weft_worker *w)
{
    weft_runtime *rt = w->rt;
    if (!rt->on_all_idle || weft__pending(w, WEFT__PENDING_IO) ||
        weft__pending(w, WEFT__PENDING_POOL))
        return WEFT_NEVER;
    pthread_mutex_lock(&rt->dmu);
    bool last = false;
    if (!w->didle) {
        w->didle = true;
        w->dgen++;
        last = ++rt->ndidle == rt->nworkers;
    }
    pthread_mutex_unlock(&rt->dmu);
    return last ? rt->on_all_idle(w) : WEFT_NEVER;
}

int64_t weft__idle_forever_again(weft_worker *w)
{
    return w->didle ? w->rt->on_all_idle(w) : 0;
}

void weft__idle_forever_leave(weft_worker *w)
{
    weft_runtime *rt = w->rt;
    if (!rt->on_all_idle)
        return;
    pthread_mutex_lock(&rt->dmu);
    if (w->didle) {
        w->didle = false;
        rt->ndidle--;
    }
    pthread_mutex_unlock(&rt->dmu);
}

bool weft__steal_any(weft_worker *w)
{
    return steal(w, -1);
}

/* A worker whose tasks wait for descriptors polls its poller (without
 * sleeping in it) for IO_POLL_NS before it sleeps there, as Go's spinning
 * Ms poll the network: a peer that writes to a socket of a worker asleep
 * in epoll_wait pays for waking it (on these VMs an IPI, a VM exit) on its
 * own core, and in the http benchmark that peer, wrk, is the bottleneck
 * (profiled: wrk's share in the wake-up path went from 4% of all samples
 * to almost none; req/s moved within the noise of these machines). By
 * syscall, not with pause: pausing this long let the hypervisor take the
 * vCPU (12 rounds of pause-spinning cost 30% of req/s). Returns true if it
 * found work. */
static bool io_busy_poll(weft_worker *w)
{
    int64_t until = weft__mono_now() + IO_POLL_NS;
    do {
        if (ld_rlx(&w->inbox) || ld_acq(&w->rt->done) || weft__io_poll(w, 0))
            return true;
    } while (weft__mono_now() < until);
    return false;
}

bool weft__idle_look(weft_worker *w)
{
    weft_runtime *rt = w->rt;
    weft__pool_trim(w);
    bool io = weft__pending(w, WEFT__PENDING_IO) != 0;
    if (rt->nworkers > 1) {
        add_sc(&rt->nspinning, 1);
        bool found = false;
        /* With tasks waiting for descriptors, the poller is polled
         * instead of spinning (io_busy_poll), and once; after a deferring
         * nap, one round (it stood for many: weft__nap_deferring). */
        int rounds = io ? IO_SPIN_ROUNDS : w->deferred ? 1 : SPIN_ROUNDS;
        w->deferred = false;
        for (int i = 1; i <= rounds && !found; i++) {
            if (io) {
                found = io_busy_poll(w);
            } else {
                /* Our own inbox is cheap to watch (only wakers write
                 * it): look often, so a cross-worker wake is seen in
                 * ~0.3 us. */
                for (int k = 0; k < SPIN_PAUSES && !found; k++) {
                    cpu_relax();
                    if (k % 16 == 15 && ld_rlx(&w->inbox))
                        found = true;
                }
            }
            if (found || ld_rlx(&w->inbox) || ld_acq(&rt->done))
                found = true;
            else if (steal(w, (int)(++w->rounds & INT_MAX)))
                found = true;
        }
        add_sc(&rt->nspinning, -1);
        return found;
    }
    return io && io_busy_poll(w);
}

int weft__worker_loop(weft_worker *w)
{
    weft_runtime *rt = w->rt;
    probe_publish(w);
    for (;;) {
        finish_switch(w);
        weft_task *t = pick(w, false);
        if (t) {
            st_rlx(&w->cur, t);
            turn_begins(w);
            w->deferred = false; /* it has work again: a full look next */
            weft__stat_add(&w->st.resumed, 1);
            ctx_switch(w, NULL, t, false);
            continue;
        }
        if (WEFT_UNLIKELY(w->pend_live))
            weft__stack_idle(w); /* idle: compact stacks given back */
        if (ld_acq(&rt->done))
            break;
        /* Waits for work or the next timer, as the clock has it (the
         * monotonic one spins and steals first, the virtual one moves
         * when every worker is idle). The time asleep is counted where it
         * sleeps (weft__sleep_announce): timing every pass here cost the
         * spawn benchmark 4%, a worker going idle between steals. */
        rt->clock_ops->idle_until(w);
    }
    finish_switch(w);
    return 0;
}

/* ---- worker setup ---- */

int weft__worker_init(weft_runtime *rt, weft_worker *w, int id)
{
    memset(w, 0, sizeof(*w));
    atomic_init(&w->stat_fd, -1); /* before a failure: worker_fini closes it */
    w->rt = rt;
    w->id = id;
    w->rng = (rt->seed ? rt->seed : 0x9E3779B97F4A7C15ull) +
             (uint64_t)id * 0xBF58476D1CE4E5B9ull;
    if (!w->rng)
        w->rng = 1;
    w->vnext = WEFT_NEVER;
    w->instr = rt->instr;
    w->unusual = rt->seeded || w->instr != NULL;
    w->wake_countdown = w->instr ? 1 : WEFT__LAG_EVERY;
    w->lag_left = w->instr ? WEFT__LAG_EVERY : 1;
    w->seen = weft__calloc((size_t)rt->nworkers, sizeof(*w->seen));
    if (!w->seen)
        return -ENOMEM;
    for (int i = 0; i < rt->nworkers; i++)
        w->seen[i].cpu = -1;
    atomic_init(&w->probe_ready, 0);
    weft__wheel_init(&w->wheel, weft__now(rt));
    return dq_init(&w->deque);
}

void weft__worker_fini(weft_worker *w)
{
    weft__io_fini(w);
    weft__pool_fini_local(w);
    dq_fini(&w->deque);
    free(w->ready);
    w->ready = NULL;
    free(w->seen);
    w->seen = NULL;
    free(w->pend); /* a deadlock may leave compact tasks parked */
    w->pend = NULL;
    int fd = ld_rlx(&w->stat_fd);
    if (fd >= 0)
        close(fd);
    st_rlx(&w->stat_fd, -1);
}

weft_worker *weft__rt_worker(weft_runtime *rt, int i)
{
    WEFT_ASSERT(i >= 0 && i < rt->nworkers);
    return &rt->workers[i];
}

/* ---- public: the running task ---- */

int weft_cancelled(void)
{
    weft_task *t = weft__current();
    return t ? weft__task_cancelled(t) : 0;
}

int weft_yield(void)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !w->cur)
        return -EPERM;
    return yield_now(w);
}

const char *weft_task_name(void)
{
    weft_task *t = weft__current();
    return t && t->name ? t->name : "";
}
