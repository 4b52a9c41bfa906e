/* SPDX-License-Identifier: MIT */
/*
 * The scheduler layer: tasks and their stacks (stack.c), workers, run
 * queues, stealing, park and wake, idling (sched.c), and the interfaces of
 * the parts that touch the outside world: the clock (clock.h, clock.c)
 * and the poller (poller.h, implemented above, in poll_epoll.c).
 *
 * Thread rules, stated once:
 * - A task is run by one worker for its whole life, from its first run on.
 *   Everything in a weft_task marked "owner" is touched only by that worker
 *   (or, before the task first runs, by the worker that holds it).
 * - A worker's run queues, timer wheel and pools are touched only by the
 *   worker's thread. Other threads reach a worker through its inbox (a
 *   lock-free stack of tasks to make runnable) and its sleeping flag.
 * - A scope's fields are guarded by its lock, except `cancelled`, which is
 *   atomic so blocking calls can read it without the lock.
 */
#ifndef WEFT_SCHEDULER_H
#define WEFT_SCHEDULER_H

#include <pthread.h>

#include "context/ctx.h"
#include "timer/timer.h"

/* ---- tasks ---- */

/* The park word of a task: (generation << 2) | state. A park takes a new
 * generation, so a waker holding the token of an older park can never wake
 * a newer one: waking is a CAS from the exact token to "running". */
enum {
    PARK_RUNNING = 0,
    PARK_CANCELLABLE = 1, /* parked; cancellation may wake it */
    PARK_FIRM = 2,        /* parked; only its event may wake it (join) */
};
#define PARK_STATE(w) ((unsigned)((w)&3u))

enum {
    TASK_STARTED = 1u << 0,     /* has run: pinned to `worker` */
    TASK_GUARDED = 1u << 1,     /* its stack has a guard page below it */
    TASK_CUSTOM = 1u << 2,      /* slot mmap'd for this task alone */
    TASK_CHECK_BELOW = 1u << 3, /* no guard: check the canary below */
    TASK_CHECK_OWN = 1u << 4,   /* no guard, no slot below: own canary */
    TASK_WITHDRAWN = 1u << 5,   /* cancelled alone, through its handle, and
                                 * returned -ECANCELED: its scope's policy
                                 * does not take that for its result */
    TASK_LAG_TIMER = 1u << 6,   /* lag_since is the deadline of the timer
                                 * that woke it: counted if late (sched.c,
                                 * timer_lag) */
};

/* A task and its stack share one slot of memory: the struct sits at the top
 * of the slot and the stack grows down from just below it, so a parked task
 * that used little stack costs one page. */
/* Bytes of a task for the layers above the scheduler (weft_task.ext). */
#define WEFT__TASK_EXT 104
/* The offset after a layer's part of ext (end, in bytes), rounded up so
 * that the next layer's part is aligned. */
#define WEFT__EXT_NEXT(end) (((end) + 7u) & ~(size_t)7u)

struct weft_task {
    weft__ctx ctx;         /* owner: saved registers while not running */
    weft_worker *worker;   /* set when first run; never changes afterwards */
    weft_task *next;       /* owner: link in a run queue, inbox or free list */
    _Atomic uint64_t park; /* park word (see above); any thread CASes it */
    int wake_code;     /* result of the last park, set by the winning waker */
    unsigned flags;    /* TASK_* */
    int64_t lag_since; /* set by the waker of a sampled wake (real time,
                        * ns), cleared when it runs: the lag histogram;
                        * 0: not sampled. Not a flag: the waker may write
                        * it while t still switches away (flags are read
                        * there) */

    weft__timer timer; /* owner: deadline of the current park */

    /* The cancel word of the scope the task runs in now: the scope layer
     * points it at its innermost open scope's cancel reason (scope.h)
     * whenever that changes, with release; nonzero there: cancelled. The
     * scheduler and the wait layer read it (park, checkpoint) without
     * knowing scopes. NULL before the task is registered in a scope. */
    _Atomic(atomic_int *) cancel;

    weft_fn fn;
    void *arg;
    /* For diagnostics: written at spawn (relaxed), read by its worker and
     * by the watchdog (stats.c) while it runs, under the worker's hazard
     * pointer: a finishing task waits for that read to end
     * (weft__watch_leave), so the slot is not laid out again or unmapped,
     * nor the name freed, under it. */
    const char *_Atomic name; /* may be NULL */
    const char *_Atomic file; /* spawn site */
    atomic_int line;
    int status; /* fn's return value */

    char *stack_lo;   /* lowest usable stack byte (above the guard page) */
    char *slot_lo;    /* start of the slot's mapping (the guard, if any) */
    size_t slot_size; /* bytes from slot_lo to the slot's end */

    _Atomic uint64_t id; /* unique in the process: the spawning worker's
                          * id + 1 in the high 24 bits, its count of
                          * spawns below (0 in the high bits: made outside
                          * a worker); set at spawn (relaxed: the slice
                          * monitor reads it while the task runs) */

    /* valgrind's id of the stack while the slot is laid out (stack.c) */
    unsigned vg_stack;

#if defined(WEFT_TSAN)
    void *tsan_fiber;
#endif

    /* The per-task state of the layers above, which the scheduler neither
     * reads nor resets (Linux's skb->cb): each layer lays its own struct
     * at an offset that follows the layer below's, checks with a static
     * assert that it fits, and reaches it through an accessor in its
     * header (weft__wait_rec, weft__scope_of_task, weft__sync_of_task,
     * weft__actor_of_task). Each layer sets up and resets its part itself,
     * on its own spawn path or its own calls. A slot's first life finds it
     * zeroed (fresh memory). */
    _Alignas(8) unsigned char ext[WEFT__TASK_EXT];
};

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

/* Work outside the runtime that a parked task waits for: the kernel's
 * readiness of a descriptor (the worker's poller must be read, and slept
 * in), a call on the blocking pool. */
enum { WEFT__PENDING_IO = 0, WEFT__PENDING_POOL = 1, WEFT__PENDING_KINDS };

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
    /* Threads that are none of this runtime's workers (plain threads, the
     * blocking pool's, another runtime's workers) between their push to
     * the inbox and the end of their notify: weft_run frees nothing
     * before it is 0 again (weft__worker_quiesce). Here, on the line the
     * waker writes anyway. */
    atomic_int wakers;
    char pad0[WEFT_CACHELINE - sizeof(void *) - 2 * sizeof(int)];
    weft__deque deque; /* not-started tasks; thieves steal */
    char pad1[WEFT_CACHELINE];

    /* ---- owner only ---- */
    weft_runtime *rt;
    int id;
    /* rt->instr, at hand (set at init, never changed): the one branch
     * each instrument hook point pays when there is none; and the tasks
     * prepared on this worker, for their ids (weft_task_info.id) */
    const weft_instrument *instr;

    /* running task, NULL in the scheduler loop; the owner writes it
     * (relaxed), the watchdog reads it */
    _Atomic(weft_task *) cur;
    weft_task *runnext; /* woken by the running task: runs next */
    unsigned runnext_streak;
    weft__queue runq;   /* woken tasks, FIFO */
    weft__queue yieldq; /* tasks that yielded: after everything else */
    weft_task *dead;    /* finished task to recycle after the switch */
    atomic_uint tick;   /* scheduling decisions taken; thieves read it, the
                         * watchdog too (stored with release: see stats.c) */
    _Atomic uint64_t spawned; /* spawns, progress too (thieves read it) */
    atomic_int notifying;     /* in weft__worker_notify (thieves read it) */
    unsigned rounds;          /* this worker's stealing rounds, ever */
    unsigned spawns;          /* spawns by the running task since it resumed */
    uint64_t rng;             /* xorshift state: victims, seeded picks */
    weft__ctx sched_ctx;      /* the scheduler loop's context */
    weft__wheel wheel;
    weft__pool_local pool;
    /* seeded scheduling: every runnable task lives in this array */
    weft_task **ready;
    size_t nready, capready;
    struct weft__seen *seen; /* per victim: what this worker saw of it,
                              * as a thief (the stealing rule) */
    /* spawns made on this worker: the ids of its tasks (weft_task.id) */
    uint64_t next_id;
    /* idle with no timer and nothing pending, under rt->dmu */
    bool didle;
    unsigned dgen; /* times it became so, under rt->dmu */
    /* virtual clock bookkeeping, under rt->vmu */
    bool vidle;
    int64_t vnext;

    /* its poller (poller.h), made by io.c at the first wait for a
     * descriptor; its state is the implementation's */
    struct weft__poller *poller;
    /* tasks of this worker parked on work outside the runtime, per
     * WEFT__PENDING_* (weft__pending_add); written by the owner only,
     * read by others only when idle (the virtual clock) */
    atomic_int pending[WEFT__PENDING_KINDS];

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

/* What a thief saw of a victim (its stealing rule, sched.c). */
struct weft__seen {
    unsigned progress; /* the victim's tick + spawns */
    unsigned round;    /* the thief's round that progress was first seen */
    int64_t cpu;       /* the victim thread's CPU time when the rounds ran
                        * out with no progress; -1: not read yet */
};

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

/* Bytes of a runtime for the layers above the scheduler (weft_runtime.ext). */
#define WEFT__RT_EXT 176

/* The layer above the scheduler, as the scheduler sees it. */
typedef struct weft__task_hooks {
    /* t's function has returned (t->status holds its result): the layers
     * above finish it (the scopes it left open, its handle, its home
     * scope's books). On t, which the scheduler then switches away from
     * for good and recycles. */
    void (*exit)(weft_task *t);
    /* What t, parked (or parking), waits on: the wait layer's kind
     * (weft__wait_kind), and the object in *obj. For the instrument's park
     * callback: cold. */
    int (*wait_of)(const weft_task *t, const void **obj);
} weft__task_hooks;

struct weft_runtime {
    int nworkers;
    weft_worker *workers;
    weft_clock_kind clock;
    uint64_t seed;
    bool seeded; /* seed != 0 and one worker: random picks */
    atomic_int done;
    atomic_int nsleeping; /* workers asleep or about to be */
    atomic_int nspinning; /* workers looking for work to steal */
    /* the clock's implementation (clock.h), picked once from `clock` */
    const struct weft__clock_ops *clock_ops;
    _Atomic int64_t vnow; /* virtual clock */
    pthread_mutex_t vmu;  /* virtual clock: idle accounting */
    int nvidle;
    /* what the scheduler calls at a task's exit: the scope layer's
     * (weft__scope_hooks), set once by runtime_new */
    weft__task_hooks hooks;
    /* weft_config.instrument, or the tracer's (observe.h) wrapping it;
     * NULL: none. Set before the workers, never changed. */
    const weft_instrument *instr;
    weft__pool_global pool;
    bool pinned;    /* pin_workers: worker i on the i-th CPU of `cpus` */
    cpu_set_t cpus; /* the CPUs weft_run's caller may run on */
    /* Deadlock detection (the observe layer's deadlock.c): the workers idle
     * with no timer and nothing pending outside (each one's didle), under
     * dmu. When the last one joins them it calls on_all_idle (NULL: no
     * detection), set once by the runtime before any task runs; it
     * returns what weft__idle_forever_enter does. */
    pthread_mutex_t dmu;
    int ndidle;
    int64_t (*on_all_idle)(weft_worker *w);

    /* The per-runtime state of the layers above (as weft_task.ext): each
     * layer lays its struct at an offset that follows the layer below's
     * (scope, sync, io, actor, observe, runtime), checks that it fits,
     * and reaches it through an accessor in its header (weft__scope_rt,
     * weft__sync_rt, weft__io_rt, weft__actor_rt, weft__observe_rt,
     * weft__runtime_rt). Zero when the runtime is made; the runtime layer
     * sets up and frees each part through its layer's header. */
    _Alignas(16) unsigned char ext[WEFT__RT_EXT];
};

/* ---- the current worker ---- */

extern WEFT_TLS weft_worker *weft__tl_worker;

static inline weft_task *weft__current(void)
{
    weft_worker *w = weft__tl_worker;
    return w ? ld_rlx(&w->cur) : NULL;
}

/* ---- predicates for asserts (WEFT_ASSERT) ---- */

/* t is the task running on this thread's worker. */
static inline bool weft__task_is_current(const weft_task *t)
{
    weft_worker *w = weft__tl_worker;
    return t != NULL && w != NULL && ld_rlx(&w->cur) == t;
}

/* t's park word says parked (prepared, not yet claimed). */
static inline bool weft__task_parked(const weft_task *t)
{
    return PARK_STATE(ld_rlx(&t->park)) != PARK_RUNNING;
}

/* ---- instrument hooks (weft_instrument) ----
 * Each hook point reads w->instr once (NULL: nothing more) and calls the
 * slow part below, which fills a weft_task_info and calls the callback. */

static inline void weft__task_info(const weft_task *t, weft_task_info *i)
{
    i->id = t->id;
    i->name = t->name;
    i->file = t->file;
    i->line = t->line;
    i->worker = (t->flags & TASK_STARTED) ? t->worker->id : -1;
}
/* A task's id (weft_task.id, weft_task_info.id): the spawning worker's
 * index + 1 above WEFT__ID_BITS, that worker's count below (shown as
 * "W.N"); 0 above for the runtime's own tasks, made off the workers. */
#define WEFT__ID_BITS 40
/* The calls, cold (sched.c): spawn (on the spawner's thread; parent may
 * be NULL), park (t stops running: what it waits on, or yield), and
 * scope_cancel (s cancelled for reason by the running task, if any). */
void weft__instr_spawn(const weft_instrument *in, weft_task *t,
                       weft_task *parent);
void weft__instr_park(const weft_instrument *in, weft_task *t, int kind,
                      const void *obj);
void weft__instr_scope_cancel(const weft_instrument *in, weft_scope *s,
                              int reason, weft_task *by);

/* ---- sched.c ---- */

/* Parks the running task. Before calling, the caller has taken a token with
 * weft__park_prepare() and published it where wakers find it (under the
 * primitive's lock, released before this call). Returns the wake code: 0 or
 * the waker's code for an event, -ETIMEDOUT for the deadline, -ECANCELED for
 * cancellation (only if the token is cancellable). */
uint64_t weft__park_prepare(weft_task *t, bool cancellable);
/* Decides, once per process, how parkers and cancellers fence. */
void weft__fence_init(void);
/* The canceller's side of the park/cancel Dekker pair. */
void weft__cancel_fence(void);
int weft__park_commit(weft_worker *w, weft_task *t, int64_t deadline);
/* Wakes the task parked with `token`, with `code` as park's result. Returns
 * true if this call woke it, false if the park was already over (someone
 * else won). Any thread. */
bool weft__wake(weft_task *t, uint64_t token, int code);
/* weft__wake in two steps, for wakers that must hand data over between
 * winning the race and letting the task run: claim (true: this caller won;
 * the task stays parked until finish), then finish (sets the wake code and
 * queues it). Any thread. */
bool weft__wake_claim(weft_task *t, uint64_t token);
void weft__wake_finish(weft_task *t, int code);
/* A random number from the calling worker's generator (seeded runs stay
 * reproducible), or a thread-local one outside a runtime. */
uint64_t weft__rand(void);
/* Wakes t if it is parked cancellably in a cancelled scope. Any thread. */
void weft__wake_if_cancelled(weft_task *t);
/* The clock's idle path calls these around a sleep with no timer: a
 * worker with nothing pending outside joins the deadlock books, and the
 * last one to join calls rt->on_all_idle. enter and again return how long
 * to sleep: WEFT_NEVER (until woken), a real time in ns after which to
 * call again (if nothing woke it), or 0: look for work now (a report may
 * have woken tasks). leave is called when the sleep ends. */
int64_t weft__idle_forever_enter(weft_worker *w);
int64_t weft__idle_forever_again(weft_worker *w);
void weft__idle_forever_leave(weft_worker *w);
/* Work was made for w by another thread: w leaves the clock's idle books
 * and is woken if it sleeps. Any thread. */
void weft__worker_notify(weft_worker *w);
/* Returns once no thread outside w's runtime's workers is inside a wake
 * of one of w's tasks (its push to w's inbox and the notify after it).
 * Called by weft_run after its workers have stopped, before it frees
 * them: from then on no such wake can start (no task is parked any more),
 * and one in flight ends within a few instructions and system calls. */
void weft__worker_quiesce(weft_worker *w);
/* Queues t on worker w, from w's own thread (or before w runs). */
void weft__make_ready(weft_worker *w, weft_task *t);
int weft__worker_loop(weft_worker *w);
void *weft__worker_thread(void *arg);
int weft__yield(weft_worker *w);
void weft__worker_init(weft_runtime *rt, weft_worker *w, int id);
void weft__worker_fini(weft_worker *w);
void weft__task_main(void *arg);
/* Resets a slot's task for a new life running fn(arg). */
void weft__task_prepare(weft_task *t, weft_fn fn, void *arg,
                        const weft_spawn_opts *o, const char *file, int line);
/* t, the running task, is finishing (its function has returned): the
 * watchdog (stats.c) stops reading its name and spawn site, and one read
 * in progress is waited for. Called by the scheduler before the layers
 * above finish t, and by them again after a park there (joining the
 * scopes t left open), before t's end is known. On t's worker. */
void weft__watch_leave(weft_worker *w, weft_task *t);
/* A task just made on w's thread (prepared, registered in its scope)
 * becomes runnable: on `pin` if not NULL (nobody steals it), else in w's
 * deque, where idle workers may steal it (one asleep is woken). A
 * spawner that has spawned a budget's worth since it last ran yields. */
void weft__task_submit(weft_worker *w, weft_task *t, weft_worker *pin);

/* Pending work outside the runtime (WEFT__PENDING_*): a task of w's about
 * to park on it counts itself (+1) before the park and uncounts itself
 * (-1) after, on w's thread. An idle worker with descriptor waits polls
 * and sleeps in its poller; the virtual clock gives both kinds a grace
 * of real time before it jumps. Plain loads and stores of w's own
 * counter: no shared atomic on the path. */
static inline void weft__pending_add(weft_worker *w, int kind, int delta)
{
    WEFT_ASSERT_MSG(w == weft__tl_worker &&
                        ld_rlx(&w->pending[kind]) + delta >= 0,
                    "a pending count changed off its worker, or below 0");
    st_rlx(&w->pending[kind], ld_rlx(&w->pending[kind]) + delta);
}
/* w's own count (w's thread). */
static inline int weft__pending(weft_worker *w, int kind)
{
    return ld_rlx(&w->pending[kind]);
}
/* The count over every worker of rt (a snapshot; any thread). */
int weft__pending_all(weft_runtime *rt, int kind);

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

/* ---- the poller: the interface the scheduler and io.c use ---- */

#include "sched/poller.h"

/* ---- stack.c ---- */

int weft__pool_init(weft__pool_global *g, size_t stack_size);
void weft__pool_fini(weft__pool_global *g);
void weft__pool_fini_local(weft_worker *w);
/* A fresh task in a slot with a stack of stack_size (0: default). */
weft_task *weft__task_alloc(weft_worker *w, size_t stack_size);
void weft__task_free(weft_worker *w, weft_task *t);
/* Gives idle slot memory back to the kernel; called by an idle worker. */
void weft__pool_trim(weft_worker *w);
/* Stacks registered with valgrind (whether or not it runs) and not yet
 * deregistered, in the whole process: 0 when no runtime runs. For tests. */
extern atomic_long weft__stacks_registered;
/* Overflow detection: the canary below the stack, and the signal handler. */
void weft__stack_check_slow(weft_task *t);
/* Called at every switch away from t. */
static inline void weft__stack_check(weft_task *t)
{
    if (!(t->flags & TASK_GUARDED))
        weft__stack_check_slow(t);
}
int weft__overflow_handler_install(void);
void weft__overflow_handler_remove(void);
void weft__stack_report_overflow(const weft_task *t);

/* ---- the cancel word of the task's current scope ---- */

/* True if t's current scope is cancelled (weft_task.cancel), read by t
 * itself (its own cancel pointer, relaxed). Hot: every park and
 * checkpoint reads it. */
static inline bool weft__task_cancelled(const weft_task *t)
{
    atomic_int *c = ld_rlx(&t->cancel);
    return c != NULL && ld_sc(c) != 0;
}

/* Entry check of a blocking call: -EPERM outside a task, -ECANCELED in a
 * cancelled scope (every blocking call is a checkpoint, as in Trio, even
 * one that could complete at once), else 0. */
static inline int weft__checkpoint(void)
{
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    return weft__task_cancelled(t) ? -ECANCELED : 0;
}

#endif
