/* SPDX-License-Identifier: MIT */
/*
 * Compact tasks (weft_spawn_opts.compact, weft_scope_opts.compact): a
 * parked compact task's stack is copied out and its pages given back, and
 * copied in again when it runs. These tests park many of them, with
 * canary patterns in deep frames and a pointer into their own stack, in
 * every wait that gives the stack back (channels both ways, events, wait
 * groups, mutexes, semaphores, rwlocks, sleeps, descriptors), on two
 * workers, wake them in a
 * seeded random order, and check every local and every value. Then:
 * deadlines and cancels of parked compact tasks, a select that keeps the
 * stack, the options, and the resident memory of 10,000 parked compact
 * tasks. A stack overflow in a compact task is test_stack.c's
 * stack_overflow_compact_task_reported, beside the other overflows.
 */
#include "t.h"
#include "sched/scheduler.h" /* weft__stacks_released */
#include "weft.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#if defined(WEFT_ASAN) || defined(WEFT_TSAN)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif
/* The sanitizers' own memory (TSan's per-fiber state, ASan's shadow of
 * every stack it unpoisons and its allocator's redzones and quarantine)
 * swamps the figures (see test_stack.c): the memory is measured in the
 * other builds only. */
#if SANITIZED || defined(WEFT_TEST_EMULATED)
#define CHECK_RSS 0
#else
#define CHECK_RSS 1
#endif

/* A build with the ucontext switch has no saved stack pointer to copy
 * from: compact tasks are plain ones there (weft.h), so these tests skip. */
static void need_compact(void)
{
#if defined(WEFT_TEST_UCONTEXT)
    T_SKIP("compact tasks are plain tasks in a ucontext build");
#endif
}

static long released(void)
{
    return atomic_load(&weft__stacks_released);
}

static uint64_t rng_state;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void shuffle(long *a, long n)
{
    for (long i = n - 1; i > 0; i--) {
        long j = (long)(rng() % (uint64_t)(i + 1)), x = a[i];
        a[i] = a[j];
        a[j] = x;
    }
}

/* The canary of word i of frame `level` of task id. */
static uint64_t pat(long id, int level, int i)
{
    return ((uint64_t)id * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)level << 40) ^
           ((uint64_t)i * 0x100000001B3ull) ^ 0xC0FFEEull;
}

/* ---- many compact tasks in every wait that gives the stack back ---- */

enum {
    K_RECV,
    K_SEND,
    K_EVENT,
    K_WG,
    K_MUTEX,
    K_SEM,
    K_RWLOCK,
    K_SLEEP,
    K_FD,
    K_KINDS
};

typedef struct pair {
    int64_t a, b; /* 16 bytes: the most a compact channel wait carries */
} pair;

struct world;

typedef struct job {
    long id;
    int kind;
    struct world *wd;
    weft_chan *ch;
    weft_event ev;
    weft_wg wg;
    weft_mutex mu;
    weft_sem sem;
    weft_rwlock rw;
    int sv[2];
    int64_t sleep_ns;
    pair got; /* what the wait received */
    bool done;
    int worker; /* where it ran */
} job;

typedef struct world {
    long n;
    int depth;
    job *jobs;
    atomic_long waiting; /* tasks at their wait */
    atomic_long finished;
    long on[2]; /* tasks that ran on worker 0, and on worker 1 */
} world;

/* The wait of j's kind, at the bottom of its frames. Returns 0. */
__attribute__((noinline)) static int do_wait(job *j)
{
    /* A pointer into its own stack, across the park. */
    volatile uint64_t probe = pat(j->id, 99, 0);
    volatile uint64_t *pp = &probe;
    pair v = {-1, -1};
    atomic_fetch_add(&j->wd->waiting, 1);
    switch (j->kind) {
    case K_RECV:
        ASSERT_EQ(weft_chan_recv(j->ch, &v), 0);
        break;
    case K_SEND:
        v.a = j->id * 7;
        v.b = ~j->id;
        ASSERT_EQ(weft_chan_send(j->ch, &v), 0);
        v.a = j->id * 3; /* what the checks below expect */
        v.b = ~j->id;
        break;
    case K_EVENT:
        ASSERT_EQ(weft_event_wait(&j->ev), 0);
        v = (pair){j->id * 3, ~j->id};
        break;
    case K_WG:
        ASSERT_EQ(weft_wg_wait(&j->wg), 0);
        v = (pair){j->id * 3, ~j->id};
        break;
    case K_MUTEX:
        ASSERT_EQ(weft_mutex_lock(&j->mu), 0);
        ASSERT_EQ(weft_mutex_unlock(&j->mu), 0);
        v = (pair){j->id * 3, ~j->id};
        break;
    case K_SEM:
        ASSERT_EQ(weft_sem_acquire(&j->sem, 2), 0);
        v = (pair){j->id * 3, ~j->id};
        break;
    case K_RWLOCK:
        ASSERT_EQ(weft_rwlock_rdlock(&j->rw), 0);
        ASSERT_EQ(weft_rwlock_rdunlock(&j->rw), 0);
        v = (pair){j->id * 3, ~j->id};
        break;
    case K_SLEEP:
        ASSERT_EQ(weft_sleep_for(j->sleep_ns), 0);
        v = (pair){j->id * 3, ~j->id};
        break;
    case K_FD: {
        char buf[sizeof(pair)];
        ASSERT_EQ(weft_read_exact(j->sv[0], buf, sizeof buf, NULL, WEFT_NEVER),
                  0);
        memcpy(&v, buf, sizeof v);
        break;
    }
    }
    ASSERT(pp == &probe);
    ASSERT_EQ(*pp, pat(j->id, 99, 0));
    j->got = v;
    return 0;
}

/* Frames of canaries, depth deep, around the wait. */
__attribute__((noinline)) static int deep(job *j, int level)
{
    volatile uint64_t buf[40];
    for (int i = 0; i < 40; i++)
        buf[i] = pat(j->id, level, i);
    int rc = level == 0 ? do_wait(j) : deep(j, level - 1);
    for (int i = 0; i < 40; i++)
        if (buf[i] != pat(j->id, level, i))
            T_FAIL("task %ld: frame %d word %d was %#llx", j->id, level, i,
                   (unsigned long long)buf[i]);
    return rc;
}

static int job_main(void *arg)
{
    job *j = arg;
    j->worker = weft_worker_id();
    ASSERT_EQ(deep(j, j->wd->depth), 0);
    ASSERT_EQ(weft_worker_id(), j->worker); /* compact: never moves */
    ASSERT_EQ(j->got.a, j->id * 3);
    ASSERT_EQ(j->got.b, ~j->id);
    j->done = true;
    atomic_fetch_add(&j->wd->finished, 1);
    return 0;
}

/* Wakes j from the root, as its kind wants. */
static void wake(job *j)
{
    pair v = {j->id * 3, ~j->id};
    switch (j->kind) {
    case K_RECV:
        ASSERT_EQ(weft_chan_send(j->ch, &v), 0);
        break;
    case K_SEND: {
        pair got;
        ASSERT_EQ(weft_chan_recv(j->ch, &got), 0);
        ASSERT_EQ(got.a, j->id * 7);
        ASSERT_EQ(got.b, ~j->id);
        break;
    }
    case K_EVENT:
        ASSERT_EQ(weft_event_set(&j->ev), 0);
        break;
    case K_WG:
        ASSERT_EQ(weft_wg_done(&j->wg), 0);
        break;
    case K_MUTEX:
        ASSERT_EQ(weft_mutex_unlock(&j->mu), 0);
        break;
    case K_SEM:
        ASSERT_EQ(weft_sem_release(&j->sem, 2), 0);
        break;
    case K_RWLOCK:
        ASSERT_EQ(weft_rwlock_wrunlock(&j->rw), 0);
        break;
    case K_SLEEP:
        break; /* its deadline, once the root blocks */
    case K_FD:
        ASSERT_EQ(write(j->sv[1], &v, sizeof v), (long)sizeof v);
        break;
    }
}

static int world_root(void *arg)
{
    world *wd = arg;
    long n = wd->n;
    long base = released();
    for (long i = 0; i < n; i++) {
        job *j = &wd->jobs[i];
        *j = (job){.id = i, .kind = (int)(i % K_KINDS), .wd = wd};
        j->ev = (weft_event)WEFT_EVENT_INIT;
        j->wg = (weft_wg)WEFT_WG_INIT;
        j->mu = (weft_mutex)WEFT_MUTEX_INIT;
        j->sv[0] = j->sv[1] = -1;
        switch (j->kind) {
        case K_RECV:
        case K_SEND:
            ASSERT_EQ(weft_chan_new(&j->ch, sizeof(pair), 0), 0);
            break;
        case K_WG:
            ASSERT_EQ(weft_wg_add(&j->wg, 1), 0);
            break;
        case K_MUTEX:
            ASSERT_EQ(weft_mutex_lock(&j->mu), 0);
            break;
        case K_SEM:
            ASSERT_EQ(weft_sem_init(&j->sem, 1), 0); /* 2 wanted */
            break;
        case K_RWLOCK:
            j->rw = (weft_rwlock)WEFT_RWLOCK_INIT;
            ASSERT_EQ(weft_rwlock_wrlock(&j->rw), 0);
            break;
        case K_SLEEP: /* after the root's sleep below */
            j->sleep_ns = 2 * WEFT_MSEC + (int64_t)(rng() % 1000) * WEFT_USEC;
            break;
        case K_FD:
            ASSERT_EQ(socketpair(AF_UNIX,
                                 SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                                 j->sv),
                      0);
            break;
        }
    }
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.compact = 1}), 0);
    for (long i = 0; i < n; i++)
        ASSERT(weft_spawn(s, job_main, &wd->jobs[i]) >= 0);
    /* Every one parked; the root's sleep lets the workers go idle, which
     * gives every parked stack back: the values and wakes below all reach
     * released tasks. */
    T_SETTLE(atomic_load(&wd->waiting) == n);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    ASSERT(released() - base >= n);
    long *order = malloc((size_t)n * sizeof(*order));
    ASSERT(order != NULL);
    for (long i = 0; i < n; i++)
        order[i] = i;
    shuffle(order, n);
    for (long i = 0; i < n; i++)
        wake(&wd->jobs[order[i]]);
    free(order);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(atomic_load(&wd->finished), n);
    long on[2] = {0, 0};
    for (long i = 0; i < n; i++) {
        job *j = &wd->jobs[i];
        ASSERT(j->done);
        on[j->worker == 0 ? 0 : 1]++;
        if (j->ch)
            weft_chan_unref(j->ch);
        if (j->sv[0] >= 0) {
            close(j->sv[0]);
            close(j->sv[1]);
        }
    }
    wd->on[0] = on[0];
    wd->on[1] = on[1];
    return 0;
}

static void run_world(long n, int depth)
{
    static world wd;
    wd = (world){.n = n, .depth = depth};
    wd.jobs = calloc((size_t)n, sizeof(job));
    ASSERT(wd.jobs != NULL);
    /* WEFT_SEED=... reorders the wakes too (weft_run reads it for its
     * own seed). */
    const char *env = getenv("WEFT_SEED");
    rng_state = T_SEED(env && *env ? strtoull(env, NULL, 0) : 0x5eed0001) | 1;
    weft_config cfg = {0};
    cfg.workers = 2;
    cfg.clock = WEFT_CLOCK_VIRTUAL;
    cfg.seed = rng_state;
    ASSERT_EQ(weft_run(&cfg, world_root, &wd), 0);
    fprintf(stderr, "%ld compact tasks on worker 0, %ld on worker 1\n",
            wd.on[0], wd.on[1]);
    free(wd.jobs);
}

TEST(compact_waits_keep_locals_and_values)
{
    need_compact();
    run_world(T_LIVE(700), 8);
}

/* Shallow ones: their images are small, and more of them. */
TEST(compact_waits_shallow_many)
{
    need_compact();
    run_world(T_LIVE(3500), 0);
}

/* ---- busy compact tasks keep their stacks ---- */

struct busy {
    weft_chan *ping, *pong;
    long n;
    long released_meanwhile;
};

static int busy_echo(void *arg)
{
    struct busy *b = arg;
    int64_t v;
    while (weft_chan_recv(b->ping, &v) == 0) {
        v++;
        ASSERT_EQ(weft_chan_send(b->pong, &v), 0);
    }
    return 0;
}

static int busy_pinger(void *arg)
{
    struct busy *b = arg;
    volatile uint64_t guard[16];
    for (int i = 0; i < 16; i++)
        guard[i] = pat(5, 1, i);
    long base = released();
    for (int64_t i = 0; i < b->n; i++) {
        int64_t v = i;
        ASSERT_EQ(weft_chan_send(b->ping, &v), 0);
        ASSERT_EQ(weft_chan_recv(b->pong, &v), 0);
        ASSERT_EQ(v, i + 1);
    }
    b->released_meanwhile = released() - base;
    weft_chan_close(b->ping);
    for (int i = 0; i < 16; i++)
        ASSERT_EQ(guard[i], pat(5, 1, i));
    return 0;
}

static int busy_root(void *arg)
{
    struct busy *b = arg;
    ASSERT_EQ(weft_chan_new(&b->ping, sizeof(int64_t), 0), 0);
    ASSERT_EQ(weft_chan_new(&b->pong, sizeof(int64_t), 0), 0);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.compact = 1}), 0);
    ASSERT(weft_spawn(s, busy_echo, b) >= 0);
    ASSERT(weft_spawn(s, busy_pinger, b) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    weft_chan_unref(b->ping);
    weft_chan_unref(b->pong);
    return 0;
}

/* Two compact tasks that park and wake each other in turn on one worker
 * never wait long: their stacks are never given back (the worker gives
 * back those still parked after WEFT__PEND later parks, or when idle). */
TEST(compact_busy_tasks_keep_their_stacks)
{
    need_compact();
    static struct busy b;
    b.n = T_SCALE(2000);
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 0, busy_root, &b), 0);
    ASSERT_EQ(b.released_meanwhile, 0);
}

/* ---- deadlines and cancels ---- */

struct dc {
    weft_chan *ch;
    weft_event ev;
    atomic_int parked;
    int rc_deadline, rc_cancel, rc_event;
};

__attribute__((noinline)) static int dc_deadline(void *arg)
{
    struct dc *d = arg;
    volatile uint64_t guard[16];
    for (int i = 0; i < 16; i++)
        guard[i] = pat(1, 1, i);
    pair v = {123, 456};
    atomic_fetch_add(&d->parked, 1);
    d->rc_deadline =
        weft_chan_recv_until(d->ch, &v, weft_now() + 5 * WEFT_MSEC);
    ASSERT(v.a == 123 && v.b == 456); /* nothing received: untouched */
    for (int i = 0; i < 16; i++)
        ASSERT_EQ(guard[i], pat(1, 1, i));
    return 0;
}

__attribute__((noinline)) static int dc_cancel(void *arg)
{
    struct dc *d = arg;
    volatile uint64_t guard[16];
    for (int i = 0; i < 16; i++)
        guard[i] = pat(2, 1, i);
    pair v = {7, 8};
    atomic_fetch_add(&d->parked, 1);
    d->rc_cancel = weft_chan_recv(d->ch, &v);
    ASSERT(v.a == 7 && v.b == 8);
    for (int i = 0; i < 16; i++)
        ASSERT_EQ(guard[i], pat(2, 1, i));
    return 0;
}

__attribute__((noinline)) static int dc_event(void *arg)
{
    struct dc *d = arg;
    volatile uint64_t guard[16];
    for (int i = 0; i < 16; i++)
        guard[i] = pat(3, 1, i);
    atomic_fetch_add(&d->parked, 1);
    d->rc_event = weft_event_wait_until(&d->ev, weft_now() + 3 * WEFT_MSEC);
    for (int i = 0; i < 16; i++)
        ASSERT_EQ(guard[i], pat(3, 1, i));
    return 0;
}

static int dc_root(void *arg)
{
    struct dc *d = arg;
    long base = released();
    ASSERT_EQ(weft_chan_new(&d->ch, sizeof(pair), 0), 0);
    d->ev = (weft_event)WEFT_EVENT_INIT;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    weft_task_handle h;
    weft_spawn_opts c = {.compact = 1};
    ASSERT(weft_spawn_ex(s, dc_deadline, d, &c) >= 0);
    ASSERT(weft_spawn_ex(s, dc_event, d, &c) >= 0);
    ASSERT(weft_spawn_ex(s, dc_cancel, d,
                         &(weft_spawn_opts){.compact = 1, .handle = &h}) >= 0);
    T_SETTLE(atomic_load(&d->parked) == 3);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0); /* idle: stacks given back */
    ASSERT(released() - base >= 3);
    ASSERT_EQ(weft_task_cancel(h), 0);
    ASSERT_EQ(weft_task_join(h, NULL), 0);
    ASSERT_EQ(d->rc_cancel, -ECANCELED);
    ASSERT_EQ(weft_scope_join(s), 0); /* the deadlines pass meanwhile */
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(d->rc_deadline, -ETIMEDOUT);
    ASSERT_EQ(d->rc_event, -ETIMEDOUT);
    weft_chan_unref(d->ch);
    return 0;
}

TEST(compact_deadline_and_cancel_while_released)
{
    need_compact();
    static struct dc d;
    ASSERT_EQ(t_run(2, WEFT_CLOCK_VIRTUAL, 0, dc_root, &d), 0);
}

/* ---- select keeps the stack ---- */

struct sel {
    weft_chan *a, *b;
    atomic_int stage;
    long released_in_select;
};

static int sel_task(void *arg)
{
    struct sel *x = arg;
    volatile uint64_t guard[16];
    for (int i = 0; i < 16; i++)
        guard[i] = pat(4, 1, i);
    int64_t va = -1, vb = -1;
    weft_case cs[2] = {{.chan = x->a, .op = WEFT_OP_RECV, .elem = &va},
                       {.chan = x->b, .op = WEFT_OP_RECV, .elem = &vb}};
    atomic_store(&x->stage, 1);
    long before = released();
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), 1);
    x->released_in_select = released() - before;
    ASSERT_EQ(cs[1].rc, 0);
    ASSERT_EQ(vb, 42);
    ASSERT_EQ(va, -1);
    /* A plain receive afterwards gives it back: the task is compact. */
    atomic_store(&x->stage, 2);
    ASSERT_EQ(weft_chan_recv(x->a, &va), 0);
    ASSERT_EQ(va, 43);
    for (int i = 0; i < 16; i++)
        ASSERT_EQ(guard[i], pat(4, 1, i));
    return 0;
}

static int sel_root(void *arg)
{
    struct sel *x = arg;
    ASSERT_EQ(weft_chan_new(&x->a, sizeof(int64_t), 0), 0);
    ASSERT_EQ(weft_chan_new(&x->b, sizeof(int64_t), 0), 0);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn_ex(s, sel_task, x, &(weft_spawn_opts){.compact = 1}) >=
           0);
    long base = released();
    /* One worker: the root's sleep lets it go idle once the task is
     * parked, which gives every stack it may back. */
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    ASSERT_EQ(atomic_load(&x->stage), 1);
    ASSERT_EQ(released(), base); /* the select kept its stack */
    int64_t v = 42;
    ASSERT_EQ(weft_chan_send(x->b, &v), 0);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    ASSERT_EQ(atomic_load(&x->stage), 2);
    ASSERT_EQ(released(), base + 1); /* the receive gave it back */
    v = 43;
    ASSERT_EQ(weft_chan_send(x->a, &v), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(x->released_in_select, 0);
    weft_chan_unref(x->a);
    weft_chan_unref(x->b);
    return 0;
}

TEST(compact_select_keeps_its_stack)
{
    need_compact();
    static struct sel x;
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 0, sel_root, &x), 0);
}

/* ---- the options ---- */

static int opt_child(void *arg)
{
    weft_chan *ch = arg;
    int64_t v;
    return weft_chan_recv(ch, &v);
}

/* Spawns opt_child with opts into s, lets it park, wakes it; returns how
 * many stacks were given back meanwhile. */
static long parks_released(weft_scope *s, const weft_spawn_opts *o)
{
    weft_chan *ch;
    ASSERT_EQ(weft_chan_new(&ch, sizeof(int64_t), 0), 0);
    long base = released();
    ASSERT(weft_spawn_ex(s, opt_child, ch, o) >= 0);
    /* One worker: it runs and parks, then the worker goes idle. */
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    long got = released() - base;
    int64_t v = 1;
    ASSERT_EQ(weft_chan_send(ch, &v), 0);
    weft_yield();
    weft_chan_unref(ch);
    return got;
}

static int opt_root(void *arg)
{
    (void)arg;
    weft_scope *s, *inner, *outer;
    int64_t v = 0;
    ASSERT_EQ(
        weft_spawn_ex(NULL, opt_child, NULL, &(weft_spawn_opts){.compact = 2}),
        -EINVAL);
    ASSERT_EQ(
        weft_spawn_ex(NULL, opt_child, NULL, &(weft_spawn_opts){.compact = -2}),
        -EINVAL);
    ASSERT_EQ(weft_spawn_ex(NULL, opt_child, NULL,
                            &(weft_spawn_opts){.compact = 1, .movable = 1}),
              -EINVAL);
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.compact = 2}), -EINVAL);
    (void)v;

    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT_EQ(parks_released(s, NULL), 0);
    ASSERT_EQ(parks_released(s, &(weft_spawn_opts){.compact = 1}), 1);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);

    /* Inherited by nested scopes; -1 opts out; a movable scope's compact
     * tasks stay compact. */
    ASSERT_EQ(weft_scope_open(&outer, &(weft_scope_opts){.compact = 1}), 0);
    ASSERT_EQ(weft_scope_open(&inner, &(weft_scope_opts){.movable = 1}), 0);
    ASSERT_EQ(parks_released(inner, NULL), 1);
    ASSERT_EQ(parks_released(inner, &(weft_spawn_opts){.compact = -1}), 0);
    ASSERT_EQ(weft_scope_join(inner), 0);
    ASSERT_EQ(weft_scope_free(inner), 0);
    ASSERT_EQ(weft_scope_join(outer), 0);
    ASSERT_EQ(weft_scope_free(outer), 0);
    return 0;
}

TEST(compact_options_and_inheritance)
{
    need_compact();
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 0, opt_root, NULL), 0);
}

/* ---- resident memory ---- */

/* A line of /proc/self/status in bytes (VmRSS:, VmHWM:), or -1. */
static long status_bytes(const char *key)
{
    char line[256];
    long kb = -1;
    size_t kl = strlen(key);
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && sscanf(line + kl, "%ld", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

struct mem {
    long n;
    weft_chan **ch;
    atomic_long parked;
    long before, after, hwm_before, hwm_after;
};

static int mem_task(void *arg)
{
    struct mem *m = arg;
    long i = atomic_fetch_add(&m->parked, 1);
    int64_t v;
    ASSERT_EQ(weft_chan_recv(m->ch[i], &v), 0);
    ASSERT_EQ(v, i);
    return 0;
}

static int mem_root(void *arg)
{
    struct mem *m = arg;
    long n = m->n;
    m->ch = calloc((size_t)n, sizeof(*m->ch));
    ASSERT(m->ch != NULL);
    for (long i = 0; i < n; i++)
        ASSERT_EQ(weft_chan_new(&m->ch[i], sizeof(int64_t), 0), 0);
    long base = released();
    m->before = status_bytes("VmRSS:");
    m->hwm_before = status_bytes("VmHWM:");
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.compact = 1}), 0);
    for (long i = 0; i < n; i++)
        ASSERT(weft_spawn(s, mem_task, m) >= 0);
    T_SETTLE(atomic_load(&m->parked) == n);
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0); /* idle: stacks given back */
    ASSERT(released() - base >= n);
    m->after = status_bytes("VmRSS:");
    m->hwm_after = status_bytes("VmHWM:");
    for (long i = 0; i < n; i++) {
        int64_t v = i;
        ASSERT_EQ(weft_chan_send(m->ch[i], &v), 0);
    }
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    for (long i = 0; i < n; i++)
        weft_chan_unref(m->ch[i]);
    free(m->ch);
    return 0;
}

TEST(compact_parked_tasks_resident_memory)
{
    need_compact();
    static struct mem m;
    m.n = T_LIVE(10000);
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 0, mem_root, &m), 0);
    ASSERT(m.before > 0 && m.after > 0);
    long per = (m.after - m.before) / m.n;
    long peak = (m.hwm_after - m.hwm_before) / m.n;
    fprintf(stderr, "%ld compact tasks parked: %ld bytes each (peak %ld)\n",
            m.n, per, peak);
    /* Their channels are made before the first reading: the task alone,
     * its struct, its record and the image of its stack. A plain task
     * keeps a page (4 KiB). */
    if (CHECK_RSS && (per >= 1024 || peak >= 1024))
        T_FAIL("%ld bytes resident per parked compact task (peak %ld)", per,
               peak);
}

/* ---- a TCP read, on each poller ---- */

static int tcp_reader(void *arg)
{
    int fd = *(int *)arg;
    char b[8];
    ptrdiff_t n = weft_read(fd, b, sizeof b, WEFT_NEVER);
    return n == 4 && memcmp(b, "ping", 4) == 0 ? 0 : -EIO;
}

static int tcp_root(void *arg)
{
    (void)arg;
    int lfd = weft_tcp_listen("127.0.0.1", 0, 4, 0);
    ASSERT(lfd >= 0);
    int a = weft_tcp_connect("127.0.0.1", weft_local_port(lfd), WEFT_NEVER);
    ASSERT(a >= 0);
    int b = weft_accept(lfd, NULL, WEFT_NEVER);
    ASSERT(b >= 0);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.compact = 1}), 0);
    long base = released();
    ASSERT(weft_spawn(s, tcp_reader, &b) >= 0);
    /* One worker: the reader parks in its read, then the worker goes
     * idle and gives its stack back, on epoll and on io_uring alike (a
     * compact task's read waits for readiness, not in the ring). */
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    ASSERT_EQ(released() - base, 1);
    ASSERT_EQ(weft_write_all(a, "ping", 4, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_close(a), 0);
    ASSERT_EQ(weft_close(b), 0);
    ASSERT_EQ(weft_close(lfd), 0);
    return 0;
}

/* A compact task parked in a TCP read gives its stack back, and reads
 * what comes (the uring: entry runs it on io_uring). */
TEST(compact_tcp_read_gives_its_stack_back)
{
    need_compact();
    ASSERT_EQ(t_run(1, WEFT_CLOCK_VIRTUAL, 0, tcp_root, NULL), 0);
}

/* ---- a deadlock with compact tasks parked ---- */

#define DL_TASKS 200
static atomic_int dl_cancelled; /* receivers that woke with -ECANCELED */

static int dl_receiver(void *arg)
{
    weft_chan *c = arg;
    int v;
    int rc = weft_chan_recv(c, &v); /* nobody sends */
    if (rc == -ECANCELED)
        atomic_fetch_add(&dl_cancelled, 1);
    return rc;
}

static int dl_root(void *arg)
{
    (void)arg;
    weft_chan *c;
    ASSERT_EQ(weft_chan_new(&c, sizeof(int), 0), 0);
    weft_scope *s;
    weft_scope_opts so = {.compact = 1};
    ASSERT_EQ(weft_scope_open(&s, &so), 0);
    for (int i = 0; i < DL_TASKS; i++)
        ASSERT(weft_spawn(s, dl_receiver, c) >= 0);
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    weft_chan_unref(c);
    return rc;
}

/* Compact tasks parked (their stacks given back) when the runtime finds a
 * deadlock: it cancels them, every one wakes with its image copied back
 * and ends, and nothing of theirs is left (the sanitizer builds' leak
 * check). */
TEST(compact_tasks_in_a_deadlock_end_and_free)
{
    need_compact();
    for (int workers = 1; workers <= 2; workers++) {
        long before = released();
        atomic_store(&dl_cancelled, 0);
        ASSERT_EQ(t_run_virtual(workers, dl_root, NULL), -EDEADLK);
        ASSERT(released() > before);
        ASSERT_EQ(atomic_load(&dl_cancelled), DL_TASKS);
    }
}
