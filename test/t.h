/* SPDX-License-Identifier: MIT */
/*
 * A tiny test harness: one program per module, one process per test.
 *
 *   TEST(name) { ... ASSERT(x); ASSERT_EQ(a, b); ... }
 *
 * `prog` lists the tests; `prog NAME` runs one. CMake finds the TEST(...)
 * lines in the source and registers each as its own ctest test, so a crash
 * or a hang names itself and cannot take the suite down.
 *
 * WEFT_TEST_SCALE (an integer percentage, default 100) scales stress sizes:
 * the sanitizer builds run them smaller. Use T_SCALE(n).
 *
 * Seeds: a test that runs a seeded schedule says so with T_SEED(seed) (it
 * returns the seed); if the test then fails, the harness prints the seed
 * and how to re-run with it (WEFT_SEED=... overrides the config's seed).
 */
#ifndef WEFT_T_H
#define WEFT_T_H

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"

typedef void (*t_fn)(void);
struct t_case {
    const char *name;
    t_fn fn;
};
#define T_MAX 256
static struct t_case t_cases[T_MAX];
static int t_ncases;
static const char *t_current = "";
static unsigned long long t_seed;
static int t_seeded;

static inline unsigned long long t_seed_note(unsigned long long seed)
{
    t_seed = seed;
    t_seeded = 1;
    return seed;
}
#define T_SEED(seed) t_seed_note(seed)

static inline void t_print_seed(void)
{
    if (t_seeded)
        fprintf(stderr,
                "seed=%llu: reproduce with WEFT_SEED=%llu <test program> %s\n",
                t_seed, t_seed, t_current);
}

#define TEST(name)                                                             \
    static void test_##name(void);                                             \
    __attribute__((constructor)) static void t_reg_##name(void)                \
    {                                                                          \
        if (t_ncases < T_MAX)                                                  \
            t_cases[t_ncases++] = (struct t_case){#name, test_##name};         \
    }                                                                          \
    static void test_##name(void)

#define T_FAIL(...)                                                            \
    do {                                                                       \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                        \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
        t_print_seed();                                                        \
        abort();                                                               \
    } while (0)

/* Whether WEFT_TEST_REQUIRE lists what (T_NEED). */
static inline int t_required(const char *what)
{
    const char *r = getenv("WEFT_TEST_REQUIRE");
    size_t n = strlen(what);
    for (const char *p = r; p && (p = strstr(p, what)) != NULL; p += n)
        if ((p == r || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' '))
            return 1;
    return 0;
}

/* Ends the test as skipped, saying why: ctest reports it as skipped
 * (T_SKIP_CODE is every test's SKIP_RETURN_CODE), never as passed. For a
 * test that cannot run in this build or on this machine. */
#define T_SKIP_CODE 77
#define T_SKIP(...)                                                            \
    do {                                                                       \
        fprintf(stderr, "%s: skipped: ", t_current);                           \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
        exit(T_SKIP_CODE);                                                     \
    } while (0)

/* A test that needs something of the machine (a server it starts, a
 * kernel feature, a command) and did not get it: skipped, saying why;
 * but failed where the environment variable WEFT_TEST_REQUIRE names
 * `what` (a word in a space-separated list: CI installs PostgreSQL and
 * expects io_uring, so a test that cannot have them there fails instead
 * of proving nothing). */
#define T_NEED(what, ...)                                                      \
    do {                                                                       \
        if (t_required(what))                                                  \
            T_FAIL("%s is required here (WEFT_TEST_REQUIRE) but missing",      \
                   (what));                                                    \
        T_SKIP(__VA_ARGS__);                                                   \
    } while (0)

#define ASSERT(c)                                                              \
    do {                                                                       \
        if (!(c))                                                              \
            T_FAIL("assertion failed: %s", #c);                                \
    } while (0)

#define ASSERT_EQ(a, b)                                                        \
    do {                                                                       \
        long long t_a_ = (long long)(a), t_b_ = (long long)(b);                \
        if (t_a_ != t_b_)                                                      \
            T_FAIL("%s == %s failed: %lld != %lld", #a, #b, t_a_, t_b_);       \
    } while (0)

static inline long t_scale(long n)
{
    const char *s = getenv("WEFT_TEST_SCALE");
    long pct = s ? atol(s) : 100;
    long v = n * (pct > 0 ? pct : 100) / 100;
    return v > 0 ? v : 1;
}
#define T_SCALE(n) t_scale(n)

/* Under TSan every task is a TSan fiber, which costs about what a thread
 * does (clang: tens of microseconds; gcc 12: ~1 MB and milliseconds; 8128
 * at most at once): there, cap the number of tasks alive at once. */
#if defined(WEFT_TSAN)
#define T_LIVE(n) (T_SCALE(n) < 1000 ? T_SCALE(n) : 1000)
#else
#define T_LIVE(n) T_SCALE(n)
#endif

/* CLOCK_MONOTONIC, in ns: for the tests about real time. */
static inline int64_t t_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * WEFT_SEC + ts.tv_nsec;
}

/* CLOCK_THREAD_CPUTIME_ID, in ns: the CPU time the calling thread used. */
static inline int64_t t_thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * WEFT_SEC + ts.tv_nsec;
}

/* Waits (yielding the task and the thread, at most 10 s of real time)
 * until cond holds: for states that other threads (the pool's, the
 * kernel's) reach on their own. Nothing sleeps. */
#define T_SETTLE(cond)                                                         \
    do {                                                                       \
        int64_t t_settle_end_ = t_real_ns() + 10 * WEFT_SEC;                   \
        while (!(cond)) {                                                      \
            ASSERT(t_real_ns() < t_settle_end_);                               \
            weft_yield();                                                      \
            sched_yield();                                                     \
        }                                                                      \
    } while (0)

/* Runs fn(arg) in a runtime with these settings; returns weft_run's. */
static inline int t_run(int workers, weft_clock_kind clock, uint64_t seed,
                        weft_fn fn, void *arg)
{
    weft_config cfg = {0};
    cfg.workers = workers;
    cfg.clock = clock;
    cfg.seed = seed;
    return weft_run(&cfg, fn, arg);
}
#define t_run_virtual(workers, fn, arg)                                        \
    t_run((workers), WEFT_CLOCK_VIRTUAL, 0, (fn), (arg))
#define t_run_mono(workers, fn, arg)                                           \
    t_run((workers), WEFT_CLOCK_MONOTONIC, 0, (fn), (arg))

/* A test run with WEFT_POLLER=io_uring (CTest's "uring:" entries) on a
 * machine or build that gives no io_uring would run on epoll: it exits
 * as skipped instead, not passed (T_NEED: failed where io_uring is
 * required). */
static int t_poller_get(void *arg)
{
    const char *name = weft_poller_name();
    *(int *)arg = name && strcmp(name, "io_uring") == 0;
    return 0;
}

static inline void t_poller_check(void)
{
    const char *want = getenv("WEFT_POLLER");
    if (!want || (strcmp(want, "io_uring") != 0 && strcmp(want, "uring") != 0))
        return;
    int got = 0;
    weft_config cfg = {0};
    cfg.workers = 1;
    if (weft_run(&cfg, t_poller_get, &got) != 0 || !got)
        T_NEED("io_uring", "WEFT_POLLER=%s, but the runtime got another poller",
               want);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        for (int i = 0; i < t_ncases; i++)
            printf("%s\n", t_cases[i].name);
        return 0;
    }
    for (int i = 0; i < t_ncases; i++) {
        if (strcmp(t_cases[i].name, argv[1]) == 0) {
            const char *env = getenv("WEFT_SEED");
            if (env && *env)
                T_SEED(strtoull(env, NULL, 0));
            t_current = t_cases[i].name;
            t_poller_check();
            t_cases[i].fn();
            return 0;
        }
    }
    fprintf(stderr, "no test named %s\n", argv[1]);
    return 2;
}

/* Entries of a /proc directory: t_proc_count("/proc/self/fd") is the
 * open descriptors, "/proc/self/task" the threads. Compare a count before
 * and after a run to show it leaked none. */
static inline int t_proc_count(const char *dir)
{
    DIR *d = opendir(dir);
    ASSERT(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* ---- helpers for test bodies (inside a task) ---- */

/* splitmix64: fine with any seed, 0 included. */
static inline uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Opens a scope with the defaults, or fails the test. */
static inline weft_scope *scope_open(void)
{
    weft_scope *s = NULL;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    return s;
}

/* Joins (expecting 0) and frees s. */
static inline void scope_end(weft_scope *s)
{
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
}

/* Cancels s, which the caller opened and in which it does not block. */
static inline void scope_cancel_end(weft_scope *s)
{
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
}

/* Spawns fn(arg) into the current scope, or fails the test. */
static inline void spawn(weft_fn fn, void *arg)
{
    ASSERT(weft_spawn(NULL, fn, arg) >= 0);
}

/* Spawns fn(arg) into the current scope to start (and stay) on worker
 * `worker` modulo the number of workers: for tests that need tasks on
 * several workers for certain. */
static inline void spawn_on(int worker, weft_fn fn, void *arg)
{
    weft_spawn_opts o = {.worker = worker % weft_workers() + 1};
    ASSERT(weft_spawn_ex(NULL, fn, arg, &o) >= 0);
}

#endif
