/* SPDX-License-Identifier: MIT */
/*
 * The runtime's life, and its public entry points: run, main, shutdown,
 * dump, stats and the worker queries. The thin wrappers of the lower
 * layers live with the layer that implements them (weft_now in clock.c,
 * weft_yield in sched.c, weft_sleep_for in wait.c, ...), so that no lower
 * layer calls up into this file (scripts/layers.sh checks the calls).
 *
 * weft_run, step by step:
 *   1. check the configuration; allocate the runtime, its workers (worker 0
 *      is the calling thread) and the slot pool;
 *   2. spawn the root task into the root scope, on worker 0;
 *   3. start workers 1..n-1 and run worker 0's loop on this thread;
 *   4. when the root scope's last task finishes, it sets `done` and wakes
 *      every worker; each leaves its loop;
 *   5. join the threads, wait for plain threads still inside a wake of
 *      a task that has since finished (weft__worker_quiesce: they touch
 *      the worker after making the task runnable), unmap every stack,
 *      return the root task's status.
 * Nothing outlives weft_run: a task cannot, since every task is inside the
 * root scope, and the root scope is empty before step 4; the one
 * exception, the shutdown keeper below, is freed in step 5. But a run the
 * deadlock detector gave up on ends with tasks still parked, and then
 * nothing a late wake could touch is freed (runtime_end, below).
 *
 * Shutdown, step by step (the Go shape: signal.NotifyContext, then
 * http.Server.Shutdown(ctx)). A request (weft_shutdown_request from any
 * thread, weft_shutdown_set_deadline, or weft_main's first SIGINT/SIGTERM),
 * once per runtime:
 *   1. stores the drain deadline, request + shutdown_drain_ns, unless a
 *      task has given one (weft_shutdown_set_deadline: a task's deadline
 *      always wins over the configured one, and the latest call wins). It
 *      is the root scope's deadline, so weft_deadline() reports it;
 *   2. hands a deadline still to come to the keeper, a task on worker 0
 *      parked on the timer wheel until then (a virtual clock jumps to it),
 *      which then cancels the root scope. A task that moves the deadline
 *      wakes the keeper to look again;
 *   3. sets `requested` and closes the shutdown channel: weft_shutdown_wait
 *      returns, receives from weft_shutdown_chan() return -EPIPE, so
 *      intake stops and closes its own channels while the rest of the
 *      program drains;
 *   4. a deadline come already (drain 0, the default) cancels the root
 *      scope there and then, as weft_main always did: after step 3, so
 *      that a waiter sees the request even when the cancel comes at the
 *      same instant;
 *   5. a program that finishes before the deadline is never cancelled:
 *      the keeper lives outside the root scope and is freed at the end.
 * A runtime whose shutdown keeps no deadline pays for one channel: the
 * keeper is made by the first deadline that needs it. On a virtual clock
 * a plain thread's request is made by the keeper, a task: the clock stands
 * still while a task runs, not while a plain thread works.
 * weft_main adds a signal thread: SIGINT and SIGTERM are blocked in every
 * runtime thread and read from a signalfd. The first makes the request; a
 * second ends the process at once, and so does the grace period running
 * out once the root scope has been cancelled after a request. On the real
 * clock the thread also cancels the root scope at the drain deadline
 * itself, in case every worker is held by a task that never yields.
 * SIGQUIT, unless weft_config.sigquit_dump is negative, is read from the
 * same signalfd: the thread writes a task dump to stderr (never from an
 * asynchronous handler: the dump takes locks and allocates), and the
 * program goes on.
 */
#include "runtime/runtime.h"
#include "actor/actor.h"
#include "io/io.h"
#include "observe/observe.h"
#include "sched/scheduler.h"
#include "scope/struct.h"
#include "sim/sim.h"
#include "util/fault.h"
#include "wait/wake.h"

#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <unistd.h>
#if defined(WEFT_ASAN)
#include <sanitizer/lsan_interface.h>
#endif

#define DEFAULT_STACK (WEFT__SAN_STACK_SCALE * 64 * 1024)
#define MAX_WORKERS 1024
#define ALTSTACK_SIZE (64 * 1024)

/* ---- thread setup ---- */

/* pin_workers: the worker's CPU is the (id mod n)-th of the n the runtime
 * may use. */
static void pin(weft_worker *w)
{
    const cpu_set_t *all = &w->rt->cpus;
    int k = w->id % CPU_COUNT(all);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, all) && k-- == 0) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            pthread_setaffinity_np(pthread_self(), sizeof one, &one);
            return;
        }
    }
}

static void thread_enter(weft_worker *w)
{
    weft__tl_worker = w;
    if (w->rt->pinned)
        pin(w);
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        pthread_attr_getstack(&attr, &w->stack_lo, &w->stack_size);
        pthread_attr_destroy(&attr);
    }
#if defined(WEFT_TSAN)
    w->tsan_fiber = __tsan_get_current_fiber();
#endif
    w->altstack = weft__malloc(ALTSTACK_SIZE);
    if (w->altstack) {
        stack_t ss = {.ss_sp = w->altstack, .ss_size = ALTSTACK_SIZE};
        sigaltstack(&ss, NULL);
    }
}

/* weft_on_worker_exit's records. */
struct weft__exit_hook {
    struct weft__exit_hook *next;
    void (*fn)(void *);
    void *arg;
};

/* Runs w's exit hooks, newest first, on its thread, after its last task:
 * still a worker (weft_worker_id, weft_close work), in no task. */
static void run_exit_hooks(weft_worker *w)
{
    struct weft__exit_hook *h;
    while ((h = w->exit_hooks) != NULL) {
        w->exit_hooks = h->next;
        h->fn(h->arg);
        free(h);
    }
}

static void thread_leave(weft_worker *w)
{
    run_exit_hooks(w);
    if (w->altstack) {
        stack_t ss = {.ss_flags = SS_DISABLE};
        sigaltstack(&ss, NULL);
        free(w->altstack);
        w->altstack = NULL;
    }
    weft__tl_worker = NULL;
}

/* Held by start_workers while it starts a runtime's threads: a started
 * worker waits here until the count of workers the run goes on with is
 * final (start_workers lowers it when a thread cannot be made). Shared by
 * every runtime: they start one at a time, which takes microseconds. */
static pthread_mutex_t starting = PTHREAD_MUTEX_INITIALIZER;

void *weft__worker_thread(void *arg)
{
    weft_worker *w = arg;
    pthread_mutex_lock(&starting);
    pthread_mutex_unlock(&starting);
    thread_enter(w);
    weft__worker_loop(w);
    thread_leave(w);
    return NULL;
}

/* ---- weft_run ---- */

static int check_config(const weft_config *c)
{
    if (c->workers < 0 || c->workers > MAX_WORKERS)
        return -EINVAL;
    if (c->stack_size > WEFT__MAX_STACK)
        return -EINVAL;
    if (c->clock != WEFT_CLOCK_MONOTONIC && c->clock != WEFT_CLOCK_VIRTUAL)
        return -EINVAL;
    if (c->shutdown_grace_ns < 0 || c->shutdown_drain_ns < 0 ||
        c->autojump_ns < 0)
        return -EINVAL;
    if ((unsigned)c->poller > WEFT_POLLER_IO_URING)
        return -EINVAL;
    if (c->blocking_threads < 0 || c->blocking_queue < 0)
        return -EINVAL;
    if ((unsigned)c->deadlock > WEFT_DEADLOCK_IGNORE ||
        (c->deadlock == WEFT_DEADLOCK_CALLBACK && !c->on_deadlock) ||
        c->deadlock_grace_ns < 0)
        return -EINVAL;
    return weft__watchdog_check(c);
}

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n > MAX_WORKERS ? MAX_WORKERS : n) : 1;
}

/* The seed: WEFT_SEED if set, else the config's. A WEFT_SEED that is not
 * a whole number from 0 to 2^64 - 1 (decimal, 0x hex or 0 octal, as
 * strtoull reads it with base 0, but no sign, no blanks, nothing after
 * it) is refused with a message: a run meant to reproduce a failure must
 * not quietly run unseeded. */
static int seed_from_env(uint64_t cfg_seed, uint64_t *seed)
{
    const char *s = getenv("WEFT_SEED");
    if (!s) {
        *seed = cfg_seed;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = 0;
    if (*s >= '0' && *s <= '9')
        v = strtoull(s, &end, 0);
    if (!end || end == s || *end != '\0' || errno == ERANGE) {
        fprintf(stderr,
                "weft: WEFT_SEED=\"%s\" is not a seed (a number from 0 to "
                "18446744073709551615: decimal, 0x hex or 0 octal); not "
                "running\n",
                s);
        return -EINVAL;
    }
    *seed = (uint64_t)v;
    return 0;
}

/* The poller: WEFT_POLLER if set and not empty, else the config's; never
 * WEFT_POLLER_DEFAULT. A WEFT_POLLER that names no poller is refused with
 * a message, as a bad WEFT_SEED is. */
static int poller_from_env(weft_poller_kind cfg_poller, int *poller)
{
    const char *s = getenv("WEFT_POLLER");
    *poller = cfg_poller == WEFT_POLLER_IO_URING ? WEFT_POLLER_IO_URING
                                                 : WEFT_POLLER_EPOLL;
    if (!s || !*s)
        return 0;
    if (strcmp(s, "epoll") == 0) {
        *poller = WEFT_POLLER_EPOLL;
    } else if (strcmp(s, "io_uring") == 0 || strcmp(s, "uring") == 0) {
        *poller = WEFT_POLLER_IO_URING;
    } else {
        fprintf(stderr,
                "weft: WEFT_POLLER=\"%s\" is not a poller (epoll, io_uring "
                "or uring); not running\n",
                s);
        return -EINVAL;
    }
    return 0;
}

/* ---- simulation: the config a simulated run uses ---- */

/* WEFT_SIM: "1" on, "0" or empty off, unset: the config decides. Anything
 * else is refused with a message, as a bad WEFT_SEED is. */
static int sim_from_env(const weft_config *c, bool *on)
{
    const char *s = getenv("WEFT_SIM");
    *on = c->sim != NULL;
    if (!s)
        return 0;
    if (strcmp(s, "1") == 0 || strcmp(s, "0") == 0 || !*s) {
        *on = *on || strcmp(s, "1") == 0;
        return 0;
    }
    fprintf(stderr, "weft: WEFT_SIM=\"%s\" is not 0 or 1; not running\n", s);
    return -EINVAL;
}

/* A seed for a simulated run that was given none, printed so that the run
 * can be replayed (TigerBeetle's VOPR prints its seed the same way). */
static uint64_t sim_draw_seed(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
        v = (uint64_t)(uintptr_t)&v * 0x9E3779B97F4A7C15ull;
    v = v ? v : 1;
    fprintf(stderr,
            "weft: simulation seed %llu (WEFT_SEED=%llu replays this run)\n",
            (unsigned long long)v, (unsigned long long)v);
    return v;
}

/* If the run is simulated (weft.h, section 16): *out is c with the
 * virtual clock, one worker, no watcher of real time, a seed (drawn if
 * none is given) and its sim options set, and *on is true. 0 or -EINVAL
 * (a bad WEFT_SIM or WEFT_SEED). */
static int sim_config(const weft_config *c, weft_config *out, bool *on)
{
    static const weft_sim_opts defaults;
    int rc = sim_from_env(c, on);
    uint64_t seed;
    if (rc || !*on || (rc = seed_from_env(c->seed, &seed)) != 0)
        return rc;
    *out = *c;
    out->sim = c->sim ? c->sim : &defaults;
    out->seed = seed ? seed : sim_draw_seed();
    out->clock = WEFT_CLOCK_VIRTUAL;
    out->workers = 1;
    out->pin_workers = 0;
    out->watchdog_ns = WEFT_NEVER;
    out->slow_slice_ns = WEFT_NEVER;
    return 0;
}

/* The run's seed: WEFT_SEED's, else the config's; a simulated run's is
 * never 0 (sim_config drew one if WEFT_SEED=0). */
static int run_seed(const weft_config *c, uint64_t *seed)
{
    int rc = seed_from_env(c->seed, seed);
    if (rc == 0 && *seed == 0 && c->sim)
        *seed = c->seed;
    return rc;
}

static void shutdown_fini(weft_runtime *rt);

/* rt's root scope (the scope layer's part of rt). */
static inline weft_scope *root_of(weft_runtime *rt)
{
    return weft__scope_rt(rt)->root;
}

/* rt's shutdown request (the runtime layer's part of rt). */
static inline weft__shutdown *shut_of(weft_runtime *rt)
{
    return weft__runtime_rt(rt)->shut;
}

static void runtime_free(weft_runtime *rt)
{
    if (rt->sim)
        weft__sim_end(rt);
    weft__blocking_fini(rt);
    shutdown_fini(rt);
    if (rt->workers) {
        for (int i = 0; i < rt->nworkers; i++)
            weft__worker_fini(&rt->workers[i]);
        free(rt->workers);
    }
    weft__pool_fini(&rt->pool);
    weft__scope_free_orphans(rt);
    weft__registry_fini(weft__actor_rt(rt)->registry);
    weft__deadlock_fini(rt);
    weft__trace_free(weft__observe_rt(rt)->trace);
    weft__watchdog_free(rt);
    free(weft__scope_rt(rt)->root);
    pthread_mutex_destroy(&rt->vmu);
    pthread_mutex_destroy(&rt->dmu);
    pthread_mutex_destroy(&weft__scope_rt(rt)->orphan_mu);
    pthread_mutex_destroy(&weft__io_rt(rt)->blocking_mu);
    free(rt);
}

/* The fields of a new runtime that c and the seed decide, and its locks:
 * nothing here can fail. */
static void runtime_settle(weft_runtime *rt, const weft_config *c,
                           uint64_t seed)
{
    pthread_mutex_init(&rt->vmu, NULL);
    pthread_mutex_init(&rt->dmu, NULL);
    pthread_mutex_init(&weft__scope_rt(rt)->orphan_mu, NULL);
    pthread_mutex_init(&weft__io_rt(rt)->blocking_mu, NULL);
    weft__io_rt(rt)->blocking_threads = c->blocking_threads;
    weft__io_rt(rt)->blocking_queue = c->blocking_queue;
    rt->pinned = c->pin_workers &&
                 pthread_getaffinity_np(pthread_self(), sizeof rt->cpus,
                                        &rt->cpus) == 0 &&
                 CPU_COUNT(&rt->cpus) > 0;
    rt->nworkers = c->workers ? c->workers : online_cpus();
    weft__clock_init(rt, c->clock, c->autojump_ns);
    rt->hooks = weft__scope_hooks;
    rt->seed = seed;
    rt->seeded = rt->seed != 0 && rt->nworkers == 1;
    rt->sim = c->sim != NULL; /* set by sim_config only with the rest */
    size_t stack = c->stack_size ? c->stack_size : DEFAULT_STACK;
    weft__pool_init(&rt->pool, stack);
}

static weft_runtime *runtime_new(const weft_config *c, int *err)
{
    uint64_t seed;
    int poller;
    if ((*err = run_seed(c, &seed)) != 0 ||
        (*err = poller_from_env(c->poller, &poller)) != 0)
        return NULL;
    /* The runtime and this layer's state in one allocation (the runtime
     * first: free(rt) frees both). */
    struct rt_box {
        weft_runtime rt;
        weft__shutdown shut;
        weft__registry registry;
    } *box = weft__calloc(1, sizeof(*box));
    if (!box) {
        *err = -ENOMEM;
        return NULL;
    }
    weft_runtime *rt = &box->rt;
    weft__runtime_rt(rt)->shut = &box->shut; /* shut_of(rt) from here on */
    weft__actor_rt(rt)->registry = &box->registry;
    runtime_settle(rt, c, seed);
    weft__io_rt(rt)->poller = poller;
    /* The instrument, before the workers (each keeps a copy). */
    rt->instr = c->instrument;
    const char *trace = weft__trace_path(c);
    if (trace) {
        if (!(weft__observe_rt(rt)->trace =
                  weft__trace_new(rt, trace, c->instrument, err))) {
            runtime_free(rt);
            return NULL;
        }
        rt->instr = weft__trace_instrument(weft__observe_rt(rt)->trace);
    }
    weft__scope_rt(rt)->root = weft__malloc(sizeof(*weft__scope_rt(rt)->root));
    rt->workers = weft__aligned_alloc(WEFT_CACHELINE, (size_t)rt->nworkers *
                                                          sizeof(weft_worker));
    if (!weft__scope_rt(rt)->root || !rt->workers) {
        free(rt->workers); /* not set up: runtime_free must not end them */
        rt->workers = NULL;
        runtime_free(rt);
        *err = -ENOMEM;
        return NULL;
    }
    weft__scope_init_root(rt, weft__scope_rt(rt)->root);
    for (int i = 0; i < rt->nworkers; i++) {
        if ((*err = weft__worker_init(rt, &rt->workers[i], i)) != 0) {
            rt->nworkers = i + 1; /* runtime_free ends those */
            runtime_free(rt);
            return NULL;
        }
    }
    if ((*err = weft__deadlock_init(rt, c)) != 0) {
        runtime_free(rt);
        return NULL;
    }
    return rt;
}

static int spawn_root(weft_runtime *rt, weft_fn fn, void *arg, weft_task **root)
{
    weft_worker *w0 = &rt->workers[0];
    weft_task *t = weft__task_alloc(w0, 0);
    if (!t)
        return -ENOMEM;
    static const weft_spawn_opts root_opts = {.name = "root"};
    weft__task_prepare(t, fn, arg, &root_opts, __FILE__, __LINE__);
    st_rlx(&t->id, 1); /* weft_task_info.id: made by no worker */
    *root = t;
    weft__scope_task_init(t, NULL);
    weft__scope_add_child(weft__scope_rt(rt)->root, t, false);
    weft__stat_add(&w0->spawned, 1); /* counted as spawned (stats) */
    weft__make_ready(w0, t);         /* worker 0 starts it first */
    return 0;
}

/* hook (weft_main's, else NULL) is called with the runtime before any task
 * runs. It is an argument, not a global: a weft_run on another thread
 * meanwhile must not run weft_main's hook. */
typedef void (*run_hook_fn)(weft_runtime *rt, void *ctx);

static int shutdown_init(weft_runtime *rt, const weft_config *c);
static void running_add(weft_runtime *rt);
static void running_remove(weft_runtime *rt);

static weft_runtime *run_with(const weft_config *cfg, weft_fn fn, void *arg,
                              int *err, run_hook_fn hook, void *hook_ctx);

/* ---- runtimes that end with tasks asleep ----
 *
 * A run the deadlock detector gave up on ends with tasks still parked
 * (waits a cancel does not end, such as one inside a shielded scope), and
 * a plain thread may still wake one afterwards: a weft_event_set or a
 * weft_future_resolve the detector could not foresee. That wake takes the
 * task's wait record off the object (it lies on the task's stack), claims
 * the task, pushes it to its worker's inbox and notifies the worker, which
 * reads the runtime's clock. So such a runtime is not freed: it is kept
 * whole, for the life of the process, on the list below, and a task woken
 * late sits in the inbox of a worker that never runs again. Only the
 * blocking pool's threads are ended. The list is reachable from a static,
 * and in an ASan build the parked tasks' slots are made roots as well:
 * what they point to is kept, not leaked. */
static pthread_mutex_t retired_mu = PTHREAD_MUTEX_INITIALIZER;
static weft_runtime *retired; /* linked through shut->next_running */

/* Whether a task is left in s or a scope inside it. After the workers are
 * joined, so no lock (a late wake does not change the members). */
static bool tasks_left(const weft_scope *s)
{
    if (s->members)
        return true;
    for (const weft_scope *k = s->kids; k; k = k->sib_next)
        if (tasks_left(k))
            return true;
    return false;
}

#if defined(WEFT_ASAN)
/* LeakSanitizer does not look inside the slots (they are mapped, not
 * allocated): the parked tasks' stacks may hold the only pointer to
 * memory they keep. */
static void slots_are_roots(const weft_scope *s)
{
    for (const weft_task *t = s->members; t; t = weft__scope_of_task(t)->mnext)
        __lsan_register_root_region(t->slot_lo, t->slot_size);
    for (const weft_scope *k = s->kids; k; k = k->sib_next)
        slots_are_roots(k);
}
#endif

/* The end of weft_run and weft_main, once run_with has returned rt. */
static int runtime_end(weft_runtime *rt)
{
    int status =
        weft__deadlock_found(rt) ? -EDEADLK : weft__scope_rt(rt)->root_status;
    if (rt->sim) { /* its log and hash are kept; its network goes */
        weft__sim_end(rt);
        rt->sim = false;
    }
    if (!tasks_left(weft__scope_rt(rt)->root)) {
        runtime_free(rt);
        return status;
    }
    weft__blocking_fini(rt);
#if defined(WEFT_ASAN)
    slots_are_roots(weft__scope_rt(rt)->root);
#endif
    pthread_mutex_lock(&retired_mu);
    shut_of(rt)->next_running = retired;
    retired = rt;
    pthread_mutex_unlock(&retired_mu);
    return status;
}

int weft_run(const weft_config *cfg, weft_fn fn, void *arg)
{
    int err = 0;
    weft_runtime *rt = run_with(cfg, fn, arg, &err, NULL, NULL);
    if (!rt)
        return err;
    return runtime_end(rt);
}

/* Starts the threads of workers 1.. (worker 0 is the caller's); with
 * fewer than asked (pthread_create failed), runs with those. Returns how
 * many workers were set up. */
static int start_workers(weft_runtime *rt)
{
    int set_up = rt->nworkers;
    int started = 1;
    pthread_mutex_lock(&starting);
    for (; started < rt->nworkers; started++) {
        weft_worker *w = &rt->workers[started];
        if (weft__fault_fails(WEFT_FAULT_THREAD) ||
            pthread_create(&w->thread, NULL, weft__worker_thread, w) != 0)
            break;
    }
    /* The scheduling mode stays as set up: the root task is queued for
     * it already (a seeded run keeps its ready tasks elsewhere), so a run
     * left with one worker of several is not seeded. */
    if (started < rt->nworkers)
        rt->nworkers = started;
    pthread_mutex_unlock(&starting);
    return set_up;
}

/* After worker 0's loop: joins the other workers, waits out the wakes
 * of plain threads, and ends the workers set up but never started. */
static void stop_workers(weft_runtime *rt, int set_up)
{
    for (int i = 1; i < rt->nworkers; i++)
        pthread_join(rt->workers[i].thread, NULL);
    /* A plain thread may still be in the wake of a task that has run
     * since: wait for it before anything is freed (scheduler.h). */
    for (int i = 0; i < set_up; i++)
        weft__worker_quiesce(&rt->workers[i]);
    /* Workers set up but never started: runtime_free sees only the first
     * nworkers. Not before the joins, while running ones may look at them. */
    for (int i = rt->nworkers; i < set_up; i++)
        weft__worker_fini(&rt->workers[i]);
}

/* The config's fault plan (weft.h, section 15), installed for this run:
 * 0 (none, or installed), -ENOTSUP (built without the sites), -EINVAL (a
 * site out of range, a chance over 1000, a bad WEFT_SEED), -EBUSY
 * (another run has a plan). */
static int faults_install(const weft_config *c)
{
    const weft_fault_plan *f = c->faults;
    if (!f)
        return 0;
#if defined(WEFT__FAULTS)
    if ((f->nth && (unsigned)f->site >= WEFT_FAULT_SITES) || f->err < 0 ||
        f->active_permille > 1000 || f->fail_permille > 1000)
        return -EINVAL;
    for (int s = 0; s < WEFT_FAULT_SITES; s++)
        if (f->site_permille[s] > 1000)
            return -EINVAL;
    uint64_t seed;
    int rc = run_seed(c, &seed);
    return rc ? rc : weft__fault_install(f, seed);
#else
    return -ENOTSUP;
#endif
}

static weft_runtime *run_body(const weft_config *cfg, weft_fn fn, void *arg,
                              int *err, run_hook_fn hook, void *hook_ctx);

static weft_runtime *run_with(const weft_config *cfg, weft_fn fn, void *arg,
                              int *err, run_hook_fn hook, void *hook_ctx)
{
    weft_config defaults = {0};
    if (!cfg)
        cfg = &defaults;
    if (!fn) {
        *err = -EINVAL;
        return NULL;
    }
    if (weft__tl_worker) {
        *err = -EBUSY;
        return NULL;
    }
    weft_config simulated;
    bool sim;
    if ((*err = check_config(cfg)) != 0 ||
        (*err = sim_config(cfg, &simulated, &sim)) != 0)
        return NULL;
    if (sim)
        cfg = &simulated;
    if ((*err = faults_install(cfg)) != 0)
        return NULL;
    weft_runtime *rt = run_body(cfg, fn, arg, err, hook, hook_ctx);
#if defined(WEFT__FAULTS)
    if (cfg->faults)
        weft__fault_remove();
#endif
    return rt;
}

/* run_with's run, from a checked config (and its plan installed). */
static weft_runtime *run_body(const weft_config *cfg, weft_fn fn, void *arg,
                              int *err, run_hook_fn hook, void *hook_ctx)
{
    weft__fence_init();
    weft_runtime *rt = runtime_new(cfg, err);
    if (!rt)
        return NULL;
    if (rt->sim && (*err = weft__sim_start(rt, cfg->sim)) != 0) {
        rt->sim = false; /* nothing of the simulation's to end */
        runtime_free(rt);
        return NULL;
    }
    weft_task *root = NULL;
    if ((*err = spawn_root(rt, fn, arg, &root)) != 0 ||
        (*err = shutdown_init(rt, cfg)) != 0) {
        runtime_free(rt);
        return NULL;
    }
    weft__watchdog_init(rt, cfg);
    weft__overflow_handler_install();
    int set_up = start_workers(rt);
    if (hook)
        hook(rt, hook_ctx);
    weft__watchdog_start(rt);
    weft_worker *w0 = &rt->workers[0];
    /* thread_enter replaces the caller's alternate signal stack, and
     * thread_leave disables it: give the caller its own back. */
    stack_t caller_ss;
    bool restore_ss = sigaltstack(NULL, &caller_ss) == 0;
    running_add(rt);
    thread_enter(w0);
    if (WEFT_UNLIKELY(rt->instr != NULL)) /* on worker 0, before it runs */
        weft__instr_spawn(rt->instr, root, NULL);
    weft__worker_loop(w0);
    thread_leave(w0);
    weft__watchdog_stop(rt);
    running_remove(rt);
    if (restore_ss)
        sigaltstack(&caller_ss, NULL);
    if (rt->pinned) /* the caller's thread: its own CPUs again */
        pthread_setaffinity_np(pthread_self(), sizeof rt->cpus, &rt->cpus);
    stop_workers(rt, set_up);
    weft__overflow_handler_remove();
    /* A failure is told on stderr; the run's status stands. */
    if (weft__observe_rt(rt)->trace)
        weft__trace_write(weft__observe_rt(rt)->trace);
    return rt;
}

/* ---- shutdown: the request, the drain deadline, the keeper ---- */

/* Runtimes from their first task to their end, for requests made on plain
 * threads, which belong to no runtime. A request holds the lock, so a
 * runtime it reaches stays allocated until it is done. */
static pthread_mutex_t running_mu = PTHREAD_MUTEX_INITIALIZER;
static weft_runtime *running;

static void running_add(weft_runtime *rt)
{
    pthread_mutex_lock(&running_mu);
    shut_of(rt)->next_running = running;
    running = rt;
    pthread_mutex_unlock(&running_mu);
}

static void running_remove(weft_runtime *rt)
{
    pthread_mutex_lock(&running_mu);
    weft_runtime **p = &running;
    while (*p != rt)
        p = &shut_of(*p)->next_running;
    *p = shut_of(rt)->next_running;
    pthread_mutex_unlock(&running_mu);
}

/* Wakes weft_main's signal thread, if any, to look at the state again. */
static void notify_watcher(weft_runtime *rt)
{
    int fd = ld_acq(&shut_of(rt)->notify_fd);
    uint64_t one = 1;
    if (fd >= 0 && write(fd, &one, sizeof(one)) < 0) {
        /* the counter is full: the thread has a wake-up pending anyway */
    }
}

static void cancel_root(weft_runtime *rt)
{
    weft__scope_cancel(weft__scope_rt(rt)->root, CANCEL_DEADLINE);
    notify_watcher(rt);
}

static int request_now(weft_runtime *rt);

/* The keeper's body: cancels the root scope when the clock reaches the
 * drain deadline, which may move while it waits. */
static int keeper_main(void *arg)
{
    weft_runtime *rt = arg;
    weft__shutdown *sd = shut_of(rt);
    /* Made on any thread, so counted as spawned (stats) when it starts,
     * on worker 0, as its finish is. */
    weft__stat_add(&weft__tl_worker->spawned, 1);
    for (;;) {
        weft_event_reset(&sd->poke); /* before reading: no move is missed */
        if (ld_acq(&sd->handed))
            request_now(rt); /* a plain thread's, on a virtual clock */
        weft_time d = ld_acq(&sd->deadline);
        if (weft__scope_is_cancelled(root_of(rt)))
            break; /* by the deadline or otherwise: nothing left to keep */
        if (d <= weft__now(rt)) {
            cancel_root(rt);
            break;
        }
        weft_event_wait_until(&sd->poke, d);
    }
    st_rel(&sd->keeper_done, 1);
    return 0;
}

static int shutdown_init(weft_runtime *rt, const weft_config *c)
{
    weft__shutdown *sd = shut_of(rt);
    sd->drain_ns = c->shutdown_drain_ns;
    atomic_init(&sd->deadline, WEFT_NEVER);
    atomic_init(&sd->notify_fd, -1);
    int rc = weft_chan_new(&sd->chan, 1, 0);
    if (rc == 0) {
        /* A signal or a plain thread may end these waits at any time: a
         * task waiting for the request is not deadlocked. */
        weft__deadlock_outside(rt, sd->chan);
        weft__deadlock_outside(rt, &sd->poke);
    }
    return rc;
}

static void shutdown_fini(weft_runtime *rt)
{
    weft__shutdown *sd = shut_of(rt);
    /* Parked, or never started: the keeper's slot is unmapped. */
    if (sd->keeper && !ld_acq(&sd->keeper_done))
        weft__task_free(&rt->workers[0], sd->keeper);
    free(sd->keeper_home);
    if (sd->chan)
        weft_chan_unref(sd->chan);
}

/* Makes the keeper and wakes it on worker 0, from whatever thread sets the
 * first deadline that needs it. Its slot is mapped for it alone (a stack
 * larger than the pool's makes weft__task_alloc map one, which any thread
 * may), since only worker 0 may take one from worker 0's pool. */
static int start_keeper(weft_runtime *rt)
{
    weft__shutdown *sd = shut_of(rt);
    weft_worker *w0 = &rt->workers[0];
    weft_scope *home = weft__malloc(sizeof(*home));
    weft_task *t = home ? weft__task_alloc(w0, rt->pool.slot_size) : NULL;
    if (!t) {
        free(home);
        return -ENOMEM;
    }
    weft__scope_init_root(rt, home);
    home->is_root = false; /* its end is not the runtime's */
    static const weft_spawn_opts keeper_opts = {.name = "shutdown keeper"};
    weft__task_prepare(t, keeper_main, rt, &keeper_opts, __FILE__, __LINE__);
    weft__scope_task_init(t, NULL);
    weft__scope_add_child(home, t, false);
    t->worker = w0;    /* where the wake sends it, and where it stays */
    st_rlx(&t->id, 2); /* weft_task_info.id: made by no worker */
    if (WEFT_UNLIKELY(rt->instr != NULL))
        weft__instr_spawn(rt->instr, t, NULL);
    sd->keeper_home = home;
    sd->keeper = t;
    /* Parked without having run: the one wake starts it. */
    weft__wake_new(t);
    return 0;
}

/* Stores a drain deadline (the root scope's, so weft_deadline() reports
 * it). A task's (by_task) always replaces the configured one, whichever
 * is stored first: a request racing with the task must not undo it.
 * -EALREADY once the root scope is cancelled: no deadline matters then. */
static int store_deadline(weft_runtime *rt, weft_time d, bool by_task)
{
    weft__shutdown *sd = shut_of(rt);
    weft_scope *root = weft__scope_rt(rt)->root;
    weft__lock_acquire(&root->lock);
    bool over = weft__scope_is_cancelled(root);
    if (!over && (by_task || !sd->task_deadline)) {
        sd->task_deadline = sd->task_deadline || by_task;
        root->deadline = d;
        st_rel(&sd->deadline, d);
    }
    weft__lock_release(&root->lock);
    return over ? -EALREADY : 0;
}

/* Acts on the stored deadline: cancels the root scope if it has come,
 * else leaves it to the keeper (made by the first deadline that needs
 * it). Idempotent. -ENOMEM: no keeper, the deadline is not kept (a later
 * one tries again). */
static int keep_deadline(weft_runtime *rt)
{
    weft__shutdown *sd = shut_of(rt);
    weft_time d = ld_acq(&sd->deadline);
    int rc = 0;
    if (d <= weft__now(rt)) {
        cancel_root(rt);
    } else if (d != WEFT_NEVER && !xchg_sc(&sd->keeper_started, 1)) {
        if ((rc = start_keeper(rt)) != 0)
            st_rel(&sd->keeper_started, 0);
    } else {
        weft_event_set(&sd->poke); /* harmless before the keeper runs */
    }
    notify_watcher(rt);
    return rc;
}

/* Steps 1 to 4, once per runtime: 0, or keep_deadline's -ENOMEM. */
static int request_now(weft_runtime *rt)
{
    weft__shutdown *sd = shut_of(rt);
    if (xchg_sc(&sd->requesting, 1))
        return 0;
    store_deadline(rt, weft__add_sat(weft__now(rt), sd->drain_ns), false);
    /* A deadline come already is not kept before the request is seen: a
     * waiter is woken by the request, not by the cancel, even when both
     * come at once (a drain of 0). */
    int rc = ld_acq(&sd->deadline) > weft__now(rt) ? keep_deadline(rt) : 0;
    st_rel(&sd->requested, 1);
    weft_chan_close(sd->chan);
    int e = keep_deadline(rt);
    return rc ? rc : e;
}

/* A request from a thread that is no task of rt's, on a virtual clock, is
 * made by the keeper: a task, while it runs, keeps the clock where it is,
 * whereas this thread's steps (the wakes of the close, the keeper's
 * start) would let it jump, to the deadline before the request is seen or
 * past it before the keeper keeps it. */
static int request(weft_runtime *rt)
{
    weft__shutdown *sd = shut_of(rt);
    weft_worker *w = weft__tl_worker;
    if (rt->clock != WEFT_CLOCK_VIRTUAL || (w && w->rt == rt))
        return request_now(rt);
    if (ld_acq(&sd->requesting) || xchg_sc(&sd->handed, 1))
        return 0;
    if (!xchg_sc(&sd->keeper_started, 1) && start_keeper(rt) != 0) {
        st_rel(&sd->keeper_started, 0);
        return request_now(rt); /* no keeper: this thread makes it */
    }
    weft_event_set(&sd->poke);
    return 0;
}

int weft_shutdown_request(void)
{
    weft_worker *w = weft__tl_worker;
    if (w)
        return request(w->rt);
    pthread_mutex_lock(&running_mu);
    int rc = running ? 0 : -EPERM;
    for (weft_runtime *rt = running; rt; rt = shut_of(rt)->next_running) {
        int e = request(rt);
        rc = rc ? rc : e;
    }
    pthread_mutex_unlock(&running_mu);
    return rc;
}

int weft_shutdown_requested(void)
{
    weft_worker *w = weft__tl_worker;
    return w && w->cur ? ld_acq(&shut_of(w->rt)->requested) : 0;
}

int weft_shutdown_wait(weft_time deadline)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !w->cur)
        return -EPERM;
    if (deadline < 0)
        return -EINVAL;
    unsigned char none;
    int rc = weft_chan_recv_until(shut_of(w->rt)->chan, &none, deadline);
    return rc == -EPIPE ? 0 : rc;
}

struct weft_chan *weft_shutdown_chan(void)
{
    weft_worker *w = weft__tl_worker;
    return w && w->cur ? shut_of(w->rt)->chan : NULL;
}

int weft_shutdown_set_deadline(weft_time deadline)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !w->cur)
        return -EPERM;
    if (deadline < 0)
        return -EINVAL;
    int rc = store_deadline(w->rt, deadline, true);
    request(w->rt); /* if nothing has: now, with this deadline */
    return rc ? rc : keep_deadline(w->rt);
}

/* ---- weft_main: shutdown on SIGINT/SIGTERM ---- */

struct sigctl {
    int sfd; /* signalfd: SIGINT, SIGTERM */
    int efd; /* eventfd: the state changed (notify_watcher), or the end */
    atomic_int finished; /* the runtime has ended: the thread returns */
    int64_t grace_ns;
    weft_runtime *rt;
    pthread_t thread;
};

static void on_signal(struct sigctl *sc, int signals, int signo)
{
    weft_runtime *rt = sc->rt;
    if (signals > 1) {
        fprintf(stderr, "weft: second signal, exiting\n");
        _exit(130);
    }
    request(rt);
    const char *name = strsignal(signo);
    weft_time d = ld_acq(&shut_of(rt)->deadline);
    if (weft__scope_is_cancelled(root_of(rt)))
        fprintf(stderr,
                "weft: %s received, cancelling all tasks "
                "(send it again to exit at once)\n",
                name);
    else if (d == WEFT_NEVER)
        fprintf(stderr,
                "weft: %s received, shutdown requested "
                "(send it again to exit at once)\n",
                name);
    else
        fprintf(stderr,
                "weft: %s received, shutdown requested: tasks have %.3f s "
                "to finish before they are cancelled (send it again to "
                "exit at once)\n",
                name, (double)(d - weft__now(rt)) / (double)WEFT_SEC);
}

static void *signal_thread(void *arg)
{
    struct sigctl *sc = arg;
    weft_runtime *rt = sc->rt;
    int signals = 0;
    bool announced = false;         /* "cancelling all tasks" was said */
    weft_time exit_at = WEFT_NEVER; /* real time: cancelled + grace */
    for (;;) {
        weft_time now = weft__now(NULL);
        bool requested = ld_acq(&shut_of(rt)->requested);
        if (exit_at == WEFT_NEVER && requested &&
            weft__scope_is_cancelled(root_of(rt))) {
            if (signals && !announced)
                fprintf(stderr, "weft: the drain deadline passed, "
                                "cancelling all tasks\n");
            exit_at = weft__add_sat(now, sc->grace_ns);
        }
        if (ld_acq(&sc->finished)) /* after the note above, if it is due */
            return NULL;
        /* The real clock is this thread's too: the drain deadline is
         * kept here as well, in case no worker can run the keeper. */
        weft_time drain = rt->clock == WEFT_CLOCK_MONOTONIC && requested &&
                                  exit_at == WEFT_NEVER
                              ? ld_acq(&shut_of(rt)->deadline)
                              : WEFT_NEVER;
        if (drain <= now) {
            cancel_root(rt);
            continue;
        }
        if (now >= exit_at) {
            fprintf(stderr, "weft: tasks did not finish within the grace "
                            "period after they were cancelled; exiting\n");
            _exit(130);
        }
        struct pollfd p[2] = {{sc->sfd, POLLIN, 0}, {sc->efd, POLLIN, 0}};
        /* poll() takes int milliseconds: a long wait is made in pieces,
         * not cast (2^32 ms became 0), and an EINTR does not restart it. */
        weft_time until = drain < exit_at ? drain : exit_at;
        int n = poll(
            p, 2,
            weft__timeout_ms(until == WEFT_NEVER ? WEFT_NEVER : until - now));
        if (n <= 0)
            continue;
        if (p[1].revents & POLLIN) {
            uint64_t count;
            if (read(sc->efd, &count, sizeof(count)) < 0) {
                /* another read took it: nothing to do */
            }
        }
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sc->sfd, &si, sizeof(si)) != sizeof(si))
                continue;
            if (si.ssi_signo == SIGQUIT) { /* a dump, and go on */
                weft__dump_write(rt, STDERR_FILENO, WEFT_DUMP_STACKS);
                continue;
            }
            on_signal(sc, ++signals, (int)si.ssi_signo);
            announced = announced || weft__scope_is_cancelled(root_of(rt));
        }
    }
}

static void start_signal_thread(weft_runtime *rt, void *ctx)
{
    struct sigctl *sc = ctx;
    sc->rt = rt;
    st_rel(&shut_of(rt)->notify_fd, sc->efd);
    if (weft__fault_fails(WEFT_FAULT_THREAD) ||
        pthread_create(&sc->thread, NULL, signal_thread, sc) != 0) {
        st_rel(&shut_of(rt)->notify_fd, -1);
        sc->rt = NULL;
    }
}

int weft_main_cfg(const weft_config *cfg, weft_fn fn, void *arg)
{
    /* Before the signal mask and descriptors are touched: a task's
     * thread keeps its own. */
    if (weft__tl_worker)
        return fn ? -EBUSY : -EINVAL;
    weft_config c = cfg ? *cfg : (weft_config){0};
    struct sigctl sc = {.sfd = -1, .efd = -1};
    sc.grace_ns = c.shutdown_grace_ns ? c.shutdown_grace_ns : 5 * WEFT_SEC;
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    if (c.sigquit_dump >= 0) /* read by the signal thread, which dumps */
        sigaddset(&set, SIGQUIT);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    sc.sfd = signalfd(-1, &set, SFD_CLOEXEC);
    sc.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (sc.sfd < 0 || sc.efd < 0) {
        int e = -errno;
        if (sc.sfd >= 0)
            close(sc.sfd);
        if (sc.efd >= 0)
            close(sc.efd);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return e;
    }
    int err = 0;
    weft_runtime *rt = run_with(&c, fn, arg, &err, start_signal_thread, &sc);
    /* Blocking calls abandoned by cancelled tasks may still run: wait for
     * them while the signal thread can still end the process (a second
     * signal, or the grace period). */
    if (rt)
        weft__blocking_fini(rt);
    if (sc.rt) {
        uint64_t one = 1;
        st_rel(&sc.finished, 1);
        if (write(sc.efd, &one, sizeof(one)) < 0)
            pthread_cancel(sc.thread);
        pthread_join(sc.thread, NULL);
        st_rel(&shut_of(rt)->notify_fd, -1);
    }
    close(sc.sfd);
    close(sc.efd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!rt)
        return err;
    return runtime_end(rt);
}

int weft_main(weft_fn fn, void *arg)
{
    return weft_main_cfg(NULL, fn, arg);
}

/* ---- small public entry points ---- */

int weft_dump(int fd, unsigned flags)
{
    if (flags & ~(unsigned)(WEFT_DUMP_JSON | WEFT_DUMP_STACKS))
        return -EINVAL;
    weft_worker *w = weft__tl_worker;
    if (w)
        return weft__dump_write(w->rt, fd, flags);
    /* A plain thread: every running runtime, each kept allocated by the
     * lock meanwhile (its weft_run cannot end). */
    pthread_mutex_lock(&running_mu);
    int rc = running ? 0 : -ESRCH;
    for (weft_runtime *rt = running; rt && !rc; rt = shut_of(rt)->next_running)
        rc = weft__dump_write(rt, fd, flags);
    pthread_mutex_unlock(&running_mu);
    return rc;
}

int weft_stats_get(weft_stats *out, weft_worker_stats *workers, int n)
{
    if (!WEFT__STATS)
        return -ENOTSUP; /* built with WEFT_STATS=OFF */
    if (!out || n < 0 || (!workers && n > 0))
        return -EINVAL;
    weft_worker *w = weft__tl_worker;
    if (w) {
        weft__stats_read(w->rt, out, workers, n);
        return w->rt->nworkers;
    }
    /* A plain thread: the runtime running in the process, if there is
     * exactly one, kept allocated by the lock meanwhile. */
    pthread_mutex_lock(&running_mu);
    int rc = -EPERM;
    if (running && !shut_of(running)->next_running) {
        weft__stats_read(running, out, workers, n);
        rc = running->nworkers;
    }
    pthread_mutex_unlock(&running_mu);
    return rc;
}

uint64_t weft_seed(void)
{
    weft_worker *w = weft__tl_worker;
    return w ? w->rt->seed : 0;
}

int weft_workers(void)
{
    weft_worker *w = weft__tl_worker;
    return w ? w->rt->nworkers : -EPERM;
}

int weft_worker_id(void)
{
    weft_worker *w = weft__tl_worker;
    return w ? w->id : -EPERM;
}

int weft_on_worker_exit(void (*fn)(void *arg), void *arg)
{
    weft_worker *w = weft__tl_worker;
    if (!fn)
        return -EINVAL;
    if (!w)
        return -EPERM;
    struct weft__exit_hook *h = weft__malloc(sizeof(*h));
    if (!h)
        return -ENOMEM;
    h->fn = fn;
    h->arg = arg;
    h->next = w->exit_hooks;
    w->exit_hooks = h;
    return 0;
}
