/* SPDX-License-Identifier: MIT */
/*
 * Tasks and actors that move between workers: a movable task goes to the
 * worker of the task that keeps waking it, yielded movable tasks are
 * shared with an idle worker, an actor follows its traffic between two
 * messages, and a task that has not opted in (the default) never moves.
 * The stress test mixes them all on 2 to 4 workers; in a build with
 * asserts the scheduler checks at every resume that a task that may not
 * move runs on the worker where it started, and that no task is resumed
 * while it still runs or switches away elsewhere.
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

/* Tasks move only on x86-64 (weft.h, weft_spawn_opts.movable): elsewhere
 * the tests of moves are skipped, and those of tasks that stay run. */
#if defined(__x86_64__)
#define NEED_MOVES() ((void)0)
#else
#define NEED_MOVES() T_SKIP("tasks stay where they start on this architecture")
#endif

static uint64_t moved_total(void)
{
    weft_stats st;
    ASSERT(weft_stats_get(&st, NULL, 0) > 0);
    return st.all.moved;
}

/* ---- a pair that talks ends up on one worker ------------------------- */

struct pair {
    weft_chan *ping, *pong;
    int rounds;
    int movable;      /* the far task's weft_spawn_opts.movable */
    int first, end;   /* the far task's worker at its start and end */
    int changes;      /* times it found itself on another worker */
    bool deadline;    /* the far task waits with a deadline */
    const char *name; /* the far task's */
    bool call_for;    /* the far task talks inside weft_call_for */
};

/* Pinned to worker 0: answers each ping. */
static int pair_near(void *arg)
{
    struct pair *p = arg;
    for (int i = 0; i < p->rounds; i++) {
        int v;
        ASSERT_EQ(weft_chan_recv(p->ping, &v), 0);
        ASSERT_EQ(weft_worker_id(), 0);
        v++;
        ASSERT_EQ(weft_chan_send(p->pong, &v), 0);
    }
    return 0;
}

/* The far task's talk: pings the near task and waits for each answer. */
static int pair_far_talk(void *arg)
{
    struct pair *p = arg;
    int at = weft_worker_id();
    p->first = at;
    for (int i = 0; i < p->rounds; i++) {
        int v = i, r = -1;
        ASSERT_EQ(weft_chan_send(p->ping, &v), 0);
        if (p->deadline)
            ASSERT_EQ(
                weft_chan_recv_until(p->pong, &r, weft_now() + 60 * WEFT_SEC),
                0);
        else
            ASSERT_EQ(weft_chan_recv(p->pong, &r), 0);
        ASSERT_EQ(r, i + 1);
        int now = weft_worker_id();
        if (now != at) {
            p->changes++;
            at = now;
        }
        if (p->movable <= 0) /* the default: it never moves */
            ASSERT_EQ(now, p->first);
    }
    p->end = at;
    return 0;
}

/* Started on worker 1 (spawned there by far_spawner): pings the near
 * task and waits for each answer, inside a weft_call_for that arms no
 * deadline (WEFT_NEVER), if asked: the task may move inside it. */
static int pair_far(void *arg)
{
    struct pair *p = arg;
    if (!p->call_for)
        return pair_far_talk(p);
    ASSERT_EQ(weft_call_for(pair_far_talk, p, WEFT_NEVER), 0);
    return 0;
}

static int far_spawner(void *arg)
{
    struct pair *p = arg;
    /* The child starts here, in this worker's queue (an idle worker 0
     * may take it before it starts: then there is nothing to move). */
    ASSERT(weft_spawn_ex(NULL, pair_far, p,
                         &(weft_spawn_opts){.movable = p->movable,
                                            .name = p->name}) >= 0);
    return 0;
}

static int pair_root(void *arg)
{
    struct pair *p = arg;
    ASSERT_EQ(weft_chan_new(&p->ping, sizeof(int), 0), 0);
    ASSERT_EQ(weft_chan_new(&p->pong, sizeof(int), 0), 0);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    uint64_t moved0 = moved_total();
    ASSERT(weft_spawn_ex(s, pair_near, p, &(weft_spawn_opts){.worker = 1}) >=
           0);
    ASSERT(weft_spawn_ex(s, far_spawner, p, &(weft_spawn_opts){.worker = 2}) >=
           0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    if (p->movable > 0) {
        /* It went to its waker's worker and stayed: one move at most. */
        ASSERT_EQ(p->end, 0);
        ASSERT(p->changes <= 1);
        if (p->first == 1)
            ASSERT(moved_total() > moved0);
    } else {
        ASSERT_EQ(p->end, p->first);
        ASSERT_EQ(p->changes, 0);
    }
    weft_chan_unref(p->ping);
    weft_chan_unref(p->pong);
    return 0;
}

TEST(movable_task_goes_to_its_waker)
{
    NEED_MOVES();
    for (int k = 0; k < 4; k++) {
        struct pair p = {.rounds = 200, .movable = 1, .deadline = k & 1};
        ASSERT_EQ(t_run_mono(2, pair_root, &p), 0);
    }
}

TEST(movable_task_moves_inside_call_for)
{
    NEED_MOVES();
    for (int k = 0; k < 4; k++) {
        struct pair p = {.rounds = 200, .movable = 1, .call_for = true};
        ASSERT_EQ(t_run_mono(2, pair_root, &p), 0);
    }
}

TEST(default_task_never_moves)
{
    for (int k = 0; k < 4; k++) {
        struct pair p = {.rounds = 200, .movable = k & 1 ? 0 : -1};
        ASSERT_EQ(t_run_mono(2, pair_root, &p), 0);
    }
}

/* A scope's movable is 0 or 1: -1 would read as "never" (a spawn's
 * -1), yet a scope cannot take its parent's choice back. */
static int scope_movable_values(void *arg)
{
    (void)arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.movable = -1}), -EINVAL);
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.movable = 2}), -EINVAL);
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.movable = 1}), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(scope_movable_is_0_or_1)
{
    ASSERT_EQ(t_run_mono(1, scope_movable_values, NULL), 0);
}

/* The instrument's hooks (and so the trace, which is built on them) see
 * a moved task on the worker it runs on now. */
struct seen_runs {
    atomic_int runs, wrong, on[2];
};

static void seen_run(void *ctx, const weft_task_info *t)
{
    struct seen_runs *sr = ctx;
    atomic_fetch_add(&sr->runs, 1);
    if (t->worker != weft_worker_id())
        atomic_fetch_add(&sr->wrong, 1);
    if (t->name && t->name[0] == 'f')
        atomic_fetch_add(&sr->on[t->worker & 1], 1);
}

TEST(instrument_follows_a_moved_task)
{
    NEED_MOVES();
    struct seen_runs sr = {0};
    weft_instrument in = {.ctx = &sr, .run = seen_run};
    struct pair p = {.rounds = 200, .movable = 1, .name = "far"};
    weft_config cfg = {.workers = 2, .instrument = &in};
    ASSERT_EQ(weft_run(&cfg, pair_root, &p), 0);
    ASSERT(atomic_load(&sr.runs) > 200);
    ASSERT_EQ(atomic_load(&sr.wrong), 0);
    /* It ran on worker 0 at the end, and on 1 before if it started there. */
    ASSERT(atomic_load(&sr.on[0]) > 0);
    ASSERT_EQ(p.end, 0);
    if (p.first == 1)
        ASSERT(atomic_load(&sr.on[1]) > 0);
}

/* ---- yielded movable tasks are shared with an idle worker ------------- */

struct burst {
    int n, slices;
    int movable;
    atomic_int started;
    atomic_int released;  /* the blocker has seen every task start */
    atomic_int ran_on[4]; /* slices run per worker after the start */
    atomic_int all_started;
    int first[256];
    unsigned sink[256];
};

/* Keeps worker 1 busy until every burst task has started on worker 0,
 * so that none is taken before it starts. */
static int burst_blocker(void *arg)
{
    struct burst *b = arg;
    while (atomic_load(&b->started) < b->n)
        ;
    atomic_store(&b->released, 1); /* this worker is free from now on */
    return 0;
}

static int burst_task(void *arg)
{
    struct burst *b = arg;
    int me = atomic_fetch_add(&b->started, 1);
    int first = weft_worker_id();
    b->first[me] = first;
    ASSERT_EQ(first, 0);
    /* Counted from the blocker's release: the worker it held may take a
     * share only from then on (its thread may even start late). */
    for (int i = 0; i < b->slices;) {
        unsigned x = 0;
        for (int k = 0; k < 2000; k++)
            x += (unsigned)k * (unsigned)i;
        b->sink[me % 256] += x; /* its own: the work is not optimised out */
        ASSERT_EQ(weft_yield(), 0);
        int w = weft_worker_id();
        if (b->movable <= 0)
            ASSERT_EQ(w, first);
        if (atomic_load(&b->released)) {
            atomic_fetch_add(&b->ran_on[w], 1);
            i++;
        }
    }
    return 0;
}

static int burst_spawner(void *arg)
{
    struct burst *b = arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.movable = b->movable}),
              0);
    for (int i = 0; i < b->n; i++)
        ASSERT(weft_spawn(s, burst_task, b) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

static int burst_root(void *arg)
{
    struct burst *b = arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn_ex(s, burst_blocker, b,
                         &(weft_spawn_opts){.worker = 2}) >= 0);
    ASSERT(weft_spawn_ex(s, burst_spawner, b,
                         &(weft_spawn_opts){.worker = 1}) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(yielding_movable_tasks_spread)
{
    NEED_MOVES();
    struct burst *b = calloc(1, sizeof(*b));
    b->n = 16;
    b->slices = (int)T_SCALE(2000);
    b->movable = 1;
    ASSERT_EQ(t_run_mono(2, burst_root, b), 0);
    /* All started on worker 0; worker 1, idle once its blocker ended,
     * was handed some. */
    ASSERT(atomic_load(&b->ran_on[1]) > 0);
    ASSERT_EQ(atomic_load(&b->ran_on[0]) + atomic_load(&b->ran_on[1]),
              b->n * b->slices);
    free(b);
}

TEST(yielding_default_tasks_stay)
{
    struct burst *b = calloc(1, sizeof(*b));
    b->n = 16;
    b->slices = (int)T_SCALE(500);
    b->movable = 0;
    ASSERT_EQ(t_run_mono(2, burst_root, b), 0);
    ASSERT_EQ(atomic_load(&b->ran_on[1]), 0);
    ASSERT_EQ(atomic_load(&b->ran_on[0]), b->n * b->slices);
    free(b);
}

/* ---- an actor follows its traffic ------------------------------------- */

struct act {
    long count;
    int asks;
    int pin;         /* the actor's weft_actor_opts.worker */
    int first, last; /* where it handled its first and last message */
    int changes;
    weft_actor *a;
    weft_scope *into; /* the actor's scope */
    int clients;      /* 0: one, on worker 0; n: on workers 0, 1, 0, ... */
};

static int act_fn(void *state, weft_actor_msg *m)
{
    struct act *s = state;
    int w = weft_worker_id();
    if (s->count == 0)
        s->first = w;
    else if (w != s->last)
        s->changes++;
    s->last = w;
    if (s->pin)
        ASSERT_EQ(w, s->pin - 1);
    s->count += *(const int *)m->data;
    return m->kind == WEFT_MSG_ASK ? weft_actor_reply(m, &s->count) : 0;
}

static int act_client(void *arg)
{
    struct act *s = arg;
    const int one = 1;
    long r;
    for (int i = 0; i < s->asks; i++)
        ASSERT_EQ(weft_actor_ask(s->a, &one, &r, WEFT_NEVER), 0);
    return 0;
}

/* Spawns the actor from worker 1 (so that it starts there, unless an
 * idle worker 0 takes it first). */
static int act_spawner(void *arg)
{
    struct act *s = arg;
    weft_actor_opts o = {.fn = act_fn,
                         .state = s,
                         .msg_size = sizeof(int),
                         .reply_size = sizeof(long),
                         .capacity = 8,
                         .name = "counter",
                         .worker = s->pin};
    ASSERT_EQ(weft_actor_spawn(s->into, &o, &s->a), 0);
    return 0;
}

static int act_root(void *arg)
{
    struct act *s = arg;
    weft_scope *as, *cs;
    ASSERT_EQ(weft_scope_open(&as, NULL), 0);
    s->into = as;
    weft_scope *sp;
    ASSERT_EQ(weft_scope_open(&sp, NULL), 0);
    ASSERT(weft_spawn_ex(sp, act_spawner, s, &(weft_spawn_opts){.worker = 2}) >=
           0);
    ASSERT_EQ(weft_scope_join(sp), 0);
    ASSERT_EQ(weft_scope_free(sp), 0);
    ASSERT_EQ(weft_scope_open(&cs, NULL), 0);
    for (int i = 0; i < (s->clients ? s->clients : 1); i++)
        ASSERT(weft_spawn_ex(cs, act_client, s,
                             &(weft_spawn_opts){.worker = 1 + i % 2}) >= 0);
    ASSERT_EQ(weft_scope_join(cs), 0);
    ASSERT_EQ(weft_scope_free(cs), 0);
    ASSERT_EQ(weft_actor_stop(s->a, WEFT_STOP_DRAIN), 0);
    ASSERT_EQ(weft_scope_join(as), 0);
    ASSERT_EQ(weft_scope_free(as), 0);
    weft_actor_unref(s->a);
    return 0;
}

TEST(actor_follows_its_client)
{
    NEED_MOVES();
    for (int k = 0; k < 4; k++) {
        struct act s = {.asks = 300};
        ASSERT_EQ(t_run_mono(2, act_root, &s), 0);
        ASSERT_EQ(s.count, s.asks);
        /* With its one client, on worker 0; what it did, if not. */
        if (s.last != 0 || s.changes > 1)
            T_FAIL("round %d: the actor handled its first message on worker "
                   "%d, its last on %d, and changed workers %d times",
                   k, s.first, s.last, s.changes);
    }
}

TEST(pinned_actor_stays)
{
    for (int k = 0; k < 2; k++) {
        struct act s = {.asks = 300, .pin = 2};
        ASSERT_EQ(t_run_mono(2, act_root, &s), 0);
        ASSERT_EQ(s.count, s.asks);
        ASSERT_EQ(s.first, 1);
        ASSERT_EQ(s.changes, 0);
    }
}

/* ---- an actor asked from every worker does not bounce ----------------- */

TEST(actor_asked_from_everywhere_stays)
{
    NEED_MOVES();
    struct act s = {.asks = (int)T_SCALE(2000), .clients = 4};
    ASSERT_EQ(t_run_mono(2, act_root, &s), 0);
    ASSERT_EQ(s.count, 4L * s.asks);
    /* Two clients on each worker: a streak of 16 wakes from one side is
     * rare; a move every message or so would be bouncing. */
    ASSERT(s.changes <= 4 * s.asks / 64 + 2);
}

/* ---- stress: everything at once, 2 to 4 workers ----------------------- */

#define S_PAIRS 12
#define S_ACTORS 3

struct stress {
    int workers;
    int rounds;
    weft_chan *to[S_PAIRS], *back[S_PAIRS];
    weft_actor *act[S_ACTORS];
    long act_count[S_ACTORS];
    atomic_long sent, received, asked;
    atomic_int default_moves;
    uint64_t seed;
};

struct s_task {
    struct stress *st;
    int pair;
    int role; /* 0: pinger, 1: ponger */
    int movable;
    int steps; /* touched by the task only, across parks: a task that ran
                * on two workers at once is a data race (TSan) */
};

static int s_actor_fn(void *state, weft_actor_msg *m)
{
    long *count = state;
    *count += *(const int *)m->data;
    return m->kind == WEFT_MSG_ASK ? weft_actor_reply(m, count) : 0;
}

static int s_task(void *arg)
{
    struct s_task *k = arg;
    struct stress *st = k->st;
    int first = weft_worker_id();
    uint64_t x = st->seed * 2654435761u + (uint64_t)k->pair * 2 + k->role + 1;
    for (int i = 0; i < st->rounds; i++) {
        int v = i;
        if (k->role == 0) {
            ASSERT_EQ(weft_chan_send(st->to[k->pair], &v), 0);
            atomic_fetch_add(&st->sent, 1);
            ASSERT_EQ(weft_chan_recv(st->back[k->pair], &v), 0);
            ASSERT_EQ(v, i);
        } else {
            ASSERT_EQ(weft_chan_recv(st->to[k->pair], &v), 0);
            ASSERT_EQ(v, i);
            atomic_fetch_add(&st->received, 1);
            ASSERT_EQ(weft_chan_send(st->back[k->pair], &v), 0);
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (x % 5 == 0) {
            const int one = 1;
            long r;
            ASSERT_EQ(
                weft_actor_ask(st->act[x / 5 % S_ACTORS], &one, &r, WEFT_NEVER),
                0);
            atomic_fetch_add(&st->asked, 1);
        } else if (x % 5 == 1) {
            ASSERT_EQ(weft_yield(), 0);
        } else if (x % 5 == 2) {
            ASSERT_EQ(weft_sleep_for((int64_t)(x % 3) * WEFT_USEC), 0);
        }
        k->steps++;
        if (k->movable < 0 && weft_worker_id() != first)
            atomic_fetch_add(&st->default_moves, 1);
    }
    ASSERT_EQ(k->steps, st->rounds);
    return 0;
}

static int s_root(void *arg)
{
    struct stress *st = arg;
    weft_scope *as, *ts, *ms;
    ASSERT_EQ(weft_scope_open(&as, NULL), 0);
    for (int i = 0; i < S_ACTORS; i++) {
        weft_actor_opts o = {.fn = s_actor_fn,
                             .state = &st->act_count[i],
                             .msg_size = sizeof(int),
                             .reply_size = sizeof(long),
                             .capacity = 4,
                             .worker = i == 0 ? 1 : 0}; /* one pinned */
        ASSERT_EQ(weft_actor_spawn(as, &o, &st->act[i]), 0);
    }
    for (int i = 0; i < S_PAIRS; i++) {
        ASSERT_EQ(weft_chan_new(&st->to[i], sizeof(int), (size_t)(i % 3)), 0);
        ASSERT_EQ(weft_chan_new(&st->back[i], sizeof(int), 0), 0);
    }
    struct s_task tasks[S_PAIRS * 2];
    ASSERT_EQ(weft_scope_open(&ts, NULL), 0);
    /* Half the tasks in a movable scope (one of those opted out again),
     * a quarter movable on their own, the rest the default; some of each
     * start pinned on a worker, so that pairs begin apart. */
    ASSERT_EQ(weft_scope_open(&ms, &(weft_scope_opts){.movable = 1}), 0);
    for (int i = 0; i < S_PAIRS * 2; i++) {
        struct s_task *k = &tasks[i];
        *k = (struct s_task){.st = st, .pair = i / 2, .role = i % 2};
        int kind = i % 4;
        weft_spawn_opts o = {0};
        weft_scope *into = ts;
        if (kind == 0) {
            into = ms;
            k->movable = 1;
            if (i == 0) {
                o.movable = -1; /* opts out of its scope's choice */
                k->movable = -1;
            }
        } else if (kind == 1) {
            o.movable = 1;
            k->movable = 1;
        } else {
            k->movable = -1;
        }
        if (kind == 3 || (kind == 2 && i % 8 == 2))
            o.worker = 1 + i % st->workers; /* pinned: never moves */
        ASSERT(weft_spawn_ex(into, s_task, k, &o) >= 0);
    }
    ASSERT_EQ(weft_scope_join(ms), 0);
    ASSERT_EQ(weft_scope_free(ms), 0);
    ASSERT_EQ(weft_scope_join(ts), 0);
    ASSERT_EQ(weft_scope_free(ts), 0);
    for (int i = 0; i < S_ACTORS; i++) {
        ASSERT_EQ(weft_actor_stop(st->act[i], WEFT_STOP_DRAIN), 0);
    }
    ASSERT_EQ(weft_scope_join(as), 0);
    ASSERT_EQ(weft_scope_free(as), 0);
    long total = 0;
    for (int i = 0; i < S_ACTORS; i++) {
        total += st->act_count[i];
        weft_actor_unref(st->act[i]);
    }
    for (int i = 0; i < S_PAIRS; i++) {
        weft_chan_unref(st->to[i]);
        weft_chan_unref(st->back[i]);
    }
    /* Nothing lost. */
    ASSERT_EQ(total, atomic_load(&st->asked));
    ASSERT_EQ(atomic_load(&st->sent), (long)S_PAIRS * st->rounds);
    ASSERT_EQ(atomic_load(&st->received), (long)S_PAIRS * st->rounds);
    ASSERT_EQ(atomic_load(&st->default_moves), 0);
    return 0;
}

TEST(stress_moves)
{
    NEED_MOVES();
    uint64_t seed = T_SEED(0x5EED);
    for (int workers = 2; workers <= 4; workers++) {
        struct stress *st = calloc(1, sizeof(*st));
        st->workers = workers;
        /* A few seconds under the sanitizers too (scale 10): moves need
         * round trips to happen at all. */
        st->rounds = (int)T_SCALE(3000);
        if (st->rounds < 2500)
            st->rounds = 2500;
        st->seed = seed + (uint64_t)workers;
        ASSERT_EQ(t_run_mono(workers, s_root, st), 0);
        free(st);
    }
}
