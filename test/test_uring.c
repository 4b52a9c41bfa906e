/* SPDX-License-Identifier: MIT */
/*
 * The io_uring poller (weft_config.poller, WEFT_POLLER): how it is chosen
 * and named, the fallback to epoll with one line on stderr where the
 * kernel refuses a ring, the withdrawal of a wait's poll request when the
 * wait ends (a request left in flight would hold the file, and the peer
 * would never see the end of the stream after weft_close), deadlines,
 * many descriptors at once (the submission queue filled, the completion
 * queue overflowed), and wakes from other threads. Tests that need
 * io_uring end with T_SKIP where the kernel or the build gives none.
 * The rest of the I/O suite runs on io_uring as CTest's "uring:" entries.
 */
#include "t.h"
#include "weft.h"

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int name_is(void *arg)
{
    const char *n = weft_poller_name();
    return n && strcmp(n, arg) == 0 ? 0 : -ENOENT;
}

static int run_with(weft_poller_kind k, int workers, weft_clock_kind clock,
                    weft_fn fn, void *arg)
{
    weft_config cfg = {0};
    cfg.workers = workers;
    cfg.clock = clock;
    cfg.poller = k;
    return weft_run(&cfg, fn, arg);
}

/* Skips the test where a runtime asking for io_uring does not get it. */
static void need_uring(void)
{
    unsetenv("WEFT_POLLER");
    if (run_with(WEFT_POLLER_IO_URING, 1, WEFT_CLOCK_MONOTONIC, name_is,
                 "io_uring") != 0) {
        T_NEED("io_uring", "no io_uring here");
    }
}

static void nb_pair(int sv[2])
{
    ASSERT_EQ(
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv),
        0);
}

/* ---- choosing and naming ---- */

TEST(default_is_epoll_and_the_environment_overrides)
{
    unsetenv("WEFT_POLLER");
    ASSERT(weft_poller_name() == NULL); /* outside a task */
    int fds = t_proc_count("/proc/self/fd");
    ASSERT_EQ(run_with(WEFT_POLLER_DEFAULT, 2, WEFT_CLOCK_MONOTONIC, name_is,
                       "epoll"),
              0);
    ASSERT_EQ(
        run_with(WEFT_POLLER_EPOLL, 1, WEFT_CLOCK_MONOTONIC, name_is, "epoll"),
        0);
    setenv("WEFT_POLLER", "epoll", 1);
    ASSERT_EQ(run_with(WEFT_POLLER_IO_URING, 1, WEFT_CLOCK_MONOTONIC, name_is,
                       "epoll"),
              0);
    setenv("WEFT_POLLER", "", 1); /* empty: the config's */
    ASSERT_EQ(
        run_with(WEFT_POLLER_EPOLL, 1, WEFT_CLOCK_MONOTONIC, name_is, "epoll"),
        0);
    setenv("WEFT_POLLER", "kqueue", 1);
    ASSERT_EQ(run_with(WEFT_POLLER_DEFAULT, 1, WEFT_CLOCK_MONOTONIC, name_is,
                       "epoll"),
              -EINVAL);
    unsetenv("WEFT_POLLER");
    ASSERT_EQ(run_with((weft_poller_kind)3, 1, WEFT_CLOCK_MONOTONIC, name_is,
                       "epoll"),
              -EINVAL);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), fds);
}

TEST(io_uring_by_config_and_by_environment)
{
    need_uring();
    int fds = t_proc_count("/proc/self/fd");
    ASSERT_EQ(run_with(WEFT_POLLER_IO_URING, 2, WEFT_CLOCK_MONOTONIC, name_is,
                       "io_uring"),
              0);
    setenv("WEFT_POLLER", "io_uring", 1);
    ASSERT_EQ(run_with(WEFT_POLLER_DEFAULT, 1, WEFT_CLOCK_MONOTONIC, name_is,
                       "io_uring"),
              0);
    setenv("WEFT_POLLER", "uring", 1);
    ASSERT_EQ(run_with(WEFT_POLLER_EPOLL, 1, WEFT_CLOCK_MONOTONIC, name_is,
                       "io_uring"),
              0);
    unsetenv("WEFT_POLLER");
    ASSERT_EQ(t_proc_count("/proc/self/fd"), fds); /* ring, eventfd closed */
}

/* ---- the fallback ---- */

/* Every worker makes its poller: both must be epoll. */
static int both_epoll(void *arg)
{
    weft_scope *s = scope_open();
    for (int i = 0; i < 2; i++)
        spawn_on(i, name_is, "epoll");
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return name_is(arg);
}

/* In a child whose io_uring_setup fails with err (a seccomp filter, as a
 * container's would), a runtime asking for io_uring runs on epoll; returns
 * what the child wrote on stderr. */
static void refused_child(int err, char *out, size_t cap)
{
    int pfd[2];
    ASSERT_EQ(pipe(pfd), 0);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        dup2(pfd[1], 2);
        struct sock_filter f[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                     offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
            BPF_STMT(BPF_RET | BPF_K,
                     SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
            _exit(3);
        unsetenv("WEFT_POLLER");
        int rc = run_with(WEFT_POLLER_IO_URING, 2, WEFT_CLOCK_MONOTONIC,
                          both_epoll, "epoll");
        /* A second runtime says nothing more: once per process. */
        if (rc == 0)
            rc = run_with(WEFT_POLLER_IO_URING, 1, WEFT_CLOCK_MONOTONIC,
                          name_is, "epoll");
        _exit(rc == 0 ? 0 : 1);
    }
    close(pfd[1]);
    size_t len = 0;
    ssize_t n;
    while ((n = read(pfd[0], out + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = '\0';
    close(pfd[0]);
    int st;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
}

static void check_line(const char *out, int err, const char *hint)
{
    char want[256];
    snprintf(want, sizeof want,
             "weft: io_uring refused (%s: %s); using epoll\n", strerror(err),
             hint);
    if (strcmp(out, want) != 0)
        T_FAIL("stderr was \"%s\", not \"%s\"", out, want);
}

TEST(a_refused_ring_falls_back_to_epoll_with_one_line)
{
    need_uring(); /* else every run shows the fallback already */
    char out[1024];
    refused_child(ENOSYS, out, sizeof out);
    check_line(out, ENOSYS, "no io_uring in this kernel, or a seccomp filter");
    refused_child(EPERM, out, sizeof out);
    check_line(out, EPERM, "kernel.io_uring_disabled?");
}

/* ---- a wait's request is withdrawn: weft_close ends the stream ---- */

enum { BY_CANCEL, BY_DEADLINE, BY_CLOSE, BY_SELECT, BY_CLOSE_NOW };

struct ending {
    int how;
    int sv[2];
    int rc; /* the waiting task's result */
};

static int waiter(void *arg)
{
    struct ending *e = arg;
    char c;
    switch (e->how) {
    case BY_DEADLINE:
        e->rc = weft_fd_wait(e->sv[0], WEFT_IO_READ, weft_now() + WEFT_MSEC);
        break;
    case BY_SELECT: {
        weft_case cs[2] = {
            {.op = WEFT_OP_READ, .fd = e->sv[0]},
            {.op = WEFT_OP_DEADLINE, .deadline = weft_now() + WEFT_MSEC}};
        e->rc = weft_select(cs, 2, WEFT_NEVER);
        break;
    }
    default:
        e->rc = (int)weft_read(e->sv[0], &c, 1, WEFT_NEVER);
    }
    return 0;
}

static int ending_root(void *arg)
{
    struct ending *e = arg;
    nb_pair(e->sv);
    weft_scope *s = scope_open();
    spawn(waiter, e);
    /* Asleep while the waiter waits: the worker submits its request. */
    ASSERT_EQ(weft_sleep_for(WEFT_USEC), 0);
    if (e->how == BY_CANCEL) {
        ASSERT_EQ(weft_scope_cancel(s), 0);
        ASSERT_EQ(weft_scope_join(s), -ECANCELED);
        ASSERT_EQ(e->rc, -ECANCELED);
    } else if (e->how == BY_CLOSE_NOW) {
        /* Under the wait, on this worker: the file goes with the close,
         * before the woken waiter has run. */
        ASSERT_EQ(weft_close(e->sv[0]), 0);
        char c;
        ASSERT_EQ(read(e->sv[1], &c, 1), 0);
        ASSERT_EQ(weft_scope_join(s), 0);
        ASSERT_EQ(e->rc, -EBADF);
        ASSERT_EQ(weft_close(e->sv[1]), 0);
        ASSERT_EQ(weft_scope_free(s), 0);
        return 0;
    } else if (e->how == BY_CLOSE) {
        ASSERT_EQ(weft_close(e->sv[0]), 0); /* under the wait */
        ASSERT_EQ(weft_scope_join(s), 0);
        ASSERT_EQ(e->rc, -EBADF);
    } else {
        ASSERT_EQ(weft_scope_join(s), 0);
        ASSERT_EQ(e->rc, e->how == BY_DEADLINE ? -ETIMEDOUT : 1);
    }
    ASSERT_EQ(weft_scope_free(s), 0);
    if (e->how != BY_CLOSE)
        ASSERT_EQ(weft_close(e->sv[0]), 0);
    /* The socket is closed, so its peer reads the end of the stream. A
     * poll request left in flight would hold it open: no end, and this
     * read would time out. */
    char c;
    ASSERT_EQ(weft_read(e->sv[1], &c, 1, weft_now() + WEFT_SEC), 0);
    ASSERT_EQ(weft_close(e->sv[1]), 0);
    return 0;
}

static void ending(int how)
{
    need_uring();
    int fds = t_proc_count("/proc/self/fd");
    struct ending e = {.how = how};
    ASSERT_EQ(
        run_with(WEFT_POLLER_IO_URING, 1, WEFT_CLOCK_VIRTUAL, ending_root, &e),
        0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), fds);
}

TEST(a_cancelled_read_leaves_no_request_holding_the_file)
{
    ending(BY_CANCEL);
}

TEST(a_wait_past_its_deadline_leaves_no_request_holding_the_file)
{
    ending(BY_DEADLINE);
}

TEST(a_close_under_a_read_leaves_no_request_holding_the_file)
{
    ending(BY_CLOSE);
}

TEST(a_select_case_not_chosen_leaves_no_request_holding_the_file)
{
    ending(BY_SELECT);
}

TEST(a_close_under_a_wait_of_its_worker_lets_the_file_go_at_once)
{
    ending(BY_CLOSE_NOW);
}

/* ---- deadlines ---- */

static int late_writer(void *arg)
{
    int *fd = arg;
    ASSERT_EQ(weft_sleep_for(10 * WEFT_MSEC), 0);
    ASSERT_EQ(write(*fd, "x", 1), 1);
    return 0;
}

static int deadline_root(void *arg)
{
    int sv[2];
    nb_pair(sv);
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_fd_wait(sv[0], WEFT_IO_READ, t0 + 50 * WEFT_MSEC),
              -ETIMEDOUT);
    ASSERT(weft_now() >= t0 + 50 * WEFT_MSEC);
    /* Writable at once; READ | WRITE too. */
    ASSERT_EQ(weft_fd_wait(sv[0], WEFT_IO_WRITE, weft_now() + WEFT_SEC), 0);
    ASSERT_EQ(weft_fd_wait(sv[0], WEFT_IO_READ | WEFT_IO_WRITE, WEFT_NEVER), 0);
    /* A byte before the deadline ends the wait then, not at it. */
    weft_scope *s = scope_open();
    spawn(late_writer, &sv[1]);
    weft_time t1 = weft_now();
    ASSERT_EQ(weft_fd_wait(sv[0], WEFT_IO_READ, t1 + WEFT_SEC), 0);
    ASSERT(weft_now() >= t1 + 10 * WEFT_MSEC && weft_now() < t1 + WEFT_SEC);
    scope_end(s);
    char c;
    ASSERT_EQ(weft_read(sv[0], &c, 1, WEFT_NEVER), 1);
    /* A deadline already past: no wait at all. */
    ASSERT_EQ(weft_fd_wait(sv[0], WEFT_IO_READ, 0), -ETIMEDOUT);
    ASSERT_EQ(weft_close(sv[0]), 0);
    ASSERT_EQ(weft_close(sv[1]), 0);
    return name_is(arg);
}

TEST(deadlines_end_waits)
{
    need_uring();
    ASSERT_EQ(run_with(WEFT_POLLER_IO_URING, 1, WEFT_CLOCK_VIRTUAL,
                       deadline_root, "io_uring"),
              0);
}

/* ---- many descriptors ---- */

struct many {
    int n;
    int (*sv)[2];
    atomic_int waiting, woken, spurious;
};

struct one {
    struct many *m;
    int i;
};

static int many_reader(void *arg)
{
    struct one *o = arg;
    int fd = o->m->sv[o->i][0];
    atomic_fetch_add(&o->m->waiting, 1);
    for (;;) {
        ASSERT_EQ(weft_fd_wait(fd, WEFT_IO_READ, WEFT_NEVER), 0);
        char c;
        ssize_t got = read(fd, &c, 1);
        if (got == 1)
            break;
        ASSERT(got < 0 && errno == EAGAIN);
        atomic_fetch_add(&o->m->spurious, 1);
    }
    atomic_fetch_add(&o->m->woken, 1);
    return 0;
}

static int many_root(void *arg)
{
    struct many *m = arg;
    struct one *os = calloc((size_t)m->n, sizeof(*os));
    ASSERT(os != NULL);
    weft_scope *s = scope_open();
    for (int i = 0; i < m->n; i++) {
        nb_pair(m->sv[i]);
        os[i] = (struct one){m, i};
        spawn(many_reader, &os[i]);
    }
    while (atomic_load(&m->waiting) < m->n)
        ASSERT_EQ(weft_sleep_for(WEFT_USEC), 0);
    /* Every reader parked, its request submitted: the worker slept. */
    ASSERT_EQ(weft_sleep_for(WEFT_USEC), 0);
    ASSERT_EQ(atomic_load(&m->woken), 0);
    /* All at once, without a yield: the completions pile up. */
    for (int i = 0; i < m->n; i++)
        ASSERT_EQ(write(m->sv[i][1], "x", 1), 1);
    scope_end(s);
    ASSERT_EQ(atomic_load(&m->woken), m->n);
    ASSERT_EQ(atomic_load(&m->spurious), 0);
    for (int i = 0; i < m->n; i++) {
        ASSERT_EQ(weft_close(m->sv[i][0]), 0);
        ASSERT_EQ(weft_close(m->sv[i][1]), 0);
    }
    free(os);
    return name_is("io_uring");
}

static void many(int workers, int n)
{
    need_uring();
    int fds = t_proc_count("/proc/self/fd");
    struct many m = {.n = n};
    m.sv = calloc((size_t)n, sizeof(*m.sv));
    ASSERT(m.sv != NULL);
    ASSERT_EQ(run_with(WEFT_POLLER_IO_URING, workers, WEFT_CLOCK_VIRTUAL,
                       many_root, &m),
              0);
    free(m.sv);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), fds);
}

TEST(many_descriptors_each_woken_once)
{
    many(2, (int)T_LIVE(1000)); /* four submission queues' worth */
}

TEST(a_completion_queue_overflow_loses_nothing)
{
    /* One worker, more completions than its queue holds (1024). */
    many(1, (int)T_LIVE(3000));
}

/* ---- wakes from other threads ---- */

struct waker {
    weft_sem sem;
    int ack[2]; /* a pipe: the task says it took the last permit */
    int rounds;
};

static void *waker_thread(void *arg)
{
    struct waker *k = arg;
    for (int i = 0; i < k->rounds; i++) {
        char c;
        ASSERT_EQ(read(k->ack[0], &c, 1), 1); /* blocks: a plain thread */
        ASSERT_EQ(weft_sem_release(&k->sem, 1), 0);
    }
    return NULL;
}

static int never_ready(void *arg)
{
    int *fd = arg;
    return weft_fd_wait(*fd, WEFT_IO_READ, WEFT_NEVER) == -ECANCELED ? 0 : 1;
}

static int wake_root(void *arg)
{
    struct waker *k = arg;
    int sv[2];
    nb_pair(sv);
    /* A wait on a descriptor: the worker, idle, sleeps in its poller. */
    weft_scope *s = scope_open();
    spawn(never_ready, &sv[0]);
    ASSERT_EQ(weft_yield(), 0);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, waker_thread, k), 0);
    for (int i = 0; i < k->rounds; i++) {
        ASSERT_EQ(write(k->ack[1], "x", 1), 1);
        ASSERT_EQ(
            weft_sem_acquire_until(&k->sem, 1, weft_now() + 10 * WEFT_SEC), 0);
    }
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_close(sv[0]), 0);
    ASSERT_EQ(weft_close(sv[1]), 0);
    return name_is("io_uring");
}

TEST(a_plain_thread_wakes_a_worker_asleep_in_its_ring)
{
    need_uring();
    struct waker k = {.rounds = (int)T_SCALE(200)};
    ASSERT_EQ(weft_sem_init(&k.sem, 0), 0);
    ASSERT_EQ(pipe(k.ack), 0);
    ASSERT_EQ(
        run_with(WEFT_POLLER_IO_URING, 1, WEFT_CLOCK_MONOTONIC, wake_root, &k),
        0);
    close(k.ack[0]);
    close(k.ack[1]);
}

/* ---- a full submission queue ---- */

struct wide {
    int n, k;
    int (*sv)[2];
};

static int late_one(void *arg)
{
    struct wide *wd = arg;
    ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    ASSERT_EQ(write(wd->sv[wd->k][1], "x", 1), 1);
    return 0;
}

static int wide_root(void *arg)
{
    struct wide *wd = arg;
    weft_case *cs = calloc((size_t)wd->n, sizeof(*cs));
    ASSERT(cs != NULL);
    for (int i = 0; i < wd->n; i++) {
        nb_pair(wd->sv[i]);
        cs[i] = (weft_case){.op = WEFT_OP_READ, .fd = wd->sv[i][0]};
    }
    /* One park arms n requests at once: more than the submission queue
     * holds (256); the n - 1 cases not chosen withdraw theirs, after
     * which every socket closes for its peer. */
    for (int round = 0; round < 3; round++) {
        wd->k = (int)((unsigned)(round * 7919 + 13) % (unsigned)wd->n);
        weft_scope *s = scope_open();
        spawn(late_one, wd);
        ASSERT_EQ(weft_select(cs, wd->n, weft_now() + WEFT_SEC), wd->k);
        scope_end(s);
        char c;
        ASSERT_EQ(read(wd->sv[wd->k][0], &c, 1), 1);
    }
    for (int i = 0; i < wd->n; i++) {
        ASSERT_EQ(weft_close(wd->sv[i][0]), 0);
        char c;
        ASSERT_EQ(weft_read(wd->sv[i][1], &c, 1, weft_now() + WEFT_SEC), 0);
        ASSERT_EQ(weft_close(wd->sv[i][1]), 0);
    }
    free(cs);
    return name_is("io_uring");
}

TEST(a_select_over_more_cases_than_the_submission_queue)
{
    need_uring();
    int fds = t_proc_count("/proc/self/fd");
    struct wide wd = {.n = 600};
    wd.sv = calloc((size_t)wd.n, sizeof(*wd.sv));
    ASSERT(wd.sv != NULL);
    ASSERT_EQ(
        run_with(WEFT_POLLER_IO_URING, 1, WEFT_CLOCK_VIRTUAL, wide_root, &wd),
        0);
    free(wd.sv);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), fds);
}
