/* SPDX-License-Identifier: MIT */
/*
 * Child processes (weft_process_*): exit statuses and exec errors from the
 * spawn itself; a child owned by its scope, killed by the scope's cancel,
 * deadline, the handle's free or the runtime's shutdown, with its whole
 * process group, and always reaped (no zombie, no descriptor left);
 * communicate moving megabytes both ways without a deadlock, with its cap;
 * the exit reported while a grandchild holds a pipe open. The children
 * are real programs (sh, cat, head, sleep), so the tests wait for what
 * the children do, never for time, except where said.
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

/* No child of this process is left, reaped or not. */
static void assert_no_children(void)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int rc = waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT);
    if (rc == 0 && si.si_pid != 0)
        T_FAIL("child %d is a zombie", (int)si.si_pid);
    ASSERT(rc < 0 && errno == ECHILD); /* not even a running one */
}

static int run2(weft_fn fn, void *arg)
{
    int fds = t_proc_count("/proc/self/fd");
    int rc = t_run_mono(2, fn, arg);
    assert_no_children();
    ASSERT_EQ(t_proc_count("/proc/self/fd"), fds);
    return rc;
}

/* Spawns argv (the rest default) into the current scope. */
static weft_process *spawn_argv(char *const *argv, weft_stdio out)
{
    weft_process_opts o = {.argv = argv, .out = out};
    weft_process *p = NULL;
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), 0);
    ASSERT(p != NULL);
    return p;
}

static int exit_of(char *const *argv)
{
    weft_process *p = spawn_argv(argv, WEFT_STDIO_INHERIT);
    int st = 12345;
    ASSERT_EQ(weft_process_join(p, &st), 0);
    int again = 0;
    ASSERT_EQ(weft_process_join(p, &again), 0); /* the same status again */
    ASSERT_EQ(again, st);
    ASSERT_EQ(weft_process_kill(p, 0), -ESRCH); /* exited: no signal */
    ASSERT_EQ(weft_process_free(p), 0);
    return st;
}

static int statuses_main(void *arg)
{
    ASSERT_EQ(exit_of((char *[]){"true", NULL}), 0);
    ASSERT_EQ(exit_of((char *[]){"false", NULL}), 1);
    ASSERT_EQ(exit_of((char *[]){"sh", "-c", "exit 7", NULL}), 7);
    ASSERT_EQ(exit_of((char *[]){"/bin/sh", "-c", "kill -KILL $$", NULL}),
              -SIGKILL);
    ASSERT_EQ(exit_of((char *[]){"sh", "-c", "kill -USR1 $$", NULL}), -SIGUSR1);
    return 0;
}

/* true, false, exit 7, killed by SIGKILL and SIGUSR1: join's statuses. */
TEST(statuses)
{
    ASSERT_EQ(run2(statuses_main, NULL), 0);
}

static int errors_pdeathsig; /* 0: posix_spawn; SIGKILL: fork and exec */

static int errors_main(void *arg)
{
    const char *dir = arg;
    weft_process *p = (weft_process *)1;
    weft_process_opts o = {.argv = (char *[]){"weft-no-such-program", NULL},
                           .pdeathsig = errors_pdeathsig};
#if defined(WEFT_TEST_EMULATED)
    /* qemu-user runs posix_spawn's vfork as a fork: the exec's error
     * cannot come back through it (weft.h), only through fork and exec. */
    if (!o.pdeathsig) {
        ASSERT_EQ(weft_process_spawn(NULL, &o, &p), 0);
        int st = -1;
        ASSERT_EQ(weft_process_join(p, &st), 0);
        ASSERT_EQ(st, 127);
        ASSERT_EQ(weft_process_free(p), 0);
        return 0;
    }
#endif
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), -ENOENT);
    ASSERT(p == NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/not-executable", dir);
    o.argv = (char *[]){path, NULL};
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), -EACCES);
    snprintf(path, sizeof path, "%s/garbage", dir);
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), -ENOEXEC);
    o.argv = (char *[]){"true", NULL};
    o.cwd = "/weft-no-such-directory";
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), -ENOENT);
    o.cwd = NULL;
    if (o.pdeathsig) { /* and a start that works, with its pipe */
        o.out = WEFT_STDIO_PIPE;
        ASSERT_EQ(weft_process_spawn(NULL, &o, &p), 0);
        char c;
        ASSERT_EQ(weft_read(weft_process_stdout(p), &c, 1, WEFT_NEVER), 0);
        int st = -1;
        ASSERT_EQ(weft_process_join(p, &st), 0);
        ASSERT_EQ(st, 0);
        ASSERT_EQ(weft_process_free(p), 0);
    }
    o.out = (weft_stdio)7;
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), -EINVAL);
    o.out = WEFT_STDIO_INHERIT;
    o.grace_ns = -1;
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), -EINVAL);
    o.grace_ns = 0;
    o.argv = NULL;
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), -EINVAL);
    ASSERT_EQ(weft_process_spawn(NULL, NULL, &p), -EINVAL);
    return 0;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    ASSERT(fd >= 0);
    ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    ASSERT_EQ(close(fd), 0);
    ASSERT_EQ(chmod(path, mode), 0);
}

/* A missing program, a file without execute permission, one the kernel
 * cannot run, a missing cwd: errors of the spawn itself (not an exit
 * status of 127), and bad options; nothing left behind. */
TEST(spawn_errors)
{
    char dir[] = "/tmp/weft-process-XXXXXX";
    ASSERT(mkdtemp(dir) != NULL);
    char a[256], b[256];
    snprintf(a, sizeof a, "%s/not-executable", dir);
    snprintf(b, sizeof b, "%s/garbage", dir);
    write_file(a, "#!/bin/sh\nexit 0\n", 0644);
    write_file(b, "\x01\x02\x03 not a program\n", 0755);
    ASSERT_EQ(weft_process_spawn(NULL, &(weft_process_opts){0}, NULL), -EINVAL);
    weft_process *p;
    ASSERT_EQ(
        weft_process_spawn(
            NULL, &(weft_process_opts){.argv = (char *[]){"true", NULL}}, &p),
        -EPERM); /* not in a task */
    ASSERT_EQ(run2(errors_main, dir), 0);
    errors_pdeathsig = SIGKILL; /* the same through fork and exec */
    ASSERT_EQ(run2(errors_main, dir), 0);
    unlink(a);
    unlink(b);
    rmdir(dir);
}

static char *const sleeper[] = {"sleep", "1000", NULL};

static int cycles_main(void *arg)
{
    long n = T_SCALE(1000);
    for (long i = 0; i < n; i++) {
        weft_scope *s = scope_open();
        weft_process_opts o = {.argv = sleeper, .out = WEFT_STDIO_PIPE};
        weft_process *p = NULL;
        ASSERT_EQ(weft_process_spawn(s, &o, &p), 0);
        pid_t pid = (pid_t)weft_process_pid(p);
        switch (i % 4) {
        case 0: /* cancelled before its reaper ran */
            ASSERT_EQ(weft_scope_cancel(s), 0);
            break;
        case 1: /* cancelled once its reaper waits */
            ASSERT_EQ(weft_yield(), 0);
            ASSERT_EQ(weft_scope_cancel(s), 0);
            break;
        case 2: /* freed without a join: the free kills it */
            ASSERT_EQ(weft_process_free(p), 0);
            p = NULL;
            break;
        case 3: /* killed, joined */
            ASSERT_EQ(weft_process_kill(p, SIGKILL), 0);
            break;
        }
        int jrc = weft_scope_join(s);
        ASSERT(jrc == 0 || jrc == -ECANCELED);
        siginfo_t si; /* the join returned with the child reaped */
        ASSERT(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 &&
               errno == ECHILD);
        if (p) {
            int st = 0;
            ASSERT_EQ(weft_process_join(p, &st), 0); /* reaped already */
            ASSERT(st == -SIGTERM || st == -SIGKILL);
            ASSERT_EQ(weft_process_free(p), 0);
        }
        ASSERT_EQ(weft_scope_free(s), 0);
    }
    return 0;
}

/* 1,000 spawns (T_SCALE) ended four ways: a cancel before and after the
 * reaper started, a free without a join, a kill. Each scope's join
 * returns with its child reaped; afterwards no child is left and no
 * descriptor (run2). */
TEST(spawn_cancel_cycles)
{
    ASSERT_EQ(run2(cycles_main, NULL), 0);
}

static int comm_big_main(void *arg)
{
    size_t big = 10u << 20;
    char *buf = malloc(big + 1);
    ASSERT(buf != NULL);
    /* 10 MiB out, nothing in */
    weft_process *p =
        spawn_argv((char *[]){"head", "-c", "10485760", "/dev/zero", NULL},
                   WEFT_STDIO_PIPE);
    weft_process_output out = {.data = buf, .cap = big + 1};
    int st = -1;
    ASSERT_EQ(weft_process_communicate(p, NULL, 0, &out, NULL, &st, WEFT_NEVER),
              0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(out.len, big);
    ASSERT_EQ(out.total, (uint64_t)big);
    ASSERT(buf[0] == 0 && buf[big - 1] == 0);
    ASSERT_EQ(weft_process_free(p), 0);

    /* 4 MiB in and out through cat, and stderr at once: writing it all
     * before reading would deadlock on the full pipes */
    size_t n = 4u << 20;
    char *in = malloc(n);
    ASSERT(in != NULL);
    for (size_t i = 0; i < n; i++)
        in[i] = (char)(i * 7 + i / 4096);
    weft_process_opts o = {
        .argv = (char *[]){"sh", "-c", "cat; echo done >&2; exit 5", NULL},
        .in = WEFT_STDIO_PIPE,
        .out = WEFT_STDIO_PIPE,
        .err = WEFT_STDIO_PIPE};
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), 0);
    char ebuf[64];
    weft_process_output eo = {.data = ebuf, .cap = sizeof ebuf};
    out = (weft_process_output){.data = buf, .cap = n};
    ASSERT_EQ(weft_process_communicate(p, in, n, &out, &eo, &st, WEFT_NEVER),
              0);
    ASSERT_EQ(st, 5);
    ASSERT_EQ(out.len, n);
    ASSERT(memcmp(buf, in, n) == 0);
    ASSERT_EQ(eo.len, 5u);
    ASSERT(memcmp(ebuf, "done\n", 5) == 0);
    ASSERT_EQ(weft_process_stdin(p), -EBADF); /* communicate closed it */
    ASSERT_EQ(weft_process_free(p), 0);

    /* over the cap: the first bytes kept, all counted, the exit waited */
    p = spawn_argv((char *[]){"head", "-c", "1048576", "/dev/zero", NULL},
                   WEFT_STDIO_PIPE);
    out = (weft_process_output){.data = buf, .cap = 4096};
    st = -1;
    ASSERT_EQ(weft_process_communicate(p, NULL, 0, &out, NULL, &st, WEFT_NEVER),
              -EMSGSIZE);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(out.len, 4096u);
    ASSERT_EQ(out.total, (uint64_t)1 << 20);
    ASSERT_EQ(weft_process_free(p), 0);

    /* a child that reads none of its input: the write ends, no error */
    o = (weft_process_opts){.argv = (char *[]){"true", NULL},
                            .in = WEFT_STDIO_PIPE};
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), 0);
    ASSERT_EQ(weft_process_communicate(p, in, n, NULL, NULL, &st, WEFT_NEVER),
              0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(weft_process_free(p), 0);
    free(in);
    free(buf);
    return 0;
}

/* communicate: 10 MiB from head, 4 MiB through cat with stderr beside it,
 * the cap (-EMSGSIZE, the first cap bytes kept, total counts all), and a
 * child that exits without reading its input (no SIGPIPE, no error). */
TEST(communicate_no_deadlock)
{
    ASSERT_EQ(run2(comm_big_main, NULL), 0);
}

static int pipes_main(void *arg)
{
    weft_process_opts o = {.argv = (char *[]){"cat", NULL},
                           .in = WEFT_STDIO_PIPE,
                           .out = WEFT_STDIO_PIPE,
                           .err = WEFT_STDIO_NULL};
    weft_process *p;
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), 0);
    ASSERT_EQ(weft_process_stderr(p), -EBADF);
    int in = weft_process_stdin(p), out = weft_process_stdout(p);
    ASSERT(in >= 0 && out >= 0);
    ASSERT((fcntl(in, F_GETFL) & O_NONBLOCK) &&
           (fcntl(out, F_GETFL) & O_NONBLOCK));
    ASSERT(fcntl(in, F_GETFD) & FD_CLOEXEC);
    ASSERT_EQ(weft_write_all(in, "hello", 5, NULL, WEFT_NEVER), 0);
    char buf[8];
    ASSERT_EQ(weft_read_exact(out, buf, 5, NULL, WEFT_NEVER), 0);
    ASSERT(memcmp(buf, "hello", 5) == 0);
    ASSERT_EQ(weft_process_close_stdin(p), 0);
    ASSERT_EQ(weft_process_close_stdin(p), -EBADF);
    ASSERT_EQ(weft_read(out, buf, sizeof buf, WEFT_NEVER), 0); /* the end */
    int st = -1;
    ASSERT_EQ(weft_process_join(p, &st), 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(weft_process_free(p), 0);

    /* /dev/null as input and error: cat reads its end at once */
    o = (weft_process_opts){.argv = (char *[]){"cat", NULL},
                            .in = WEFT_STDIO_NULL,
                            .out = WEFT_STDIO_PIPE,
                            .err = WEFT_STDIO_NULL};
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), 0);
    ASSERT_EQ(weft_read(weft_process_stdout(p), buf, sizeof buf, WEFT_NEVER),
              0);
    ASSERT_EQ(weft_process_join(p, &st), 0);
    ASSERT_EQ(st, 0);
    ASSERT_EQ(weft_process_free(p), 0);

    /* environment and working directory */
    char *env[] = {"WEFT_X=42", NULL};
    o = (weft_process_opts){
        .argv = (char *[]){"/bin/sh", "-c", "echo $WEFT_X; pwd", NULL},
        .envp = env,
        .cwd = "/",
        .out = WEFT_STDIO_PIPE};
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), 0);
    char text[32];
    weft_process_output to = {.data = text, .cap = sizeof text};
    ASSERT_EQ(weft_process_communicate(p, NULL, 0, &to, NULL, &st, WEFT_NEVER),
              0);
    ASSERT_EQ(to.len, 5u);
    ASSERT(memcmp(text, "42\n/\n", 5) == 0);
    ASSERT_EQ(weft_process_free(p), 0);
    return 0;
}

/* The pipes as weft descriptors (non-blocking, close-on-exec) with cat,
 * closing stdin for its end; envp and cwd. */
TEST(pipes_env_cwd)
{
    ASSERT_EQ(run2(pipes_main, NULL), 0);
}

static int cancelled_spawn_main(void *arg)
{
    weft_scope *s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    weft_process *p = (weft_process *)1;
    weft_process_opts o = {.argv = sleeper};
    ASSERT_EQ(weft_process_spawn(s, &o, &p), -ECANCELED);
    ASSERT(p == NULL);
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), -ECANCELED); /* current */
    assert_no_children();
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

/* A spawn in a cancelled scope starts nothing. */
TEST(spawn_cancelled)
{
    ASSERT_EQ(run2(cancelled_spawn_main, NULL), 0);
}

/* Reads one line from fd into buf (NUL-terminated, without the '\n'),
 * waiting until the deadline for each byte. */
static void read_line_until(int fd, char *buf, size_t cap, weft_time deadline)
{
    size_t n = 0;
    while (n + 1 < cap) {
        ASSERT_EQ(weft_read_exact(fd, buf + n, 1, NULL, deadline), 0);
        if (buf[n] == '\n')
            break;
        n++;
    }
    buf[n] = 0;
}

static void read_line(int fd, char *buf, size_t cap)
{
    read_line_until(fd, buf, cap, weft_now() + 10 * WEFT_SEC);
}

struct deadline_arg {
    int status;
    weft_time t0, t_end;
};

static int deadline_main(void *arg)
{
    struct deadline_arg *a = arg;
    weft_scope *s = scope_open();
    weft_process_opts o = {
        .argv = (char *[]){"sh", "-c",
                           "trap '' TERM; echo ready; exec sleep 1000", NULL},
        .out = WEFT_STDIO_PIPE,
        .grace_ns = 5 * WEFT_SEC};
    weft_process *p;
    ASSERT_EQ(weft_process_spawn(s, &o, &p), 0);
    char line[16];
    /* No deadline: on the virtual clock, one would pass after 5 ms of
     * real time without output (a slow start under a sanitizer) */
    read_line_until(weft_process_stdout(p), line, sizeof line, WEFT_NEVER);
    ASSERT(strcmp(line, "ready") == 0);
    a->t0 = weft_now();
    ASSERT_EQ(weft_scope_set_deadline(s, a->t0 + WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    a->t_end = weft_now();
    ASSERT_EQ(weft_process_join(p, &a->status), 0);
    ASSERT_EQ(weft_process_free(p), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

/* A scope's deadline ends a child that ignores SIGTERM (exec keeps the
 * ignored disposition): SIGTERM at the deadline, SIGKILL after the
 * 5 s grace. On the virtual clock, so no second passes for real: the
 * scope's join returns at the deadline plus the grace, virtual. */
TEST(deadline_kills_after_grace)
{
    struct deadline_arg a = {0};
    int fds = t_proc_count("/proc/self/fd");
    struct timespec r0, r1;
    clock_gettime(CLOCK_MONOTONIC, &r0);
    ASSERT_EQ(t_run_virtual(2, deadline_main, &a), 0);
    clock_gettime(CLOCK_MONOTONIC, &r1);
    assert_no_children();
    ASSERT_EQ(t_proc_count("/proc/self/fd"), fds);
    ASSERT_EQ(a.status, -SIGKILL);
    ASSERT(a.t_end - a.t0 >= 6 * WEFT_SEC);
    ASSERT(r1.tv_sec - r0.tv_sec < 5); /* the grace was not slept */
}

static int pidfd_of(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

struct group_arg {
    int same_group;
    int grandchild_alive; /* after the scope's join */
};

static int group_main(void *arg)
{
    struct group_arg *a = arg;
    weft_scope *s = scope_open();
    weft_process_opts o = {
        .argv = (char *[]){"sh", "-c", "sleep 1000 & echo $!; exec sleep 1000",
                           NULL},
        .out = WEFT_STDIO_PIPE,
        .same_group = a->same_group};
    weft_process *p;
    ASSERT_EQ(weft_process_spawn(s, &o, &p), 0);
    char line[32];
    read_line(weft_process_stdout(p), line, sizeof line);
    pid_t g = (pid_t)atoi(line);
    ASSERT(g > 0);
    int gfd = pidfd_of(g); /* the grandchild is alive: it sleeps */
    ASSERT(gfd >= 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    int st = 0;
    ASSERT_EQ(weft_process_join(p, &st), 0);
    ASSERT_EQ(st, -SIGTERM);
    /* Its exit is seen on its pidfd (init reaps it: it is not ours). */
    int rc = weft_fd_wait(gfd, WEFT_IO_READ, weft_now() + 10 * WEFT_SEC);
    a->grandchild_alive = rc == -ETIMEDOUT;
    if (a->grandchild_alive) /* the control run: end it */
        ASSERT_EQ(syscall(SYS_pidfd_send_signal, gfd, SIGKILL, NULL, 0), 0);
    else
        ASSERT_EQ(rc, 0);
    weft_close(gfd);
    ASSERT_EQ(weft_process_free(p), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

/* A cancel ends the process tree: sh's background grandchild is in the
 * child's group and gets the signal too. The control: with same_group the
 * grandchild outlives the cancel (told apart with a 10 s timeout, not a
 * sleep: its pidfd says so at once when it does exit). */
TEST(cancel_kills_group)
{
    struct group_arg a = {0};
    ASSERT_EQ(run2(group_main, &a), 0);
    ASSERT_EQ(a.grandchild_alive, 0);
}

static int grandchild_main(void *arg)
{
    /* The grandchild holds stdout open for its 1000 s; the child exits 3
     * at once. */
    weft_process_opts o = {
        .argv = (char *[]){"sh", "-c", "sleep 1000 & echo $!; exit 3", NULL},
        .out = WEFT_STDIO_PIPE,
        .wait_delay_ns = 50 * WEFT_MSEC};
    weft_process *p;
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), 0);
    int st = -1;
    ASSERT_EQ(weft_process_join_until(p, &st, weft_now() + 10 * WEFT_SEC), 0);
    ASSERT_EQ(st, 3);
    /* communicate returns after the wait delay with what was written
     * (a real 50 ms: the delay is the behaviour under test) */
    char text[32];
    weft_process_output out = {.data = text, .cap = sizeof text - 1};
    st = -1;
    ASSERT_EQ(weft_process_communicate(p, NULL, 0, &out, NULL, &st,
                                       weft_now() + 10 * WEFT_SEC),
              0);
    ASSERT_EQ(st, 3);
    text[out.len] = 0;
    pid_t g = (pid_t)atoi(text);
    ASSERT(g > 0);
    int gfd = pidfd_of(g);
    ASSERT(gfd >= 0);
    ASSERT_EQ(syscall(SYS_pidfd_send_signal, gfd, SIGKILL, NULL, 0), 0);
    ASSERT_EQ(weft_fd_wait(gfd, WEFT_IO_READ, weft_now() + 10 * WEFT_SEC), 0);
    weft_close(gfd);
    ASSERT_EQ(weft_process_free(p), 0);
    return 0;
}

/* The exit is reported when the child exits, though a grandchild holds
 * its stdout open; communicate stops reading after the wait delay. */
TEST(exit_while_grandchild_holds_pipe)
{
    ASSERT_EQ(run2(grandchild_main, NULL), 0);
}

static int shutdown_main(void *arg)
{
    weft_process_opts o = {.argv = sleeper};
    weft_process *p;
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), 0);
    *(weft_process **)arg = p;
    ASSERT_EQ(weft_shutdown_request(), 0); /* cancels the root scope */
    return 0;
}

/* The runtime's shutdown kills a child left running in the root scope;
 * weft_run returns with it reaped. Its handle may be freed afterwards. */
TEST(shutdown_reaps)
{
    weft_process *p = NULL;
    int fds = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_mono(2, shutdown_main, &p), 0);
    assert_no_children();
    ASSERT(p != NULL);
    ASSERT_EQ(weft_process_free(p), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), fds);
}

struct orphan_arg {
    int pdeathsig;
    int report; /* the pipe the child's pid goes to */
};

static int orphan_main(void *arg)
{
    struct orphan_arg *a = arg;
    weft_process_opts o = {.argv = sleeper, .pdeathsig = a->pdeathsig};
    weft_process *p;
    ASSERT_EQ(weft_process_spawn(NULL, &o, &p), 0);
    int pid = weft_process_pid(p);
    ASSERT_EQ(write(a->report, &pid, sizeof pid), (ssize_t)sizeof pid);
    _exit(0); /* this process dies at once, as a crash would */
}

/* Whether a child with this pdeathsig outlives its parent process's
 * sudden death: 1 alive (then killed here), 0 gone. */
static int outlives_parent(int pdeathsig)
{
    int rp[2];
    ASSERT_EQ(pipe2(rp, O_CLOEXEC), 0);
    pid_t sub = fork(); /* before any runtime here: one thread */
    ASSERT(sub >= 0);
    if (sub == 0) {
        struct orphan_arg a = {.pdeathsig = pdeathsig, .report = rp[1]};
        t_run_mono(2, orphan_main, &a);
        _exit(1);
    }
    close(rp[1]);
    int pid = 0;
    ASSERT_EQ(read(rp[0], &pid, sizeof pid), (ssize_t)sizeof pid);
    close(rp[0]);
    int st;
    ASSERT_EQ(waitpid(sub, &st, 0), sub);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int fd = pidfd_of(pid); /* fails if it is gone already */
    if (fd < 0)
        return 0;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int alive = poll(&pf, 1, 10000) == 0; /* readable: it has exited */
    if (alive)
        syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
    close(fd);
    return alive;
}

/* pdeathsig: a child started with it dies with its parent process, even
 * a parent that ends without a word (_exit from a task, as a crash).
 * The wait for its death is bounded (10 s) by its pidfd, not slept. */
TEST(pdeathsig)
{
    ASSERT_EQ(outlives_parent(SIGKILL), 0);
    assert_no_children();
}

static int fail_eio(void *arg)
{
    return -EIO;
}

static int join_timeout_main(void *arg)
{
    weft_scope *s = scope_open();
    weft_process_opts o = {.argv = sleeper};
    weft_process *p;
    ASSERT_EQ(weft_process_spawn(s, &o, &p), 0);
    /* a join that times out leaves the child running */
    ASSERT_EQ(weft_process_join_until(p, NULL, weft_now() + WEFT_SEC),
              -ETIMEDOUT);
    ASSERT_EQ(weft_process_kill(p, 0), 0);
    /* so does a cancelled one */
    weft_scope *inner = scope_open();
    ASSERT_EQ(weft_scope_cancel(inner), 0);
    ASSERT_EQ(weft_process_join(p, NULL), -ECANCELED);
    ASSERT_EQ(weft_scope_join(inner), -ECANCELED);
    ASSERT_EQ(weft_scope_free(inner), 0);
    ASSERT_EQ(weft_process_kill(p, 0), 0);
    /* a failing sibling cancels the fail-fast scope, which ends the child;
     * the reaper's own status is 0, so the scope's error is the sibling's */
    spawn(fail_eio, NULL);
    ASSERT_EQ(weft_scope_join(s), -EIO);
    int st = 0;
    ASSERT_EQ(weft_process_join(p, &st), 0);
    /* SIGTERM; SIGKILL if sleep took 5 ms of real time to die of it (the
     * virtual clock then jumps over the grace) */
    ASSERT(st == -SIGTERM || st == -SIGKILL);
    ASSERT_EQ(weft_process_free(p), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

/* The child belongs to its scope, not to the task that waits: a join that
 * times out or is cancelled leaves it running; a fail-fast sibling's
 * error ends it. On the virtual clock: the timeout takes no real second. */
TEST(join_timeout_leaves_child)
{
    int fds = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(2, join_timeout_main, NULL), 0);
    assert_no_children();
    ASSERT_EQ(t_proc_count("/proc/self/fd"), fds);
}

/* ---- without pidfd (Linux before 5.3) ---- */

/* A scope with a 100 ms deadline over `sleep 1000`: the reaper's cancel
 * path (SIGTERM to the group, its exit, the reap) on the fallback. */
static int no_pidfd_main(void *arg)
{
    (void)arg;
    ASSERT_EQ(exit_of((char *[]){"true", NULL}), 0);
    ASSERT_EQ(exit_of((char *[]){"sh", "-c", "exit 7", NULL}), 7);
    ASSERT_EQ(exit_of((char *[]){"sh", "-c", "kill -USR1 $$", NULL}), -SIGUSR1);
    weft_scope *s;
    weft_scope_opts so = {.deadline = weft_now() + 100 * WEFT_MSEC};
    ASSERT_EQ(weft_scope_open(&s, &so), 0);
    weft_process *p = NULL;
    weft_process_opts o = {.argv = (char *[]){"sleep", "1000", NULL}};
    ASSERT_EQ(weft_process_spawn(s, &o, &p), 0);
    ASSERT_EQ(weft_process_kill(p, 0), 0); /* by its pid: still ours */
    ASSERT_EQ(weft_scope_join(s), -ETIMEDOUT);
    int st = 0;
    ASSERT_EQ(weft_process_join(p, &st), 0);
    ASSERT_EQ(st, -SIGTERM);
    ASSERT_EQ(weft_process_kill(p, 0), -ESRCH); /* reaped: no signal */
    ASSERT_EQ(weft_process_free(p), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

/* In a child whose kernel seems to have no pidfd (a seccomp filter makes
 * pidfd_open and pidfd_send_signal fail with ENOSYS): children are still
 * spawned, joined, signalled by pid and reaped, one by one (never
 * waitpid(-1)), and none is left a zombie. */
TEST(without_pidfd_children_are_still_reaped_and_killed)
{
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        struct sock_filter f[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                     offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_open, 2, 0),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_send_signal, 1, 0),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & 0xffff)),
        };
        struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
            _exit(T_SKIP_CODE); /* no filters here (qemu-user has none) */
        if (syscall(SYS_pidfd_open, getpid(), 0) >= 0 || errno != ENOSYS)
            _exit(4);
        ASSERT_EQ(run2(no_pidfd_main, NULL), 0);
        _exit(0);
    }
    int status;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT(WIFEXITED(status));
    if (WEXITSTATUS(status) == T_SKIP_CODE)
        T_SKIP("a seccomp filter cannot be installed here");
    ASSERT_EQ(WEXITSTATUS(status), 0);
}

/* ---- process groups and sessions ---- */

static int groups_main(void *arg)
{
    int fork_path = *(int *)arg; /* pdeathsig takes fork and exec */
    weft_scope *s = scope_open();
    struct {
        int same_group, new_session;
    } ways[] = {{0, 0}, {1, 0}, {0, 1}};
    weft_process *p[3];
    for (int i = 0; i < 3; i++) {
        /* Its first line says it runs (setsid and setpgid come before the
         * exec: where posix_spawn returns before the exec, as under
         * qemu-user, they may not have happened yet at its return). Its
         * streams are not the test's, so a child left by a failed test
         * does not hold ctest's. */
        weft_process_opts o = {
            .argv = (char *[]){"sh", "-c", "echo up; exec sleep 1000", NULL},
            .in = WEFT_STDIO_NULL,
            .out = WEFT_STDIO_PIPE,
            .err = WEFT_STDIO_NULL,
            .same_group = ways[i].same_group,
            .new_session = ways[i].new_session,
            .pdeathsig = fork_path ? SIGKILL : 0};
        ASSERT_EQ(weft_process_spawn(s, &o, &p[i]), 0);
        char up[3];
        ASSERT_EQ(weft_read_exact(weft_process_stdout(p[i]), up, 3, NULL,
                                  weft_now() + 10 * WEFT_SEC),
                  0);
    }
    pid_t a = weft_process_pid(p[0]), b = weft_process_pid(p[1]),
          c = weft_process_pid(p[2]);
    ASSERT_EQ(getpgid(a), a); /* the default: a group of its own */
    ASSERT_EQ(getsid(a), getsid(0));
    ASSERT_EQ(getpgid(b), getpgrp()); /* same_group */
    ASSERT_EQ(getsid(c), c);          /* new_session: leads both */
    ASSERT_EQ(getpgid(c), c);
    weft_process_opts bad = {
        .argv = (char *[]){"true", NULL}, .same_group = 1, .new_session = 1};
    weft_process *q = NULL;
    ASSERT_EQ(weft_process_spawn(s, &bad, &q), -EINVAL);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    weft_scope_join(s);
    for (int i = 0; i < 3; i++) {
        int st = 0;
        ASSERT_EQ(weft_process_join(p[i], &st), 0);
        ASSERT_EQ(st, -SIGTERM);
        ASSERT_EQ(weft_process_free(p[i]), 0);
    }
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

TEST(same_group_new_group_or_new_session)
{
    int fork_path = 0;
    ASSERT_EQ(run2(groups_main, &fork_path), 0);
    fork_path = 1;
    ASSERT_EQ(run2(groups_main, &fork_path), 0);
}

static int after_exit(void *arg)
{
    weft_process *p = arg;
    int st = -1;
    ASSERT_EQ(weft_process_join(p, &st), 0); /* the reaper has reaped */
    ASSERT_EQ(st, 0);
    for (int i = 0; i < 10; i++) /* let the reaper end first */
        weft_yield();
    return 5;
}

static int never_a_winner_main(void *arg)
{
    (void)arg;
    const weft_policy policies[] = {WEFT_RACE, WEFT_FIRST};
    for (int i = 0; i < 2; i++) {
        weft_scope *s = NULL;
        ASSERT_EQ(
            weft_scope_open(&s, &(weft_scope_opts){.policy = policies[i]}), 0);
        weft_process *p =
            spawn_argv((char *[]){"true", NULL}, WEFT_STDIO_INHERIT);
        ASSERT_EQ(weft_spawn(s, after_exit, p), 0); /* the reaper has none */
        ASSERT_EQ(weft_scope_spawned(s), 1);
        /* RACE: the task's 5; FIRST: its success. The reaper, which ended
         * first with 0, won both before it was a background child. */
        ASSERT_EQ(weft_scope_join(s), policies[i] == WEFT_RACE ? 5 : 0);
        ASSERT_EQ(weft_scope_winner(s), 0);
        ASSERT_EQ(weft_scope_spawned(s), 1);
        ASSERT_EQ(weft_scope_free(s), 0);
        ASSERT_EQ(weft_process_free(p), 0);
    }
    return 0;
}

/* A process's exit is never a WEFT_RACE or WEFT_FIRST scope's winner, and
 * its reaper is not counted among the scope's children. */
TEST(a_process_is_never_a_scope_winner)
{
    ASSERT_EQ(run2(never_a_winner_main, NULL), 0);
}
