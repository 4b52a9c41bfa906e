/* SPDX-License-Identifier: MIT */
/*
 * Deadlock detection: every task asleep with nothing outside to wake one
 * (a receive on a channel nobody else holds, a scope join whose child
 * waits for its parent), cycles of mutex waits, and what is not a
 * deadlock (a timer, a socket, a blocking call, a future or a channel
 * that a plain thread completes, a shutdown request). Reports are read
 * from stderr, caught in a temporary file.
 */
#include "observe/where.h" /* weft__where_lines */
#include "t.h"
#include "weft.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GRACE (20 * WEFT_MSEC) /* the tests' grace: short, but real */

/* ---- stderr, caught ---------------------------------------------------- */

struct cap {
    int saved, fd;
};

static void cap_begin(struct cap *c)
{
    char path[] = "/tmp/weft-deadlock-XXXXXX";
    c->fd = mkstemp(path);
    ASSERT(c->fd >= 0);
    unlink(path);
    fflush(stderr);
    c->saved = dup(2);
    ASSERT(c->saved >= 0);
    ASSERT(dup2(c->fd, 2) == 2);
}

/* Ends the capture; returns what was written (free it). */
static char *cap_end(struct cap *c)
{
    fflush(stderr);
    ASSERT(dup2(c->saved, 2) == 2);
    close(c->saved);
    off_t len = lseek(c->fd, 0, SEEK_END);
    ASSERT(len >= 0);
    char *buf = malloc((size_t)len + 1);
    ASSERT(buf);
    ASSERT_EQ(pread(c->fd, buf, (size_t)len, 0), (ssize_t)len);
    buf[len] = 0;
    close(c->fd);
    return buf;
}

static int run_cfg(int workers, weft_clock_kind clock, uint64_t seed,
                   weft_fn fn, void *arg, char **err)
{
    /* No watchdog: on a loaded machine a worker's thread kept off the CPU
     * for 100 ms would be reported, and its line would come before the
     * deadlock's in the text the tests read. */
    weft_config cfg = {.workers = workers,
                       .clock = clock,
                       .seed = seed,
                       .deadlock_grace_ns = GRACE,
                       .watchdog_ns = WEFT_NEVER};
    struct cap c;
    cap_begin(&c);
    int rc = weft_run(&cfg, fn, arg);
    char *out = cap_end(&c);
    if (err)
        *err = out;
    else
        free(out);
    return rc;
}

static bool first_line_has(const char *text, const char *word)
{
    const char *nl = strchr(text, '\n');
    size_t n = nl ? (size_t)(nl - text) : strlen(text);
    char line[512];
    if (n >= sizeof line)
        n = sizeof line - 1;
    memcpy(line, text, n);
    line[n] = 0;
    return strstr(line, word) != NULL;
}

/* ---- a receive on a channel nobody else holds -------------------------- */

static int lonely_receiver(void *arg)
{
    int *rc = arg;
    weft_chan *c;
    ASSERT_EQ(weft_chan_new(&c, sizeof(int), 0), 0);
    int v;
    *rc = weft_chan_recv(c, &v); /* nobody can ever send */
    weft_chan_unref(c);
    return *rc;
}

static int lonely_root(void *arg)
{
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    weft_spawn_opts o = {.name = "lonely receiver"};
    ASSERT(weft_spawn_ex(s, lonely_receiver, arg, &o) >= 0);
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    return rc;
}

TEST(receive_on_a_channel_nobody_holds)
{
    weft_clock_kind clocks[] = {WEFT_CLOCK_MONOTONIC, WEFT_CLOCK_VIRTUAL};
    for (int k = 0; k < 2; k++) {
        for (int workers = 1; workers <= 2; workers++) {
            int rc = 1;
            char *err;
            ASSERT_EQ(run_cfg(workers, clocks[k], 0, lonely_root, &rc, &err),
                      -EDEADLK);
            /* The root scope was cancelled: the receive ended. */
            ASSERT_EQ(rc, -ECANCELED);
            ASSERT(first_line_has(err, "deadlock"));
            ASSERT(strstr(err, "\"lonely receiver\""));
            ASSERT(strstr(err, "waits for channel receive"));
            ASSERT(strstr(err, "test_deadlock.c"));
            /* The root waits for the scope: it is named too. */
            ASSERT(strstr(err, "\"root\""));
            ASSERT(strstr(err, "waits for scope join"));
            free(err);
        }
    }
}

/* A task whose last wait was on a descriptor ("read", in that wait's
 * line) and whose wait now is a receive: its report line names the
 * receive alone, not a direction left from the descriptor's wait. */
struct after_fd {
    int fds[2];
    int rc;
};

static int writes_a_byte(void *arg)
{
    struct after_fd *a = arg;
    weft_yield(); /* the reader parks on the descriptor first */
    ASSERT_EQ(write(a->fds[1], "x", 1), 1);
    return 0;
}

static int reads_then_receives(void *arg)
{
    struct after_fd *a = arg;
    ASSERT_EQ(weft_fd_wait(a->fds[0], WEFT_IO_READ, WEFT_NEVER), 0);
    char c;
    ASSERT_EQ(read(a->fds[0], &c, 1), 1);
    return lonely_receiver(&a->rc);
}

static int after_fd_root(void *arg)
{
    weft_scope *s = scope_open();
    weft_spawn_opts o = {.name = "lonely receiver"};
    ASSERT(weft_spawn_ex(s, reads_then_receives, arg, &o) >= 0);
    ASSERT(weft_spawn(s, writes_a_byte, arg) >= 0);
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    return rc;
}

TEST(a_report_names_no_direction_left_from_a_descriptor_wait)
{
    struct after_fd a = {.rc = 1};
    ASSERT_EQ(pipe(a.fds), 0);
    char *err;
    ASSERT_EQ(run_cfg(1, WEFT_CLOCK_VIRTUAL, 0, after_fd_root, &a, &err),
              -EDEADLK);
    ASSERT_EQ(a.rc, -ECANCELED);
    const char *line = strstr(err, "waits for channel receive");
    ASSERT(line != NULL);
    const char *end = strchr(line, '\n');
    ASSERT(end != NULL);
    ASSERT(!memmem(line, (size_t)(end - line), "(read)", 6));
    free(err);
    close(a.fds[0]);
    close(a.fds[1]);
}

/* ---- the reports name the line each task blocks on -------------------- */

static int recv_line, lock_line; /* the lines of the blocking calls */

static int where_receiver(void *arg)
{
    weft_chan *c = arg;
    int v;
    recv_line = __LINE__ + 1;
    int rc = weft_chan_recv(c, &v);
    return rc == -ECANCELED ? 0 : -EPROTO; /* (no tail call) */
}

static int where_root(void *arg)
{
    (void)arg;
    weft_chan *c;
    weft_scope *s;
    ASSERT_EQ(weft_chan_new(&c, sizeof(int), 0), 0);
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    weft_spawn_opts o = {.name = "where receiver"};
    ASSERT(weft_spawn_ex(s, where_receiver, c, &o) >= 0);
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    weft_chan_unref(c);
    return rc;
}

struct pair {
    weft_mutex m[2];
    weft_wg holding;
    atomic_int deadlk;
};

struct pair_member {
    struct pair *p;
    int i;
};

static int pair_member(void *arg)
{
    struct pair_member *me = arg;
    struct pair *p = me->p;
    ASSERT_EQ(weft_mutex_lock(&p->m[me->i]), 0);
    weft_wg_done(&p->holding);
    ASSERT_EQ(weft_wg_wait(&p->holding), 0);
    lock_line = __LINE__ + 1;
    int rc = weft_mutex_lock(&p->m[!me->i]);
    if (rc == 0)
        weft_mutex_unlock(&p->m[!me->i]);
    else
        atomic_fetch_add(&p->deadlk, 1);
    ASSERT_EQ(weft_mutex_unlock(&p->m[me->i]), 0);
    return rc == 0 || rc == -EDEADLK ? 0 : rc;
}

static int pair_root(void *arg)
{
    struct pair *p = arg;
    struct pair_member mem[2] = {{p, 0}, {p, 1}};
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int i = 0; i < 2; i++)
        ASSERT(weft_spawn_ex(s, pair_member, &mem[i],
                             &(weft_spawn_opts){.name = "pair member"}) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    weft_scope_free(s);
    return 0;
}

/* How many times needle occurs in text. */
static int lines_with(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

TEST(reports_name_the_line_each_task_blocks_on)
{
    if (!weft__where_lines())
        T_NEED("libdw", "weft built without libdw (no lines)");
    char *err, want[128];
    /* every task asleep: each one's line under its wait */
    ASSERT_EQ(run_cfg(1, WEFT_CLOCK_VIRTUAL, 0, where_root, NULL, &err),
              -EDEADLK);
    snprintf(want, sizeof(want),
             "      at where_receiver (test/test_deadlock.c:%d)\n", recv_line);
    if (!strstr(err, want))
        T_FAIL("no \"%s\" in:\n%s", want, err);
    /* the root's join: the line in weft's runtime that joins */
    ASSERT(strstr(err, "task 0.1 \"root\" (spawned at src/runtime/runtime.c:"));
    free(err);
    /* a mutex cycle: the locker's line */
    for (int workers = 1; workers <= 2; workers++) {
        struct pair p = {.m = {WEFT_MUTEX_INIT, WEFT_MUTEX_INIT},
                         .holding = WEFT_WG_INIT};
        ASSERT_EQ(weft_wg_add(&p.holding, 2), 0);
        ASSERT_EQ(
            run_cfg(workers, WEFT_CLOCK_MONOTONIC, 0, pair_root, &p, &err), 0);
        ASSERT(atomic_load(&p.deadlk) >= 1);
        if (!first_line_has(err, "mutex deadlock"))
            T_FAIL("no report in:\n%s", err);
        snprintf(want, sizeof(want),
                 "      at pair_member (test/test_deadlock.c:%d)\n", lock_line);
        /* the locker's line, once per cycle (the others' stacks are not
         * walked: nothing keeps them alive meanwhile) */
        if (lines_with(err, want) != atomic_load(&p.deadlk))
            T_FAIL("wants one \"%s\" per cycle in:\n%s", want, err);
        free(err);
    }
}

/* ---- a join of a scope whose child waits for its parent ---------------- */

struct parent {
    weft_event go; /* set by the parent after the join: never */
    int child_rc;
};

static int waits_for_parent(void *arg)
{
    struct parent *p = arg;
    p->child_rc = weft_event_wait(&p->go);
    return p->child_rc;
}

static int parent_root(void *arg)
{
    struct parent *p = arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    weft_spawn_opts o = {.name = "child"};
    ASSERT(weft_spawn_ex(s, waits_for_parent, p, &o) >= 0);
    int rc = weft_scope_join(s); /* the child waits for us: never */
    weft_event_set(&p->go);
    weft_scope_free(s);
    return rc;
}

TEST(join_of_a_scope_whose_child_waits_for_its_parent)
{
    for (int workers = 1; workers <= 2; workers++) {
        struct parent p = {.go = WEFT_EVENT_INIT, .child_rc = 1};
        char *err;
        ASSERT_EQ(
            run_cfg(workers, WEFT_CLOCK_VIRTUAL, 0, parent_root, &p, &err),
            -EDEADLK);
        ASSERT_EQ(p.child_rc, -ECANCELED);
        ASSERT(first_line_has(err, "deadlock"));
        ASSERT(strstr(err, "\"child\""));
        ASSERT(strstr(err, "waits for event"));
        ASSERT(strstr(err, "waits for scope join"));
        ASSERT(strstr(err, "1 children running"));
        free(err);
    }
}

/* ---- cycles of mutex waits --------------------------------------------- */

#define RING_MAX 4

struct ring {
    int n;
    weft_mutex m[RING_MAX];
    weft_wg holding; /* every member holds its first mutex */
    atomic_int deadlk, locked;
    atomic_bool spin; /* a bystander keeps running meanwhile */
};

struct member {
    struct ring *r;
    int i;
};

/* Member i holds m[i], then wants m[(i + 1) % n]. */
static int ring_member(void *arg)
{
    struct member *me = arg;
    struct ring *r = me->r;
    ASSERT_EQ(weft_mutex_lock(&r->m[me->i]), 0);
    weft_wg_done(&r->holding);
    ASSERT_EQ(weft_wg_wait(&r->holding), 0);
    int rc = weft_mutex_lock(&r->m[(me->i + 1) % r->n]);
    if (rc == 0) {
        atomic_fetch_add(&r->locked, 1);
        weft_mutex_unlock(&r->m[(me->i + 1) % r->n]);
    } else {
        ASSERT_EQ(rc, -EDEADLK); /* told, holding only its first */
        atomic_fetch_add(&r->deadlk, 1);
    }
    ASSERT_EQ(weft_mutex_unlock(&r->m[me->i]), 0);
    return 0;
}

static int bystander(void *arg)
{
    struct ring *r = arg;
    while (atomic_load(&r->spin))
        weft_yield();
    return 0;
}

static int ring_root(void *arg)
{
    struct ring *r = arg;
    struct member mem[RING_MAX];
    weft_scope *s, *b;
    ASSERT_EQ(weft_scope_open(&b, NULL), 0);
    atomic_store(&r->spin, true);
    weft_spawn_opts bo = {.name = "bystander"};
    ASSERT(weft_spawn_ex(b, bystander, r, &bo) >= 0);
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int i = 0; i < r->n; i++) {
        mem[i] = (struct member){r, i};
        weft_spawn_opts o = {.name = "ring member"};
        ASSERT(weft_spawn_ex(s, ring_member, &mem[i], &o) >= 0);
    }
    ASSERT_EQ(weft_scope_join(s), 0);
    atomic_store(&r->spin, false);
    ASSERT_EQ(weft_scope_join(b), 0);
    weft_scope_free(s);
    weft_scope_free(b);
    return 0;
}

static void ring_run(int n, int workers, uint64_t seed)
{
    struct ring r = {.n = n};
    for (int i = 0; i < n; i++)
        r.m[i] = (weft_mutex)WEFT_MUTEX_INIT;
    r.holding = (weft_wg)WEFT_WG_INIT;
    ASSERT_EQ(weft_wg_add(&r.holding, n), 0);
    char *err;
    ASSERT_EQ(run_cfg(workers, WEFT_CLOCK_MONOTONIC, T_SEED(seed), ring_root,
                      &r, &err),
              0);
    /* The one who closed the ring was told; everyone else got through. */
    ASSERT_EQ(atomic_load(&r.deadlk), 1);
    ASSERT_EQ(atomic_load(&r.locked), n - 1);
    if (!first_line_has(err, "mutex deadlock"))
        T_FAIL("the report does not start with the deadlock:\n%s", err);
    ASSERT(strstr(err, "\"ring member\""));
    ASSERT(strstr(err, "returns -EDEADLK"));
    ASSERT(!strstr(err, "\"bystander\""));
    free(err);
}

TEST(two_mutex_cycle_while_others_run)
{
    for (uint64_t seed = 1; seed <= 20; seed++)
        ring_run(2, 1, seed);
    for (int k = 0; k < T_SCALE(20); k++)
        ring_run(2, 2, 0);
}

TEST(longer_mutex_rings)
{
    for (int n = 3; n <= RING_MAX; n++) {
        for (uint64_t seed = 1; seed <= 10; seed++)
            ring_run(n, 1, seed);
        ring_run(n, 2, 0);
    }
}

/* Waiting for a mutex whose holder waits for something else is no cycle. */
struct chainlock {
    weft_mutex m;
    weft_event go;
};

static int holder_waits(void *arg)
{
    struct chainlock *c = arg;
    ASSERT_EQ(weft_mutex_lock(&c->m), 0);
    ASSERT_EQ(weft_event_wait(&c->go), 0);
    ASSERT_EQ(weft_mutex_unlock(&c->m), 0);
    return 0;
}

static int wants_lock(void *arg)
{
    struct chainlock *c = arg;
    ASSERT_EQ(weft_sleep_until(weft_now() + WEFT_MSEC), 0);
    weft_event_set(&c->go);
    ASSERT_EQ(weft_mutex_lock(&c->m), 0);
    ASSERT_EQ(weft_mutex_unlock(&c->m), 0);
    return 0;
}

static int chain_root(void *arg)
{
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, holder_waits, arg) >= 0);
    ASSERT(weft_spawn(s, wants_lock, arg) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    weft_scope_free(s);
    return 0;
}

TEST(a_held_mutex_is_no_cycle)
{
    for (int workers = 1; workers <= 2; workers++) {
        struct chainlock c = {.m = WEFT_MUTEX_INIT, .go = WEFT_EVENT_INIT};
        char *err;
        ASSERT_EQ(run_cfg(workers, WEFT_CLOCK_VIRTUAL, 0, chain_root, &c, &err),
                  0);
        ASSERT_EQ(err[0], 0);
        free(err);
    }
}

/* ---- not deadlocks ------------------------------------------------------ */

/* A plain thread that acts after a real delay longer than the grace. */
struct later {
    pthread_t th;
    int64_t delay_ns;
    void (*fn)(void *);
    void *arg;
};

static void *later_main(void *arg)
{
    struct later *l = arg;
    struct timespec ts = {(time_t)(l->delay_ns / WEFT_SEC),
                          (long)(l->delay_ns % WEFT_SEC)};
    nanosleep(&ts, NULL); /* an outside event that takes its time */
    l->fn(l->arg);
    return NULL;
}

static void later_start(struct later *l, int64_t delay_ns, void (*fn)(void *),
                        void *arg)
{
    *l = (struct later){.delay_ns = delay_ns, .fn = fn, .arg = arg};
    ASSERT_EQ(pthread_create(&l->th, NULL, later_main, l), 0);
}

static int timer_root(void *arg)
{
    (void)arg;
    /* Asleep for an hour of virtual time: a timer is armed throughout. */
    ASSERT_EQ(weft_sleep_until(weft_now() + 3600 * WEFT_SEC), 0);
    return 7;
}

TEST(a_timer_is_no_deadlock)
{
    for (int workers = 1; workers <= 2; workers++) {
        char *err;
        ASSERT_EQ(
            run_cfg(workers, WEFT_CLOCK_VIRTUAL, 0, timer_root, NULL, &err), 7);
        ASSERT_EQ(err[0], 0);
        free(err);
    }
}

static void write_byte(void *arg)
{
    char b = 42;
    ASSERT_EQ(write(*(int *)arg, &b, 1), 1);
}

static int socket_root(void *arg)
{
    int *sv = arg;
    struct later l;
    later_start(&l, 5 * GRACE, write_byte, &sv[1]);
    char b = 0;
    ASSERT_EQ(weft_read(sv[0], &b, 1, WEFT_NEVER), 1);
    ASSERT_EQ(b, 42);
    pthread_join(l.th, NULL);
    return 0;
}

TEST(a_socket_is_no_deadlock)
{
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    char *err;
    ASSERT_EQ(run_cfg(2, WEFT_CLOCK_MONOTONIC, 0, socket_root, sv, &err), 0);
    ASSERT_EQ(err[0], 0);
    free(err);
    close(sv[0]);
    close(sv[1]);
}

static int slow_call(void *arg)
{
    (void)arg;
    struct timespec ts = {0, (long)(5 * GRACE)};
    nanosleep(&ts, NULL); /* a blocking call that takes its time */
    return 5;
}

static int blocking_root(void *arg)
{
    (void)arg;
    return weft_blocking(slow_call, NULL);
}

TEST(a_blocking_call_is_no_deadlock)
{
    char *err;
    ASSERT_EQ(run_cfg(2, WEFT_CLOCK_MONOTONIC, 0, blocking_root, NULL, &err),
              5);
    ASSERT_EQ(err[0], 0);
    free(err);
    ASSERT_EQ(run_cfg(1, WEFT_CLOCK_VIRTUAL, 0, blocking_root, NULL, &err), 5);
    ASSERT_EQ(err[0], 0);
    free(err);
}

static void resolve_future(void *arg)
{
    int v = 99;
    ASSERT_EQ(weft_future_resolve(arg, &v), 0);
    weft_future_unref(arg);
}

static int future_root(void *arg)
{
    (void)arg;
    weft_future *f;
    ASSERT_EQ(weft_future_new(&f, sizeof(int)), 0);
    struct later l;
    later_start(&l, 5 * GRACE, resolve_future, weft_future_ref(f));
    int v = 0;
    ASSERT_EQ(weft_future_await(f, &v, WEFT_NEVER), 0);
    ASSERT_EQ(v, 99);
    weft_future_unref(f);
    pthread_join(l.th, NULL);
    return 0;
}

TEST(a_future_from_a_plain_thread_is_no_deadlock)
{
    char *err;
    ASSERT_EQ(run_cfg(2, WEFT_CLOCK_MONOTONIC, 0, future_root, NULL, &err), 0);
    ASSERT_EQ(err[0], 0);
    free(err);
    ASSERT_EQ(run_cfg(1, WEFT_CLOCK_VIRTUAL, 0, future_root, NULL, &err), 0);
    ASSERT_EQ(err[0], 0);
    free(err);
}

static void request_shutdown(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_shutdown_request(), 0);
}

static int shutdown_root(void *arg)
{
    (void)arg;
    struct later l;
    later_start(&l, 5 * GRACE, request_shutdown, NULL);
    int rc = weft_shutdown_wait(WEFT_NEVER);
    pthread_join(l.th, NULL);
    return rc == 0 || rc == -ECANCELED ? 3 : rc;
}

TEST(waiting_for_shutdown_is_no_deadlock)
{
    char *err;
    ASSERT_EQ(run_cfg(2, WEFT_CLOCK_MONOTONIC, 0, shutdown_root, NULL, &err),
              3);
    ASSERT_EQ(err[0], 0);
    free(err);
}

/* A plain thread that sends later than the grace is not seen (the
 * documented limit), unless detection is off. */
static void send_from_plain(void *arg)
{
    int v = 5;
    ASSERT_EQ(weft_chan_try_send(arg, &v), 0);
    weft_chan_unref(arg);
}

/* arg: the plain thread's delay (int64_t ns), or NULL: 5 graces. */
static int plain_sender_root(void *arg)
{
    int64_t delay = arg ? *(int64_t *)arg : 5 * GRACE;
    weft_chan *c;
    ASSERT_EQ(weft_chan_new(&c, sizeof(int), 1), 0);
    struct later l;
    later_start(&l, delay, send_from_plain, weft_chan_ref(c));
    int v = 0;
    int rc = weft_chan_recv(c, &v);
    pthread_join(l.th, NULL);
    weft_chan_unref(c);
    return rc == 0 ? v : rc;
}

TEST(a_plain_thread_later_than_the_grace)
{
    weft_config cfg = {.workers = 2,
                       .deadlock = WEFT_DEADLOCK_IGNORE,
                       .deadlock_grace_ns = GRACE};
    ASSERT_EQ(weft_run(&cfg, plain_sender_root, NULL), 5);
    /* A grace longer than the thread's delay: seen in time. */
    cfg.deadlock = WEFT_DEADLOCK_REPORT;
    cfg.deadlock_grace_ns = 50 * GRACE;
    ASSERT_EQ(weft_run(&cfg, plain_sender_root, NULL), 5);
    /* A shorter one: reported, and the receive cancelled. The thread
     * sends 25 graces late, so that a detection slowed by a loaded
     * machine still comes first. */
    char *err;
    int64_t late = 25 * GRACE;
    ASSERT_EQ(
        run_cfg(2, WEFT_CLOCK_MONOTONIC, 0, plain_sender_root, &late, &err),
        -EDEADLK);
    ASSERT(first_line_has(err, "deadlock"));
    free(err);
}

/* A select: over channels nobody else holds it is stuck; with a future
 * among its cases, a plain thread may end it. */
struct sel {
    bool with_future;
    int rc, v;
};

static int select_root(void *arg)
{
    struct sel *x = arg;
    weft_chan *a, *b;
    weft_future *f;
    ASSERT_EQ(weft_chan_new(&a, sizeof(int), 0), 0);
    ASSERT_EQ(weft_chan_new(&b, sizeof(int), 0), 0);
    ASSERT_EQ(weft_future_new(&f, sizeof(int)), 0);
    int va = 0, vb = 0;
    weft_case cases[3] = {
        {.op = WEFT_OP_RECV, .chan = a, .elem = &va},
        {.op = WEFT_OP_RECV, .chan = b, .elem = &vb},
        {.op = WEFT_OP_FUTURE, .future = f, .elem = &x->v},
    };
    struct later l;
    if (x->with_future)
        later_start(&l, 5 * GRACE, resolve_future, weft_future_ref(f));
    x->rc = weft_select(cases, x->with_future ? 3 : 2, WEFT_NEVER);
    if (x->with_future)
        pthread_join(l.th, NULL);
    weft_future_unref(f);
    weft_chan_unref(a);
    weft_chan_unref(b);
    return 0;
}

TEST(select_over_channels_nobody_holds_and_with_a_future)
{
    struct sel x = {.with_future = false};
    char *err;
    ASSERT_EQ(run_cfg(2, WEFT_CLOCK_MONOTONIC, 0, select_root, &x, &err),
              -EDEADLK);
    ASSERT_EQ(x.rc, -ECANCELED);
    ASSERT(first_line_has(err, "deadlock"));
    ASSERT(strstr(err, "waits for select"));
    free(err);
    struct sel y = {.with_future = true};
    ASSERT_EQ(run_cfg(2, WEFT_CLOCK_MONOTONIC, 0, select_root, &y, &err), 0);
    ASSERT_EQ(y.rc, 2);
    ASSERT_EQ(y.v, 99);
    ASSERT_EQ(err[0], 0);
    free(err);
}

/* ---- modes ----------------------------------------------------------------
 */

struct calls {
    atomic_int all, ring;
};

static void on_deadlock(void *ctx, weft_deadlock_kind kind)
{
    struct calls *c = ctx;
    if (kind == WEFT_DEADLOCK_ALL_ASLEEP)
        atomic_fetch_add(&c->all, 1);
    else if (kind == WEFT_DEADLOCK_MUTEX_CYCLE)
        atomic_fetch_add(&c->ring, 1);
}

TEST(callback_mode)
{
    struct calls calls = {0};
    weft_config cfg = {.workers = 2,
                       .clock = WEFT_CLOCK_VIRTUAL,
                       .deadlock = WEFT_DEADLOCK_CALLBACK,
                       .on_deadlock = on_deadlock,
                       .deadlock_ctx = &calls,
                       .deadlock_grace_ns = GRACE};
    int rc = 1;
    struct cap c;
    cap_begin(&c);
    ASSERT_EQ(weft_run(&cfg, lonely_root, &rc), -EDEADLK);
    char *err = cap_end(&c);
    ASSERT_EQ(err[0], 0); /* the callback instead of the report */
    free(err);
    ASSERT_EQ(rc, -ECANCELED);
    ASSERT_EQ(atomic_load(&calls.all), 1);
    ASSERT_EQ(atomic_load(&calls.ring), 0);
}

TEST(abort_mode)
{
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 2);
        weft_config cfg = {.workers = 1,
                           .deadlock = WEFT_DEADLOCK_ABORT,
                           .deadlock_grace_ns = GRACE};
        int rc = 0;
        weft_run(&cfg, lonely_root, &rc);
        _exit(0); /* not reached */
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT(WIFSIGNALED(st));
    ASSERT_EQ(WTERMSIG(st), SIGABRT);
}

TEST(bad_config)
{
    weft_config cfg = {.deadlock = (weft_deadlock_mode)9};
    ASSERT_EQ(weft_run(&cfg, timer_root, NULL), -EINVAL);
    cfg.deadlock = WEFT_DEADLOCK_CALLBACK; /* and no callback */
    ASSERT_EQ(weft_run(&cfg, timer_root, NULL), -EINVAL);
    cfg.deadlock = WEFT_DEADLOCK_REPORT;
    cfg.deadlock_grace_ns = -1;
    ASSERT_EQ(weft_run(&cfg, timer_root, NULL), -EINVAL);
}

/* A task a cancel cannot reach (it waits inside a shielded scope, on a
 * channel nobody else holds): after the cancel it is still asleep, and
 * the runtime ends without it. Run in a child process: its memory is left
 * behind on purpose, which the leak checker would report. */
static int shielded_root(void *arg)
{
    weft_scope *s;
    weft_scope_opts o = {.shield = 1};
    ASSERT_EQ(weft_scope_open(&s, &o), 0);
    int rc = lonely_root(arg);
    weft_scope_join(s);
    weft_scope_free(s);
    return rc;
}

TEST(tasks_a_cancel_cannot_reach_are_left)
{
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        int lonely = 1;
        char *err;
        int rc =
            run_cfg(2, WEFT_CLOCK_MONOTONIC, 0, shielded_root, &lonely, &err);
        int ok = rc == -EDEADLK && first_line_has(err, "deadlock") &&
                 strstr(err, "still asleep after the deadlock's cancel");
        _exit(ok ? 0 : 1); /* no leak check: their memory stays */
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
}
