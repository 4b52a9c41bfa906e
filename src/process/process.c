/* SPDX-License-Identifier: MIT */
/*
 * Child processes owned by a scope (weft.h, "Child processes").
 *
 * weft_process_spawn starts the child with posix_spawn (glibc's runs the
 * child on a vfork-like clone and returns the exec's errno, so a missing
 * program is -ENOENT from the spawn itself, not an exit status of 127),
 * opens a pidfd for it at once (race-free: it is our own child, not yet
 * reaped, and nothing of weft reaps with waitpid(-1)), and spawns its
 * reaper task into the scope. The reaper waits for the pidfd to become
 * readable (the child exited) through the poller, and reaps with
 * waitid(P_PIDFD). Cancelled (the scope's cancel, its deadline, or
 * weft_process_free before the exit, through the reaper's task handle),
 * it signals the group, waits the grace in a shielded scope, sends
 * SIGKILL, waits again and reaps. The record has two owners, the handle
 * and the reaper; the last one closes the pidfd (never earlier, so
 * weft_process_kill never signals through a number reused) and frees it.
 * Without pidfd (Linux before 5.3), the child is owned by its pid, which
 * is its own until the reaper reaps it: signals go by kill(pid), and the
 * reaper looks for the exit with waitid(P_PID, WNOHANG) at growing
 * intervals (exit_wait), never with waitpid(-1) or a SIGCHLD handler.
 *
 * Built on the public API alone (scopes, tasks, descriptor waits,
 * events): every wait goes through the layers below.
 */
#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

extern char **environ;

/* Where the child goes (weft_process.group): nonzero, it leads a
 * process group of its own, whose id is its pid. */
enum { GROUP_SAME = 0, GROUP_NEW = 1, GROUP_SESSION = 2 };

struct weft_process {
    _Atomic int refs; /* the handle and the reaper */
    pid_t pid;
    int pidfd;
    _Atomic int fds[3]; /* this side's pipe ends, or -1 */
    int group;          /* GROUP_*: whether the child leads its own
                         * process group (and session) */
    int kill_signal;
    int64_t grace_ns;
    int64_t wait_delay_ns;
    int status; /* once done is set: the exit code or -signal */
    int err;    /* once done is set: 0 or -ECHILD */
    weft_event done;
    weft_task_handle reaper;
};

static void put(weft_process *p)
{
    if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (p->pidfd >= 0)
        weft_close(p->pidfd);
    free(p);
}

static int pidfd_open_(pid_t pid)
{
    long fd = syscall(SYS_pidfd_open, pid, 0);
    return fd < 0 ? -errno : (int)fd;
}

/* Signals the child: through its pidfd, or without one (Linux before
 * 5.3) by its pid, which stays the child's until it is reaped, and only
 * the reaper reaps. 0 or -errno. */
static int signal_child(weft_process *p, int sig)
{
    long rc = p->pidfd >= 0
                  ? syscall(SYS_pidfd_send_signal, p->pidfd, sig, NULL, 0)
                  : kill(p->pid, sig);
    return rc < 0 ? -errno : 0;
}

/* waitid on the child alone: by its pidfd, or by its pid without one
 * (never P_ALL: other children are not weft's to reap). */
static int wait_child(weft_process *p, siginfo_t *si, int options)
{
    int rc;
    do
        rc = p->pidfd >= 0
                 ? waitid((idtype_t)P_PIDFD, (id_t)p->pidfd, si, options)
                 : waitid(P_PID, (id_t)p->pid, si, options);
    while (rc < 0 && errno == EINTR);
    return rc;
}

/* Signals the child and, if it leads its own group, the group: called
 * before the child is reaped, so neither its pid nor its group's id can
 * name another process yet. */
static void signal_all(weft_process *p, int sig)
{
    signal_child(p, sig);
    if (p->group)
        kill(-p->pid, sig);
}

/* Records what waitid said (rc, si) and sets done. */
static void record(weft_process *p, int rc, const siginfo_t *si)
{
    if (rc < 0)
        p->err = -errno; /* ECHILD: reaped by someone else (waitpid(-1),
                          * SIGCHLD ignored): the status is lost */
    else if (si->si_code == CLD_EXITED)
        p->status = si->si_status;
    else
        p->status = -si->si_status; /* CLD_KILLED, CLD_DUMPED */
    weft_event_set(&p->done);
}

/* Reaps the child if it has exited: 1 (done is set), 0 (still running). */
static int try_reap(weft_process *p)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int rc = wait_child(p, &si, WEXITED | WNOHANG);
    if (rc == 0 && si.si_pid == 0)
        return 0;
    record(p, rc, &si);
    return 1;
}

/* SIGKILL, and the thread waits for the reap: only where the task cannot
 * wait (no memory for a shielded scope, a spawn the scope refused), rather
 * than leave a zombie. A killed child's exit takes a moment. */
static void kill_and_reap_here(weft_process *p)
{
    signal_all(p, SIGKILL);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int rc = wait_child(p, &si, WEXITED);
    record(p, rc, &si);
}

/* Non-zero if the child has exited (or is gone), reaped or not: its pid,
 * and its group's id, name nothing else until it is reaped. */
static int has_exited(weft_process *p)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int rc = wait_child(p, &si, WEXITED | WNOHANG | WNOWAIT);
    return rc < 0 || si.si_pid != 0;
}

/* Until the child may have exited, or the deadline: its pidfd's
 * readiness through the poller; without a pidfd, a sleep that grows from
 * 1 ms to 100 ms across the calls of one wait (*delay, 0 at first): no
 * SIGCHLD handler to fight other libraries over, no thread per child.
 * 0 (look now), -ETIMEDOUT, -ECANCELED, or the poller's error. */
static int exit_wait(weft_process *p, weft_time deadline, int64_t *delay)
{
    if (p->pidfd >= 0)
        return weft_fd_wait(p->pidfd, WEFT_IO_READ, deadline);
    *delay = *delay ? *delay * 2 : WEFT_MSEC;
    if (*delay > 100 * WEFT_MSEC)
        *delay = 100 * WEFT_MSEC;
    weft_time now = weft_now();
    weft_time until = now + *delay;
    if (until >= deadline) {
        int rc = weft_sleep_until(deadline);
        return rc ? rc : -ETIMEDOUT;
    }
    return weft_sleep_until(until);
}

/* Waits, in a shielded scope, until the child exits or the deadline
 * passes, without reaping it: 1 exited, 0 timed out, -1 cannot wait. */
static int wait_exit(weft_process *p, weft_time deadline)
{
    int64_t delay = 0;
    for (;;) {
        if (has_exited(p))
            return 1;
        int rc = exit_wait(p, deadline, &delay);
        if (rc == -ETIMEDOUT)
            return has_exited(p);
        if (rc == -ECANCELED || rc == -EBADF || rc == -ENOMEM || rc == -EPERM)
            return -1;
    }
}

/* The cancel's end: kill_signal to the group, the grace, SIGKILL, reap. */
static void terminate(weft_process *p)
{
    weft_scope *s = NULL;
    weft_scope_opts so = {.shield = 1};
    if (weft_scope_open(&s, &so) != 0) {
        kill_and_reap_here(p);
        return;
    }
    int r = 0;
    if (p->kill_signal != SIGKILL) {
        signal_all(p, p->kill_signal);
        weft_time now = weft_now();
        weft_time until =
            p->grace_ns > WEFT_NEVER - now ? WEFT_NEVER : now + p->grace_ns;
        r = wait_exit(p, until);
    }
    /* After the grace, or after the leader's exit but before its reap
     * (so its group's id is still its own): SIGKILL to what is left. */
    signal_all(p, SIGKILL);
    if (r == 0)
        r = wait_exit(p, WEFT_NEVER);
    if (r < 0 || !try_reap(p))
        kill_and_reap_here(p);
    weft_scope_join(s);
    weft_scope_free(s);
}

static int reaper(void *arg)
{
    weft_process *p = arg;
    int64_t delay = 0;
    for (;;) {
        if (try_reap(p))
            break;
        int rc = exit_wait(p, WEFT_NEVER, &delay);
        if (rc != 0 && rc != -ECANCELED)
            /* The poller cannot take the pidfd (no memory): look again
             * every 10 ms rather than spin or give the child up. */
            rc = weft_sleep_for(10 * WEFT_MSEC);
        if (rc == -ECANCELED) {
            terminate(p);
            break;
        }
    }
    put(p);
    return 0; /* the exit status is join's: it never fails the scope */
}

/* ---- spawn ---- */

static int cloexec_pipe(int fds[2])
{
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -errno;
    /* The child's end must not be 0, 1 or 2 already: a dup2 onto itself
     * would keep its close-on-exec flag. */
    for (int i = 0; i < 2; i++) {
        if (fds[i] <= 2) {
            int fd = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
            if (fd < 0) {
                int e = -errno;
                close(fds[0]);
                close(fds[1]);
                return e;
            }
            close(fds[i]);
            fds[i] = fd;
        }
    }
    return 0;
}

/* execvpe without its fallback of running a file the kernel refuses
 * (ENOEXEC) with /bin/sh, so both ways of starting a child say the same;
 * PATH is this process's, as posix_spawnp's. Returns the errno. */
static int exec_path(char *const *argv, char *const *envp)
{
    const char *file = argv[0];
    if (strchr(file, '/')) {
        execve(file, argv, envp);
        return errno;
    }
    const char *path = getenv("PATH");
    if (!path)
        path = "/bin:/usr/bin";
    size_t flen = strlen(file);
    int seen_eacces = 0, e = ENOENT;
    for (const char *d = path;; d++) {
        const char *end = strchr(d, ':');
        size_t dlen = end ? (size_t)(end - d) : strlen(d);
        char buf[PATH_MAX];
        if (dlen + flen + 2 <= sizeof buf) {
            size_t n = 0;
            if (dlen == 0)
                buf[n++] = '.';
            memcpy(buf + n, d, dlen);
            n += dlen;
            buf[n++] = '/';
            memcpy(buf + n, file, flen + 1);
            execve(buf, argv, envp);
            e = errno;
            if (e == EACCES)
                seen_eacces = 1;
            else if (e != ENOENT && e != ENOTDIR && e != ESTALE)
                return e; /* found, and it failed: say why */
        }
        if (!end)
            break;
        d = end;
    }
    return seen_eacces ? EACCES : ENOENT;
}

/* The child's side of spawn_fork: only async-signal-safe calls (this is
 * a fork of a threaded process). Reports the errno of what failed on ep. */
static void child_exec(const weft_process_opts *o, int group, const int from[3],
                       pid_t parent, int ep)
{
    int e = 0;
    if (prctl(PR_SET_PDEATHSIG, (unsigned long)o->pdeathsig) < 0)
        e = errno;
    else if (getppid() != parent)
        _exit(127); /* the parent died before the prctl: as if after */
    if (!e && group == GROUP_SESSION && setsid() < 0)
        e = errno;
    else if (!e && group == GROUP_NEW && setpgid(0, 0) < 0)
        e = errno;
    for (int i = 0; i < 3 && !e; i++)
        if (from[i] >= 0 && dup2(from[i], i) < 0)
            e = errno;
    if (!e && o->cwd && chdir(o->cwd) < 0)
        e = errno;
    if (!e) {
        /* As posix_spawn's child: caught signals and SIGPIPE at their
         * defaults (the parent's handlers are no code of the program to
         * be run), then every signal unblocked. */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        for (int sig = 1; sig < NSIG; sig++) {
            struct sigaction sa;
            if (sig == SIGKILL || sig == SIGSTOP ||
                sigaction(sig, NULL, &sa) < 0)
                continue;
            if (sig == SIGPIPE ||
                (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN))
                sigaction(sig, &dfl, NULL);
        }
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        e = exec_path(o->argv, o->envp ? o->envp : environ);
    }
    while (write(ep, &e, sizeof e) < 0 && errno == EINTR) {
    }
    _exit(127);
}

/* fork and exec, for what posix_spawn cannot do (PR_SET_PDEATHSIG): the
 * exec's errno comes back on a close-on-exec pipe, which the exec closes
 * (nothing read: it ran). The worker's thread waits for the exec, as
 * posix_spawn's does; signals are blocked in it meanwhile, so that no
 * handler of this process runs in the child. */
static int spawn_fork(const weft_process_opts *o, int group, const int from[3],
                      pid_t *out)
{
    int ep[2];
    if (pipe2(ep, O_CLOEXEC) < 0)
        return -errno;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        close(ep[0]);
        child_exec(o, group, from, parent, ep[1]);
    }
    int fe = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(ep[1]);
    if (pid < 0) {
        close(ep[0]);
        return -fe;
    }
    int e = 0;
    ssize_t n;
    do
        n = read(ep[0], &e, sizeof e);
    while (n < 0 && errno == EINTR);
    close(ep[0]);
    if (n == (ssize_t)sizeof e) { /* the exec failed: the child exits */
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        return -e;
    }
    *out = pid;
    return 0;
}

/* posix_spawn: the exec's errno is its result (glibc's child runs on a
 * vfork-like clone, and the worker's thread waits for the exec). */
static int spawn_posix(const weft_process_opts *o, int group, const int from[3],
                       pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int rc = -posix_spawn_file_actions_init(&fa);
    if (rc)
        return rc;
    rc = -posix_spawnattr_init(&at);
    if (rc) {
        posix_spawn_file_actions_destroy(&fa);
        return rc;
    }
    for (int i = 0; i < 3 && rc == 0; i++)
        if (from[i] >= 0)
            rc = -posix_spawn_file_actions_adddup2(&fa, from[i], i);
    if (rc == 0 && o->cwd)
        rc = -posix_spawn_file_actions_addchdir_np(&fa, o->cwd);
    if (rc == 0) {
        /* The workers' mask (signals blocked for weft_signal_wait) is not
         * the child's business; nor is an ignored SIGPIPE. */
        sigset_t none, def;
        sigemptyset(&none);
        sigemptyset(&def);
        sigaddset(&def, SIGPIPE);
        short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
        if (group == GROUP_SESSION) {
            flags |= POSIX_SPAWN_SETSID;
        } else if (group == GROUP_NEW) {
            flags |= POSIX_SPAWN_SETPGROUP;
            posix_spawnattr_setpgroup(&at, 0);
        }
        posix_spawnattr_setsigmask(&at, &none);
        posix_spawnattr_setsigdefault(&at, &def);
        rc = -posix_spawnattr_setflags(&at, flags);
    }
    if (rc == 0)
        rc = -posix_spawnp(pid, o->argv[0], &fa, &at, o->argv,
                           o->envp ? o->envp : environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    return rc;
}

/* The descriptors a spawn makes for the child's standard streams: from[i]
 * is what goes to the child's i (-1: inherited), p->fds[i] this side's
 * end of a pipe. Everything in from is closed by close_stdio once the
 * child has its copies. */
static int open_stdio(weft_process *p, const weft_stdio modes[3], int from[3])
{
    int devnull = -1;
    for (int i = 0; i < 3; i++)
        from[i] = -1;
    for (int i = 0; i < 3; i++) {
        if (modes[i] == WEFT_STDIO_PIPE) {
            int pf[2];
            int rc = cloexec_pipe(pf);
            if (rc)
                return rc;
            /* stdin: the child reads pf[0]; stdout, stderr: it writes pf[1] */
            p->fds[i] = i == 0 ? pf[1] : pf[0];
            from[i] = i == 0 ? pf[0] : pf[1];
            if (fcntl(p->fds[i], F_SETFL, O_NONBLOCK) < 0)
                return -errno;
        } else if (modes[i] == WEFT_STDIO_NULL) {
            if (devnull < 0)
                devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
            if (devnull < 0)
                return -errno;
            from[i] = devnull; /* one for all: close_stdio closes it once */
        }
    }
    return 0;
}

static void close_stdio(const int from[3])
{
    for (int i = 0; i < 3; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++)
            dup |= from[j] == from[i];
        if (from[i] >= 0 && !dup)
            close(from[i]);
    }
}

static int check_opts(const weft_process_opts *o)
{
    if (!o || !o->argv || !o->argv[0])
        return -EINVAL;
    if ((unsigned)o->in > WEFT_STDIO_PIPE ||
        (unsigned)o->out > WEFT_STDIO_PIPE ||
        (unsigned)o->err > WEFT_STDIO_PIPE)
        return -EINVAL;
    if (o->kill_signal < 0 || o->kill_signal >= NSIG || o->grace_ns < 0 ||
        o->pdeathsig < 0 || o->pdeathsig >= NSIG)
        return -EINVAL;
    if (o->new_session && o->same_group)
        return -EINVAL; /* a session's leader leads a new group too */
    return 0;
}

/* Whether this kernel has pidfd_open (Linux 5.3), asked once. */
static int have_pidfd(void)
{
    static _Atomic int known; /* 0 unknown, 1 yes, -1 no */
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (k == 0) {
        int fd = pidfd_open_(getpid());
        k = fd == -ENOSYS ? -1 : 1;
        if (fd >= 0)
            close(fd);
        atomic_store_explicit(&known, k, memory_order_relaxed);
    }
    return k > 0;
}

/* The child is running, p->pid set: its pidfd and its reaper. On an error
 * the child is killed and reaped here, never left running unowned. */
static int own_child(weft_scope *s, weft_process *p)
{
    p->pidfd = have_pidfd() ? pidfd_open_(p->pid) : -1;
    if (have_pidfd() && p->pidfd < 0) { /* out of descriptors */
        kill(p->pid, SIGKILL);
        if (p->group)
            kill(-p->pid, SIGKILL);
        while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR) {
        }
        return p->pidfd;
    }
    atomic_store_explicit(&p->refs, 2, memory_order_relaxed);
    weft_spawn_opts so = {
        .name = "process reaper", .handle = &p->reaper, .background = 1};
    int r = weft_spawn_ex(s, reaper, p, &so);
    if (r < 0) {
        /* The scope refused (cancelled meanwhile, joined, no memory): the
         * child goes as a cancel would take it, at once. */
        kill_and_reap_here(p);
        return r;
    }
    return 0;
}

int weft_process_spawn(weft_scope *s, const weft_process_opts *o,
                       weft_process **out)
{
    if (out)
        *out = NULL;
    int rc = check_opts(o);
    if (rc || !out)
        return -EINVAL;
    if (!weft_scope_current())
        return -EPERM;
    if (weft_cancelled() || (s && weft_scope_cancelled(s)))
        return -ECANCELED;
    weft_process *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->pidfd = -1;
    for (int i = 0; i < 3; i++)
        p->fds[i] = -1;
    p->group = o->new_session  ? GROUP_SESSION
               : o->same_group ? GROUP_SAME
                               : GROUP_NEW;
    p->kill_signal = o->kill_signal ? o->kill_signal : SIGTERM;
    p->grace_ns = o->grace_ns ? o->grace_ns : 5 * WEFT_SEC;
    p->wait_delay_ns = o->wait_delay_ns ? o->wait_delay_ns : WEFT_SEC;
    /* p->done: calloc made it WEFT_EVENT_INIT */

    const weft_stdio modes[3] = {o->in, o->out, o->err};
    int from[3];
    rc = open_stdio(p, modes, from);
    pid_t pid = -1;
    if (rc == 0)
        rc = o->pdeathsig ? spawn_fork(o, p->group, from, &pid)
                          : spawn_posix(o, p->group, from, &pid);
    close_stdio(from); /* the child has its copies */
    if (rc == 0) {
        p->pid = pid;
        rc = own_child(s, p);
    }
    if (rc < 0) {
        for (int i = 0; i < 3; i++)
            if (p->fds[i] >= 0)
                close(p->fds[i]);
        if (p->pidfd >= 0)
            close(p->pidfd);
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* ---- the handle ---- */

int weft_process_join_until(weft_process *p, int *status, weft_time deadline)
{
    if (!p)
        return -EINVAL;
    int rc = weft_event_wait_until(&p->done, deadline);
    if (rc)
        return rc;
    if (p->err)
        return p->err;
    if (status)
        *status = p->status;
    return 0;
}

int weft_process_join(weft_process *p, int *status)
{
    return weft_process_join_until(p, status, WEFT_NEVER);
}

int weft_process_kill(weft_process *p, int sig)
{
    if (!p || sig < 0 || sig >= NSIG)
        return -EINVAL;
    return signal_child(p, sig);
}

int weft_process_pid(const weft_process *p)
{
    return p ? p->pid : -EINVAL;
}

static int fd_of(const weft_process *p, int i)
{
    if (!p)
        return -EINVAL;
    int fd = atomic_load_explicit(&((weft_process *)p)->fds[i],
                                  memory_order_acquire);
    return fd >= 0 ? fd : -EBADF;
}

int weft_process_stdin(const weft_process *p)
{
    return fd_of(p, 0);
}

int weft_process_stdout(const weft_process *p)
{
    return fd_of(p, 1);
}

int weft_process_stderr(const weft_process *p)
{
    return fd_of(p, 2);
}

static int close_fd(weft_process *p, int i)
{
    if (!p)
        return -EINVAL;
    int fd = atomic_exchange_explicit(&p->fds[i], -1, memory_order_acq_rel);
    if (fd < 0)
        return -EBADF;
    weft_close(fd);
    return 0;
}

int weft_process_close_stdin(weft_process *p)
{
    return close_fd(p, 0);
}

int weft_process_free(weft_process *p)
{
    if (!p)
        return -EINVAL;
    for (int i = 0; i < 3; i++)
        close_fd(p, i);
    if (!weft_event_is_set(&p->done))
        weft_task_cancel(p->reaper); /* its wait ends: the cancel's kill */
    weft_task_detach(p->reaper);
    put(p);
    return 0;
}

/* ---- communicate ---- */

struct comm {
    weft_process *p;
    weft_scope *scope;
    weft_time deadline;
    const unsigned char *in;
    size_t in_len;
    weft_process_output *outs[3]; /* [1], [2]: stdout's, stderr's */
    int rcs[4];                   /* each task's result: [0] writer, [1],
                                   * [2] readers, [3] the exit's watcher */
    _Atomic int readers;          /* readers not at their end yet */
    weft_event readers_done;
    _Atomic int delay_over; /* the watcher cancelled the readers */
    _Atomic int over_cap;
};

/* write(2) with SIGPIPE blocked on this thread, and taken back if this
 * write raised it: a child that closed its input is not a reason for
 * this process to die (weft_write's descriptors other than sockets keep
 * SIGPIPE's disposition). No task switch happens in between. */
static ssize_t write_nosigpipe(int fd, const void *buf, size_t n)
{
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    ssize_t w = write(fd, buf, n);
    int e = errno;
    if (w < 0 && e == EPIPE && !was_pending) {
        static const struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return w;
}

static int comm_writer(void *arg)
{
    struct comm *c = arg;
    int fd = weft_process_stdin(c->p), rc = 0;
    size_t off = 0;
    while (fd >= 0 && off < c->in_len) {
        ssize_t w = write_nosigpipe(fd, c->in + off, c->in_len - off);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EPIPE)
            break; /* the child stopped reading: not an error */
        if (w < 0 && errno != EAGAIN) {
            rc = -errno;
            break;
        }
        rc = weft_fd_wait(fd, WEFT_IO_WRITE, c->deadline);
        if (rc == -ECANCELED && atomic_load(&c->delay_over))
            rc = 0; /* the child has exited: the rest is not wanted */
        if (rc || atomic_load(&c->delay_over))
            break;
    }
    weft_process_close_stdin(c->p);
    c->rcs[0] = rc;
    if (rc)
        weft_scope_cancel(c->scope);
    return 0;
}

/* Keeps what fits under the cap, counts the rest. */
static void take(struct comm *c, weft_process_output *o, const char *buf,
                 size_t n)
{
    if (!o)
        return;
    if (o->len < o->cap) {
        size_t k = o->cap - o->len < n ? o->cap - o->len : n;
        memcpy((char *)o->data + o->len, buf, k);
        o->len += k;
    }
    o->total += n;
    if (o->total > o->cap)
        atomic_store(&c->over_cap, 1);
}

struct comm_pipe {
    struct comm *c;
    int i; /* 1 stdout, 2 stderr */
};

static int comm_reader(void *arg)
{
    struct comm *c = ((struct comm_pipe *)arg)->c;
    int i = ((struct comm_pipe *)arg)->i;
    int fd = i == 1 ? weft_process_stdout(c->p) : weft_process_stderr(c->p);
    weft_process_output *o = c->outs[i];
    char buf[8192];
    int rc = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0) {
            take(c, o, buf, (size_t)n);
            continue;
        }
        if (n == 0)
            break; /* the end of the stream */
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN) {
            rc = -errno;
            break;
        }
        if (atomic_load(&c->delay_over))
            break; /* drained what was there after the wait delay */
        rc = weft_fd_wait(fd, WEFT_IO_READ, c->deadline);
        if (rc == -ECANCELED && atomic_load(&c->delay_over))
            rc = 0; /* one more read: what came before the cancel */
        else if (rc)
            break;
    }
    c->rcs[i] = rc;
    if (rc)
        weft_scope_cancel(c->scope);
    if (atomic_fetch_sub(&c->readers, 1) == 1)
        weft_event_set(&c->readers_done);
    return 0;
}

/* Waits for the exit, then gives the readers the wait delay to reach the
 * ends of their streams, and cancels them if they have not. */
static int comm_watcher(void *arg)
{
    struct comm *c = arg;
    int rc = weft_event_wait_until(&c->p->done, c->deadline);
    if (rc == 0 && atomic_load(&c->readers) > 0) {
        weft_time until = c->deadline;
        if (c->p->wait_delay_ns > 0) {
            weft_time now = weft_now();
            if (c->p->wait_delay_ns < until - now)
                until = now + c->p->wait_delay_ns;
        }
        int r = weft_event_wait_until(&c->readers_done, until);
        if (r == -ETIMEDOUT && until < c->deadline) {
            atomic_store(&c->delay_over, 1);
            weft_scope_cancel(c->scope);
        } else if (r) {
            rc = r;
        }
    }
    c->rcs[3] = rc;
    if (rc)
        weft_scope_cancel(c->scope);
    return 0;
}

/* What communicate's tasks ended with, jrc their scope's join: the first
 * error that is not the echo of another's cancel, else a cancel; 0. */
static int comm_result(const struct comm *c, int jrc)
{
    for (int i = 0; i < 4; i++)
        if (c->rcs[i] && c->rcs[i] != -ECANCELED)
            return c->rcs[i];
    for (int i = 0; i < 4; i++)
        if (c->rcs[i])
            return c->rcs[i];
    if (jrc == -ECANCELED && !atomic_load(&c->delay_over))
        return -ECANCELED; /* the caller's cancel, which reached them */
    return 0;
}

int weft_process_communicate(weft_process *p, const void *in, size_t in_len,
                             weft_process_output *out, weft_process_output *err,
                             int *status, weft_time deadline)
{
    if (!p || (in_len > 0 && !in))
        return -EINVAL;
    int pin = weft_process_stdin(p) >= 0;
    int pout = weft_process_stdout(p) >= 0;
    int perr = weft_process_stderr(p) >= 0;
    if ((in_len > 0 && !pin) || (out && !pout) || (err && !perr))
        return -EINVAL;
    if (!weft_scope_current())
        return -EPERM;
    if (weft_cancelled())
        return -ECANCELED;
    struct comm c = {.p = p, .deadline = deadline, .in = in, .in_len = in_len};
    c.outs[1] = out;
    c.outs[2] = err;
    for (int i = 1; i < 3; i++)
        if (c.outs[i])
            c.outs[i]->len = 0, c.outs[i]->total = 0;
    /* c.readers_done: zero, as WEFT_EVENT_INIT */
    atomic_store(&c.readers, pout + perr);
    if (pout + perr == 0)
        weft_event_set(&c.readers_done);
    /* The tasks' own scope, joined before this returns, so they may use
     * this frame. Each task records its result and, on an error, cancels
     * the others itself (the wait delay's cancel is no error): the
     * scope's policy has nothing to decide. */
    weft_scope_opts so = {.policy = WEFT_COLLECT};
    int rc = weft_scope_open(&c.scope, &so);
    if (rc)
        return rc;
    struct comm_pipe pipes[3] = {{&c, 0}, {&c, 1}, {&c, 2}};
    int spawned = 0;
    if (pin)
        spawned |= weft_spawn(c.scope, comm_writer, &c) < 0;
    if (pout)
        spawned |= weft_spawn(c.scope, comm_reader, &pipes[1]) < 0;
    if (perr)
        spawned |= weft_spawn(c.scope, comm_reader, &pipes[2]) < 0;
    spawned |= weft_spawn(c.scope, comm_watcher, &c) < 0;
    if (spawned) {
        weft_scope_cancel(c.scope);
        rc = -ENOMEM;
    }
    int jrc = weft_scope_join(c.scope);
    weft_scope_free(c.scope);
    if (rc == 0 && spawned == 0)
        rc = comm_result(&c, jrc);
    if (rc)
        return rc;
    if (p->err)
        return p->err;
    if (status)
        *status = p->status;
    return atomic_load(&c.over_cap) ? -EMSGSIZE : 0;
}
