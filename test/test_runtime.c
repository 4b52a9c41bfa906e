/* SPDX-License-Identifier: MIT */
/*
 * Runtime: weft_run, workers, version and errors, task names and stacks,
 * and the idle cost of a parked runtime.
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <fenv.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * WEFT_SEC + ts.tv_nsec;
}

/* ---- weft_run: status, arguments, nesting ---------------------------- */

static int return_arg(void *arg)
{
    return (int)(intptr_t)arg;
}

TEST(run_returns_root_status)
{
    ASSERT_EQ(weft_run(NULL, return_arg, (void *)(intptr_t)0), 0);
    ASSERT_EQ(weft_run(NULL, return_arg, (void *)(intptr_t)-ENOENT), -ENOENT);
    ASSERT_EQ(
        t_run(1, WEFT_CLOCK_VIRTUAL, 0, return_arg, (void *)(intptr_t)-EIO),
        -EIO);
    ASSERT_EQ(
        t_run(2, WEFT_CLOCK_MONOTONIC, 0, return_arg, (void *)(intptr_t)-EPIPE),
        -EPIPE);
}

static atomic_int children_done;

static int child_sleep_inc(void *arg)
{
    int r = weft_sleep_for((int64_t)(intptr_t)arg);
    atomic_fetch_add(&children_done, 1);
    return r;
}

static int root_spawns_and_returns(void *arg)
{
    (void)arg;
    for (int i = 0; i < 10; i++)
        ASSERT(weft_spawn(NULL, child_sleep_inc,
                          (void *)(intptr_t)(i * WEFT_MSEC)) >= 0);
    return -EXDEV;
}

/* weft_run returns when the root and every task of the root scope are done,
 * and still returns the root's status. */
TEST(run_waits_for_root_scope_children)
{
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 0, root_spawns_and_returns, NULL),
              -EXDEV);
    ASSERT_EQ(atomic_load(&children_done), 10);
    atomic_store(&children_done, 0);
    ASSERT_EQ(t_run(2, WEFT_CLOCK_VIRTUAL, 0, root_spawns_and_returns, NULL),
              -EXDEV);
    ASSERT_EQ(atomic_load(&children_done), 10);
}

TEST(run_null_fn_is_einval)
{
    ASSERT_EQ(weft_run(NULL, NULL, NULL), -EINVAL);
    weft_config cfg = {0};
    ASSERT_EQ(weft_run(&cfg, NULL, NULL), -EINVAL);
}

static atomic_int bad_cfg_ran;

static int mark_ran(void *arg)
{
    (void)arg;
    atomic_store(&bad_cfg_ran, 1);
    return 0;
}

TEST(run_bad_config_is_einval)
{
    weft_config cfg = {0};
    cfg.workers = -1;
    ASSERT_EQ(weft_run(&cfg, mark_ran, NULL), -EINVAL);
    cfg.workers = 1;
    cfg.clock = (weft_clock_kind)77;
    ASSERT_EQ(weft_run(&cfg, mark_ran, NULL), -EINVAL);
    cfg.clock = WEFT_CLOCK_VIRTUAL;
    cfg.autojump_ns = -1;
    ASSERT_EQ(weft_run(&cfg, mark_ran, NULL), -EINVAL);
    cfg.autojump_ns = 0;
    ASSERT_EQ(atomic_load(&bad_cfg_ran), 0);
}

static atomic_int nested_ran;

static int nested_fn(void *arg)
{
    (void)arg;
    atomic_store(&nested_ran, 1);
    return 0;
}

static int try_nested_run(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_run(NULL, nested_fn, NULL), -EBUSY);
    weft_config cfg = {0};
    cfg.workers = 1;
    ASSERT_EQ(weft_run(&cfg, nested_fn, NULL), -EBUSY);
    return 0;
}

static int root_nested(void *arg)
{
    (void)arg;
    try_nested_run(NULL);
    /* And from a spawned task, on any worker. */
    for (int i = 0; i < 8; i++)
        ASSERT(weft_spawn(NULL, try_nested_run, NULL) >= 0);
    return 0;
}

TEST(run_inside_task_is_ebusy)
{
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 0, root_nested, NULL), 0);
    ASSERT_EQ(t_run(4, WEFT_CLOCK_MONOTONIC, 0, root_nested, NULL), 0);
    ASSERT_EQ(atomic_load(&nested_ran), 0);
    /* The runtime is usable again afterwards. */
    ASSERT_EQ(weft_run(NULL, nested_fn, NULL), 0);
    ASSERT_EQ(atomic_load(&nested_ran), 1);
}

/* ---- task APIs outside a runtime ------------------------------------- */

static int never_run(void *arg)
{
    (void)arg;
    T_FAIL("a task spawned outside a runtime ran");
    return 0;
}

static void check_outside_runtime(void)
{
    weft_scope *s = (weft_scope *)0x1;
    ASSERT_EQ(weft_spawn(NULL, never_run, NULL), -EPERM);
    ASSERT_EQ(weft_yield(), -EPERM);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), -EPERM);
    ASSERT_EQ(weft_sleep_for(0), -EPERM);
    ASSERT_EQ(weft_sleep_until(WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_scope_open(&s, NULL), -EPERM);
    ASSERT(s == (weft_scope *)0x1); /* *out untouched on failure */
    ASSERT_EQ(weft_workers(), -EPERM);
    ASSERT_EQ(weft_worker_id(), -EPERM);
    ASSERT_EQ(weft_call_for(never_run, NULL, WEFT_SEC), -EPERM);
    ASSERT_EQ(weft_cancelled(), 0);
    ASSERT(weft_scope_current() == NULL);
    ASSERT(weft_task_name() != NULL);
}

static void *outside_thread(void *arg)
{
    (void)arg;
    check_outside_runtime();
    return NULL;
}

static int root_starts_plain_thread(void *arg)
{
    (void)arg;
    /* A plain thread is outside the runtime even while it runs. */
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, outside_thread, NULL), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    return 0;
}

TEST(task_apis_outside_runtime_are_eperm)
{
    check_outside_runtime();
    ASSERT_EQ(t_run(2, WEFT_CLOCK_MONOTONIC, 0, root_starts_plain_thread, NULL),
              0);
    check_outside_runtime(); /* and after a runtime has come and gone */
}

TEST(now_outside_runtime_is_monotonic)
{
    int64_t a = clock_ns(CLOCK_MONOTONIC);
    int64_t n = weft_now();
    int64_t b = clock_ns(CLOCK_MONOTONIC);
    ASSERT(a <= n && n <= b);
}

/* ---- workers ---------------------------------------------------------- */

struct wk {
    int workers;
    atomic_int ran;
    atomic_int bad_id;
    atomic_int per_worker[8];
};

static int wk_child(void *arg)
{
    struct wk *w = arg;
    int id = weft_worker_id();
    if (id < 0 || id >= w->workers || weft_workers() != w->workers)
        atomic_fetch_add(&w->bad_id, 1);
    else
        atomic_fetch_add(&w->per_worker[id], 1);
    for (int i = 0; i < 10; i++)
        ASSERT_EQ(weft_yield(), 0);
    atomic_fetch_add(&w->ran, 1);
    return 0;
}

static int wk_root(void *arg)
{
    struct wk *w = arg;
    ASSERT_EQ(weft_workers(), w->workers);
    int id = weft_worker_id();
    ASSERT(id >= 0 && id < w->workers);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int i = 0; i < 1000; i++)
        ASSERT_EQ(weft_spawn(s, wk_child, w), i);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(atomic_load(&w->ran), 1000);
    return 0;
}

TEST(workers_1_2_4_all_work)
{
    int counts[] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        struct wk w = {.workers = counts[k]};
        ASSERT_EQ(t_run(counts[k], WEFT_CLOCK_MONOTONIC, 0, wk_root, &w), 0);
        ASSERT_EQ(atomic_load(&w.ran), 1000);
        ASSERT_EQ(atomic_load(&w.bad_id), 0);
        int sum = 0;
        for (int i = 0; i < counts[k]; i++)
            sum += atomic_load(&w.per_worker[i]);
        ASSERT_EQ(sum, 1000);
    }
}

static int check_default_workers(void *arg)
{
    (void)arg;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    ASSERT_EQ(weft_workers(), cpus);
    return 0;
}

TEST(workers_zero_means_one_per_cpu)
{
    ASSERT_EQ(weft_run(NULL, check_default_workers, NULL), 0);
    ASSERT_EQ(t_run(0, WEFT_CLOCK_MONOTONIC, 0, check_default_workers, NULL),
              0);
}

/* A started task never changes worker (nor OS thread): check its worker
 * id, pthread_self() and the address of a __thread variable across many
 * yields and sleeps, for many tasks on 4 workers. */
static __thread int tls_probe;
static atomic_int moved, stable_done;

static int stay_put(void *arg)
{
    uint64_t x = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    int id = weft_worker_id();
    pthread_t self = pthread_self();
    int *tls = &tls_probe;
    for (int i = 0; i < 100; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (x % 3 == 0)
            ASSERT_EQ(weft_sleep_for((int64_t)(x % 1000) * WEFT_USEC), 0);
        else
            ASSERT_EQ(weft_yield(), 0);
        if (weft_worker_id() != id || !pthread_equal(self, pthread_self()) ||
            &tls_probe != tls)
            atomic_fetch_add(&moved, 1);
    }
    atomic_fetch_add(&stable_done, 1);
    return 0;
}

static int stay_put_root(void *arg)
{
    int n = (int)(intptr_t)arg;
    for (int i = 0; i < n; i++)
        ASSERT(weft_spawn(NULL, stay_put, (void *)(intptr_t)i) >= 0);
    return 0;
}

TEST(worker_id_stable_across_yields_and_sleeps)
{
    int n = (int)T_SCALE(2000);
    ASSERT_EQ(
        t_run(4, WEFT_CLOCK_VIRTUAL, 0, stay_put_root, (void *)(intptr_t)n), 0);
    ASSERT_EQ(atomic_load(&stable_done), n);
    ASSERT_EQ(atomic_load(&moved), 0);
    atomic_store(&stable_done, 0);
    ASSERT_EQ(t_run(4, WEFT_CLOCK_MONOTONIC, 0, stay_put_root,
                    (void *)(intptr_t)(n / 4)),
              0);
    ASSERT_EQ(atomic_load(&stable_done), n / 4);
    ASSERT_EQ(atomic_load(&moved), 0);
}

/* ---- seed ------------------------------------------------------------- */

static int check_seed(void *arg)
{
    ASSERT_EQ(weft_seed(), (uint64_t)(uintptr_t)arg);
    return 0;
}

TEST(seed_from_config_and_env)
{
    unsetenv("WEFT_SEED");
    weft_config cfg = {0};
    cfg.workers = 1;
    cfg.clock = WEFT_CLOCK_VIRTUAL;
    ASSERT_EQ(weft_run(&cfg, check_seed, (void *)(uintptr_t)0), 0);
    cfg.seed = 1234;
    ASSERT_EQ(weft_run(&cfg, check_seed, (void *)(uintptr_t)1234), 0);
    setenv("WEFT_SEED", "77", 1);
    ASSERT_EQ(weft_run(&cfg, check_seed, (void *)(uintptr_t)77), 0);
    cfg.seed = 0;
    ASSERT_EQ(weft_run(&cfg, check_seed, (void *)(uintptr_t)77), 0);
    unsetenv("WEFT_SEED");
}

static int root_ran;

static int must_not_run(void *arg)
{
    (void)arg;
    root_ran = 1; /* stderr is a file now: fail after it is back */
    return 0;
}

/* Runs weft_run (main: weft_main_cfg) with WEFT_SEED=value and stderr in
 * a file; returns its result and what it wrote to stderr in out. */
static int run_with_env_seed(const char *value, int main, char *out, size_t cap)
{
    ASSERT_EQ(setenv("WEFT_SEED", value, 1), 0);
    fflush(stderr);
    FILE *f = tmpfile();
    ASSERT(f != NULL);
    int saved = dup(2);
    ASSERT(saved >= 0);
    ASSERT(dup2(fileno(f), 2) == 2);
    weft_config cfg = {0};
    cfg.workers = 1;
    cfg.clock = WEFT_CLOCK_VIRTUAL;
    cfg.seed = 5;
    int rc = main ? weft_main_cfg(&cfg, must_not_run, NULL)
                  : weft_run(&cfg, must_not_run, NULL);
    fflush(stderr);
    ASSERT(dup2(saved, 2) == 2);
    close(saved);
    rewind(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
    ASSERT_EQ(unsetenv("WEFT_SEED"), 0);
    return rc;
}

/* A WEFT_SEED that does not parse is refused, with a message naming it,
 * instead of running unseeded; the ones that parse are taken whole. */
TEST(seed_env_garbage_is_einval)
{
    const char *bad[] = {"garbage",
                         "",
                         "12x",
                         "0x",
                         "-1",
                         " 5",
                         "5 ",
                         "+5",
                         "1.5",
                         "08",
                         "18446744073709551616",
                         "99999999999999999999999",
                         "0x10000000000000000"};
    char out[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int main = 0; main <= 1; main++) {
            int rc = run_with_env_seed(bad[i], main, out, sizeof out);
            if (rc != -EINVAL || root_ran)
                T_FAIL("WEFT_SEED=\"%s\": weft_run returned %d (%s)", bad[i],
                       rc, root_ran ? "the root task ran" : "it did not run");
            char want[64];
            snprintf(want, sizeof want, "WEFT_SEED=\"%s\" is not a seed",
                     bad[i]);
            if (!strstr(out, want))
                T_FAIL("WEFT_SEED=\"%s\": stderr says \"%s\"", bad[i], out);
        }
    }
    struct {
        const char *s;
        uint64_t v;
    } good[] = {{"0", 0},
                {"77", 77},
                {"0x10", 16},
                {"010", 8},
                {"18446744073709551615", UINT64_MAX},
                {"0xffffffffffffffff", UINT64_MAX}};
    weft_config cfg = {0};
    cfg.workers = 1;
    cfg.clock = WEFT_CLOCK_VIRTUAL;
    cfg.seed = 5;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ASSERT_EQ(setenv("WEFT_SEED", good[i].s, 1), 0);
        ASSERT_EQ(weft_run(&cfg, check_seed, (void *)(uintptr_t)good[i].v), 0);
    }
    ASSERT_EQ(unsetenv("WEFT_SEED"), 0);
}

/* ---- version and errors ---------------------------------------------- */

TEST(version_matches_header)
{
    ASSERT_EQ(weft_version(), WEFT_VERSION_HEX);
    ASSERT_EQ(WEFT_VERSION_HEX, 0x000200);
}

TEST(strerror_never_null)
{
    int codes[] = {0,       -ECANCELED, -ETIMEDOUT, -EINVAL,    -EPERM,  -EBUSY,
                   -ENOMEM, -ESHUTDOWN, -ENODATA,   -ENOENT,    -EAGAIN, -12345,
                   12345,   INT_MIN,    INT_MAX,    -EOVERFLOW, 1};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = weft_strerror(codes[i]);
        ASSERT(s != NULL);
        ASSERT(s[0] != '\0');
    }
    ASSERT(strcmp(weft_strerror(-ECANCELED), weft_strerror(-ETIMEDOUT)) != 0);
    ASSERT(strcmp(weft_strerror(0), weft_strerror(-ECANCELED)) != 0);
    ASSERT(strstr(weft_strerror(-ECANCELED), "cancel") != NULL);
}

/* ---- names and stacks ------------------------------------------------- */

static atomic_int names_checked;

static int check_name(void *arg)
{
    const char *want = arg;
    const char *got = weft_task_name();
    ASSERT(got != NULL);
    if (strcmp(got, want) != 0)
        T_FAIL("weft_task_name() = \"%s\", want \"%s\"", got, want);
    ASSERT_EQ(weft_yield(), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    ASSERT(strcmp(weft_task_name(), want) == 0); /* survives blocking */
    atomic_fetch_add(&names_checked, 1);
    return 0;
}

static int names_root(void *arg)
{
    (void)arg;
    ASSERT(weft_task_name() != NULL);
    static const char *names[] = {"alpha", "beta-2", "a longer task name"};
    for (int i = 0; i < 3; i++) {
        weft_spawn_opts o = {.name = names[i]};
        ASSERT(weft_spawn_ex(NULL, check_name, (void *)names[i], &o) >= 0);
    }
    /* No name, or no opts at all: "". */
    weft_spawn_opts none = {0};
    ASSERT(weft_spawn_ex(NULL, check_name, "", &none) >= 0);
    ASSERT(weft_spawn(NULL, check_name, "") >= 0);
    return 0;
}

TEST(task_name_from_spawn_opts)
{
    ASSERT_EQ(t_run(2, WEFT_CLOCK_VIRTUAL, 0, names_root, NULL), 0);
    ASSERT_EQ(atomic_load(&names_checked), 5);
    ASSERT(weft_task_name() != NULL); /* outside a task: "" or similar */
}

/* Each frame holds 1 KiB the compiler cannot elide. */
__attribute__((noinline)) static int recurse(int depth)
{
    volatile char buf[1024];
    buf[0] = (char)depth;
    buf[sizeof buf - 1] = (char)(depth >> 8);
    if (depth == 0)
        return buf[0];
    int r = recurse(depth - 1);
    return r + (buf[0] == (char)depth);
}

static int deep_task(void *arg)
{
    int depth = (int)(intptr_t)arg;
    /* recurse() returns depth (one per frame that saw its own byte). */
    ASSERT_EQ(recurse(depth), depth);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0); /* block with a deep stack used */
    ASSERT_EQ(recurse(depth), depth);
    return 0;
}

static int big_stack_root(void *arg)
{
    (void)arg;
    weft_spawn_opts o = {.name = "deep", .stack_size = 1024 * 1024};
    /* ~600 KiB of frames: far beyond the 64 KiB default. */
    ASSERT(weft_spawn_ex(NULL, deep_task, (void *)(intptr_t)560, &o) >= 0);
    return 0;
}

TEST(large_stack_size_in_spawn_opts)
{
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 0, big_stack_root, NULL), 0);
    ASSERT_EQ(t_run(2, WEFT_CLOCK_MONOTONIC, 0, big_stack_root, NULL), 0);
}

static int deep_root(void *arg)
{
    /* The root and its children get the configured default. */
    ASSERT_EQ(deep_task(arg), 0);
    ASSERT(weft_spawn(NULL, deep_task, arg) >= 0);
    return 0;
}

TEST(large_default_stack_size_in_config)
{
    weft_config cfg = {0};
    cfg.workers = 2;
    cfg.clock = WEFT_CLOCK_VIRTUAL;
    cfg.stack_size = 2 * 1024 * 1024;
    ASSERT_EQ(weft_run(&cfg, deep_root, (void *)(intptr_t)1200), 0);
}

/* ---- idle cost -------------------------------------------------------- */

static int idle_root(void *arg)
{
    (void)arg;
    /* Let the runtime settle (other worker parks), then measure. */
    ASSERT_EQ(weft_sleep_for(20 * WEFT_MSEC), 0);
    int64_t cpu0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    int64_t real0 = clock_ns(CLOCK_MONOTONIC);
    weft_time now0 = weft_now();
    ASSERT_EQ(weft_sleep_for(300 * WEFT_MSEC), 0);
    int64_t real = clock_ns(CLOCK_MONOTONIC) - real0;
    int64_t cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    ASSERT(weft_now() - now0 >= 300 * WEFT_MSEC);
    ASSERT(real >= 300 * WEFT_MSEC);
    if (cpu >= 30 * WEFT_MSEC)
        T_FAIL("idle runtime used %.1f ms of CPU in %.1f ms", cpu / 1e6,
               real / 1e6);
    return 0;
}

TEST(idle_runtime_uses_no_cpu)
{
    ASSERT_EQ(t_run(2, WEFT_CLOCK_MONOTONIC, 0, idle_root, NULL), 0);
}

/* ---- floating-point state belongs to each task ----------------------- */

/* The context switch saves and restores the FP control state (MXCSR and the
 * x87 control word on x86-64, FPCR on aarch64): a task that changes its
 * rounding mode keeps it across switches and does not leak it to others.
 * Each task also keeps doubles live across the switches, in callee-saved
 * registers where the compiler puts them there (d8-d15 on aarch64). */
static const int fp_modes[] = {FE_TONEAREST, FE_DOWNWARD, FE_UPWARD,
                               FE_TOWARDZERO};
static atomic_int fp_wrong;

static int fp_task(void *arg)
{
    int mode = fp_modes[(intptr_t)arg % 4];
    ASSERT_EQ(fesetround(mode), 0);
    volatile double third = 1.0;
    double acc = 0.0, expect = 0.0;
    for (int i = 1; i <= 200; i++) {
        double x = (third / 3.0) * i; /* rounded by this task's mode */
        acc += x;
        weft_yield();
        if (fegetround() != mode)
            atomic_fetch_add(&fp_wrong, 1);
        expect += (third / 3.0) * i;
    }
    if (acc != expect)
        atomic_fetch_add(&fp_wrong, 1);
    return 0;
}

static int fp_root(void *arg)
{
    (void)arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (intptr_t i = 0; i < 16; i++)
        ASSERT(weft_spawn(s, fp_task, (void *)i) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    /* The root's own mode is untouched by its children's. */
    ASSERT_EQ(fegetround(), FE_TONEAREST);
    return 0;
}

TEST(fp_rounding_mode_is_per_task)
{
    for (int workers = 1; workers <= 2; workers++) {
        atomic_store(&fp_wrong, 0);
        ASSERT_EQ(t_run(workers, WEFT_CLOCK_MONOTONIC, 0, fp_root, NULL), 0);
        ASSERT_EQ(atomic_load(&fp_wrong), 0);
    }
}

/* ---- pin_workers --------------------------------------------------------
 * Worker i runs on the i-th CPU of the caller's set (mod their number),
 * tasks on it observe that CPU, pool threads keep the whole set, and the
 * caller's thread gets its set back. */

struct pinned {
    cpu_set_t all;
    int ncpu;
    atomic_int wrong, seen[4];
    cpu_set_t pool_set;
};

static int nth_cpu(const cpu_set_t *s, int k)
{
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, s) && k-- == 0)
            return cpu;
    return -1;
}

static int pinned_task(void *arg)
{
    struct pinned *p = arg;
    int id = weft_worker_id();
    int want = nth_cpu(&p->all, id % p->ncpu);
    for (int i = 0; i < 3; i++) {
        cpu_set_t mine;
        ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof mine, &mine),
                  0);
        if (CPU_COUNT(&mine) != 1 || !CPU_ISSET(want, &mine) ||
            sched_getcpu() != want)
            atomic_fetch_add(&p->wrong, 1);
        ASSERT_EQ(weft_sleep_for(WEFT_USEC), 0);
    }
    atomic_fetch_add(&p->seen[id & 3], 1);
    return 0;
}

static int pool_affinity(void *arg)
{
    struct pinned *p = arg;
    return pthread_getaffinity_np(pthread_self(), sizeof p->pool_set,
                                  &p->pool_set) == 0
               ? 0
               : -EIO;
}

static int pinned_root(void *arg)
{
    struct pinned *p = arg;
    weft_scope *s = scope_open();
    for (int i = 0; i < 4 * weft_workers(); i++)
        spawn_on(i, pinned_task, p);
    scope_end(s);
    ASSERT_EQ(weft_blocking(pool_affinity, p), 0);
    return 0;
}

TEST(pin_workers_one_cpu_each)
{
    static struct pinned p;
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof p.all, &p.all), 0);
    p.ncpu = CPU_COUNT(&p.all);
    for (int workers = 1; workers <= 4; workers *= 2) {
        memset(p.seen, 0, sizeof p.seen);
        weft_config cfg = {.workers = workers, .pin_workers = 1};
        ASSERT_EQ(weft_run(&cfg, pinned_root, &p), 0);
        ASSERT_EQ(atomic_load(&p.wrong), 0);
        for (int i = 0; i < workers; i++)
            ASSERT_EQ(atomic_load(&p.seen[i]), 4);
        ASSERT(CPU_EQUAL(&p.pool_set, &p.all)); /* the pool is not pinned */
        cpu_set_t after;
        ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof after, &after),
                  0);
        ASSERT(CPU_EQUAL(&after, &p.all)); /* the caller's set is back */
    }
}

/* ---- bad spawn options, the caller's thread state ------------------- */

static int huge_stack_root(void *arg)
{
    (void)arg;
    /* Larger than any stack weft_config accepts (1 GiB): rounding SIZE_MAX
     * up to pages wrapped to a one-page stack. */
    size_t sizes[] = {SIZE_MAX, SIZE_MAX - 4096, (size_t)1 << 40};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        weft_spawn_opts o = {.name = "huge", .stack_size = sizes[i]};
        ASSERT_EQ(weft_spawn_ex(NULL, never_run, NULL, &o), -EINVAL);
    }
    return 0;
}

TEST(spawn_opts_huge_stack_size_is_einval)
{
    ASSERT_EQ(t_run_virtual(1, huge_stack_root, NULL), 0);
}

/* Worker 0 is the caller's thread: the alternate signal stack weft puts
 * there for overflow reports must not replace the caller's for good. */
TEST(run_restores_callers_sigaltstack)
{
    static char mine[64 * 1024];
    stack_t ss = {.ss_sp = mine, .ss_size = sizeof mine}, got;
    ASSERT_EQ(sigaltstack(&ss, NULL), 0);
    ASSERT_EQ(t_run_virtual(1, return_arg, (void *)(intptr_t)0), 0);
    ASSERT_EQ(t_run_mono(2, return_arg, (void *)(intptr_t)0), 0);
    ASSERT_EQ(sigaltstack(NULL, &got), 0);
    ASSERT(!(got.ss_flags & SS_DISABLE));
    ASSERT(got.ss_sp == (void *)mine);
    ASSERT_EQ(got.ss_size, sizeof mine);
    ss.ss_flags = SS_DISABLE;
    ASSERT_EQ(sigaltstack(&ss, NULL), 0);
}

/* Workers that cannot be started: the run goes on with those that did,
 * and what the others were given is freed too (LeakSanitizer sees it). */
static int count_workers(void *arg)
{
    *(int *)arg = weft_workers();
    return 0;
}

TEST(run_with_workers_that_cannot_start)
{
    pthread_attr_t old, huge;
    ASSERT_EQ(pthread_getattr_default_np(&old), 0);
    ASSERT_EQ(pthread_attr_init(&huge), 0);
    /* No such stack can be mapped: every pthread_create fails. */
    ASSERT_EQ(pthread_attr_setstacksize(&huge, (size_t)1 << 62), 0);
    ASSERT_EQ(pthread_setattr_default_np(&huge), 0);
    int threads = t_proc_count("/proc/self/task");
    int n = -1;
    ASSERT_EQ(t_run_virtual(4, count_workers, &n), 0);
    ASSERT_EQ(pthread_setattr_default_np(&old), 0);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(t_proc_count("/proc/self/task"), threads);
    pthread_attr_destroy(&huge);
    pthread_attr_destroy(&old);
}

/* ---- weft_on_worker_exit --------------------------------------------- */

/* What the hooks saw: the order they ran in, the worker each ran on, and
 * how many tasks were still unfinished then. */
static struct {
    atomic_int ran, tasks_left, order[8], on_worker[8];
} exits;

static void exit_hook(void *arg)
{
    int k = (int)(intptr_t)arg;
    int i = atomic_fetch_add(&exits.ran, 1);
    if (i < 8) {
        atomic_store(&exits.order[i], k);
        atomic_store(&exits.on_worker[i], weft_worker_id());
    }
    ASSERT_EQ(atomic_load(&exits.tasks_left), 0);
}

/* Registers hook k (and k + 1) on the worker it runs on, then sleeps: the
 * hooks must wait for the sleepers of every worker. */
static int register_exit_hooks(void *arg)
{
    int k = (int)(intptr_t)arg;
    ASSERT_EQ(weft_on_worker_exit(exit_hook, (void *)(intptr_t)k), 0);
    ASSERT_EQ(weft_on_worker_exit(exit_hook, (void *)(intptr_t)(k + 1)), 0);
    ASSERT_EQ(weft_sleep_for(k * WEFT_MSEC), 0);
    atomic_fetch_sub(&exits.tasks_left, 1);
    return 0;
}

static int spawn_per_worker(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_on_worker_exit(NULL, NULL), -EINVAL);
    int n = weft_workers();
    atomic_store(&exits.tasks_left, n);
    for (int w = 0; w < n; w++)
        ASSERT(weft_spawn_ex(NULL, register_exit_hooks,
                             (void *)(intptr_t)(10 * w + 1),
                             &(weft_spawn_opts){.worker = w + 1}) >= 0);
    return 0;
}

/* Each worker runs its own hooks, newest first, on its own thread, once
 * each, after the last task of the runtime has finished; off a worker the
 * call is refused. */
TEST(worker_exit_hooks_run_on_their_worker_after_the_last_task)
{
    ASSERT_EQ(weft_on_worker_exit(exit_hook, NULL), -EPERM);
    for (int workers = 1; workers <= 2; workers++) {
        memset(&exits, 0, sizeof exits);
        ASSERT_EQ(t_run(workers, WEFT_CLOCK_VIRTUAL, 0, spawn_per_worker, NULL),
                  0);
        ASSERT_EQ(atomic_load(&exits.ran), 2 * workers);
        /* Per worker w: hook 10w+2 (registered last) before 10w+1. */
        int seen[2] = {0, 0};
        for (int i = 0; i < 2 * workers; i++) {
            int k = atomic_load(&exits.order[i]);
            int w = atomic_load(&exits.on_worker[i]);
            ASSERT_EQ(k / 10, w);
            ASSERT_EQ(k % 10, seen[w] == 0 ? 2 : 1);
            seen[w]++;
        }
        for (int w = 0; w < workers; w++)
            ASSERT_EQ(seen[w], 2);
    }
    /* A runtime after that one starts with no hooks. */
    atomic_store(&exits.ran, 0);
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 0, return_arg, NULL), 0);
    ASSERT_EQ(atomic_load(&exits.ran), 0);
}
