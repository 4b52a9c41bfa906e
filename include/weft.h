/*
 * weft: tasks, structured concurrency and the async patterns of Go, Tokio
 * and Trio, for C11.
 *
 * This is the whole public API. Sections follow the layers of the runtime:
 *
 *   1. Version and errors
 *   2. Runtime
 *   3. Tasks and scopes (structured concurrency, cancellation, deadlines)
 *   4. Time
 *   5. Channels and select
 *   6. Task-aware synchronisation
 *
 * Conventions
 * - Every function that can fail returns 0 (or a non-negative count/index)
 *   on success and a negative errno-style code on failure (-EINVAL,
 *   -ECANCELED, -ETIMEDOUT, ...). weft_strerror() names them. errno is never
 *   used to report weft's own errors.
 * - Time is a signed 64-bit count of nanoseconds of the runtime's clock
 *   (weft_now()). Deadlines are absolute; WEFT_NEVER means "no deadline".
 * - "Blocks" means the calling task is suspended and its worker thread runs
 *   other tasks meanwhile; no weft function blocks the OS thread of a task.
 * - A cancellation point is a blocking call that returns -ECANCELED as soon
 *   as the task's innermost scope is cancelled (level-triggered, as in Trio:
 *   it keeps returning -ECANCELED until the task leaves the cancelled
 *   scope). weft_scope_join() is the one blocking call that is not.
 * - A task that has started never moves to another OS thread, so
 *   thread-local storage (errno, __thread variables, OpenSSL's error queue)
 *   stays valid across blocking calls. Idle workers balance load by taking
 *   tasks that have not started yet.
 * - Unless a comment says otherwise, functions must be called from a task
 *   running inside weft_run(); called elsewhere they return -EPERM.
 */
#ifndef WEFT_H
#define WEFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(WEFT_STATIC)
#define WEFT_EXTERN
#elif defined(WEFT_BUILDING)
#define WEFT_EXTERN __attribute__((visibility("default")))
#else
#define WEFT_EXTERN
#endif

/* ------------------------------------------------------------------------
 * 1. Version and errors
 * ---------------------------------------------------------------------- */

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0
#define WEFT_VERSION_HEX                                                       \
    ((WEFT_VERSION_MAJOR << 16) | (WEFT_VERSION_MINOR << 8) |                  \
     WEFT_VERSION_PATCH)

/* The WEFT_VERSION_HEX the library was built with; compare it with the
 * header's to detect a mismatched shared library. Any thread, never blocks. */
WEFT_EXTERN unsigned weft_version(void);

/* A static, human-readable description of a weft return code (0 or a
 * negative errno value), e.g. "operation cancelled" for -ECANCELED.
 * Any thread, never blocks, never returns NULL. */
WEFT_EXTERN const char *weft_strerror(int err);

/* ------------------------------------------------------------------------
 * 2. Runtime
 * ---------------------------------------------------------------------- */

/* A task's body: returns 0 on success or a negative errno-style code. */
typedef int (*weft_fn)(void *arg);

/* Nanoseconds of the runtime's clock. */
typedef int64_t weft_time;
#define WEFT_NEVER INT64_MAX

#define WEFT_NSEC ((int64_t)1)
#define WEFT_USEC ((int64_t)1000)
#define WEFT_MSEC ((int64_t)1000000)
#define WEFT_SEC ((int64_t)1000000000)

typedef enum weft_clock_kind {
    /* CLOCK_MONOTONIC: real time (the default). */
    WEFT_CLOCK_MONOTONIC = 0,
    /* Virtual time for tests: starts at 0, stands still while any task can
     * run, and jumps to the next deadline when every task is blocked (Trio's
     * autojump clock). Timeouts in tests then take no real time. */
    WEFT_CLOCK_VIRTUAL = 1,
} weft_clock_kind;

/* Runtime configuration. Zero-initialise it and set what you need; every
 * zero field means "the default". */
typedef struct weft_config {
    /* Worker threads (one runs on the thread that calls weft_run).
     * 0: one per online CPU. */
    int workers;
    /* Default stack size of a task in bytes, rounded up to pages.
     * 0: 64 KiB (256 KiB in sanitizer builds). Stacks are committed lazily:
     * a task that uses 3 KiB of stack costs one page of memory. */
    size_t stack_size;
    /* The clock; see weft_clock_kind. */
    weft_clock_kind clock;
    /* Scheduling seed. 0: ordinary scheduling. Non-zero: with one worker the
     * order in which ready tasks run is drawn from this seed, so that with
     * the virtual clock a run is a pure function of the seed. The
     * environment variable WEFT_SEED, when set, overrides this field. */
    uint64_t seed;
    /* weft_main only: how long after SIGINT/SIGTERM the tasks have to
     * finish before the process exits. 0: 5 seconds. */
    int64_t shutdown_grace_ns;
} weft_config;

/* Runs a runtime on the calling thread (plus cfg->workers - 1 threads):
 * spawns fn(arg) as the root task and returns when it, and every task
 * spawned into the root scope, has finished. cfg may be NULL (defaults).
 * Returns fn's status, or -EINVAL (fn is NULL, or a bad config), -EBUSY
 * (called from inside a runtime), -ENOMEM/-EAGAIN (resources).
 * Blocks the calling OS thread; call it from a plain thread, not a task. */
WEFT_EXTERN int weft_run(const weft_config *cfg, weft_fn fn, void *arg);

/* weft_run with defaults, plus graceful shutdown: the first SIGINT or
 * SIGTERM cancels the root scope (every cancellation point then returns
 * -ECANCELED) and the tasks get the grace period to finish; a second
 * signal, or the grace period running out, ends the process with exit code
 * 130 and a message on stderr. Returns like weft_run. */
WEFT_EXTERN int weft_main(weft_fn fn, void *arg);

/* Like weft_main with a configuration (cfg may be NULL). */
WEFT_EXTERN int weft_main_cfg(const weft_config *cfg, weft_fn fn, void *arg);

/* The seed this runtime schedules with (0 if none). Print it when a test
 * fails so the run can be reproduced with WEFT_SEED=<seed>. */
WEFT_EXTERN uint64_t weft_seed(void);

/* Number of workers of the current runtime, or -EPERM outside one. */
WEFT_EXTERN int weft_workers(void);

/* Index (0 .. workers-1) of the worker running the calling task, or -EPERM
 * outside a runtime. A started task always runs on the same worker. */
WEFT_EXTERN int weft_worker_id(void);

/* ------------------------------------------------------------------------
 * 3. Tasks and scopes
 *
 * Every task belongs to a scope (a nursery, Trio's word). A scope cannot
 * finish before all its children: weft_scope_join() waits for them, so there
 * are no orphan tasks. Scopes nest: a scope opened by a task is a child of
 * the task's current scope, and cancellation flows down the tree (except
 * into shielded scopes); results flow up through join, under the scope's
 * policy.
 *
 * Ownership: the task that opens a scope owns it. Only the owner may join
 * and free it; any task (or any thread) may cancel it while it is not yet
 * freed; any task may spawn into it while it is open. A task that returns
 * while scopes it opened are still unjoined has them joined (waited for)
 * at its exit, so no child outlives its parent; such a scope may then be
 * freed by any task, and if none does, weft_run frees it before it
 * returns (so its pointer must not be used after weft_run).
 * ---------------------------------------------------------------------- */

typedef struct weft_scope weft_scope;

typedef enum weft_policy {
    /* The first child to fail cancels its siblings; join returns that first
     * error (Go's errgroup, Python's TaskGroup). */
    WEFT_FAIL_FAST = 0,
    /* Every child runs to the end; join returns 0 and each child's status
     * is kept for weft_scope_status() (Promise.allSettled,
     * gather(return_exceptions=True)). */
    WEFT_COLLECT = 1,
    /* The first child to succeed wins and cancels the rest; join returns 0
     * and weft_scope_winner() tells which. If every child fails, join
     * returns the first failure (Promise.any). Statuses are kept. */
    WEFT_FIRST = 2,
} weft_policy;

typedef struct weft_scope_opts {
    weft_policy policy;
    /* Absolute deadline; 0 or WEFT_NEVER: none. When it passes, the scope is
     * cancelled and join returns -ETIMEDOUT (unless the policy already had a
     * result: a first error, or a winner). */
    weft_time deadline;
    /* Non-zero: cancellation of enclosing scopes does not reach into this
     * one (Trio's shield), so cleanup code may block. Its own deadline and
     * weft_scope_cancel() still apply. */
    int shield;
} weft_scope_opts;

/* Opens a scope as a child of the calling task's current scope, and makes
 * it the task's current scope. opts may be NULL (fail-fast, no deadline).
 * A scope opened inside a cancelled scope starts cancelled (unless
 * shielded). Returns 0 and sets *out, or -EINVAL, -ENOMEM, -EPERM.
 * Never blocks. */
WEFT_EXTERN int weft_scope_open(weft_scope **out, const weft_scope_opts *opts);

/* Waits until every child of the scope has finished, then closes it (no
 * more spawns) and makes the enclosing scope current again. Not a
 * cancellation point: if the scope is cancelled the children are cancelled
 * and join still waits for them (structured concurrency). Scopes must be
 * joined innermost first. Returns the policy's result (see weft_policy),
 * -ETIMEDOUT if the scope's deadline passed first, -ECANCELED if it was
 * cancelled (weft_scope_cancel or an enclosing scope), or -EINVAL (NULL,
 * already joined, or not the innermost open scope), -EPERM (not the owner).
 * Blocks. */
WEFT_EXTERN int weft_scope_join(weft_scope *s);

/* Cancels the scope and, except through shields, every scope nested in it:
 * each of their cancellation points returns -ECANCELED from now on, and
 * tasks blocked in one are woken. Idempotent while the scope is open.
 * Returns 0, -EINVAL (NULL), -ESHUTDOWN (the scope was already joined).
 * Any thread; never blocks. */
WEFT_EXTERN int weft_scope_cancel(weft_scope *s);

/* Frees a joined scope. Returns 0, -EINVAL (NULL), -EBUSY (not joined yet:
 * nothing is freed), -EPERM (not the owner, and the owner has not exited).
 * Never blocks. */
WEFT_EXTERN int weft_scope_free(weft_scope *s);

/* Sets or moves the scope's deadline (absolute; WEFT_NEVER: none). A
 * deadline already past cancels the scope at once. Returns 0, -EINVAL,
 * -ESHUTDOWN (joined), -EPERM (not the owner). Never blocks. */
WEFT_EXTERN int weft_scope_set_deadline(weft_scope *s, weft_time deadline);

/* Non-zero if the scope is cancelled (by anything: cancel, deadline,
 * policy, an enclosing scope). Never blocks. */
WEFT_EXTERN int weft_scope_cancelled(const weft_scope *s);

/* Number of children spawned into the scope so far. Never blocks. */
WEFT_EXTERN int weft_scope_spawned(const weft_scope *s);

/* Number of children that have finished with a negative status. */
WEFT_EXTERN int weft_scope_failed(const weft_scope *s);

/* Status of child number `child` (the index weft_spawn returned), once it
 * has finished. Returns 0 and sets *status, -ENOENT (no such child),
 * -EAGAIN (still running), -ENODATA (a WEFT_FAIL_FAST scope keeps only its
 * first error and its failure count). Never blocks. */
WEFT_EXTERN int weft_scope_status(const weft_scope *s, int child, int *status);

/* WEFT_FIRST: index of the winning child, or -ENOENT if none (yet). */
WEFT_EXTERN int weft_scope_winner(const weft_scope *s);

/* The calling task's current (innermost) scope, or NULL outside a task. */
WEFT_EXTERN weft_scope *weft_scope_current(void);

typedef struct weft_spawn_opts {
    /* A name for diagnostics (the string must outlive the task). */
    const char *name;
    /* Stack size of this task; 0: the runtime's default. */
    size_t stack_size;
} weft_spawn_opts;

/* Spawns fn(arg) as a child of scope s (NULL: the calling task's current
 * scope). The child starts soon, on this worker or on an idle one.
 * Returns the child's index in the scope (0, 1, 2, ... in spawn order), or
 * -EINVAL (fn is NULL), -EPERM (not called from a task of this runtime),
 * -ESHUTDOWN (the scope was joined), -ECANCELED (the scope is cancelled),
 * -ENOMEM. Never blocks, but may yield: a task that spawns many children
 * without blocking lets them run every so often, so a spawning loop cannot
 * fill memory with tasks that have not started. Not a cancellation point.
 * Use the macros, which record the spawn site for diagnostics. */
WEFT_EXTERN int weft_spawn_at(weft_scope *s, weft_fn fn, void *arg,
                              const weft_spawn_opts *opts, const char *file,
                              int line);
#define weft_spawn(s, fn, arg)                                                 \
    weft_spawn_at((s), (fn), (arg), NULL, __FILE__, __LINE__)
#define weft_spawn_ex(s, fn, arg, opts)                                        \
    weft_spawn_at((s), (fn), (arg), (opts), __FILE__, __LINE__)

/* Non-zero if the calling task's current scope is cancelled: CPU-bound
 * loops poll it. 0 outside a task. Never blocks. */
WEFT_EXTERN int weft_cancelled(void);

/* Lets other ready tasks run, then returns 0. Not a cancellation point.
 * -EPERM outside a task. */
WEFT_EXTERN int weft_yield(void);

/* Runs fn(arg) on the calling task inside a new scope whose deadline is
 * weft_now() + timeout_ns (asyncio.timeout / wait_for / Trio's
 * fail_after). Returns fn's result, or -ETIMEDOUT if the deadline passed
 * and fn failed (it was cancelled). Blocks as fn does; -EPERM outside a
 * task, -EINVAL if fn is NULL. */
WEFT_EXTERN int weft_with_timeout(int64_t timeout_ns, weft_fn fn, void *arg);

/* The calling task's name (or "" if it has none), for diagnostics. */
WEFT_EXTERN const char *weft_task_name(void);

/* ------------------------------------------------------------------------
 * 4. Time
 * ---------------------------------------------------------------------- */

/* The runtime's clock in nanoseconds (monotonic, or virtual). Outside a
 * runtime: CLOCK_MONOTONIC. Never blocks. */
WEFT_EXTERN weft_time weft_now(void);

/* Suspends the task for ns nanoseconds (<= 0: just checks for
 * cancellation). Returns 0, or -ECANCELED if the scope is or becomes
 * cancelled (the remaining time is not slept). Cancellation point. Blocks. */
WEFT_EXTERN int weft_sleep(int64_t ns);

/* Suspends the task until the clock reaches t. Like weft_sleep. Blocks. */
WEFT_EXTERN int weft_sleep_until(weft_time t);

/* ------------------------------------------------------------------------
 * 5. Channels and select
 *
 * A channel carries values of a fixed size, copied in and out. Capacity 0
 * is a rendezvous (a send waits for a receiver, as in Go); capacity N is a
 * bounded buffer, and a full buffer makes senders wait: backpressure.
 * Blocked senders and receivers are served in arrival order, and values
 * from one sender arrive in the order sent.
 *
 * Cancel safety: a send that returns anything but 0 did not deliver its
 * value (the caller still owns it); a receive that returns anything but 0
 * took nothing. This holds for -ECANCELED, -ETIMEDOUT and -EPIPE alike.
 * Like every blocking call (a checkpoint, as in Trio), the blocking calls
 * of this section and the next return -ECANCELED at once in a cancelled
 * scope, even when they could complete without waiting; to drain a
 * channel during cleanup use the try variants or a shielded scope.
 *
 * Ownership: weft_chan_new returns a channel holding one reference;
 * weft_chan_ref takes another, weft_chan_unref drops one and the last
 * drop frees the channel. Every task or thread that uses a channel should
 * hold its own reference for as long as it does. Any task may call any
 * channel function; the try and close variants may also be called from
 * plain threads (for example a foreign library's callback).
 * ---------------------------------------------------------------------- */

typedef struct weft_chan weft_chan;

/* Creates a channel of values of elem_size bytes (1 to 65536) with room for
 * capacity buffered values (0: rendezvous). Returns 0 and sets *out, or
 * -EINVAL, -ENOMEM. Any thread; never blocks. */
WEFT_EXTERN int weft_chan_new(weft_chan **out, size_t elem_size,
                              size_t capacity);

/* Takes a reference; returns c. Any thread; never blocks. */
WEFT_EXTERN weft_chan *weft_chan_ref(weft_chan *c);

/* Drops a reference; the last one frees the channel and any values still
 * buffered. Returns 0, or -EINVAL (NULL, or not a live channel: a debug
 * build keeps freed channels poisoned so that a late call says so). Any
 * thread; never blocks. */
WEFT_EXTERN int weft_chan_unref(weft_chan *c);

/* Closes the channel: sends fail with -EPIPE from now on; receivers get the
 * buffered values, then -EPIPE. Blocked senders are woken with -EPIPE
 * (their values not delivered), blocked receivers with -EPIPE.
 * Returns 0, -EPIPE (already closed), -EINVAL. Any thread; never blocks. */
WEFT_EXTERN int weft_chan_close(weft_chan *c);

/* Sends a copy of *elem, waiting while the channel is full (capacity 0:
 * until a receiver takes it). Returns 0 (delivered), -EPIPE (closed),
 * -ECANCELED, -EINVAL, -EPERM (not in a task). Cancellation point: on any
 * error the value was not delivered. Blocks. */
WEFT_EXTERN int weft_chan_send(weft_chan *c, const void *elem);

/* weft_chan_send with an absolute deadline: -ETIMEDOUT (not delivered) if
 * it passes first. Cancellation point. Blocks. */
WEFT_EXTERN int weft_chan_send_until(weft_chan *c, const void *elem,
                                     weft_time deadline);

/* Sends only if that needs no waiting: -EAGAIN (not delivered) if the
 * buffer is full, or, for capacity 0, no receiver is waiting. Returns 0,
 * -EPIPE, -EINVAL. Any thread; never blocks. */
WEFT_EXTERN int weft_chan_try_send(weft_chan *c, const void *elem);

/* Receives a value into *out, waiting while the channel is empty. Returns
 * 0, -EPIPE (closed and drained), -ECANCELED, -EINVAL, -EPERM.
 * Cancellation point: on any error nothing was taken. Blocks. */
WEFT_EXTERN int weft_chan_recv(weft_chan *c, void *out);

/* weft_chan_recv with an absolute deadline: -ETIMEDOUT (nothing taken) if
 * it passes first. Cancellation point. Blocks. */
WEFT_EXTERN int weft_chan_recv_until(weft_chan *c, void *out,
                                     weft_time deadline);

/* Receives only if a value is there now: -EAGAIN (nothing taken) if not.
 * Returns 0, -EPIPE (closed and drained), -EINVAL. Any thread; never
 * blocks. */
WEFT_EXTERN int weft_chan_try_recv(weft_chan *c, void *out);

/* Buffered values now, and the capacity. Any thread; never block. */
WEFT_EXTERN size_t weft_chan_len(const weft_chan *c);
WEFT_EXTERN size_t weft_chan_cap(const weft_chan *c);

typedef enum weft_op {
    WEFT_OP_SEND = 1, /* send *elem */
    WEFT_OP_RECV = 2, /* receive into *elem */
} weft_op;

/* One case of a select. A case whose chan is NULL is never ready (Go's nil
 * channel), so cases can be switched off without rebuilding the array. */
typedef struct weft_case {
    weft_chan *chan;
    weft_op op;
    void *elem; /* the value to send, or where to store the received one */
    int rc;     /* out, for the chosen case: 0, or -EPIPE (closed) */
} weft_case;

/* Waits until one of the n cases can proceed, performs it, and returns its
 * index; that case's rc is 0, or -EPIPE if its channel was closed (a
 * receive from a closed, drained channel, or a send to a closed one, is
 * ready at once and chosen like any other). When several are ready, the
 * choice is uniformly random. Returns -ETIMEDOUT at the deadline
 * (WEFT_NEVER: none), -ECANCELED, -EINVAL, -EPERM. Cancellation point: on
 * any error no case happened (nothing sent, nothing taken, no waiter left
 * on any channel). Blocks. */
WEFT_EXTERN int weft_select(weft_case *cases, int n, weft_time deadline);

/* weft_select with a default case: if no case is ready now, returns
 * -EAGAIN at once. When exactly one case is ready, it is always taken.
 * Never blocks. */
WEFT_EXTERN int weft_try_select(weft_case *cases, int n);

/* ------------------------------------------------------------------------
 * 6. Task-aware synchronisation
 *
 * These suspend the task, never its OS thread, and work across workers.
 * They are plain values: zero-initialise them (or use the _INIT macro) and
 * they are ready; they need no destroy while nothing waits on them. Every
 * waiting call is a cancellation point, served in arrival order.
 * ---------------------------------------------------------------------- */

/* A mutex that is fast under contention and never starves a waiter (Go's
 * sync.Mutex rules): waiters queue in arrival order; unlock wakes the first
 * one, which competes with running tasks (a task that locks again at once
 * keeps the lock on its worker, so no cache-line transfer per lock); a
 * waiter that loses keeps its place, and once the first waiter has waited
 * 1 ms, unlock hands the lock to it directly and nobody else can take it.
 * Uncontended, lock and unlock are one compare-and-swap each. */
typedef struct weft_mutex {
    _Alignas(8) unsigned char opaque[40];
} weft_mutex;
#define WEFT_MUTEX_INIT                                                        \
    {                                                                          \
        {                                                                      \
            0                                                                  \
        }                                                                      \
    }

/* Locks, waiting if it is held. Returns 0, -ECANCELED (not locked),
 * -EDEADLK (the calling task holds it already), -EINVAL (NULL, or
 * destroyed), -EPERM. Cancellation point: a cancelled lock holds nothing
 * and leaves no waiter queued. Blocks. */
WEFT_EXTERN int weft_mutex_lock(weft_mutex *m);
/* weft_mutex_lock with a deadline: -ETIMEDOUT (not locked). Blocks. */
WEFT_EXTERN int weft_mutex_lock_until(weft_mutex *m, weft_time deadline);
/* Locks if it is free now (also ahead of waiters, as a running task's lock
 * may; never ahead of a starving waiter, whose hand-off keeps it held):
 * 0, -EBUSY, -EINVAL. Never blocks. */
WEFT_EXTERN int weft_mutex_trylock(weft_mutex *m);
/* Unlocks. Returns 0, or -EPERM (the calling task does not hold it).
 * Never blocks. */
WEFT_EXTERN int weft_mutex_unlock(weft_mutex *m);
/* Marks an unlocked, unwaited mutex destroyed: later locks return -EINVAL
 * until it is initialised again. Returns 0, -EBUSY (held or waited on:
 * nothing changed), -EINVAL (NULL or destroyed twice). Never blocks. */
WEFT_EXTERN int weft_mutex_destroy(weft_mutex *m);

/* A counting semaphore. */
typedef struct weft_sem {
    _Alignas(8) unsigned char opaque[40];
} weft_sem;
/* Sets the count (permits); do this before any task uses it. Returns 0 or
 * -EINVAL (negative). Never blocks. */
WEFT_EXTERN int weft_sem_init(weft_sem *s, long permits);
/* Takes n permits, waiting in line until they are there (a large request
 * is not overtaken by later small ones). Returns 0, -ECANCELED (none
 * taken), -EINVAL (n < 1). Cancellation point. Blocks. */
WEFT_EXTERN int weft_sem_acquire(weft_sem *s, long n);
/* weft_sem_acquire with a deadline: -ETIMEDOUT (none taken). Blocks. */
WEFT_EXTERN int weft_sem_acquire_until(weft_sem *s, long n, weft_time deadline);
/* Takes n permits if they are there now and nobody waits: 0 or -EAGAIN.
 * Never blocks. */
WEFT_EXTERN int weft_sem_try_acquire(weft_sem *s, long n);
/* Returns n permits, waking waiters whose turn it is. Returns 0 or
 * -EINVAL. Any thread; never blocks. */
WEFT_EXTERN int weft_sem_release(weft_sem *s, long n);
/* Permits available now. Never blocks. */
WEFT_EXTERN long weft_sem_available(weft_sem *s);

/* An event: waiters wait until it is set; set wakes them all and lets
 * later waits through until reset. */
typedef struct weft_event {
    _Alignas(8) unsigned char opaque[40];
} weft_event;
#define WEFT_EVENT_INIT                                                        \
    {                                                                          \
        {                                                                      \
            0                                                                  \
        }                                                                      \
    }
/* Waits until the event is set. Returns 0, -ECANCELED, -EINVAL, -EPERM.
 * Cancellation point: a cancelled wait leaves nothing behind (the event is
 * not changed, no waiter stays queued). Blocks. */
WEFT_EXTERN int weft_event_wait(weft_event *e);
/* weft_event_wait with a deadline: -ETIMEDOUT. Blocks. */
WEFT_EXTERN int weft_event_wait_until(weft_event *e, weft_time deadline);
/* Sets the event and wakes every waiter. Returns 0 or -EINVAL. Any
 * thread; never blocks. */
WEFT_EXTERN int weft_event_set(weft_event *e);
/* Clears the event: later waits wait again. Any thread; never blocks. */
WEFT_EXTERN int weft_event_reset(weft_event *e);
/* Non-zero if set. Never blocks. */
WEFT_EXTERN int weft_event_is_set(weft_event *e);

/* A wait group (Go's sync.WaitGroup): add before starting work, done when
 * a piece finishes, wait until the count is back to zero. */
typedef struct weft_wg {
    _Alignas(8) unsigned char opaque[40];
} weft_wg;
#define WEFT_WG_INIT                                                           \
    {                                                                          \
        {                                                                      \
            0                                                                  \
        }                                                                      \
    }
/* Adds delta (may be negative) to the count. Returns 0, or -EINVAL if the
 * count would go below zero (nothing changed). Any thread; never blocks. */
WEFT_EXTERN int weft_wg_add(weft_wg *wg, long delta);
/* weft_wg_add(wg, -1). */
WEFT_EXTERN int weft_wg_done(weft_wg *wg);
/* Waits until the count is zero. Returns 0, -ECANCELED, -EINVAL, -EPERM.
 * Cancellation point: a cancelled wait leaves nothing behind (the count is
 * not changed, no waiter stays queued). Blocks. */
WEFT_EXTERN int weft_wg_wait(weft_wg *wg);
/* weft_wg_wait with a deadline: -ETIMEDOUT. Blocks. */
WEFT_EXTERN int weft_wg_wait_until(weft_wg *wg, weft_time deadline);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_H */
