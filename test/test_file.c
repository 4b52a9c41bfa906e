/* SPDX-License-Identifier: MIT */
/*
 * Files: weft_file_open, read, write, pread, pwrite, fsync, close. Their
 * results as the system calls', their errors, and the cancellation
 * contract: a deadline or a cancel before the call started drops it (no
 * effect), one while it runs waits for it and returns its result. A FIFO
 * stands for a slow disk: its open and its read wait for the other end,
 * which the test controls.
 */
#include "t.h"
#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[64];
static char path_a[128], path_fifo[128], path_none[128];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/weft-file-XXXXXX");
    ASSERT(mkdtemp(dir) != NULL);
    snprintf(path_a, sizeof path_a, "%s/a", dir);
    snprintf(path_fifo, sizeof path_fifo, "%s/fifo", dir);
    snprintf(path_none, sizeof path_none, "%s/none/x", dir);
}

static void remove_dir(void)
{
    unlink(path_a);
    unlink(path_fifo);
    ASSERT_EQ(rmdir(dir), 0);
}

static int pool_running(void)
{
    weft_blocking_info i;
    ASSERT_EQ(weft_blocking_stats_get(&i), 0);
    return i.running;
}

/* True if a task's call runs: on the pool, or in the worker's ring (the
 * dump shows a task parked "on file"). */
static bool call_runs(void)
{
    if (pool_running() == 1)
        return true;
    int fd = memfd_create("dump", MFD_CLOEXEC);
    ASSERT(fd >= 0);
    ASSERT_EQ(weft_dump(fd, 0), 0);
    char text[8192];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    ASSERT(n > 0);
    text[n] = 0;
    close(fd);
    return strstr(text, " on file ") != NULL;
}

/* ---- what the calls do ---- */

static int round_trip_main(void *arg)
{
    (void)arg;
    int fd;
    ASSERT_EQ(weft_file_open(&fd, path_a, O_CREAT | O_TRUNC | O_RDWR, 0600,
                             WEFT_NEVER),
              0);
    ASSERT(fd >= 0);
    ASSERT(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    ASSERT_EQ(weft_file_write(fd, "hello, ", 7, WEFT_NEVER), 7);
    ASSERT_EQ(weft_file_write(fd, "world", 5, WEFT_NEVER), 5);
    ASSERT_EQ(weft_file_pwrite(fd, "W", 1, 7, WEFT_NEVER), 1);
    ASSERT_EQ(weft_file_fsync(fd, WEFT_NEVER), 0);
    char buf[32] = {0};
    ASSERT_EQ(weft_file_pread(fd, buf, sizeof buf, 0, WEFT_NEVER), 12);
    ASSERT(memcmp(buf, "hello, World", 12) == 0);
    ASSERT_EQ(weft_file_pread(fd, buf, sizeof buf, 12, WEFT_NEVER), 0);
    /* The offset is after the two writes: read gives the end; pread left
     * it alone. */
    ASSERT_EQ(weft_file_read(fd, buf, sizeof buf, WEFT_NEVER), 0);
    ASSERT_EQ(lseek(fd, 7, SEEK_SET), 7);
    memset(buf, 0, sizeof buf);
    ASSERT_EQ(weft_file_read(fd, buf, 3, WEFT_NEVER), 3);
    ASSERT(memcmp(buf, "Wor", 3) == 0);
    ASSERT_EQ(weft_file_read(fd, buf, 0, WEFT_NEVER), 0);
    ASSERT_EQ(weft_file_close(fd), 0);
    /* O_APPEND appends, as write(2) does. */
    ASSERT_EQ(weft_file_open(&fd, path_a, O_WRONLY | O_APPEND, 0, WEFT_NEVER),
              0);
    ASSERT_EQ(weft_file_write(fd, "!", 1, WEFT_NEVER), 1);
    ASSERT_EQ(weft_file_close(fd), 0);
    struct stat st;
    ASSERT_EQ(stat(path_a, &st), 0);
    ASSERT_EQ(st.st_size, 13);
    ASSERT_EQ(st.st_mode & 0777, 0600);
    return 0;
}

TEST(read_write_and_offsets_are_the_system_calls)
{
    make_dir();
    ASSERT_EQ(t_run_mono(2, round_trip_main, NULL), 0);
    remove_dir();
}

static int errors_main(void *arg)
{
    (void)arg;
    int fd = 5;
    ASSERT_EQ(weft_file_open(&fd, path_none, O_RDONLY, 0, WEFT_NEVER), -ENOENT);
    ASSERT_EQ(fd, -1);
    ASSERT_EQ(weft_file_open(&fd, path_a, O_CREAT | O_EXCL | O_WRONLY, 0600,
                             WEFT_NEVER),
              0);
    int fd2;
    ASSERT_EQ(weft_file_open(&fd2, path_a, O_CREAT | O_EXCL | O_WRONLY, 0600,
                             WEFT_NEVER),
              -EEXIST);
    ASSERT_EQ(weft_file_open(NULL, path_a, O_RDONLY, 0, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_file_open(&fd2, NULL, O_RDONLY, 0, WEFT_NEVER), -EINVAL);
    char buf[8];
    ASSERT_EQ(weft_file_read(fd, buf, sizeof buf, WEFT_NEVER), -EBADF);
    ASSERT_EQ(weft_file_read(-1, buf, sizeof buf, WEFT_NEVER), -EBADF);
    ASSERT_EQ(weft_file_read(fd, NULL, 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_file_pread(fd, buf, 1, -1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_file_pwrite(fd, buf, 1, -1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_file_fsync(-3, WEFT_NEVER), -EBADF);
    ASSERT_EQ(weft_file_close(fd), 0);
    ASSERT_EQ(weft_file_close(fd), -EBADF);
    ASSERT_EQ(weft_file_close(-1), -EBADF);
    ASSERT_EQ(weft_file_write(fd, "x", 1, WEFT_NEVER), -EBADF);
    return 0;
}

TEST(errors_are_the_system_calls_and_bad_arguments_einval)
{
    make_dir();
    ASSERT_EQ(t_run_mono(1, errors_main, NULL), 0);
    int fd;
    ASSERT_EQ(weft_file_open(&fd, path_a, O_RDONLY, 0, WEFT_NEVER), -EPERM);
    ASSERT_EQ(weft_file_read(0, &fd, 1, WEFT_NEVER), -EPERM);
    remove_dir();
}

/* pread and pwrite on a descriptor that has no offset (a pipe, a socket)
 * fail with -ESPIPE, as pread(2) and pwrite(2) do, on any backend: the
 * ring, left alone, would read and write the stream. */
static int espipe_main(void *arg)
{
    (void)arg;
    int p[2];
    ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
    ASSERT_EQ(write(p[1], "xyz", 3), 3);
    char buf[8];
    ASSERT_EQ(weft_file_pread(p[0], buf, sizeof buf, 0, WEFT_NEVER), -ESPIPE);
    ASSERT_EQ(weft_file_pwrite(p[1], "abc", 3, 0, WEFT_NEVER), -ESPIPE);
    /* Nothing was consumed, nothing added. */
    ASSERT_EQ(read(p[0], buf, sizeof buf), 3);
    ASSERT(memcmp(buf, "xyz", 3) == 0);
    ASSERT_EQ(close(p[1]), 0);
    ASSERT_EQ(read(p[0], buf, sizeof buf), 0);
    ASSERT_EQ(close(p[0]), 0);
    return 0;
}

TEST(pread_and_pwrite_without_an_offset_say_espipe)
{
    ASSERT_EQ(t_run_mono(1, espipe_main, NULL), 0);
}

/* A FIFO's open for writing waits for a reader, as open(2) does (the
 * ring's first, non-blocking try of an open would say -ENXIO). */
struct fifo_writer {
    _Atomic int stage; /* 1: opening, 2: returned */
    int rc, fd;
};

static int fifo_writer(void *arg)
{
    struct fifo_writer *fw = arg;
    atomic_store(&fw->stage, 1);
    fw->rc = weft_file_open(&fw->fd, path_fifo, O_WRONLY, 0, WEFT_NEVER);
    if (fw->rc == 0)
        ASSERT_EQ(weft_file_write(fw->fd, "fifo", 4, WEFT_NEVER), 4);
    atomic_store(&fw->stage, 2);
    return 0;
}

static int fifo_open_main(void *arg)
{
    (void)arg;
    static struct fifo_writer fw;
    memset(&fw, 0, sizeof fw);
    fw.fd = -1;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, fifo_writer, &fw) >= 0);
    T_SETTLE(atomic_load(&fw.stage) == 2 ||
             (atomic_load(&fw.stage) == 1 && call_runs()));
    ASSERT_EQ(atomic_load(&fw.stage), 1); /* waits for a reader */
    int rfd = open(path_fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    ASSERT(rfd >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(fw.rc, 0);
    char buf[8];
    ASSERT_EQ(read(rfd, buf, sizeof buf), 4);
    ASSERT(memcmp(buf, "fifo", 4) == 0);
    ASSERT_EQ(weft_file_close(fw.fd), 0);
    ASSERT_EQ(close(rfd), 0);
    return 0;
}

TEST(a_fifo_opened_for_writing_waits_for_its_reader)
{
    make_dir();
    ASSERT_EQ(mkfifo(path_fifo, 0600), 0);
    for (int workers = 1; workers <= 2; workers++)
        ASSERT_EQ(t_run_mono(workers, fifo_open_main, NULL), 0);
    remove_dir();
}

/* ---- before the call starts: dropped, no effect ---- */

static int cancelled_main(void *arg)
{
    (void)arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    int fd;
    ASSERT_EQ(weft_file_open(&fd, path_a, O_CREAT | O_WRONLY, 0600, WEFT_NEVER),
              -ECANCELED);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(access(path_a, F_OK), -1); /* not created */
    /* A deadline already past: nothing written. */
    ASSERT_EQ(weft_file_open(&fd, path_a, O_CREAT | O_WRONLY, 0600, WEFT_NEVER),
              0);
    ASSERT_EQ(weft_file_write(fd, "x", 1, weft_now() - 1), -ETIMEDOUT);
    ASSERT_EQ(weft_file_fsync(fd, weft_now() - 1), -ETIMEDOUT);
    ASSERT_EQ(weft_file_close(fd), 0);
    struct stat st;
    ASSERT_EQ(stat(path_a, &st), 0);
    ASSERT_EQ(st.st_size, 0);
    return 0;
}

TEST(a_call_cancelled_before_it_starts_has_no_effect)
{
    make_dir();
    ASSERT_EQ(t_run_mono(1, cancelled_main, NULL), 0);
    remove_dir();
}

/* ---- while the call runs: its result, never lost ---- */

struct fifo_reader {
    _Atomic(weft_scope *) scope; /* the reader's own, which the test cancels */
    _Atomic int stage;           /* 1: opening, 2: reading, 3: returned */
    int open_rc, fd;
    ptrdiff_t got;
    char buf[16];
    int cancelled_after; /* weft_cancelled() once the read returned */
};

static int fifo_reader(void *arg)
{
    struct fifo_reader *r = arg;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    atomic_store(&r->stage, 1);
    atomic_store(&r->scope, s);
    r->open_rc = weft_file_open(&r->fd, path_fifo, O_RDONLY, 0, WEFT_NEVER);
    if (r->open_rc == 0) {
        atomic_store(&r->stage, 2);
        r->got = weft_file_read(r->fd, r->buf, sizeof r->buf, WEFT_NEVER);
        r->cancelled_after = weft_cancelled();
    }
    atomic_store(&r->stage, 3);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    return 0;
}

/* The FIFO's writing end, once the reader's open(2) waits in the kernel
 * (ENXIO before: no reader yet); -1 until then. */
static int open_writer(void)
{
    int fd = open(path_fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    ASSERT(fd >= 0 || errno == ENXIO);
    return fd;
}

static bool on_ring(void)
{
    const char *name = weft_poller_name();
    if (!name || strcmp(name, "io_uring") != 0)
        return false;
    /* A ring whose kernel lacks a file operation leaves the files to the
     * pool: an fsync that the pool did not run went through the ring. */
    weft_blocking_info before, after;
    ASSERT_EQ(weft_blocking_stats_get(&before), 0);
    int fd = memfd_create("ring", MFD_CLOEXEC);
    ASSERT(fd >= 0);
    ASSERT_EQ(weft_file_fsync(fd, WEFT_NEVER), 0);
    ASSERT_EQ(close(fd), 0);
    ASSERT_EQ(weft_blocking_stats_get(&after), 0);
    return after.calls == before.calls;
}

/* A cancel while the call runs. On the pool the call runs to its end and
 * returns its result. In the ring the kernel stops a read that has not
 * read anything (a FIFO's: it polls), which returns -ECANCELED with the
 * bytes left for the next read, and an open waiting for the FIFO's
 * writer, which returns -ECANCELED with nothing opened. */
static int cancel_running_main(void *arg)
{
    int cancel_at = *(int *)arg; /* 1: during the open, 2: the read */
    bool ring = on_ring();
    static struct fifo_reader r;
    memset(&r, 0, sizeof r);
    r.fd = -1;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, fifo_reader, &r) >= 0);
    int wfd = -1;
    if (cancel_at == 2) {
        /* Let the open finish: a writer opens the other end. */
        T_SETTLE(atomic_load(&r.stage) >= 1 && (wfd = open_writer()) >= 0);
        T_SETTLE(atomic_load(&r.stage) == 2 && call_runs());
    } else {
        T_SETTLE(atomic_load(&r.stage) == 1 && call_runs());
    }
    /* The call runs now. */
    ASSERT_EQ(weft_scope_cancel(atomic_load(&r.scope)), 0);
    if (ring && cancel_at == 1) {
        /* The open, in the kernel's workers, is interrupted: nothing
         * opened, and the code is weft's, not the kernel's restart. */
        T_SETTLE(atomic_load(&r.stage) == 3);
        ASSERT_EQ(r.open_rc, -ECANCELED);
        ASSERT_EQ(r.fd, -1);
        ASSERT_EQ(weft_scope_join(s), 0);
        ASSERT_EQ(weft_scope_free(s), 0);
        return 0;
    }
    if (ring) {
        T_SETTLE(atomic_load(&r.stage) == 3);
        ASSERT_EQ(r.got, -ECANCELED);
        ASSERT_EQ(write(wfd, "data!", 5), 5);
        ASSERT_EQ(weft_scope_join(s), 0);
        ASSERT_EQ(weft_scope_free(s), 0);
        ASSERT_EQ(read(r.fd, r.buf, sizeof r.buf), 5); /* nothing lost */
        ASSERT(memcmp(r.buf, "data!", 5) == 0);
        ASSERT_EQ(weft_file_close(r.fd), 0);
        ASSERT_EQ(close(wfd), 0);
        return 0;
    }
    /* The reader waits for its call, which cannot end before it is fed. */
    for (int i = 0; i < 100; i++)
        weft_yield();
    ASSERT(call_runs());
    ASSERT_EQ(atomic_load(&r.stage), cancel_at);
    if (cancel_at == 1) {
        T_SETTLE((wfd = open_writer()) >= 0);
    } else {
        ASSERT_EQ(write(wfd, "data!", 5), 5);
    }
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(atomic_load(&r.stage), 3);
    ASSERT_EQ(r.open_rc, 0);
    ASSERT(r.fd >= 0);
    if (cancel_at == 1) {
        /* The open ran to its end: its descriptor is the reader's, and
         * its read, in a cancelled scope, never started. */
        ASSERT_EQ(r.got, -ECANCELED);
    } else {
        ASSERT_EQ(r.got, 5); /* the bytes read are not lost */
        ASSERT(memcmp(r.buf, "data!", 5) == 0);
        ASSERT_EQ(r.cancelled_after, 1);
    }
    ASSERT_EQ(weft_file_close(r.fd), 0);
    ASSERT_EQ(close(wfd), 0);
    return 0;
}

TEST(a_cancel_while_the_call_runs_returns_its_result)
{
    make_dir();
    ASSERT_EQ(mkfifo(path_fifo, 0600), 0);
    for (int at = 1; at <= 2; at++)
        for (int workers = 1; workers <= 2; workers++)
            ASSERT_EQ(t_run_mono(workers, cancel_running_main, &at), 0);
    remove_dir();
}

/* On the virtual clock: the read's deadline passes while it runs (the
 * writer comes later), and the read returns the bytes at the writer's
 * instant. */
static int late_writer(void *arg)
{
    int *wfd = arg;
    ASSERT_EQ(weft_sleep_for(20 * WEFT_MSEC), 0);
    ASSERT_EQ(write(*wfd, "late", 4), 4);
    return 0;
}

static int deadline_running_main(void *arg)
{
    (void)arg;
    int rfd = open(path_fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    ASSERT(rfd >= 0);
    int wfd = open(path_fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    ASSERT(wfd >= 0);
    ASSERT_EQ(fcntl(rfd, F_SETFL, 0), 0); /* a blocking read, as a disk's */
    bool ring = on_ring(); /* before t0: its fsync is I/O the clock waits for */
    weft_time t0 = weft_now();
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, late_writer, &wfd) >= 0);
    char buf[8];
    ptrdiff_t n = weft_file_read(rfd, buf, sizeof buf, t0 + 10 * WEFT_MSEC);
    if (ring) {
        /* Stopped by the kernel at the deadline, nothing read. */
        ASSERT_EQ(n, -ETIMEDOUT);
        ASSERT_EQ(weft_now(), t0 + 10 * WEFT_MSEC);
        n = weft_file_read(rfd, buf, sizeof buf, WEFT_NEVER);
    }
    ASSERT_EQ(n, 4);
    ASSERT(memcmp(buf, "late", 4) == 0);
    ASSERT_EQ(weft_now(), t0 + 20 * WEFT_MSEC);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(close(rfd), 0);
    ASSERT_EQ(close(wfd), 0);
    return 0;
}

TEST(a_deadline_while_the_call_runs_returns_its_result)
{
    make_dir();
    ASSERT_EQ(mkfifo(path_fifo, 0600), 0);
    /* The ring's cancel completes in microseconds, but a loaded machine
     * can keep the worker's thread off the CPU for longer than the
     * default real-time grace, and the clock would then move on to the
     * writer's instant before the cancel came back: a grace of 300 ms. */
    weft_config cfg = {.workers = 1,
                       .clock = WEFT_CLOCK_VIRTUAL,
                       .autojump_ns = 300 * WEFT_MSEC};
    ASSERT_EQ(weft_run(&cfg, deadline_running_main, NULL), 0);
    remove_dir();
}

/* A cancel from another thread that races the call's completion, at
 * every point: before the call is submitted, while it waits, as its
 * result comes in (the completion read before the woken task runs). The
 * bytes are never lost: the read returns them, or -ECANCELED and they
 * are still in the pipe. */
struct race {
    int p[2];
    _Atomic(weft_scope *) scope;
    _Atomic int stage; /* 1: reading, 2: the thread is done */
    unsigned spin;     /* how long the thread waits before its cancel */
    ptrdiff_t got;
    char buf[8];
};

static int race_reader(void *arg)
{
    struct race *r = arg;
    atomic_store(&r->stage, 1);
    r->got = weft_file_read(r->p[0], r->buf, sizeof r->buf, WEFT_NEVER);
    return 0;
}

static void *race_thread(void *arg)
{
    struct race *r = arg;
    while (atomic_load(&r->stage) < 1)
        sched_yield();
    for (volatile unsigned i = 0; i < r->spin; i++) {
    }
    ASSERT_EQ(weft_scope_cancel(atomic_load(&r->scope)), 0);
    ASSERT_EQ(write(r->p[1], "data!", 5), 5);
    atomic_store(&r->stage, 2);
    return NULL;
}

static int race_main(void *arg)
{
    int rounds = *(int *)arg;
    unsigned seed = (unsigned)T_SEED(0x5eed);
    for (int i = 0; i < rounds; i++) {
        static struct race r;
        memset(&r, 0, sizeof r);
        ASSERT_EQ(pipe2(r.p, O_CLOEXEC), 0);
        r.spin = (unsigned)rand_r(&seed) % 20000;
        weft_scope *s;
        ASSERT_EQ(weft_scope_open(&s, NULL), 0);
        atomic_store(&r.scope, s);
        ASSERT(weft_spawn(s, race_reader, &r) >= 0);
        pthread_t th;
        ASSERT_EQ(pthread_create(&th, NULL, race_thread, &r), 0);
        int rc = weft_scope_join(s); /* the worker sleeps meanwhile */
        ASSERT(rc == 0 || rc == -ECANCELED);
        ASSERT_EQ(weft_scope_free(s), 0);
        T_SETTLE(atomic_load(&r.stage) == 2);
        ASSERT_EQ(pthread_join(th, NULL), 0);
        ASSERT_EQ(fcntl(r.p[0], F_SETFL, O_NONBLOCK), 0);
        char rest[8];
        ptrdiff_t left = read(r.p[0], rest, sizeof rest);
        if (r.got == 5) {
            ASSERT(memcmp(r.buf, "data!", 5) == 0);
            ASSERT_EQ(left, -1);
        } else {
            ASSERT_EQ(r.got, -ECANCELED);
            ASSERT_EQ(left, 5);
            ASSERT(memcmp(rest, "data!", 5) == 0);
        }
        ASSERT_EQ(close(r.p[0]), 0);
        ASSERT_EQ(close(r.p[1]), 0);
    }
    return 0;
}

TEST(a_cancel_racing_the_completion_loses_nothing)
{
    int rounds = T_SCALE(300);
    if (rounds < 30)
        rounds = 30;
    ASSERT_EQ(t_run_mono(1, race_main, &rounds), 0);
}

/* ---- many tasks, one file ---- */

#define BLOCK 4096

static int block_writer(void *arg)
{
    int fd = (int)((intptr_t)arg >> 16), i = (int)((intptr_t)arg & 0xffff);
    char out[BLOCK], in[BLOCK];
    memset(out, 'a' + i % 26, sizeof out);
    memcpy(out, &i, sizeof i);
    int64_t off = (int64_t)i * BLOCK;
    ASSERT_EQ(weft_file_pwrite(fd, out, BLOCK, off, WEFT_NEVER), BLOCK);
    ASSERT_EQ(weft_file_pread(fd, in, BLOCK, off, WEFT_NEVER), BLOCK);
    ASSERT(memcmp(in, out, BLOCK) == 0);
    return 0;
}

static int many_main(void *arg)
{
    int n = *(int *)arg;
    int fd;
    ASSERT_EQ(weft_file_open(&fd, path_a, O_CREAT | O_TRUNC | O_RDWR, 0600,
                             WEFT_NEVER),
              0);
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    for (int i = 0; i < n; i++)
        ASSERT(weft_spawn(s, block_writer,
                          (void *)((intptr_t)fd << 16 | (intptr_t)i)) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(weft_file_fsync(fd, WEFT_NEVER), 0);
    struct stat st;
    ASSERT_EQ(fstat(fd, &st), 0);
    ASSERT_EQ(st.st_size, (off_t)n * BLOCK);
    for (int i = 0; i < n; i++) {
        int got;
        ASSERT_EQ(weft_file_pread(fd, &got, sizeof got, (int64_t)i * BLOCK,
                                  WEFT_NEVER),
                  (ptrdiff_t)sizeof got);
        ASSERT_EQ(got, i);
    }
    ASSERT_EQ(weft_file_close(fd), 0);
    return 0;
}

TEST(many_tasks_write_and_read_their_own_blocks)
{
    make_dir();
    int n = T_SCALE(512);
    if (n < 16)
        n = 16;
    ASSERT_EQ(t_run_mono(2, many_main, &n), 0);
    remove_dir();
}

/* ---- where the calls run ---- */

struct where {
    int ring; /* the worker's poller is io_uring, with the file operations */
    uint64_t pool_calls;
};

static int where_main(void *arg)
{
    struct where *w = arg;
    w->ring = on_ring(); /* and its kernel has the file operations */
    weft_blocking_info before;
    ASSERT_EQ(weft_blocking_stats_get(&before), 0);
    int fd;
    ASSERT_EQ(weft_file_open(&fd, path_a, O_CREAT | O_RDWR, 0600, WEFT_NEVER),
              0);
    char buf[4096] = {1};
    for (int i = 0; i < 16; i++)
        ASSERT_EQ(weft_file_pwrite(fd, buf, sizeof buf, i * 4096, WEFT_NEVER),
                  4096);
    for (int i = 0; i < 16; i++)
        ASSERT_EQ(weft_file_read(fd, buf, sizeof buf, WEFT_NEVER), 4096);
    ASSERT_EQ(weft_file_read(fd, buf, sizeof buf, WEFT_NEVER), 0);
    ASSERT_EQ(weft_file_fsync(fd, WEFT_NEVER), 0);
    ASSERT_EQ(weft_file_close(fd), 0);
    weft_blocking_info i;
    ASSERT_EQ(weft_blocking_stats_get(&i), 0);
    w->pool_calls = i.calls - before.calls;
    return 0;
}

/* With io_uring the calls go through the worker's ring, no thread hop;
 * with epoll through the pool. */
TEST(files_run_in_the_ring_where_the_worker_has_one)
{
    make_dir();
    struct where w;
    bool rang = false;
    /* (WEFT_POLLER, in the environment, overrides the config's.) */
    for (int k = 0; k < 2; k++) {
        weft_config cfg = {.workers = 1,
                           .poller =
                               k ? WEFT_POLLER_IO_URING : WEFT_POLLER_EPOLL};
        ASSERT_EQ(weft_run(&cfg, where_main, &w), 0);
        /* open, 16 + 17 reads and writes, fsync */
        ASSERT_EQ(w.pool_calls, w.ring ? 0u : 35u);
        rang |= w.ring;
    }
    remove_dir();
    if (!rang)
        T_NEED("io_uring", "no io_uring here: the ring's half not checked");
}
