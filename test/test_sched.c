/* SPDX-License-Identifier: MIT */
/*
 * Scheduler: seeded determinism, fairness of yield, wake-up storms across
 * workers, a million blocked tasks, spawn-heavy loops, and who steals from
 * whom.
 */
#include "sched/task.h" /* WEFT__BUDGET: a call past it has yielded */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- seeded determinism ----------------------------------------------- */

#define TR_TASKS 20
#define TR_STEPS 6
#define TR_LEN (TR_TASKS * TR_STEPS)

static int trace[TR_LEN];
static atomic_int trace_len;

static void trace_add(int id)
{
    int i = atomic_fetch_add(&trace_len, 1);
    ASSERT(i < TR_LEN);
    trace[i] = id;
}

static int tracer(void *arg)
{
    int id = (int)(intptr_t)arg;
    for (int k = 0; k < TR_STEPS; k++) {
        trace_add(id);
        /* Yields, and short sleeps with many equal deadlines, so both the
         * ready order and the order of simultaneous wake-ups matter. */
        if ((id + k) % 3 == 0)
            ASSERT_EQ(weft_sleep_for((id + k) % 2), 0);
        else
            ASSERT_EQ(weft_yield(), 0);
    }
    return 0;
}

static int tracer_root(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    ASSERT_EQ(weft_seed(), seed);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int i = 0; i < TR_TASKS; i++)
        ASSERT_EQ(weft_spawn(s, tracer, (void *)(intptr_t)i), i);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

static void record(uint64_t seed, int out[TR_LEN])
{
    atomic_store(&trace_len, 0);
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, T_SEED(seed), tracer_root,
                    (void *)(uintptr_t)seed),
              0);
    ASSERT_EQ(atomic_load(&trace_len), TR_LEN);
    memcpy(out, trace, sizeof trace);
    /* Each task appears exactly TR_STEPS times. */
    int count[TR_TASKS] = {0};
    for (int i = 0; i < TR_LEN; i++) {
        ASSERT(out[i] >= 0 && out[i] < TR_TASKS);
        count[out[i]]++;
    }
    for (int i = 0; i < TR_TASKS; i++)
        ASSERT_EQ(count[i], TR_STEPS);
}

TEST(same_seed_same_trace)
{
    unsetenv("WEFT_SEED");
    static int a[TR_LEN], b[TR_LEN];
    uint64_t seeds[] = {1, 42, 0xdeadbeefcafeull};
    for (int i = 0; i < 3; i++) {
        record(seeds[i], a);
        record(seeds[i], b);
        if (memcmp(a, b, sizeof a) != 0)
            T_FAIL("seed %" PRIu64 " gave two different traces", seeds[i]);
    }
}

TEST(different_seeds_different_traces)
{
    unsetenv("WEFT_SEED");
    static int first[TR_LEN], other[TR_LEN];
    record(1, first);
    int differ = 0;
    for (uint64_t seed = 2; seed <= 9; seed++) {
        record(seed, other);
        differ += memcmp(first, other, sizeof first) != 0;
    }
    /* 20 tasks: distinct seeds agreeing on all of them would be absurd. */
    ASSERT(differ >= 1);
    ASSERT(differ >= 6);
}

/* Seed 0 is ordinary scheduling, not a shuffle: a worker runs the tasks it
 * spawned that have not started yet newest first (so trees are walked
 * depth first, see sched.c), so 20 tasks spawned together first run in
 * exactly the reverse of spawn order; and the run is repeatable. */
TEST(seed_zero_runs_newest_first)
{
    unsetenv("WEFT_SEED");
    static int t0[TR_LEN], t1[TR_LEN];
    record(0, t0);
    int first[TR_TASKS], n = 0, seen[TR_TASKS] = {0};
    for (int i = 0; i < TR_LEN; i++)
        if (!seen[t0[i]]++)
            first[n++] = t0[i];
    ASSERT_EQ(n, TR_TASKS);
    int backward = 1;
    for (int i = 0; i < TR_TASKS; i++)
        backward &= first[i] == TR_TASKS - 1 - i;
    if (!backward) {
        fprintf(stderr, "first runs:");
        for (int i = 0; i < TR_TASKS; i++)
            fprintf(stderr, " %d", first[i]);
        T_FAIL("seed 0: tasks did not first run newest first");
    }
    record(0, t1);
    ASSERT(memcmp(t0, t1, sizeof t0) == 0);
}

TEST(env_seed_overrides_config)
{
    static int a[TR_LEN], b[TR_LEN];
    unsetenv("WEFT_SEED");
    record(7, a);
    setenv("WEFT_SEED", "7", 1);
    /* The config says 3, the environment says 7: the run is seed 7's. */
    atomic_store(&trace_len, 0);
    ASSERT_EQ(
        t_run(1, WEFT_CLOCK_VIRTUAL, 3, tracer_root, (void *)(uintptr_t)7), 0);
    memcpy(b, trace, sizeof trace);
    ASSERT(memcmp(a, b, sizeof a) == 0);
    unsetenv("WEFT_SEED");
}

/* ---- fairness of weft_yield ------------------------------------------- */

#define FAIR_ROUNDS 200
static int fair_trace[3 * FAIR_ROUNDS];
static atomic_int fair_len;

static int fair_task(void *arg)
{
    int id = (int)(intptr_t)arg;
    for (int i = 0; i < FAIR_ROUNDS; i++) {
        fair_trace[atomic_fetch_add(&fair_len, 1)] = id;
        ASSERT_EQ(weft_yield(), 0);
    }
    return 0;
}

static int fair_root(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++)
        ASSERT(weft_spawn(NULL, fair_task, (void *)(intptr_t)i) >= 0);
    return 0;
}

TEST(yield_is_round_robin)
{
    unsetenv("WEFT_SEED");
    ASSERT_EQ(t_run(1, WEFT_CLOCK_MONOTONIC, 0, fair_root, NULL), 0);
    ASSERT_EQ(atomic_load(&fair_len), 3 * FAIR_ROUNDS);
    ASSERT(fair_trace[0] != fair_trace[1]);
    ASSERT(fair_trace[1] != fair_trace[2]);
    ASSERT(fair_trace[0] != fair_trace[2]);
    for (int i = 3; i < 3 * FAIR_ROUNDS; i++)
        if (fair_trace[i] != fair_trace[i - 3])
            T_FAIL("turn %d went to task %d, not %d", i, fair_trace[i],
                   fair_trace[i - 3]);
}

/* A yielding task does not starve a task woken by a timer, and vice
 * versa: with the virtual clock, a spinning yielder keeps the clock still,
 * so the sleeper wakes only after the spinner stops. */
static atomic_int spins_done;

static int spinner(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1000; i++)
        ASSERT_EQ(weft_yield(), 0);
    atomic_store(&spins_done, 1);
    return 0;
}

static int waiter(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_sleep_for(1), 0);
    ASSERT_EQ(atomic_load(&spins_done), 1);
    ASSERT_EQ(weft_now(), 1);
    return 0;
}

static int spin_root(void *arg)
{
    (void)arg;
    ASSERT(weft_spawn(NULL, waiter, NULL) >= 0);
    ASSERT(weft_spawn(NULL, spinner, NULL) >= 0);
    return 0;
}

TEST(yielding_keeps_virtual_clock_still)
{
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 0, spin_root, NULL), 0);
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 99, spin_root, NULL), 0);
}

/* ---- the cooperative budget: calls that never wait still let others run */

/* A task whose blocking calls all complete at once (a channel with room,
 * a socket with bytes) yields every so often (weft__checkpoint's budget,
 * WEFT__BUDGET calls), so a task beside it on its one worker runs long before
 * the loop ends; without the budget it would run only after all of them. The
 * other task then cancels the looping one: its next call returns
 * -ECANCELED having done nothing, so the channel holds exactly the values
 * whose sends returned 0. */
#define BUDGET_CALLS (5 * WEFT__BUDGET)

struct budget {
    int fd[2];             /* socketpair: the reader's bytes, or -1 */
    weft_chan *c;          /* the sender's channel (room for every value) */
    weft_task_handle loop; /* the looping task */
    int done;              /* its calls that returned 0 */
    int seen;              /* done, when the other task first ran */
    int end;               /* the looping task's last result */
    int cancel;            /* the other task's weft_task_cancel */
};

static int budget_other(void *arg)
{
    struct budget *b = arg;
    b->seen = b->done;
    b->cancel = weft_task_cancel(b->loop); /* checked by budget_check */
    return 0;
}

static int budget_loop(void *arg)
{
    struct budget *b = arg;
    int rc = 0;
    /* Spawned from here, so it starts behind this task: it can run only
     * when this one yields (a spawn yields only after 32 of them). */
    ASSERT(weft_spawn(NULL, budget_other, b) >= 0);
    for (int i = 0; i < BUDGET_CALLS; i++) {
        if (b->fd[0] >= 0) {
            char byte;
            ptrdiff_t n = weft_read(b->fd[0], &byte, 1, WEFT_NEVER);
            rc = n == 1 ? 0 : (int)n;
        } else {
            rc = weft_chan_send(b->c, &i);
        }
        if (rc != 0)
            break;
        b->done++;
    }
    b->end = rc;
    return 0;
}

static int budget_root(void *arg)
{
    struct budget *b = arg;
    int status = -1;
    ASSERT(weft_spawn_ex(NULL, budget_loop, b,
                         &(weft_spawn_opts){.handle = &b->loop}) >= 0);
    ASSERT_EQ(weft_task_join(b->loop, &status), 0);
    ASSERT_EQ(status, 0);
    return 0;
}

static void budget_check(const struct budget *b)
{
    if (b->seen <= 0 || b->seen > WEFT__BUDGET)
        T_FAIL("the other task ran after %d calls, not 1 to %d", b->seen,
               WEFT__BUDGET);
    ASSERT_EQ(b->cancel, 0);
    ASSERT_EQ(b->end, -ECANCELED);
    ASSERT_EQ(b->done, b->seen); /* the call after the yield saw the cancel */
}

TEST(calls_that_never_wait_still_let_others_run)
{
    for (int clock = 0; clock < 2; clock++) {
        struct budget b = {.fd = {-1, -1}};
        ASSERT_EQ(weft_chan_new(&b.c, sizeof(int), BUDGET_CALLS), 0);
        ASSERT_EQ(t_run(1, clock ? WEFT_CLOCK_VIRTUAL : WEFT_CLOCK_MONOTONIC, 0,
                        budget_root, &b),
                  0);
        budget_check(&b);
        /* Nothing lost, nothing twice: the values sent, in order. */
        ASSERT_EQ(weft_chan_len(b.c), (size_t)b.done);
        for (int i = 0; i < b.done; i++) {
            int v = -1;
            ASSERT_EQ(weft_chan_try_recv(b.c, &v), 0);
            ASSERT_EQ(v, i);
        }
        ASSERT_EQ(weft_chan_try_recv(b.c, &(int){0}), -EAGAIN);
        ASSERT_EQ(weft_chan_unref(b.c), 0);
    }
}

TEST(reads_that_never_wait_still_let_others_run)
{
    struct budget b;
    char bytes[BUDGET_CALLS] = {0};
    memset(&b, 0, sizeof b);
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, b.fd), 0);
    ASSERT_EQ(write(b.fd[1], bytes, sizeof bytes), (ssize_t)sizeof bytes);
    ASSERT_EQ(t_run(1, WEFT_CLOCK_MONOTONIC, 0, budget_root, &b), 0);
    budget_check(&b);
    /* The bytes not read are still there. */
    int left = 0;
    ASSERT_EQ(ioctl(b.fd[0], FIONREAD, &left), 0);
    ASSERT_EQ(left, BUDGET_CALLS - b.done);
    close(b.fd[0]);
    close(b.fd[1]);
}

/* ---- cross-worker wake-up storms --------------------------------------- */

#define STORM_K 8

struct group {
    _Atomic(weft_scope *) s; /* published once open */
};

struct storm {
    int m;
    struct group *g;
    atomic_long sleeper_cancelled, sleeper_wrong;
    atomic_int join_cancelled, cancels_ok, groups_done;
    atomic_int worker_seen[4];
};
static struct storm storm;

static int storm_sleeper(void *arg)
{
    (void)arg;
    int r = weft_sleep_for(3600 * WEFT_SEC);
    if (r == -ECANCELED)
        atomic_fetch_add(&storm.sleeper_cancelled, 1);
    else
        atomic_fetch_add(&storm.sleeper_wrong, 1);
    return r;
}

static void storm_cancel(int g)
{
    weft_scope *s;
    while ((s = atomic_load(&storm.g[g].s)) == NULL)
        ASSERT_EQ(weft_yield(), 0);
    if (weft_scope_cancel(s) == 0)
        atomic_fetch_add(&storm.cancels_ok, 1);
}

static int storm_group(void *arg)
{
    int g = (int)(intptr_t)arg;
    atomic_store(&storm.worker_seen[weft_worker_id()], 1);
    weft_scope *s;
    weft_scope_opts o = {.policy = WEFT_COLLECT};
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    for (int i = 0; i < STORM_K; i++)
        ASSERT(weft_spawn(s, storm_sleeper, NULL) >= 0);
    atomic_store(&storm.g[g].s, s);
    /* Only group (g-1)/2 cancels s; then s's owner joins and frees it
     * while the canceller may still be returning from the call. */
    if (weft_scope_join(s) == -ECANCELED)
        atomic_fetch_add(&storm.join_cancelled, 1);
    ASSERT_EQ(weft_scope_failed(s), STORM_K);
    ASSERT_EQ(weft_scope_free(s), 0);
    for (int c = 2 * g + 1; c <= 2 * g + 2 && c < storm.m; c++)
        storm_cancel(c);
    atomic_fetch_add(&storm.groups_done, 1);
    return 0;
}

static int storm_root(void *arg)
{
    (void)arg;
    for (int g = 0; g < storm.m; g++)
        ASSERT(weft_spawn(NULL, storm_group, (void *)(intptr_t)g) >= 0);
    storm_cancel(0);
    return 0;
}

TEST(cross_worker_cancel_tree_storm)
{
    storm.m = (int)(T_LIVE(4000 * (STORM_K + 1)) / (STORM_K + 1));
    storm.g = calloc((size_t)storm.m, sizeof *storm.g);
    ASSERT(storm.g != NULL);
    ASSERT_EQ(t_run(4, WEFT_CLOCK_MONOTONIC, 0, storm_root, NULL), 0);
    ASSERT_EQ(atomic_load(&storm.groups_done), storm.m);
    ASSERT_EQ(atomic_load(&storm.join_cancelled), storm.m);
    ASSERT_EQ(atomic_load(&storm.cancels_ok), storm.m);
    ASSERT_EQ(atomic_load(&storm.sleeper_cancelled), (long)storm.m * STORM_K);
    ASSERT_EQ(atomic_load(&storm.sleeper_wrong), 0);
    int seen = 0;
    for (int i = 0; i < 4; i++)
        seen += atomic_load(&storm.worker_seen[i]);
    /* The storm really crossed workers (idle workers steal only work that
     * waits; at a tiny scale, say 1% under valgrind, there may be none). */
    if (T_SCALE(100) >= 10)
        ASSERT(seen >= 2);
    free(storm.g);
}

/* Many tasks on 4 workers cancel the same scope at once while its sleepers
 * park and wake: every cancel succeeds (idempotent), every sleeper returns
 * -ECANCELED exactly once. Repeated for several rounds. */
struct race {
    weft_scope *target;
    atomic_long woke, wrong, cancels;
    atomic_int turn;
};

static int race_sleeper(void *arg)
{
    struct race *r = arg;
    int rc = weft_sleep_for(3600 * WEFT_SEC);
    atomic_fetch_add(rc == -ECANCELED ? &r->woke : &r->wrong, 1);
    return 0;
}

static int race_canceller(void *arg)
{
    struct race *r = arg;
    int n = atomic_fetch_add(&r->turn, 1) % 7;
    for (int i = 0; i < n; i++)
        weft_yield();
    if (weft_scope_cancel(r->target) == 0)
        atomic_fetch_add(&r->cancels, 1);
    return 0;
}

static int race_root(void *arg)
{
    long *totals = arg;
    int sleepers = (int)T_LIVE(2000), cancellers = 64;
    for (int round = 0; round < 20; round++) {
        struct race r = {0};
        weft_scope *s, *c;
        weft_scope_opts o = {.policy = WEFT_COLLECT};
        ASSERT_EQ(weft_scope_open(&s, &o), 0);
        r.target = s;
        for (int i = 0; i < sleepers; i++)
            ASSERT(weft_spawn(s, race_sleeper, &r) >= 0);
        /* The cancellers' scope is nested in s but shielded, so spawning
         * into it keeps working after the first cancel, and s outlives
         * every cancel call. */
        weft_scope_opts so = {.policy = WEFT_COLLECT, .shield = 1};
        ASSERT_EQ(weft_scope_open(&c, &so), 0);
        for (int i = 0; i < cancellers; i++)
            ASSERT(weft_spawn(c, race_canceller, &r) >= 0);
        ASSERT_EQ(weft_scope_join(c), 0);
        ASSERT_EQ(weft_scope_free(c), 0);
        ASSERT_EQ(weft_scope_join(s), -ECANCELED);
        ASSERT_EQ(weft_scope_free(s), 0);
        ASSERT_EQ(atomic_load(&r.woke), sleepers);
        ASSERT_EQ(atomic_load(&r.wrong), 0);
        ASSERT_EQ(atomic_load(&r.cancels), cancellers);
        totals[0] += atomic_load(&r.woke);
    }
    return 0;
}

TEST(cross_worker_concurrent_cancels_of_one_scope)
{
    long total = 0;
    ASSERT_EQ(t_run(4, WEFT_CLOCK_MONOTONIC, 0, race_root, &total), 0);
    ASSERT_EQ(total, 20 * T_LIVE(2000));
}

/* Ping-pong across workers through scopes: two tasks, each in turn opens a
 * scope, publishes it and sleeps in it until the other cancels it. */
struct pingpong {
    _Atomic(weft_scope *) slot[2];
    atomic_int rounds[2];
    int n;
};

static int pp_player(void *arg)
{
    struct pingpong *p = (struct pingpong *)((uintptr_t)arg & ~(uintptr_t)1);
    int me = (int)((uintptr_t)arg & 1), other = !me;
    for (int i = 0; i < p->n; i++) {
        weft_scope *s;
        ASSERT_EQ(weft_scope_open(&s, NULL), 0);
        atomic_store(&p->slot[me], s);
        ASSERT_EQ(weft_sleep_for(3600 * WEFT_SEC), -ECANCELED);
        /* Player 0 cancels player 1's round i; player 1 cancels player
         * 0's round i + 1, if there is one. */
        if (me == 0 || i + 1 < p->n) {
            weft_scope *o;
            while ((o = atomic_exchange(&p->slot[other], NULL)) == NULL)
                ASSERT_EQ(weft_yield(), 0);
            ASSERT_EQ(weft_scope_cancel(o), 0);
        }
        ASSERT_EQ(weft_scope_join(s), -ECANCELED);
        ASSERT_EQ(weft_scope_free(s), 0);
        atomic_fetch_add(&p->rounds[me], 1);
    }
    return 0;
}

static int pp_root(void *arg)
{
    struct pingpong *p = arg;
    ASSERT(weft_spawn(NULL, pp_player, (void *)((uintptr_t)p | 0)) >= 0);
    ASSERT(weft_spawn(NULL, pp_player, (void *)((uintptr_t)p | 1)) >= 0);
    /* Kick off: cancel player 0's first scope. */
    weft_scope *o;
    while ((o = atomic_exchange(&p->slot[0], NULL)) == NULL)
        ASSERT_EQ(weft_yield(), 0);
    ASSERT_EQ(weft_scope_cancel(o), 0);
    return 0;
}

TEST(cross_worker_pingpong_through_cancellation)
{
    static struct pingpong p;
    p.n = (int)T_SCALE(2000);
    ASSERT_EQ(t_run(4, WEFT_CLOCK_MONOTONIC, 0, pp_root, &p), 0);
    ASSERT_EQ(atomic_load(&p.rounds[0]), p.n);
    ASSERT_EQ(atomic_load(&p.rounds[1]), p.n);
}

/* ---- a million blocked tasks ------------------------------------------- */

struct million {
    long n;
    atomic_long blocked, woke, wrong;
};

static int million_task(void *arg)
{
    struct million *m = arg;
    atomic_fetch_add(&m->blocked, 1);
    int r = weft_sleep_until(WEFT_SEC);
    /* Nobody wakes before every task has blocked. */
    if (r != 0 || weft_now() != WEFT_SEC || atomic_load(&m->blocked) != m->n)
        atomic_fetch_add(&m->wrong, 1);
    atomic_fetch_add(&m->woke, 1);
    return 0;
}

static int million_root(void *arg)
{
    struct million *m = arg;
    weft_scope *s;
    weft_scope_opts o = {.policy = WEFT_COLLECT};
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    for (long i = 0; i < m->n; i++)
        ASSERT_EQ(weft_spawn(s, million_task, m), i);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_spawned(s), m->n);
    ASSERT_EQ(weft_scope_failed(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    return 0;
}

TEST(one_million_blocked_tasks)
{
    static struct million m;
    m.n = T_LIVE(1000000);
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 0, million_root, &m), 0);
    ASSERT_EQ(atomic_load(&m.blocked), m.n);
    ASSERT_EQ(atomic_load(&m.woke), m.n);
    ASSERT_EQ(atomic_load(&m.wrong), 0);
}

/* The same on 2 workers, released by cancelling the scope. */
static int million_cancel_task(void *arg)
{
    struct million *m = arg;
    atomic_fetch_add(&m->blocked, 1);
    int r = weft_sleep_for(1000L * 86400 * WEFT_SEC);
    if (r != -ECANCELED || weft_now() != WEFT_SEC)
        atomic_fetch_add(&m->wrong, 1);
    atomic_fetch_add(&m->woke, 1);
    return 0;
}

static int million_cancel_root(void *arg)
{
    struct million *m = arg;
    weft_scope *s;
    weft_scope_opts o = {.policy = WEFT_COLLECT};
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    for (long i = 0; i < m->n; i++)
        ASSERT(weft_spawn(s, million_cancel_task, m) >= 0);
    /* The clock reaches 1 s only once every task is parked. */
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(atomic_load(&m->blocked), m->n);
    ASSERT_EQ(atomic_load(&m->woke), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(many_blocked_tasks_released_by_cancel_2_workers)
{
    static struct million m;
    m.n = T_LIVE(250000);
    ASSERT_EQ(t_run(2, WEFT_CLOCK_VIRTUAL, 0, million_cancel_root, &m), 0);
    ASSERT_EQ(atomic_load(&m.woke), m.n);
    ASSERT_EQ(atomic_load(&m.wrong), 0);
}

/* ---- children that count their runs ---------------------------------- */

/* n children, child i (its argument) adds 1 to ran[i]: every one must
 * run, and exactly once. */
struct tally {
    long n;
    atomic_uchar *ran;
    atomic_long finished;
};

static struct tally *tally_cur;

static int tally_leaf(void *arg)
{
    long i = (long)(intptr_t)arg;
    atomic_fetch_add(&tally_cur->ran[i], 1);
    atomic_fetch_add(&tally_cur->finished, 1);
    return 0;
}

static void tally_start(struct tally *t, long n)
{
    t->n = n;
    t->ran = calloc((size_t)n, 1);
    ASSERT(t->ran != NULL);
    atomic_store(&t->finished, 0);
    tally_cur = t;
}

/* Spawned and not finished yet, after `spawned` spawns. */
static long tally_waiting(struct tally *t, long spawned)
{
    return spawned - atomic_load(&t->finished);
}

static void tally_check(struct tally *t)
{
    ASSERT_EQ(atomic_load(&t->finished), t->n);
    for (long i = 0; i < t->n; i++)
        if (atomic_load(&t->ran[i]) != 1)
            T_FAIL("child %ld ran %d times", i, (int)atomic_load(&t->ran[i]));
    free(t->ran);
}

/* ---- spawn-heavy loops --------------------------------------------------- */

struct heavy {
    struct tally t;
    long max_outstanding;
};

static int heavy_spawner(void *arg)
{
    struct heavy *h = arg;
    weft_scope *s = scope_open();
    for (long i = 0; i < h->t.n; i++) {
        ASSERT_EQ(weft_spawn(s, tally_leaf, (void *)(intptr_t)i), i);
        long out = tally_waiting(&h->t, i + 1);
        if (out > h->max_outstanding)
            h->max_outstanding = out;
    }
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_spawned(s), h->t.n);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

static int heavy_root(void *arg)
{
    /* The spawner is a task of its own, not the root. */
    ASSERT(weft_spawn(NULL, heavy_spawner, arg) >= 0);
    return 0;
}

static void heavy_run(int workers)
{
    static struct heavy h;
    tally_start(&h.t, T_SCALE(200000));
    h.max_outstanding = 0;
    ASSERT_EQ(t_run(workers, WEFT_CLOCK_MONOTONIC, 0, heavy_root, &h), 0);
    /* Spawning yields every so often: children ran during the loop. */
    if (workers == 1 && h.max_outstanding > h.t.n / 2)
        T_FAIL("%ld children waited to start", h.max_outstanding);
    tally_check(&h.t);
}

TEST(spawn_heavy_loop_one_worker)
{
    heavy_run(1);
}

TEST(spawn_heavy_loop_four_workers)
{
    heavy_run(4);
}

/* ---- a deque that outgrows its first buffer ---- */

/* A spawner that a partner keeps waking through a rendezvous channel
 * spawns fewer children between two switches than the spawn budget: it
 * never has to yield, and the worker takes a not-started task only every
 * few decisions, so its deque holds more tasks than its first buffer
 * (256) and is copied into larger ones. With 2 workers, the other one
 * steals from it meanwhile: whether it still grows then depends on the
 * thief's timing, and every child must run exactly once either way. */
#define GROW_PER_TRIP 20

struct grow {
    struct tally t;
    weft_chan *ping, *pong;
    long max_waiting; /* spawned and not finished, the most seen */
};

static int grow_partner(void *arg)
{
    struct grow *g = arg;
    int v;
    while (weft_chan_recv(g->ping, &v) == 0)
        ASSERT_EQ(weft_chan_send(g->pong, &v), 0);
    return 0;
}

static int grow_root(void *arg)
{
    struct grow *g = arg;
    weft_scope *s = scope_open();
    ASSERT(weft_spawn(s, grow_partner, g) >= 0);
    long i = 0;
    while (i < g->t.n) {
        for (int k = 0; k < GROW_PER_TRIP && i < g->t.n; k++, i++)
            ASSERT(weft_spawn(s, tally_leaf, (void *)(intptr_t)i) >= 0);
        long waiting = tally_waiting(&g->t, i);
        if (waiting > g->max_waiting)
            g->max_waiting = waiting;
        int v = (int)i, back = -1;
        ASSERT_EQ(weft_chan_send(g->ping, &v), 0);
        ASSERT_EQ(weft_chan_recv(g->pong, &back), 0);
        ASSERT_EQ(back, v);
    }
    ASSERT_EQ(weft_chan_close(g->ping), 0);
    scope_end(s);
    return 0;
}

static void grow_run(int workers)
{
    static struct grow g;
    tally_start(&g.t, 4000);
    g.max_waiting = 0;
    ASSERT_EQ(weft_chan_new(&g.ping, sizeof(int), 0), 0);
    ASSERT_EQ(weft_chan_new(&g.pong, sizeof(int), 0), 0);
    ASSERT_EQ(t_run(workers, WEFT_CLOCK_MONOTONIC, 0, grow_root, &g), 0);
    /* One worker: every child spawned and not finished waited in the
     * deque, not started, so it held more than its first buffer. */
    if (workers == 1 && g.max_waiting <= 256)
        T_FAIL("at most %ld children waited: the deque never grew",
               g.max_waiting);
    ASSERT_EQ(weft_chan_unref(g.ping), 0);
    ASSERT_EQ(weft_chan_unref(g.pong), 0);
    tally_check(&g.t);
}

TEST(a_deque_outgrows_its_first_buffer_one_worker)
{
    grow_run(1);
}

TEST(a_deque_outgrows_its_first_buffer_two_workers)
{
    grow_run(2);
}

/* ---- one stack slot, many tasks in turn ---- */

static int turn_child(void *arg)
{
    long *ran = arg;
    (*ran)++;
    return 0;
}

static int turn_root(void *arg)
{
    long *ran = arg;
    /* Unscaled: a million tasks run one after another on a reused slot
     * and, under TSan, on the slot's one fiber, whose shadow stack each
     * finished task must leave as it found it (one frame left behind per
     * task overran it before this loop's end). */
    for (long i = 0; i < 1000000; i++) {
        weft_scope *s;
        ASSERT_EQ(weft_scope_open(&s, NULL), 0);
        ASSERT(weft_spawn(s, turn_child, ran) >= 0);
        ASSERT_EQ(weft_scope_join(s), 0);
        ASSERT_EQ(weft_scope_free(s), 0);
        ASSERT_EQ(*ran, i + 1);
    }
    return 0;
}

TEST(a_slot_serves_a_million_tasks_in_turn)
{
    long ran = 0;
    ASSERT_EQ(t_run_mono(1, turn_root, &ran), 0);
    ASSERT_EQ(ran, 1000000);
}

/* ---- placement: weft_spawn_opts.worker ------------------------------- */

#define PIN_PER_WORKER 50

struct pin {
    atomic_int wrong;   /* tasks that started elsewhere than asked */
    atomic_int started; /* pinned tasks that have started */
    atomic_int hold;    /* worker 0's blocker spins while this is set */
};

static int pinned_task(void *arg)
{
    struct pin *p = arg;
    int want = (int)(intptr_t)weft_task_name()[0] - '0';
    if (weft_worker_id() != want)
        atomic_fetch_add(&p->wrong, 1);
    atomic_fetch_add(&p->started, 1);
    /* Block and wake again: a started task stays where it is. */
    ASSERT_EQ(weft_sleep_for(WEFT_USEC), 0);
    if (weft_worker_id() != want)
        atomic_fetch_add(&p->wrong, 1);
    return 0;
}

static int blocker(void *arg)
{
    struct pin *p = arg;
    while (atomic_load(&p->hold))
        ; /* keeps worker 0 busy without a scheduling point */
    return 0;
}

/* Waits (yielding) until the blocker has held worker 0 for many steal
 * rounds of the idle workers, checking that no task pinned there started
 * elsewhere, then releases it. */
static int releaser(void *arg)
{
    struct pin *p = arg;
    int64_t t0 = t_real_ns();
    do {
        ASSERT_EQ(atomic_load(&p->started), 0);
        weft_yield();
    } while (t_real_ns() - t0 < 5 * WEFT_MSEC);
    atomic_store(&p->hold, 0);
    return 0;
}

static const char *const pin_names[] = {"0", "1", "2", "3"};

static int pin_root(void *arg)
{
    struct pin *p = arg;
    int n = weft_workers();
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int k = 0; k < PIN_PER_WORKER; k++)
        for (int i = 0; i < n; i++) {
            weft_spawn_opts o = {.name = pin_names[i], .worker = i + 1};
            ASSERT(weft_spawn_ex(s, pinned_task, p, &o) >= 0);
        }
    /* Out of range: nothing spawned. */
    weft_spawn_opts bad = {.worker = n + 1};
    ASSERT_EQ(weft_spawn_ex(s, pinned_task, p, &bad), -EINVAL);
    bad.worker = -1;
    ASSERT_EQ(weft_spawn_ex(s, pinned_task, p, &bad), -EINVAL);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_spawned(s), n * PIN_PER_WORKER);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(atomic_load(&p->started), n * PIN_PER_WORKER);
    ASSERT_EQ(atomic_load(&p->wrong), 0);

    /* Pinned tasks wait for their worker even while it is stuck in a long
     * task and another is idle: nobody steals them. A releaser on worker
     * 1 lets the blocker on worker 0 go after a while. */
    if (n < 2)
        return 0;
    atomic_store(&p->started, 0);
    atomic_store(&p->hold, 1);
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    /* The releaser first: spawning yields now and then, and the blocker
     * would keep the spawning loop from going on. */
    weft_spawn_opts r = {.worker = 2};
    ASSERT(weft_spawn_ex(s, releaser, p, &r) >= 0);
    weft_spawn_opts b = {.worker = 1};
    ASSERT(weft_spawn_ex(s, blocker, p, &b) >= 0);
    for (int k = 0; k < PIN_PER_WORKER; k++) {
        weft_spawn_opts o = {.name = pin_names[0], .worker = 1};
        ASSERT(weft_spawn_ex(s, pinned_task, p, &o) >= 0);
    }
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(atomic_load(&p->started), PIN_PER_WORKER);
    ASSERT_EQ(atomic_load(&p->wrong), 0);
    return 0;
}

TEST(spawn_on_a_worker)
{
    for (int workers = 1; workers <= 4; workers *= 2) {
        struct pin p = {0};
        ASSERT_EQ(t_run_mono(workers, pin_root, &p), 0);
    }
}

/* ---- who steals from whom -------------------------------------------- */

/* A thief takes a task not started yet from a worker that makes no
 * progress only if that worker is stuck for real: its thread runs a long
 * task, or sleeps in the kernel. A worker whose thread is merely not
 * running (descheduled on a loaded machine) keeps its tasks, so a chatty
 * pair it spawned is not split across cores. The scenes run on worker 1
 * (index 1), a fresh thread whose CPU and policy a test may change. */

struct place {
    atomic_int where[2]; /* worker of each task, -1 before it ran */
    atomic_int hog_on, hog_stop;
    int cpu; /* the CPU the scene's worker and the hog share */
    int pipe[2];
    bool skipped; /* the machine would not let us deschedule a thread */
    bool slow;    /* the spawner used too much CPU here for the premise */
};

static int noop_task(void *arg)
{
    (void)arg;
    return 0;
}

#define PAIR_ROUNDS 100

struct pair_end {
    struct place *p;
    int idx;
    weft_chan *ping, *pong;
};

static int pair_task(void *arg)
{
    struct pair_end *e = arg;
    atomic_store(&e->p->where[e->idx], weft_worker_id());
    for (int i = 0; i < PAIR_ROUNDS; i++) {
        int v = i;
        if (e->idx == 0) {
            ASSERT_EQ(weft_chan_send(e->ping, &v), 0);
            ASSERT_EQ(weft_chan_recv(e->pong, &v), 0);
            ASSERT_EQ(v, i + 1);
        } else {
            ASSERT_EQ(weft_chan_recv(e->ping, &v), 0);
            ASSERT_EQ(v, i);
            v++;
            ASSERT_EQ(weft_chan_send(e->pong, &v), 0);
        }
    }
    return 0;
}

static void *hog_thread(void *arg)
{
    struct place *p = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(p->cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        return NULL;
    atomic_store(&p->hog_on, 1);
    while (!atomic_load_explicit(&p->hog_stop, memory_order_relaxed))
        ;
    return NULL;
}

/* The spawner: on one CPU with a busy thread, at SCHED_IDLE priority, so
 * that each sched_yield gives that CPU to the hog for a while (ticks, not
 * microseconds) while this thread stays runnable: a preempted thread. It
 * spawns the pair, then is descheduled before it gets to them. */
static int descheduled_spawner(void *arg)
{
    struct place *p = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    p->cpu = 0;
    while (!CPU_ISSET(p->cpu, &set))
        p->cpu++;
    CPU_ZERO(&set);
    CPU_SET(p->cpu, &set);
    struct sched_param sp = {0};
    if (sched_setaffinity(0, sizeof set, &set) != 0 ||
        sched_setscheduler(0, SCHED_IDLE, &sp) != 0) {
        p->skipped = true;
        return 0;
    }
    pthread_t hog;
    ASSERT_EQ(pthread_create(&hog, NULL, hog_thread, p), 0);
    while (!atomic_load(&p->hog_on))
        sched_yield(); /* lets the hog start on our CPU */

    /* Warm the worker's task slots (fresh stack pages fault in) and see
     * what a spawn costs here: the test's premise is that spawning the
     * pair takes far less CPU than the stuck rule's 250 us. Under a
     * sanitizer or an emulator it may not; then where the pair runs is
     * not asserted, only that it runs. */
    int64_t c0 = t_thread_cpu_ns();
    for (int i = 0; i < 2; i++) {
        weft_scope *w;
        ASSERT_EQ(weft_scope_open(&w, NULL), 0);
        for (int k = 0; k < 2; k++)
            ASSERT(weft_spawn(w, noop_task, NULL) >= 0);
        ASSERT_EQ(weft_scope_join(w), 0);
        ASSERT_EQ(weft_scope_free(w), 0);
    }
    p->slow = (t_thread_cpu_ns() - c0) / 4 > 20 * WEFT_USEC; /* a spawn */

    weft_chan *ping, *pong;
    ASSERT_EQ(weft_chan_new(&ping, sizeof(int), 0), 0);
    ASSERT_EQ(weft_chan_new(&pong, sizeof(int), 0), 0);
    struct pair_end ends[2] = {{p, 0, ping, pong}, {p, 1, ping, pong}};
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    c0 = t_thread_cpu_ns();
    ASSERT(weft_spawn(s, pair_task, &ends[0]) >= 0);
    ASSERT(weft_spawn(s, pair_task, &ends[1]) >= 0);
    for (int i = 0; i < 3; i++)
        sched_yield(); /* descheduled, runnable: state R, no CPU used */
    /* The premise again: a thread that the kernel counts 250 us of CPU
     * without progress (the stuck rule's STUCK_CPU_NS) is stuck, and its
     * tasks may rightly be taken. On a shared VM a thread's CPU clock
     * can run while its virtual CPU waits for the host. */
    if (t_thread_cpu_ns() - c0 >= 200 * WEFT_USEC)
        p->slow = true;
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    weft_chan_unref(ping);
    weft_chan_unref(pong);
    atomic_store(&p->hog_stop, 1);
    ASSERT_EQ(pthread_join(hog, NULL), 0);
    return 0;
}

static int on_worker_1(weft_fn fn, void *arg)
{
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    weft_spawn_opts o = {.name = "scene", .worker = 2};
    ASSERT(weft_spawn_ex(s, fn, arg, &o) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

static int descheduled_root(void *arg)
{
    return on_worker_1(descheduled_spawner, arg);
}

TEST(chatty_pair_stays_together_while_its_worker_is_descheduled)
{
    int rounds = T_SCALE(10) > 0 ? T_SCALE(10) : 1;
    for (int r = 0; r < rounds; r++) {
        struct place p = {.where = {-1, -1}};
        ASSERT_EQ(t_run_mono(2, descheduled_root, &p), 0);
        if (p.skipped) {
            fprintf(stderr, "skipped: cannot pin a thread or make it "
                            "SCHED_IDLE here\n");
            return;
        }
        ASSERT(atomic_load(&p.where[0]) >= 0);
        ASSERT(atomic_load(&p.where[1]) >= 0);
        if (p.slow) {
            fprintf(stderr,
                    "round %d: the spawner used CPU enough for "
                    "the stuck rule; placement not asserted\n",
                    r);
            continue; /* see descheduled_spawner */
        }
        ASSERT_EQ(atomic_load(&p.where[0]), 1);
        ASSERT_EQ(atomic_load(&p.where[1]), 1);
    }
}

static int note_worker(void *arg)
{
    struct place *p = arg;
    atomic_store(&p->where[0], weft_worker_id());
    if (p->pipe[1] >= 0) {
        char c = 1;
        ASSERT_EQ(write(p->pipe[1], &c, 1), 1);
    }
    return 0;
}

/* Spawns a task, then holds its worker's thread without parking: running
 * (a CPU loop until the task has run elsewhere, at most a minute of CPU)
 * or blocked in the kernel (poll on a pipe the task writes to). */
static int holding_spawner(void *arg)
{
    struct place *p = arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, note_worker, p) >= 0);
    if (p->pipe[0] < 0) {
        int64_t t0 = t_thread_cpu_ns();
        while (atomic_load(&p->where[0]) < 0)
            ASSERT(t_thread_cpu_ns() - t0 < 60 * WEFT_SEC);
    } else {
        struct pollfd pfd = {.fd = p->pipe[0], .events = POLLIN};
        ASSERT_EQ(poll(&pfd, 1, 60 * 1000), 1); /* not weft_poll: blocks */
    }
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

static int holding_root(void *arg)
{
    return on_worker_1(holding_spawner, arg);
}

TEST(stuck_worker_is_robbed_running_or_blocked)
{
    struct place p = {.where = {-1, -1}, .pipe = {-1, -1}};
    ASSERT_EQ(t_run_mono(2, holding_root, &p), 0);
    ASSERT_EQ(atomic_load(&p.where[0]), 0);

    struct place q = {.where = {-1, -1}};
    ASSERT_EQ(pipe(q.pipe), 0);
    ASSERT_EQ(t_run_mono(2, holding_root, &q), 0);
    ASSERT_EQ(atomic_load(&q.where[0]), 0);
    close(q.pipe[0]);
    close(q.pipe[1]);
}

/* ---- an idle worker beside a spawner sleeps ------------------------- */

static int do_nothing(void *arg)
{
    (void)arg;
    return 0;
}

/* Spawns children that do nothing, 100 ms long, on worker 0: its queue
 * stays short and young, so worker 1's stealing rules leave it there.
 * *arg: worker 1's idle time over the run, in percent. */
static int busy_spawner(void *arg)
{
    int *idle_pct = arg;
    weft_worker_stats ws0[2], ws1[2];
    weft_stats st;
    ASSERT_EQ(weft_stats_get(&st, ws0, 2), 2);
    int64_t t0 = t_real_ns(), t1;
    weft_scope *s = scope_open();
    do {
        for (int i = 0; i < 16; i++)
            ASSERT(weft_spawn(s, do_nothing, NULL) >= 0);
        t1 = t_real_ns();
    } while (t1 - t0 < 100 * WEFT_MSEC);
    scope_end(s);
    ASSERT_EQ(weft_stats_get(&st, ws1, 2), 2);
    *idle_pct =
        (int)((ws1[1].idle_ns - ws0[1].idle_ns) * 100 / (uint64_t)(t1 - t0));
    return 0;
}

static int busy_spawner_root(void *arg)
{
    weft_scope *s = scope_open();
    weft_spawn_opts o = {.name = "spawner", .worker = 1};
    ASSERT(weft_spawn_ex(s, busy_spawner, arg, &o) >= 0);
    scope_end(s);
    return 0;
}

/* The idle worker sleeps between looks (weft__nap_deferring), instead of
 * spinning for as long as the spawner has a task queued: asleep for most
 * of the run (93-96% here), where it used to be asleep for almost none of
 * it. Under TSan a spawn makes a TSan fiber (gcc 12: milliseconds, see
 * T_LIVE), so the spawner's tasks wait long enough to be worth stealing
 * and worker 1 rightly runs some of them: asleep 21-33% of the run with
 * gcc's on a slow day, still far from none. */
TEST(idle_worker_beside_a_spawner_sleeps)
{
#if defined(WEFT_TSAN)
    const int want = 10;
#else
    const int want = 40;
#endif
    int idle_pct = -1;
    ASSERT_EQ(t_run_mono(2, busy_spawner_root, &idle_pct), 0);
    fprintf(stderr, "worker 1 asleep %d%% of the run\n", idle_pct);
    ASSERT(idle_pct >= want);
}
