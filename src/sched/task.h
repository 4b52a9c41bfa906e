/* SPDX-License-Identifier: MIT */
/*
 * The scheduler layer as the layers above see it: a task, its worker's
 * few public bits, the runtime's shared part, the running task and its
 * cancel word. Park and wake are in sched/park.h, spawn's steps, the
 * instrument hooks and the layer above's hooks in sched/spawn.h. The
 * scheduler's own
 * insides (run queues, the deque, idling, statistics, the stack pool)
 * are in sched/scheduler.h, which only src/sched/ and the layers that
 * look inside it (observe, runtime) include.
 *
 * Thread rules, stated once:
 * - A task is run by one worker for its whole life, from its first run on,
 *   unless it may move (weft_task.mobile): then the worker that holds it
 *   while it is runnable and not running may hand it to another (sched.c,
 *   "moves"), which becomes its worker. Everything in a weft_task marked
 *   "owner" is touched only by its worker of the moment (or, before the
 *   task first runs, by the worker that holds it).
 * - A worker's run queues, timer wheel and pools are touched only by the
 *   worker's thread. Other threads reach a worker through its inbox (a
 *   lock-free stack of tasks to make runnable) and its sleeping flag.
 */
#ifndef WEFT_SCHED_TASK_H
#define WEFT_SCHED_TASK_H

#include <pthread.h>

#include "context/ctx_type.h"
#include "timer/timer_type.h"

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
    TASK_STARTED = 1u << 0,     /* has run: on `worker` (for life, unless
                                 * it may move: mobile) */
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
    /* Compact tasks (weft_spawn_opts.compact; stack.c, "compact tasks"):
     * the struct is on the heap, followed by its weft__compact record,
     * and the stack is a borrowed slot whose pages are given back while
     * the task is parked in a wait that allows it. */
    TASK_COMPACT = 1u << 7,
    TASK_RELEASED = 1u << 8,    /* owner: its stack's used part is in its
                                 * record's image, its pages given back */
    TASK_MAY_RELEASE = 1u << 9, /* owner: set by the wait layer around a
                                 * park during which nothing but the task
                                 * itself touches its stack */
    TASK_PENDING = 1u << 10,    /* owner: parked so, in its worker's ring
                                 * of stacks to give back (stack.c) */
};

/* weft_task.ext, the per-task state of the layers above the scheduler: a
 * slot per layer, each following the one below; each layer checks with a
 * static assert that its struct fits in its slot. Offsets in bytes. */
#define WEFT__EXT_WAIT                                                         \
    0u /* struct weft__wait_rec (wait/record.h); room for a                    \
        * pointer-sized kind */
#define WEFT__EXT_SCOPE 48u  /* weft__task_scope (scope.h) */
#define WEFT__EXT_SYNC 96u   /* weft__task_sync (sync.h) */
#define WEFT__EXT_ACTOR 104u /* weft__task_actor (actor.h) */
#define WEFT__TASK_EXT 112u

/* A task and its stack share one slot of memory: the struct sits at the top
 * of the slot and the stack grows down from just below it, so a parked task
 * that used little stack costs one page. */
struct weft_task {
    weft__ctx ctx;         /* owner: saved registers while not running */
    weft_worker *worker;   /* set when first run; changes only when the task
                            * moves (mobile), by the worker that hands it
                            * over, while it is not running */
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

    /* The cancel word of the scope the task runs in now: the scope layer
     * points it at its innermost open scope's cancel reason (scope.h)
     * whenever that changes, with release; nonzero there: cancelled. The
     * scheduler and the wait layer read it (park, checkpoint) without
     * knowing scopes. NULL before the task is registered in a scope.
     * Here, on the line of the wait record and mobile: every park reads
     * it, and the fields before it are read at spawn and by diagnostics. */
    _Atomic(atomic_int *) cancel;

    /* Moving between workers (sched.c, "moves"). mobile: WEFT__MOBILE_*
     * bits, set at spawn (TASK) or by the task itself while it runs
     * (IDLE: an actor between two messages); read by its waker after the
     * claim of its park, and by its worker while it is not running. Here,
     * on a line every park touches, not in the cold tail: an actor's
     * wait writes it twice. */
    uint8_t mobile;
    uint8_t streak;  /* its waker's: parks in a row woken from far_w */
    uint16_t anchor; /* the task's own: what ties it to its worker now (a
                      * scope deadline on the wheel, work pending there) */
    int far_w;       /* the worker that woke its last park from afar */

#if defined(WEFT_TSAN)
    void *tsan_fiber;
#endif

    /* The per-task state of the layers above, which the scheduler neither
     * reads nor resets (Linux's skb->cb): each layer lays its own struct
     * at an offset that follows the layer below's, checks with a static
     * assert that it fits, and reaches it through an accessor in its
     * header (weft__wait_rec, weft__scope_of_task, weft__sync_of_task,
     * weft__actor_of_task); WEFT__EXT_* above give the slots. Each layer
     * sets up and resets its part itself, on its own spawn path or its own
     * calls. A slot's first life finds it zeroed (fresh memory). */
    _Alignas(8) unsigned char ext[WEFT__TASK_EXT];

    /* After ext, which starts at byte 144 of the cache-line-aligned
     * struct (152 with TSan's fiber): the part of the wait record every
     * park writes (kind, object, name, instant) shares one line; an
     * assert beside the record (wait/record.h) keeps it so. */
    _Atomic uint64_t id; /* unique in the process: the spawning worker's
                          * id + 1 in the high 24 bits, its count of
                          * spawns below (0 in the high bits: made outside
                          * a worker); set at spawn (relaxed: the slice
                          * monitor reads it while the task runs) */

    /* valgrind's id of the stack while the slot is laid out (stack.c) */
    unsigned vg_stack;

    /* The stack (cold: read at spawn, exit and stack checks). */
    char *stack_lo;   /* lowest usable stack byte (above the guard page) */
    char *stack_hi;   /* the stack's top: the task itself (its struct sits
                       * above its stack), or a compact task's borrowed
                       * slot's own struct */
    char *slot_lo;    /* start of the slot's mapping (the guard, if any) */
    size_t slot_size; /* bytes from slot_lo to the slot's end */

    uint64_t far_gen;     /* moves: the park generation of far_w's wake */
    weft_worker *move_to; /* the waker's worker, asking for it (its
                           * worker reads it when the inbox gives it t) */
    weft_worker *home;    /* asserts: where it first ran (set only with
                           * them), to check that a task that may not
                           * move runs nowhere else */
    atomic_int on_cpu;    /* asserts: running (1) or switching away */
};

/* ---- compact tasks (stack.c) ----
 * A compact task's struct is on the heap, with this record after it. Its
 * stack is a slot of the pool, borrowed: the slot's own struct sits at
 * the stack's top (stack_hi). When it parks in a wait that lets it
 * (TASK_MAY_RELEASE: the wait layer has moved everything another thread
 * may touch off the stack, into `ext`), its worker notes it in a ring of
 * such parks (TASK_PENDING); the stack is given back (its used part, from
 * the saved stack pointer to the top, copied into `img`, the slot's pages
 * given back with madvise: TASK_RELEASED) once the ring comes round to it
 * again, or when the worker goes idle. The switch back to it copies the
 * image in again, at the same addresses, or, if it was still pending,
 * only takes it out of the ring. A hole in the used part, bytes the wait
 * layer says are dead while it is parked (the primitive's own waiter,
 * stood in for by the one in ext), is left out. Owner only. */
#define WEFT__COMPACT_EXT 112u /* the wait layer's (wait/compact.c) */
typedef struct weft__compact {
    char *img;         /* the image of a released stack (kept: reused) */
    uint32_t len, cap; /* its bytes, and the buffer's */
    /* 0, or the hole: dead bytes [stack_hi - hole, + hole_len) */
    uint32_t hole;
    uint16_t hole_len;
    uint16_t pend; /* TASK_PENDING: its slot in the worker's ring */
    _Alignas(8) unsigned char ext[WEFT__COMPACT_EXT];
} weft__compact;

/* Where a compact task's record starts: right after its struct, which
 * one allocation holds with it (stack.c). */
#define WEFT__COMPACT_HEAD ((sizeof(weft_task) + 7) / 8 * 8)

/* A compact task's record (t->flags & TASK_COMPACT). */
static inline weft__compact *weft__compact_of(weft_task *t)
{
    WEFT_ASSERT(t->flags & TASK_COMPACT);
    return (weft__compact *)(void *)((char *)t + WEFT__COMPACT_HEAD);
}

/* Whether a task can move between workers here: only where every read of
 * a thread-local variable goes through the thread's own segment register
 * (x86-64's %fs). On other machines (aarch64's tpidr_el0) compilers keep
 * the thread pointer in a register across calls, so weft's own code after
 * a switch to another thread would read the first thread's variables:
 * there, movable is accepted and tasks stay where they start. */
#if defined(__x86_64__)
#define WEFT__CAN_MOVE 1
#else
#define WEFT__CAN_MOVE 0
#endif

/* weft_task.mobile */
enum {
    WEFT__MOBILE_TASK = 1, /* opted in (weft_spawn_opts.movable, a scope's) */
    WEFT__MOBILE_IDLE = 2, /* an actor waiting for its next message */
    WEFT__MOBILE_EVER = 4, /* it was one of those once (asserts) */
};

/* The running task t is tied to its worker (delta 1) by something kept
 * there (a timer on its wheel, a count of pending work), or no longer
 * (-1): it does not move while tied. */
static inline void weft__task_anchor(weft_task *t, int delta)
{
    t->anchor = (uint16_t)(t->anchor + delta);
}

/* A task's id (weft_task.id, weft_task_info.id): the spawning worker's
 * index + 1 above WEFT__ID_BITS, that worker's count below (shown as
 * "W.N"); 0 above for the runtime's own tasks, made off the workers. */
#define WEFT__ID_BITS 40

/* ---- the worker's public part ---- */

/* Work outside the runtime that a parked task waits for: the kernel's
 * readiness of a descriptor (the worker's poller must be read, and slept
 * in), a call on the blocking pool. */
enum { WEFT__PENDING_IO = 0, WEFT__PENDING_POOL = 1, WEFT__PENDING_KINDS };

/* The part of a worker that the layers above use, through weft__wpub(w),
 * at this offset in the worker (scheduler.h checks it: the lines other
 * threads write come first, then the scheduling loop's own fields, beside
 * the running task). The fields are
 * listed once, here, and the worker takes them both as this struct and,
 * unnamed, as its own members. Owner only, but for cur. */
#define WEFT__WORKER_SHARED (4 * WEFT_CACHELINE) /* the lines others write */
#define WEFT__WORKER_PUB_OFF                                                   \
    ((WEFT__WORKER_SHARED + 120 + sizeof(weft__ctx) + WEFT_CACHELINE - 1) /    \
     WEFT_CACHELINE * WEFT_CACHELINE)
#define WEFT__WORKER_PUB_FIELDS                                                \
    weft_runtime *rt;                                                          \
    int id;                                                                    \
    /* blocking calls the running task may still make without waiting          \
     * before one yields (weft__checkpoint; an actor's message taken           \
     * without a wait counts too): set to WEFT__BUDGET at every switch         \
     * to a task; the owner only */                                            \
    unsigned budget;                                                           \
    /* rt->instr, at hand (set at init, never changed): the one branch         \
     * each instrument hook point pays when there is none */                   \
    const weft_instrument *instr;                                              \
    /* running task, NULL in the scheduler loop; the owner writes it           \
     * (relaxed), the watchdog reads it */                                     \
    _Atomic(weft_task *) cur;                                                  \
    /* its poller (poller.h), made by io.c at the first wait for a             \
     * descriptor; its state is the implementation's */                        \
    struct weft__poller *poller;                                               \
    /* tasks of this worker parked on work outside the runtime, per            \
     * WEFT__PENDING_* (weft__pending_add); written by the owner only,         \
     * read by others only when idle (the virtual clock) */                    \
    atomic_int pending[WEFT__PENDING_KINDS];                                   \
    /* its timers: the parks' deadlines, the scopes' (elapsed: the time        \
     * the worker has reached, which waits compare deadlines with) */          \
    weft__wheel wheel;

struct weft__worker_pub {
    WEFT__WORKER_PUB_FIELDS
};

/* w's public part. */
static inline struct weft__worker_pub *weft__wpub(weft_worker *w)
{
    WEFT_ASSERT(w != NULL);
    return (struct weft__worker_pub *)(void *)((char *)w +
                                               WEFT__WORKER_PUB_OFF);
}

/* ---- the runtime's shared part ---- */

/* weft_runtime.ext, the per-runtime state of the layers above the
 * scheduler, a slot per layer as in weft_task.ext (a mutex's size is the
 * platform's). */
#define WEFT__RT_SCOPE 0u /* struct weft__scope_rt (scope.h) */
#define WEFT__RT_SYNC (WEFT__RT_SCOPE + 24u + sizeof(pthread_mutex_t))
#define WEFT__RT_IO (WEFT__RT_SYNC + 8u)
#define WEFT__RT_ACTOR (WEFT__RT_IO + 24u + sizeof(pthread_mutex_t))
#define WEFT__RT_OBSERVE (WEFT__RT_ACTOR + 8u)
#define WEFT__RT_RUNTIME (WEFT__RT_OBSERVE + 24u)
#define WEFT__RT_EXT (WEFT__RT_RUNTIME + 8u)

/* The part of a runtime that the layers above use, through
 * weft__rtpub(rt): the runtime's first member (scheduler.h), listed once
 * here as for the worker. */
#define WEFT__RUNTIME_PUB_FIELDS                                               \
    int nworkers;                                                              \
    uint64_t seed;                                                             \
    atomic_int done; /* 1 once the root scope has finished */                  \
    bool sim; /* simulation (weft_config.sim): nothing real is touched */      \
    /* the clock's implementation (clock.h), picked once from `clock` */       \
    const struct weft__clock_ops *clock_ops;                                   \
    bool pinned;    /* pin_workers: worker i on the i-th CPU of `cpus` */      \
    cpu_set_t cpus; /* the CPUs weft_run's caller may run on */                \
    /* The per-runtime state of the layers above (as weft_task.ext): each      \
     * layer lays its struct in its slot (WEFT__RT_*), checks that it          \
     * fits, and reaches it through an accessor in its header                  \
     * (weft__scope_rt, weft__sync_rt, weft__io_rt, weft__actor_rt,            \
     * weft__observe_rt, weft__runtime_rt). Zero when the runtime is made;     \
     * the runtime layer sets up and frees each part through its layer's       \
     * header. */                                                              \
    _Alignas(16) unsigned char ext[WEFT__RT_EXT];

struct weft__runtime_pub {
    WEFT__RUNTIME_PUB_FIELDS
};

/* rt's public part. */
static inline struct weft__runtime_pub *weft__rtpub(weft_runtime *rt)
{
    WEFT_ASSERT(rt != NULL);
    return (struct weft__runtime_pub *)(void *)rt;
}

/* ---- the current worker ---- */

extern WEFT_TLS weft_worker *weft__tl_worker;

static inline weft_task *weft__current(void)
{
    weft_worker *w = weft__tl_worker;
    return w ? ld_rlx(&weft__wpub(w)->cur) : NULL;
}

/* Worker i of rt (0 <= i < rt->nworkers). Any thread. */
weft_worker *weft__rt_worker(weft_runtime *rt, int i);

/* ---- predicates for asserts (WEFT_ASSERT) ---- */

/* t is the task running on this thread's worker. */
static inline bool weft__task_is_current(const weft_task *t)
{
    weft_worker *w = weft__tl_worker;
    return t != NULL && w != NULL && ld_rlx(&weft__wpub(w)->cur) == t;
}

/* t's park word says parked (prepared, not yet claimed). */
static inline bool weft__task_parked(const weft_task *t)
{
    return PARK_STATE(ld_rlx(&t->park)) != PARK_RUNNING;
}

/* Asks the cache for the line of t's park word, which a waker is about to
 * claim, for writing: a hint for a waker that knows t before it can claim
 * (an actor's sender, before the actor's lock). Never faults, whatever t
 * points at. */
static inline void weft__task_prefetch_park(const weft_task *t)
{
    __builtin_prefetch(&t->park, 1, 3);
}

/* ---- the cancel word of the task's current scope ---- */

/* True if t's current scope is cancelled (weft_task.cancel), read by t
 * itself (its own cancel pointer, relaxed; set since it was registered). Hot:
 * every park and checkpoint reads it. */
static inline bool weft__task_cancelled(const weft_task *t)
{
    atomic_int *c = ld_rlx(&t->cancel);
    WEFT_ASSERT_MSG(c != NULL, "a task runs outside any scope");
    return ld_sc(c) != 0;
}

/* The cooperative budget (Tokio's): a task may make this many blocking
 * calls that complete without waiting (a channel that always has a
 * value, a socket that always has bytes) before one of them yields, so
 * that it cannot hold its worker, with the tasks, timers and descriptors
 * queued there, for as long as its calls keep completing. 1,024 calls of
 * weft's are about the time of Tokio's 128 of its own (tens of
 * microseconds); 128 or 512 made bench_chanflow's producers yield before
 * its channel of 1,024 was full, at 0.79-0.85 of its throughput. (Spawns
 * have their own count: a spawner yields every 32, sched.c.) */
#define WEFT__BUDGET 1024

/* The running task's budget is spent: gives the worker's other ready
 * tasks, timers and descriptors a turn (weft_yield), with a new budget.
 * Out of line: once every WEFT__BUDGET blocking calls without a wait. */
void weft__budget_spent(weft_worker *w) __attribute__((noinline));

/* Takes one unit of the running task's budget on worker w: true if that
 * was the last, when the caller, holding no lock, calls
 * weft__budget_spent(w). For a loop that takes work without a blocking
 * call (an actor's mailbox). */
static inline bool weft__budget_take(weft_worker *w)
{
    return WEFT_UNLIKELY(--weft__wpub(w)->budget == 0);
}

/* Entry check of a blocking call: -EPERM outside a task, -ECANCELED in a
 * cancelled scope (every blocking call is a checkpoint, as in Trio, even
 * one that could complete at once), else 0. Every WEFT__BUDGET calls
 * without a switch between them, it yields first (weft__budget_spent),
 * and looks at the cancel after. */
static inline int weft__checkpoint(void)
{
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    if (weft__budget_take(weft__tl_worker))
        weft__budget_spent(weft__tl_worker);
    return weft__task_cancelled(t) ? -ECANCELED : 0;
}

#endif
