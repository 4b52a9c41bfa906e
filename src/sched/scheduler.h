/* SPDX-License-Identifier: MIT */
/*
 * The scheduler layer's insides: tasks and their stacks (stack.c),
 * workers, run queues, stealing, park and wake, idling (sched.c), and the
 * interfaces of the parts that touch the outside world: the clock
 * (clock.h, clock.c) and the poller (poller.h, implemented above, in
 * poll_epoll.c). What the layers above use is in sched/task.h; this
 * header is for src/sched/ and the layers that look inside a worker
 * (observe, runtime).
 *
 * The thread rules are task.h's.
 */
#ifndef WEFT_SCHEDULER_H
#define WEFT_SCHEDULER_H
#include "context/ctx_type.h"
#include "sched/park.h"
#include "sched/spawn.h"
#include "sched/task.h"

#if defined(WEFT_TSAN)
/* TSan's fibers: a worker thread's own (tsan_fiber below, which runtime.c
 * sets) and its tasks' (weft_task.tsan_fiber). */
#include <sanitizer/tsan_interface.h>
#endif

/* ---- scheduler ---- */

typedef struct weft__queue { /* FIFO of tasks, owner only */
    weft_task *head, *tail;
    atomic_size_t len; /* owner writes (relaxed); weft_stats_get reads */
} weft__queue;

/* Chase-Lev work-stealing deque of tasks that have not started: the owner
 * pushes and pops at the bottom (LIFO, so a node's newest child runs next
 * and trees are walked depth first), thieves take from the top (oldest,
 * usually the largest piece of work). */
typedef struct weft__dqbuf {
    int64_t mask;                /* capacity - 1 */
    struct weft__dqbuf *retired; /* older buffers, freed with the deque */
    atomic_uint *stamp;          /* owner's tick when each was pushed */
    _Atomic(weft_task *) a[];
} weft__dqbuf;

typedef struct weft__deque {
    _Atomic int64_t top; /* thieves CAS it */
    char pad1[WEFT_CACHELINE - sizeof(int64_t)];
    _Atomic int64_t bottom;     /* owner only writes it */
    _Atomic(weft__dqbuf *) buf; /* owner replaces it when growing */
} weft__deque;

typedef struct weft__pool_local { /* per-worker free task slots (LIFO) */
    weft_task *free;
    size_t nfree;
    char *carve, *carve_end; /* untouched slots left in the newest chunk */
    char *carve_start;       /* that chunk's first slot */
} weft__pool_local;

/* A worker's counters, for weft_stats_get (stats.c). Each is written by
 * its worker alone and only grows, so that any reader sees each one
 * monotone. A switch is counted where it is made, as what it is: a park,
 * a yield, a task's exit (finished) or a start from the scheduler loop
 * (resumed); switches are their sum. */
typedef struct weft__wstats {
    _Atomic uint64_t parks;    /* switches away from a parking task */
    _Atomic uint64_t yields;   /* switches away from a yielding task */
    _Atomic uint64_t resumed;  /* switches from the scheduler loop */
    _Atomic uint64_t steals;   /* tasks it took from other deques */
    _Atomic uint64_t moved;    /* started tasks it handed to other workers */
    _Atomic uint64_t inbox;    /* tasks that came through its inbox */
    _Atomic uint64_t finished; /* tasks that finished here */
    _Atomic uint64_t idle_ns;  /* real time in the clock's idle_until */
    _Atomic uint64_t lag[WEFT_LAG_BUCKETS]; /* wake-to-run delays: sampled
                                             * wakes, late timers */
    _Atomic int64_t lag_max;                /* the largest delay put in lag[] */
} weft__wstats;

/* One wake in LAG_EVERY by a worker is timed (wake to run). */
#define WEFT__LAG_EVERY 1024
/* A timer wake this late (from its deadline to the task's run) is always
 * counted in the lag histogram (sched.c's timer_lag). */
#define WEFT__LAG_LATE_NS WEFT_MSEC

/* Adds n to a counter that only the calling thread writes: a relaxed load
 * and store, no read-modify-write. */
/* WEFT_STATS=OFF (CMake) compiles the counters and the lag samples out:
 * weft_stats_get then returns -ENOTSUP. */
#if defined(WEFT_NO_STATS)
#define WEFT__STATS 0
#else
#define WEFT__STATS 1
#endif

static inline __attribute__((always_inline)) void
weft__stat_add(_Atomic uint64_t *c, uint64_t n)
{
    if (WEFT__STATS)
        atomic_store_explicit(c,
                              atomic_load_explicit(c, memory_order_relaxed) + n,
                              memory_order_relaxed);
}

struct __attribute__((aligned(WEFT_CACHELINE))) weft_worker {
    /* ---- touched by other threads ---- */
    _Atomic(weft_task *) inbox; /* tasks woken by other threads (LIFO) */
    atomic_int sleeping;        /* how it sleeps (SLEEP_*), 0: awake */
    /* Asleep for DEFER_NS at most, tasks being queued on workers that keep
     * running them (weft__nap_deferring): a spawn need not wake it. */
    atomic_int deferring;
    /* Threads that are none of this runtime's workers (plain threads, the
     * blocking pool's, another runtime's workers) between their push to
     * the inbox and the end of their notify: weft_run frees nothing
     * before it is 0 again (weft__worker_quiesce). Here, on the line the
     * waker writes anyway. */
    atomic_int wakers;
    /* An idle worker's request for some of this one's movable yielded
     * tasks: its id + 1 (0: none); this worker serves it at its next fair
     * round (sched.c, share). Here, on the line others write anyway. */
    atomic_int share_to;
    char pad0[WEFT_CACHELINE - sizeof(void *) - 3 * sizeof(int)];
    weft__deque deque; /* not-started tasks; thieves steal */
    char pad1[WEFT_CACHELINE];

    /* ---- owner only: the scheduling loop's own, beside the running
     * task; up to WEFT__WORKER_PUB_OFF, where the public part follows ---- */
    _Alignas(WEFT_CACHELINE) union {
        struct {
            weft_task *runnext; /* woken by the running task: runs next */
            unsigned runnext_streak;
            /* seeded (rt->seeded) or with an instrument (instr): the park
             * and yield paths' one test for both (set at init) */
            bool unusual;
            /* the task that last parked or yielded here (mostly the one
             * that switched to the running task): compared with, never
             * read (make_ready_local) */
            weft_task *prev;
            weft__queue runq;   /* woken tasks, FIFO */
            weft__queue yieldq; /* tasks that yielded: after everything */
            weft_task *dead;    /* finished task to recycle after the switch;
                                 * with its low bit set, a compact task that
                                 * parked, noted then (stack.c) */
            atomic_uint tick;   /* scheduling decisions taken; thieves read
                                 * it, the watchdog too (stored with
                                 * release: see stats.c) */
            _Atomic uint64_t spawned; /* spawns, progress too (thieves read
                                       * it) */
            atomic_int notifying; /* in weft__worker_notify (thieves read) */
            unsigned rounds;      /* this worker's stealing rounds, ever */
            bool deferred;   /* its last nap deferred (weft__nap_deferring):
                              * its next look is one round */
            unsigned spawns; /* spawns by the running task since it resumed */
            uint64_t rng;    /* xorshift state: victims, seeded picks */
            weft__ctx sched_ctx; /* the scheduler loop's context */
        };
        char hot_room[WEFT__WORKER_PUB_OFF - WEFT__WORKER_SHARED];
    };

    /* ---- owner only: the part the layers above use (task.h), at
     * WEFT__WORKER_PUB_OFF (weft__wpub); its fields read here as the
     * worker's own (w->cur, w->wheel) ---- */
    union {
        struct weft__worker_pub pub;
        struct {
            WEFT__WORKER_PUB_FIELDS
        };
    };

    /* ---- owner only ---- */
    weft__pool_local pool;
    /* seeded scheduling: every runnable task lives in this array */
    weft_task **ready;
    size_t nready, capready;
    struct weft__seen *seen; /* per victim: what this worker saw of it,
                              * as a thief (the stealing rule) */
    /* spawns made on this worker: the ids of its tasks (weft_task.id) */
    uint64_t next_id;
    /* asserts: the task this worker switched away from, whose on_cpu the
     * other side of the switch clears (finish_switch) */
    weft_task *off_cpu;
    /* compact tasks parked here whose stacks are not given back yet: a
     * ring of WEFT__PEND slots, made at the first (stack.c) */
    weft_task **pend;
    unsigned pend_at, pend_live;

    /* idle with no timer and nothing pending, under rt->dmu */
    bool didle;
    unsigned dgen; /* times it became so, under rt->dmu */
    /* virtual clock bookkeeping, under rt->vmu */
    bool vidle;
    int64_t vnext;
    uint64_t vseen; /* weft__activity when its last grace began */

    /* Its thread as others may probe it (the stealing rule): set by the
     * worker when its loop starts (probe_ready: 1), the /proc file opened
     * by the first thief that needs it (-1: not yet, -2: cannot). */
    clockid_t cpu_clock; /* the thread's CPU-time clock */
    int tid;
    atomic_int probe_ready;
    atomic_int stat_fd; /* /proc/self/task/<tid>/stat */

    pthread_t thread;
    void *stack_lo; /* the thread's own stack, for ASan */
    size_t stack_size;
    void *altstack;      /* signal stack for reporting stack overflows */
    int64_t asleep_from; /* owner: when it last went to sleep (stats) */
    struct weft__exit_hook *exit_hooks; /* owner: weft_on_worker_exit's,
                                         * newest first (runtime.c) */
#if defined(WEFT_TSAN)
    void *tsan_fiber;
#endif

    /* Statistics (weft_stats_get, stats.c): written by the owner only,
     * with relaxed loads and stores (weft__stat_add), read by anyone. */
    unsigned wake_countdown; /* wakes by this worker until the next one
                              * that takes the slow path (wake_watch):
                              * 1 with an instrument, else the next lag
                              * sample */
    unsigned lag_left;       /* with an instrument: slow wakes to the next lag
                              * sample */
    weft__wstats st;

    /* The watchdog's hazard pointer (stats.c): the task whose name, spawn
     * site and id it is reading, or NULL; only the watchdog writes it. A
     * finishing task waits while it is itself (weft__watch_leave). */
    _Atomic(weft_task *) hazard;
    /* The running task once its function has returned and it has waited
     * for the hazard, until the worker leaves it (NULL otherwise): the
     * watchdog reads nothing of it. The owner writes it. These two last,
     * in the struct's padding: nothing above moves. */
    _Atomic(weft_task *) leaving;
};

_Static_assert(offsetof(struct weft_worker, pub) == WEFT__WORKER_PUB_OFF &&
                   offsetof(struct weft_worker, wheel) ==
                       WEFT__WORKER_PUB_OFF +
                           offsetof(struct weft__worker_pub, wheel),
               "weft__wpub: a worker's public part is at its offset");

typedef struct weft__pool_global {
    pthread_mutex_t mu;
    weft_task *free; /* warm slots handed back by workers */
    size_t nfree;
    void **cold; /* slots whose memory was given back (madvise) */
    size_t ncold, capcold;
    void **chunks; /* every mapping, unmapped at the end */
    size_t nchunks, capchunks;
    atomic_long guards_left; /* guard pages we may still create */
    size_t slot_size;        /* default slot size (stack + task) */
} weft__pool_global;

struct weft_runtime {
    /* The part the layers above use (task.h): first, so that a runtime's
     * address is its part's (weft__rtpub); its fields read here as the
     * runtime's own. */
    union {
        struct weft__runtime_pub pub;
        struct {
            WEFT__RUNTIME_PUB_FIELDS
        };
    };
    weft_worker *workers;
    weft_clock_kind clock;
    bool seeded;          /* seed != 0 and one worker: random picks */
    atomic_int nsleeping; /* workers asleep or about to be */
    atomic_int nspinning; /* workers looking for work to steal */
    _Atomic int64_t vnow; /* virtual clock */
    pthread_mutex_t vmu;  /* virtual clock: idle accounting */
    int nvidle;
    /* virtual clock: the real time it waits for descriptors and for
     * blocking calls before it jumps (weft_config.autojump_ns) */
    int64_t autojump_io_ns, autojump_pool_ns;
    /* what the scheduler calls at a task's exit: the scope layer's
     * (weft__scope_hooks), set once by runtime_new */
    weft__task_hooks hooks;
    /* weft_config.instrument, or the tracer's (observe.h) wrapping it;
     * NULL: none. Set before the workers, never changed. */
    const weft_instrument *instr;
    weft__pool_global pool;
    /* Deadlock detection (the observe layer's deadlock.c): the workers idle
     * with no timer and nothing pending outside (each one's didle), under
     * dmu. When the last one joins them it calls on_all_idle (NULL: no
     * detection), set once by the runtime before any task runs; it
     * returns what weft__idle_forever_enter does. */
    pthread_mutex_t dmu;
    int ndidle;
    int64_t (*on_all_idle)(weft_worker *w);
    /* Simulation's event log (src/sim): told each task a seeded worker
     * picks to run, on that worker. NULL: none. Set before any task runs. */
    void (*on_pick)(weft_worker *w, weft_task *t);
};
_Static_assert(offsetof(struct weft_runtime, pub) == 0,
               "weft__rtpub: a runtime's public part is its first member");

/* What a thief saw of a victim (its stealing rule, sched.c). */
struct weft__seen {
    unsigned progress; /* the victim's tick + spawns */
    unsigned round;    /* the thief's round that progress was first seen */
    int64_t cpu;       /* the victim thread's CPU time when the rounds ran
                        * out with no progress; -1: not read yet */
};

/* ---- sched.c: the worker ---- */

/* Decides, once per process, how parkers and cancellers fence. */
void weft__fence_init(void);
/* The clock's idle path calls these around a sleep with no timer: a
 * worker with nothing pending outside joins the deadlock books, and the
 * last one to join calls rt->on_all_idle. enter and again return how long
 * to sleep: WEFT_NEVER (until woken), a real time in ns after which to
 * call again (if nothing woke it), or 0: look for work now (a report may
 * have woken tasks). leave is called when the sleep ends. */
int64_t weft__idle_forever_enter(weft_worker *w);
int64_t weft__idle_forever_again(weft_worker *w);
void weft__idle_forever_leave(weft_worker *w);
/* Returns once no thread outside w's runtime's workers is inside a wake
 * of one of w's tasks (its push to w's inbox and the notify after it).
 * Called by weft_run after its workers have stopped, before it frees
 * them: from then on no such wake can start (no task is parked any more),
 * and one in flight ends within a few instructions and system calls. */
void weft__worker_quiesce(weft_worker *w);
int weft__worker_loop(weft_worker *w);
void *weft__worker_thread(void *arg);
int weft__yield(weft_worker *w);
/* Sets w up: 0, or -ENOMEM with w as weft__worker_fini can end it. */
int weft__worker_init(weft_runtime *rt, weft_worker *w, int id);
void weft__worker_fini(weft_worker *w);
void weft__task_main(void *arg);
/* Idling, for the clocks (clock.c), on w's thread. */
/* True if work may be there for w: its inbox, any deque, the end. */
bool weft__work_visible(weft_worker *w);
/* Looks for work before idling: spins and steals where it pays, polls
 * the poller while tasks wait for descriptors, gives idle slot memory
 * back. True if it found work. */
bool weft__idle_look(weft_worker *w);
/* Steals from any worker with tasks not started; true if it took some. */
bool weft__steal_any(weft_worker *w);
/* Flagged asleep (so that wakers wake it), sleeps up to `timeout` ns
 * unless work is visible or timeout <= 0; in the poller while w's tasks
 * wait for descriptors, else on its futex. True if the poller reported
 * events (dispatched already). */
bool weft__nap(weft_worker *w, int64_t timeout);
/* weft__nap for a worker whose look for work (weft__idle_look) found
 * none: if tasks are queued on other workers that keep running them (its
 * steals declined), it sleeps DEFER_NS at most and looks again, instead
 * of returning at once to spin, and spawns do not wake it meanwhile
 * unless their queue grows worth stealing. */
bool weft__nap_deferring(weft_worker *w, int64_t timeout);
/* A nap in parts, for a clock that flags the worker asleep under its own
 * lock: announce (returns how it will sleep), sleep (until woken or
 * timeout; true if the poller reported events), done. */
int weft__sleep_announce(weft_worker *w);
bool weft__sleep(weft_worker *w, int mode, int64_t timeout);
void weft__sleep_done(weft_worker *w);
/* Wakes w if it sleeps (the clock's books untouched). Any thread. */
void weft__wake_sleeper(weft_worker *w);

/* ---- clock.c ---- */

#include "sched/clock.h"

/* ---- stack.c ---- */

int weft__pool_init(weft__pool_global *g, size_t stack_size);
/* Stack sizes are scaled by this in sanitizer builds, whose frames
 * (redzones, the sanitizer's own hooks and signal handlers) are larger:
 * the default stack (runtime.c) and the least one (stack.c). */
#if defined(WEFT_ASAN) || defined(WEFT_TSAN)
#define WEFT__SAN_STACK_SCALE 4
#else
#define WEFT__SAN_STACK_SCALE 1
#endif
void weft__pool_fini(weft__pool_global *g);
void weft__pool_fini_local(weft_worker *w);
/* Gives idle slot memory back to the kernel; called by an idle worker. */
void weft__pool_trim(weft_worker *w);
/* Stacks registered with valgrind (whether or not it runs) and not yet
 * deregistered, in the whole process: 0 when no runtime runs. For tests. */
extern atomic_long weft__stacks_registered;
/* Compact tasks' stacks given back (weft__stack_release), ever, in the
 * whole process. For tests. */
extern atomic_long weft__stacks_released;
/* Overflow detection: the canary below the stack, and the signal handler. */
void weft__stack_check_slow(weft_task *t);
/* Called at every switch away from t. */
static inline void weft__stack_check(weft_task *t)
{
    if (!(t->flags & TASK_GUARDED))
        weft__stack_check_slow(t);
}
/* A compact task's stack (stack.c, "compact tasks"). weft__stack_park: t
 * parked with TASK_MAY_RELEASE and w has switched away from it: noted in
 * w's ring, whose slot's previous task has its stack given back (its used
 * part copied out, its pages given back). weft__stack_resume: before the
 * switch back to t (pending or released): out of the ring, or its stack
 * copied in again. weft__stack_idle: w has nothing to run: every pending
 * stack given back. */
#define WEFT__PEND 64
void weft__stack_park(weft_worker *w, weft_task *t);
void weft__stack_resume(weft_worker *w, weft_task *t);
void weft__stack_idle(weft_worker *w);
/* Held by a walk of a parked compact task's stack (observe/where.c) while
 * it reads the task's image: its worker does not replace the image
 * meanwhile. Blocks, briefly; never held across a switch. */
void weft__image_lock(void);
void weft__image_unlock(void);
int weft__overflow_handler_install(void);
void weft__overflow_handler_remove(void);
void weft__stack_report_overflow(const weft_task *t);

#endif
