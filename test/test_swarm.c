/* SPDX-License-Identifier: MIT */
/*
 * Swarm testing (weft.h, section 16): a sweep finds a planted bug, prints
 * its seed and replay command and shrinks its fault set to the one site
 * that causes it; the printed seed replays the failure; the determinism
 * check passes a good body and names the first event where a body that
 * reads the real clock parts from itself; coverage reports a site that
 * never fired and a "sometimes" that never held.
 */
#include "t.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void need_sites(void)
{
    weft_fault_stats st;
    if (weft_fault_stats_get(&st) == -ENOTSUP)
        T_SKIP("built without the fault sites (WEFT_FAULTS=OFF)");
}

/* No watchdog thread: every run on one thread, and fast. */
static const weft_config quiet_cfg = {.watchdog_ns = WEFT_NEVER,
                                      .slow_slice_ns = WEFT_NEVER};

/* ---- the planted bug: a short write taken for a whole one ---- */

#define CHUNKS 32
#define CHUNK 64

typedef struct pipe_run {
    int fd;
    bool buggy;
} pipe_run;

/* Writes CHUNKS chunks. An error (a reset, an interrupted call: the call
 * was not made) is retried; the planted bug: a short write's count is
 * ignored, so the rest of that chunk is lost. */
static int writer(void *arg)
{
    pipe_run *r = arg;
    char buf[CHUNK];
    for (int c = 0; c < CHUNKS; c++) {
        memset(buf, 'a' + c % 26, sizeof(buf));
        size_t at = 0;
        while (at < CHUNK) {
            ptrdiff_t n = weft_write(r->fd, buf + at, CHUNK - at, WEFT_NEVER);
            if (n < 0)
                continue; /* injected: try again */
            at = r->buggy ? CHUNK : at + (size_t)n;
        }
    }
    return 0;
}

/* The body: a writer task (or the body itself, when a fault refuses the
 * task) sends CHUNKS * CHUNK bytes over a socket pair, then the body
 * reads them back; every byte must come, in order. Allocations, stacks,
 * reads and writes pass fault sites; every fault but the planted bug's is
 * handled. */
static int pipe_body(void *arg)
{
    bool buggy = arg != NULL;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                   sv) != 0)
        return -errno;
    pipe_run r = {sv[1], buggy};
    weft_scope *s = NULL;
    bool spawned = false;
    if (weft_scope_open(&s, NULL) == 0)
        spawned = weft_spawn(s, writer, &r) >= 0;
    if (!spawned)
        writer(&r);
    if (s) {
        weft_scope_join(s);
        weft_scope_free(s);
    }
    close(sv[1]);
    size_t got = 0;
    int rc = 0;
    for (;;) {
        char b[CHUNK];
        ptrdiff_t n = weft_read(sv[0], b, sizeof(b), WEFT_NEVER);
        if (n == 0)
            break;
        if (n < 0)
            continue; /* injected: try again */
        for (ptrdiff_t i = 0; i < n; i++, got++)
            if (got < CHUNKS * CHUNK && b[i] != 'a' + (int)(got / CHUNK) % 26)
                rc = -EILSEQ;
    }
    close(sv[0]);
    if (got != CHUNKS * CHUNK)
        rc = -EIO; /* bytes lost */
    return rc;
}

static void *const BUGGY = (void *)1;

static weft_swarm_opts bug_opts(void)
{
    weft_swarm_opts o = {.name = "planted",
                         .seeds = 300,
                         .shrink = 1,
                         .verbose = -1,
                         .config = &quiet_cfg};
    return o;
}

TEST(sweep_finds_the_planted_bug_and_shrinks_it_to_its_site)
{
    need_sites();
    /* Without the bug, no seed fails. */
    weft_swarm_opts o = bug_opts();
    weft_swarm_stats st;
    ASSERT_EQ(weft_swarm_run(&o, pipe_body, NULL, &st), 0);
    ASSERT_EQ(st.runs, 300);
    ASSERT_EQ(st.failed, 0);
    ASSERT(st.fired[WEFT_FAULT_WRITE] > 0); /* the faults came, handled */
    ASSERT(st.fired[WEFT_FAULT_READ] > 0);
    ASSERT(st.fired[WEFT_FAULT_ALLOC] > 0);
    /* With it, the sweep stops at the first failing seed, whose fault set
     * shrinks to the write site alone. */
    ASSERT_EQ(weft_swarm_run(&o, pipe_body, BUGGY, &st), 1);
    ASSERT_EQ(st.failed, 1);
    ASSERT(st.first_failed_seed >= 1 && st.first_failed_seed <= 300);
    ASSERT_EQ(st.runs, st.first_failed_seed);
    ASSERT_EQ(st.first_status, -EIO);
    ASSERT(st.failed_sites & (1u << WEFT_FAULT_WRITE));
    ASSERT(st.failed_sites != (1u << WEFT_FAULT_WRITE)); /* more to shrink */
    ASSERT_EQ(st.shrunk, 1);
    ASSERT_EQ(st.shrunk_sites, 1u << WEFT_FAULT_WRITE);
    /* The API's own shrink agrees. */
    unsigned sites = 0;
    ASSERT_EQ(
        weft_swarm_shrink(&o, st.first_failed_seed, pipe_body, BUGGY, &sites),
        1);
    ASSERT_EQ(sites, 1u << WEFT_FAULT_WRITE);
}

TEST(the_printed_seed_replays_the_failure)
{
    need_sites();
    weft_swarm_opts o = bug_opts();
    o.shrink = 0;
    weft_swarm_stats st;
    ASSERT_EQ(weft_swarm_run(&o, pipe_body, BUGGY, &st), 1);
    uint64_t seed = st.first_failed_seed;
    /* WEFT_SEED=<seed> ./prog name: the sweep runs that seed alone, with
     * the same profile, and it fails the same way. */
    char buf[32];
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)seed);
    ASSERT_EQ(setenv("WEFT_SEED", buf, 1), 0);
    weft_swarm_stats again;
    ASSERT_EQ(weft_swarm_run(&o, pipe_body, BUGGY, &again), 1);
    ASSERT_EQ(again.runs, 1);
    ASSERT_EQ(again.first_failed_seed, seed);
    ASSERT_EQ(again.first_status, -EIO);
    ASSERT_EQ(again.failed_sites, st.failed_sites);
    /* ... with the shrunk set too, and not without the write site. */
    ASSERT_EQ(setenv("WEFT_SWARM_SITES", "write", 1), 0);
    ASSERT_EQ(weft_swarm_run(&o, pipe_body, BUGGY, &again), 1);
    ASSERT_EQ(setenv("WEFT_SWARM_SITES", "alloc,stack,read", 1), 0);
    ASSERT_EQ(weft_swarm_run(&o, pipe_body, BUGGY, &again), 0);
    ASSERT_EQ(setenv("WEFT_SWARM_SITES", "nonsense", 1), 0);
    ASSERT_EQ(weft_swarm_run(&o, pipe_body, BUGGY, &again), -EINVAL);
    unsetenv("WEFT_SWARM_SITES");
    unsetenv("WEFT_SEED");
    /* weft_swarm_replay: the same, and a trace of it on request. */
    ASSERT_EQ(weft_swarm_replay(&o, seed, 0, 0, NULL, pipe_body, BUGGY), -EIO);
    ASSERT_EQ(weft_swarm_replay(&o, seed, 1, 1u << WEFT_FAULT_WRITE, NULL,
                                pipe_body, BUGGY),
              -EIO);
    ASSERT_EQ(weft_swarm_replay(&o, seed, 1, 0, NULL, pipe_body, BUGGY), 0);
    char path[] = "/tmp/weft_swarm_traceXXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    close(fd);
    ASSERT_EQ(weft_swarm_replay(&o, seed, 0, 0, path, pipe_body, BUGGY), -EIO);
    FILE *f = fopen(path, "r");
    ASSERT(f != NULL);
    char head[64] = {0};
    ASSERT(fread(head, 1, sizeof(head) - 1, f) > 0);
    fclose(f);
    unlink(path);
    ASSERT(strstr(head, "traceEvents") != NULL || head[0] == '{' ||
           head[0] == '[');
}

/* A trace is how a run is looked at: it must not change the run. */
TEST(a_traced_replay_makes_the_same_faults)
{
    need_sites();
    weft_swarm_opts o = bug_opts();
    char path[] = "/tmp/weft_swarm_traceXXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    close(fd);
    int found = 0;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        weft_fault_stats plain, traced;
        int rc = weft_swarm_replay(&o, seed, 0, 0, NULL, pipe_body, NULL);
        ASSERT_EQ(weft_fault_stats_get(&plain), 0);
        ASSERT_EQ(weft_swarm_replay(&o, seed, 0, 0, path, pipe_body, NULL), rc);
        ASSERT_EQ(weft_fault_stats_get(&traced), 0);
        ASSERT_EQ(memcmp(plain.passes, traced.passes, sizeof(plain.passes)), 0);
        ASSERT_EQ(memcmp(plain.fired, traced.fired, sizeof(plain.fired)), 0);
        found += plain.fired[WEFT_FAULT_ALLOC] != 0;
    }
    unlink(path);
    ASSERT(found > 0); /* some of them with allocation faults */
}

/* ---- the determinism check ---- */

typedef struct tree {
    int depth;
    uint64_t rng;
} tree;

/* A small tree of tasks that sleep, yield and spawn, as the seed says. */
static int tree_task(void *arg)
{
    tree *t = arg;
    uint64_t r = t->rng;
    weft_sleep_for((int64_t)(rnd(&r) % 1000) * WEFT_USEC);
    if (t->depth < 3) {
        tree kids[3];
        weft_scope *s = NULL;
        if (weft_scope_open(&s, NULL) == 0) {
            for (int i = 0; i < 3; i++) {
                kids[i] = (tree){t->depth + 1, rnd(&r)};
                weft_spawn(s, tree_task, &kids[i]);
            }
            weft_yield();
            weft_scope_join(s);
            weft_scope_free(s);
        }
    }
    return 0;
}

static int good_body(void *arg)
{
    (void)arg;
    tree t = {0, weft_seed()};
    return tree_task(&t);
}

/* Reads the real clock and lets it decide a sleep: a run is no longer a
 * function of its seed. */
static int real_time_body(void *arg)
{
    (void)arg;
    good_body(NULL);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    weft_sleep_for(1 + ts.tv_nsec % 1000000);
    return 0;
}

TEST(determinism_check_passes_a_good_body_and_names_where_a_bad_one_parts)
{
    weft_swarm_opts o = {.verbose = -1, .config = &quiet_cfg};
    weft_swarm_diff d;
    ASSERT_EQ(weft_swarm_check(&o, 42, good_body, NULL, &d), 0);
    ASSERT_EQ(d.first, -1);
    ASSERT(d.events[0] > 40); /* 40 tasks, each resumed at least once */
    ASSERT_EQ(d.events[0], d.events[1]);
    ASSERT_EQ(d.hash[0], d.hash[1]);
    /* Another seed takes another path. */
    weft_swarm_diff d2;
    ASSERT_EQ(weft_swarm_check(&o, 43, good_body, NULL, &d2), 0);
    ASSERT(d2.hash[0] != d.hash[0]);
    /* The bad body: the same events up to its sleep, then the resume
     * after the sleep comes at another virtual instant. */
    ASSERT_EQ(weft_swarm_check(&o, 42, real_time_body, NULL, &d), 1);
    ASSERT(d.first > 40);
    ASSERT_EQ(d.at[0].kind, WEFT_SWARM_EVENT_RESUME);
    ASSERT_EQ(d.at[1].kind, WEFT_SWARM_EVENT_RESUME);
    ASSERT_EQ(d.at[0].a, d.at[1].a); /* the same task */
    ASSERT(d.at[0].b != d.at[1].b);  /* at another time */
    ASSERT(d.at[0].hash != d.at[1].hash);
    /* A sweep with the check fails on it, and passes the good body. */
    o.seeds = 4;
    o.check_every = 2;
    weft_swarm_stats st;
    ASSERT_EQ(weft_swarm_run(&o, good_body, NULL, &st), 0);
    ASSERT_EQ(st.checked, 2);
    ASSERT_EQ(weft_swarm_run(&o, real_time_body, NULL, &st), 2);
    ASSERT_EQ(st.nondeterministic, 2);
    /* Several workers: not a function of the seed, not checked. */
    o.max_workers = 4;
    uint64_t seed = 1;
    weft_swarm_profile p;
    do
        ASSERT_EQ(weft_swarm_profile_get(&o, ++seed, &p), 0);
    while (p.workers == 1);
    ASSERT_EQ(p.deterministic, 0);
    ASSERT_EQ(weft_swarm_check(&o, seed, good_body, NULL, &d), -ENOTSUP);
}

TEST(determinism_check_logs_the_faults)
{
    need_sites();
    weft_swarm_opts o = {.verbose = -1, .config = &quiet_cfg};
    /* A seed whose run makes faults at the write site. */
    weft_swarm_diff d, d_off;
    weft_fault_stats fs;
    uint64_t seed = 0;
    do {
        ASSERT(++seed < 200);
        ASSERT_EQ(weft_swarm_check(&o, seed, pipe_body, NULL, &d), 0);
        ASSERT_EQ(weft_fault_stats_get(&fs), 0);
    } while (!fs.fired[WEFT_FAULT_WRITE]);
    /* The same seed with the sites off (the profile may draw only the
     * signalfd site, never passed here) logs fewer events: the faults. */
    o.sites = 1u << WEFT_FAULT_SIGNALFD;
    ASSERT_EQ(weft_swarm_check(&o, seed, pipe_body, NULL, &d_off), 0);
    ASSERT(d.events[0] > d_off.events[0]);
    ASSERT(d.hash[0] != d_off.hash[0]);
}

/* ---- schedule exploration ---- */

/* A deep ordering bug: it shows only when B takes all of its DEEP steps
 * between A's two, which uniform picks between two ready tasks do once in
 * billions of runs; PCT's priorities hold A back for as long as its
 * priority stays low. */
#define DEEP 30

typedef struct ordering {
    int a1, a2;
    bool broken;
} ordering;

static int step_a(void *arg)
{
    ordering *o = arg;
    o->a1 = 1;
    weft_yield();
    o->a2 = 1;
    return 0;
}

static int step_b(void *arg)
{
    ordering *o = arg;
    for (int i = 0; i < DEEP; i++)
        weft_yield();
    o->broken = o->a1 && !o->a2;
    return 0;
}

static int ordering_body(void *arg)
{
    (void)arg;
    ordering o = {0};
    weft_scope *s = NULL;
    if (weft_scope_open(&s, NULL) != 0)
        return 0;
    if (weft_spawn(s, step_a, &o) >= 0)
        weft_spawn(s, step_b, &o);
    weft_scope_join(s);
    weft_scope_free(s);
    return o.broken ? -EILSEQ : 0;
}

TEST(schedule_exploration_finds_a_deep_ordering_bug_uniform_picks_miss)
{
    weft_swarm_opts o = {.seeds = 3000,
                         .sites = 1u << WEFT_FAULT_SIGNALFD, /* no fault */
                         .explore = -1,
                         .verbose = -1,
                         .config = &quiet_cfg};
    weft_swarm_stats st;
    ASSERT_EQ(weft_swarm_run(&o, ordering_body, NULL, &st), 0);
    ASSERT_EQ(st.runs, 3000);
    o.explore = 1;
    ASSERT_EQ(weft_swarm_run(&o, ordering_body, NULL, &st), 1);
    ASSERT_EQ(st.first_status, -EILSEQ);
    weft_swarm_profile p;
    ASSERT_EQ(weft_swarm_profile_get(&o, st.first_failed_seed, &p), 0);
    ASSERT(p.explore >= 2 && p.explore <= 8);
    /* Its replay explores the same way, and fails the same. */
    ASSERT_EQ(weft_swarm_replay(&o, st.first_failed_seed, 0, 0, NULL,
                                ordering_body, NULL),
              -EILSEQ);
    weft_swarm_diff d;
    ASSERT_EQ(
        weft_swarm_check(&o, st.first_failed_seed, ordering_body, NULL, &d), 0);
    /* By default half the seeds explore. */
    o.explore = 0;
    int exploring = 0;
    for (uint64_t seed = 1; seed <= 100; seed++) {
        ASSERT_EQ(weft_swarm_profile_get(&o, seed, &p), 0);
        exploring += p.explore != 0;
    }
    ASSERT(exploring > 25 && exploring < 75);
}

/* ---- coverage ---- */

static int coverage_body(void *arg)
{
    (void)arg;
    weft_chan *c = NULL;
    if (weft_chan_new(&c, sizeof(int), 4) == 0)
        weft_chan_unref(c);
    weft_sim_sometimes(c != NULL, "made a channel");
    weft_sim_sometimes(weft_seed() == 0, "ran unseeded");
    return 0;
}

TEST(coverage_reports_a_site_that_never_fired)
{
    need_sites();
    weft_swarm_opts o = {
        .seeds = 50,
        .verbose = -1,
        .config = &quiet_cfg,
        .max_permille = 500,
        .must_fire = 1u << WEFT_FAULT_ALLOC | 1u << WEFT_FAULT_ACCEPT,
    };
    weft_swarm_stats st;
    /* The body never accepts: one problem, named. */
    ASSERT_EQ(weft_swarm_run(&o, coverage_body, NULL, &st), 1);
    ASSERT_EQ(st.failed, 0);
    ASSERT_EQ(st.unfired, 1u << WEFT_FAULT_ACCEPT);
    ASSERT(st.fired[WEFT_FAULT_ALLOC] > 0);
    ASSERT_EQ(st.passes[WEFT_FAULT_ACCEPT], 0);
    ASSERT_EQ(st.sometimes_never, 1); /* "ran unseeded" */
    /* Required: the sometimes that never held is a problem too. */
    o.must_fire = 1u << WEFT_FAULT_ALLOC;
    o.require_sometimes = 1;
    ASSERT_EQ(weft_swarm_run(&o, coverage_body, NULL, &st), 1);
    ASSERT_EQ(st.unfired, 0);
    /* Outside a sweep, weft_sim_sometimes only returns its condition. */
    ASSERT_EQ(weft_sim_sometimes(7, "outside"), 7);
    ASSERT_EQ(weft_sim_sometimes(0, "outside"), 0);
}

/* ---- the assertion hook, options, and profiles ---- */

static int fail_hook_body(void *arg)
{
    (void)arg;
    if (weft_seed() == 3)
        weft_swarm_fail("seed three is bad");
    return 0;
}

static int nested_body(void *arg)
{
    (void)arg;
    return weft_swarm_run(NULL, good_body, NULL, NULL) == -EBUSY ? 0 : -1;
}

TEST(the_assertion_hook_fails_a_run_and_options_are_checked)
{
    weft_swarm_opts o = {.seeds = 5, .verbose = -1, .config = &quiet_cfg};
    weft_swarm_stats st;
    ASSERT_EQ(weft_swarm_run(&o, fail_hook_body, NULL, &st), 1);
    ASSERT_EQ(st.first_failed_seed, 3);
    ASSERT_EQ(st.first_status, -EPROTO);
    ASSERT_EQ(st.runs, 3);
    o.max_failures = 5;
    ASSERT_EQ(weft_swarm_run(&o, fail_hook_body, NULL, &st), 1);
    ASSERT_EQ(st.runs, 5);
    /* One sweep at a time. */
    o.seeds = 1;
    ASSERT_EQ(weft_swarm_run(&o, nested_body, NULL, &st), 0);
    weft_swarm_opts bad = {.max_workers = 5};
    ASSERT_EQ(weft_swarm_run(&bad, good_body, NULL, NULL), -EINVAL);
    bad = (weft_swarm_opts){.max_permille = 1001};
    ASSERT_EQ(weft_swarm_run(&bad, good_body, NULL, NULL), -EINVAL);
    ASSERT_EQ(weft_swarm_run(NULL, NULL, NULL, NULL), -EINVAL);
    /* A profile is a function of its seed, and some draw no fault. */
    weft_swarm_profile a, b;
    int none = 0, many = 0;
    for (uint64_t s = 1; s <= 200; s++) {
        ASSERT_EQ(weft_swarm_profile_get(NULL, s, &a), 0);
        ASSERT_EQ(weft_swarm_profile_get(NULL, s, &b), 0);
        ASSERT_EQ(memcmp(&a, &b, sizeof(a)), 0);
        ASSERT_EQ(a.workers, 1);
        none += a.sites == 0;
        many += __builtin_popcount(a.sites) > WEFT_FAULT_SITES / 2;
        for (int k = 0; k < WEFT_FAULT_SITES; k++)
            ASSERT(a.faults.site_permille[k] <= 50 &&
                   !!a.faults.site_permille[k] == !!(a.sites & (1u << k)));
    }
    ASSERT(none > 5 && many > 5);
}

/* From a task of a runtime that is no sweep's: each entry point refuses
 * (a check or a shrink must not report "agree" or "passes" for runs that
 * never started). */
static int in_task_body(void *arg)
{
    (void)arg;
    weft_swarm_diff d;
    unsigned sites = 0;
    if (weft_swarm_check(NULL, 1, good_body, NULL, &d) != -EBUSY ||
        weft_swarm_shrink(NULL, 1, good_body, NULL, &sites) != -EBUSY ||
        weft_swarm_replay(NULL, 1, 0, 0, NULL, good_body, NULL) != -EBUSY ||
        weft_swarm_run(NULL, good_body, NULL, NULL) != -EBUSY)
        return -1;
    return 0;
}

TEST(a_task_cannot_start_a_sweep)
{
    ASSERT_EQ(weft_run(&quiet_cfg, in_task_body, NULL), 0);
}
