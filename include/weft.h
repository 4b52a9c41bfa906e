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

#ifdef __cplusplus
}
#endif
#endif /* WEFT_H */
