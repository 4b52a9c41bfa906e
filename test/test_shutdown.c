/* SPDX-License-Identifier: MIT */
/*
 * Shutdown requests: weft_shutdown_request / _requested / _wait / _chan /
 * _deadline, the drain (weft_config.shutdown_drain_ns) and weft_main's
 * signals on top of them.
 *
 * Most tests run a pipeline under weft_run on the virtual clock: a
 * producer that stops intake on the request and closes its channel,
 * consumers that receive until -EPIPE, and instants checked exactly. The
 * signal tests fork a child that runs weft_main; the child tells the
 * parent through a pipe when its channel is full, the parent signals it,
 * and the child reports its counts through another pipe. Nothing sleeps to
 * wait for something: the parent blocks on pipes and on waitpid.
 */
#include "t.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft.h>

#define CAP 8       /* the pipeline's channel */
#define CONSUMERS 3 /* each holds one job while it works on it */

/* ---- the pipeline ---------------------------------------------------- */

struct run {
    /* set up by the test */
    int stalled;        /* consumers hold each job until `release` is set */
    int release_at_req; /* the producer sets `release` at the request */
    int64_t item_ns;    /* each job's work, slept */
    int64_t drain_ns;   /* >0: the producer sets the drain deadline to the
                         * request + drain_ns (weft_shutdown_set_deadline) */
    int ready_fd;       /* >=0: told once the channel is full and every
                         * consumer holds a job */
    /* the pipeline's state */
    weft_chan *jobs;
    weft_event release;
    int next;
    /* results */
    atomic_int produced, consumed, cancelled, holding;
    size_t queued;           /* jobs queued when intake stopped */
    weft_time requested_at;  /* when the producer saw the request */
    weft_time seen_deadline; /* weft_deadline() then */
    _Atomic weft_time cancelled_at;
    int root_cancelled; /* the root scope was cancelled at the end */
};

static void tell(int fd)
{
    char c = 'r';
    ASSERT_EQ(write(fd, &c, 1), 1);
}

/* Intake: sends jobs as fast as the channel takes them, until shutdown is
 * requested (the shutdown channel's case in a select). */
static int producer(void *arg)
{
    struct run *r = arg;
    unsigned char none;
    weft_case cs[2] = {
        {.chan = weft_shutdown_chan(), .op = WEFT_OP_RECV, .elem = &none},
        {.chan = r->jobs, .op = WEFT_OP_SEND, .elem = &r->next},
    };
    ASSERT(cs[0].chan != NULL);
    for (;;) {
        int i = weft_select(cs, 2, WEFT_NEVER);
        ASSERT(i == 0 || i == 1);
        if (i == 0)
            break;
        ASSERT_EQ(cs[1].rc, 0);
        atomic_fetch_add(&r->produced, 1);
        r->next++;
    }
    ASSERT_EQ(cs[0].rc, -EPIPE);
    ASSERT_EQ(weft_shutdown_requested(), 1);
    r->requested_at = weft_now();
    r->queued = weft_chan_len(r->jobs);
    if (r->drain_ns)
        ASSERT_EQ(weft_shutdown_set_deadline(weft_now() + r->drain_ns), 0);
    r->seen_deadline = weft_deadline();
    if (r->release_at_req)
        ASSERT_EQ(weft_event_set(&r->release), 0);
    ASSERT_EQ(weft_chan_close(r->jobs), 0); /* the consumers drain */
    return 0;
}

static int consumer(void *arg)
{
    struct run *r = arg;
    int job, rc;
    while ((rc = weft_chan_recv(r->jobs, &job)) == 0) {
        atomic_fetch_add(&r->holding, 1);
        if (r->stalled && (rc = weft_event_wait(&r->release)) != 0)
            break;
        if (r->item_ns && (rc = weft_sleep_for(r->item_ns)) != 0)
            break;
        atomic_fetch_add(&r->consumed, 1);
    }
    if (rc == -ECANCELED) {
        atomic_fetch_add(&r->cancelled, 1);
        atomic_store(&r->cancelled_at, weft_now());
    }
    return rc == -EPIPE ? 0 : rc;
}

/* Runs the pipeline in a scope of its own; returns its join's result. */
static int pipeline(struct run *r)
{
    ASSERT_EQ(weft_chan_new(&r->jobs, sizeof(int), CAP), 0);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_COLLECT}),
              0);
    ASSERT(weft_spawn(s, producer, r) >= 0);
    for (int i = 0; i < CONSUMERS; i++)
        ASSERT(weft_spawn(s, consumer, r) >= 0);
    if (r->ready_fd >= 0) {
        /* Stalled consumers: this state lasts until the request. */
        while (atomic_load(&r->holding) < CONSUMERS ||
               weft_chan_len(r->jobs) < CAP)
            weft_yield();
        tell(r->ready_fd);
    }
    int rc = weft_scope_join(s);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_chan_unref(r->jobs), 0);
    r->root_cancelled = weft_cancelled();
    return rc;
}

/* ---- weft_run, virtual clock ---------------------------------------- */

struct timed {
    struct run *r;
    int64_t after; /* the requester's delay */
};

static int requester(void *arg)
{
    struct timed *t = arg;
    ASSERT_EQ(weft_shutdown_requested(), 0);
    ASSERT_EQ(weft_sleep_for(t->after), 0);
    ASSERT_EQ(weft_shutdown_request(), 0);
    ASSERT_EQ(weft_shutdown_requested(), 1);
    ASSERT_EQ(weft_shutdown_request(), 0); /* idempotent */
    return 0;
}

static int pipeline_root(void *arg)
{
    struct timed *t = arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_COLLECT}),
              0);
    ASSERT(weft_spawn(s, requester, t) >= 0);
    int rc = pipeline(t->r);
    weft_scope_join(s);
    ASSERT_EQ(weft_scope_free(s), 0);
    return rc;
}

static int run_virtual(struct run *r, int64_t drain_cfg, int64_t after)
{
    weft_config cfg = {.workers = 1,
                       .clock = WEFT_CLOCK_VIRTUAL,
                       .shutdown_drain_ns = drain_cfg};
    struct timed t = {r, after};
    return weft_run(&cfg, pipeline_root, &t);
}

TEST(request_drains_pipeline)
{
    /* Consumers take a second a job: at the request (2.5 s) the channel
     * is full and each consumer holds a job. Nothing is cancelled: all of
     * it is consumed within the 10 s drain. */
    struct run r = {.item_ns = WEFT_SEC, .ready_fd = -1};
    ASSERT_EQ(run_virtual(&r, 10 * WEFT_SEC, 2500 * WEFT_MSEC), 0);
    ASSERT_EQ(r.requested_at, 2500 * WEFT_MSEC);
    ASSERT_EQ(r.queued, CAP);
    ASSERT_EQ(r.seen_deadline, 12500 * WEFT_MSEC); /* weft_deadline() */
    ASSERT(atomic_load(&r.produced) >= CAP + CONSUMERS);
    ASSERT_EQ(atomic_load(&r.consumed), atomic_load(&r.produced));
    ASSERT_EQ(atomic_load(&r.cancelled), 0);
    ASSERT_EQ(r.root_cancelled, 0);
}

TEST(default_drain_cancels_with_the_request)
{
    /* shutdown_drain_ns 0: the request cancels the root scope at once,
     * and stalled consumers lose their jobs (what weft_main always did). */
    struct run r = {.stalled = 1, .ready_fd = -1};
    ASSERT_EQ(run_virtual(&r, 0, WEFT_SEC), -ECANCELED);
    ASSERT_EQ(r.requested_at, WEFT_SEC);
    ASSERT_EQ(atomic_load(&r.cancelled), CONSUMERS);
    ASSERT_EQ(atomic_load(&r.cancelled_at), WEFT_SEC);
    ASSERT_EQ(atomic_load(&r.consumed), 0);
    ASSERT_EQ(r.root_cancelled, 1);
}

TEST(task_deadline_shorter_than_config_wins)
{
    /* Stalled for good: the drain cannot finish. The producer gives 2 s;
     * the configuration said 10 s. */
    struct run r = {.stalled = 1, .drain_ns = 2 * WEFT_SEC, .ready_fd = -1};
    ASSERT_EQ(run_virtual(&r, 10 * WEFT_SEC, WEFT_SEC), -ECANCELED);
    ASSERT_EQ(r.requested_at, WEFT_SEC);
    ASSERT_EQ(r.seen_deadline, 3 * WEFT_SEC);
    ASSERT_EQ(atomic_load(&r.cancelled), CONSUMERS);
    ASSERT_EQ(atomic_load(&r.cancelled_at), 3 * WEFT_SEC);
    ASSERT_EQ(atomic_load(&r.consumed), 0);
    ASSERT_EQ(r.root_cancelled, 1);
}

TEST(task_deadline_longer_than_config_wins)
{
    /* The configuration's 1 s deadline is armed by the request; the
     * producer moves it to 5 s before it comes. */
    struct run r = {.stalled = 1, .drain_ns = 5 * WEFT_SEC, .ready_fd = -1};
    ASSERT_EQ(run_virtual(&r, WEFT_SEC, WEFT_SEC), -ECANCELED);
    ASSERT_EQ(r.seen_deadline, 6 * WEFT_SEC);
    ASSERT_EQ(atomic_load(&r.cancelled), CONSUMERS);
    ASSERT_EQ(atomic_load(&r.cancelled_at), 6 * WEFT_SEC);
}

TEST(config_drain_deadline_cancels_root)
{
    struct run r = {.stalled = 1, .ready_fd = -1};
    ASSERT_EQ(run_virtual(&r, 4 * WEFT_SEC, WEFT_SEC), -ECANCELED);
    ASSERT_EQ(r.seen_deadline, 5 * WEFT_SEC);
    ASSERT_EQ(atomic_load(&r.cancelled_at), 5 * WEFT_SEC);
    ASSERT_EQ(atomic_load(&r.cancelled), CONSUMERS);
}

/* weft_shutdown_set_deadline without a request: it makes one, and a deadline
 * can be moved until it has cancelled the root scope, not after. */
static int deadline_root(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_shutdown_requested(), 0);
    ASSERT_EQ(weft_deadline(), WEFT_NEVER);
    ASSERT_EQ(weft_shutdown_set_deadline(7 * WEFT_SEC), 0);
    ASSERT_EQ(weft_shutdown_requested(), 1);
    ASSERT_EQ(weft_shutdown_wait(WEFT_NEVER), 0);
    ASSERT_EQ(weft_deadline(), 7 * WEFT_SEC);
    ASSERT_EQ(weft_shutdown_set_deadline(WEFT_NEVER), 0); /* none, for now */
    ASSERT_EQ(weft_deadline(), WEFT_NEVER);
    ASSERT_EQ(weft_sleep_for(20 * WEFT_SEC), 0); /* nothing cancels it */
    ASSERT_EQ(weft_shutdown_set_deadline(weft_now() + WEFT_SEC), 0);
    ASSERT_EQ(weft_sleep_for(3600 * WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_now(), 21 * WEFT_SEC);
    ASSERT_EQ(weft_shutdown_set_deadline(weft_now() + WEFT_SEC), -EALREADY);
    ASSERT_EQ(weft_shutdown_set_deadline(-1), -EINVAL);
    return 0;
}

TEST(deadline_requests_and_moves_until_cancelled)
{
    weft_config cfg = {.workers = 1, .clock = WEFT_CLOCK_VIRTUAL};
    ASSERT_EQ(weft_run(&cfg, deadline_root, NULL), 0);
}

/* A deadline already past cancels at once; a waiter sees the request
 * (it is woken by it, before the cancel), then the cancel. */
static int waiter(void *arg)
{
    atomic_int *woken = arg;
    ASSERT_EQ(weft_shutdown_wait(WEFT_NEVER), 0);
    atomic_store(woken, 1);
    ASSERT_EQ(weft_sleep_for(3600 * WEFT_SEC), -ECANCELED);
    return 0;
}

static int past_deadline_root(void *arg)
{
    (void)arg;
    atomic_int woken = 0;
    weft_scope *s = scope_open();
    ASSERT(weft_spawn(s, waiter, &woken) >= 0);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0); /* the waiter waits */
    ASSERT_EQ(weft_shutdown_wait(weft_now()), -ETIMEDOUT);
    ASSERT_EQ(weft_shutdown_set_deadline(0), 0);
    ASSERT_EQ(weft_cancelled(), 1);
    ASSERT_EQ(weft_shutdown_requested(), 1);
    ASSERT_EQ(weft_shutdown_wait(WEFT_NEVER), -ECANCELED); /* a checkpoint */
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(atomic_load(&woken), 1);
    ASSERT_EQ(weft_now(), WEFT_SEC);
    return 0;
}

TEST(past_deadline_cancels_at_once)
{
    weft_config cfg = {.workers = 2, .clock = WEFT_CLOCK_VIRTUAL};
    ASSERT_EQ(weft_run(&cfg, past_deadline_root, NULL), 0);
}

/* A program that finishes during the drain is never cancelled, and
 * weft_run does not wait for the deadline. */
static int quick_root(void *arg)
{
    weft_time *end = arg;
    ASSERT_EQ(weft_shutdown_request(), 0);
    ASSERT_EQ(weft_deadline(), 3600 * WEFT_SEC);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0); /* a short drain */
    ASSERT_EQ(weft_cancelled(), 0);
    *end = weft_now();
    return 5;
}

TEST(finished_drain_is_not_cancelled)
{
    weft_config cfg = {.workers = 1,
                       .clock = WEFT_CLOCK_VIRTUAL,
                       .shutdown_drain_ns = 3600 * WEFT_SEC};
    weft_time end = -1;
    ASSERT_EQ(weft_run(&cfg, quick_root, &end), 5);
    ASSERT_EQ(end, WEFT_SEC);
    /* A drain of WEFT_NEVER: no deadline at all. */
    cfg.shutdown_drain_ns = WEFT_NEVER;
    ASSERT_EQ(weft_run(&cfg, deadline_root, NULL), 0);
}

/* ---- from plain threads --------------------------------------------- */

static pthread_t plain;

static void *plain_request(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_shutdown_request(), 0);   /* reaches the running runtime */
    ASSERT_EQ(weft_shutdown_requested(), 0); /* not a task: 0 */
    return NULL;
}

static int plain_thread_root(void *arg)
{
    (void)arg;
    ASSERT_EQ(pthread_create(&plain, NULL, plain_request, NULL), 0);
    ASSERT_EQ(weft_shutdown_wait(WEFT_NEVER), 0);
    ASSERT_EQ(weft_shutdown_requested(), 1);
    ASSERT_EQ(weft_cancelled(), 0); /* the drain has not passed */
    return 3;
}

TEST(request_from_plain_thread)
{
    ASSERT_EQ(weft_shutdown_request(), -EPERM); /* no runtime runs */
    weft_config cfg = {.workers = 2, .shutdown_drain_ns = 3600 * WEFT_SEC};
    ASSERT_EQ(weft_run(&cfg, plain_thread_root, NULL), 3);
    ASSERT_EQ(pthread_join(plain, NULL), 0);
    ASSERT_EQ(weft_shutdown_request(), -EPERM);
}

/* A plain thread's request with a drain: the keeper it makes cancels the
 * root scope at the drain deadline, exactly, on the virtual clock. */
static int plain_thread_drain_root(void *arg)
{
    (void)arg;
    ASSERT_EQ(weft_now(), 0);
    ASSERT_EQ(pthread_create(&plain, NULL, plain_request, NULL), 0);
    ASSERT_EQ(weft_shutdown_wait(WEFT_NEVER), 0); /* no clock moves */
    ASSERT_EQ(weft_deadline(), 2 * WEFT_SEC);
    ASSERT_EQ(weft_sleep_for(3600 * WEFT_SEC), -ECANCELED);
    ASSERT_EQ(weft_now(), 2 * WEFT_SEC);
    return 4;
}

TEST(plain_thread_request_keeps_drain_deadline)
{
    weft_config cfg = {.workers = 2,
                       .clock = WEFT_CLOCK_VIRTUAL,
                       .shutdown_drain_ns = 2 * WEFT_SEC};
    ASSERT_EQ(weft_run(&cfg, plain_thread_drain_root, NULL), 4);
    ASSERT_EQ(pthread_join(plain, NULL), 0);
}

TEST(outside_a_task)
{
    ASSERT_EQ(weft_shutdown_requested(), 0);
    ASSERT_EQ(weft_shutdown_wait(WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_shutdown_set_deadline(WEFT_NEVER), -EPERM);
    ASSERT(weft_shutdown_chan() == NULL);
    weft_config cfg = {.workers = 1, .shutdown_drain_ns = -1};
    ASSERT_EQ(weft_run(&cfg, quick_root, NULL), -EINVAL);
}

/* ---- weft_main: signals, and requests from code ---------------------- */

/* Under weft_main, a request from code drains as a signal's does, and
 * the program ends by itself with nothing cancelled. */
static int main_code_root(void *arg)
{
    struct run *r = arg;
    struct timed t = {r, 50 * WEFT_MSEC};
    return pipeline_root(&t);
}

TEST(code_request_drains_under_main)
{
    struct run r = {.item_ns = WEFT_MSEC, .ready_fd = -1};
    weft_config cfg = {.workers = 2, .shutdown_drain_ns = 3600 * WEFT_SEC};
    ASSERT_EQ(weft_main_cfg(&cfg, main_code_root, &r), 0);
    ASSERT_EQ(atomic_load(&r.consumed), atomic_load(&r.produced));
    ASSERT_EQ(atomic_load(&r.cancelled), 0);
    ASSERT_EQ(r.root_cancelled, 0);
}

struct report {
    int produced, consumed, cancelled, root_cancelled;
    size_t queued;
    int64_t cancel_late; /* cancelled_at - the drain deadline */
};

static int report_fd = -1;
static struct run child_run;

/* The child's root: the pipeline, then its report to the parent. */
static int child_root(void *arg)
{
    (void)arg;
    struct run *r = &child_run;
    int rc = pipeline(r);
    struct report rep = {
        .produced = atomic_load(&r->produced),
        .consumed = atomic_load(&r->consumed),
        .cancelled = atomic_load(&r->cancelled),
        .root_cancelled = r->root_cancelled,
        .queued = r->queued,
        .cancel_late = atomic_load(&r->cancelled_at) - r->seen_deadline,
    };
    ASSERT_EQ(write(report_fd, &rep, sizeof(rep)), (ssize_t)sizeof(rep));
    if (rc == 0 && rep.produced == rep.consumed)
        return 0;
    return rep.cancelled == CONSUMERS ? 3 : 1;
}

struct child {
    pid_t pid;
    int ready, report, err; /* read ends */
};

/* Forks a child running weft_main with child_run set up as r, and returns
 * once its channel is full (consumers stalled, producer blocked). */
static struct child start_child(const struct run *r, int64_t drain,
                                int64_t grace)
{
    int rp[2], pp[2], ep[2];
    ASSERT_EQ(pipe(rp), 0);
    ASSERT_EQ(pipe(pp), 0);
    ASSERT_EQ(pipe(ep), 0);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        close(rp[0]);
        close(pp[0]);
        close(ep[0]);
        dup2(ep[1], 2);
        child_run.stalled = r->stalled;
        child_run.release_at_req = r->release_at_req;
        child_run.item_ns = r->item_ns;
        child_run.drain_ns = r->drain_ns;
        child_run.ready_fd = rp[1];
        report_fd = pp[1];
        weft_config cfg = {.workers = 2,
                           .shutdown_drain_ns = drain,
                           .shutdown_grace_ns = grace};
        int rc = weft_main_cfg(&cfg, child_root, NULL);
        _exit(rc >= 0 && rc < 256 ? rc : 2);
    }
    close(rp[1]);
    close(pp[1]);
    close(ep[1]);
    char c;
    ASSERT_EQ(read(rp[0], &c, 1), 1);
    return (struct child){pid, rp[0], pp[0], ep[0]};
}

/* Reads the child's stderr until it has printed `want`. */
static void expect_output(struct child *c, const char *want)
{
    static char buf[4096];
    static size_t n;
    while (!strstr(buf, want)) {
        ASSERT(n + 1 < sizeof(buf));
        ssize_t k = read(c->err, buf + n, sizeof(buf) - 1 - n);
        ASSERT(k > 0);
        n += (size_t)k;
        buf[n] = 0;
    }
}

static void finish_child(struct child *c, int *status, char *out, size_t cap)
{
    ASSERT_EQ(waitpid(c->pid, status, 0), c->pid);
    size_t n = 0;
    ssize_t k;
    while (n + 1 < cap && (k = read(c->err, out + n, cap - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = 0;
    close(c->ready);
    if (c->report >= 0)
        close(c->report);
    close(c->err);
}

static struct report read_report(struct child *c)
{
    struct report rep;
    ASSERT_EQ(read(c->report, &rep, sizeof(rep)), (ssize_t)sizeof(rep));
    return rep;
}

TEST(sigint_drains_queued_jobs)
{
    /* SIGINT while CAP jobs are queued and each consumer holds one: the
     * producer stops, the consumers drain, nothing is lost, nothing is
     * cancelled, and weft_main returns 0. */
    struct run r = {.stalled = 1, .release_at_req = 1};
    struct child c = start_child(&r, 3600 * WEFT_SEC, 0);
    ASSERT_EQ(kill(c.pid, SIGINT), 0);
    struct report rep = read_report(&c);
    int st;
    char out[4096];
    finish_child(&c, &st, out, sizeof(out));
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
    ASSERT_EQ(rep.queued, CAP);
    ASSERT_EQ(rep.produced, CAP + CONSUMERS);
    ASSERT_EQ(rep.consumed, rep.produced);
    ASSERT_EQ(rep.cancelled, 0);
    ASSERT_EQ(rep.root_cancelled, 0);
    ASSERT(strstr(out, "shutdown requested") != NULL);
    ASSERT(strstr(out, "cancelling") == NULL);
}

TEST(sigterm_drain_deadline_cancels_root)
{
    /* The drain cannot finish; the producer gives it 50 ms (real time:
     * the behaviour under test), shorter than the configured hour. */
    struct run r = {.stalled = 1, .drain_ns = 50 * WEFT_MSEC};
    struct child c = start_child(&r, 3600 * WEFT_SEC, 0);
    ASSERT_EQ(kill(c.pid, SIGTERM), 0);
    struct report rep = read_report(&c);
    int st;
    char out[4096];
    finish_child(&c, &st, out, sizeof(out));
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 3); /* every consumer was cancelled */
    ASSERT_EQ(rep.cancelled, CONSUMERS);
    ASSERT_EQ(rep.consumed, 0);
    ASSERT_EQ(rep.root_cancelled, 1);
    ASSERT(rep.cancel_late >= 0); /* not before the deadline */
    ASSERT(strstr(out, "shutdown requested") != NULL);
    ASSERT(strstr(out, "drain deadline passed") != NULL);
}

TEST(second_signal_exits_during_drain)
{
    struct run r = {.stalled = 1};
    struct child c = start_child(&r, 3600 * WEFT_SEC, 0);
    ASSERT_EQ(kill(c.pid, SIGINT), 0);
    expect_output(&c, "shutdown requested"); /* the first is handled */
    ASSERT_EQ(kill(c.pid, SIGINT), 0);
    int st;
    char out[4096];
    finish_child(&c, &st, out, sizeof(out));
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 130);
    ASSERT(strstr(out, "second signal") != NULL);
}

/* Cancelled at the drain deadline, a consumer keeps blocking in a
 * shielded scope: the grace period then ends the process. */
static int stubborn_consumer_root(void *arg)
{
    (void)arg;
    char c = 'r';
    ASSERT_EQ(write(child_run.ready_fd, &c, 1), 1);
    ASSERT_EQ(weft_shutdown_wait(WEFT_NEVER), 0);
    ASSERT_EQ(weft_sleep_for(3600 * WEFT_SEC), -ECANCELED);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.shield = 1}), 0);
    weft_sleep_for(3600 * WEFT_SEC);
    return 0;
}

TEST(grace_period_after_drain_deadline)
{
    int rp[2], ep[2];
    ASSERT_EQ(pipe(rp), 0);
    ASSERT_EQ(pipe(ep), 0);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        close(rp[0]);
        close(ep[0]);
        dup2(ep[1], 2);
        child_run.ready_fd = rp[1];
        weft_config cfg = {.workers = 1,
                           .shutdown_drain_ns = 50 * WEFT_MSEC,
                           .shutdown_grace_ns = 50 * WEFT_MSEC};
        int rc = weft_main_cfg(&cfg, stubborn_consumer_root, NULL);
        _exit(rc >= 0 && rc < 256 ? rc : 2);
    }
    close(rp[1]);
    close(ep[1]);
    char ch;
    ASSERT_EQ(read(rp[0], &ch, 1), 1);
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    struct child c = {pid, rp[0], -1, ep[0]};
    int st;
    char out[4096];
    finish_child(&c, &st, out, sizeof(out));
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 130);
    ASSERT(strstr(out, "drain deadline passed") != NULL);
    ASSERT(strstr(out, "grace period") != NULL);
}
