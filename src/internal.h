/* SPDX-License-Identifier: MIT */
/*
 * weft internals: the structures shared by the runtime's modules.
 *
 * Layers (bottom up) and their files:
 *   ctx.h        register save/restore (src/arch/ or ucontext) and the
 *                sanitizer fiber hooks
 *   stack.c      task slots: a stack with the task struct at its top
 *   timer.c      per-worker hierarchical timing wheel
 *   sched.c      workers, run queues, stealing, park/wake, idling, and
 *                the pending hook (work outside the runtime)
 *   clock.c      the clocks, monotonic and virtual (clock.h), which the
 *                idle worker loop goes through
 *   poll_epoll.c the worker's poller (poller.h), under io.c
 *   scope.c      structured concurrency: scopes, policies, cancellation
 *   spawn.c      a task's spawn into its scope and its exit (the exit hook
 *                the scheduler calls)
 *   runtime.c    weft_run / weft_main, clocks, signals, public entry points
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
#ifndef WEFT_INTERNAL_H
#define WEFT_INTERNAL_H

#include "weft.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "atomic.h"

#if defined(WEFT_UCONTEXT)
#include <ucontext.h>
#endif

#include "util.h"

/* ---- context ---- */

typedef struct weft__ctx {
#if defined(WEFT_UCONTEXT)
    ucontext_t uc;
#else
    void *sp; /* saved stack pointer; the registers are on that stack */
#endif
} weft__ctx;

/* ---- timers ---- */

typedef struct weft__timer weft__timer;
typedef void (*weft__timer_fn)(weft__timer *t);

/* A timer in a worker's wheel. Embedded in its owner (a task, a scope);
 * armed and disarmed only on the wheel's worker. */
struct weft__timer {
    weft__timer *next, *prev; /* slot list; both NULL when not armed */
    int64_t when;             /* absolute deadline, ns of the runtime clock */
    weft__timer_fn fn;        /* called on the wheel's worker when due */
    uint16_t level, slot;     /* where it is filed, for disarm */
};

#define WEFT_WHEEL_LEVELS 11 /* 6 bits a level: 66 bits cover int64 time */
#define WEFT_WHEEL_SLOTS 64

/* Hierarchical timing wheel with 1 ns resolution at level 0 (as Tokio's and
 * the Linux kernel's, but exact): a timer due at `when` is filed at the
 * level of the highest 6-bit group in which `when` and `elapsed` differ,
 * so arm and disarm are O(1); advancing moves a higher-level slot's timers
 * down (at most 10 times in a timer's life) and fires level-0 slots, each
 * of which holds timers of one exact deadline, in the order armed.
 * Invariant: every armed timer has when >= elapsed, and sits at a slot at or
 * after elapsed's slot at its level. */
typedef struct weft__wheel {
    int64_t elapsed;                      /* time the wheel has reached */
    size_t count;                         /* armed timers */
    uint64_t occupied[WEFT_WHEEL_LEVELS]; /* bit s: slot s not empty */
    weft__timer slots[WEFT_WHEEL_LEVELS][WEFT_WHEEL_SLOTS]; /* sentinels */
} weft__wheel;

void weft__wheel_init(weft__wheel *wh, int64_t now);
void weft__wheel_arm(weft__wheel *wh, weft__timer *t, int64_t when);
void weft__wheel_disarm(weft__wheel *wh, weft__timer *t);
/* Fires every timer due at or before now; returns how many fired. */
size_t weft__wheel_advance(weft__wheel *wh, int64_t now);
/* Earliest time at which a timer may be due (a lower bound, exact at level
 * 0), or WEFT_NEVER if none is armed. */
int64_t weft__wheel_next(const weft__wheel *wh);
/* Exact earliest deadline, or WEFT_NEVER: O(1) plus a scan of one slot. */
int64_t weft__wheel_next_exact(const weft__wheel *wh);

static inline bool weft__timer_armed(const weft__timer *t)
{
    return t->next != NULL;
}

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
};

/* A task and its stack share one slot of memory: the struct sits at the top
 * of the slot and the stack grows down from just below it, so a parked task
 * that used little stack costs one page. */
struct weft_task {
    weft__ctx ctx;         /* owner: saved registers while not running */
    weft_worker *worker;   /* set when first run; never changes afterwards */
    weft_task *next;       /* owner: link in a run queue, inbox or free list */
    _Atomic uint64_t park; /* park word (see above); any thread CASes it */
    int wake_code;  /* result of the last park, set by the winning waker */
    unsigned flags; /* TASK_* */

    weft__timer timer; /* owner: deadline of the current park */

    weft_scope *home;            /* scope it was spawned into */
    _Atomic(weft_scope *) cur;   /* innermost open scope (home if none) */
    weft_task *mprev, *mnext;    /* home's member list, under home's lock */
    int index;                   /* child index in home (WEFT_SERVE: 0) */
    int status;                  /* fn's return value */
    struct weft__handle *handle; /* its handle's record (task.c), or NULL:
                                  * set at spawn, read at exit */

    weft_fn fn;
    void *arg;
    const char *name; /* for diagnostics, may be NULL */
    const char *file; /* spawn site */
    int line;

    char *stack_lo;   /* lowest usable stack byte (above the guard page) */
    char *slot_lo;    /* start of the slot's mapping (the guard, if any) */
    size_t slot_size; /* bytes from slot_lo to the slot's end */

    /* What the current park waits on (wait layer: weft__wait_note), for
     * the task dump and the deadlock detector; stale once running. */
    uint8_t wait_kind;     /* weft__wait_kind */
    const void *wait_obj;  /* the object waited on */
    const char *wait_name; /* its name, if it has one */
    int64_t wait_since;    /* when it parked (the wheel's time then) */

    /* valgrind's id of the stack while the slot is laid out (stack.c) */
    unsigned vg_stack;

#if defined(WEFT_TSAN)
    void *tsan_fiber;
#endif
};

/* ---- scheduler ---- */

typedef struct weft__queue { /* FIFO of tasks, owner only */
    weft_task *head, *tail;
    size_t len;
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

struct __attribute__((aligned(WEFT_CACHELINE))) weft_worker {
    /* ---- touched by other threads ---- */
    _Atomic(weft_task *) inbox; /* tasks woken by other threads (LIFO) */
    atomic_int sleeping;        /* how it sleeps (SLEEP_*), 0: awake */
    char pad0[WEFT_CACHELINE - sizeof(void *) - sizeof(int)];
    weft__deque deque; /* not-started tasks; thieves steal */
    char pad1[WEFT_CACHELINE];

    /* ---- owner only ---- */
    weft_runtime *rt;
    int id;
    weft_task *cur;     /* running task, NULL in the scheduler loop */
    weft_task *runnext; /* woken by the running task: runs next */
    unsigned runnext_streak;
    weft__queue runq;    /* woken tasks, FIFO */
    weft__queue yieldq;  /* tasks that yielded: after everything else */
    weft_task *dead;     /* finished task to recycle after the switch */
    atomic_uint tick;    /* scheduling decisions taken; thieves read it */
    atomic_uint spawned; /* spawns, progress too (thieves read it) */
    unsigned rounds;     /* this worker's stealing rounds, ever */
    unsigned spawns;     /* spawns by the running task since it resumed */
    uint64_t rng;        /* xorshift state: victims, seeded picks */
    weft__ctx sched_ctx; /* the scheduler loop's context */
    weft__wheel wheel;
    weft__pool_local pool;
    /* seeded scheduling: every runnable task lives in this array */
    weft_task **ready;
    size_t nready, capready;
    unsigned *seen; /* per victim: its tick, and the spin round that
                     * tick was first seen in (stealing heuristic) */
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

    pthread_t thread;
    void *stack_lo; /* the thread's own stack, for ASan */
    size_t stack_size;
    void *altstack; /* signal stack for reporting stack overflows */
#if defined(WEFT_TSAN)
    void *tsan_fiber;
#endif
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

/* The shutdown request (runtime.c's essay tells the protocol). Any thread
 * reads and requests; the root scope's lock orders deadline changes. */
typedef struct weft__shutdown {
    atomic_int requesting;    /* 1 once a request began; never cleared */
    atomic_int handed;        /* 1: a plain thread's request, on a virtual
                               * clock, for the keeper to make */
    atomic_int requested;     /* 1 once the request is visible: its
                               * deadline stored, the channel closed */
    _Atomic int64_t deadline; /* the drain deadline: the root scope is
                               * cancelled then (WEFT_NEVER: none) */
    bool task_deadline;       /* a task set it: the configured one is not used;
                               * under the root scope's lock, as the deadline's
                               * stores are */
    int64_t drain_ns;         /* weft_config.shutdown_drain_ns */
    weft_chan *chan;          /* closed by the request; the runtime's ref */
    /* The keeper: a task on worker 0 that cancels the root scope at the
     * deadline, through the timer wheel (so a virtual clock jumps to it).
     * Made, on any thread, by the first deadline that needs a timer. Its
     * home scope is outside the root's tree: it never keeps the runtime
     * alive, and one left parked at the end is freed by weft_run. */
    weft_task *keeper;
    weft_scope *keeper_home;
    atomic_int keeper_started; /* 1 once someone made it */
    atomic_int keeper_done;    /* 1 when it returns: its slot is recycled */
    weft_event poke;           /* set when the deadline moves */
    atomic_int notify_fd;      /* weft_main's signal thread's eventfd, -1: none;
                                * written when the deadline moves or the root
                                * scope is cancelled by the drain */
    weft_runtime *next_running; /* list of running runtimes (runtime.c) */
} weft__shutdown;

/* The layer above the scheduler, as the scheduler sees it. */
typedef struct weft__task_hooks {
    /* t's function has returned (t->status holds its result): the layers
     * above finish it (the scopes it left open, its handle, its home
     * scope's books). On t, which the scheduler then switches away from
     * for good and recycles. */
    void (*exit)(weft_task *t);
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
    weft_scope *root;
    int root_status;
    pthread_mutex_t orphan_mu;
    weft_scope *orphans; /* auto-joined at their owner's exit, not freed */
    weft__pool_global pool;
    /* blocking.c: the pool for weft_blocking, made on first use */
    pthread_mutex_t blocking_mu;
    struct weft__blocking *blocking;
    int blocking_threads, blocking_queue; /* from the config, 0: default */
    bool pinned;    /* pin_workers: worker i on the i-th CPU of `cpus` */
    cpu_set_t cpus; /* the CPUs weft_run's caller may run on */
    /* runtime.c: the shutdown request and its drain */
    weft__shutdown shut;
};

/* ---- the current worker ---- */

extern WEFT_TLS weft_worker *weft__tl_worker;

static inline weft_task *weft__current(void)
{
    weft_worker *w = weft__tl_worker;
    return w ? w->cur : NULL;
}

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
/* Parks with nothing to wake it but the deadline or a cancel. */
int weft__park_sleep(int64_t deadline);
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
/* Work was made for w by another thread: w leaves the clock's idle books
 * and is woken if it sleeps. Any thread. */
void weft__worker_notify(weft_worker *w);
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

#include "clock.h"

/* ---- spawn.c: a task spawned into a scope, and its exit ---- */

int weft__spawn(weft_scope *s, weft_fn fn, void *arg, const weft_spawn_opts *o,
                const char *file, int line);
/* The scope layer's hooks, for weft_runtime.hooks. */
extern const weft__task_hooks weft__scope_hooks;

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

/* ---- io.c ---- */

/* The worker's poller, and the calls the scheduler makes on it. */
#include "poller.h"

/* select's descriptor case (wait.h, "select's cases"): WEFT_OP_READ or
 * WEFT_OP_WRITE on c->fd.
 * check: 1 (off) for fd < 0, -EINVAL for fd >= 2^20, -ENOMEM if fd's
 *   record cannot be made; else 0 (the record is made).
 * lock: the record's lock.
 * try: an edge not yet given to a wait is consumed: rc 0. Else fd is
 *   registered with the worker's poller if it is not (and, for a
 *   descriptor weft did not make, the check at park: see io.c), and the
 *   wait goes on the record's read or write queue: -EAGAIN with a->q set.
 *   A registration that fails is the case's result (c->rc = the error,
 *   return 0), except for an always ready regular file (rc 0). The check
 *   may find the number's file replaced: the old file's waiters are then
 *   appended to woken with -EAGAIN returned, and the select must finish
 *   them (with 0) before it parks: unlock, finish, try again (the second
 *   try finds the record current). Outside a task (weft_try_select on a
 *   plain thread) only a kept edge counts.
 * won: c->rc = code: 0 (an edge, or the number was found to name a new
 *   file), -EBADF (weft_close or weft_fd_forget under the wait).
 * A select that parks on descriptor cases counts itself pending
 * (weft__pending_add(w, WEFT__PENDING_IO, +1), -1 after), so that its
 * worker reads (and sleeps in) its poller meanwhile. */
struct weft__arm;   /* wait.h */
struct weft__chain; /* wait.h */
int weft__fd_case_check(const weft_case *c);
weft__lock *weft__fd_case_lock(weft_case *c);
int weft__fd_case_try(weft_case *c, struct weft__arm *a,
                      struct weft__chain *woken);
void weft__fd_case_won(weft_case *c, int code);

/* TCP reads (see io.c): fd is a TCP socket; the read edges dispatched so
 * far (take it just before a read); after a read that returned data,
 * whether it came back short; and, before a read, wait first if the last
 * one was short and no edge came since (0 if waited or no need, else
 * weft_fd_wait's error; *stream: whether fd is a TCP socket). */
void weft__fd_set_stream(int fd);
/* fd was just made by weft (socket, accept4, signalfd), which closes it
 * with weft_close: forgets any earlier file under its number and marks it
 * weft's own, so waits on it skip the check at park (see io.c), and a TCP
 * socket (stream) for the reads above. Any thread; never blocks. */
void weft__fd_own(int fd, bool stream);
unsigned weft__fd_read_edges(int fd);
void weft__fd_read_done(int fd, unsigned edges_before, bool short_read);
int weft__fd_read_wait_first(int fd, weft_time deadline, bool *stream);

/* ---- blocking.c ---- */

/* Waits for the pool's threads (each finishes the call it runs) and frees
 * the pool; at the end of weft_run, after the workers have stopped. */
void weft__blocking_fini(weft_runtime *rt);
/* weft_blocking_until that also says, when the caller left first
 * (-ECANCELED, -ETIMEDOUT), whether fn still runs (*abandoned: it will
 * use arg until it returns) or never will (dropped while queued). */
int weft__blocking_call(weft_fn fn, void *arg, int64_t deadline,
                        bool *abandoned);
/* How long an idle pool thread waits for work before it exits (tests
 * shorten it). */
extern int64_t weft__blocking_keepalive_ns;

/* ---- scope.c ---- */

/* The wait layer (a scope's done queue) and the result policies, which
 * struct weft_scope embeds; wait.h is included again below, a no-op. */
#include "policy.h"
#include "wait.h"

enum {
    CANCEL_NONE = 0,
    CANCEL_USER = 1,     /* weft_scope_cancel */
    CANCEL_DEADLINE = 2, /* the scope's deadline passed */
    CANCEL_POLICY = 3,   /* fail-fast error, or first-wins winner */
    CANCEL_PARENT = 4,   /* an enclosing scope was cancelled */
};

struct weft_scope {
    weft__lock lock;
    atomic_int cancelled; /* CANCEL_*, the first reason; read lock-free */
    /* pol->flags (below), at hand on the spawn and exit paths. */
    uint8_t pflags;
    bool joined;        /* join has completed: closed for spawns */
    bool shield;        /* enclosing cancellation stops here */
    bool orphaned;      /* joined at its owner's exit: anyone may free */
    bool task_scope;    /* a handle's scope around one task (task.c): the
                         * task's cur at first, hidden from its code */
    weft_scope *parent; /* enclosing scope (NULL for the root) */
    weft_scope *kids;   /* scopes opened inside this one */
    weft_scope *sib_prev, *sib_next; /* in parent->kids, under parent's lock */
    weft_task *owner;          /* task that opened it (NULL for the root) */
    weft_task *members;        /* children still running */
    int spawned, live, failed; /* UNINDEXED: spawned, failed stop at INT_MAX */
    int capstatuses;
    weft__policy_state ps; /* what the policy keeps (winner, error) */
    int64_t *statuses; /* WEFT__POL_STATUSES: per child, INT64_MIN running */
    const weft__policy *pol; /* its policy's table (policy.h) */
    /* SERVE: where failures go (immutable after open; NULL: stderr), and
     * the stderr lines' rate limit: lines in the window that started at
     * log_window, and failures left out since the last line. */
    weft_failure_fn on_failure;
    void *failure_ctx;
    int64_t log_window;
    int log_lines;
    long long log_dropped;
    /* The owner's join (a firm waiter) or its select's scope case (a
     * plain one): claimed by the exit that leaves no child running. */
    weft__waitq done;
    weft__timer deadline_timer; /* on the owner's worker */
    int64_t deadline;
    bool is_root;
};

int weft__scope_init_root(weft_runtime *rt, weft_scope *s);
/* Registers a new child in s; returns its index or an error. A task with
 * a handle gets the handle's scope, made a kid of s, as its current. */
int weft__scope_add_child(weft_scope *s, weft_task *t);
/* The capacity of a statuses array after `cap` entries are full: 16, then
 * doubling, at most INT_MAX (indexes are ints). */
int weft__scope_status_cap(int cap);
/* Bytes the scope holds: the struct and its statuses array (tests). */
size_t weft__scope_footprint(const weft_scope *s);
/* At the exit of a task with a handle, once the scopes it left open inside
 * its handle's scope p are joined: closes p, leaving the home current. */
void weft__scope_close_task(weft_scope *p);
/* The child finished: records its status, wakes the joiner. */
void weft__scope_child_done(weft_scope *s, weft_task *t);
/* Joins the scopes the task opened above `keep` and left open (its own
 * scopes at its exit, with keep = t->home; or those a function run inside
 * a scope of the caller's left), innermost first, and leaves them to be
 * freed by any task or by weft_run. Afterwards keep is current. */
void weft__scope_join_above(weft_task *t, weft_scope *keep);
/* weft_scope_open for the calls that take a deadline argument, where it
 * is absolute with WEFT_NEVER for none, so 0 is an instant (the virtual
 * clock's start) where a scope's options read "none": it has come, and
 * the scope starts cancelled by its deadline, as one whose deadline is
 * past does. */
int weft__scope_open_until(weft_scope **s, weft_policy policy,
                           weft_time deadline);
/* Frees the orphans nobody freed, and the records of the runtime's task
 * handles nobody joined or released; at the end of the runtime. */
void weft__scope_free_orphans(weft_runtime *rt);
int weft__scope_cancel(weft_scope *s, int reason);
static inline bool weft__scope_is_cancelled(const weft_scope *s)
{
    return ld_sc((atomic_int *)&s->cancelled) != CANCEL_NONE;
}

/* select's scope case (wait.h, "select's cases"): joins the scope once no
 * child runs. check: scope NULL 1; the caller not its owner -EPERM;
 * joined already, or not the caller's innermost open scope -EINVAL. try
 * returns 0 without setting rc when no child runs (the join, which takes
 * the lock, is won()'s, which select calls then with code 0), else
 * -EAGAIN with a->q the done queue. won: rc = weft_scope_join(scope). */
int weft__scope_case_check(const weft_case *c);
weft__lock *weft__scope_case_lock(weft_case *c);
int weft__scope_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__scope_case_won(weft_case *c, int code);

/* ---- the wait layer ---- */

#include "wait.h"

/* ---- task.c: task handles ---- */

/* The record behind a weft_task_handle. Records sit in chunks that live as
 * long as the process and are reused through a free list, so a stale
 * handle finds a record whose generation has moved on, never freed
 * memory. A handle's id is (gen << 24) | index. */
typedef struct weft__handle {
    weft__lock lock;  /* guards every field but `scope` (its own lock) */
    uint64_t gen;     /* this life's generation (never 0); bumped when freed */
    uint32_t index;   /* place in the table: the id's low bits */
    bool live;        /* handed out, not on the free list */
    bool done;        /* the task has finished: status holds its result */
    bool released;    /* joined or released: the user's part is over */
    int status;       /* the task's return value, once done */
    weft_runtime *rt; /* the task's runtime */
    weft__waitq joiners;            /* tasks in weft_task_join */
    struct weft__handle *next_free; /* free list, under the table's mutex */
    /* The task's own scope, a kid of its home and the task's current scope
     * when it starts: the handle's cancel is this scope's, so it flows
     * into the scopes the task opens and wakes the task as a scope's
     * cancel does. Closed at the task's exit; reused with the record. */
    weft_scope scope;
} weft__handle;

/* A record for a new task of rt, or NULL (no memory). */
weft__handle *weft__handle_new(weft_runtime *rt);
/* The spawn failed: the record goes back unused. */
void weft__handle_abandon(weft__handle *h);
uint64_t weft__handle_id(const weft__handle *h);
/* At the exit of t, which has a handle: closes the handle's scope, stores
 * the status, wakes the joiners, frees the record if it was released. */
void weft__handle_exit(weft_task *t);
/* Frees the records of rt that are still live (their tasks have all
 * finished): their handles then read -ESRCH. */
void weft__handles_fini(weft_runtime *rt);

/* The element size of a live channel, or 0 if c is NULL or not one. Any
 * thread; never blocks. */
size_t weft__chan_elem(const weft_chan *c);

/* Select's channel cases (chan.c; the interface is in wait.h). */
int weft__chan_case_check(const weft_case *c);
weft__lock *weft__chan_case_lock(weft_case *c);
int weft__chan_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__chan_case_won(weft_case *c, int code);

/* For the tests: how many waiter nodes are on f's list now. */
int weft__future_nwaiters(const weft_future *f);

/* select's future case (wait.h, "select's cases"): check: future NULL 1,
 * not a live future -EINVAL; try: settled: rc its result (the value
 * copied to elem, if elem is not NULL and the future has one), else
 * -EAGAIN with a->q its waiter queue; won: the same result, read without
 * the lock (it is final). */
int weft__future_case_check(const weft_case *c);
weft__lock *weft__future_case_lock(weft_case *c);
int weft__future_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__future_case_won(weft_case *c, int code);

/* Locks m ignoring cancellation (condition variables re-lock with it
 * before returning, whatever ended the wait). Returns 0. Blocks. */
int weft__mutex_relock(weft_mutex *m);
/* 1 if the calling task holds m, else 0. */
int weft__mutex_held_by_me(weft_mutex *m);

/* Select's semaphore case (sync.c; the four calls of wait.h's "select's
 * cases"): check: 1 for a NULL sem (off), else 0; try (under the sem's
 * lock): takes one permit if one is there and nobody waits ahead (0,
 * c->rc = 0), else -EAGAIN with a->q the sem's queue and a->w.n = 1; won:
 * c->rc = code (0: the permit was handed over). */
int weft__sem_case_check(const weft_case *c);
weft__lock *weft__sem_case_lock(weft_case *c);
int weft__sem_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__sem_case_won(weft_case *c, int code);

/* Entry check of a blocking call: -EPERM outside a task, -ECANCELED in a
 * cancelled scope (every blocking call is a checkpoint, as in Trio, even
 * one that could complete at once), else 0. */
static inline int weft__checkpoint(void)
{
    weft_task *t = weft__current();
    if (!t)
        return -EPERM;
    weft_scope *cur = atomic_load_explicit(&t->cur, memory_order_relaxed);
    return weft__scope_is_cancelled(cur) ? -ECANCELED : 0;
}

#endif
