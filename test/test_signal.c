/* SPDX-License-Identifier: MIT */
/*
 * weft_main's graceful shutdown: SIGINT/SIGTERM cancel the root scope; a
 * second signal, or the grace period running out, ends the process.
 *
 * Each test forks a child that runs weft_main; the child tells the parent
 * through a pipe when its tasks are blocked, the parent signals it and
 * checks how it ended and what it printed. Nothing sleeps to wait: the
 * parent blocks on the pipe and on waitpid.
 */
#include "t.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft.h>

static int ready_fd = -1;
static atomic_int blocked;
static atomic_int cancelled_seen;

static void tell_ready(void)
{
    char c = 'r';
    ASSERT_EQ(write(ready_fd, &c, 1), 1);
}

/* Blocks until cancelled, then counts the cancel. */
static int blocker(void *arg)
{
    (void)arg;
    atomic_fetch_add(&blocked, 1);
    int rc = weft_sleep_for(3600 * WEFT_SEC);
    if (rc == -ECANCELED)
        atomic_fetch_add(&cancelled_seen, 1);
    return rc;
}

static int polite_root(void *arg)
{
    (void)arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_COLLECT}),
              0);
    for (int i = 0; i < 8; i++)
        ASSERT(weft_spawn(s, blocker, NULL) >= 0);
    while (atomic_load(&blocked) < 8)
        weft_yield();
    tell_ready();
    int rc = weft_sleep_for(3600 * WEFT_SEC);
    ASSERT_EQ(rc, -ECANCELED);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    return atomic_load(&cancelled_seen) == 8 ? 42 : 1;
}

/* Ignores cancellation: a shielded scope keeps sleeping. */
static int stubborn_root(void *arg)
{
    (void)arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, &(weft_scope_opts){.shield = 1}), 0);
    tell_ready();
    weft_sleep_for(3600 * WEFT_SEC);
    return 0;
}

struct child {
    pid_t pid;
    int ready, err; /* read ends: ready byte, child's stderr */
};

static struct child start_child(weft_fn root, int64_t grace)
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
        ready_fd = rp[1];
        weft_config cfg = {.workers = 2, .shutdown_grace_ns = grace};
        int rc = weft_main_cfg(&cfg, root, NULL);
        _exit(rc >= 0 && rc < 256 ? rc : 2);
    }
    close(rp[1]);
    close(ep[1]);
    char c;
    ASSERT_EQ(read(rp[0], &c, 1), 1); /* the child's tasks are blocked */
    return (struct child){pid, rp[0], ep[0]};
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
    close(c->err);
}

TEST(sigterm_cancels_root_scope)
{
    struct child c = start_child(polite_root, 0);
    ASSERT_EQ(kill(c.pid, SIGTERM), 0);
    int st;
    char out[4096];
    finish_child(&c, &st, out, sizeof(out));
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 42); /* all 8 blockers saw -ECANCELED */
    ASSERT(strstr(out, "cancelling all tasks") != NULL);
}

TEST(sigint_cancels_root_scope)
{
    struct child c = start_child(polite_root, 0);
    ASSERT_EQ(kill(c.pid, SIGINT), 0);
    int st;
    char out[4096];
    finish_child(&c, &st, out, sizeof(out));
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 42);
}

TEST(second_signal_exits_at_once)
{
    struct child c = start_child(stubborn_root, 3600 * WEFT_SEC);
    ASSERT_EQ(kill(c.pid, SIGINT), 0);
    /* The first message is on the pipe once the first signal is handled. */
    char buf[256];
    ssize_t k = read(c.err, buf, sizeof(buf) - 1);
    ASSERT(k > 0);
    buf[k] = 0;
    ASSERT(strstr(buf, "cancelling all tasks") != NULL);
    ASSERT_EQ(kill(c.pid, SIGINT), 0);
    int st;
    char out[4096];
    finish_child(&c, &st, out, sizeof(out));
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 130);
    ASSERT(strstr(out, "second signal") != NULL);
}

TEST(grace_period_runs_out)
{
    /* The grace period is real time: it is the behaviour under test. */
    struct child c = start_child(stubborn_root, 50 * WEFT_MSEC);
    ASSERT_EQ(kill(c.pid, SIGTERM), 0);
    int st;
    char out[4096];
    finish_child(&c, &st, out, sizeof(out));
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 130);
    ASSERT(strstr(out, "grace period") != NULL);
}

static int plain_root(void *arg)
{
    (void)arg;
    return 7;
}

TEST(main_returns_root_status_and_restores_mask)
{
    sigset_t before, after;
    ASSERT_EQ(pthread_sigmask(SIG_SETMASK, NULL, &before), 0);
    ASSERT_EQ(weft_main(plain_root, NULL), 7);
    ASSERT_EQ(pthread_sigmask(SIG_SETMASK, NULL, &after), 0);
    ASSERT_EQ(sigismember(&before, SIGINT), sigismember(&after, SIGINT));
    ASSERT_EQ(sigismember(&before, SIGTERM), sigismember(&after, SIGTERM));
    ASSERT_EQ(weft_main(NULL, NULL), -EINVAL);
}

/* ---- misuse and other runtimes while weft_main runs ------------------ */

static int nested_main(void *arg)
{
    (void)arg;
    /* From a task: -EBUSY, not a wait for the outer weft_main to end. */
    ASSERT_EQ(weft_main(plain_root, NULL), -EBUSY);
    weft_config cfg = {.workers = 1};
    ASSERT_EQ(weft_main_cfg(&cfg, plain_root, NULL), -EBUSY);
    return 7;
}

TEST(main_inside_task_is_ebusy)
{
    weft_config cfg = {.workers = 2};
    ASSERT_EQ(weft_main_cfg(&cfg, nested_main, NULL), 7);
    ASSERT_EQ(weft_run(&cfg, nested_main, NULL), 7);
}

static int count_threads(void *arg)
{
    *(int *)arg = t_proc_count("/proc/self/task");
    return 0;
}

static void *plain_run(void *arg)
{
    /* No watchdog, no slow slices, so no thread watching the workers:
     * only the signal thread is counted here. */
    weft_config cfg = {
        .workers = 1, .watchdog_ns = WEFT_NEVER, .slow_slice_ns = WEFT_NEVER};
    ASSERT_EQ(weft_run(&cfg, count_threads, arg), 0);
    return NULL;
}

/* A plain weft_run on another thread while weft_main runs gets no signal
 * thread of its own: weft_main's belongs to weft_main's runtime. */
static int main_with_plain_run(void *arg)
{
    (void)arg;
    int before = t_proc_count("/proc/self/task");
    int during = 0;
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, plain_run, &during), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(during, before + 1); /* the plain run's one thread */
    return 7;
}

TEST(plain_run_during_main_gets_no_signal_thread)
{
    weft_config cfg = {.workers = 1};
    ASSERT_EQ(weft_main_cfg(&cfg, main_with_plain_run, NULL), 7);
}

TEST(huge_grace_period_is_not_cut_short)
{
    /* 2^32 ms (about 50 days): in poll()'s int milliseconds it wrapped to
     * 0, and the first signal ended the process at once. */
    struct child c = start_child(stubborn_root, ((int64_t)1 << 32) * WEFT_MSEC);
    ASSERT_EQ(kill(c.pid, SIGTERM), 0);
    char buf[256];
    ssize_t k = read(c.err, buf, sizeof(buf) - 1);
    ASSERT(k > 0);
    buf[k] = 0;
    ASSERT(strstr(buf, "cancelling all tasks") != NULL);
    ASSERT_EQ(kill(c.pid, SIGINT), 0);
    int st;
    char out[4096];
    finish_child(&c, &st, out, sizeof(out));
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 130);
    ASSERT(strstr(buf, "grace period") == NULL);
    ASSERT(strstr(out, "grace period") == NULL);
    ASSERT(strstr(out, "second signal") != NULL);
}
