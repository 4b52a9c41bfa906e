/* SPDX-License-Identifier: MIT */
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
 *   7. Blocking work
 *   8. I/O: file descriptors, sockets, child processes
 *   9. Futures and combinators
 *  10. Bounded parallelism and pipelines
 *  11. Resilience: retry, circuit breaker, rate limiter, bulkhead, fallback
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
 * - A blocking call that can complete at once does so without switching,
 *   except that a task's 1,024th such call since it last waited (or
 *   yielded) yields first (a cooperative budget, as Tokio's): a task
 *   whose calls keep completing (a channel that always has values, a
 *   socket that always has bytes) cannot hold its worker. An actor's
 *   messages taken from its mailbox count as such calls.
 * - A task that has started never moves to another OS thread, unless it
 *   opts in (weft_spawn_opts.movable; actors move between two messages,
 *   weft_actor_opts.worker), so the address of a thread-local (errno, a
 *   thread-local variable, OpenSSL's error queue) stays valid across
 *   blocking calls. Its value is the worker's, not the task's: every task
 *   that runs on that worker shares it, and another task may change it
 *   while this one is blocked (read errno right after the call that set
 *   it). weft has no task-local storage: keep a task's own state in what
 *   its arg points to. Idle workers balance load by taking tasks that have
 *   not started yet.
 * - Unless a comment says otherwise, functions must be called from a task
 *   running inside weft_run(); called elsewhere they return -EPERM.
 * - Names follow docs/api-conventions.md: weft_X_try_VERB never waits; a
 *   deadline is the last parameter; a call that waits for another task
 *   has a plain form and an _until form, one that waits on the outside
 *   world a required deadline; a relative timeout is in a call named _for;
 *   _join waits for an end; weft_X_stats_get reads a weft_X_stats. The
 *   0.2 names are in the deprecated block at the end of this file.
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

/* Alignment of the opaque value types (mutexes, semaphores, ...), spelled
 * for the language that includes this header: C11's _Alignas or C++11's
 * alignas. */
#ifdef __cplusplus
#define WEFT_ALIGN8 alignas(8)
#else
#define WEFT_ALIGN8 _Alignas(8)
#endif

/* ------------------------------------------------------------------------
 * 1. Version and errors
 * ---------------------------------------------------------------------- */

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 2
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
     * autojump clock). Timeouts in tests then take no real time. Before a
     * jump it gives real work it knows of a little real time: 5 ms to
     * descriptors tasks wait on, 50 ms to running weft_blocking calls. */
    WEFT_CLOCK_VIRTUAL = 1,
} weft_clock_kind;

/* How a worker learns that descriptors are ready (weft_config's poller
 * field; see weft_fd_wait). Each worker makes its poller at its first
 * wait for a descriptor; weft_poller_name says which one it has. */
typedef enum weft_poller_kind {
    /* The default: epoll in this version (BENCHMARKS.md, "Each poller",
     * has the measurements behind the choice). */
    WEFT_POLLER_DEFAULT = 0,
    /* Edge-triggered epoll: a descriptor is registered once per worker. */
    WEFT_POLLER_EPOLL = 1,
    /* io_uring (Linux 5.6 or newer, liburing at build time): a
     * one-shot poll request per wait, submitted with the worker's next
     * look or sleep; a TCP read that has to wait is a receive request
     * instead, which brings the bytes (one request, no recv(2) after it),
     * and files are read and written through the ring (weft_file_*).
     * Where the kernel refuses a ring (kernel.io_uring_disabled, a
     * seccomp filter, the locked memory limit, a missing operation) or
     * libweft was built without liburing, the worker uses epoll, and the
     * process says why in one line on stderr, once. */
    WEFT_POLLER_IO_URING = 2,
} weft_poller_kind;

/* What a runtime does when it finds its tasks deadlocked (weft_config's
 * deadlock field; see "Deadlocks" in section 14). */
typedef enum weft_deadlock_mode {
    /* The default: a report on stderr whose first line says "deadlock";
     * then weft_run cancels the root scope and returns -EDEADLK, and a
     * weft_mutex_lock that would close a cycle of mutex waits returns
     * -EDEADLK instead of waiting. */
    WEFT_DEADLOCK_REPORT = 0,
    /* The report, then abort() (a core file to look at). */
    WEFT_DEADLOCK_ABORT = 1,
    /* weft_config.on_deadlock instead of the report, then as REPORT. */
    WEFT_DEADLOCK_CALLBACK = 2,
    /* Look for nothing: the tasks stay asleep. */
    WEFT_DEADLOCK_IGNORE = 3,
} weft_deadlock_mode;

/* What was found, for weft_config.on_deadlock. */
typedef enum weft_deadlock_kind {
    /* Every task asleep, and nothing outside the runtime can wake one. */
    WEFT_DEADLOCK_ALL_ASLEEP = 1,
    /* Tasks waiting for each other's mutexes in a cycle. */
    WEFT_DEADLOCK_MUTEX_CYCLE = 2,
} weft_deadlock_kind;

/* Runtime configuration. Zero-initialise it and set what you need; every
 * zero field means "the default". */
struct weft_watchdog_report; /* section 14 */

typedef struct weft_config {
    /* Worker threads (one runs on the thread that calls weft_run).
     * 0: one per online CPU. */
    int workers;
    /* Default stack size of a task in bytes, rounded up to pages.
     * 0: 64 KiB (256 KiB in sanitizer builds). Stacks are committed lazily:
     * a task that uses 3 KiB of stack costs one page of memory. A task
     * gets at least 4 KiB (16 KiB in sanitizer builds) plus the system's
     * signal frame (sysconf(_SC_MINSIGSTKSZ): about 8 KiB in all on a
     * machine with AVX-512), whatever it asks for: a signal, or the
     * dynamic linker resolving a function at its first call, pushes the
     * processor's whole register state on the running task's stack. */
    size_t stack_size;
    /* The clock; see weft_clock_kind. */
    weft_clock_kind clock;
    /* Scheduling seed. 0: ordinary scheduling. Non-zero: with one worker the
     * order in which ready tasks run is drawn from this seed, so that with
     * the virtual clock a run is a pure function of the seed. The
     * environment variable WEFT_SEED, when set, overrides this field; it
     * must be a whole number from 0 to 2^64 - 1 (decimal, 0x hex or 0
     * octal, nothing else, not even blanks): anything else, empty
     * included, makes weft_run write a message to stderr and return
     * -EINVAL without running anything. */
    uint64_t seed;
    /* weft_main only: how long the tasks have to finish once a shutdown
     * has cancelled the root scope; then the process exits (see
     * weft_main). 0: 5 seconds. */
    int64_t shutdown_grace_ns;
    /* The drain: how long after a shutdown request (weft_main's first
     * SIGINT/SIGTERM, or weft_shutdown_request) the root scope is
     * cancelled if tasks still run. 0: at once, with the request (the
     * default: every cancellation point returns -ECANCELED right away, as
     * Trio's Ctrl-C and asyncio.run do). Non-zero: the tasks see the
     * request, stop intake and finish what is queued, and only what is
     * still running at the deadline is cancelled (Go's
     * signal.NotifyContext, then http.Server.Shutdown(ctx)). WEFT_NEVER: no
     * deadline unless a task sets one. A task's weft_shutdown_set_deadline
     * replaces the deadline this gives. */
    int64_t shutdown_drain_ns;
    /* weft_blocking: the most OS threads running blocking calls at once.
     * 0: 64. Threads start when work arrives. */
    int blocking_threads;
    /* weft_blocking: calls that may wait for a thread; a caller beyond
     * this waits for room (backpressure). 0: 1024. */
    int blocking_queue;
    /* Non-zero: worker i runs only on the i-th CPU the calling thread may
     * run on (modulo their number), thread-per-core, so the kernel never
     * moves a worker nor puts two on one CPU while another idles. The
     * calling thread gets its own CPU set back when weft_run returns; pool
     * and signal threads keep that set. 0: the kernel places threads. */
    int pin_workers;
    /* Deadlock detection: see weft_deadlock_mode (0: report on stderr and
     * return -EDEADLK). */
    weft_deadlock_mode deadlock;
    /* WEFT_DEADLOCK_CALLBACK: called once per deadlock found, on the
     * worker thread that found it, with deadlock_ctx and what was found;
     * it may call weft_dump and must not block or wait for tasks. */
    void (*on_deadlock)(void *ctx, weft_deadlock_kind kind);
    void *deadlock_ctx;
    /* How long every task must stay asleep, in real time, before that is
     * called a deadlock: the time a plain thread has to call in (see
     * "Deadlocks" in section 14). 0: one second. */
    int64_t deadlock_grace_ns;
    /* weft_main only: what SIGQUIT (Ctrl-\ on a terminal) does. 0 (the default)
     * or 1: it writes a task dump (weft_dump's text, with every parked
     * task's stack: WEFT_DUMP_STACKS) to stderr and the program
     * goes on, so a daemon being debugged keeps running and can be dumped
     * again (Go's SIGQUIT dump exits; the JVM's thread dump goes on, as
     * this one does). Negative: SIGQUIT keeps its default action (the
     * process ends with a core dump). weft_run installs no handler; call
     * weft_dump from your own signal-handling thread. */
    int sigquit_dump;
    /* Instrument hooks for this run (see weft_instrument, section 14), or
     * NULL. Must stay valid until weft_run returns. */
    const struct weft_instrument *instrument;
    /* Writes a trace of the run to this file when weft_run returns (see
     * WEFT_TRACE_EVENTS, section 14); NULL: none. The environment variable
     * WEFT_TRACE, when set, replaces it (empty: no trace). A file that
     * cannot be created makes weft_run write a message to stderr and
     * return its error (-ENOENT, -EACCES, ...) without running anything. */
    const char *trace_path;
    /* The watchdog (section 14): a task that holds its worker this long,
     * in real time, without parking or yielding is reported once, with
     * its name, spawn site and worker, and again when it ends, with its
     * whole length. 0: 100 ms. WEFT_NEVER: no watchdog (and no thread
     * watching the workers if slow_slice_ns is WEFT_NEVER too).
     * Negative: -EINVAL. */
    int64_t watchdog_ns;
    /* Non-NULL: the watchdog calls it with watchdog_arg instead of
     * writing its line to stderr, on its own thread (a plain thread, not
     * a task: it must not call weft's blocking functions, and must return
     * soon). */
    void (*watchdog_fn)(const struct weft_watchdog_report *r, void *arg);
    void *watchdog_arg;
    /* Slow slices (section 14): a task's run, from a switch to it to its
     * next park, yield or exit, that lasts this long in real time is a
     * slow slice, counted in weft_worker_stats.slow_slices. 0: 10 ms (the
     * slice after which Go preempts a goroutine; a hold this long already
     * shows in a service's latency). WEFT_NEVER: slices are not measured
     * (and, with the watchdog off too, no thread watches the workers).
     * Negative: -EINVAL. */
    int64_t slow_slice_ns;
    /* The workers' poller: see weft_poller_kind (0: epoll). The
     * environment variable WEFT_POLLER, when set and not empty, overrides
     * it: "epoll" or "io_uring" ("uring" too); anything else makes
     * weft_run write a message to stderr and return -EINVAL without
     * running anything. Out of range: -EINVAL. */
    weft_poller_kind poller;
    /* Fault injection, for tests (section 15): NULL, none. A plan makes
     * the system calls weft makes, and its own allocations, fail as it
     * says. A library built without the fault sites (WEFT_FAULTS=OFF, the
     * Release default) refuses a plan: weft_run returns -ENOTSUP. One
     * runtime at a time runs with a plan: -EBUSY while another does. */
    const struct weft_fault_plan *faults;
    /* The virtual clock only: the real time it waits, when every task is
     * parked and some wait for descriptors or weft_blocking calls, before
     * it jumps to the next deadline (Trio's autojump threshold), so that
     * loopback I/O and a quick blocking call complete at the virtual
     * instant they started. 0: 5 ms for descriptors, 50 ms for blocking
     * calls (a weft_file_* call counts as a descriptor through the
     * worker's io_uring ring, as a blocking call on the pool). A test that
     * needs its calls to finish before the clock moves, on a machine however
     * loaded, sets a long one (a jump then waits that long when a call does not
     * finish). Negative: -EINVAL. */
    int64_t autojump_ns;
    /* Simulation (section 17): NULL, none, unless the environment variable
     * WEFT_SIM is "1" (then with the defaults of weft_sim_opts; "0" or
     * empty: off; anything else makes weft_run write a message to stderr
     * and return -EINVAL). In simulation nothing real is touched: the
     * virtual clock, one seeded worker (a seed is drawn and printed on
     * stderr if none is given), a simulated network behind the socket
     * calls, blocking calls run inline. workers, clock, poller and
     * autojump_ns are ignored; so are the watchdog and slow slices (they
     * measure real time). One simulated runtime at a time: -EBUSY while another
     * runs. */
    const struct weft_sim_opts *sim;
} weft_config;

/* Runs a runtime on the calling thread (plus cfg->workers - 1 threads):
 * spawns fn(arg) as the root task and returns when it, and every task
 * spawned into the root scope, has finished. cfg may be NULL (defaults).
 * Returns fn's status, or -EDEADLK (its tasks deadlocked: see
 * weft_config.deadlock), -EINVAL (fn is NULL, a bad config, a
 * WEFT_SEED that is not a number: see weft_config.seed, or a WEFT_POLLER
 * that names no poller: see weft_config.poller), -EBUSY
 * (called from inside a runtime), -ENOMEM/-EAGAIN (resources).
 * Other threads may wake its tasks at any time, including while it ends:
 * a plain thread that settles a future, sets an event, sends on a
 * channel, tells an actor or cancels a scope may have its wake race the
 * end of weft_run (the task it wakes returns and ends the runtime before
 * the call returns): weft_run waits for such a call to be done with the
 * runtime before freeing it. After weft_run has returned no task waits,
 * so those calls touch only their object, which the thread keeps alive
 * with its own reference; except after a run that ended with tasks still
 * asleep (-EDEADLK with tasks a cancel could not reach: see "Deadlocks"),
 * whose memory weft_run keeps for the life of the process (its workers,
 * and those tasks with their stacks), since a wake may still come for
 * one: it makes the task runnable, which then never runs.
 * Blocks the calling OS thread; call it from a plain thread, not a task
 * (there is nothing to cancel there: not a cancellation point). */
WEFT_EXTERN int weft_run(const weft_config *cfg, weft_fn fn, void *arg);

/* weft_run with defaults, plus graceful shutdown on SIGINT and SIGTERM:
 * - the first one requests shutdown (as weft_shutdown_request does). With
 *   shutdown_drain_ns 0, the default, that cancels the root scope at once:
 *   every cancellation point returns -ECANCELED. With a drain, the root
 *   scope is cancelled only at the drain deadline, and only if tasks still
 *   run then: until then they see the request (weft_shutdown_wait,
 *   weft_shutdown_chan), stop intake and finish their queued work;
 * - once a shutdown has cancelled the root scope, the tasks have
 *   shutdown_grace_ns to finish;
 * - a second signal, or the grace period running out, ends the process
 *   with exit code 130 and a message on stderr.
 * A request made by code (weft_shutdown_request, weft_shutdown_set_deadline)
 * goes the same way, grace period included. Returns like weft_run. */
WEFT_EXTERN int weft_main(weft_fn fn, void *arg);

/* Like weft_main with a configuration (cfg may be NULL). */
WEFT_EXTERN int weft_main_cfg(const weft_config *cfg, weft_fn fn, void *arg);

/* The seed this runtime schedules with (0 if none). Print it when a test
 * fails so the run can be reproduced with WEFT_SEED=<seed>. */
WEFT_EXTERN uint64_t weft_seed(void);

/* Number of workers of the current runtime, or -EPERM outside one. */
WEFT_EXTERN int weft_workers(void);

/* Index (0 .. workers-1) of the worker running the calling task, or -EPERM
 * outside a runtime. A started task always runs on the same worker, unless
 * it may move (weft_spawn_opts.movable, an actor between messages). */
WEFT_EXTERN int weft_worker_id(void);

/* Registers fn(arg) to run on the calling worker's thread when that worker
 * stops at the end of weft_run, after every task of the runtime has
 * finished; hooks run newest first, once each. For a library that keeps
 * state per worker (a connection pool, weft_curl's multi handle) in a
 * thread-local: fn frees it and clears the thread-local, since the thread
 * that called weft_run is worker 0 and may run another runtime later. fn
 * runs in no task: it must not block, but weft_worker_id, weft_close and
 * the try forms work. Returns 0, -EINVAL (fn NULL), -EPERM (not on a
 * worker), -ENOMEM. From a task (or a worker's hook); never blocks. */
WEFT_EXTERN int weft_on_worker_exit(void (*fn)(void *arg), void *arg);

/* ---- Shutdown requests ----
 *
 * A runtime-wide request to stop, in Go's shape (signal.NotifyContext, then
 * http.Server.Shutdown(ctx)): the tasks that take work in (accept loops,
 * producers) wait for the request, stop, and close their channels; the
 * others drain what is queued until a receive returns -EPIPE, and return.
 * Nothing in flight is lost, because nothing is cancelled: the root scope
 * is cancelled only if the drain deadline comes first. weft_main makes the
 * request on the first SIGINT or SIGTERM; any program, weft_run's too, can
 * make it from code. Set weft_config.shutdown_drain_ns, or call
 * weft_shutdown_set_deadline: with the default drain of 0 the request cancels
 * the root scope at the same instant. A request is never withdrawn.
 * (weft_shutdown(), in section 8, is a socket's shutdown(2): unrelated.) */

/* Requests shutdown of the calling task's runtime or, from a plain thread
 * (any thread that is no runtime's worker, weft_blocking's pool
 * included), of every runtime running in the process. The request is
 * seen at once (weft_shutdown_requested, weft_shutdown_wait,
 * weft_shutdown_chan) and sets the drain deadline to now +
 * shutdown_drain_ns (the default 0: the root scope is cancelled now).
 * From a plain thread, a runtime on the virtual clock has a task of its
 * own make the request, so that it happens at one virtual instant: the
 * call may return before the request is seen.
 * Idempotent: a later call changes nothing. Returns 0, -EPERM (a plain
 * thread, and no runtime runs), or -ENOMEM (the request is made, but its
 * drain deadline will not cancel the root scope: no memory for the task
 * that keeps it; weft_shutdown_set_deadline can try again). Any thread; never
 * blocks. */
WEFT_EXTERN int weft_shutdown_request(void);

/* Non-zero once shutdown has been requested in the calling task's
 * runtime; 0 before, and outside a task. Never blocks. */
WEFT_EXTERN int weft_shutdown_requested(void);

/* Waits until shutdown is requested (at once if it has been). Returns 0,
 * -ETIMEDOUT at the deadline (absolute; WEFT_NEVER: none), -ECANCELED,
 * -EINVAL (deadline < 0), -EPERM (not in a task). Cancellation point: in
 * a cancelled scope it returns -ECANCELED even after a request; a cancel
 * leaves nothing behind. Blocks. */
WEFT_EXTERN int weft_shutdown_wait(weft_time deadline);

/* The runtime's shutdown channel, to use as a case of weft_select next to
 * the program's own channels (Go's ctx.Done()): nothing is ever sent on
 * it, and the request closes it, so a receive from it blocks until the
 * request and returns -EPIPE from then on. The runtime owns it and frees
 * it when weft_run returns: never send on it, close it or unref it (take
 * a reference to keep it longer). NULL outside a task. Never blocks. */
WEFT_EXTERN struct weft_chan *weft_shutdown_chan(void);

/* Sets the drain deadline: if tasks still run when the runtime's clock
 * reaches it, the root scope is cancelled then (absolute; WEFT_NEVER:
 * never; already past: now). So the task that handles the request says how
 * long the drain may take, as Go's Server.Shutdown(ctx) does. Requests
 * shutdown first if nothing has. It replaces the deadline the request
 * takes from shutdown_drain_ns, earlier or later, before the request or
 * after it, and the latest call wins: the code that sees the work in
 * flight knows its drain better than a configuration written before it.
 * weft_main's second signal still ends the process at once. Every task's
 * weft_deadline() reports the deadline (except inside shielded scopes).
 * Returns 0, -EALREADY (the root scope is cancelled already: too late to
 * move it), -EINVAL (deadline < 0), -EPERM (not in a task), -ENOMEM
 * (stored, but not kept: see weft_shutdown_request). Not a cancellation
 * point; never blocks. */
WEFT_EXTERN int weft_shutdown_set_deadline(weft_time deadline);

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
    /* The first child to finish, success or failure, wins and cancels the
     * rest; join returns the winner's status and weft_scope_winner() tells
     * which (Promise.race, Go's first-result select). Statuses are kept. */
    WEFT_RACE = 3,
    /* For servers: a scope of independent children, one per connection or
     * job (Trio's nursery of handlers, Go's `go handle(conn)`). A failing
     * child cancels nobody; its status goes to the scope's on_failure
     * handler, or without one to a line on stderr (see weft_scope_opts).
     * The scope keeps nothing per child, so its memory stays the same
     * however many children come and go, and there is no limit on their
     * number: weft_spawn into it returns 0, weft_scope_status() -ENODATA,
     * and weft_scope_spawned() and weft_scope_failed() stop at INT_MAX.
     * Join waits for every child as always; it returns 0, or -ECANCELED /
     * -ETIMEDOUT if the scope was cancelled or its deadline passed. */
    WEFT_SERVE = 4,
} weft_policy;

/* What a WEFT_SERVE scope's on_failure handler is told about a child that
 * failed. The strings are the spawner's (name, which must outlive the
 * task anyway) and string literals (file). */
typedef struct weft_child_failure {
    int status;       /* what the child's function returned: negative */
    const char *name; /* weft_spawn_opts.name, or NULL */
    const char *file; /* where it was spawned: weft_spawn's __FILE__ */
    int line;         /* and __LINE__ */
} weft_child_failure;

/* A WEFT_SERVE scope's failure handler; ctx is the opts' failure_ctx. */
typedef void (*weft_failure_fn)(void *ctx, const weft_child_failure *f);

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
    /* WEFT_SERVE only (-EINVAL with another policy): called once for each
     * child whose function returns a negative status, -ECANCELED included.
     * It runs on that child's task, after its function returned and before
     * it counts as finished, so join waits for it; it may block as the
     * child could (the child's cancellation still applies), which delays
     * no other child. NULL: each failure is a line on stderr instead
     * ("weft: task NAME spawned at FILE:LINE failed: ..."), none for
     * -ECANCELED (a cancelled child is a shutdown, not a fault), and at
     * most 10 a second per scope: how many were left out is said on the
     * next line, or at join. */
    weft_failure_fn on_failure;
    void *failure_ctx;
    /* 1: the tasks spawned into this scope, and into the scopes opened
     * inside it, may move between workers, as if each was spawned with
     * weft_spawn_opts.movable = 1 (one spawned with movable = -1 does
     * not). Their code must keep the contract written there. An enclosing
     * scope's choice is inherited; 0 adds nothing (a scope cannot take
     * back its parent's 1); any other value is -EINVAL. */
    int movable;
    /* 1: the tasks spawned into this scope, and into the scopes opened
     * inside it, are compact, as if each was spawned with
     * weft_spawn_opts.compact = 1 (one spawned with compact = -1 is not).
     * Inherited as movable is; 0 adds nothing; any other value is
     * -EINVAL. */
    int compact;
} weft_scope_opts;

/* Opens a scope as a child of the calling task's current scope, and makes
 * it the task's current scope. opts may be NULL (fail-fast, no deadline).
 * A scope opened inside a cancelled scope starts cancelled (unless
 * shielded). Returns 0 and sets *out, or -EINVAL (out NULL, an unknown
 * policy, a negative deadline, movable or compact not 0 or 1, on_failure
 * without WEFT_SERVE), -ENOMEM, -EPERM. Never blocks. */
WEFT_EXTERN int weft_scope_open(weft_scope **out, const weft_scope_opts *opts);

/* Waits until every child of the scope has finished, then closes it (no
 * more spawns) and makes the enclosing scope current again. Not a
 * cancellation point: if the scope is cancelled the children are cancelled
 * and join still waits for them (structured concurrency). Scopes must be
 * joined innermost first. Returns the policy's result (see weft_policy),
 * -ETIMEDOUT if the scope's deadline passed first, -ECANCELED if it was
 * cancelled (weft_scope_cancel or an enclosing scope), -ENOENT (a
 * WEFT_FIRST or WEFT_RACE scope that had no child, so no winner), or
 * -EINVAL (NULL, already joined, or not the innermost open scope), -EPERM
 * (not the owner). Blocks. */
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

/* Number of children spawned into the scope so far (WEFT_SERVE: stops at
 * INT_MAX). Never blocks. */
WEFT_EXTERN int weft_scope_spawned(const weft_scope *s);

/* Number of children that have finished with a negative status
 * (WEFT_SERVE: stops at INT_MAX). Never blocks. */
WEFT_EXTERN int weft_scope_failed(const weft_scope *s);

/* Status of child number `child` (the index weft_spawn returned), once it
 * has finished. Returns 0 and sets *status, -ENOENT (no such child),
 * -EAGAIN (still running), -ENODATA (a WEFT_FAIL_FAST scope keeps only its
 * first error and its failure count, a WEFT_SERVE scope nothing). Never
 * blocks. */
WEFT_EXTERN int weft_scope_status(const weft_scope *s, int child, int *status);

/* WEFT_FIRST, WEFT_RACE: index of the winning child, or -ENOENT if none
 * (yet). */
WEFT_EXTERN int weft_scope_winner(const weft_scope *s);

/* The earliest deadline of the calling task's scopes, up to the first
 * shielded one (Trio's current_effective_deadline): when the task will be
 * cancelled by a deadline if nothing else happens. WEFT_NEVER if none, or
 * outside a task. Never blocks. */
WEFT_EXTERN weft_time weft_deadline(void);

/* The calling task's current (innermost) scope, or NULL outside a task. */
WEFT_EXTERN weft_scope *weft_scope_current(void);

/* A handle to one task, asked for with weft_spawn_opts.handle (Tokio's
 * JoinHandle; Trio gives each task its own cancel scope): cancel that task
 * alone, wait for it and read its status. A small value: copy it freely;
 * all zero is no handle. It stays valid after the task has finished, until
 * it is joined (weft_task_join) or detached (weft_task_detach); each
 * handle should be one or the other, or its record (a few hundred bytes)
 * stays until weft_run returns. A handle joined or detached, or one whose
 * runtime has returned, is refused with -ESRCH, not a crash (a record's
 * generation is checked; it would wrap after 2^40 reuses of one record).
 * The task is a child of its scope as any other: the scope counts it,
 * waits for it, and its cancel reaches it. Spawning without a handle costs
 * nothing of this. */
typedef struct weft_task_handle {
    uint64_t id;
} weft_task_handle;

typedef struct weft_spawn_opts {
    /* A name for diagnostics (the string must outlive the task). */
    const char *name;
    /* Stack size of this task; 0: the runtime's default. Rounded up as
     * weft_config.stack_size is, to the same floor. */
    size_t stack_size;
    /* 0: the scheduler places the task (where it was spawned, or on an
     * idle worker that takes it). k >= 1: it starts, and so stays, on
     * worker k - 1 (weft_worker_id() + 1), e.g. one acceptor per worker
     * with SO_REUSEPORT. */
    int worker;
    /* Non-NULL: *handle receives a handle to the task (see
     * weft_task_handle), or a zero one if the spawn fails. */
    weft_task_handle *handle;
    /* Whether the task may move to another worker once started. 0: as its
     * scope says (weft_scope_opts.movable), by default not: it runs on
     * the worker where it first ran for life, so that C code that keeps a
     * thread-local's address (errno through a cached __errno_location,
     * OpenSSL's error queue, any __thread variable whose address is taken
     * or which the compiler caches) stays correct. 1: it may move; -1:
     * never, whatever its scope says. A task given worker = k never moves.
     *
     * The contract of a movable task: its code keeps no thread-local
     * address (nor a value derived from the thread, such as
     * pthread_self()) across a weft call that may block. Between such
     * calls it runs on one thread as any task.
     *
     * The runtime moves such a task only while it is not running (parked
     * or runnable): to the worker of the task that keeps waking it, once
     * the two have talked for a few round trips (as Go's runnext and
     * Tokio's LIFO slot place a woken task with its waker), and to an idle
     * worker when its worker has more tasks that yield than it can run.
     * A movable task that waits on work kept by its worker (a scope
     * deadline it owns, a descriptor or a blocking-pool call it waits on)
     * stays there meanwhile. See docs/design.md, "Where tasks run".
     *
     * Tasks move on x86-64 only. On other machines (aarch64) compilers
     * keep the thread pointer in a register across calls, so no code,
     * weft's own included, could follow a move: there movable is
     * accepted and the task stays where it started (actors too). */
    int movable;
    /* 1: a background child, which the scope waits for and cancels like
     * any child but whose end its policy never sees (Trio's system tasks):
     * it has no index and no status in the scope, weft_scope_spawned and
     * weft_scope_failed do not count it, it is never a WEFT_FIRST or
     * WEFT_RACE scope's winner and its failure cancels no sibling. For a
     * helper that serves the other children (a process's reaper is one);
     * read its status through opts.handle. 0: an ordinary child. */
    int background;
    /* Whether the task is compact: 0: as its scope says
     * (weft_scope_opts.compact), by default not; 1: compact; -1: not,
     * whatever its scope says. For servers with very many mostly idle
     * connections: a parked task normally keeps the page at its stack's
     * top resident (about 4 KiB); a compact task that stays parked in one
     * of the waits below keeps only the used part of its stack, copied to
     * the heap (a few hundred bytes, beside its record), and gives every
     * page of its stack back to the kernel: under 1 KiB in all. Its stack
     * keeps its addresses: the switch back to it copies the part in
     * again, so pointers into it stay right. "Stays parked": its worker
     * gives back the stacks of the compact tasks still parked 64 compact
     * parks later, and all of them when it goes idle.
     *
     * Waits that give the stack back: weft_chan_send and weft_chan_recv
     * (and their _until forms; values of at most 16 bytes), weft_mutex_lock
     * (and its _until form), weft_event_wait, weft_wg_wait,
     * weft_sem_acquire, weft_rwlock_rdlock and weft_rwlock_wrlock (and
     * their _until forms), weft_fd_wait for one direction (and the socket
     * calls that wait for one), weft_sleep_for and weft_sleep_until. A
     * compact task parked in any other wait (select, the future
     * combinators, condition variables, once, barriers, joins, actors,
     * the blocking pool, files, a descriptor wait for both directions) keeps
     * its stack as a plain task does: those waits let other threads
     * write into the parked task's stack. In the waits above other
     * threads touch only the task's record, off the stack: a value sent
     * to or received by a parked compact task goes through its record
     * and is copied to the caller's buffer when it runs again.
     *
     * Cost: a compact task's park in those waits costs a few nanoseconds
     * more; waking one whose stack was given back costs the copy out and
     * a madvise, then a page fault and the copy in: microseconds
     * (bench/wake-compact). A large buffer on the stack is copied out
     * with the rest: keep such buffers on the heap. The task dump
     * (WEFT_DUMP_STACKS) walks a parked compact task's stack as any
     * other's, from its copy if it was given back. Stack overflow is
     * caught as for any task (its stack keeps its guard page). A compact
     * task never moves between workers: compact = 1 with movable = 1 is
     * -EINVAL, and a movable scope's compact tasks stay where they start.
     * Tasks that are not compact pay a test or two per switch and per
     * wait. */
    int compact;
} weft_spawn_opts;

/* Spawns fn(arg) as a child of scope s (NULL: the calling task's current
 * scope). The child starts soon, on this worker or on an idle one.
 * Returns the child's index in the scope (0, 1, 2, ... in spawn order; 0
 * for every child of a WEFT_SERVE scope, which numbers none, and for a
 * background child, which has none), or -EINVAL (fn is NULL,
 * opts->worker is not 0 .. weft_workers(), opts->movable not -1 .. 1 or
 * opts->background not 0 or 1), -EPERM (not
 * for every child of a WEFT_SERVE scope, which numbers none), or -EINVAL
 * (fn is NULL, opts->worker is not 0 .. weft_workers(), opts->movable
 * or opts->compact not -1 .. 1, or both 1), -EPERM (not
 * called from a task of this runtime), -ESHUTDOWN (the scope was joined),
 * -ECANCELED (the scope is cancelled), -EOVERFLOW (the scope has had
 * INT_MAX children, the most an index can number: every policy but
 * WEFT_SERVE), -ENOMEM. Never blocks, but may yield: a task that spawns
 * many children without blocking lets them run every so often, so a
 * spawning loop cannot fill memory with tasks that have not started. Not a
 * cancellation point. Use the macros, which record the spawn site for
 * diagnostics; weft_spawn_ex's options may be a compound literal,
 * weft_spawn_ex(s, fn, arg, &(weft_spawn_opts){.name = "a", .worker = 1}).
 */
WEFT_EXTERN int weft_spawn_at(weft_scope *s, weft_fn fn, void *arg,
                              const weft_spawn_opts *opts, const char *file,
                              int line);
#define weft_spawn(s, fn, arg)                                                 \
    weft_spawn_at((s), (fn), (arg), NULL, __FILE__, __LINE__)
#define weft_spawn_ex(s, fn, arg, ...)                                         \
    weft_spawn_at((s), (fn), (arg), (__VA_ARGS__), __FILE__, __LINE__)

/* Cancels the handle's task alone: from now on each of its cancellation
 * points returns -ECANCELED, level-triggered as for a scope's cancel
 * (weft_cancelled() says so in the task), and if it is blocked in one it
 * is woken. Scopes the task opens are cancelled with it, except shielded
 * ones; its own scope and its siblings are not. If the task then returns
 * -ECANCELED, its scope keeps and counts that status, but its policy does
 * not act on it: a fail-fast scope does not cancel the siblings, a
 * WEFT_FIRST scope does not take it for its first failure, nor a
 * WEFT_RACE scope for its winner. Idempotent. Returns 0 (also once the
 * task has finished: there is nothing left to do), -EINVAL (a zero handle,
 * or one no spawn made), -ESRCH (joined, detached, or its runtime has
 * returned). Any thread, also outside a runtime; never blocks. */
WEFT_EXTERN int weft_task_cancel(weft_task_handle h);

/* Waits until the handle's task has finished, sets *status (if status is
 * not NULL) to what its function returned, and releases the handle.
 * Returns 0, -ECANCELED (the caller's scope is cancelled), -EINVAL (a zero
 * handle, one no spawn made, or one of another runtime), -ESRCH (joined,
 * detached, or its runtime has returned), -EDEADLK (the task itself),
 * -EPERM (not in a task). A cancellation point: after -ECANCELED the
 * handle is as it was (the task runs on; join it again, or detach it).
 * Several tasks may wait on one handle: the first to find the task
 * finished gets its status, the others -ESRCH. Blocks. */
WEFT_EXTERN int weft_task_join(weft_task_handle h, int *status);

/* weft_task_join with a deadline: -ETIMEDOUT, leaving the handle as it
 * was. Blocks. */
WEFT_EXTERN int weft_task_join_until(weft_task_handle h, int *status,
                                     weft_time deadline);

/* Gives up the handle without waiting (pthread_detach): the task runs on,
 * a child of its scope as before; tasks waiting in weft_task_join on it
 * return -ESRCH. Returns 0, -EINVAL (a zero handle, or one no spawn
 * made), -ESRCH (joined, detached, or its runtime has returned). Any
 * thread, also outside a runtime; never blocks. */
WEFT_EXTERN int weft_task_detach(weft_task_handle h);

/* Non-zero if the calling task's current scope is cancelled (or the task
 * was, through its handle): CPU-bound loops poll it. 0 outside a task.
 * Never blocks. */
WEFT_EXTERN int weft_cancelled(void);

/* Gives other ready tasks a turn, then returns 0: the caller is queued
 * behind the tasks that are ready, but a yield is a scheduling point, not
 * a barrier (fairness passes and seeded runs may resume the caller before
 * all of them have run). Not a cancellation point. -EPERM outside a task. */
WEFT_EXTERN int weft_yield(void);

/* Runs fn(arg) on the calling task inside a new scope whose deadline is
 * weft_now() + timeout_ns (asyncio.timeout / wait_for / Trio's
 * fail_after). Returns fn's result, or -ETIMEDOUT if the deadline passed
 * and fn failed (it was cancelled). Scopes fn opens and leaves open are
 * joined before it returns; the scope it runs in is weft_call_for's
 * (fn may join it, never free it). Blocks as fn does. Not a
 * cancellation point of its own: fn runs even in a cancelled scope, and a
 * cancel of the caller reaches fn through the new scope; the call then
 * returns fn's status once every scope fn opened is joined, leaving
 * nothing behind. -EPERM outside a task, -EINVAL if fn is NULL, -ENOMEM.
 * (0.2's weft_with_timeout, with the timeout last.) */
WEFT_EXTERN int weft_call_for(weft_fn fn, void *arg, int64_t timeout_ns);

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
WEFT_EXTERN int weft_sleep_for(int64_t ns);

/* Suspends the task until the clock reaches deadline. Like weft_sleep_for.
 * Blocks. */
WEFT_EXTERN int weft_sleep_until(weft_time deadline);

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
 * capacity buffered values (0: rendezvous). The buffer is allocated here,
 * all of it (capacity * elem_size bytes, besides about 100 bytes for the
 * channel), so no send ever allocates. It comes from malloc: a large one
 * takes its whole size in address space at once (10^6 slots of int64_t:
 * 8 MB), but on Linux its pages become resident only as the slots are
 * first used. Returns 0 and sets *out, or -EINVAL (out NULL, elem_size
 * out of range, capacity * elem_size more than half the address space),
 * -ENOMEM (the channel or its buffer could not be allocated: nothing was
 * made). Any thread; never blocks. */
WEFT_EXTERN int weft_chan_new(weft_chan **out, size_t elem_size,
                              size_t capacity);

/* Takes a reference; returns c. Any thread; never blocks. */
WEFT_EXTERN weft_chan *weft_chan_ref(weft_chan *c);

/* Drops a reference; the last one frees the channel and any values still
 * buffered. Returns 0, or -EINVAL (NULL, or not a live channel: a debug
 * build keeps the last 1024 freed channels and futures marked dead, so
 * that a late call on one says so). Any thread; never blocks. */
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
    WEFT_OP_SEND = 1,     /* send *elem on chan */
    WEFT_OP_RECV = 2,     /* receive from chan into *elem */
    WEFT_OP_READ = 3,     /* fd is readable (as weft_fd_wait's WEFT_IO_READ) */
    WEFT_OP_WRITE = 4,    /* fd is writable */
    WEFT_OP_FUTURE = 5,   /* future has settled */
    WEFT_OP_SCOPE = 6,    /* scope's children have all finished */
    WEFT_OP_SEM = 7,      /* one permit of sem is acquired */
    WEFT_OP_DEADLINE = 8, /* the instant `deadline` has come */
    WEFT_OP_JOIN = 9,     /* task's handle is joined (weft_task_join) */
    WEFT_OP_EVENT = 10,   /* event is set (weft_event_wait) */
    WEFT_OP_WG = 11,      /* wg's count is zero (weft_wg_wait) */
    WEFT_OP_ACTOR_JOIN = 12, /* actor has exited (weft_actor_join) */
    WEFT_OP_TELL = 13,       /* *elem is told to actor (weft_actor_tell) */
    WEFT_OP_LIMITER = 14,    /* n tokens of limiter are taken */
    WEFT_OP_RDLOCK = 15,     /* rwlock is read-locked (weft_rwlock_rdlock) */
    WEFT_OP_WRLOCK = 16,     /* rwlock is write-locked (weft_rwlock_wrlock) */
    WEFT_OP_BULKHEAD = 17,   /* a turn of bulkhead is held (..._enter) */
    WEFT_OP_MUTEX = 18,      /* mutex is locked (weft_mutex_lock) */
} weft_op;

/* Waits that are no select case, and why:
 * - weft_cond_wait: it must release its mutex and queue in one step; a
 *   case would release it whether or not it is chosen.
 * - weft_barrier_wait: arriving is counting; a case not chosen would
 *   have arrived all the same.
 * - weft_once: a caller that finds the function not yet run runs it
 *   itself; that is work, not a wait.
 * - weft_actor_ask: it sends and then waits for the reply; a select
 *   chosen for its send would still wait. Ask in a task started as a
 *   future (weft_future_spawn) and select on the future (FUTURE).
 * - receiving from an actor's mailbox: only the actor's own loop takes
 *   messages out (its behaviour is called with each), so no task can
 *   wait to receive one.
 * - a supervisor (weft_supervisor_* calls wait for the supervisor's own
 *   loop, which answers them in turn): call it in a task started as a
 *   future and select on the future.
 * - sleeping: a DEADLINE case.
 * - a blocking call (weft_blocking): start it as a future, with
 *   weft_future_spawn of a task that calls weft_blocking, and select on
 *   the future (FUTURE). A select that does not choose it leaves it
 *   running; weft_future_cancel cancels that task, which then leaves the
 *   call as weft_blocking's cancel says (not started: dropped; running:
 *   it finishes on its thread and its status is discarded). */

struct weft_future;
struct weft_sem;
struct weft_event;
struct weft_wg;
struct weft_rwlock;
struct weft_actor;
struct weft_limiter;
struct weft_bulkhead;
struct weft_mutex;

/* One case of a select: `op` says which members it uses. A
 * case whose object is NULL (chan, future, scope, sem, event, wg, actor,
 * limiter, rwlock, bulkhead, mutex), whose fd is negative, whose task
 * handle is zero or whose deadline is WEFT_NEVER is never ready (Go's
 * nil channel), so cases can be switched off without rebuilding the
 * array.
 * When the case is chosen, rc says how it went:
 * - SEND, RECV: 0, or -EPIPE (the channel is closed; nothing sent or
 *   received).
 * - READ, WRITE: 0 (fd is ready, as after weft_fd_wait: a read or write
 *   may still say EAGAIN), or -EBADF if fd was closed with weft_close or
 *   weft_fd_forget while the select waited.
 * - FUTURE: the future's result, as weft_future_try_await gives it: 0 with the
 *   value copied to *elem (if elem is not NULL), or its error.
 * - SCOPE: the scope has no running child: the select joined it
 *   (weft_scope_join, which no longer waits) and rc is what that
 *   returned. Only the scope's owner may use this case (else the select
 *   returns -EPERM); free the scope afterwards as usual.
 * - SEM: 0: one permit is the caller's, to give back with
 *   weft_sem_release(sem, 1).
 * - DEADLINE: 0.
 * - JOIN: 0: the task has finished, its status is stored in *(int *)elem
 *   (if elem is not NULL) and the handle is used up, as after
 *   weft_task_join; or -ESRCH (the handle was released or joined
 *   meanwhile). A handle that is stale already fails the select (-ESRCH,
 *   -EINVAL), and so does the caller's own (-EDEADLK).
 * - EVENT: 0 (the event is set; as weft_event_wait, nothing is
 *   consumed). WG: 0 (the count is zero).
 * - ACTOR_JOIN: 0, the actor's exit status in *(int *)elem (if elem is
 *   not NULL). The actor itself fails the select with -EDEADLK; the
 *   caller holds a reference to actor, as for weft_actor_join.
 * - TELL: 0 (the message *elem, of the actor's msg_size, is in the
 *   mailbox, in order with the caller's other tells), or -ESRCH (the
 *   actor refuses messages; nothing was told). elem NULL: -EINVAL.
 * - LIMITER: 0: n tokens (n 0 means 1; more than the burst: -EINVAL) are
 *   taken. The case reserves nothing while it waits: it looks again at
 *   the instant its tokens would be due, as weft_limiter_try_acquire, so takers
 *   waiting in weft_limiter_acquire, which reserve, go first.
 * - RDLOCK, WRLOCK: 0: the caller holds rwlock for reading or writing,
 *   queued in line with weft_rwlock_rdlock's and _wrlock's callers.
 *   Either while the caller holds it for writing fails the select with
 *   -EDEADLK.
 * - MUTEX: 0: the caller holds mutex (an unlock hands it straight to a
 *   waiting select: nobody barges in between). The caller's
 *   own mutex fails the select with -EDEADLK, a destroyed one -EINVAL.
 * - BULKHEAD: 0: the caller holds a turn, to give back with
 *   weft_bulkhead_leave; or -EBUSY (its queue is full: nothing held).
 * Exactly one case takes effect: cases not chosen sent nothing, received
 * nothing, took no permit, token, lock or turn, told nothing and joined
 * nothing.
 * Fill cases by member name: {.op = WEFT_OP_READ, .fd = s} (the
 * positional form {chan, op, elem, rc} still works, but leaves the union
 * out, which -Wextra warns about). */
typedef struct weft_case {
    weft_chan *chan; /* SEND, RECV */
    weft_op op;
    void *elem; /* SEND: the value; RECV: where to store the value;
                 * FUTURE: where to copy a resolved value (or NULL);
                 * JOIN, ACTOR_JOIN: an int * for the status (or NULL);
                 * TELL: the message */
    int rc;     /* out, for the chosen case */
    union {
        struct weft_future *future;     /* FUTURE */
        weft_scope *scope;              /* SCOPE */
        struct weft_sem *sem;           /* SEM */
        weft_time deadline;             /* DEADLINE: absolute */
        int fd;                         /* READ, WRITE */
        weft_task_handle task;          /* JOIN */
        struct weft_event *event;       /* EVENT */
        struct weft_wg *wg;             /* WG */
        struct weft_actor *actor;       /* ACTOR_JOIN, TELL */
        struct weft_limiter *limiter;   /* LIMITER */
        struct weft_rwlock *rwlock;     /* RDLOCK, WRLOCK */
        struct weft_bulkhead *bulkhead; /* BULKHEAD */
        struct weft_mutex *mutex;       /* MUTEX */
    };
    int64_t n; /* LIMITER: tokens to take (0: 1) */
} weft_case;

/* Waits until one of the n cases can proceed, performs it, and returns its
 * index; that case's rc says how (see weft_case: a receive from a closed,
 * drained channel, or a send to a closed one, is ready at once and chosen
 * like any other). When several are ready, the choice is uniformly
 * random. Returns -ETIMEDOUT at the deadline (WEFT_NEVER: none; a
 * DEADLINE case at the same instant is chosen instead), -ECANCELED,
 * -EINVAL (a malformed case), -EPERM (not in a task, or a SCOPE case not
 * opened by the caller), -EDEADLK and -ESRCH (a JOIN, ACTOR_JOIN,
 * MUTEX, RDLOCK or WRLOCK case the caller could never see ready: see
 * weft_case), -ENOMEM. A deadline already past (0, say) only skips the
 * wait: a case ready now is still taken, and -ETIMEDOUT comes at once if
 * none is (as weft_try_select, with -ETIMEDOUT for -EAGAIN). No cases
 * (n = 0, cases may be NULL) waits for the deadline or a cancel only, as
 * Go's empty select does.
 * Cancellation point: on any error no case happened (nothing sent,
 * nothing taken, no permit, token, lock or turn taken, nothing joined,
 * no waiter left on any object); in a cancelled scope it returns
 * -ECANCELED even when a case is ready. Blocks. */
WEFT_EXTERN int weft_select(weft_case *cases, int n, weft_time deadline);

/* weft_select with a default case: if no case is ready now, returns
 * -EAGAIN at once. When exactly one case is ready, it is always taken.
 * A READ or WRITE case is ready if an edge came that no wait has been
 * given yet; a SCOPE, JOIN, ACTOR_JOIN, MUTEX, RDLOCK or WRLOCK case
 * makes the select a task's call (-EPERM elsewhere). Never blocks. */
WEFT_EXTERN int weft_try_select(weft_case *cases, int n);

/* ------------------------------------------------------------------------
 * 6. Task-aware synchronisation
 *
 * These suspend the task, never its OS thread, and work across workers.
 * They are plain values: zero-initialise them (or use the _INIT macro) and
 * they are ready. Each has a _destroy that reports misuse (-EBUSY while
 * it is held or waited on) before its memory is reused; calling it is
 * optional, as nothing is allocated. Every waiting call is a cancellation
 * point, served in arrival order.
 * ---------------------------------------------------------------------- */

/* A mutex that is fast under contention and never starves a waiter (Go's
 * sync.Mutex rules): waiters queue in arrival order; unlock wakes the first
 * one, which competes with running tasks (a task that locks again at once
 * keeps the lock on its worker, so no cache-line transfer per lock); a
 * waiter that loses keeps its place (one woken from another worker looks
 * again every 10 us rather than be woken by each unlock), and once the
 * first waiter has waited 1 ms, unlock hands the lock to it directly and
 * nobody else can take it.
 * Uncontended, lock and unlock are one compare-and-swap each. */
typedef struct weft_mutex {
    WEFT_ALIGN8 unsigned char opaque[40];
} weft_mutex;
#define WEFT_MUTEX_INIT                                                        \
    {                                                                          \
        {                                                                      \
            0                                                                  \
        }                                                                      \
    }

/* Locks, waiting if it is held. Returns 0, -ECANCELED (not locked),
 * -EDEADLK (the calling task holds it already, or waiting would close a
 * cycle of tasks waiting for each other's mutexes: see "Deadlocks" in
 * section 14; not locked, nothing waited for), -EINVAL (NULL, or
 * destroyed), -EPERM. Cancellation point: a cancelled lock holds nothing
 * and leaves no waiter queued. Blocks. */
WEFT_EXTERN int weft_mutex_lock(weft_mutex *m);
/* weft_mutex_lock with a deadline: -ETIMEDOUT (not locked). Blocks. */
WEFT_EXTERN int weft_mutex_lock_until(weft_mutex *m, weft_time deadline);
/* Locks if it is free now (also ahead of waiters, as a running task's lock
 * may; never ahead of a starving waiter, whose hand-off keeps it held):
 * 0, -EBUSY, -EINVAL. Never blocks. */
WEFT_EXTERN int weft_mutex_try_lock(weft_mutex *m);
/* Unlocks. Returns 0, or -EPERM (the calling task does not hold it).
 * Never blocks. */
WEFT_EXTERN int weft_mutex_unlock(weft_mutex *m);
/* Marks an unlocked, unwaited mutex destroyed: later locks return -EINVAL
 * until it is initialised again. Returns 0, -EBUSY (held or waited on:
 * nothing changed), -EINVAL (NULL or destroyed twice). Never blocks. */
WEFT_EXTERN int weft_mutex_destroy(weft_mutex *m);

/* A counting semaphore. */
typedef struct weft_sem {
    WEFT_ALIGN8 unsigned char opaque[40];
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
 * -EINVAL (n < 1, or the count would pass LONG_MAX: nothing changed). Any
 * thread; never blocks. */
WEFT_EXTERN int weft_sem_release(weft_sem *s, long n);
/* Permits available now. Never blocks. */
WEFT_EXTERN long weft_sem_available(weft_sem *s);
/* Checks that nobody waits and zeroes the semaphore (no permits; its memory
 * may then be reused). Returns 0, -EBUSY (a task waits: nothing changed),
 * -EINVAL. Any thread; never blocks. */
WEFT_EXTERN int weft_sem_destroy(weft_sem *s);

/* An event: waiters wait until it is set; set wakes them all and lets
 * later waits through until reset. */
typedef struct weft_event {
    WEFT_ALIGN8 unsigned char opaque[40];
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
/* Checks that nobody waits and resets the event to WEFT_EVENT_INIT.
 * Returns 0, -EBUSY (a task waits: nothing changed), -EINVAL. Any thread;
 * never blocks. */
WEFT_EXTERN int weft_event_destroy(weft_event *e);

/* A wait group (Go's sync.WaitGroup): add before starting work, done when
 * a piece finishes, wait until the count is back to zero. */
typedef struct weft_wg {
    WEFT_ALIGN8 unsigned char opaque[40];
} weft_wg;
#define WEFT_WG_INIT                                                           \
    {                                                                          \
        {                                                                      \
            0                                                                  \
        }                                                                      \
    }
/* Adds delta (may be negative) to the count. Returns 0, or -EINVAL if the
 * count would go below zero or past LONG_MAX (nothing changed). Any
 * thread; never blocks. */
WEFT_EXTERN int weft_wg_add(weft_wg *wg, long delta);
/* weft_wg_add(wg, -1). */
WEFT_EXTERN int weft_wg_done(weft_wg *wg);
/* Waits until the count is zero. Returns 0, -ECANCELED, -EINVAL, -EPERM.
 * Cancellation point: a cancelled wait leaves nothing behind (the count is
 * not changed, no waiter stays queued). Blocks. */
WEFT_EXTERN int weft_wg_wait(weft_wg *wg);
/* weft_wg_wait with a deadline: -ETIMEDOUT. Blocks. */
WEFT_EXTERN int weft_wg_wait_until(weft_wg *wg, weft_time deadline);
/* Checks that nobody waits and resets the group to WEFT_WG_INIT (count
 * 0). Returns 0, -EBUSY (a task waits: nothing changed), -EINVAL. Any
 * thread; never blocks. */
WEFT_EXTERN int weft_wg_destroy(weft_wg *wg);

/* A readers-writer lock: many readers or one writer. Waiters are served in
 * arrival order, readers and writers in one line; once a writer waits,
 * readers that arrive later wait behind it (Go's RWMutex rule), so a
 * stream of readers cannot starve a writer. When a writer unlocks, the
 * readers that queued before the next writer enter together. Readers are
 * counted, not named: a task must not read-lock again while it holds a
 * read lock (a writer waiting between would deadlock them both). */
typedef struct weft_rwlock {
    WEFT_ALIGN8 unsigned char opaque[40];
} weft_rwlock;
#define WEFT_RWLOCK_INIT                                                       \
    {                                                                          \
        {                                                                      \
            0                                                                  \
        }                                                                      \
    }
/* Locks for reading, waiting while a writer holds it or anyone waits.
 * Returns 0, -ECANCELED (not locked), -EDEADLK (the calling task holds it
 * for writing), -EINVAL, -EPERM. Cancellation point: a cancelled wait
 * holds nothing, leaves no waiter queued, and lets in the waiters it was
 * keeping out. Blocks. */
WEFT_EXTERN int weft_rwlock_rdlock(weft_rwlock *l);
/* weft_rwlock_rdlock with a deadline: -ETIMEDOUT (not locked, nothing left
 * behind). Cancellation point. Blocks. */
WEFT_EXTERN int weft_rwlock_rdlock_until(weft_rwlock *l, weft_time deadline);
/* Locks for reading if no writer holds it and nobody waits: 0, -EBUSY,
 * -EINVAL, -EPERM. Never blocks. */
WEFT_EXTERN int weft_rwlock_try_rdlock(weft_rwlock *l);
/* Drops one read hold; the last reader out lets the next writer in.
 * Returns 0, -EPERM (no read hold: the count is 0), -EINVAL. Any task may
 * drop a read hold, since readers are not named. Never blocks. */
WEFT_EXTERN int weft_rwlock_rdunlock(weft_rwlock *l);
/* Locks for writing, waiting while anyone holds it or waits ahead. Returns
 * 0, -ECANCELED (not locked), -EDEADLK (the calling task holds it for
 * writing), -EINVAL, -EPERM. Cancellation point: a cancelled wait holds
 * nothing, leaves no waiter queued, and lets in the readers queued behind
 * it if readers hold the lock. Blocks. */
WEFT_EXTERN int weft_rwlock_wrlock(weft_rwlock *l);
/* weft_rwlock_wrlock with a deadline: -ETIMEDOUT (not locked, nothing left
 * behind). Cancellation point. Blocks. */
WEFT_EXTERN int weft_rwlock_wrlock_until(weft_rwlock *l, weft_time deadline);
/* Locks for writing if nobody holds it or waits: 0, -EBUSY, -EINVAL,
 * -EPERM. Never blocks. */
WEFT_EXTERN int weft_rwlock_try_wrlock(weft_rwlock *l);
/* Drops the write hold, letting in the next writer or the readers queued
 * before it. Returns 0, -EPERM (the calling task does not hold it for
 * writing), -EINVAL. Never blocks. */
WEFT_EXTERN int weft_rwlock_wrunlock(weft_rwlock *l);
/* Checks that nobody holds or waits on the lock and resets it to
 * WEFT_RWLOCK_INIT (its memory may then be reused). Returns 0, -EBUSY
 * (held or waited on: nothing changed), -EINVAL. Any thread; never
 * blocks. */
WEFT_EXTERN int weft_rwlock_destroy(weft_rwlock *l);

/* A condition variable, used with a weft_mutex (pthread_cond_t's rules,
 * with no spurious wake-ups: a wait returns 0 only when a signal or a
 * broadcast chose it; still re-check the predicate in a loop, as another
 * task may lock the mutex first and change it). */
typedef struct weft_cond {
    WEFT_ALIGN8 unsigned char opaque[40];
} weft_cond;
#define WEFT_COND_INIT                                                         \
    {                                                                          \
        {                                                                      \
            0                                                                  \
        }                                                                      \
    }
/* Called holding m: queues, unlocks m, and waits for a signal, atomically
 * with respect to signal and broadcast (one sent after the unlock is not
 * missed); then locks m again. Returns, always holding m again: 0
 * (signalled), -ECANCELED, -EPERM (m is not held by the calling task, or
 * not in a task: nothing done), -EINVAL. Cancellation point: a cancelled
 * wait was not signalled (the signal went to another waiter) and left no
 * waiter queued; it still waits for m before returning. Blocks. */
WEFT_EXTERN int weft_cond_wait(weft_cond *c, weft_mutex *m);
/* weft_cond_wait with a deadline: -ETIMEDOUT (not signalled, no waiter
 * left, m held again; re-locking m may take past the deadline).
 * Cancellation point. Blocks. */
WEFT_EXTERN int weft_cond_wait_until(weft_cond *c, weft_mutex *m,
                                     weft_time deadline);
/* Wakes the task that has waited longest, if any. Returns 0 or -EINVAL.
 * Any thread (also a plain one); never blocks. */
WEFT_EXTERN int weft_cond_signal(weft_cond *c);
/* Wakes every waiting task. Returns 0 or -EINVAL. Any thread; never
 * blocks. */
WEFT_EXTERN int weft_cond_broadcast(weft_cond *c);
/* Checks that nobody waits and resets it to WEFT_COND_INIT. Returns 0,
 * -EBUSY (a task waits: nothing changed), -EINVAL. Any thread; never
 * blocks. */
WEFT_EXTERN int weft_cond_destroy(weft_cond *c);

/* Once: runs an initialisation exactly once. A failed one (negative
 * status) does not count, and the next caller tries again with its own
 * function (Tokio's OnceCell::get_or_try_init). */
typedef struct weft_once {
    WEFT_ALIGN8 unsigned char opaque[40];
} weft_once;
#define WEFT_ONCE_INIT                                                         \
    {                                                                          \
        {                                                                      \
            0                                                                  \
        }                                                                      \
    }
/* If the once is done, returns the status its successful fn returned, at
 * once, from any thread (not a cancellation point then). Otherwise, if no
 * fn is running, runs fn(arg) on the calling task and returns its status:
 * a status >= 0 makes the once done; a negative one leaves it not done.
 * If another caller's fn is running, waits for it: when it succeeds,
 * returns its status; when it fails, the first waiter runs its own fn(arg)
 * as above and the others keep waiting. Returns also -EINVAL (o or fn
 * NULL), -EDEADLK (called from the running fn), -EPERM. Cancellation
 * point while not done: -ECANCELED on entry in a cancelled scope, or if
 * cancelled while waiting; fn was then not run by this caller, and the
 * running fn keeps running (a waiter cancelled just as its turn came hands
 * the turn to the next waiter). Blocks. */
WEFT_EXTERN int weft_once_do(weft_once *o, weft_fn fn, void *arg);
/* weft_once_do with a deadline on the waiting only (it does not limit a fn
 * this caller runs): -ETIMEDOUT, fn not run by this caller. Blocks. */
WEFT_EXTERN int weft_once_do_until(weft_once *o, weft_fn fn, void *arg,
                                   weft_time deadline);
/* 1 if the once is done (a fn succeeded), else 0 (also for NULL). Any
 * thread; never blocks. */
WEFT_EXTERN int weft_once_is_done(weft_once *o);
/* Checks that no fn is running and nobody waits, and resets the once to
 * WEFT_ONCE_INIT (not done). Returns 0, -EBUSY (a fn runs or a task
 * waits: nothing changed), -EINVAL. Any thread; never blocks. */
WEFT_EXTERN int weft_once_destroy(weft_once *o);

/* A barrier for n tasks, reusable: each generation releases its n tasks
 * together and the barrier starts the next one. */
typedef struct weft_barrier {
    WEFT_ALIGN8 unsigned char opaque[40];
} weft_barrier;
/* Sets the number of tasks per generation (n >= 1); do this before any
 * task uses it. Returns 0 or -EINVAL (NULL, n < 1). Any thread; never
 * blocks. */
WEFT_EXTERN int weft_barrier_init(weft_barrier *b, int n);
/* Arrives and waits until n tasks have arrived in this generation, then
 * all n are released. Returns 1 to exactly one task of each generation
 * (the last to arrive, the leader, as PTHREAD_BARRIER_SERIAL_THREAD), 0
 * to the others, or -ECANCELED, -EINVAL (NULL, or not initialised),
 * -EPERM. Cancellation point: a cancelled wait withdraws its arrival (the
 * generation needs another one) and leaves no waiter queued; a wait whose
 * generation completed returns 0 even if a cancel raced. Blocks. */
WEFT_EXTERN int weft_barrier_wait(weft_barrier *b);
/* weft_barrier_wait with a deadline: -ETIMEDOUT (arrival withdrawn, as for
 * a cancel). Cancellation point. Blocks. */
WEFT_EXTERN int weft_barrier_wait_until(weft_barrier *b, weft_time deadline);
/* Checks that nobody waits and resets the barrier to uninitialised (waits
 * return -EINVAL until weft_barrier_init). Returns 0, -EBUSY (a task waits
 * in the current generation: nothing changed), -EINVAL. Any thread; never
 * blocks. */
WEFT_EXTERN int weft_barrier_destroy(weft_barrier *b);

/* ------------------------------------------------------------------------
 * 7. Blocking work
 *
 * A bounded pool of OS threads runs calls that would block a worker (file
 * I/O, getaddrinfo, CPU-heavy work) while the calling task waits. In
 * simulation (section 17) there is no pool: fn runs inline on the worker,
 * at the virtual instant of the call, so that the run stays a function of
 * its seed (a deadline or cancel is seen only before fn starts).
 * ---------------------------------------------------------------------- */

/* Runs fn(arg) on a thread of the runtime's blocking pool while the calling
 * task waits (its worker runs other tasks meanwhile), and returns fn's
 * status. Pool threads start when work arrives, at most
 * cfg->blocking_threads of them, are reused, and exit after about 10 s
 * without work. Calls start in the order they were made; when
 * cfg->blocking_queue calls already wait for a thread, the caller first
 * waits for room (backpressure), also in arrival order. fn runs on a plain
 * thread, not in a task: it may block that thread, but weft functions that
 * need a task return -EPERM there (the "any thread" ones, such as
 * weft_event_set and weft_sem_release, work).
 *
 * Returns fn's status once fn has returned, or -EINVAL (fn is NULL),
 * -EPERM (not in a task), -ECANCELED, -ENOMEM, -EAGAIN (no pool thread
 * could be started). Blocks.
 *
 * Cancellation point: -ECANCELED on entry in a cancelled scope (fn not
 * run). If the task is cancelled while it waits, it returns -ECANCELED at
 * once. A call still waiting for a thread is then dropped: fn never runs,
 * nothing is left behind. A call already running cannot be stopped: fn
 * runs to its end on its thread and its status is discarded. So fn, arg
 * and whatever arg points to must stay valid until fn returns, not merely
 * until this call returns: arg must not point into the calling task's
 * stack (or into memory the task frees on its way out) unless the call
 * cannot be cancelled (it is made in a shielded scope that has no deadline
 * and that nobody cancels), and what fn produces after the caller left (an
 * open fd, memory) is fn's to clean up. If fn finishes just as the cancel
 * arrives, the call returns fn's status: -ECANCELED always means fn's status
 * was not delivered. weft_run returns only after every such abandoned fn has
 * returned. (Tokio's spawn_blocking cannot even drop a call that has not
 * started: dropping its JoinHandle detaches the closure, which still runs.) */
WEFT_EXTERN int weft_blocking(weft_fn fn, void *arg);

/* weft_blocking with a deadline: -ETIMEDOUT, leaving behind what a cancel
 * does (a call not started is dropped; a running fn finishes and its status
 * is discarded). A deadline already past returns -ETIMEDOUT at once, fn not
 * run. With the virtual clock, fn takes no virtual time: while calls run
 * and every task is blocked, the clock gives them 50 ms of real time to
 * finish before it jumps to the next deadline, so a quick fn returns at
 * the virtual instant it started and a hung one times out at its exact
 * virtual deadline. Cancellation point. Blocks. */
WEFT_EXTERN int weft_blocking_until(weft_fn fn, void *arg, weft_time deadline);

/* A snapshot of the current runtime's blocking pool. */
typedef struct weft_blocking_info {
    int threads;    /* pool threads alive, busy or idle */
    int running;    /* calls whose fn runs now (abandoned ones too) */
    int queued;     /* calls waiting for a thread (at most blocking_queue) */
    int waiting;    /* callers waiting for room in that queue */
    uint64_t calls; /* calls whose fn has returned, since the pool began */
} weft_blocking_info;

/* Fills *out (all zero before the first weft_blocking). Returns 0,
 * -EINVAL (out is NULL), -EPERM. Never blocks (it takes the pool's lock
 * for a moment). */
WEFT_EXTERN int weft_blocking_stats_get(weft_blocking_info *out);

/* ------------------------------------------------------------------------
 * 8. I/O
 *
 * Each worker has its own poller (epoll, edge-triggered). A task that
 * waits for a file descriptor parks on its own worker, which keeps running
 * other tasks; the kernel's readiness wakes it. File descriptors given to
 * weft must be non-blocking.
 *
 * Who closes a descriptor. The sockets weft makes (weft_tcp_listen,
 * weft_accept, weft_tcp_connect, weft_udp_bind, weft_unix_listen,
 * weft_unix_connect and the _addr forms) are weft's own: close them with
 * weft_close(). A wait on one parks without a system call, trusting that
 * the number still names that socket; so closing one with close(2) is a
 * bug (a later descriptor given the number could be waited on in vain),
 * unless weft_fd_forget() was called first, which is the way to hand one
 * to code that closes it itself. Every other descriptor (a pipe, a socket
 * made by libcurl, libpq, c-ares) is foreign: weft_close() it, or let its
 * owner close it with close(2). Each wait on a foreign descriptor that
 * has to park checks (one epoll_ctl) that its worker's registration is
 * for the file the number names now, so a number closed behind weft's
 * back and given to a new descriptor wakes its waits as it should. What
 * no check sees is a close while a task is already waiting: that wait
 * lasts until its deadline. A library's close hook that calls
 * weft_fd_forget() (or weft_close()) ends such waits with -EBADF, and
 * saves the check's work for the descriptors it forgets:
 *   libcurl: CURLOPT_CLOSESOCKETFUNCTION, a callback that returns
 *     weft_close(fd) == 0 ? 0 : 1 (or weft_fd_forget(fd), then close(fd)).
 *   c-ares: ares_set_socket_functions() with aclose doing
 *     weft_fd_forget(fd), then close(fd) (NULL for the others: c-ares's).
 *   libpq: no hook; call weft_fd_forget(PQsocket(conn)) before PQfinish()
 *     or PQreset() (or rely on the check). Read PQsocket() again after
 *     every PQconnectPoll(): the socket may change while connecting.
 * ---------------------------------------------------------------------- */

/* Events for weft_fd_wait. */
#define WEFT_IO_READ 1  /* readable, or the peer closed, or an error */
#define WEFT_IO_WRITE 2 /* writable, or an error */

/* Waits until the non-blocking descriptor fd may be ready for `events`
 * (WEFT_IO_READ, WEFT_IO_WRITE or both), or the deadline. Use it after a
 * call said EAGAIN, then make the call again: readiness is a hint, and the
 * call may say EAGAIN once more (also after a wait ended because fd's
 * number was found to name a new file). Returns 0, -ETIMEDOUT,
 * -ECANCELED, -EBADF (fd was passed to weft_close() or weft_fd_forget()
 * while waiting, or is not open), -EINVAL (fd < 0 or >= 2^20, or bad events),
 * -EPERM. A wait that parks on a descriptor weft did not make costs one
 * epoll_ctl (see above; fstat with io_uring); on weft's own sockets, none
 * after the first (with io_uring, a poll request per wait, submitted with
 * the worker's next sleep or look at its poller).
 * Cancellation point: a cancelled wait leaves nothing behind (the fd stays
 * registered; a readiness it missed is remembered for the next wait).
 * Blocks. */
WEFT_EXTERN int weft_fd_wait(int fd, int events, weft_time deadline);

/* The name of the poller the calling task's worker waits for descriptors
 * with: "epoll" or "io_uring" (see weft_config.poller). A worker makes
 * its poller at its first wait for a descriptor: this makes it now if it
 * has none yet. NULL outside a task, or if no poller can be made. Any
 * task; never blocks; not a cancellation point. */
WEFT_EXTERN const char *weft_poller_name(void);

/* Wakes every task waiting on fd (their waits return -EBADF), forgets fd
 * in every worker's poller, and closes it. Returns 0, or close()'s error
 * as a negative errno (the descriptor is closed either way, as with
 * close()). Any thread, also outside a runtime; never blocks. */
WEFT_EXTERN int weft_close(int fd);

/* weft_close() without the close: for code that is about to close fd
 * itself (a library's close hook; see above). Wakes every task waiting on
 * fd (their waits return -EBADF), forgets what weft knew of the file fd
 * names (its registrations and any readiness kept for it are ignored from
 * now on), and makes fd foreign if it was one of weft's own sockets; fd
 * stays open, and a later wait on it registers it again. Call it when no
 * task is about to wait on fd: a wait that starts between it and the
 * close registers the file still open and, once it is closed, lasts until
 * its deadline. Returns 0 (also for a number weft never waited on),
 * -EBADF (fd < 0). Any thread, also outside a runtime; never blocks; not
 * a cancellation point. */
WEFT_EXTERN int weft_fd_forget(int fd);

/* Waits until one of the n signals listed in `signals` (SIGHUP, SIGUSR1,
 * ...) arrives, and takes it: returns its number, or -ETIMEDOUT,
 * -ECANCELED, -EINVAL (none listed, a bad number, or one not blocked),
 * -EPERM. The signals must be blocked in every thread (pthread_sigmask
 * before weft_run: the workers and the blocking pool inherit the mask),
 * or the kernel delivers them elsewhere; a signal that arrives while
 * nobody waits stays pending for the next wait, and each arrival goes to
 * one waiter. Cancellation point: a cancelled wait takes no signal.
 * Blocks. */
WEFT_EXTERN int weft_signal_wait(const int *signals, int n, weft_time deadline);

/* ---- Sockets ----
 *
 * Every socket made here is non-blocking and close-on-exec; close it with
 * weft_close(). A host is a numeric IPv4 or IPv6 address ("127.0.0.1",
 * "::1"), or a name, looked up with getaddrinfo on a thread of the
 * blocking pool (section 7) while the task waits; a numeric host never
 * needs the pool. A port is 0 to 65535 (0 when listening or binding: the
 * kernel picks one, weft_local_port() tells which).
 *
 * The blocking calls take an absolute deadline (WEFT_NEVER: none) and are
 * cancellation points: -ECANCELED on entry in a cancelled scope, even when
 * the call could complete at once, and when cancelled while waiting;
 * -ETIMEDOUT when the deadline passes while waiting (a deadline already
 * past still lets through a call that needs no waiting). EINTR is retried.
 * Errors are the system's, negated: -ECONNRESET (the peer reset the
 * connection), -EPIPE (writing after the peer closed; sockets are written
 * with MSG_NOSIGNAL, so no SIGPIPE), -EBADF (also: fd was weft_close()d by
 * another task while this one waited). DNS failures map to -ENOENT (no
 * such host), -EAGAIN (temporary failure), -EIO (the resolver failed).
 * Unless a comment says otherwise, call these from a task. */

struct sockaddr;
struct sockaddr_storage;
struct iovec;

/* weft_tcp_listen, weft_udp_bind: set SO_REUSEPORT, so that several
 * sockets (of this process or others) share the port and the kernel
 * spreads connections, or datagrams, over them. */
#define WEFT_REUSEPORT 1

/* Resolves host and port to the first address getaddrinfo gives, stores
 * it in *out and returns its length (> 0). Returns -EINVAL (host NULL or
 * "", out NULL, bad port), -ENOENT, -EAGAIN, -EIO, -ENOMEM, -ETIMEDOUT,
 * -ECANCELED, -EPERM. A name blocks: a cancel or the deadline returns at
 * once and the lookup, which cannot be stopped, ends on its thread and is
 * discarded. A numeric host never blocks. Cancellation point. */
WEFT_EXTERN int weft_resolve(const char *host, int port,
                             struct sockaddr_storage *out, weft_time deadline);

/* Opens a TCP socket listening on host:port, with SO_REUSEADDR (and
 * SO_REUSEPORT with WEFT_REUSEPORT, the only flag), and room for backlog
 * connections not yet accepted (<= 0: SOMAXCONN). host NULL or "": every
 * local address, IPv6 and IPv4, on one dual-stack socket (IPv4 alone
 * where there is no IPv6); a name: its first IPv4 address, else its first.
 * Returns the descriptor, or -EINVAL (port, flags), -EADDRINUSE,
 * -EADDRNOTAVAIL, -EACCES, -EMFILE, or weft_resolve's errors. With a
 * numeric host or NULL it never blocks and may be called from any thread,
 * also before weft_run; a name blocks while it is looked up (a
 * cancellation point; a scope's deadline bounds it, or resolve it first
 * with weft_resolve and use weft_tcp_listen_addr). */
WEFT_EXTERN int weft_tcp_listen(const char *host, int port, int backlog,
                                int flags);

/* weft_tcp_listen on addr (a struct sockaddr_in or sockaddr_in6 of
 * addrlen bytes). -EINVAL (NULL, short), -EAFNOSUPPORT (another family).
 * Any thread; never blocks. */
WEFT_EXTERN int weft_tcp_listen_addr(const struct sockaddr *addr,
                                     size_t addrlen, int backlog, int flags);

/* Accepts a connection on the listening socket lfd (TCP or Unix), waiting
 * for one until the deadline. Returns the new descriptor (TCP: with
 * TCP_NODELAY, as Go sets it) and, if peer is not NULL, the peer's address
 * in *peer; or -ETIMEDOUT, -ECANCELED (nothing accepted: a pending
 * connection stays for the next accept), -EBADF (lfd closed, also while
 * waiting), -EINVAL (not listening), -ENOTSOCK, -EPERM. Out of descriptors
 * or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) it neither fails nor spins:
 * it sleeps 10 ms, then 20, 40, 80, 100, 100, ... ms between tries until
 * one succeeds or the deadline passes, while the connection waits in the
 * backlog and the worker runs the other tasks (the connections already
 * open keep being served). A connection that failed in the backlog
 * (ECONNABORTED and the network errors of accept(2)) is skipped. Blocks;
 * cancellation point. */
WEFT_EXTERN int weft_accept(int lfd, struct sockaddr_storage *peer,
                            weft_time deadline);

/* Connects to host:port over TCP: resolves host (as weft_resolve) and
 * tries its addresses in order until one takes the connection, all under
 * the one deadline. Returns the connected descriptor (with TCP_NODELAY),
 * or -ECONNREFUSED, -ENETUNREACH, -EHOSTUNREACH (the last address's
 * error), -ETIMEDOUT, -ECANCELED, -EINVAL (host NULL or "", bad port), -EMFILE,
 * -EPERM, weft_resolve's errors. On any error the socket being connected
 * is closed: a deadline or a cancel leaves nothing behind. Blocks;
 * cancellation point. */
WEFT_EXTERN int weft_tcp_connect(const char *host, int port,
                                 weft_time deadline);

/* weft_tcp_connect to addr (a struct sockaddr_in or sockaddr_in6 of
 * addrlen bytes): -EINVAL (NULL, short), -EAFNOSUPPORT (another family).
 * Blocks; cancellation point. */
WEFT_EXTERN int weft_tcp_connect_addr(const struct sockaddr *addr,
                                      size_t addrlen, weft_time deadline);

/* Reads up to n bytes (read-some): waits until at least one byte, the end
 * of the stream, or an error is there. Returns the count (1 to n), 0 at the
 * end of the stream (the peer shut down its side or closed; also when n is
 * 0), or -ECONNRESET, -ETIMEDOUT, -ECANCELED (nothing read), -EBADF,
 * -EINVAL (buf NULL and n > 0), -EPERM, another read(2) error. Any
 * non-blocking descriptor will do (pipes too). Blocks; cancellation
 * point. */
WEFT_EXTERN ptrdiff_t weft_read(int fd, void *buf, size_t n,
                                weft_time deadline);

/* Reads exactly n bytes, in as many reads as it takes, under one deadline.
 * Returns 0 (all n bytes read), -EPIPE (the stream ended first), or
 * weft_read's errors. If done is not NULL, *done is the number of bytes
 * read into buf, whatever the result: after a cancel, a timeout or an
 * error they are buf's first *done bytes, taken off the stream (the next
 * read goes on after them), and the rest of buf is untouched. Blocks;
 * cancellation point. */
WEFT_EXTERN int weft_read_exact(int fd, void *buf, size_t n, size_t *done,
                                weft_time deadline);

/* Writes up to n bytes (write-some): waits until the descriptor takes at
 * least one. Returns the count (1 to n; 0 when n is 0), or -EPIPE (the
 * peer closed or reset), -ECONNRESET, -ETIMEDOUT, -ECANCELED (nothing
 * written), -EBADF, -EINVAL, -EPERM, another error of send(2). Sockets
 * are written with send(MSG_NOSIGNAL); another descriptor (a pipe) with
 * write(2), where SIGPIPE's disposition applies. Blocks; cancellation
 * point. */
WEFT_EXTERN ptrdiff_t weft_write(int fd, const void *buf, size_t n,
                                 weft_time deadline);

/* Writes all n bytes, in as many writes as it takes, under one deadline.
 * Returns 0 or weft_write's errors. If done is not NULL, *done is the
 * number of bytes written, whatever the result: after a cancel, a timeout
 * or an error exactly buf's first *done bytes went to the kernel (the peer
 * can read them) and none of the others did. Blocks; cancellation
 * point. */
WEFT_EXTERN int weft_write_all(int fd, const void *buf, size_t n, size_t *done,
                               weft_time deadline);

/* weft_read and weft_write with iovcnt buffers (0 to IOV_MAX; -EINVAL
 * otherwise), filled or written in order: read-some and write-some,
 * returning the total count. Blocks; cancellation points. */
WEFT_EXTERN ptrdiff_t weft_readv(int fd, const struct iovec *iov, int iovcnt,
                                 weft_time deadline);
WEFT_EXTERN ptrdiff_t weft_writev(int fd, const struct iovec *iov, int iovcnt,
                                  weft_time deadline);

/* Shuts down the reading side (SHUT_RD), the writing side (SHUT_WR: the
 * peer reads the end of the stream after the data sent before; this side
 * may still read), or both (SHUT_RDWR). A task waiting in weft_read on fd
 * then reads the end of the stream. Returns 0, -ENOTCONN, -EBADF,
 * -ENOTSOCK, -EINVAL. Any thread; never blocks. */
WEFT_EXTERN int weft_shutdown(int fd, int how);

/* Opens a UDP socket bound to host:port, chosen as weft_tcp_listen chooses
 * (host NULL: every address, dual-stack, so it can send to IPv4 and IPv6
 * addresses alike; port 0: the kernel picks). flags: WEFT_REUSEPORT.
 * Returns the descriptor or weft_tcp_listen's errors. Never blocks with a
 * numeric host or NULL (any thread); a name blocks while it is looked up. */
WEFT_EXTERN int weft_udp_bind(const char *host, int port, int flags);

/* weft_udp_bind to addr (sockaddr_in or sockaddr_in6). Any thread; never
 * blocks. */
WEFT_EXTERN int weft_udp_bind_addr(const struct sockaddr *addr, size_t addrlen,
                                   int flags);

/* Sends one datagram of n bytes to `to` (tolen bytes; NULL: to the
 * connected peer), waiting only while the send buffer is full. Returns n,
 * or -EMSGSIZE, -ECONNREFUSED (a connected peer refused an earlier
 * datagram), -ETIMEDOUT, -ECANCELED (nothing sent), -EBADF, -EINVAL,
 * -EPERM. Blocks; cancellation point. */
WEFT_EXTERN ptrdiff_t weft_sendto(int fd, const void *buf, size_t n,
                                  const struct sockaddr *to, size_t tolen,
                                  weft_time deadline);

/* Receives one datagram, waiting for it, and stores its sender in *from if
 * from is not NULL. Returns its length (a longer datagram than n is cut to
 * n bytes, and the rest is lost), or -ETIMEDOUT, -ECANCELED (nothing
 * taken), -ECONNREFUSED, -EBADF, -EINVAL, -EPERM. Blocks; cancellation
 * point. */
WEFT_EXTERN ptrdiff_t weft_recvfrom(int fd, void *buf, size_t n,
                                    struct sockaddr_storage *from,
                                    weft_time deadline);

/* Listens on a Unix domain stream socket at path; a path starting with '@'
 * is an abstract name (Linux: not in the file system, gone with the
 * socket). A file at path makes it fail with -EADDRINUSE (remove a stale
 * socket first); removing the file afterwards is the caller's job. Returns
 * the descriptor (accept with weft_accept), or -EINVAL (NULL or ""),
 * -ENAMETOOLONG (more than 107 bytes), -EADDRINUSE, -EACCES, -ENOENT.
 * Any thread; never blocks. */
WEFT_EXTERN int weft_unix_listen(const char *path, int backlog);

/* A Unix domain datagram socket bound at path ('@' first: an abstract
 * name; a file at path: -EADDRINUSE, as weft_unix_listen), or, path NULL,
 * an unbound one (it sends; nothing can answer it). Send with
 * weft_sendto to a struct sockaddr_un, receive with weft_recvfrom (from
 * gets the sender's path). Returns the descriptor, or -EINVAL (""),
 * -ENAMETOOLONG, -EADDRINUSE, -EACCES, -ENOENT, -EMFILE, -ENFILE. Any
 * thread; never blocks. */
WEFT_EXTERN int weft_unix_dgram_bind(const char *path);

/* Connects to the Unix domain stream socket at path ('@': abstract). While
 * the listener's backlog is full it tries again, 1 ms, 2, 4, ... up to
 * 64 ms apart (Linux gives no readiness to wait for), until the deadline.
 * Returns the descriptor, or -ECONNREFUSED (nobody listens), -ENOENT,
 * -ETIMEDOUT, -ECANCELED (the socket is closed: nothing left behind),
 * -EINVAL, -ENAMETOOLONG, -EPERM. Blocks; cancellation point. */
WEFT_EXTERN int weft_unix_connect(const char *path, weft_time deadline);

/* The local port of an IPv4 or IPv6 socket (e.g. after listening on port
 * 0), or -EBADF, -ENOTSOCK, -EAFNOSUPPORT (not IP). Any thread; never
 * blocks. */
WEFT_EXTERN int weft_local_port(int fd);

/* ---- Child processes ----
 *
 * A child process belongs to the scope it is spawned into, as a task
 * does (Trio's run_process, Tokio's kill_on_drop made the rule): the
 * spawn starts a small reaper task in that scope, which waits for the
 * child's exit on a pidfd through this worker's poller and reaps it
 * (waitid on the pidfd: never waitpid(-1), so no SIGCHLD handler is
 * installed and none of another library's is disturbed). When the scope
 * is cancelled (weft_scope_cancel, its deadline, a fail-fast sibling, an
 * enclosing scope, the runtime's shutdown) or the handle is freed before
 * the exit, the reaper sends opts.kill_signal (SIGTERM) to the child's
 * process group, waits opts.grace_ns (5 s) for the exit, then sends
 * SIGKILL to the group, and reaps. So the scope's join returns only once
 * the child is reaped, and no path leaves a zombie. The reaper is a
 * background child of the scope (weft_spawn_opts.background): the scope
 * waits for it, but its policy never sees it, so it is not counted by
 * weft_scope_spawned, never a WEFT_FIRST or WEFT_RACE scope's winner, and
 * a process's exit decides nothing in the scope. The child's exit status
 * is read with
 * weft_process_join: 0 to 255 for an exit, or minus the signal number for
 * a child killed by a signal (-9 for SIGKILL).
 *
 * Signals go through the pidfd (pidfd_send_signal) or, for the group,
 * while the child is not reaped yet, so a pid reused by another process
 * is never signalled. Without pidfd (Linux before 5.3), by the pid, which
 * stays the child's until its reaper reaps it, and the exit is found by
 * waitid(P_PID, WNOHANG) at intervals up to 100 ms (so seen up to 100 ms
 * late): no SIGCHLD handler, never waitpid(-1). The child is started with
 * posix_spawn (vfork-like: the worker's thread waits for the exec, not
 * for the child), or with fork and exec for opts.pdeathsig, with every
 * signal unblocked and SIGPIPE at its default; descriptors without
 * O_CLOEXEC are inherited, as with exec (every descriptor weft makes has
 * it). */

typedef struct weft_process weft_process;

/* What a child's standard input, output or error is. */
typedef enum weft_stdio {
    WEFT_STDIO_INHERIT = 0, /* this process's own (the default) */
    WEFT_STDIO_NULL = 1,    /* /dev/null */
    /* A pipe; this side's end is a non-blocking descriptor that
     * weft_process_stdin / _stdout / _stderr return, for weft_read,
     * weft_write and weft_fd_wait. The handle owns it: weft_process_free
     * closes it. As on any pipe, a write after the child closed its end
     * raises SIGPIPE, which ends this process unless it is ignored or
     * blocked (weft_process_communicate keeps it off its writes). */
    WEFT_STDIO_PIPE = 2,
} weft_stdio;

typedef struct weft_process_opts {
    /* The program and its arguments, NULL-terminated (required). argv[0]
     * is looked up in this process's PATH unless it contains a '/'. */
    char *const *argv;
    /* The child's environment, NULL-terminated; NULL: this process's. */
    char *const *envp;
    /* The child's working directory; NULL: this process's. */
    const char *cwd;
    /* Standard input, output and error (zero: inherited). */
    weft_stdio in, out, err;
    /* Non-zero: the child stays in this process's group. By default it
     * leads a new one (setpgid(0, 0)), so that a cancel's signals reach
     * what it started too (a shell's pipeline, a build's compilers), and
     * a Ctrl-C at the terminal goes to this process alone, which shuts
     * down and so cancels its children (a child that reads the terminal
     * needs same_group: another group's read stops it with SIGTTIN). */
    int same_group;
    /* Non-zero: the child starts a new session (setsid): it has no
     * controlling terminal, as a daemon's children should not, and leads
     * its own group as well (same_group must be 0: -EINVAL). */
    int new_session;
    /* Non-zero: the signal the child gets if this process dies first
     * (PR_SET_PDEATHSIG; the kernel sends it when the thread that spawned
     * it ends, and a worker's thread lives until weft_run returns, when
     * every child is reaped already). So a crash, a SIGKILL, an abort of
     * this process takes its children with it. The child is then started
     * with fork and exec instead of posix_spawn: slower in a large
     * process (its page tables are copied). 0: none. */
    int pdeathsig;
    /* The signal a cancel sends first; 0: SIGTERM. */
    int kill_signal;
    /* How long a cancel waits after kill_signal before SIGKILL; 0: 5 s,
     * < 0: -EINVAL (kill_signal = SIGKILL for no grace). */
    int64_t grace_ns;
    /* weft_process_communicate: how long it still reads the pipes after
     * the child's exit, while something else (a grandchild) holds them
     * open (Go's Cmd.WaitDelay); 0: 1 s, < 0: until the end of the
     * streams or the deadline. */
    int64_t wait_delay_ns;
} weft_process_opts;

/* Starts the program opts->argv in a child process owned by scope s (NULL:
 * the calling task's current scope), with its reaper task (see above).
 * Returns 0 and sets *out to its handle, or -EINVAL (opts, argv or
 * argv[0] NULL, out NULL, a bad weft_stdio, kill_signal, pdeathsig or
 * grace_ns, new_session with same_group),
 * what the exec said: -ENOENT (no such program, or cwd missing), -EACCES,
 * -ENOEXEC, -E2BIG, ... (glibc's posix_spawn reports these; under an
 * emulator whose vfork is a fork, qemu-user's, only the fork and exec
 * path that pdeathsig takes does: elsewhere the child exits with 127);
 * -ECANCELED (s or the caller's scope is cancelled: nothing started),
 * -ESHUTDOWN (s was joined), -EMFILE, -ENOMEM, -EPERM. On any error no
 * child is left behind, and no descriptor. Never blocks the task (the
 * worker's thread waits for the exec, as vfork does); -ECANCELED on entry
 * in a cancelled scope, not a cancellation point otherwise. A task. */
WEFT_EXTERN int weft_process_spawn(weft_scope *s, const weft_process_opts *opts,
                                   weft_process **out);

/* Waits for the child's exit and sets *status (if status is not NULL) to
 * its exit code (0 to 255) or minus the signal that killed it. Every join
 * of one handle gets the same status. Returns 0, -ECANCELED, -ECHILD
 * (the child was reaped by someone else, a waitpid(-1) or SIGCHLD set to
 * SIG_IGN: its status is lost), -EINVAL (p NULL), -EPERM. A cancellation
 * point: a cancelled join leaves the child running (it is its scope's
 * cancel that kills it, not the waiting task's); join again. Blocks. Any
 * task, several at once. */
WEFT_EXTERN int weft_process_join(weft_process *p, int *status);

/* weft_process_join with a deadline: -ETIMEDOUT, the child left running.
 * Blocks. */
WEFT_EXTERN int weft_process_join_until(weft_process *p, int *status,
                                        weft_time deadline);

/* Sends signal sig to the child alone (pidfd_send_signal; sig 0 only
 * checks that it has not exited). Returns 0, -ESRCH (it has exited, even
 * if not reaped yet: no other process can be signalled by mistake),
 * -EINVAL (p NULL, a bad signal), -EPERM. Any thread; never blocks. */
WEFT_EXTERN int weft_process_kill(weft_process *p, int sig);

/* The child's process id, for messages and for the system's tools: once
 * the child is reaped another process may get it, so signal it with
 * weft_process_kill, never kill(2). Any thread; never blocks. */
WEFT_EXTERN int weft_process_pid(const weft_process *p);

/* This side's end of the child's standard input, output or error, a
 * non-blocking descriptor owned by the handle (do not close it: see
 * weft_process_close_stdin); or -EBADF (not WEFT_STDIO_PIPE, or closed),
 * -EINVAL (p NULL). Any thread; never blocks. */
WEFT_EXTERN int weft_process_stdin(const weft_process *p);
WEFT_EXTERN int weft_process_stdout(const weft_process *p);
WEFT_EXTERN int weft_process_stderr(const weft_process *p);

/* Closes this side's end of the child's standard input, so the child
 * reads the end of its input (no more sends, as weft_chan_close). Returns
 * 0, -EBADF (not a pipe, or closed already), -EINVAL. Call it when no
 * task writes to it. Any thread; never blocks. */
WEFT_EXTERN int weft_process_close_stdin(weft_process *p);

/* One captured output of weft_process_communicate: the caller's buffer
 * data of cap bytes; len is set to the bytes kept (the first ones, at
 * most cap), total to the bytes the child wrote (more than len when it
 * wrote more than cap: the rest was read and dropped). */
typedef struct weft_process_output {
    void *data;
    size_t cap;
    size_t len;
    uint64_t total;
} weft_process_output;

/* Writes in_len bytes of `in` to the child's standard input and then
 * closes it (weft_process_close_stdin), reads its standard output into
 * *out and its standard error into *err, all at once (so a child that
 * writes megabytes before it reads never deadlocks with its parent), and
 * waits for its exit: *status as weft_process_join's. A pipe whose
 * output is NULL is read and dropped; an output that is not a pipe must
 * be NULL, and `in` non-empty needs a pipe (else -EINVAL). A child that
 * stops reading its input (or exits) ends the write: that is not an
 * error. After the exit the pipes are read to their end, for at most
 * opts.wait_delay_ns if a grandchild holds them open (what it writes
 * later is not read). Returns 0; -EMSGSIZE (an output passed its cap:
 * its first cap bytes are kept, total counts all, and the exit and
 * *status are there as on success); -ETIMEDOUT or -ECANCELED (the child
 * is left running: its scope's cancel kills it; out and err hold what
 * was read, in what was written went to the child); -ECHILD, -EINVAL,
 * -EPERM, or a read's or write's error. Blocks; cancellation point. A
 * task; one call at a time on a handle, and no other task reading or
 * writing its pipes meanwhile. */
WEFT_EXTERN int weft_process_communicate(weft_process *p, const void *in,
                                         size_t in_len,
                                         weft_process_output *out,
                                         weft_process_output *err, int *status,
                                         weft_time deadline);

/* Gives up the handle: closes its pipes and, if the child has not exited,
 * starts a cancel's kill (kill_signal to the group, the grace, SIGKILL),
 * which the reaper finishes in the background; the scope's join still
 * waits for the reap. Returns 0 or -EINVAL (NULL). No task may use p
 * after (or during) the call. Never blocks; any thread, also after
 * weft_run has returned (the child was reaped by then). */
WEFT_EXTERN int weft_process_free(weft_process *p);

/* ---- Files ----
 *
 * Regular files and block devices, without holding the worker: a read of
 * a page that is not in the page cache waits for the disk, and epoll
 * cannot wait for a file. Each call goes through the worker's io_uring
 * ring where the worker has one (weft_config.poller; the kernel does the
 * work, no thread hop), else runs on the blocking pool (section 7). Either
 * way the call is waited for once it runs, so its buffer may be on the
 * calling task's stack (mind its size: a 64 KiB buffer does not fit the
 * default 64 KiB stack, weft_config.stack_size). For pipes, sockets and
 * terminals use weft_read and weft_write (a non-blocking descriptor here may
 * return -EAGAIN).
 *
 * Every call below but weft_file_close is a cancellation point with one
 * contract: a deadline or a cancel that comes before the call started
 * drops it and returns -ETIMEDOUT or -ECANCELED, and the call had no
 * effect; one that comes while the call runs either stops it before it
 * had any effect (the same codes: the ring asks the kernel to cancel it)
 * or waits for its end and returns its result (bytes read are never
 * lost, a descriptor opened is the caller's). So -ECANCELED and
 * -ETIMEDOUT always mean "nothing happened". A
 * deadline is absolute (WEFT_NEVER: none); one already past returns
 * -ETIMEDOUT at once. Each blocks the task, not the worker, and returns
 * -EPERM outside a task. Any number of tasks may use one descriptor at
 * once (pread and pwrite for ordered access). */

/* Opens path as open(2) does with flags (O_CLOEXEC always added) and
 * mode, and sets *fd to the new descriptor (-1 on error). Returns 0, or
 * open(2)'s error as a negative code (-ENOENT, -EACCES, -EMFILE, ...),
 * -EINVAL (fd or path NULL), -ETIMEDOUT, -ECANCELED, -ENOMEM, -EAGAIN (no
 * pool thread could start). Blocks. */
WEFT_EXTERN int weft_file_open(int *fd, const char *path, int flags,
                               unsigned mode, weft_time deadline);

/* Reads up to n bytes at the descriptor's offset into buf, as read(2).
 * Returns the count (0: the end of the file), or a negative code:
 * read(2)'s error, -EBADF (fd negative), -EINVAL (buf NULL with n > 0),
 * -ETIMEDOUT, -ECANCELED. Blocks. */
WEFT_EXTERN ptrdiff_t weft_file_read(int fd, void *buf, size_t n,
                                     weft_time deadline);

/* Writes up to n bytes of buf at the descriptor's offset (its end with
 * O_APPEND), as write(2): a short count is possible (a full disk). Returns
 * the count or a negative code as weft_file_read's. Blocks. */
WEFT_EXTERN ptrdiff_t weft_file_write(int fd, const void *buf, size_t n,
                                      weft_time deadline);

/* weft_file_read at offset, leaving the descriptor's offset alone
 * (pread(2)); -EINVAL for a negative offset. Blocks. */
WEFT_EXTERN ptrdiff_t weft_file_pread(int fd, void *buf, size_t n,
                                      int64_t offset, weft_time deadline);

/* weft_file_write at offset (pwrite(2)); -EINVAL for a negative offset.
 * Blocks. */
WEFT_EXTERN ptrdiff_t weft_file_pwrite(int fd, const void *buf, size_t n,
                                       int64_t offset, weft_time deadline);

/* Flushes the file's data and metadata to its device (fsync(2)). Returns
 * 0 or a negative code as weft_file_read's. Blocks. */
WEFT_EXTERN int weft_file_fsync(int fd, weft_time deadline);

/* Closes fd (close(2)), also in a cancelled scope: not a cancellation
 * point. The number is free when it returns, whatever it returns: 0,
 * -EBADF, -EIO (an earlier write failed to reach the device: fsync
 * first to find out which). Never blocks the task for long (a local
 * file's close does not wait for the disk). Any thread. */
WEFT_EXTERN int weft_file_close(int fd);

/* ------------------------------------------------------------------------
 * 9. Futures and combinators
 *
 * A future holds a result that is not there yet: a value of a fixed size
 * (copied in and out, as for channels) or an error. It is settled exactly
 * once, by weft_future_resolve or weft_future_reject, from a task, from
 * another OS thread or from a foreign library's callback: the bridge from
 * callback-based C libraries into tasks. Any number of tasks may await it.
 * The settling thread needs no care about the runtime's life: it may
 * settle while the awaiting task's runtime ends, or after (see weft_run).
 *
 * A producer may register a canceller: weft_future_cancel (which the
 * combinators call on the futures they give up on) then asks the producer
 * to stop, and the future settles when the producer says so. A future with
 * no canceller (a bare promise) is rejected with -ECANCELED at once by
 * weft_future_cancel, but the combinators leave it alone: it may be shared,
 * and one waiter giving up must not take the result from the others.
 * weft_future_spawn runs a task whose status settles a future, and whose
 * cancel cancels that task.
 *
 * With the virtual clock, a future settled by a foreign thread takes no
 * virtual time: when every task is blocked the clock jumps to the next
 * deadline, so an await with a deadline may time out before the thread
 * settles it (the runtime cannot see the thread, unlike weft_blocking's
 * pool, whose running calls the clock waits for). Await such futures
 * without a deadline in virtual-clock tests.
 *
 * Ownership: as for channels, weft_future_new returns one reference;
 * weft_future_ref takes another, weft_future_unref drops one, the last
 * drop frees it (settled or not).
 * ---------------------------------------------------------------------- */

typedef struct weft_future weft_future;

/* Creates an unsettled future whose value is value_size bytes (0 to 65536;
 * 0: the future carries only success or an error). Returns 0 and sets
 * *out, or -EINVAL, -ENOMEM. Any thread; never blocks. */
WEFT_EXTERN int weft_future_new(weft_future **out, size_t value_size);

/* Takes a reference; returns f. Any thread; never blocks. */
WEFT_EXTERN weft_future *weft_future_ref(weft_future *f);

/* Drops a reference; the last one frees the future. Returns 0 or -EINVAL
 * (NULL, or not a live future in a debug build). Any thread; never
 * blocks. */
WEFT_EXTERN int weft_future_unref(weft_future *f);

/* Settles f with a copy of *value (value_size bytes; NULL when value_size
 * is 0) and wakes every task awaiting it. Returns 0, -EALREADY (already
 * settled: nothing changed, the first result stands), -EINVAL. Any thread,
 * including a foreign library's callback; never blocks. */
WEFT_EXTERN int weft_future_resolve(weft_future *f, const void *value);

/* Settles f with the error err (negative). Returns 0, -EALREADY, -EINVAL
 * (err >= 0, err == -EINPROGRESS, which means "not settled yet", or NULL).
 * Any thread; never blocks. */
WEFT_EXTERN int weft_future_reject(weft_future *f, int err);

/* Registers fn(arg), which weft_future_cancel calls (once, on the
 * cancelling thread) to ask the producer to stop; the producer then settles
 * f as it sees fit (typically rejecting it with -ECANCELED). A cancel that
 * races with the settlement may still call fn just after it, so fn must
 * cope with a settled future (its reject then returns -EALREADY) and arg
 * must stay valid until the future is freed (its last reference dropped),
 * not merely until it is settled. Returns 0, -EALREADY (already settled:
 * fn will not be called), -EBUSY (a canceller is already set), -EINVAL.
 * Any thread; never blocks. */
WEFT_EXTERN int weft_future_set_canceller(weft_future *f, void (*fn)(void *arg),
                                          void *arg);

/* Asks for f to stop: if it is unsettled, calls its canceller, or without
 * one rejects it with -ECANCELED. Returns 0, -EALREADY (settled: nothing
 * done), -EINVAL. Any thread; never blocks (the canceller must not
 * block). */
WEFT_EXTERN int weft_future_cancel(weft_future *f);

/* Waits until f is settled, then copies its value to *out (out may be NULL)
 * and returns 0, or returns the error it was rejected with. Returns
 * -ETIMEDOUT at the deadline (WEFT_NEVER: none), -ECANCELED, -EINVAL,
 * -EPERM (not in a task). Cancellation point: a wait that ends in
 * -ETIMEDOUT or -ECANCELED changes nothing (the future is not cancelled and
 * other waiters still get its result). Blocks. */
WEFT_EXTERN int weft_future_await(weft_future *f, void *out,
                                  weft_time deadline);

/* The result now: 0 (resolved; value copied to *out if out is not NULL),
 * the rejection error, -EINPROGRESS (not settled yet), -EINVAL. Any
 * thread; never blocks. */
WEFT_EXTERN int weft_future_try_await(const weft_future *f, void *out);

/* Spawns fn(arg) as a child of scope s (NULL: the current scope), as
 * weft_spawn does, and sets *out to a new future (value_size sizeof(int))
 * that the task's status settles: a status >= 0 resolves it with that int,
 * a negative one rejects it (-EINPROGRESS, which reads as "pending",
 * rejects it with -EIO). The status is the future's alone: to its
 * scope the task reports 0, so a failed or cancelled future does not set
 * off the scope's policy (a fail-fast scope does not cancel the task's
 * siblings for it: weft_future_all does that). Cancelling the future
 * cancels the task (it settles when the task has finished). The caller
 * owns the one reference.
 * Returns the child's index in s, or weft_spawn's errors (no future then).
 * Never blocks, as weft_spawn. */
WEFT_EXTERN int weft_future_spawn(weft_scope *s, weft_fn fn, void *arg,
                                  weft_future **out);

/* The combinators wait on n futures (1 to 1024) at once, with a deadline
 * (WEFT_NEVER: none). Each is a cancellation point. When one gives up on
 * futures (a failure in all, a winner in any and race, its own deadline or
 * cancel in all four), it cancels each of them that is still unsettled and
 * has a canceller (bare promises are left alone), and returns without
 * waiting for them to settle; every future keeps its own result for
 * weft_future_try_await. Futures already settled
 * when a call starts are looked at in index order (race and any return
 * the lowest such index); later ones count in the order they settle. Over
 * 8 futures a call allocates, so each may also return -ENOMEM. */

/* Waits until every future is resolved (Promise.all, asyncio.gather): returns
 * 0, or at the first rejection cancels the rest and returns that error
 * (fail fast). -ETIMEDOUT, -ECANCELED: the unsettled ones are cancelled.
 * -EINVAL, -EPERM. Blocks. */
WEFT_EXTERN int weft_future_all(weft_future *const *fs, int n,
                                weft_time deadline);

/* Waits until every future is settled, whatever the results
 * (Promise.allSettled, gather(return_exceptions=True)); statuses (may be
 * NULL) gets each one's result in order (0 or its error). Returns 0, or
 * -ETIMEDOUT, -ECANCELED (the unsettled ones are cancelled; their entries
 * say -EINPROGRESS), -EINVAL, -ENOMEM, -EPERM. Blocks. */
WEFT_EXTERN int weft_future_all_settled(weft_future *const *fs, int n,
                                        int *statuses, weft_time deadline);

/* Waits for the first future to be resolved (Promise.any): cancels the
 * rest and returns its index. If every one is rejected, returns the first
 * rejection's error (each future keeps its own). -ETIMEDOUT, -ECANCELED,
 * -EINVAL, -EPERM. Blocks. */
WEFT_EXTERN int weft_future_any(weft_future *const *fs, int n,
                                weft_time deadline);

/* Waits for the first future to be settled, resolved or rejected
 * (Promise.race): cancels the rest and returns its index (its result is
 * in the future). -ETIMEDOUT, -ECANCELED, -EINVAL, -EPERM. Blocks. */
WEFT_EXTERN int weft_future_race(weft_future *const *fs, int n,
                                 weft_time deadline);

/* Runs fns[i](args[i]) for i < n (1 to 65536) as tasks of a new scope with
 * the given policy and deadline (absolute, WEFT_NEVER: none; as everywhere
 * a deadline is an argument, 0 is an instant, long past on the monotonic
 * clock), and joins it: all (WEFT_FAIL_FAST),
 * all-settled (WEFT_COLLECT), any (WEFT_FIRST), race (WEFT_RACE) over tasks.
 * args may be NULL (every arg NULL). statuses (may be NULL) gets each
 * task's status in order (-ECANCELED for a task cancelled before it
 * started); winner (may be NULL) the winning index for WEFT_FIRST and
 * WEFT_RACE, else -1. Returns what weft_scope_join returns under that
 * policy, or -EINVAL, -ENOMEM, -EPERM. Blocks until every task has
 * finished (structured: no task outlives the call); not a cancellation
 * point of its own, but a cancel reaches every task. */
WEFT_EXTERN int weft_gather_tasks(weft_policy policy, int n, const weft_fn *fns,
                                  void *const *args, int *statuses, int *winner,
                                  weft_time deadline);

/* ------------------------------------------------------------------------
 * 10. Bounded parallelism and pipelines
 * ---------------------------------------------------------------------- */

/* Calls fn(item) for each of the n items of the array `items` (item i at
 * (char *)items + i * item_size), each call in a task, with at most limit
 * of them running at once (limit <= 0: no limit), starting them in index
 * order, in a new scope with the given policy and deadline: WEFT_FAIL_FAST
 * (the first error cancels the running calls and starts no more) or
 * WEFT_COLLECT (every call runs). fn is an ordinary weft_fn, the shape
 * weft_spawn, weft_call_for and weft_retry_call take, so one function
 * serves them all; an item holds a call's input and room for its result
 * (so results come back in input order). item_size 0: every call gets
 * `items` itself. statuses (may be NULL, n entries) gets each call's
 * status, -ECANCELED for a call never started. Returns 0, the first error
 * (WEFT_FAIL_FAST), -ETIMEDOUT, -ECANCELED, -EINVAL (fn NULL, other
 * policies, a negative deadline, items NULL with item_size > 0, or an
 * array that does not fit in memory), -ENOMEM, -EPERM. Uses at most limit
 * tasks, whatever n is. Blocks until every started call has finished. Not
 * a cancellation point of its own, as weft_gather_tasks: a cancel of the caller
 * reaches every running call, starts no more (their statuses say
 * -ECANCELED) and returns -ECANCELED once the started ones have
 * finished. */
WEFT_EXTERN int weft_map_tasks(size_t n, int limit, weft_fn fn, void *items,
                               size_t item_size, weft_policy policy,
                               int *statuses, weft_time deadline);

/* A stage's function returns WEFT_SKIP to drop the value (a filter). */
#define WEFT_SKIP 1

/* One stage of a pipeline: fn(ctx, in, out) reads one value of the
 * previous stage (or of the input channel) and writes one value of
 * out_size bytes to *out. Returns 0 to pass it on, WEFT_SKIP to drop it,
 * or a negative error, which fails the whole pipeline. */
typedef int (*weft_stage_fn)(void *ctx, const void *in, void *out);

typedef struct weft_stage {
    weft_stage_fn fn;
    void *ctx;       /* shared by the stage's workers */
    size_t out_size; /* 1 to 65536; the last stage's is the out channel's */
    int workers;     /* tasks running fn (fan-out); 0 means 1 */
    int ordered;     /* non-zero: values leave in the order they came in */
    size_t capacity; /* values buffered after this stage (0: rendezvous);
                      * the last stage's is the out channel's own */
} weft_stage;

/* Runs values from `in` through stages[0 .. n-1] (1 to 64 of them) into
 * `out`: each stage's workers take values as they come (fan-out), and
 * their results are merged into the next stage (fan-in), in input order
 * for an ordered stage. When `in` is closed and drained and everything has
 * gone through, closes `out` and returns 0. The first stage error cancels
 * the whole pipeline: values in flight are dropped, `in` and `out` are
 * closed (a producer's sends then fail with -EPIPE, a consumer sees
 * -EPIPE), and the error is returned. The deadline (WEFT_NEVER: none) and a
 * cancel of the calling task do the same, returning -ETIMEDOUT or
 * -ECANCELED. Returns -EINVAL (NULL, n out of range, a size that does not
 * match a channel's element size), -ENOMEM (its buffers), -EPERM before
 * touching anything; -ENOMEM from a task that cannot be started once
 * others run fails it as a stage error would, and so does a consumer that
 * closes `out` early (-EPIPE). Blocks until every stage task has
 * finished. */
WEFT_EXTERN int weft_pipeline(weft_chan *in, weft_chan *out,
                              const weft_stage *stages, int n,
                              weft_time deadline);

/* ------------------------------------------------------------------------
 * 11. Resilience: retry, circuit breaker, rate limiter, bulkhead, fallback
 *
 * All of these run on the runtime's clock, so that with the virtual clock
 * their timing is exact and their tests take no real time.
 * ---------------------------------------------------------------------- */

typedef enum weft_jitter {
    WEFT_JITTER_NONE = 0,  /* min(cap, base * 2^k) */
    WEFT_JITTER_FULL = 1,  /* uniform in [0, min(cap, base * 2^k)] */
    WEFT_JITTER_EQUAL = 2, /* half that, plus uniform in [0, half] */
    /* min(cap, uniform in [base, 3 * previous delay]) */
    WEFT_JITTER_DECORRELATED = 3,
} weft_jitter;

typedef struct weft_retry {
    int max_attempts; /* attempts in all, the first included; 0: 3 */
    int64_t base_ns;  /* the first delay before jitter; 0: 100 ms */
    int64_t cap_ns;   /* no delay longer than this; 0: no cap */
    weft_jitter jitter;
    int64_t budget_ns; /* no attempt starts later than this after the
                        * first one started; 0: no budget */
    /* Each attempt runs in a scope of its own whose deadline is this long
     * after the attempt starts, as under weft_call_for: an attempt
     * still running then is cancelled, and if it fails its status is
     * -ETIMEDOUT (retryable by default). 0: no limit per attempt. The
     * task's own deadline (weft_deadline()) still bounds every attempt: one
     * whose limit would end at or after it gets no deadline of its own, and
     * is cut short by the task's like any call (its status is fn's,
     * -ECANCELED typically, which ends the retries). */
    int64_t attempt_timeout_ns;
    /* Whether a failed status is worth another attempt; NULL:
     * weft_retry_transient (a fixed set of transient codes). */
    int (*retryable)(int status, void *ctx);
    /* Called before each delay (may be NULL): the attempt that failed
     * (1, 2, ...), its status and the delay about to be slept. */
    void (*on_retry)(int attempt, int status, int64_t delay_ns, void *ctx);
    void *ctx;
    uint64_t seed; /* jitter seed; 0: drawn from the runtime */
} weft_retry;

/* The delays of a retry policy, one after another: for loops that retry
 * by hand, and to know in advance what weft_retry_call will sleep. */
typedef struct weft_backoff {
    const weft_retry *policy;
    int attempt;  /* delays drawn so far */
    int64_t prev; /* the last delay (decorrelated jitter) */
    uint64_t rng;
} weft_backoff;

/* Starts a sequence of delays for policy (which must outlive b). Returns 0
 * or -EINVAL. Any thread; never blocks. */
WEFT_EXTERN int weft_backoff_init(weft_backoff *b, const weft_retry *policy);

/* The next delay in ns (>= 0), or -EINVAL. Never blocks. */
WEFT_EXTERN int64_t weft_backoff_next(weft_backoff *b);

/* The default retryable predicate: non-zero for the failures another
 * attempt may cure,
 *   -ETIMEDOUT (also an attempt that ran out of attempt_timeout_ns),
 *   -EAGAIN (= -EWOULDBLOCK), -EINTR, -ENOBUFS, -ECONNRESET,
 *   -ECONNREFUSED, -ECONNABORTED, -ENETRESET, -EHOSTUNREACH,
 *   -ENETUNREACH, -ENETDOWN;
 * and 0 for every other status, among them -ECANCELED (a cancel is not a
 * failure to retry), -EPIPE (weft's "closed": a channel does not reopen;
 * a socket's broken pipe may, so say so in your own predicate), -EBUSY
 * and -EHOSTDOWN (a full bulkhead and an open circuit breaker shed load:
 * retrying into them adds it), and the permanent ones: -ENOENT (a 404
 * mapped to a code), -EINVAL, -EACCES, -EPERM, -EPROTO, -ENOMEM, -EIO. A
 * predicate of your own can extend the set:
 *     return st == -EPIPE || weft_retry_transient(st, NULL);
 * ctx is ignored. Any thread; never blocks. */
WEFT_EXTERN int weft_retry_transient(int status, void *ctx);

/* Calls fn(arg) until it returns >= 0, returns a status that is not
 * retryable, or max_attempts calls have been made, sleeping the policy's
 * delays in between (policy NULL: the defaults). With attempt_timeout_ns,
 * each call runs in a scope with that deadline (see weft_retry). Never
 * sleeps past the budget or the task's deadline (weft_deadline()): when
 * the next attempt would start after the budget, or at or after the
 * deadline (the instant the task's scope is cancelled, where an attempt
 * could only fail), it returns the last status at once, without sleeping.
 * Returns fn's last status (-ETIMEDOUT for an attempt that timed out), or
 * -ECANCELED if the task is cancelled while it sleeps (fn is not called
 * again), -EINVAL, -EPERM. Blocks; a cancellation point between
 * attempts. */
WEFT_EXTERN int weft_retry_call(const weft_retry *policy, weft_fn fn,
                                void *arg);

typedef enum weft_breaker_state {
    WEFT_BREAKER_CLOSED = 0,    /* calls go through; failures are counted */
    WEFT_BREAKER_OPEN = 1,      /* calls are rejected until the cool-down */
    WEFT_BREAKER_HALF_OPEN = 2, /* a few trial calls decide */
} weft_breaker_state;

typedef struct weft_breaker weft_breaker;

typedef struct weft_breaker_opts {
    int failure_threshold; /* consecutive failures that open it; 0: off
                            * (both this and failure_rate 0: 5) */
    int failure_rate;      /* percent of failures in the window that opens
                            * it (1 to 100); 0: off */
    int min_calls;         /* calls in the window before the rate counts */
    int64_t window_ns;     /* sliding window of the rate; 0: 10 s */
    int64_t cooldown_ns;   /* open -> half-open after this; 0: 5 s */
    int half_open_calls;   /* trial calls let through half-open; 0: 1.
                            * All succeed: closed; one fails: open again */
    /* Whether a status counts as a failure; NULL: status < 0. */
    int (*is_failure)(int status, void *ctx);
    /* Called on every state change, in the order of the changes, with no
     * lock held (may be NULL): on the thread that caused it, or, when two
     * changes race, on the thread reporting the earlier one. It may block
     * and may call the breaker. */
    void (*on_change)(weft_breaker *b, weft_breaker_state from,
                      weft_breaker_state to, void *ctx);
    void *ctx;
} weft_breaker_opts;

typedef struct weft_breaker_stats {
    weft_breaker_state state;
    int64_t calls;        /* calls let through */
    int64_t failures;     /* of them, failures */
    int64_t rejected;     /* calls refused while open or half-open */
    int64_t opened;       /* times it opened */
    weft_time open_until; /* when an open breaker half-opens */
} weft_breaker_stats;

/* Creates a closed breaker. Returns 0 and sets *out, -EINVAL (a value out
 * of range), -ENOMEM. opts NULL, or zeroed: the defaults (failure_threshold
 * 5). Any thread; never blocks. */
WEFT_EXTERN int weft_breaker_new(weft_breaker **out,
                                 const weft_breaker_opts *opts);

/* Frees it. Returns 0, -EBUSY (calls are in flight, or a state change is
 * being reported: nothing freed), -EINVAL. Any thread; never blocks. */
WEFT_EXTERN int weft_breaker_free(weft_breaker *b);

/* Asks to make one call: 0 (go ahead, then report with
 * weft_breaker_record), or -EHOSTDOWN (open, or half-open with its trial
 * calls taken: do not call). Any thread; never blocks. */
WEFT_EXTERN int weft_breaker_acquire(weft_breaker *b);

/* Reports the status of a call that weft_breaker_acquire let through.
 * Returns 0, -EINVAL (NULL, or no call in flight). Any thread; never
 * blocks. */
WEFT_EXTERN int weft_breaker_record(weft_breaker *b, int status);

/* acquire, fn(arg), record: returns fn's status, or -EHOSTDOWN (rejected:
 * fn not called). Its record counts against the state its call was let
 * through in, however late it comes. Any thread; blocks as fn does. */
WEFT_EXTERN int weft_breaker_call(weft_breaker *b, weft_fn fn, void *arg);

/* A snapshot of the state and counters (an open breaker whose cool-down is
 * over shows as half-open). Returns 0 or -EINVAL. Never blocks. */
WEFT_EXTERN int weft_breaker_stats_get(weft_breaker *b,
                                       weft_breaker_stats *out);

typedef struct weft_limiter weft_limiter;

/* A token bucket: `tokens` tokens every `per_ns` nanoseconds (e.g. 100 per
 * WEFT_SEC), holding at most `burst` (>= 1), full at the start. It runs on
 * the clock of whoever calls it: use one limiter from the tasks of one
 * runtime, or from plain threads only (a virtual clock and the monotonic
 * one do not mix). Returns 0 and sets *out, -EINVAL, -ENOMEM. Any thread;
 * never blocks. */
WEFT_EXTERN int weft_limiter_new(weft_limiter **out, int64_t tokens,
                                 int64_t per_ns, int64_t burst);

/* Frees it. Returns 0, -EBUSY (a task waits in it: nothing freed),
 * -EINVAL. Any thread; never blocks. */
WEFT_EXTERN int weft_limiter_free(weft_limiter *l);

/* Takes n tokens (1 to burst), suspending the task until they are due:
 * takers are served in arrival order, and each sleeps exactly until its
 * tokens are due (no polling, no background task). Returns 0, -ETIMEDOUT
 * at once, taking nothing, if they would come after the deadline
 * (WEFT_NEVER: none) or at or after the task's own (weft_deadline()),
 * -ECANCELED, -EINVAL (n out of range), -EPERM.
 * Cancellation point: a cancelled wait gives its tokens back (as far as
 * later takers have not counted on them). Blocks. */
WEFT_EXTERN int weft_limiter_acquire(weft_limiter *l, int64_t n,
                                     weft_time deadline);

/* Takes n tokens if they are there now: 0, or -EAGAIN (nothing taken),
 * -EINVAL. Any thread; never blocks. */
WEFT_EXTERN int weft_limiter_try_acquire(weft_limiter *l, int64_t n);

typedef struct weft_bulkhead weft_bulkhead;

/* At most max_calls (>= 1) calls at once, and at most max_queue (>= 0)
 * callers waiting for a turn. Returns 0 and sets *out, -EINVAL, -ENOMEM.
 * Any thread; never blocks. */
WEFT_EXTERN int weft_bulkhead_new(weft_bulkhead **out, int max_calls,
                                  int max_queue);

/* Frees it. Returns 0, -EBUSY (calls in flight or waiting: nothing
 * freed), -EINVAL. Any thread; never blocks. */
WEFT_EXTERN int weft_bulkhead_free(weft_bulkhead *b);

/* Enters: 0 (a turn is held: call weft_bulkhead_leave after), -EBUSY (the
 * wait queue is full: rejected at once), -ETIMEDOUT, -ECANCELED, -EINVAL,
 * -EPERM. Waiters are served in arrival order. Cancellation point: a
 * cancelled or timed-out wait holds no turn and leaves no waiter. Blocks. */
WEFT_EXTERN int weft_bulkhead_enter(weft_bulkhead *b, weft_time deadline);

/* Gives the turn back (to the first waiter). Returns 0 or -EINVAL (no turn
 * held). Any thread; never blocks. */
WEFT_EXTERN int weft_bulkhead_leave(weft_bulkhead *b);

/* enter, fn(arg), leave: returns fn's status, or enter's error (fn not
 * called). Blocks. */
WEFT_EXTERN int weft_bulkhead_call(weft_bulkhead *b, weft_fn fn, void *arg,
                                   weft_time deadline);

/* Runs fn(arg) with a timeout, as weft_call_for; if it fails (times
 * out, or returns a negative status), runs fallback(fallback_arg) and
 * returns its status instead (the safe default of "fetch with timeout").
 * If the calling task itself is cancelled, returns -ECANCELED without the
 * fallback. Returns -EINVAL (fn or fallback NULL), -EPERM. Blocks. (0.2's
 * weft_with_fallback, with the timeout last.) */
WEFT_EXTERN int weft_call_fallback_for(weft_fn fn, void *arg, weft_fn fallback,
                                       void *fallback_arg, int64_t timeout_ns);

/* ---- Resource pools ----
 *
 * A pool of resources the program makes and reuses (connections, mostly):
 * at most max_size exist at once; a task borrows one with
 * weft_pool_acquire and gives it back with weft_pool_release, or with
 * weft_pool_release_broken when it found it unusable. Tasks that wait for
 * one are served in arrival order, across workers. The pool makes them
 * on demand with opts.create, on the task that needs one (no background
 * task, no thread): a creation that fails is that acquire's result at
 * once, and the next creation waits out a backoff (opts.backoff), one
 * trial at a time, so that a dead server is not hammered. Idle timeout,
 * maximum lifetime and the leak threshold are looked at on every acquire,
 * release and weft_pool_stats_get (on the runtime's clock: virtual in
 * tests). A task waiting for a pool shows in the task dump as "on pool".
 * The callbacks run on the task that calls into the pool, with no lock
 * held: they may block (connect, send, weft calls) and are cancelled with
 * that task. A pool belongs to one runtime.
 */

typedef struct weft_pool weft_pool;

/* A resource borrowed longer than opts.leak_threshold_ns, told once per
 * borrow to opts.on_leak. The strings are valid during the call only. */
typedef struct weft_pool_leak_info {
    const char *pool;      /* the pool's name ("" if none) */
    void *res;             /* the resource */
    uint64_t task_id;      /* the borrower (weft_task_info.id) */
    const char *task_name; /* its name ("" if none) */
    const char *file;      /* where it was acquired (weft_pool_acquire) */
    int line;
    weft_time since; /* when it was acquired */
    int64_t held_ns; /* how long it has been held */
} weft_pool_leak_info;

typedef struct weft_pool_opts {
    /* Makes a resource: 0 and a non-NULL *res, or a negative errno code
     * (the acquire that asked for it returns that code, and the next
     * creation waits for the backoff; but -ECANCELED from a create whose
     * task was cancelled counts as no failure). Required. May block; runs
     * on an acquiring task. */
    int (*create)(void *ctx, void **res);
    /* Ends a resource (closes the connection). Required. May block; runs
     * on the task that let the resource go. */
    void (*destroy)(void *ctx, void *res);
    /* Optional: asked before an idle resource is handed out: 0 to use it;
     * anything else destroys it and another is tried (or made). */
    int (*validate)(void *ctx, void *res);
    /* Optional: called on weft_pool_release before the resource goes back
     * (rolls back a transaction): 0, or anything else to destroy it. */
    int (*reset)(void *ctx, void *res);
    void *ctx;    /* the callbacks' */
    int min_size; /* the idle timeout keeps at least this many; 0: none */
    int max_size; /* at most this many at once (>= 1); 0: 10 */
    int64_t idle_timeout_ns;   /* an idle resource unused this long is
                                * destroyed (down to min_size); 0: never */
    int64_t max_lifetime_ns;   /* a resource this old is destroyed when
                                * next idle or returned; 0: no limit */
    int64_t leak_threshold_ns; /* a borrow longer than this is told to
                                * on_leak, once; 0: not looked for */
    /* Told of each leak (see weft_pool_leak_info); NULL: a line on stderr
     * naming the pool, the task and the acquire's file and line. Runs with
     * no lock held, on the task or thread that noticed. */
    void (*on_leak)(const weft_pool_leak_info *info, void *ctx);
    /* The delays between failed creations (weft_retry's base_ns, cap_ns,
     * jitter and seed; the attempts and budget are not used: a pool keeps
     * trying while tasks ask). Copied. NULL: base 100 ms, doubling, capped
     * at 10 s, with full jitter; a cap_ns of 0 is also 10 s. */
    const weft_retry *backoff;
    const char *name; /* for the dump and leak reports (copied); NULL: "" */
} weft_pool_opts;

typedef struct weft_pool_stats {
    int size;         /* resources that exist or are being made (<= max_size) */
    int idle;         /* of them, idle in the pool */
    int in_use;       /* borrowed (from the grant to the release) */
    int creating;     /* being made by an acquire */
    int waiting;      /* acquires waiting for a resource */
    int64_t acquired; /* acquires that returned a resource */
    int64_t timeouts; /* acquires that ended at their deadline */
    int64_t created;  /* successful creations */
    int64_t destroyed;       /* resources destroyed (broken, invalid,
                              * expired, at close): at rest, created -
                              * destroyed == size */
    int64_t create_failures; /* creations that returned an error */
    int64_t leaks;           /* borrows told to on_leak */
    /* The code of the last creation if it failed, 0 if it succeeded (or
     * none was made): a pool that only times out says why here. */
    int last_create_error;
} weft_pool_stats;

/* Makes an empty pool (nothing is created until an acquire needs it).
 * Returns 0 and sets *out, -EINVAL (create or destroy NULL, a size or time
 * out of range, min_size > max_size), -ENOMEM. Any thread; never blocks. */
WEFT_EXTERN int weft_pool_new(weft_pool **out, const weft_pool_opts *opts);

/* Frees a pool that holds no resource and that no task waits in: one
 * closed (weft_pool_close returned 0), or one never used. Returns 0,
 * -EBUSY (resources exist, idle or borrowed, or a task waits: close it
 * first; nothing freed), -EINVAL. Any thread; never blocks. */
WEFT_EXTERN int weft_pool_free(weft_pool *p);

/* Borrows a resource: an idle one (validated first, if opts.validate is
 * set), or a new one made by this task with opts.create while the pool has
 * fewer than max_size, or else waits for one, behind the tasks that came
 * first (FIFO across workers: a release hands its resource straight to the
 * first waiter, and nobody arriving later overtakes it). Returns 0 and
 * sets *res; -ETIMEDOUT (the deadline passed, WEFT_NEVER: none), or, when
 * the deadline passed while creations were failing (the last one failed:
 * see weft_pool_stats.last_create_error), that creation's code, so that a
 * dead server reads as -ECONNREFUSED rather than as a pool too small;
 * create's code (this acquire made a resource and it failed, at once, not
 * at the deadline); -ECANCELED; -ESHUTDOWN (closed); -EINVAL; -EPERM (not in
 * a task). A deadline because the pool waits on the outside world (a
 * creation is a connect, and a resource comes back when a remote peer
 * answers its borrower): one form, deadline required, as the bulkhead's.
 * Cancellation point: a cancelled or timed-out acquire holds nothing and
 * leaves no waiter; a resource handed over as the cancel came, or made by
 * a create that finished after it, goes back to the pool (to the next
 * waiter). Blocks (and runs create, validate, destroy). Use the macro,
 * which records the call site for leak reports. */
WEFT_EXTERN int weft_pool_acquire_at(weft_pool *p, void **res, const char *file,
                                     int line, weft_time deadline);
#define weft_pool_acquire(p, res, deadline)                                    \
    weft_pool_acquire_at((p), (res), __FILE__, __LINE__, (deadline))

/* Gives back a resource weft_pool_acquire handed out: opts.reset first (if
 * set; a failure destroys it), then to the first waiter, or idle (or
 * destroyed, if it has outlived max_lifetime_ns or the pool is closed).
 * Returns 0, -EINVAL (not a resource of this pool that is borrowed: not
 * given back twice), -EPERM (not in a task). Any task, not only the
 * borrower's; not a cancellation point (a cancelled task gives back all the
 * same). May block in reset and destroy. */
WEFT_EXTERN int weft_pool_release(weft_pool *p, void *res);

/* Gives back a resource that is broken (its connection failed): it is
 * destroyed, and its place goes to the first waiter, which makes a new one.
 * Returns 0, -EINVAL, -EPERM, as weft_pool_release. Any task; not a
 * cancellation point. May block in destroy. */
WEFT_EXTERN int weft_pool_release_broken(weft_pool *p, void *res);

/* Makes resources until at least opts.min_size exist (idle or borrowed),
 * as a service does at its start so that its first requests do not each
 * wait for a connection (HikariCP's minimumIdle, bb8's min_idle, made
 * when asked rather than by a task of the pool's own, which would need a
 * scope). Each is made as an acquire makes one (create, its backoff and
 * its error) and left idle. Returns 0; the first creation's error (those
 * made before it stay); -ETIMEDOUT, -ECANCELED, -ESHUTDOWN, -EINVAL,
 * -EPERM, as weft_pool_acquire. Blocks; a cancellation point, which leaves
 * what it made idle and holds nothing. */
WEFT_EXTERN int weft_pool_fill(weft_pool *p, weft_time deadline);

/* Closes the pool: acquires waiting, and later ones, return -ESHUTDOWN;
 * idle resources are destroyed now, borrowed ones when they come back.
 * Waits until nothing is borrowed or being made (0), or the deadline
 * (-ETIMEDOUT: the rest is destroyed as it comes back; call again to wait
 * more). -ECANCELED, -EINVAL, -EPERM (not in a task). A cancellation
 * point only where it waits: in a cancelled scope it still closes and
 * destroys the idle ones, and returns -ECANCELED only if something is
 * still borrowed (the pool stays closed). Blocks (and runs destroy). */
WEFT_EXTERN int weft_pool_close(weft_pool *p, weft_time deadline);

/* A snapshot of the pool's figures, after a look for leaks (which may
 * call on_leak, on the calling thread). Returns 0 or -EINVAL. Any thread;
 * never blocks but in on_leak. */
WEFT_EXTERN int weft_pool_stats_get(weft_pool *p, weft_pool_stats *out);

/* ------------------------------------------------------------------------
 * 12. Actors
 *
 * An actor is a task that owns its state and handles messages from a
 * bounded mailbox one at a time (Erlang's process, Akka's actor, Go's
 * goroutine that owns a channel). Nobody else touches the state, so it
 * needs no lock. Messages are of a fixed size chosen at spawn and copied
 * into the mailbox. A full mailbox pushes back: weft_actor_tell waits (up
 * to a deadline), weft_actor_try_tell says -EAGAIN; nothing grows without
 * bound.
 *
 * A weft_actor pointer is a counted reference: the spawner gets one,
 * weft_actor_ref/unref take and drop more, and the memory stays until the
 * last is dropped, so a reference stays safe to use after the actor has
 * exited: calls on it return -ESRCH. The actor is a task of the scope it
 * was spawned into: the scope waits for it and its cancel stops it; its
 * exit status is the task's, so a failure counts under the scope's policy
 * (a WEFT_STOP_NOW's -ECANCELED does not, as a task handle's cancel).
 *
 * An ask is a message with a reply: the asker waits for the behaviour's
 * weft_actor_reply. The reply reaches the asker at most once; an asker
 * that gave up (deadline, cancel) leaves its message to be handled, and
 * the late reply is dropped: nothing leaks and the actor never blocks on
 * it. When an actor exits, every ask still queued or unanswered fails
 * with -ESRCH, and every monitor fires once.
 * ---------------------------------------------------------------------- */

typedef struct weft_actor weft_actor;

/* What a message is. */
enum {
    WEFT_MSG_TELL = 0, /* from weft_actor_tell / try_tell: no reply */
    WEFT_MSG_ASK = 1,  /* from weft_actor_ask: reply with weft_actor_reply */
    WEFT_MSG_DOWN = 2, /* a monitor fired (weft_actor_monitor) */
};

/* One message as the behaviour sees it; valid during the call only. */
typedef struct weft_actor_msg {
    int kind;   /* WEFT_MSG_* */
    void *data; /* TELL, ASK: the message (msg_size bytes); DOWN: NULL */
    /* DOWN: the actor that exited (a reference valid during the call;
     * weft_actor_ref it to keep it), its exit status, and the monitor's
     * id as weft_actor_monitor returned it. */
    weft_actor *down;
    int down_status;
    long monitor;
    void *priv_; /* the runtime's */
} weft_actor_msg;

/* The behaviour: handles one message. Returns 0 to go on, WEFT_ACTOR_STOP
 * to stop normally (exit status 0; what is still queued is refused as
 * after weft_actor_stop(WEFT_STOP_NOW)), or a negative code: the actor
 * fails and exits with it. It may block (tell, ask other actors, sleep):
 * the mailbox waits meanwhile. Its cancellation points return -ECANCELED
 * once the actor is stopped with WEFT_STOP_NOW or its scope is cancelled. */
typedef int (*weft_actor_fn)(void *state, weft_actor_msg *m);
#define WEFT_ACTOR_STOP 1

typedef struct weft_actor_opts {
    weft_actor_fn fn;  /* required */
    void *state;       /* the behaviour's first argument */
    size_t msg_size;   /* bytes per message, 1 .. 65536 */
    size_t reply_size; /* bytes per reply, 0 .. 65536 (0: replies carry
                        * only success or an error) */
    int capacity;      /* mailbox slots, >= 1 */
    /* A name for diagnostics (the task's name; the string must outlive
     * the actor). */
    const char *name;
    /* Non-NULL: the actor registers itself under this name before it
     * handles its first message (weft_register; the string is copied;
     * weft_actor_spawn takes it before it returns) and is unregistered
     * when it exits. A name already taken makes the actor fail at once
     * with -EEXIST. */
    const char *register_as;
    /* Optional: runs first, on the actor's task; a negative return makes
     * the actor exit with it before any message (a failed start). */
    int (*on_start)(void *state);
    /* Optional: runs last, on the actor's task, with the exit status (not
     * after a failed start). */
    void (*on_stop)(void *state, int status);
    /* As weft_spawn_opts.worker: 0 lets the runtime place the actor, k
     * starts it on worker k - 1, where it stays. With 0 the actor may
     * also move to another worker between two messages, when only weft's
     * loop is on its stack, to where its messages come from (see
     * weft_spawn_opts.movable; its behaviour's thread-locals are safe
     * during a message, but keep no thread-local's address in state from
     * one message to the next). weft_actor_run's actor moves only as its
     * task may (weft_spawn_opts.movable). */
    int worker;
} weft_actor_opts;

/* Spawns an actor as a child of scope s (NULL: the current scope). Returns
 * 0 and sets *out to a reference the caller owns (unref it when done; the
 * actor runs on), or -EINVAL (out or fn NULL, a size or capacity out of
 * range), -EPERM (not in a task), -ESHUTDOWN, -ECANCELED (the scope is
 * joined or cancelled), -ENOMEM. Never blocks; not a cancellation point. */
WEFT_EXTERN int weft_actor_spawn(weft_scope *s, const weft_actor_opts *o,
                                 weft_actor **out);

/* Makes the calling task the actor described by o: it handles messages
 * until it stops, then returns its exit status (0 after WEFT_ACTOR_STOP or
 * weft_actor_stop, a negative code after a failure, -ECANCELED if its scope
 * was cancelled). The way to run an actor as a supervisor's child (see
 * weft_child_spec). -EINVAL, -EPERM as weft_actor_spawn, -ENOMEM. Blocks. */
WEFT_EXTERN int weft_actor_run(const weft_actor_opts *o);

/* The calling actor's own reference (borrowed: ref it to keep it beyond
 * the current message), or NULL outside an actor. Never blocks. */
WEFT_EXTERN weft_actor *weft_actor_self(void);

/* Takes a reference; returns a. Any thread; never blocks. */
WEFT_EXTERN weft_actor *weft_actor_ref(weft_actor *a);

/* Drops a reference; the last one frees the handle's memory (the actor
 * itself runs until it stops). Returns 0 or -EINVAL. Any thread; never
 * blocks. */
WEFT_EXTERN int weft_actor_unref(weft_actor *a);

/* Queues a copy of msg (msg_size bytes) in a's mailbox, waiting while it is
 * full until the deadline (WEFT_NEVER: none). Returns 0, -ETIMEDOUT,
 * -ECANCELED, -ESRCH (the actor has exited or is stopping), -EINVAL,
 * -EPERM (not in a task: use weft_actor_try_tell). A cancellation point: on
 * -ETIMEDOUT or -ECANCELED nothing was queued. Messages from one sender
 * arrive in the order sent. Blocks while the mailbox is full. */
WEFT_EXTERN int weft_actor_tell(weft_actor *a, const void *msg,
                                weft_time deadline);

/* weft_actor_tell without waiting: -EAGAIN if the mailbox is full. Any
 * thread, also outside a runtime; never blocks. */
WEFT_EXTERN int weft_actor_try_tell(weft_actor *a, const void *msg);

/* Sends msg as an ask and waits, until the deadline, for the behaviour's
 * reply, copied to *reply (reply_size bytes; reply may be NULL). Returns 0,
 * the negative code the behaviour replied with (weft_actor_reply_error),
 * -ENOMSG (the behaviour returned without replying), -ESRCH (the actor
 * exited before replying: stopped or failed), -ETIMEDOUT, -ECANCELED,
 * -EINVAL, -EPERM (not in a task), -EDEADLK (an actor asking itself). A
 * cancellation point: after -ETIMEDOUT or -ECANCELED a message already
 * queued stays queued and is handled, and its reply is dropped. Blocks. */
WEFT_EXTERN int weft_actor_ask(weft_actor *a, const void *msg, void *reply,
                               weft_time deadline);

/* In the behaviour: replies to the ask m with a copy of *reply (reply_size
 * bytes). Returns 0 (also when the asker has given up: the reply is
 * dropped), -EINVAL (m is not an ask), -EALREADY (already replied). Never
 * blocks. */
WEFT_EXTERN int weft_actor_reply(weft_actor_msg *m, const void *reply);

/* In the behaviour: fails the ask m with err (negative): the asker's
 * weft_actor_ask returns err. Returns as weft_actor_reply, and -EINVAL if
 * err >= 0. Never blocks. */
WEFT_EXTERN int weft_actor_reply_error(weft_actor_msg *m, int err);

/* How weft_actor_stop stops an actor. */
enum {
    /* Refuse new messages (-ESRCH), handle what is queued, then exit with
     * status 0: Erlang's orderly shutdown, Akka's PoisonPill. */
    WEFT_STOP_DRAIN = 0,
    /* Exit as soon as the current message is handled (and cancel it if it
     * blocks): queued asks fail with -ESRCH, queued tells are dropped;
     * exit status -ECANCELED. */
    WEFT_STOP_NOW = 1,
};

/* Asks a to stop (how: WEFT_STOP_*). Returns at once: weft_actor_join waits
 * for the exit. Idempotent (a NOW after a DRAIN hurries it). Returns 0,
 * -ESRCH (already exited), -EINVAL. Any thread; never blocks. */
WEFT_EXTERN int weft_actor_stop(weft_actor *a, int how);

/* Waits until a has exited and sets *status (may be NULL) to its exit
 * status. Returns 0, -ECANCELED, -EDEADLK (the actor itself), -EINVAL,
 * -EPERM. A cancellation point that changes nothing. Blocks. */
WEFT_EXTERN int weft_actor_join(weft_actor *a, int *status);

/* weft_actor_join with a deadline: -ETIMEDOUT, changing nothing. (0.2's
 * weft_actor_wait.) Blocks. */
WEFT_EXTERN int weft_actor_join_until(weft_actor *a, int *status,
                                      weft_time deadline);

/* Number of messages in a's mailbox now (a hint). Never blocks. */
WEFT_EXTERN size_t weft_actor_queued(const weft_actor *a);

/* Monitors: watcher is told once when target exits, with its exit status,
 * as a WEFT_MSG_DOWN message that takes no mailbox slot (it is set aside
 * when the monitor is made, so it is never refused or lost, and it comes
 * before queued messages). If target has already exited it is told at
 * once. Returns the monitor's id (> 0, unique in the process), or -EINVAL,
 * -ESRCH (the watcher has exited), -ENOMEM. O(1) however many monitors
 * target has (their index grows as they do). Any task; never blocks. */
WEFT_EXTERN long weft_actor_monitor(weft_actor *target, weft_actor *watcher);

/* Removes the monitor of that id from target if it has not fired: then no
 * DOWN for it ever comes. O(1) however many monitors target has. Returns
 * 0; -ENOENT if it has fired (its DOWN is delivered, or on its way, once),
 * was removed already, or is not one of target's (another actor's id, or
 * none ever made); -EINVAL (target NULL, monitor <= 0). Against an exit of
 * target at the same moment on another worker, exactly one wins: 0 and no
 * DOWN, or -ENOENT and the DOWN. Any thread; never blocks. */
WEFT_EXTERN int weft_actor_demonitor(weft_actor *target, long monitor);

/* A monitor as a future: *out is set to a new future of an int, resolved
 * once with target's exit status when it exits (at once if it has). The
 * caller owns the reference. Returns 0, -EINVAL, -ENOMEM. Any thread;
 * never blocks. */
WEFT_EXTERN int weft_actor_monitor_future(weft_actor *target,
                                          weft_future **out);

/* The registry: names for the actors of one runtime (Erlang's register and
 * whereis). A name (1 to 63 bytes, copied) belongs to one live actor and
 * is freed when it exits. weft_register returns 0, -EEXIST (taken),
 * -ESRCH (a has exited), -EINVAL (a name empty or too long), -EPERM
 * (outside a runtime), -ENOMEM. weft_whereis returns a new reference (the
 * caller unrefs it) or NULL. weft_unregister returns 0, -ENOENT. Any
 * thread of the runtime; never block. */
WEFT_EXTERN int weft_register(const char *name, weft_actor *a);
WEFT_EXTERN weft_actor *weft_whereis(const char *name);
WEFT_EXTERN int weft_unregister(const char *name);

/* ------------------------------------------------------------------------
 * 13. Supervisors
 *
 * A supervisor starts children, watches them, and restarts those that
 * fail, in the manner of Erlang/OTP's supervisor. It is a task owning a
 * scope: its children cannot outlive it. A child is a task function (an
 * actor through weft_actor_run, a nested supervisor through weft_sup_run,
 * or any weft_fn); it exits with a status, >= 0 normal, < 0 a failure.
 *
 * When a child exits, the strategy says who restarts: that child
 * (one_for_one), all of them (one_for_all: the others are stopped first,
 * in reverse start order, then all started again in order), or it and
 * those started after it (rest_for_one). The restart type says whether it
 * is restarted at all: permanent always, transient after a failure only,
 * temporary never. Restarts wait for a backoff (weft_retry's delays, per
 * child, reset after a child has run long enough), and if there are more
 * than `intensity` restarts within `period_ns`, the supervisor gives up:
 * it stops every child and returns -ECHILD, a failure its own supervisor
 * sees (escalation up the tree).
 *
 * Stopping a child: its stop hook is called (an actor child is stopped
 * with WEFT_STOP_DRAIN) and it has shutdown_ns to exit, after which it is
 * cancelled; WEFT_SHUTDOWN_BRUTAL cancels it at once. A supervisor stops
 * its children in reverse start order, one after the other.
 *
 * A restart starts the child afresh from its spec: start(arg) is called
 * again on a new task, or a new actor is made from the same
 * weft_actor_opts, and its on_start runs again. weft carries nothing of
 * the failed run over but the memory the spec points at: arg, and an
 * actor's opts.state, are the same pointers, and what they point at is
 * as the failed run left it (maybe half updated: reset it in on_start,
 * as OTP's init builds a fresh state, if a restart should begin clean).
 * For an actor child, the rest goes with the old actor:
 * - the mailbox: tells still queued are dropped, asks queued or
 *   unanswered fail with -ESRCH; the new actor starts empty;
 * - the handle: the new actor is another weft_actor; references to the
 *   old one stay safe and their calls return -ESRCH;
 * - names: the old actor's are released at its exit; register_as is
 *   taken again by the new actor before its first message (weft_whereis
 *   finds it, and NULL in between), names given with weft_register are
 *   not;
 * - monitors: those on the old actor fire at its exit, with its status,
 *   and none moves to the new one (monitor it again); DOWNs the old actor
 *   had not handled are dropped, and so are its monitors of other actors
 *   when they fire.
 * There are no links (Erlang's link): a child's exit is seen by its
 * supervisor, and by other actors only through monitors.
 * ---------------------------------------------------------------------- */

typedef struct weft_sup weft_sup;

typedef enum weft_sup_strategy {
    WEFT_ONE_FOR_ONE = 0,
    WEFT_ONE_FOR_ALL = 1,
    WEFT_REST_FOR_ONE = 2,
    /* Children of one kind added at run time with weft_sup_start_child
     * (OTP's simple_one_for_one, Elixir's DynamicSupervisor): restarts as
     * one_for_one; max_children bounds them. */
    WEFT_DYNAMIC = 3,
} weft_sup_strategy;

typedef enum weft_restart {
    WEFT_PERMANENT = 0, /* always restarted */
    WEFT_TRANSIENT = 1, /* restarted after a failure (status < 0) only */
    WEFT_TEMPORARY = 2, /* never restarted */
} weft_restart;

#define WEFT_SHUTDOWN_BRUTAL 0      /* cancel at once */
#define WEFT_SHUTDOWN_INFINITY (-1) /* wait for the child however long */

typedef struct weft_child_spec {
    /* Unique among the supervisor's children (the string must outlive the
     * supervisor); also the child task's name. */
    const char *name;
    /* The child: start(arg) runs as a task in the supervisor's scope, and
     * its return is the child's exit status. NULL if actor is set. */
    weft_fn start;
    void *arg;
    /* Or an actor: the child runs weft_actor_run(actor) (the options must
     * outlive the supervisor); its graceful stop is WEFT_STOP_DRAIN. */
    const weft_actor_opts *actor;
    weft_restart restart;
    /* Time to exit once asked to stop, then it is cancelled; 0
     * (WEFT_SHUTDOWN_BRUTAL): cancelled at once; WEFT_SHUTDOWN_INFINITY:
     * no limit (OTP's choice for a child that is a supervisor). */
    int64_t shutdown_ns;
    /* Optional: asks a start child to finish (e.g. closes its input); runs
     * on the supervisor's task and must not block. Without it, a graceful
     * stop of a start child is a cancel. */
    void (*stop)(void *arg);
} weft_child_spec;

/* What happened, for weft_sup_opts.on_event. */
typedef enum weft_sup_event_kind {
    WEFT_SUP_EXIT = 0,     /* a child exited (status) */
    WEFT_SUP_RESTART = 1,  /* a child is started again after delay_ns */
    WEFT_SUP_GIVE_UP = 2,  /* a child is not restarted (its restart type) */
    WEFT_SUP_ESCALATE = 3, /* too many restarts: the supervisor stops */
} weft_sup_event_kind;

typedef struct weft_sup_event {
    weft_sup_event_kind kind;
    const char *supervisor; /* weft_sup_opts.name, or "" */
    const char *child;      /* the child's name */
    int status;             /* the child's exit status */
    int restarts;           /* restarts within the period, this one included (0
                             * when intensity < 0: no window is kept) */
    int64_t delay_ns;       /* RESTART: the backoff before it */
    weft_time at;           /* weft_now() when it happened */
} weft_sup_event;

typedef struct weft_sup_opts {
    weft_sup_strategy strategy;
    /* At most intensity restarts within period_ns, or the supervisor gives
     * up (-ECHILD). Both 0: OTP's default, 1 restart in 5 s. intensity < 0:
     * no limit. */
    int intensity;
    int64_t period_ns;
    /* Delays before restarts, per child: base_ns, cap_ns, jitter and seed
     * are used (max_attempts and the rest are not; intensity is the
     * limit). NULL: restart at once. The policy must outlive the
     * supervisor. */
    const weft_retry *backoff;
    /* A child that has run this long since its start has its backoff
     * reset; 0: period_ns. */
    int64_t backoff_reset_ns;
    const char *name; /* for events and diagnostics; may be NULL */
    int max_children; /* WEFT_DYNAMIC: at most this many; 0: no limit */
    /* Called on the supervisor's task for every exit, restart, give-up and
     * escalation; must not block. NULL: nothing. */
    void (*on_event)(void *ctx, const weft_sup_event *e);
    void *event_ctx;
} weft_sup_opts;

/* Runs a supervisor on the calling task: starts the n children in order,
 * supervises them until stopped (weft_sup_stop on weft_sup_current(), or a
 * cancel of the task's scope), then stops them in reverse order and
 * returns 0 (stopped, or cancelled), or -ECHILD (it gave up: too many
 * restarts), -EINVAL (bad options or specs, duplicate names), -EPERM (not
 * in a task), -ENOMEM. Shutting down is not cut short by the cancel. A
 * nested supervisor is a child whose start calls this. Blocks. */
WEFT_EXTERN int weft_sup_run(const weft_sup_opts *o,
                             const weft_child_spec *children, int n);

/* weft_sup_run on a new task in scope s (NULL: the current scope); *out
 * is a handle for the calls below, freed with weft_sup_free once
 * weft_sup_join has returned. Returns 0, or the errors of weft_sup_run's
 * checks and of weft_spawn. Never blocks. */
WEFT_EXTERN int weft_sup_spawn(weft_scope *s, const weft_sup_opts *o,
                               const weft_child_spec *children, int n,
                               weft_sup **out);

/* The supervisor the calling task runs (in weft_sup_run), or NULL. The
 * pointer is valid while that weft_sup_run runs. */
WEFT_EXTERN weft_sup *weft_sup_current(void);

/* Adds a child at run time, started after the others. Returns 0, -EEXIST
 * (a child of that name), -EMFILE (max_children reached), -ESRCH (the
 * supervisor has stopped), -EINVAL, -ECANCELED, -EPERM (not in a task),
 * -EDEADLK (on the supervisor's own task, e.g. in on_event). A
 * cancellation point: waits until the supervisor has started the child;
 * cancelled before the supervisor took it, nothing was added (once taken,
 * the call waits for its answer). Blocks. */
WEFT_EXTERN int weft_sup_start_child(weft_sup *s, const weft_child_spec *c);

/* Stops the named child as at shutdown and removes it. Returns 0,
 * -ENOENT, -ESRCH, -ECANCELED, -EINVAL, -EPERM, -EDEADLK (as
 * weft_sup_start_child). A cancellation point: cancelled, the child
 * is still stopped and removed, but the caller does not wait for it.
 * Blocks. */
WEFT_EXTERN int weft_sup_terminate_child(weft_sup *s, const char *name);

/* A supervisor's figures, as weft_sup_stats_get reads them. */
typedef struct weft_sup_stats {
    int running;   /* children running now */
    long restarts; /* restarts since the start (a group restart of
                    * one_for_all or rest_for_one counts once) */
} weft_sup_stats;

/* Fills *out with the supervisor's figures now. Returns 0, -EINVAL (s or
 * out NULL). Any thread; never blocks. (0.2's weft_sup_counts.) */
WEFT_EXTERN int weft_sup_stats_get(weft_sup *s, weft_sup_stats *out);

/* Asks the supervisor to stop its children (in reverse order) and return
 * 0. Returns 0, -ESRCH (it has stopped), -EINVAL. Any thread; never
 * blocks. */
WEFT_EXTERN int weft_sup_stop(weft_sup *s);

/* Waits until a supervisor started by weft_sup_spawn has returned; its
 * status goes to *status (may be NULL). Returns 0, -ECANCELED (a
 * cancellation point that changes nothing), -EINVAL. Blocks. */
WEFT_EXTERN int weft_sup_join(weft_sup *s, int *status);

/* weft_sup_join with a deadline: -ETIMEDOUT, changing nothing. (0.2's
 * weft_sup_wait.) Blocks. */
WEFT_EXTERN int weft_sup_join_until(weft_sup *s, int *status,
                                    weft_time deadline);

/* Frees a handle from weft_sup_spawn after weft_sup_join returned 0.
 * Returns 0, -EBUSY (still running), -EINVAL. Never blocks. */
WEFT_EXTERN int weft_sup_free(weft_sup *s);

/* ------------------------------------------------------------------------
 * 14. Seeing inside a running program
 *
 * What the runtime does and where each task waits, while it runs: a dump
 * of every task (weft_dump), deadlock detection, counters and the
 * scheduling lag (weft_stats_get), a watchdog for tasks that hold a
 * worker too long, instrument hooks and traces. docs/debugging.md shows
 * them at work.
 * ---------------------------------------------------------------------- */

/* ---- the task dump ---- */

/* weft_dump's flags. 0: text for people. */
#define WEFT_DUMP_JSON 1u   /* JSON lines: one object per line */
#define WEFT_DUMP_STACKS 2u /* every parked task's whole stack too */

/* Writes a dump of every live task to fd: its id, name, spawn site
 * (file:line), state (running, ready or parked), and for a parked task
 * what it waits on and for how long (a channel and which way, a mutex and
 * the task that holds it, a descriptor and its direction, a sleep's
 * deadline, a future, a scope's join, a task's join, a blocking call, an
 * actor's mailbox, ...) and where: the function, file and line of the
 * program that made the weft call that blocks (with WEFT_DUMP_STACKS, its
 * whole stack, walked from its saved registers); each task under the
 * scope it was spawned into, each scope with its policy, owner, deadline
 * and cancel state. See docs/debugging.md for the formats; with
 * WEFT_DUMP_JSON, every line is a JSON object: first {"type":"dump",...},
 * then one "scope" line before the lines of its tasks and kid scopes, one
 * "task" line per task, and last {"type":"end","tasks":N,"scopes":M,...}.
 * File and line come from the program's debug information (-g) through
 * libdw, when weft was built with it (WEFT_LIBDW); otherwise frames are
 * addresses with the names dladdr knows. From a task, the dump is written
 * on a thread of its own (walking and naming frames needs more stack than
 * a task has): if that thread cannot be made, the dump has no lines.
 * From a task: dumps that task's runtime. From any other thread: dumps
 * every runtime running in the process, one after the other.
 * Never stops the world: each scope's lock is taken only while a buffer's
 * worth of lines is formatted, never while writing, and memory does not
 * grow with the number of tasks; a task that starts or ends meanwhile may
 * be missed. Dumps are taken one at a time. Blocks the calling thread
 * (not only the task) while it writes, so from a task never write to a
 * pipe that a task of the same runtime reads; not a cancellation point.
 * Any thread; not from a signal handler (SIGQUIT: see
 * weft_config.sigquit_dump, whose dump has the stacks). Returns 0,
 * -EINVAL (unknown flags), -ESRCH (no runtime is running), -ENOMEM, or
 * the error of write(2) as a negative code (-EBADF, -EIO, -EPIPE, ...). */
WEFT_EXTERN int weft_dump(int fd, unsigned flags);

/* ---- deadlocks ----
 *
 * A runtime looks for two kinds of deadlock, and weft_config.deadlock says
 * what it does when it finds one:
 *
 * - Every task asleep, and nothing outside the runtime that could wake one
 *   (Go's "all goroutines are asleep"): no timer armed (no sleep, no
 *   deadline, no timeout), no task waiting on a descriptor, no
 *   weft_blocking call running or queued, and no task waiting for a future
 *   or for the shutdown request. Futures are how plain threads and foreign
 *   callbacks hand results to tasks, and a signal or any thread may request
 *   a shutdown at any time, so a task waiting for either is never counted
 *   as stuck. Looked for when the last worker goes idle with no timer (it
 *   costs nothing before), with either clock (under the virtual clock such
 *   a hang used to be silent), and reported once the state has lasted
 *   weft_config.deadlock_grace_ns of real time (1 s by default) with no
 *   task woken meanwhile.
 * - A cycle of mutex waits (task A holds m1 and waits for m2, B holds m2
 *   and waits for m1, or longer), looked for when a task is about to wait
 *   for a held mutex, even while other tasks run, on any worker. The
 *   task whose wait would close the cycle is the one told, and only it
 *   (one -EDEADLK per cycle): with WEFT_DEADLOCK_REPORT its
 *   weft_mutex_lock (or _until) returns -EDEADLK having waited for
 *   nothing, and it still holds what it held. The relock inside
 *   weft_cond_wait is never told (it must return holding the mutex).
 *
 * What the runtime cannot see: a plain thread (not one of its workers)
 * that will call weft_chan_try_send, weft_chan_close, weft_event_set,
 * weft_sem_release, weft_scope_cancel or the like on an object a task waits
 * on. That is what the grace period is for: if every task waits for such
 * a thread and it calls in later than deadlock_grace_ns, a deadlock is
 * reported. Hand results from plain threads to tasks through a future
 * (section 9), raise the grace, or set deadlock to WEFT_DEADLOCK_IGNORE.
 *
 * The report goes to stderr: a first line with the word "deadlock", then
 * each task asleep with its name, spawn site, what it waits on and since
 * when (for a mutex: the task that holds it) and the line it waits on (as
 * the dump's "at" lines; a mutex cycle's report has the line of
 * the task it tells), then the
 * task dump
 * (weft_dump). Then, with WEFT_DEADLOCK_REPORT, the runtime cancels the
 * root scope: every cancellation point returns -ECANCELED and the tasks
 * unwind as they would at a shutdown, and weft_run returns -EDEADLK. If
 * they cannot (they wait where a cancel does not reach them, and are all
 * asleep again), weft_run returns -EDEADLK without waiting for them, and
 * what they hold is not freed: neither are the runtime's workers nor those
 * tasks and their stacks, kept for the life of the process (reachable, so
 * not a leak to a leak checker), since a plain thread may still wake one
 * of them (weft_event_set, weft_future_resolve...). Such a wake returns
 * as usual, and the task it wakes never runs. */
/* ---- instruments and traces ---- */

/* What a task that stops running waits for (an instrument's park). The
 * names, from weft_wait_kind_name, are those of the task dump. */
typedef enum weft_wait_kind {
    WEFT_WAIT_NONE = 0,   /* nothing recorded */
    WEFT_WAIT_SLEEP,      /* weft_sleep_for, weft_sleep_until */
    WEFT_WAIT_SEND,       /* a channel send */
    WEFT_WAIT_RECV,       /* a channel receive */
    WEFT_WAIT_SELECT,     /* weft_select (obj: its case array) */
    WEFT_WAIT_MUTEX,      /* weft_mutex */
    WEFT_WAIT_RWLOCK,     /* weft_rwlock */
    WEFT_WAIT_COND,       /* weft_cond */
    WEFT_WAIT_SEM,        /* weft_sem */
    WEFT_WAIT_EVENT,      /* weft_event */
    WEFT_WAIT_WAITGROUP,  /* weft_wg */
    WEFT_WAIT_ONCE,       /* weft_once, run by another task */
    WEFT_WAIT_BARRIER,    /* weft_barrier */
    WEFT_WAIT_FUTURE,     /* a future or a combinator of futures */
    WEFT_WAIT_FD,         /* a descriptor */
    WEFT_WAIT_BLOCKING,   /* a weft_blocking call */
    WEFT_WAIT_BULKHEAD,   /* weft_bulkhead */
    WEFT_WAIT_LIMITER,    /* weft_limiter */
    WEFT_WAIT_SCOPE,      /* weft_scope_join: the children to finish */
    WEFT_WAIT_TASK,       /* weft_task_join */
    WEFT_WAIT_MAILBOX,    /* an actor waiting for a message */
    WEFT_WAIT_TELL,       /* a tell waiting for room in a mailbox */
    WEFT_WAIT_ASK,        /* an ask: room, then its reply */
    WEFT_WAIT_ACTOR,      /* weft_actor_join, weft_actor_join_until */
    WEFT_WAIT_SUPERVISOR, /* a supervisor's loop, or a call waiting for it */
    WEFT_WAIT_POOL,       /* weft_pool_acquire, weft_pool_close */
    WEFT_WAIT_YIELD,      /* not a wait: weft_yield, a spawning loop's
                           * turn, or a task whose budget is spent (the
                           * conventions above); it stays runnable */
} weft_wait_kind;

/* A static name for a wait kind ("channel receive", "mutex", ...,
 * "yield"), "?" for a value that is none. Any thread; never blocks. */
WEFT_EXTERN const char *weft_wait_kind_name(int kind);

/* Why a scope was cancelled (an instrument's scope_cancel). */
typedef enum weft_cancel_reason {
    WEFT_CANCEL_USER = 1,     /* weft_scope_cancel, weft_task_cancel, an
                               * actor's stop */
    WEFT_CANCEL_DEADLINE = 2, /* its deadline, or a shutdown's drain */
    WEFT_CANCEL_POLICY = 3,   /* its policy: a fail-fast failure, a
                               * first-wins winner */
} weft_cancel_reason;

/* A task as instruments see it; valid only during the callback (copy what
 * you keep; name points into the spawner's memory). */
typedef struct weft_task_info {
    /* Unique in the runtime and stable for the task's life: the spawning
     * worker's index + 1 above the low 40 bits, that worker's count of
     * spawns in them (the root task is 1, the runtime's shutdown keeper,
     * made by a shutdown request with a drain, 2). The dump and a trace
     * show it as "W.N": N the Nth task spawned on worker W - 1 (W = 0:
     * the runtime's own). */
    uint64_t id;
    const char *name; /* weft_spawn_opts.name, or NULL */
    const char *file; /* spawn site (the runtime's own tasks: weft's) */
    int line;
    int worker; /* the worker it runs on; -1 before its first run */
} weft_task_info;

/* Instrument hooks, after Trio's Instrument API: optional callbacks (NULL:
 * not called) and the context each receives, installed for one runtime
 * with weft_config.instrument. A runtime without one pays one untaken
 * branch at each point below, nothing else.
 *
 * When each is called, and where:
 * - spawn: a task was made, before it can run; parent is the spawning
 *   task (NULL for the runtime's own: the root task, the keeper). On the
 *   spawner's worker (the root: on weft_run's thread as worker 0, before
 *   it runs; the shutdown keeper: on the thread whose request makes it).
 * - run: the task starts or resumes running, on its worker, on its own
 *   stack, just before its code continues.
 * - park: the running task stops running: it blocks on `kind` (obj: the
 *   object, or NULL; a key for matching, not to be touched), or yields
 *   (WEFT_WAIT_YIELD). A block that ends before the task stops (a cancel
 *   seen at once) is not reported. On its worker.
 * - wake: a parked task was made runnable; code is the result its wait
 *   will see (0 or the waker's code, -ETIMEDOUT, -ECANCELED); waker is the
 *   task that woke it, or NULL (a deadline's timer, the poller's events,
 *   a thread that is no task: a blocking call's pool thread, a plain
 *   thread's cancel). On the
 *   waking thread, which may be another worker or no worker at all.
 * - exit: the task has finished with status (its function's return), its
 *   own unjoined scopes joined; it never runs again. On its worker.
 * - scope_cancel: a scope was cancelled (the scopes below it are too:
 *   they are not reported); by is the task that did it, or NULL (a
 *   deadline's timer). s is a key only: it may be freed already. Reported
 *   after the wakes the cancel made (outside the scope's lock), and only
 *   when the cancelling thread is a worker of the runtime.
 * Sequence for one task: spawn, then run and park in turns (wake between
 * a park and the next run, except after a yield), then exit.
 *
 * Callbacks run in the middle of the scheduler: they must be quick and
 * must not block the thread (no locks held long, no I/O that waits) and
 * must make no weft call that can block or switch tasks (no waits, no
 * spawn, no sleep, no yield, no cancel); reading the clock (weft_now),
 * weft_worker_id and weft_wait_kind_name are fine. With several workers
 * they run on several threads at once: keep per-worker state (indexed by
 * weft_worker_id(), which is -EPERM off the workers) or use atomics.
 *
 * Why only at weft_run, not added and removed while it runs (as Trio
 * allows): a removal must wait until no worker is inside the old
 * callbacks, which costs every hook point an atomic or a grace period;
 * a callback that checks a flag of its own turns itself on and off for
 * free. */
typedef struct weft_instrument {
    void *ctx;
    void (*spawn)(void *ctx, const weft_task_info *task,
                  const weft_task_info *parent);
    void (*run)(void *ctx, const weft_task_info *task);
    void (*park)(void *ctx, const weft_task_info *task, weft_wait_kind kind,
                 const void *obj);
    void (*wake)(void *ctx, const weft_task_info *task,
                 const weft_task_info *waker, int code);
    void (*exit)(void *ctx, const weft_task_info *task, int status);
    void (*scope_cancel)(void *ctx, weft_scope *s, weft_cancel_reason reason,
                         const weft_task_info *by);
} weft_instrument;

/* Traces (weft_config.trace_path, or WEFT_TRACE=path in the environment,
 * which wins over the field; WEFT_TRACE set but empty turns tracing off).
 * weft_run records, per worker and without a lock, which task ran when,
 * and writes the file when it returns, in Chrome's Trace Event Format
 * (JSON, for https://ui.perfetto.dev or chrome://tracing): a track per
 * worker, a slice per run of a task, named by the task's name (or "task
 * W.N", see weft_task_info.id), instants for wakes and scope cancels;
 * times in microseconds of the runtime's clock from the start of the run
 * (the virtual clock's time when it is virtual: tasks then take no time).
 * At most WEFT_TRACE_EVENTS events (48 bytes each) and as many spawned
 * tasks' names (72 bytes each) per worker are kept: later ones are
 * counted, not kept, and the file says how many (a line on stderr too).
 * Tracing passes every event on to weft_config.instrument if there is
 * one. docs/debugging.md, "Tracing", shows how to read one. */
#define WEFT_TRACE_EVENTS (1 << 20)

/* ---- statistics and lag ---- */

/* Buckets of the lag histogram: bucket i counts delays d with
 * 2^i <= d < 2^(i+1) ns (bucket 0 also 0 and 1 ns, the last one
 * everything from 2^31 ns, about 2.1 s, up). */
#define WEFT_LAG_BUCKETS 32

/* Entries in a slice table (weft_worker_stats.top). */
#define WEFT_SLICE_TOP 4

/* A task that ran long without parking or yielding: one entry of a slice
 * table. A slice is a task's run from a switch to it to its next park,
 * yield or exit, measured in real time by sampling (see
 * weft_config.slow_slice_ns and docs/debugging.md, "Slow slices"). */
typedef struct weft_slice_info {
    uint64_t id;      /* the task's id (weft_task_info.id, the dump's W.N);
                       * 0: an empty entry */
    char name[32];    /* its name, cut to 31 bytes; "" if it has none */
    const char *file; /* its spawn site; NULL in an empty entry */
    int line;
    int worker;    /* the worker it ran on */
    int64_t ns;    /* its longest slice so far (one still running counts
                    * with what it has run) */
    uint64_t slow; /* its slices that reached the threshold (since it
                    * entered the table: a task pushed out by longer
                    * ones starts again at 0) */
} weft_slice_info;

/* One worker's figures. Counters (since the runtime started) only grow,
 * at every read, from any thread; "now" figures are a snapshot, each read
 * on its own, so they need not add up exactly while the worker runs. */
typedef struct weft_worker_stats {
    uint64_t switches; /* context switches: to a task, or back to the
                        * worker's loop */
    uint64_t parks;    /* times a task blocked here (parked) */
    uint64_t yields;   /* times a task yielded here and another ran */
    uint64_t steals;   /* not-started tasks it took from other workers */
    uint64_t inbox;    /* tasks made runnable here by other threads:
                        * wakes by other workers and pool threads, spawns
                        * pinned here */
    uint64_t spawned;  /* tasks its tasks spawned */
    uint64_t finished; /* tasks that finished here */
    uint64_t idle_ns;  /* real time asleep with nothing to run (the short
                        * spin and steal attempts before it sleeps are
                        * not counted) */
    uint64_t runq;     /* now: tasks runnable here (woken, yielded, or
                        * not started yet, which others may steal);
                        * without the inbox and the one task woken to
                        * run next */
    uint64_t timers;   /* now: timers armed (sleeps, deadlines of parked
                        * tasks and of scopes) */
    uint64_t fd_waits; /* now: tasks parked on descriptors */
    /* Scheduling lag: the delay from a task's wake to its run, counted by
     * the worker that ran it, for one wake in 1024 by each worker (wakes
     * by pool threads are not sampled), and for every task woken by a
     * timer (a sleep's end, a deadline) that ran 1 ms or more after the
     * timer was due (with the virtual clock: that fired so late, in
     * virtual time): so a stall that repeats cannot hide between the
     * samples. See WEFT_LAG_BUCKETS and weft_lag_quantile. */
    uint64_t lag[WEFT_LAG_BUCKETS];
    int64_t lag_max_ns; /* the largest delay counted in lag[], exact */
    /* Slices (weft_config.slow_slice_ns): runs of one task without a
     * park or yield that reached the threshold, and the tasks whose
     * slices were longest, longest first (top[0].ns is the longest slice
     * seen, top[0] its task). All 0 when slices are not measured. */
    uint64_t slow_slices;
    weft_slice_info top[WEFT_SLICE_TOP];
    /* started tasks it handed to another worker: movable tasks (see
     * weft_spawn_opts.movable) and actors between two messages */
    uint64_t moved;
} weft_worker_stats;

typedef struct weft_stats {
    int workers;      /* the runtime's workers */
    uint64_t spawned; /* tasks spawned, the root task included */
    uint64_t finished;
    uint64_t alive;        /* spawned - finished: not finished yet */
    weft_worker_stats all; /* every worker's figures added up (lag_max_ns
                            * and top: the largest of all workers) */
    weft_blocking_info
        blocking; /* the blocking pool (weft_blocking_stats_get) */
} weft_stats;

/* Fills *out with a runtime's figures and workers[0..n-1] with those of
 * workers 0..n-1 (up to the runtime's worker count; workers may be NULL
 * when n is 0). From a task: its runtime's. From any other thread (a
 * monitoring thread, the watchdog's callback): the runtime running in
 * the process, if there is exactly one. Returns the runtime's number of
 * workers (so a caller can size its array: weft_workers() gives it too),
 * or -EINVAL (out NULL, n < 0, workers NULL with n > 0), -EPERM (not in a
 * task, and no runtime or several are running: the thread cannot name
 * one), -ENOTSUP (weft was built with the CMake option WEFT_STATS=OFF,
 * which leaves the counters and lag samples out of the scheduler). Never
 * blocks (the blocking pool's and the slice monitor's locks for a
 * moment); not a cancellation point. Cheap: it reads each worker's
 * counters, which their workers keep without any shared atomic
 * operation. */
WEFT_EXTERN int weft_stats_get(weft_stats *out, weft_worker_stats *workers,
                               int n);

/* The lag under which a fraction q (0 to 1) of s's counted delays fell, as
 * the upper bound of the bucket that holds the q-quantile (ns), or
 * s->lag_max_ns, the exact maximum, if that is lower: q = 0.999 for
 * p99.9. Returns that bound,
 * -ENODATA if s has no delays counted (print nothing, or "no samples"),
 * -EINVAL (s NULL, q outside 0..1). Any thread; never blocks. */
WEFT_EXTERN int64_t weft_lag_quantile(const weft_worker_stats *s, double q);

/* What the watchdog (weft_config.watchdog_ns) reports: a task that has
 * held its worker at least held_ns, in real time, without parking or
 * yielding (a CPU-bound loop, or a blocking system call made in a task:
 * give it to weft_blocking, or yield in the loop). Reported once per
 * occurrence, when the hold reaches the threshold (ended 0), and again
 * when it ends (ended 1, held_ns its whole length): the task is reported
 * again only after its worker has run something else and it holds it
 * again. On the virtual clock too, in real time (a hog holds the worker
 * in real time, while virtual time stands still). */
typedef struct weft_watchdog_report {
    int worker;       /* its worker's index */
    const char *name; /* the task's name, "" if it has none: a copy,
                       * valid during the call only (cut to 127 bytes) */
    const char *file; /* its spawn site */
    int line;
    int64_t held_ns;      /* how long it has held the worker: so far, or
                           * in all once ended (to within the sampling
                           * period, a millisecond by default) */
    int64_t threshold_ns; /* the configured threshold */
    uint64_t id;          /* the task's id (weft_task_info.id) */
    int ended;            /* 1: the hold is over (the task parked, yielded
                           * or finished) */
} weft_watchdog_report;

/* ------------------------------------------------------------------------
 * 15. Testing: fault injection
 *
 * What a program does when the system says no (out of memory, out of
 * descriptors, a connection reset, a short write) is the code least often
 * run before production runs it. A fault plan in weft_config makes the
 * calls weft makes on the program's behalf fail, at sites named below, as
 * FoundationDB's BUGGIFY does: each public call then returns the error it
 * documents, nothing leaks, and the runtime goes on working. Two modes,
 * which may be combined:
 * - counter: the nth pass through one site fails (for a unit test, and to
 *   replay one fault found by a sweep);
 * - random: the run first draws which sites are active (from the seed),
 *   then each pass through an active site fails with a chance, with an
 *   errno drawn from the site's realistic ones. With one worker and a
 *   seed (weft_config.seed), a run is a function of its seed.
 * The sites are compiled in with the CMake option WEFT_FAULTS (on in
 * Debug builds, so in the sanitizer builds; off in Release, where each
 * site is nothing at all). Compiled in without a plan, a site costs a
 * relaxed load and a branch.
 * ---------------------------------------------------------------------- */

/* Where weft calls the system or allocates. Each says the errno values a
 * fault there takes (a random fault draws one; a counter fault takes the
 * plan's, or the first). */
typedef enum weft_fault_site {
    /* weft's own allocations (tasks' bookkeeping, channels, scopes,
     * actors...): ENOMEM. */
    WEFT_FAULT_ALLOC = 0,
    /* mapping a task's stack: ENOMEM. */
    WEFT_FAULT_STACK = 1,
    /* pthread_create (workers, the blocking pool, the watchdog, the
     * signal thread): EAGAIN. */
    WEFT_FAULT_THREAD = 2,
    /* eventfd (a poller's wake, the shutdown signals): EMFILE, ENFILE. */
    WEFT_FAULT_EVENTFD = 3,
    /* making a worker's poller (epoll_create1, io_uring_setup): EMFILE,
     * ENOMEM. */
    WEFT_FAULT_POLLER = 4,
    /* registering a descriptor with epoll (epoll_ctl): ENOMEM, ENOSPC. */
    WEFT_FAULT_POLLER_CTL = 5,
    /* a poll of the worker's poller (epoll_wait, io_uring_enter): EINTR. */
    WEFT_FAULT_POLL = 6,
    /* socket(): EMFILE, ENFILE, ENOBUFS. */
    WEFT_FAULT_SOCKET = 7,
    /* accept4: EMFILE, ENFILE, ECONNABORTED, EINTR. */
    WEFT_FAULT_ACCEPT = 8,
    /* connect: ECONNREFUSED, ENETUNREACH, EADDRNOTAVAIL. */
    WEFT_FAULT_CONNECT = 9,
    /* read, recv, readv, recvfrom: ECONNRESET, EIO, EINTR, or a short
     * read (err 0 in the plan's counter mode: fewer bytes than there
     * were, at least one). */
    WEFT_FAULT_READ = 10,
    /* write, send, writev, sendmsg, sendto: ECONNRESET, EPIPE, EINTR, or
     * a short write (err 0: fewer bytes taken than offered, at least
     * one). */
    WEFT_FAULT_WRITE = 11,
    /* signalfd (weft_signal_wait, the shutdown signals): EMFILE, ENFILE. */
    WEFT_FAULT_SIGNALFD = 12,
    WEFT_FAULT_SITES = 13 /* how many */
} weft_fault_site;

/* A fault plan (weft_config.faults). Zero fields are "off". */
typedef struct weft_fault_plan {
    /* Counter mode: the nth pass (1-based) through `site` fails with
     * `err` (0: the site's first errno; for READ and WRITE, 0 is a short
     * transfer). nth 0: off. */
    weft_fault_site site;
    uint64_t nth;
    int err;
    /* Random mode: each site is active with this chance in thousandths
     * (FoundationDB activates about a quarter: 250), drawn once per run;
     * each pass through an active site fails with fail_permille. Both 0:
     * off. The draws come from seed; 0: the run's seed (weft_seed()),
     * and with neither, 1. */
    unsigned active_permille;
    unsigned fail_permille;
    uint64_t seed;
    /* Random mode with a rate per site (swarm testing draws these, and
     * its shrinking turns sites off one at a time): when any is
     * non-zero, site s is active if site_permille[s] is, and each pass
     * through it fails with that chance in thousandths; active_permille
     * and fail_permille are then not used. */
    unsigned site_permille[WEFT_FAULT_SITES];
} weft_fault_plan;

/* What the sites saw under the last plan (weft_fault_stats_get). */
typedef struct weft_fault_stats {
    uint64_t passes[WEFT_FAULT_SITES]; /* passes through each site */
    uint64_t fired[WEFT_FAULT_SITES];  /* faults made there */
    unsigned active;                   /* random mode: bit s set if site s
                                        * was active */
} weft_fault_stats;

/* Copies what the sites counted under the running plan, or the last one
 * (kept after weft_run returns, until the next run with a plan), into
 * *out. Returns 0, -EINVAL (out NULL), -ENOTSUP (built without the
 * sites). Any thread; never blocks. */
WEFT_EXTERN int weft_fault_stats_get(weft_fault_stats *out);

/* A site's name ("alloc", "stack", "read", ...), or NULL for a number
 * that names none. Any thread; never blocks. */
WEFT_EXTERN const char *weft_fault_site_name(weft_fault_site site);

/* ------------------------------------------------------------------------
 * 16. Testing: swarm testing, replay, shrinking and coverage
 *
 * A sweep runs a test body (a function like weft_main's: the root task)
 * over many seeds, each in a runtime of its own with the virtual clock.
 * Each seed first draws its own profile (swarm testing, as TigerBeetle's
 * VOPR does): which fault sites are active and how often each fails, so
 * that across a sweep some runs see one kind of fault often and others
 * see none. A run fails when the body returns non-zero, weft_run fails
 * once the body has started (a deadlock: -EDEADLK), or a task of the run
 * calls weft_swarm_fail. On a failure the sweep prints the seed and the
 * one command that replays it (WEFT_SEED=<seed> ./prog name: a program
 * whose sweep finds WEFT_SEED set runs that seed alone, with the same
 * profile, and WEFT_TRACE=file.json gives its trace), then shrinks its
 * fault set: it reruns the seed with the active sites, and in a simulated
 * run the network's fault classes (loss, dup, reorder, reset, partition),
 * switched off one at a time and keeps the smallest set that still
 * fails, printed with its own replay command
 * (WEFT_SWARM_SITES=read,write,reset). Half the seeds also
 * explore the schedule (PCT, see weft_swarm_profile.explore), which
 * brings up interleavings that uniform random picks almost never take.
 *
 * A run is a function of its seed when it runs on one seeded worker (the
 * default profile). The determinism check runs a seed twice and compares
 * what the two runs decided, event by event (each task resumed, at which
 * virtual instant; each fault made), and names the first event where
 * they part: a body that reads the real clock, keeps state across runs
 * or races plain threads shows there. A sweep reports which sites fired,
 * and fails if one the options require never did; weft_sim_sometimes
 * does the same for the body's own paths (Antithesis' "sometimes").
 *
 * One sweep at a time in a process (the fault plan, the run log and the
 * schedule exploration are process-wide: a seeded runtime started on
 * another thread during a sweep's run would share them).
 * Built without the fault sites (WEFT_FAULTS=OFF, the Release default) a
 * sweep runs its seeds without faults, and says so.
 * ---------------------------------------------------------------------- */

/* The bit of the simulated network's fault class c (weft_sim_fault,
 * section 17) in a swarm's masks of sites (weft_swarm_profile.sites,
 * weft_swarm_stats.failed_sites and shrunk_sites, weft_swarm_opts.sites,
 * weft_swarm_replay's sites), above the fault sites' bits. */
#define WEFT_SWARM_NET(c) (1u << (16 + (unsigned)(c)))
#define WEFT_SWARM_NET_ALL (((1u << 5) - 1) << 16)

/* What a seed draws before its run (weft_swarm_profile_get). */
typedef struct weft_swarm_profile {
    uint64_t seed; /* the run's weft_config.seed (WEFT_SEED to replay) */
    /* Workers: 1, unless weft_swarm_opts.max_workers allows more; a run
     * with more than one is not a function of its seed (deterministic
     * 0): its replay may take another path, and the determinism check
     * skips it. */
    int workers;
    int deterministic;
    /* The fault plan: site_permille holds each active site's rate (none
     * active: no faults this run). */
    weft_fault_plan faults;
    /* Bit 1u << site for each active site, and, in a simulated run
     * (weft_config.sim, or WEFT_SIM=1), WEFT_SWARM_NET(c) for each of the
     * network's fault classes that is on: every class the run's
     * weft_sim_opts gives a chance (loss, dup, reorder, reset) and
     * partition (the verbs), until shrinking switches one off. */
    unsigned sites;
    /* Schedule exploration on the seeded worker (PCT's random priorities
     * with change points): 0, each pick takes a ready task uniformly at
     * random; s (2 to 8), it takes the ready task of highest priority,
     * and at each pick, with a chance of 1 in 2^s, every task's priority
     * is drawn again, so that a task may be held back for many steps,
     * and rare interleavings come up in few seeds. */
    unsigned explore;
} weft_swarm_profile;

/* Options of a sweep; zero fields are the defaults. */
typedef struct weft_swarm_opts {
    /* Printed in reports. NULL: "swarm". */
    const char *name;
    /* The command that runs this sweep again, printed after
     * WEFT_SEED=<seed> in a replay line. NULL: this process's command
     * line, as /proc/self/cmdline has it. */
    const char *command;
    /* Seeds first_seed .. first_seed + seeds - 1. 0: 1, and 100 seeds.
     * The environment variable WEFT_SWARM_SEEDS, a number, replaces
     * seeds. */
    uint64_t first_seed;
    uint64_t seeds;
    /* Most workers a profile draws (1 to 4, uniformly). 0 or 1: one. */
    int max_workers;
    /* Sites a profile may make active (bit 1u << site). 0: every site.
     * With WEFT_SWARM_NET bits, the network's classes a simulated run
     * may have on (none of them: every class). */
    unsigned sites;
    /* Schedule exploration (weft_swarm_profile.explore): 0, half the
     * seeds draw it; 1, every seed; -1, none. */
    int explore;
    /* An active site's rate is drawn from 1 to this many thousandths
     * (log-uniformly: most runs see rare faults, some see many). 0: 50. */
    unsigned max_permille;
    /* Sites that must fire at least once over the sweep: each one that
     * never did is a failure of the sweep. */
    unsigned must_fire;
    /* Runs every check_every-th seed twice (the first seed included) and
     * compares the two runs' logs; a difference is a failure. 0: none. */
    int check_every;
    /* Non-zero: a failing seed's fault set is shrunk. */
    int shrink;
    /* The sweep stops after this many failing seeds. 0: 1. */
    int max_failures;
    /* Non-zero: a weft_sim_sometimes name whose condition was never true
     * is a failure of the sweep. */
    int require_sometimes;
    /* Non-NULL: the first failing seed is run once more, with its trace
     * written here (weft_config.trace_path; WEFT_TRACE wins over it). */
    const char *trace_path;
    /* 0: a line per failure and a summary on stderr; 1: also a line per
     * seed; -1: failures only. */
    int verbose;
    /* The runtime's configuration for the other fields (stack size,
     * deadlock grace...); its workers, clock, seed, faults and trace_path
     * are the sweep's. NULL: the defaults. */
    const weft_config *config;
} weft_swarm_opts;

/* What a sweep found (weft_swarm_run). */
typedef struct weft_swarm_stats {
    uint64_t runs;              /* seeds run */
    uint64_t failed;            /* of them, failed */
    uint64_t not_started;       /* a fault stopped weft_run before the body
                                 * started (not a failure) */
    uint64_t checked;           /* seeds run twice by the determinism check */
    uint64_t nondeterministic;  /* of them, whose two runs parted */
    uint64_t first_failed_seed; /* 0: none */
    int first_status;           /* its status (body or weft_run) */
    unsigned failed_sites;      /* its active sites */
    unsigned shrunk_sites;      /* the smallest set found that still fails
                                 * (shrink on; 0: it fails with no fault) */
    int shrunk;                 /* 1: shrunk_sites is set */
    uint64_t active[WEFT_FAULT_SITES]; /* runs in which each site was active */
    uint64_t passes[WEFT_FAULT_SITES]; /* passes through each site */
    uint64_t fired[WEFT_FAULT_SITES];  /* faults made at each site */
    unsigned unfired;                  /* must_fire sites that never fired */
    int sometimes_never;               /* weft_sim_sometimes names never true */
    int faults;                        /* 1: built with the fault sites */
    int64_t elapsed_ns;                /* real time the sweep took */
} weft_swarm_stats;

/* What the determinism check saw in a run, one event (weft_swarm_diff). */
typedef enum weft_swarm_event_kind {
    WEFT_SWARM_EVENT_NONE = 0,   /* that run had ended */
    WEFT_SWARM_EVENT_RESUME = 1, /* a: the task's id (0: the root task),
                                  * b: the virtual time */
    WEFT_SWARM_EVENT_FAULT = 2,  /* a: the site, b: the pass at that site
                                  * << 8 | the errno (255: a short
                                  * transfer) */
} weft_swarm_event_kind;

typedef struct weft_swarm_event {
    weft_swarm_event_kind kind;
    uint64_t a, b;
    uint64_t hash; /* the log's hash up to and including this event */
} weft_swarm_event;

/* Two runs of one seed, compared (weft_swarm_check). */
typedef struct weft_swarm_diff {
    uint64_t events[2]; /* each run's events */
    uint64_t hash[2];   /* each run's hash over them all */
    /* The index of the first event that differs; -1: the runs agree. */
    int64_t first;
    weft_swarm_event at[2]; /* each run's event there */
    int status[2];          /* each run's status */
} weft_swarm_diff;

/* Runs body(arg) as the root task of a runtime for each seed the options
 * name (opts NULL: the defaults), each with its drawn profile, the
 * virtual clock and the seed; reports failures as the section's comment
 * says, and fills *out (may be NULL). With WEFT_SEED set in the
 * environment, runs that seed alone (a replay; WEFT_SWARM_SITES=a,b,...
 * replaces its active sites, "none" for none). Returns 0 if every seed
 * passed and every requirement held; else the count of problems found
 * (failing seeds, seeds whose runs parted, required sites that never
 * fired, sometimes-names never true); or -EINVAL (body NULL, options out
 * of range, WEFT_SWARM_SEEDS or WEFT_SWARM_SITES not understood), -EBUSY
 * (another sweep is running in this process, or weft_run refused: the
 * caller is a task, or another runtime holds the fault plan or the
 * simulation). Blocks the calling thread for the whole sweep; call it
 * from a plain thread (not a cancellation point: a task's call returns
 * -EBUSY and runs nothing). */
WEFT_EXTERN int weft_swarm_run(const weft_swarm_opts *opts, weft_fn body,
                               void *arg, weft_swarm_stats *out);

/* Fills *out with the profile seed draws under opts (NULL: the defaults):
 * the same every time. Returns 0, -EINVAL. Any thread; never blocks. */
WEFT_EXTERN int weft_swarm_profile_get(const weft_swarm_opts *opts,
                                       uint64_t seed, weft_swarm_profile *out);

/* Runs body(arg) once for seed with its profile, whose active sites are
 * replaced by sites when sites_set is non-zero; writes the run's trace
 * to trace_path (NULL: none). Returns the run's status: 0 passed, the
 * body's non-zero status, weft_run's error, or -EPROTO when a task
 * called weft_swarm_fail; -EINVAL, -EBUSY as weft_swarm_run. Blocks the
 * calling thread; call it from a plain thread (not a cancellation point,
 * as weft_swarm_run). */
WEFT_EXTERN int weft_swarm_replay(const weft_swarm_opts *opts, uint64_t seed,
                                  int sites_set, unsigned sites,
                                  const char *trace_path, weft_fn body,
                                  void *arg);

/* The determinism check: runs body(arg) twice for seed, logging what each
 * run decided from its seed, and compares the logs step by step into
 * *out (may be NULL). Returns 0 if the runs agree, 1 if they part
 * (out->first names the first event where), -EINVAL, -EBUSY, or
 * -ENOTSUP when seed's profile has more than one worker. Blocks the
 * calling thread; call it from a plain thread (not a cancellation point,
 * as weft_swarm_run). */
WEFT_EXTERN int weft_swarm_check(const weft_swarm_opts *opts, uint64_t seed,
                                 weft_fn body, void *arg, weft_swarm_diff *out);

/* Shrinks seed's fault set: reruns it with each active site (and, in a
 * simulated run, each of the network's fault classes) switched off in
 * turn, keeping a site off when the run still fails, and stores the
 * sites left in *sites. Returns 1 if seed fails (*sites then set), 0 if
 * it passes (nothing to shrink), -EINVAL, -EBUSY (as weft_swarm_run).
 * Blocks the calling thread; call it from a plain thread (not a
 * cancellation point, as weft_swarm_run). */
WEFT_EXTERN int weft_swarm_shrink(const weft_swarm_opts *opts, uint64_t seed,
                                  weft_fn body, void *arg, unsigned *sites);

/* The assertion hook: marks the run of the sweep in progress failed, with
 * what (a short text, copied; the first failure of a run is kept), and
 * returns; the body goes on as it would. Outside a sweep's run it writes
 * what to stderr. Any thread; never blocks. */
WEFT_EXTERN void weft_swarm_fail(const char *what);

/* A "sometimes" assertion: counts, under name (a string that outlives the
 * sweep, usually a literal), how often cond was true over the sweep; the
 * sweep reports each name, and with require_sometimes fails on a name
 * that was reached but never true. Returns cond, so it can sit in an if.
 * Outside a sweep it only returns cond. Any thread; never blocks. */
WEFT_EXTERN int weft_sim_sometimes(int cond, const char *name);

/* ------------------------------------------------------------------------
 * 17. Testing: simulation
 *
 * A whole program, with its network, in virtual time and from one seed
 * (FoundationDB's simulator, TigerBeetle's VOPR, madsim, Tokio's
 * turmoil): weft_config.sim, or WEFT_SIM=1 in the environment of an
 * unchanged program. What it changes:
 * - time is the virtual clock, and nothing reads real time: it moves only
 *   when every task waits, straight to the next timer or packet;
 * - one worker, seeded (weft_config.seed or WEFT_SEED; with neither, a
 *   seed is drawn and printed on stderr, so the run can be replayed): the
 *   order in which ready tasks run, select's choices, weft__rand and
 *   weft_backoff's jitter, and every draw of the network come from it;
 * - weft_tcp_listen, weft_tcp_connect, weft_accept, weft_read,
 *   weft_write, weft_shutdown, weft_close, weft_udp_bind, weft_sendto,
 *   weft_recvfrom, weft_unix_listen, weft_unix_connect,
 *   weft_unix_dgram_bind (and their _addr, v and exact forms, and
 *   weft_fd_wait and select's descriptor cases on these sockets) reach an
 *   in-memory network of simulated hosts instead of the kernel: host n
 *   has the address 10.0.0.n and its name resolves to it; 127.0.0.1 and
 *   the wildcard are the calling host (a listener on 127.0.0.1 is reached
 *   at its host's address too). Streams behave as TCP does to the
 *   program: EOF after the peer's shutdown or close, ECONNREFUSED when
 *   nothing listens, ECONNRESET after a reset (a close with unread data,
 *   a crashed host back up, or the network's seeded resets); a crash
 *   leaves its peers' connections half-open (their reads wait, their
 *   writes are retransmitted until the host answers with a reset, or
 *   time out). Each packet takes the latency plus a jitter drawn from the
 *   seed; a stream's bytes arrive in order and are never lost (TCP
 *   retransmits across a partition); datagrams may be lost, duplicated
 *   or held back (loss_permille, dup_permille, reorder_permille). A send
 *   never waits (no window). Unix sockets are paths on the host that
 *   makes them, reached at once (no network). Not simulated: IPv6
 *   (making a socket fails with -EAFNOSUPPORT), signals and descriptors
 *   weft did not make (a wait on one fails with -ENOTSUP);
 * - weft_blocking calls run inline on the worker, at the virtual instant
 *   they are made (no thread, no real time): a call cannot be abandoned,
 *   and a deadline or cancel is only seen before it starts;
 * - every network event and scheduling decision is appended, with its
 *   virtual time, to an event log whose 64-bit hash a test compares:
 *   the same seed gives the same log, byte for byte.
 * Not simulated: memory, real files, real threads a program starts.
 * weft_sim_* calls are made by tasks of the simulated runtime (-ENOTSUP
 * in another runtime, -EPERM outside a task) and never block.
 * ---------------------------------------------------------------------- */

/* weft_config.sim. Zero fields are the defaults. */
typedef struct weft_sim_opts {
    /* One-way latency of each packet, ns. 0: 1 ms. Negative: -EINVAL. */
    int64_t latency_ns;
    /* Each packet's latency gets a jitter drawn uniformly from [0,
     * jitter_ns] (a stream's bytes still arrive in order). 0: 1 ms;
     * negative: none. */
    int64_t jitter_ns;
    /* Chance in thousandths that a stream segment resets its connection
     * (both ends see ECONNRESET) instead of arriving. 0: never. */
    unsigned reset_permille;
    /* Chance in thousandths that a datagram is lost. 0: never. */
    unsigned loss_permille;
    /* Chance in thousandths that a datagram arrives twice (the copy with
     * a latency of its own, so it may come first). 0: never. */
    unsigned dup_permille;
    /* Chance in thousandths that a datagram is held back: its latency
     * grows by 1 to 10 latencies more, so that datagrams sent after it
     * overtake it (jitter alone reorders only within jitter_ns). A
     * stream's bytes stay in order. 0: never. */
    unsigned reorder_permille;
    /* Bytes of the event log's text kept for weft_sim_log_write (the hash
     * covers every event). 0: 4 MiB. */
    size_t log_max;
} weft_sim_opts;

/* The simulated network's seeded faults, as classes that swarm
 * testing's shrinking switches off one at a time (section 16; named in
 * WEFT_SWARM_SITES by weft_sim_fault_name: "loss", "dup", "reorder",
 * "reset", "partition"). A class switched off still draws from the seed
 * (the other classes' draws stay where they were) but does nothing;
 * partition's covers weft_sim_partition and weft_sim_hold (and their
 * repair and release). */
typedef enum weft_sim_fault {
    WEFT_SIM_LOSS = 0,      /* loss_permille */
    WEFT_SIM_DUP = 1,       /* dup_permille */
    WEFT_SIM_REORDER = 2,   /* reorder_permille */
    WEFT_SIM_RESET = 3,     /* reset_permille */
    WEFT_SIM_PARTITION = 4, /* the verbs that cut or hold a link */
    WEFT_SIM_FAULTS = 5     /* how many */
} weft_sim_fault;

/* The name of class c ("loss", ...), or NULL if it is out of range. Any
 * thread; never blocks. */
WEFT_EXTERN const char *weft_sim_fault_name(weft_sim_fault c);

/* A simulated host: an address, its sockets and its tasks. */
typedef struct weft_sim_host weft_sim_host;

/* Makes *out, a host named name (copied; it resolves to the host's address),
 * with the next address: 10.0.0.2, 10.0.0.3, ... (10.0.0.1, named
 * "main", is the host of every task that runs on no host). Its tasks are
 * started by weft_sim_host_start. Sets *out and returns 0, or -EINVAL
 * (name NULL, empty or taken), -ENOSPC (64 hosts already), -ENOMEM,
 * -ENOTSUP, -EPERM. The host lives until the run ends. */
WEFT_EXTERN int weft_sim_host_new(weft_sim_host **out, const char *name);

/* The host of the calling task: the one whose root scope it runs in, or
 * "main". NULL outside a simulated runtime's task. */
WEFT_EXTERN weft_sim_host *weft_sim_host_self(void);

/* Writes h's address ("10.0.0.2") into buf of size n (at least 16).
 * Returns 0, -EINVAL. Any thread. */
WEFT_EXTERN int weft_sim_host_addr(const weft_sim_host *h, char *buf, size_t n);

/* Boots host h: spawns into the caller's current scope a task that opens
 * the host's root scope and runs fn(arg) in it; every task spawned under
 * it runs on h (its sockets have h's address). The boot task ends when
 * that scope has joined (fn and its tasks have returned, or the host
 * crashed and they have all ended); it returns fn's status, or 0 after a
 * crash. Returns 0, -EBUSY (h is running), -EINVAL, or weft_spawn's
 * error. */
WEFT_EXTERN int weft_sim_host_start(weft_sim_host *h, weft_fn fn, void *arg);

/* Crashes h: its root scope is cancelled (every task on it gets
 * -ECANCELED from its blocking calls and ends), its sockets are dropped
 * at once (its listeners' ports and Unix paths are free again; what is in
 * flight to it finds nothing), and until it is restarted datagrams and
 * connection attempts to it are lost (a connect to it waits for its
 * deadline). Its connections' peers are not told (half-open, as TCP's):
 * their reads wait, and a segment they send is retransmitted until the
 * host is back and resets the connection (-ECONNRESET), or, after eight
 * retransmissions from 200 ms apart, doubling (about 51 s), times out
 * (-ETIMEDOUT). Returns 0, -ESRCH (h is not running), -EINVAL (NULL or
 * "main"). */
WEFT_EXTERN int weft_sim_host_crash(weft_sim_host *h);

/* Boots a crashed host again with the fn and arg of its last start, as
 * weft_sim_host_start does, into the scope that was current at that start
 * (which must still be open), whoever calls it (turmoil's bounce is crash
 * then restart).
 * Returns 0, -EBUSY (it runs), -EINVAL (never started). */
WEFT_EXTERN int weft_sim_host_restart(weft_sim_host *h);

/* The network's verbs, on the link between hosts a and b (both ways;
 * NULL is "main"). partition: packets that reach the link are lost
 * (datagrams, connection attempts) or, a stream's, parked until repair
 * (TCP retransmits them); repair: delivers the parked ones and lets
 * traffic through. hold: everything that reaches the link, in flight now
 * or sent later, is parked, in order; release: delivers it. Each returns
 * 0 or -EINVAL (a == b, or not hosts). */
WEFT_EXTERN int weft_sim_partition(weft_sim_host *a, weft_sim_host *b);
WEFT_EXTERN int weft_sim_repair(weft_sim_host *a, weft_sim_host *b);
WEFT_EXTERN int weft_sim_hold(weft_sim_host *a, weft_sim_host *b);
WEFT_EXTERN int weft_sim_release(weft_sim_host *a, weft_sim_host *b);

/* Appends a line of the program's own to the event log (a test's marks:
 * "request 3 answered"). Returns 0, -EINVAL, -ENOTSUP, -EPERM. */
WEFT_EXTERN int weft_sim_log(const char *text);

/* The running 64-bit hash (FNV-1a) of the event log: of the simulated
 * run in progress when called from its task, else of the last one that
 * ended (0 if none). Any thread; never blocks. */
WEFT_EXTERN uint64_t weft_sim_log_hash(void);

/* Writes the event log's text (as weft_sim_log_hash chooses the run) to
 * fd: one event a line, its virtual time in ns first. The text kept is
 * at most weft_sim_opts.log_max bytes; a last line says if more was cut.
 * Returns 0 or a negative errno of write(2). From a task of the simulated
 * run, or from any thread once no simulated run is going on; blocks in
 * write(2), a task's worker with it (not a cancellation point: a cancel
 * cannot cut the text short). */
WEFT_EXTERN int weft_sim_log_write(int fd);

/* ------------------------------------------------------------------------
 * Deprecated names (0.2), removed in 0.4
 *
 * weft 0.3 names its API by one set of rules (docs/api-conventions.md).
 * The 0.2 names below still compile, each with a warning
 * (-Wdeprecated-declarations) that names its replacement; CHANGELOG.md
 * has the table. Define WEFT_NO_DEPRECATED before including weft.h to
 * hide them (and so check that a program no longer uses them).
 * ---------------------------------------------------------------------- */
#ifndef WEFT_NO_DEPRECATED

#if defined(__GNUC__) || defined(__clang__)
#define WEFT_DEPRECATED(use) __attribute__((deprecated("use " use)))
#else
#define WEFT_DEPRECATED(use)
#endif

WEFT_DEPRECATED("weft_mutex_try_lock")
static inline int weft_mutex_trylock(weft_mutex *m)
{
    return weft_mutex_try_lock(m);
}
WEFT_DEPRECATED("weft_rwlock_try_rdlock")
static inline int weft_rwlock_tryrdlock(weft_rwlock *l)
{
    return weft_rwlock_try_rdlock(l);
}
WEFT_DEPRECATED("weft_rwlock_try_wrlock")
static inline int weft_rwlock_trywrlock(weft_rwlock *l)
{
    return weft_rwlock_try_wrlock(l);
}
WEFT_DEPRECATED("weft_future_try_await")
static inline int weft_future_try(const weft_future *f, void *out)
{
    return weft_future_try_await(f, out);
}
WEFT_DEPRECATED("weft_limiter_try_acquire")
static inline int weft_limiter_try(weft_limiter *l, int64_t n)
{
    return weft_limiter_try_acquire(l, n);
}
WEFT_DEPRECATED("weft_sleep_for")
static inline int weft_sleep(int64_t ns)
{
    return weft_sleep_for(ns);
}
WEFT_DEPRECATED("weft_task_detach")
static inline int weft_task_release(weft_task_handle h)
{
    return weft_task_detach(h);
}
WEFT_DEPRECATED("weft_once_is_done")
static inline int weft_once_done(weft_once *o)
{
    return weft_once_is_done(o);
}
WEFT_DEPRECATED("weft_shutdown_set_deadline")
static inline int weft_shutdown_deadline(weft_time deadline)
{
    return weft_shutdown_set_deadline(deadline);
}
WEFT_DEPRECATED("weft_blocking_stats_get")
static inline int weft_blocking_stats(weft_blocking_info *out)
{
    return weft_blocking_stats_get(out);
}
WEFT_DEPRECATED("weft_actor_join_until (or weft_actor_join)")
static inline int weft_actor_wait(weft_actor *a, int *status,
                                  weft_time deadline)
{
    return weft_actor_join_until(a, status, deadline);
}
WEFT_DEPRECATED("weft_sup_join_until (or weft_sup_join)")
static inline int weft_sup_wait(weft_sup *s, int *status, weft_time deadline)
{
    return weft_sup_join_until(s, status, deadline);
}
WEFT_DEPRECATED("weft_sup_stats_get")
static inline int weft_sup_counts(weft_sup *s, int *running, long *restarts)
{
    weft_sup_stats st;
    int rc = weft_sup_stats_get(s, &st);
    if (rc == 0 && running)
        *running = st.running;
    if (rc == 0 && restarts)
        *restarts = st.restarts;
    return rc;
}
/* Parameters in a new order: the timeout or the deadline goes last. */
WEFT_DEPRECATED("weft_call_for(fn, arg, timeout_ns)")
static inline int weft_with_timeout(int64_t timeout_ns, weft_fn fn, void *arg)
{
    return weft_call_for(fn, arg, timeout_ns);
}
WEFT_DEPRECATED("weft_call_fallback_for(fn, arg, fallback, fallback_arg, "
                "timeout_ns)")
static inline int weft_with_fallback(int64_t timeout_ns, weft_fn fn, void *arg,
                                     weft_fn fallback, void *fallback_arg)
{
    return weft_call_fallback_for(fn, arg, fallback, fallback_arg, timeout_ns);
}
WEFT_DEPRECATED("weft_gather_tasks(policy, n, fns, args, statuses, winner, "
                "deadline)")
static inline int weft_gather(weft_policy policy, weft_time deadline, int n,
                              const weft_fn *fns, void *const *args,
                              int *statuses, int *winner)
{
    return weft_gather_tasks(policy, n, fns, args, statuses, winner, deadline);
}
WEFT_DEPRECATED("weft_map_tasks(n, limit, fn, items, item_size, policy, "
                "statuses, deadline)")
static inline int weft_map(size_t n, int limit, weft_fn fn, void *items,
                           size_t item_size, weft_policy policy,
                           weft_time deadline, int *statuses)
{
    return weft_map_tasks(n, limit, fn, items, item_size, policy, statuses,
                          deadline);
}

#endif /* WEFT_NO_DEPRECATED */

#ifdef __cplusplus
}
#endif
#endif /* WEFT_H */
