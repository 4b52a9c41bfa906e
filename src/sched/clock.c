/* SPDX-License-Identifier: MIT */
/*
 * The clocks (see clock.h): monotonic and virtual.
 *
 * Both idle through the scheduler's sleep (weft__nap and its parts), which
 * flags the worker asleep so that wakers wake it, and sleeps on its futex
 * or, when its tasks wait for descriptors, in its poller.
 *
 * The virtual clock's books, under rt->vmu: per worker, whether it is idle
 * (vidle) and its earliest timer (vnext); rt->nvidle counts the idle ones.
 * The last worker to go idle moves the time to the earliest vnext of all
 * and wakes the others, who fire their timers that are due. A worker
 * another thread makes work for leaves the books (unidle) before it is
 * woken, so time cannot jump past work that is already there.
 */
#include "sched/scheduler.h"
#include "timer/timer.h"

#include <time.h>

#define AUTOJUMP_NS (5 * WEFT_MSEC)       /* virtual clock: real wait for I/O */
#define POOL_AUTOJUMP_NS (50 * WEFT_MSEC) /* and for blocking calls */

int64_t weft__mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * WEFT_SEC + ts.tv_nsec;
}

/* ---- monotonic ---- */

static int64_t mono_now(weft_runtime *rt)
{
    WEFT_UNUSED(rt);
    return weft__mono_now();
}

static void mono_idle_until(weft_worker *w)
{
    if (weft__idle_look(w)) /* spins, stealing where it pays */
        return;
    int64_t next = weft__wheel_next(&w->wheel);
    if (next != WEFT_NEVER) {
        weft__nap_deferring(w, next - weft__mono_now());
        return;
    }
    /* No timer: nothing in the runtime will wake this worker but another
     * thread. If every worker is so, its tasks may be deadlocked. */
    int64_t t = weft__idle_forever_enter(w);
    while (t != 0) {
        weft__nap_deferring(w, t);
        if (t == WEFT_NEVER || weft__work_visible(w))
            break;
        t = weft__idle_forever_again(w);
    }
    weft__idle_forever_leave(w);
}

const weft__clock_ops weft__clock_monotonic = {
    .name = "monotonic",
    .now = mono_now,
    .idle_until = mono_idle_until,
    .advance = NULL,
    .unidle = NULL,
};

/* ---- virtual ---- */

static int64_t virt_now(weft_runtime *rt)
{
    return ld_acq(&rt->vnow);
}

/* Under rt->vmu, or anywhere: the time only moves forward. */
static void virt_advance(weft_runtime *rt, int64_t t)
{
    if (t > ld_rlx(&rt->vnow))
        st_rel(&rt->vnow, t);
}

static void virt_unidle(weft_worker *w)
{
    weft_runtime *rt = w->rt;
    pthread_mutex_lock(&rt->vmu);
    if (w->vidle) {
        w->vidle = false;
        rt->nvidle--;
    }
    pthread_mutex_unlock(&rt->vmu);
}

/* Before time jumps: real work the clock cannot see may still wake a
 * task. Tasks waiting for descriptors give the kernel autojump_io_ns of
 * real time to make one ready, and tasks waiting for weft_blocking calls
 * give the pool autojump_pool_ns to finish them (Trio's autojump
 * threshold), so that loopback I/O and a quick blocking call complete at
 * the virtual instant they started (in simulation nothing real runs: no
 * grace). Asleep meanwhile, so a wake from
 * another thread ends the wait at once. Returns true if work turned up.
 * Only the worker whose tasks wait naps: time cannot jump while it does
 * (it is not idle in the books), and another worker napping for it would
 * not be woken by the call's end, holding the clock for the whole grace
 * after the call returned. */
static bool autojump_grace(weft_worker *w)
{
    weft_runtime *rt = w->rt;
    if (rt->sim) /* no real I/O, blocking calls run inline: no grace */
        return false;
    int64_t grace =
        weft__pending(w, WEFT__PENDING_POOL) ? rt->autojump_pool_ns : 0;
    if (weft__pending(w, WEFT__PENDING_IO) && grace < rt->autojump_io_ns)
        grace = rt->autojump_io_ns;
    return grace && (weft__nap(w, grace) || weft__work_visible(w));
}

/* How many times a task has switched away, on every worker: it grows
 * whenever a task has run anywhere (relaxed reads of counters each worker
 * writes alone). */
static uint64_t activity(weft_runtime *rt)
{
    uint64_t n = 0;
    for (int i = 0; i < rt->nworkers; i++) {
        weft__wstats *st = &rt->workers[i].st;
        n += ld_rlx(&st->parks) + ld_rlx(&st->yields) + ld_rlx(&st->finished);
    }
    return n;
}

/* Under rt->vmu, by the last worker to go idle: a worker whose tasks wait
 * for descriptors gave the kernel its grace before a task last ran, and
 * that task may have made one ready (a byte written to a socket pair)
 * which that worker, idle in the books, has not read yet. Each such
 * worker leaves the books to look again, with a grace of its own, instead
 * of time jumping past its readiness; w itself too. Returns true if any
 * did (time does not move now). Tasks that ran are counted, so this ends:
 * with nothing running, the next round finds every grace current. */
static bool regrace(weft_runtime *rt, weft_worker *w)
{
    if (rt->sim)
        return false;
    uint64_t now = activity(rt);
    bool any = false;
    for (int i = 0; i < rt->nworkers; i++) {
        weft_worker *o = &rt->workers[i];
        if (!ld_rlx(&weft__wpub(o)->pending[WEFT__PENDING_IO]) ||
            o->vseen == now)
            continue;
        o->vidle = false;
        rt->nvidle--;
        any = true;
        if (o != w)
            weft__wake_sleeper(o);
    }
    return any;
}

/* Time moves only when every worker is idle, to the earliest deadline of
 * any worker. */
static void virt_idle_until(weft_worker *w)
{
    weft_runtime *rt = w->rt;
    /* What the grace covers: only a worker whose tasks wait for
     * descriptors is looked at by regrace, and its count cannot change
     * while it is idle (only its own tasks change it). */
    uint64_t seen = weft__pending(w, WEFT__PENDING_IO) ? activity(rt) : 0;
    if (weft__steal_any(w) || autojump_grace(w))
        return;
    pthread_mutex_lock(&rt->vmu);
    if (weft__work_visible(w)) {
        pthread_mutex_unlock(&rt->vmu);
        return;
    }
    w->vnext = weft__wheel_next_exact(&w->wheel);
    w->vseen = seen;
    w->vidle = true;
    if (++rt->nvidle == rt->nworkers && regrace(rt, w) && !w->vidle) {
        pthread_mutex_unlock(&rt->vmu);
        return; /* its own grace is stale: look again */
    }
    if (rt->nvidle == rt->nworkers) {
        int64_t min = WEFT_NEVER;
        for (int i = 0; i < rt->nworkers; i++)
            if (rt->workers[i].vnext < min)
                min = rt->workers[i].vnext;
        if (min != WEFT_NEVER) {
            virt_advance(rt, min);
            for (int i = 0; i < rt->nworkers; i++)
                rt->workers[i].vidle = false;
            rt->nvidle = 0;
            pthread_mutex_unlock(&rt->vmu);
            for (int i = 0; i < rt->nworkers; i++)
                if (&rt->workers[i] != w)
                    weft__wake_sleeper(&rt->workers[i]);
            return;
        }
        /* Every task waits on something with no deadline: only another
         * thread (a cancel, an I/O event, the pool) can wake one. */
    }
    bool forever = w->vnext == WEFT_NEVER;
    /* Flagged asleep under the lock: a worker that moves the time after
     * we unlock sees the flag and wakes us. */
    int mode = weft__sleep_announce(w);
    pthread_mutex_unlock(&rt->vmu);
    /* With no timer of its own, it joins the deadlock books: if every
     * worker is so, no time will come that wakes a task. */
    int64_t t = forever ? weft__idle_forever_enter(w) : WEFT_NEVER;
    while (t != 0) {
        weft__sleep(w, mode, t);
        if (t == WEFT_NEVER || weft__work_visible(w))
            break;
        t = weft__idle_forever_again(w);
    }
    if (forever)
        weft__idle_forever_leave(w);
    virt_unidle(w);
    weft__sleep_done(w);
}

const weft__clock_ops weft__clock_virtual = {
    .name = "virtual",
    .now = virt_now,
    .idle_until = virt_idle_until,
    .advance = virt_advance,
    .unidle = virt_unidle,
};

void weft__clock_init(weft_runtime *rt, weft_clock_kind kind,
                      int64_t autojump_ns)
{
    rt->clock = kind;
    rt->autojump_io_ns = autojump_ns ? autojump_ns : AUTOJUMP_NS;
    rt->autojump_pool_ns = autojump_ns ? autojump_ns : POOL_AUTOJUMP_NS;
    rt->clock_ops = kind == WEFT_CLOCK_VIRTUAL ? &weft__clock_virtual
                                               : &weft__clock_monotonic;
}

/* ---- public: the time ---- */

weft_time weft_now(void)
{
    weft_worker *w = weft__tl_worker;
    return weft__now(w ? w->rt : NULL);
}
