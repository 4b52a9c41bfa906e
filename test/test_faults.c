/* SPDX-License-Identifier: MIT */
/*
 * Fault injection (weft.h, section 15): for each site, the public call
 * that passes through it returns the error it documents, nothing leaks
 * (ASan), and the runtime keeps working after it; the plan's checks; and
 * random mode over many seeds of a small service (a run is a function of
 * its seed, and the faults it makes come out as documented errors).
 *
 * A counter fault has to hit the pass of the call under test: a first run
 * with a plan that fails nothing counts the site's passes up to the call
 * (mark()), the second fails the next one. One worker, a seed and the
 * virtual clock make both runs take the same passes.
 */
#include "t.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void need_sites(void)
{
    weft_fault_stats st;
    if (weft_fault_stats_get(&st) == -ENOTSUP)
        T_SKIP("built without the fault sites (WEFT_FAULTS=OFF)");
}

static uint64_t passes(weft_fault_site s)
{
    weft_fault_stats st;
    ASSERT_EQ(weft_fault_stats_get(&st), 0);
    return st.passes[s];
}

static uint64_t fired(weft_fault_site s)
{
    weft_fault_stats st;
    ASSERT_EQ(weft_fault_stats_get(&st), 0);
    return st.fired[s];
}

static int run_plan(int workers, const weft_fault_plan *plan, weft_fn fn,
                    void *arg)
{
    weft_config cfg = {.workers = workers,
                       .clock = WEFT_CLOCK_VIRTUAL,
                       .seed = 7,
                       .faults = plan};
    return weft_run(&cfg, fn, arg);
}

/* A test body: runs the call under test after mark(), and checks what it
 * returned against what the fault (or no fault) should give. */
typedef struct probe {
    weft_fault_site site;
    int err;         /* the counter fault's errno (0: the site's first) */
    bool faulted;    /* this run fails the marked pass */
    uint64_t marked; /* the site's passes at mark() */
    int status;      /* what the body saw, for the test to check */
} probe;

static void mark(probe *p)
{
    p->marked = passes(p->site);
}

/* Runs body twice: counting, then failing the pass after the mark.
 * Returns the second run's weft_run status. */
static int fail_after_mark(probe *p, weft_fn body)
{
    weft_fault_plan counting = {0};
    p->faulted = false;
    ASSERT_EQ(run_plan(1, &counting, body, p), 0);
    uint64_t k = p->marked;
    weft_fault_plan plan = {.site = p->site, .nth = k + 1, .err = p->err};
    p->faulted = true;
    int rc = run_plan(1, &plan, body, p);
    ASSERT_EQ(p->marked, k); /* the same passes up to the call */
    ASSERT_EQ(fired(p->site), 1);
    return rc;
}

/* ---- the plan itself ---- */

static int nothing(void *arg)
{
    (void)arg;
    return 0;
}

static void *second_run(void *arg)
{
    weft_fault_plan plan = {0};
    *(int *)arg = run_plan(1, &plan, nothing, NULL);
    return NULL;
}

static int while_planned(void *arg)
{
    pthread_t th;
    int *rc = arg;
    ASSERT_EQ(pthread_create(&th, NULL, second_run, rc), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    return 0;
}

TEST(a_library_without_sites_refuses_a_plan)
{
    weft_fault_stats st;
    if (weft_fault_stats_get(&st) != -ENOTSUP)
        T_SKIP("built with the fault sites");
    weft_fault_plan plan = {.site = WEFT_FAULT_ALLOC, .nth = 1};
    ASSERT_EQ(run_plan(1, &plan, nothing, NULL), -ENOTSUP);
    ASSERT_EQ(run_plan(1, NULL, nothing, NULL), 0);
}

TEST(plans_are_checked)
{
    need_sites();
    weft_fault_plan bad_site = {.site = WEFT_FAULT_SITES, .nth = 1};
    ASSERT_EQ(run_plan(1, &bad_site, nothing, NULL), -EINVAL);
    weft_fault_plan bad_chance = {.active_permille = 1001};
    ASSERT_EQ(run_plan(1, &bad_chance, nothing, NULL), -EINVAL);
    weft_fault_plan bad_err = {.site = WEFT_FAULT_READ, .nth = 1, .err = -5};
    ASSERT_EQ(run_plan(1, &bad_err, nothing, NULL), -EINVAL);
    /* One planned run at a time. */
    int second = 0;
    weft_fault_plan plan = {0};
    ASSERT_EQ(run_plan(1, &plan, while_planned, &second), 0);
    ASSERT_EQ(second, -EBUSY);
    /* ... and the next one may have its own. */
    ASSERT_EQ(run_plan(1, &plan, nothing, NULL), 0);
    ASSERT_EQ(strcmp(weft_fault_site_name(WEFT_FAULT_ACCEPT), "accept"), 0);
    ASSERT(weft_fault_site_name(WEFT_FAULT_SITES) == NULL);
}

TEST(a_plan_that_fails_nothing_only_counts)
{
    need_sites();
    weft_fault_plan plan = {0};
    ASSERT_EQ(run_plan(2, &plan, nothing, NULL), 0);
    ASSERT(passes(WEFT_FAULT_STACK) >= 1); /* the root task's stack */
    ASSERT(passes(WEFT_FAULT_ALLOC) >= 1); /* the runtime itself */
    for (int s = 0; s < WEFT_FAULT_SITES; s++)
        ASSERT_EQ(fired((weft_fault_site)s), 0);
}

/* ---- each site ---- */

static int alloc_body(void *arg)
{
    probe *p = arg;
    weft_chan *c = NULL;
    mark(p);
    int rc = weft_chan_new(&c, sizeof(int), 4);
    if (p->faulted) {
        ASSERT_EQ(rc, -ENOMEM);
        ASSERT(c == NULL);
        rc = weft_chan_new(&c, sizeof(int), 4); /* and again: it works */
    }
    ASSERT_EQ(rc, 0);
    int v = 42, got = 0;
    ASSERT_EQ(weft_chan_send(c, &v), 0);
    ASSERT_EQ(weft_chan_recv(c, &got), 0);
    ASSERT_EQ(got, 42);
    ASSERT_EQ(weft_chan_unref(c), 0);
    return 0;
}

TEST(alloc_fault_is_enomem_and_the_next_call_works)
{
    need_sites();
    probe p = {.site = WEFT_FAULT_ALLOC};
    ASSERT_EQ(fail_after_mark(&p, alloc_body), 0);
}

TEST(stack_fault_for_the_root_task_fails_the_run)
{
    need_sites();
    weft_fault_plan plan = {.site = WEFT_FAULT_STACK, .nth = 1};
    ASSERT_EQ(run_plan(1, &plan, nothing, NULL), -ENOMEM);
    ASSERT_EQ(fired(WEFT_FAULT_STACK), 1);
    weft_fault_plan none = {0};
    ASSERT_EQ(run_plan(1, &none, nothing, NULL), 0); /* and the next runs */
}

/* Every allocation of a run's setup, failed in turn: the run returns
 * -ENOMEM (or goes on without what it could not make: the watchdog), never
 * aborts, and frees what it made (ASan). */
TEST(setup_allocation_faults_fail_the_run_cleanly)
{
    need_sites();
    weft_fault_plan counting = {0};
    weft_config cfg = {
        .workers = 2, .watchdog_ns = WEFT_SEC, .faults = &counting};
    ASSERT_EQ(weft_run(&cfg, nothing, NULL), 0);
    uint64_t n = passes(WEFT_FAULT_ALLOC);
    ASSERT(n >= 4);
    int before = t_proc_count("/proc/self/fd");
    int failed = 0;
    for (uint64_t k = 1; k <= n; k++) {
        weft_fault_plan plan = {.site = WEFT_FAULT_ALLOC, .nth = k};
        cfg.faults = &plan;
        int rc = weft_run(&cfg, nothing, NULL);
        ASSERT(rc == 0 || rc == -ENOMEM);
        failed += rc == -ENOMEM;
    }
    ASSERT(failed >= 3); /* the runtime, its root scope, a worker's parts */
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

static int child(void *arg)
{
    atomic_fetch_add((atomic_int *)arg, 1);
    return 0;
}

/* Spawns until a spawn needs a new chunk of stacks (the site's next
 * pass), which the plan fails; then the spawns go on. */
static int stack_body(void *arg)
{
    probe *p = arg;
    atomic_int ran = 0;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    int failed = 0, made = 0;
    uint64_t before = passes(WEFT_FAULT_STACK);
    mark(p);
    for (int i = 0; i < 4096 && passes(WEFT_FAULT_STACK) < before + 2; i++) {
        int rc = weft_spawn(s, child, &ran);
        if (rc == -ENOMEM) {
            failed++;
        } else {
            ASSERT(rc >= 0);
            made++;
        }
        if (i % 64 == 63)
            ASSERT_EQ(weft_yield(), 0); /* none finishes: slots stay taken */
    }
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(atomic_load(&ran), made);
    ASSERT_EQ(failed, p->faulted ? 1 : 0);
    return 0;
}

TEST(stack_fault_fails_one_spawn_and_the_next_works)
{
    need_sites();
    probe p = {.site = WEFT_FAULT_STACK};
    ASSERT_EQ(fail_after_mark(&p, stack_body), 0);
}

static int workers_body(void *arg)
{
    *(int *)arg = weft_workers();
    return 0;
}

static int blocking_fn(void *arg)
{
    (void)arg;
    return 5;
}

static int pool_body(void *arg)
{
    probe *p = arg;
    mark(p);
    int rc = weft_blocking(blocking_fn, NULL);
    ASSERT_EQ(rc, p->faulted ? -EAGAIN : 5);
    ASSERT_EQ(weft_blocking(blocking_fn, NULL), 5); /* a thread now */
    return 0;
}

TEST(thread_fault_runs_with_fewer_workers_or_fails_the_pool_call)
{
    need_sites();
    /* A worker's thread: the run goes on with the workers it has. */
    int n = 0;
    weft_fault_plan plan = {.site = WEFT_FAULT_THREAD, .nth = 1};
    ASSERT_EQ(run_plan(2, &plan, workers_body, &n), 0);
    ASSERT_EQ(n, 1);
    /* The third worker's: the second runs already, and must see the
     * count of workers the run goes on with, not race its store (TSan). */
    for (int i = 0; i < 20; i++) {
        plan.nth = 2;
        ASSERT_EQ(run_plan(4, &plan, workers_body, &n), 0);
        ASSERT_EQ(n, 2);
    }
    /* The blocking pool's first thread: the call says -EAGAIN. */
    probe p = {.site = WEFT_FAULT_THREAD};
    ASSERT_EQ(fail_after_mark(&p, pool_body), 0);
}

static void pair(int sv[2])
{
    ASSERT_EQ(
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv),
        0);
}

/* The first descriptor wait makes the worker's poller. */
static int poller_body(void *arg)
{
    probe *p = arg;
    int sv[2];
    pair(sv);
    ASSERT_EQ(write(sv[1], "x", 1), 1);
    mark(p);
    int rc = weft_fd_wait(sv[0], WEFT_IO_READ, WEFT_NEVER);
    if (p->faulted) {
        ASSERT_EQ(rc, -p->err);
        rc = weft_fd_wait(sv[0], WEFT_IO_READ, WEFT_NEVER);
    }
    ASSERT_EQ(rc, 0);
    close(sv[0]);
    close(sv[1]);
    return 0;
}

TEST(poller_and_eventfd_faults_fail_the_first_wait_only)
{
    need_sites();
    const char *env = getenv("WEFT_POLLER");
    if (env && strstr(env, "uring")) /* io_uring's refusal falls back */
        T_SKIP("the io_uring poller falls back to epoll on this fault");
    int errs[] = {EMFILE, ENOMEM, ENFILE};
    for (int i = 0; i < 2; i++) {
        probe p = {.site = WEFT_FAULT_POLLER, .err = errs[i]};
        ASSERT_EQ(fail_after_mark(&p, poller_body), 0);
        probe q = {.site = WEFT_FAULT_EVENTFD, .err = errs[2 * i]};
        ASSERT_EQ(fail_after_mark(&q, poller_body), 0);
    }
}

/* A descriptor weft did not make is registered at its first wait. */
static int ctl_body(void *arg)
{
    probe *p = arg;
    int sv[2], warm[2];
    pair(sv);
    pair(warm);
    ASSERT_EQ(write(warm[1], "x", 1), 1); /* the poller exists already */
    ASSERT_EQ(weft_fd_wait(warm[0], WEFT_IO_READ, WEFT_NEVER), 0);
    ASSERT_EQ(write(sv[1], "y", 1), 1);
    mark(p);
    int rc = weft_fd_wait(sv[0], WEFT_IO_READ, WEFT_NEVER);
    if (p->faulted) {
        ASSERT_EQ(rc, -(p->err ? p->err : ENOMEM));
        rc = weft_fd_wait(sv[0], WEFT_IO_READ, WEFT_NEVER);
    }
    ASSERT_EQ(rc, 0);
    for (int i = 0; i < 2; i++) {
        close(sv[i]);
        close(warm[i]);
    }
    return 0;
}

TEST(poller_ctl_fault_fails_one_wait)
{
    need_sites();
    const char *env = getenv("WEFT_POLLER");
    if (env && strstr(env, "uring"))
        T_SKIP("epoll_ctl is the epoll poller's");
    int errs[] = {ENOMEM, ENOSPC};
    for (int i = 0; i < 2; i++) {
        probe p = {.site = WEFT_FAULT_POLLER_CTL, .err = errs[i]};
        ASSERT_EQ(fail_after_mark(&p, ctl_body), 0);
    }
}

/* ---- sockets ---- */

static int listener(int *port)
{
    int lfd = weft_tcp_listen("127.0.0.1", 0, 16, 0);
    ASSERT(lfd >= 0);
    *port = weft_local_port(lfd);
    ASSERT(*port > 0);
    return lfd;
}

static int socket_body(void *arg)
{
    probe *p = arg;
    mark(p);
    int lfd = weft_tcp_listen("127.0.0.1", 0, 16, 0);
    if (p->faulted) {
        ASSERT_EQ(lfd, -(p->err ? p->err : EMFILE));
        lfd = weft_tcp_listen("127.0.0.1", 0, 16, 0);
    }
    ASSERT(lfd >= 0);
    ASSERT_EQ(weft_close(lfd), 0);
    return 0;
}

TEST(socket_fault_fails_the_call_that_makes_one)
{
    need_sites();
    int errs[] = {EMFILE, ENFILE, ENOBUFS}; /* each one the site makes */
    for (int i = 0; i < 3; i++) {
        probe p = {.site = WEFT_FAULT_SOCKET, .err = errs[i]};
        ASSERT_EQ(fail_after_mark(&p, socket_body), 0);
    }
}

static int connect_body(void *arg)
{
    probe *p = arg;
    int port;
    int lfd = listener(&port);
    mark(p);
    int fd = weft_tcp_connect("127.0.0.1", port, weft_now() + WEFT_SEC);
    if (p->faulted) {
        ASSERT_EQ(fd, -(p->err ? p->err : ECONNREFUSED));
        fd = weft_tcp_connect("127.0.0.1", port, weft_now() + WEFT_SEC);
    }
    ASSERT(fd >= 0);
    int afd = weft_accept(lfd, NULL, weft_now() + WEFT_SEC);
    ASSERT(afd >= 0);
    ASSERT_EQ(weft_write(fd, "hi", 2, WEFT_NEVER), 2);
    char b[2];
    ASSERT_EQ(weft_read_exact(afd, b, 2, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(memcmp(b, "hi", 2), 0);
    weft_close(afd);
    weft_close(fd);
    weft_close(lfd);
    return 0;
}

TEST(connect_fault_is_refused_and_closes_what_it_made)
{
    need_sites();
    int before = t_proc_count("/proc/self/fd");
    int errs[] = {ECONNREFUSED, ENETUNREACH, EADDRNOTAVAIL};
    for (int i = 0; i < 3; i++) {
        probe p = {.site = WEFT_FAULT_CONNECT, .err = errs[i]};
        ASSERT_EQ(fail_after_mark(&p, connect_body), 0);
    }
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

static int accept_body(void *arg)
{
    probe *p = arg;
    int port;
    int lfd = listener(&port);
    int fd = weft_tcp_connect("127.0.0.1", port, weft_now() + WEFT_SEC);
    ASSERT(fd >= 0);
    weft_time t0 = weft_now();
    mark(p);
    int afd = weft_accept(lfd, NULL, weft_now() + 10 * WEFT_SEC);
    /* Out of descriptors, accept backs off and tries again (weft.h):
     * the caller sees the connection, later. */
    ASSERT(afd >= 0);
    if (p->faulted && (p->err == EMFILE || p->err == ENFILE))
        ASSERT(weft_now() - t0 >= 10 * WEFT_MSEC);
    ASSERT_EQ(weft_write(afd, "ok", 2, WEFT_NEVER), 2);
    char b[2];
    ASSERT_EQ(weft_read_exact(fd, b, 2, NULL, WEFT_NEVER), 0);
    weft_close(afd);
    weft_close(fd);
    weft_close(lfd);
    return 0;
}

TEST(accept_faults_back_off_or_retry_and_the_connection_comes)
{
    need_sites();
    int errs[] = {EMFILE, ENFILE, ECONNABORTED, EINTR};
    for (int i = 0; i < 4; i++) {
        probe p = {.site = WEFT_FAULT_ACCEPT, .err = errs[i]};
        ASSERT_EQ(fail_after_mark(&p, accept_body), 0);
    }
}

static int read_body(void *arg)
{
    probe *p = arg;
    int sv[2];
    pair(sv);
    ASSERT_EQ(write(sv[1], "abcdefgh", 8), 8);
    char b[8];
    mark(p);
    ptrdiff_t n = weft_read(sv[0], b, 8, WEFT_NEVER);
    if (p->faulted && p->err == 0) { /* short: fewer, then the rest */
        ASSERT(n >= 1 && n < 8);
        ASSERT_EQ(
            weft_read_exact(sv[0], b + n, (size_t)(8 - n), NULL, WEFT_NEVER),
            0);
    } else if (p->faulted && p->err == EINTR) { /* retried inside */
        ASSERT_EQ(n, 8);
    } else if (p->faulted) {
        ASSERT_EQ(n, -p->err);
        ASSERT_EQ(weft_read(sv[0], b, 8, WEFT_NEVER), 8); /* nothing lost */
    } else {
        ASSERT_EQ(n, 8);
    }
    ASSERT_EQ(memcmp(b, "abcdefgh", 8), 0);
    close(sv[0]);
    close(sv[1]);
    return 0;
}

TEST(read_faults_short_reset_and_eintr)
{
    need_sites();
    int errs[] = {0, ECONNRESET, EIO, EINTR};
    for (int i = 0; i < 4; i++) {
        probe p = {.site = WEFT_FAULT_READ, .err = errs[i]};
        ASSERT_EQ(fail_after_mark(&p, read_body), 0);
    }
}

static int write_body(void *arg)
{
    probe *p = arg;
    int sv[2];
    pair(sv);
    mark(p);
    ptrdiff_t n = weft_write(sv[0], "abcdefgh", 8, WEFT_NEVER);
    if (p->faulted && p->err == 0) { /* short: the rest with write_all */
        ASSERT(n >= 1 && n < 8);
        ASSERT_EQ(weft_write_all(sv[0], &"abcdefgh"[n], (size_t)(8 - n), NULL,
                                 WEFT_NEVER),
                  0);
    } else if (p->faulted && p->err == EINTR) {
        ASSERT_EQ(n, 8);
    } else if (p->faulted) {
        ASSERT_EQ(n, -p->err);
        ASSERT_EQ(weft_write(sv[0], "abcdefgh", 8, WEFT_NEVER), 8);
    } else {
        ASSERT_EQ(n, 8);
    }
    char b[8];
    ASSERT_EQ(weft_read_exact(sv[1], b, 8, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(memcmp(b, "abcdefgh", 8), 0); /* nothing twice, nothing lost */
    close(sv[0]);
    close(sv[1]);
    return 0;
}

TEST(write_faults_short_pipe_and_eintr)
{
    need_sites();
    int errs[] = {0, EPIPE, ECONNRESET, EINTR};
    for (int i = 0; i < 4; i++) {
        probe p = {.site = WEFT_FAULT_WRITE, .err = errs[i]};
        ASSERT_EQ(fail_after_mark(&p, write_body), 0);
    }
}

static int late_writer(void *arg)
{
    int fd = *(int *)arg;
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    ASSERT_EQ(weft_write(fd, "z", 1, WEFT_NEVER), 1);
    return 0;
}

static int poll_body(void *arg)
{
    probe *p = arg;
    int sv[2];
    pair(sv);
    /* The read parks, the worker polls its poller (the fault: EINTR) and
     * then again, the writer's byte comes, and the read has it. */
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, late_writer, &sv[1]) >= 0);
    mark(p);
    char b[1];
    ASSERT_EQ(weft_read(sv[0], b, 1, WEFT_NEVER), 1);
    ASSERT_EQ(b[0], 'z');
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    close(sv[0]);
    close(sv[1]);
    return 0;
}

TEST(poll_fault_is_an_interrupted_poll_and_nothing_is_lost)
{
    need_sites();
    probe p = {.site = WEFT_FAULT_POLL};
    ASSERT_EQ(fail_after_mark(&p, poll_body), 0);
}

static int signalfd_body(void *arg)
{
    probe *p = arg;
    int sig = SIGUSR2;
    mark(p);
    int rc = weft_signal_wait(&sig, 1, weft_now() + WEFT_MSEC);
    ASSERT_EQ(rc, p->faulted ? -(p->err ? p->err : EMFILE) : -ETIMEDOUT);
    /* The runtime keeps working: the next wait takes a raised signal. */
    ASSERT_EQ(kill(getpid(), SIGUSR2), 0);
    ASSERT_EQ(weft_signal_wait(&sig, 1, weft_now() + WEFT_SEC), SIGUSR2);
    return 0;
}

TEST(signalfd_fault_fails_the_signal_wait)
{
    need_sites();
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    int errs[] = {EMFILE, ENFILE};
    for (int i = 0; i < 2; i++) {
        probe p = {.site = WEFT_FAULT_SIGNALFD, .err = errs[i]};
        ASSERT_EQ(fail_after_mark(&p, signalfd_body), 0);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* ---- random mode: a small service over many seeds ---- */

/* Errors a fault may bring out of the calls the service makes. */
static bool documented(long rc)
{
    return rc >= 0 || rc == -ENOMEM || rc == -EAGAIN || rc == -EMFILE ||
           rc == -ENFILE || rc == -ENOBUFS || rc == -ECONNRESET ||
           rc == -EPIPE || rc == -EIO || rc == -ECONNREFUSED ||
           rc == -ENETUNREACH || rc == -EADDRNOTAVAIL || rc == -ENOSPC ||
           rc == -ETIMEDOUT || rc == -ECANCELED;
}

struct svc {
    int lfd, port;
    atomic_int served, echoed, errors;
};

static int echo_conn(void *arg)
{
    struct svc *v = (struct svc *)((intptr_t *)arg)[0];
    int fd = (int)((intptr_t *)arg)[1];
    free(arg);
    char b[64];
    for (;;) {
        ptrdiff_t n = weft_read(fd, b, sizeof b, weft_now() + WEFT_SEC);
        ASSERT(documented(n));
        if (n <= 0)
            break;
        int rc = weft_write_all(fd, b, (size_t)n, NULL, weft_now() + WEFT_SEC);
        ASSERT(documented(rc));
        if (rc)
            break;
    }
    weft_close(fd);
    atomic_fetch_add(&v->served, 1);
    return 0;
}

static int acceptor(void *arg)
{
    struct svc *v = arg;
    for (;;) {
        int fd = weft_accept(v->lfd, NULL, WEFT_NEVER);
        if (fd == -ECANCELED || fd == -EBADF)
            return 0;
        ASSERT(documented(fd));
        if (fd < 0)
            continue;
        intptr_t *a = malloc(2 * sizeof(intptr_t));
        ASSERT(a != NULL);
        a[0] = (intptr_t)v;
        a[1] = fd;
        if (weft_spawn(NULL, echo_conn, a) < 0) {
            free(a);
            weft_close(fd);
        }
    }
}

static int client(void *arg)
{
    struct svc *v = arg;
    int fd = weft_tcp_connect("127.0.0.1", v->port, weft_now() + WEFT_SEC);
    ASSERT(documented(fd));
    if (fd < 0) {
        atomic_fetch_add(&v->errors, 1);
        return 0;
    }
    char msg[32], got[32];
    memset(msg, 'm', sizeof msg);
    int rc = weft_write_all(fd, msg, sizeof msg, NULL, weft_now() + WEFT_SEC);
    ASSERT(documented(rc));
    if (rc == 0)
        rc = weft_read_exact(fd, got, sizeof got, NULL, weft_now() + WEFT_SEC);
    ASSERT(documented(rc) || rc == -EPIPE);
    if (rc == 0) {
        ASSERT_EQ(memcmp(msg, got, sizeof msg), 0); /* never garbled */
        atomic_fetch_add(&v->echoed, 1);
    } else {
        atomic_fetch_add(&v->errors, 1);
    }
    weft_close(fd);
    return 0;
}

static int service(void *arg)
{
    struct svc *v = arg;
    v->lfd = weft_tcp_listen("127.0.0.1", 0, 64, 0);
    ASSERT(documented(v->lfd));
    if (v->lfd < 0)
        return 0;
    v->port = weft_local_port(v->lfd);
    weft_scope *srv, *cl;
    if (weft_scope_open(&srv, NULL) != 0) {
        weft_close(v->lfd);
        return 0;
    }
    int rc = weft_spawn(srv, acceptor, v);
    ASSERT(documented(rc));
    if (weft_scope_open(&cl, NULL) == 0) {
        for (int i = 0; i < 8; i++)
            ASSERT(documented(weft_spawn(cl, client, v)));
        weft_scope_join(cl);
        weft_scope_free(cl);
    }
    weft_scope_cancel(srv);
    weft_scope_join(srv);
    weft_scope_free(srv);
    weft_close(v->lfd);
    return 0;
}

TEST(random_faults_over_seeds_come_out_as_documented_errors)
{
    need_sites();
    int seeds = T_SCALE(200);
    uint64_t fired_any[WEFT_FAULT_SITES] = {0};
    int before = t_proc_count("/proc/self/fd");
    for (int i = 1; i <= seeds; i++) {
        weft_fault_plan plan = {
            .active_permille = 500, .fail_permille = 100, .seed = (uint64_t)i};
        struct svc v = {0};
        int rc = run_plan(1, &plan, service, &v);
        ASSERT(rc == 0 || rc == -ENOMEM); /* the root's own stack */
        weft_fault_stats a;
        ASSERT_EQ(weft_fault_stats_get(&a), 0);
        for (int s = 0; s < WEFT_FAULT_SITES; s++)
            fired_any[s] += a.fired[s];
    }
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before); /* nothing leaked */
    /* The service's own sites all fired somewhere in the sweep. */
    weft_fault_site used[] = {WEFT_FAULT_ALLOC,  WEFT_FAULT_SOCKET,
                              WEFT_FAULT_ACCEPT, WEFT_FAULT_CONNECT,
                              WEFT_FAULT_READ,   WEFT_FAULT_WRITE};
    for (size_t k = 0; k < sizeof used / sizeof used[0]; k++) {
        if (!fired_any[used[k]])
            fprintf(stderr, "site %s never fired\n",
                    weft_fault_site_name(used[k]));
        ASSERT(fired_any[used[k]] > 0);
    }
}

/* ---- random mode is a function of the seed ----
 * (Sockets on the kernel's loopback are not: whether a read finds data
 * depends on real time. What runs in the runtime alone is.) */

static int ping(void *arg)
{
    weft_chan *c = arg;
    for (int i = 0; i < 50; i++) {
        if (weft_chan_send(c, &i) != 0)
            break;
    }
    return 0;
}

static int churn(void *arg)
{
    long *sum = arg;
    for (int round = 0; round < 20; round++) {
        weft_chan *c = NULL;
        int rc = weft_chan_new(&c, sizeof(int), 4);
        ASSERT(rc == 0 || rc == -ENOMEM);
        if (rc)
            continue;
        weft_scope *s = NULL;
        rc = weft_scope_open(&s, NULL);
        ASSERT(rc == 0 || rc == -ENOMEM);
        if (rc == 0) {
            rc = weft_spawn(s, ping, c);
            ASSERT(rc >= 0 || rc == -ENOMEM);
            for (int i = 0; rc >= 0 && i < 50; i++) {
                int v;
                ASSERT_EQ(weft_chan_recv(c, &v), 0);
                *sum += v + round;
            }
            ASSERT_EQ(weft_scope_join(s), 0);
            ASSERT_EQ(weft_scope_free(s), 0);
        }
        ASSERT_EQ(weft_chan_unref(c), 0);
    }
    return 0;
}

TEST(random_mode_is_a_function_of_the_seed)
{
    need_sites();
    for (uint64_t seed = 1; seed <= (uint64_t)T_SCALE(100); seed++) {
        weft_fault_plan plan = {
            .active_permille = 1000, .fail_permille = 150, .seed = seed};
        long s1 = 0, s2 = 0;
        int r1 = run_plan(1, &plan, churn, &s1);
        weft_fault_stats a, b;
        ASSERT_EQ(weft_fault_stats_get(&a), 0);
        int r2 = run_plan(1, &plan, churn, &s2);
        ASSERT_EQ(weft_fault_stats_get(&b), 0);
        ASSERT(r1 == 0 || r1 == -ENOMEM);
        ASSERT_EQ(r1, r2);
        ASSERT_EQ(s1, s2);
        ASSERT_EQ(memcmp(&a, &b, sizeof a), 0);
    }
}
