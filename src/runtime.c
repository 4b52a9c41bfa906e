/* SPDX-License-Identifier: MIT */
/*
 * The runtime's life, and the public entry points that are thin wrappers.
 *
 * weft_run, step by step:
 *   1. check the configuration; allocate the runtime, its workers (worker 0
 *      is the calling thread) and the slot pool;
 *   2. spawn the root task into the root scope, on worker 0;
 *   3. start workers 1..n-1 and run worker 0's loop on this thread;
 *   4. when the root scope's last task finishes, it sets `done` and wakes
 *      every worker; each leaves its loop;
 *   5. join the threads, unmap every stack, return the root task's status.
 * Nothing outlives weft_run: a task cannot, since every task is inside the
 * root scope, and the root scope is empty before step 4.
 *
 * weft_main adds a signal thread: SIGINT and SIGTERM are blocked in every
 * runtime thread and read from a signalfd; the first cancels the root
 * scope, a second one (or the grace period running out) ends the process.
 */
#include "ctx.h"
#include "internal.h"

#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#define DEFAULT_STACK_BASE (64 * 1024)
#if defined(WEFT_ASAN) || defined(WEFT_TSAN)
#define DEFAULT_STACK (4 * DEFAULT_STACK_BASE)
#else
#define DEFAULT_STACK DEFAULT_STACK_BASE
#endif
#define MAX_WORKERS 1024
#define ALTSTACK_SIZE (64 * 1024)

void weft__fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

#if !defined(NDEBUG) && !defined(WEFT_ASAN)
#define HUSKS 1024
#endif

void weft__husk_free(void *p)
{
#ifdef HUSKS
    /* A ring of the last HUSKS husks: the newest goes in, the oldest is
     * freed, so a debug build catches a call on an object just freed
     * without keeping every object it ever freed. */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static void *ring[HUSKS];
    static unsigned next;
    pthread_mutex_lock(&mu);
    void *old = ring[next];
    ring[next] = p;
    next = (next + 1) % HUSKS;
    pthread_mutex_unlock(&mu);
    free(old);
#else
    free(p);
#endif
}

/* ---- versions and errors ---- */

unsigned weft_version(void)
{
    return WEFT_VERSION_HEX;
}

const char *weft_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
    case -ECANCELED:
        return "operation cancelled";
    case -ETIMEDOUT:
        return "deadline passed";
    case -EINVAL:
        return "invalid argument";
    case -EPERM:
        return "not allowed here (outside a task of this runtime, or not "
               "the owner)";
    case -EBUSY:
        return "busy (in use, held, or full)";
    case -ESHUTDOWN:
        return "closed (scope already joined)";
    case -ENOMEM:
        return "out of memory";
    case -EAGAIN:
        return "not ready yet (try again)";
    case -ENOENT:
        return "no such item";
    case -ENODATA:
        return "not recorded (this scope's policy keeps no such data)";
    case -EOVERFLOW:
        return "too many";
    case -EPIPE:
        return "closed";
    case -EINPROGRESS:
        return "not settled yet";
    case -EHOSTDOWN:
        return "rejected: the circuit breaker is open";
    case -EALREADY:
        return "already settled";
    }
    if (err < 0 && err > -4096)
        return strerror(-err);
    return "unknown error";
}

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
    w->altstack = malloc(ALTSTACK_SIZE);
    if (w->altstack) {
        stack_t ss = {.ss_sp = w->altstack, .ss_size = ALTSTACK_SIZE};
        sigaltstack(&ss, NULL);
    }
}

static void thread_leave(weft_worker *w)
{
    if (w->altstack) {
        stack_t ss = {.ss_flags = SS_DISABLE};
        sigaltstack(&ss, NULL);
        free(w->altstack);
        w->altstack = NULL;
    }
    weft__tl_worker = NULL;
}

void *weft__worker_thread(void *arg)
{
    weft_worker *w = arg;
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
    if (c->shutdown_grace_ns < 0)
        return -EINVAL;
    if (c->blocking_threads < 0 || c->blocking_queue < 0)
        return -EINVAL;
    return 0;
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

static void runtime_free(weft_runtime *rt)
{
    weft__blocking_fini(rt);
    if (rt->workers) {
        for (int i = 0; i < rt->nworkers; i++)
            weft__worker_fini(&rt->workers[i]);
        free(rt->workers);
    }
    weft__pool_fini(&rt->pool);
    weft__scope_free_orphans(rt);
    free(rt->root);
    pthread_mutex_destroy(&rt->vmu);
    pthread_mutex_destroy(&rt->orphan_mu);
    pthread_mutex_destroy(&rt->blocking_mu);
    free(rt);
}

static weft_runtime *runtime_new(const weft_config *c, int *err)
{
    uint64_t seed;
    if ((*err = seed_from_env(c->seed, &seed)) != 0)
        return NULL;
    weft_runtime *rt = calloc(1, sizeof(*rt));
    if (!rt) {
        *err = -ENOMEM;
        return NULL;
    }
    pthread_mutex_init(&rt->vmu, NULL);
    pthread_mutex_init(&rt->orphan_mu, NULL);
    pthread_mutex_init(&rt->blocking_mu, NULL);
    rt->blocking_threads = c->blocking_threads;
    rt->blocking_queue = c->blocking_queue;
    rt->pinned = c->pin_workers &&
                 pthread_getaffinity_np(pthread_self(), sizeof rt->cpus,
                                        &rt->cpus) == 0 &&
                 CPU_COUNT(&rt->cpus) > 0;
    rt->nworkers = c->workers ? c->workers : online_cpus();
    rt->clock = c->clock;
    rt->seed = seed;
    rt->seeded = rt->seed != 0 && rt->nworkers == 1;
    size_t stack = c->stack_size ? c->stack_size : DEFAULT_STACK;
    weft__pool_init(&rt->pool, stack);
    rt->root = malloc(sizeof(*rt->root));
    rt->workers = aligned_alloc(WEFT_CACHELINE,
                                (size_t)rt->nworkers * sizeof(weft_worker));
    if (!rt->root || !rt->workers) {
        runtime_free(rt);
        *err = -ENOMEM;
        return NULL;
    }
    weft__scope_init_root(rt, rt->root);
    for (int i = 0; i < rt->nworkers; i++)
        weft__worker_init(rt, &rt->workers[i], i);
    return rt;
}

static int spawn_root(weft_runtime *rt, weft_fn fn, void *arg)
{
    weft_worker *w0 = &rt->workers[0];
    weft_task *t = weft__task_alloc(w0, 0);
    if (!t)
        return -ENOMEM;
    static const weft_spawn_opts root_opts = {.name = "root"};
    weft__task_prepare(t, fn, arg, &root_opts, __FILE__, __LINE__);
    weft__scope_add_child(rt->root, t);
    weft__make_ready(w0, t); /* worker 0 starts it first */
    return 0;
}

/* hook (weft_main's, else NULL) is called with the runtime before any task
 * runs. It is an argument, not a global: a weft_run on another thread
 * meanwhile must not run weft_main's hook. */
typedef void (*run_hook_fn)(weft_runtime *rt, void *ctx);

static weft_runtime *run_with(const weft_config *cfg, weft_fn fn, void *arg,
                              int *err, run_hook_fn hook, void *hook_ctx);

int weft_run(const weft_config *cfg, weft_fn fn, void *arg)
{
    int err = 0;
    weft_runtime *rt = run_with(cfg, fn, arg, &err, NULL, NULL);
    if (!rt)
        return err;
    int status = rt->root_status;
    runtime_free(rt);
    return status;
}

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
    if ((*err = check_config(cfg)) != 0)
        return NULL;
    weft__fence_init();
    weft_runtime *rt = runtime_new(cfg, err);
    if (!rt)
        return NULL;
    if ((*err = spawn_root(rt, fn, arg)) != 0) {
        runtime_free(rt);
        return NULL;
    }
    weft__overflow_handler_install();
    int set_up = rt->nworkers;
    int started = 1;
    for (; started < rt->nworkers; started++) {
        weft_worker *w = &rt->workers[started];
        if (pthread_create(&w->thread, NULL, weft__worker_thread, w) != 0)
            break;
    }
    if (started < rt->nworkers) {
        /* Could not start them all: run with the ones we have. */
        rt->nworkers = started;
        rt->seeded = rt->seed != 0 && rt->nworkers == 1;
    }
    if (hook)
        hook(rt, hook_ctx);
    weft_worker *w0 = &rt->workers[0];
    /* thread_enter replaces the caller's alternate signal stack, and
     * thread_leave disables it: give the caller its own back. */
    stack_t caller_ss;
    bool restore_ss = sigaltstack(NULL, &caller_ss) == 0;
    thread_enter(w0);
    weft__worker_loop(w0);
    thread_leave(w0);
    if (restore_ss)
        sigaltstack(&caller_ss, NULL);
    if (rt->pinned) /* the caller's thread: its own CPUs again */
        pthread_setaffinity_np(pthread_self(), sizeof rt->cpus, &rt->cpus);
    for (int i = 1; i < rt->nworkers; i++)
        pthread_join(rt->workers[i].thread, NULL);
    /* Workers set up but never started: runtime_free sees only the first
     * nworkers. Not before the joins, while running ones may look at them. */
    for (int i = rt->nworkers; i < set_up; i++)
        weft__worker_fini(&rt->workers[i]);
    weft__overflow_handler_remove();
    return rt;
}

/* ---- weft_main: graceful shutdown on SIGINT/SIGTERM ---- */

struct sigctl {
    int sfd, efd;
    int64_t grace_ns;
    weft_runtime *rt;
    pthread_t thread;
};

static void *signal_thread(void *arg)
{
    struct sigctl *sc = arg;
    int signals = 0;
    weft_time deadline = WEFT_NEVER;
    for (;;) {
        struct pollfd p[2] = {{sc->sfd, POLLIN, 0}, {sc->efd, POLLIN, 0}};
        /* poll() takes int milliseconds: a long grace period is waited for
         * in pieces, not cast (2^32 ms became 0), and an EINTR does not
         * restart it. */
        int n = poll(p, 2,
                     weft__timeout_ms(deadline == WEFT_NEVER
                                          ? WEFT_NEVER
                                          : deadline - weft__now(NULL)));
        if (n == 0 && weft__now(NULL) >= deadline) {
            fprintf(stderr, "weft: tasks did not finish within the grace "
                            "period after a signal; exiting\n");
            _exit(130);
        }
        if (n <= 0)
            continue;
        if (p[1].revents & POLLIN)
            return NULL; /* the runtime finished */
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sc->sfd, &si, sizeof(si)) != sizeof(si))
                continue;
            if (++signals == 1) {
                fprintf(stderr,
                        "weft: %s received, cancelling all tasks "
                        "(send it again to exit at once)\n",
                        strsignal((int)si.ssi_signo));
                weft__scope_cancel(sc->rt->root, CANCEL_USER);
                deadline = weft__add_sat(weft__now(NULL), sc->grace_ns);
            } else {
                fprintf(stderr, "weft: second signal, exiting\n");
                _exit(130);
            }
        }
    }
}

static void start_signal_thread(weft_runtime *rt, void *ctx)
{
    struct sigctl *sc = ctx;
    sc->rt = rt;
    if (pthread_create(&sc->thread, NULL, signal_thread, sc) != 0)
        sc->rt = NULL;
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
    pthread_sigmask(SIG_BLOCK, &set, &old);
    sc.sfd = signalfd(-1, &set, SFD_CLOEXEC);
    sc.efd = eventfd(0, EFD_CLOEXEC);
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
        if (write(sc.efd, &one, sizeof(one)) < 0)
            pthread_cancel(sc.thread);
        pthread_join(sc.thread, NULL);
    }
    close(sc.sfd);
    close(sc.efd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!rt)
        return err;
    int status = rt->root_status;
    runtime_free(rt);
    return status;
}

int weft_main(weft_fn fn, void *arg)
{
    return weft_main_cfg(NULL, fn, arg);
}

/* ---- small public entry points ---- */

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

int weft_spawn_at(weft_scope *s, weft_fn fn, void *arg,
                  const weft_spawn_opts *opts, const char *file, int line)
{
    return weft__spawn(s, fn, arg, opts, file, line);
}

int weft_cancelled(void)
{
    weft_task *t = weft__current();
    return t ? weft__scope_is_cancelled(ld_rlx(&t->cur)) : 0;
}

int weft_yield(void)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !w->cur)
        return -EPERM;
    return weft__yield(w);
}

const char *weft_task_name(void)
{
    weft_task *t = weft__current();
    return t && t->name ? t->name : "";
}

weft_time weft_now(void)
{
    weft_worker *w = weft__tl_worker;
    return weft__now(w ? w->rt : NULL);
}

int weft_sleep_until(weft_time t)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !w->cur)
        return -EPERM;
    if (t <= weft__now(w->rt))
        return weft_cancelled() ? -ECANCELED : 0;
    int rc = weft__park_sleep(t);
    return rc == -ETIMEDOUT ? 0 : rc;
}

int weft_sleep(int64_t ns)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !w->cur)
        return -EPERM;
    if (ns <= 0)
        return weft_cancelled() ? -ECANCELED : 0;
    return weft_sleep_until(weft__add_sat(weft__now(w->rt), ns));
}

int weft_with_timeout(int64_t timeout_ns, weft_fn fn, void *arg)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !w->cur)
        return -EPERM;
    if (!fn)
        return -EINVAL;
    weft_scope *s;
    weft_time now = weft__now(w->rt);
    int rc = weft__scope_open_until(
        &s, WEFT_FAIL_FAST,
        timeout_ns <= 0 ? now : weft__add_sat(now, timeout_ns));
    if (rc)
        return rc;
    rc = fn(arg);
    weft__scope_join_above(w->cur, s); /* scopes fn left open, if any */
    weft_scope_join(s);
    bool timed_out = ld_rlx(&s->cancelled) == CANCEL_DEADLINE;
    weft_scope_free(s);
    return timed_out && rc < 0 ? -ETIMEDOUT : rc;
}
