/* SPDX-License-Identifier: MIT */
/*
 * Mutex cycles across workers: tasks on several workers that lock two
 * accounts at a time in any order, and back off when their lock returns
 * -EDEADLK, always finish. Every ring of mutex waits that forms is broken
 * by exactly one -EDEADLK, told to the task whose wait would close it,
 * however the lockers' steps interleave on the workers; a ring nobody is
 * told about would leave every task asleep.
 */
#include "t.h"
#include "weft.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#define GRACE (20 * WEFT_MSEC) /* the every-task-asleep check's grace */
#define ACCOUNTS 8
#define TASKS 16
#define START 1000 /* each account's balance at the start */

/* ---- transfers between accounts, two locks each ------------------------- */

struct bank {
    weft_mutex m[ACCOUNTS];
    long balance[ACCOUNTS]; /* under m[i] */
    uint64_t seed;
    int per_task; /* transfers each task makes */
    /* the tasks' own books, read by the deadlock callback: */
    atomic_int holder[ACCOUNTS]; /* the task that holds m[i], or -1 */
    atomic_int want[TASKS];      /* the account task i waits to lock, or -1 */
    /* what happened: */
    atomic_long done;      /* transfers made */
    atomic_int deadlk;     /* second locks that returned -EDEADLK */
    atomic_int cancelled;  /* locks that returned -ECANCELED */
    atomic_int rings;      /* mutex cycle callbacks */
    atomic_int real_rings; /* ... where the books show a ring back to the
                            * told task */
    atomic_int asleep;     /* every-task-asleep callbacks */
};

static const char *const names[TASKS] = {
    "t0", "t1", "t2",  "t3",  "t4",  "t5",  "t6",  "t7",
    "t8", "t9", "t10", "t11", "t12", "t13", "t14", "t15",
};

struct teller {
    struct bank *b;
    int id;
};

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The running task's index, from its name. */
static int my_index(void)
{
    const char *n = weft_task_name();
    for (int i = 0; i < TASKS; i++)
        if (n == names[i])
            return i;
    return -1;
}

/* Called on the told task (its lock is about to return -EDEADLK): the
 * books must show a ring from the account it waits for back to it. Every
 * other member of a real ring is stuck in its lock, so their books hold
 * still; the told task's own are its own. */
static void on_deadlock(void *ctx, weft_deadlock_kind kind)
{
    struct bank *b = ctx;
    if (kind == WEFT_DEADLOCK_ALL_ASLEEP) {
        atomic_fetch_add(&b->asleep, 1);
        return;
    }
    atomic_fetch_add(&b->rings, 1);
    int me = my_index();
    if (me < 0)
        return;
    int acc = atomic_load(&b->want[me]);
    for (int hops = 0; hops <= TASKS && acc >= 0; hops++) {
        int h = atomic_load(&b->holder[acc]);
        if (h == me) {
            atomic_fetch_add(&b->real_rings, 1);
            return;
        }
        if (h < 0)
            return;
        acc = atomic_load(&b->want[h]);
    }
}

static int lock_as(struct bank *b, int me, int acc)
{
    atomic_store(&b->want[me], acc);
    int rc = weft_mutex_lock(&b->m[acc]);
    atomic_store(&b->want[me], -1);
    if (rc == 0)
        atomic_store(&b->holder[acc], me);
    return rc;
}

static void unlock_as(struct bank *b, int acc)
{
    atomic_store(&b->holder[acc], -1);
    ASSERT_EQ(weft_mutex_unlock(&b->m[acc]), 0);
}

static int teller(void *arg)
{
    struct teller *t = arg;
    struct bank *b = t->b;
    uint64_t r = b->seed * 0x9e3779b97f4a7c15ull + (uint64_t)t->id + 1;
    for (int k = 0; k < b->per_task; k++) {
        int from = (int)(next_rand(&r) % ACCOUNTS);
        int to = (int)(next_rand(&r) % (ACCOUNTS - 1));
        to += to >= from;
        long amount = (long)(next_rand(&r) % 50);
        for (;;) {
            /* Holding nothing, a first lock closes no ring. */
            int rc = lock_as(b, t->id, from);
            if (rc == -ECANCELED) {
                atomic_fetch_add(&b->cancelled, 1);
                return rc;
            }
            ASSERT_EQ(rc, 0);
            /* Work while holding the first lock: let others run. */
            if (next_rand(&r) & 1)
                weft_yield();
            rc = lock_as(b, t->id, to);
            if (rc == 0) {
                b->balance[from] -= amount;
                b->balance[to] += amount;
                unlock_as(b, to);
                unlock_as(b, from);
                atomic_fetch_add(&b->done, 1);
                break;
            }
            unlock_as(b, from);
            if (rc == -ECANCELED) {
                atomic_fetch_add(&b->cancelled, 1);
                return rc;
            }
            ASSERT_EQ(rc, -EDEADLK);
            atomic_fetch_add(&b->deadlk, 1);
            weft_yield();
        }
    }
    return 0;
}

static int bank_root(void *arg)
{
    struct bank *b = arg;
    struct teller t[TASKS];
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_COLLECT}),
              0);
    for (int i = 0; i < TASKS; i++) {
        t[i] = (struct teller){b, i};
        /* Spread over the workers: a ring across them is the point. */
        weft_spawn_opts o = {.name = names[i],
                             .worker = i % weft_workers() + 1};
        ASSERT(weft_spawn_ex(s, teller, &t[i], &o) >= 0);
    }
    weft_scope_join(s);
    weft_scope_free(s);
    return 0;
}

/* A plain thread that keeps a CPU busy while the runtime runs, so that a
 * worker is now and then descheduled between two steps of a lock. */
struct busy {
    pthread_t th;
    atomic_bool stop;
};

static void *busy_main(void *arg)
{
    struct busy *bz = arg;
    volatile unsigned long x = 0;
    while (!atomic_load_explicit(&bz->stop, memory_order_relaxed))
        x++;
    return NULL;
}

static void bank_run(int workers, uint64_t seed, int per_task, bool load)
{
    struct bank b = {.seed = T_SEED(seed), .per_task = per_task};
    for (int i = 0; i < ACCOUNTS; i++) {
        b.m[i] = (weft_mutex)WEFT_MUTEX_INIT;
        b.balance[i] = START;
        atomic_init(&b.holder[i], -1);
    }
    for (int i = 0; i < TASKS; i++)
        atomic_init(&b.want[i], -1);
    weft_config cfg = {.workers = workers,
                       .clock = WEFT_CLOCK_MONOTONIC,
                       .seed = seed,
                       .deadlock = WEFT_DEADLOCK_CALLBACK,
                       .on_deadlock = on_deadlock,
                       .deadlock_ctx = &b,
                       .deadlock_grace_ns = GRACE};
    struct busy bz = {.stop = false};
    if (load)
        ASSERT_EQ(pthread_create(&bz.th, NULL, busy_main, &bz), 0);
    int rc = weft_run(&cfg, bank_root, &b);
    if (load) {
        atomic_store(&bz.stop, true);
        pthread_join(bz.th, NULL);
    }
    if (rc != 0 || atomic_load(&b.asleep) != 0)
        T_FAIL("%d workers: weft_run returned %d, every task asleep %d "
               "time(s), %ld of %d transfers made, %d -EDEADLK",
               workers, rc, atomic_load(&b.asleep), atomic_load(&b.done),
               TASKS * per_task, atomic_load(&b.deadlk));
    ASSERT_EQ(atomic_load(&b.cancelled), 0);
    ASSERT_EQ(atomic_load(&b.done), (long)TASKS * per_task);
    long sum = 0;
    for (int i = 0; i < ACCOUNTS; i++)
        sum += b.balance[i];
    ASSERT_EQ(sum, (long)ACCOUNTS * START);
    /* One callback per -EDEADLK, each for a ring that was there. */
    ASSERT_EQ(atomic_load(&b.rings), atomic_load(&b.deadlk));
    ASSERT_EQ(atomic_load(&b.real_rings), atomic_load(&b.rings));
}

TEST(transfers_on_two_workers)
{
    for (uint64_t seed = 1; seed <= (uint64_t)T_SCALE(100); seed++)
        bank_run(2, seed, (int)T_SCALE(200), false);
}

TEST(transfers_on_two_workers_under_load)
{
    for (uint64_t seed = 1; seed <= (uint64_t)T_SCALE(100); seed++)
        bank_run(2, seed, (int)T_SCALE(200), true);
}

TEST(transfers_on_four_workers)
{
    for (uint64_t seed = 1; seed <= (uint64_t)T_SCALE(50); seed++)
        bank_run(4, seed, (int)T_SCALE(200), false);
}

TEST(transfers_on_one_worker_seeded)
{
    for (uint64_t seed = 1; seed <= (uint64_t)T_SCALE(100); seed++)
        bank_run(1, seed, (int)T_SCALE(200), false);
}

/* ---- every member closing one ring at the same instant ----------------- */

#define RING_MAX 4

/* n tasks, one per worker, round after round: each locks its own mutex,
 * all meet, then each locks the next one's at once. Each round's ring is
 * closed by all of them together, on their workers: exactly one must be
 * told (none: every task asleep; two: both back off for one ring). */
struct race {
    int n, rounds;
    weft_mutex m[RING_MAX];
    atomic_int arrived; /* the meeting point: tasks arrived, all rounds */
    atomic_int told;    /* -EDEADLK, all rounds */
    atomic_int bad;     /* rounds where told was not one */
    atomic_int asleep;  /* every-task-asleep callbacks */
};

struct racer {
    struct race *r;
    int i;
};

/* Waits until all n have arrived for the k-th time (k from 1). */
static void meet(struct race *r, int k)
{
    atomic_fetch_add(&r->arrived, 1);
    for (int spins = 1; atomic_load(&r->arrived) < k * r->n; spins++)
        if (spins % 64 == 0) {
            /* More workers than CPUs: let the others on. */
            sched_yield();
            weft_yield();
        }
}

static int racer(void *arg)
{
    struct racer *me = arg;
    struct race *r = me->r;
    uint64_t rnd = (uint64_t)me->i * 0x9e3779b97f4a7c15ull + 1;
    for (int k = 0; k < r->rounds; k++) {
        ASSERT_EQ(weft_mutex_lock(&r->m[me->i]), 0);
        meet(r, 3 * k + 1);
        /* A little jitter, so that the lockers' steps overlap in every
         * way over the rounds. */
        for (volatile int j = (int)(next_rand(&rnd) % 128); j > 0; j--)
            ;
        int rc = weft_mutex_lock(&r->m[(me->i + 1) % r->n]);
        if (rc == 0) {
            ASSERT_EQ(weft_mutex_unlock(&r->m[(me->i + 1) % r->n]), 0);
        } else if (rc == -EDEADLK) {
            atomic_fetch_add(&r->told, 1);
        } else {
            ASSERT_EQ(rc, -ECANCELED); /* every task asleep: reported */
            return rc;
        }
        ASSERT_EQ(weft_mutex_unlock(&r->m[me->i]), 0);
        meet(r, 3 * k + 2);
        if (me->i == 0 && atomic_load(&r->told) != k + 1)
            atomic_fetch_add(&r->bad, 1);
        if (me->i == 0)
            atomic_store(&r->told, k + 1); /* count the next round alone */
        meet(r, 3 * k + 3);
    }
    return 0;
}

static int race_root(void *arg)
{
    struct race *r = arg;
    struct racer rs[RING_MAX];
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_COLLECT}),
              0);
    for (int i = 0; i < r->n; i++) {
        rs[i] = (struct racer){r, i};
        weft_spawn_opts o = {.name = names[i], .worker = i + 1};
        ASSERT(weft_spawn_ex(s, racer, &rs[i], &o) >= 0);
    }
    weft_scope_join(s);
    weft_scope_free(s);
    return 0;
}

static void on_race_deadlock(void *ctx, weft_deadlock_kind kind)
{
    struct race *r = ctx;
    if (kind == WEFT_DEADLOCK_ALL_ASLEEP)
        atomic_fetch_add(&r->asleep, 1);
}

static void race_run(int n)
{
    struct race r = {.n = n, .rounds = (int)T_SCALE(2000)};
    for (int i = 0; i < n; i++)
        r.m[i] = (weft_mutex)WEFT_MUTEX_INIT;
    weft_config cfg = {.workers = n,
                       .clock = WEFT_CLOCK_MONOTONIC,
                       .deadlock = WEFT_DEADLOCK_CALLBACK,
                       .on_deadlock = on_race_deadlock,
                       .deadlock_ctx = &r,
                       .deadlock_grace_ns = GRACE};
    int rc = weft_run(&cfg, race_root, &r);
    if (rc != 0 || atomic_load(&r.asleep) || atomic_load(&r.bad))
        T_FAIL("ring of %d: weft_run returned %d, every task asleep %d "
               "time(s), %d of %d rounds not told exactly once",
               n, rc, atomic_load(&r.asleep), atomic_load(&r.bad), r.rounds);
}

TEST(a_ring_closed_at_once_on_two_workers_is_told_once)
{
    race_run(2);
}

TEST(a_ring_closed_at_once_on_three_workers_is_told_once)
{
    race_run(3);
}
