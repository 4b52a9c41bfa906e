/* SPDX-License-Identifier: MIT */
/*
 * The reactor: weft_fd_wait and weft_close on pipes and socket pairs.
 * Readiness wakes exactly the tasks waiting for it, an edge that comes
 * before the wait is not lost, deadlines and cancels leave nothing queued,
 * weft_close wakes waiters with -EBADF, a descriptor closed behind weft's
 * back (close(2)) and its number reused does not hang the next wait, nor
 * does weft_fd_forget, and a worker asleep in epoll is woken by the kernel
 * and by other threads. Every test checks that it leaves no descriptor
 * open.
 */
#include "t.h"
#include "weft.h"

#include "io/cases.h" /* select's descriptor case */
#include "wait/many.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

static void nb_pair(int sv[2])
{
    ASSERT_EQ(
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv),
        0);
}

static void close_pair(int sv[2])
{
    ASSERT_EQ(weft_close(sv[0]), 0);
    ASSERT_EQ(weft_close(sv[1]), 0);
}

/* Reads one byte, waiting for it; returns it or a negative code. */
static int read_byte(int fd, weft_time deadline)
{
    for (;;) {
        unsigned char c;
        ssize_t n = read(fd, &c, 1);
        if (n == 1)
            return c;
        if (n == 0)
            return -EPIPE;
        if (errno != EAGAIN)
            return -errno;
        int rc = weft_fd_wait(fd, WEFT_IO_READ, deadline);
        if (rc)
            return rc;
    }
}

static void write_byte(int fd, unsigned char c)
{
    ASSERT_EQ(write(fd, &c, 1), 1);
}

/* ---- readiness wakes the reader, at the virtual instant it happens ---- */

struct rw {
    int fd;
    int got;
    weft_time at;
};

static int reader(void *arg)
{
    struct rw *r = arg;
    r->got = read_byte(r->fd, WEFT_NEVER);
    r->at = weft_now();
    return 0;
}

static int wake_root(void *arg)
{
    (void)arg;
    int sv[2];
    nb_pair(sv);
    struct rw r = {.fd = sv[0], .got = -1};
    weft_scope *s = scope_open();
    spawn(reader, &r);
    ASSERT_EQ(weft_sleep_for(3 * WEFT_SEC), 0); /* it waits meanwhile */
    ASSERT_EQ(r.got, -1);
    write_byte(sv[1], 42);
    scope_end(s);
    ASSERT_EQ(r.got, 42);
    ASSERT_EQ(r.at, 3 * WEFT_SEC);

    /* An edge before the wait: the byte is there before the reader
     * starts, and a second one arrives while it waits for nothing. */
    write_byte(sv[1], 7);
    r.got = -1;
    s = scope_open();
    spawn(reader, &r);
    scope_end(s);
    ASSERT_EQ(r.got, 7);
    close_pair(sv);
    return 0;
}

TEST(readiness_wakes_reader_at_the_instant)
{
    int before = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(1, wake_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, wake_root, NULL), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

/* ---- deadline and cancel leave nothing queued -------------------------- */

static int deadline_root(void *arg)
{
    (void)arg;
    int sv[2];
    nb_pair(sv);
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_fd_wait(sv[0], WEFT_IO_READ, t0 + WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + WEFT_SEC);
    /* Both directions: writable at once. */
    ASSERT_EQ(weft_fd_wait(sv[0], WEFT_IO_READ | WEFT_IO_WRITE, WEFT_NEVER), 0);
    /* A cancelled waiter, then a byte: a later reader gets it. */
    struct rw r = {.fd = sv[0], .got = -1};
    weft_scope *s = scope_open();
    spawn(reader, &r);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(r.got, -ECANCELED);
    write_byte(sv[1], 9);
    ASSERT_EQ(read_byte(sv[0], weft_now() + WEFT_SEC), 9);
    /* In a cancelled scope the wait is a checkpoint even if ready. */
    write_byte(sv[1], 10);
    s = scope_open();
    ASSERT_EQ(weft_scope_cancel(s), 0);
    ASSERT_EQ(weft_fd_wait(sv[0], WEFT_IO_READ, WEFT_NEVER), -ECANCELED);
    ASSERT_EQ(weft_scope_join(s), -ECANCELED);
    ASSERT_EQ(weft_scope_free(s), 0);
    ASSERT_EQ(read_byte(sv[0], WEFT_NEVER), 10);
    close_pair(sv);
    return 0;
}

TEST(deadline_and_cancel_leave_nothing_queued)
{
    int before = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(1, deadline_root, NULL), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

/* ---- weft_close wakes waiters with -EBADF ------------------------------ */

static int close_root(void *arg)
{
    (void)arg;
    int sv[2];
    nb_pair(sv);
    struct rw r[3];
    weft_scope *s = scope_open();
    for (int i = 0; i < 3; i++) {
        r[i] = (struct rw){.fd = sv[0], .got = -1};
        spawn(reader, &r[i]);
    }
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_close(sv[0]), 0);
    scope_end(s);
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(r[i].got, -EBADF);
        ASSERT_EQ(r[i].at, WEFT_SEC);
    }
    /* The number is free again: a new descriptor that gets it works. */
    int sv2[2];
    nb_pair(sv2);
    struct rw r2 = {.fd = sv2[0], .got = -1};
    s = scope_open();
    spawn(reader, &r2);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    write_byte(sv2[1], 5);
    scope_end(s);
    ASSERT_EQ(r2.got, 5);
    ASSERT_EQ(weft_close(sv[1]), 0);
    close_pair(sv2);
    ASSERT_EQ(weft_close(-1), -EBADF);
    ASSERT_EQ(weft_fd_wait(-1, WEFT_IO_READ, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_fd_wait(0, 0, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_fd_wait(0, 4, WEFT_NEVER), -EINVAL);
    return 0;
}

TEST(close_wakes_waiters_with_ebadf)
{
    int before = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(1, close_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, close_root, NULL), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

/* A weft_close on one worker racing a wait that is starting on another:
 * whichever comes first, the wait ends with -EBADF at once (before the
 * generation was checked under the record's lock, a close that fell
 * between the wait's lookup and its queueing woke nobody, and the wait
 * slept until its deadline). The closer yields a varying number of times
 * so the close lands before, during and after the wait's start. */
struct close_race {
    int fd;
    int yields;
    int got;
};

static int race_waiter(void *arg)
{
    struct close_race *c = arg;
    c->got = weft_fd_wait(c->fd, WEFT_IO_READ, weft_now() + 10 * WEFT_SEC);
    return 0;
}

static int race_closer(void *arg)
{
    struct close_race *c = arg;
    for (int i = 0; i < c->yields; i++)
        weft_yield();
    ASSERT_EQ(weft_close(c->fd), 0);
    return 0;
}

static int warm_reactor(void *arg)
{
    ASSERT_EQ(weft_fd_wait(*(int *)arg, WEFT_IO_WRITE, WEFT_NEVER), 0);
    return 0;
}

static int close_race_root(void *arg)
{
    (void)arg;
    /* Worker 0's epoll first, so that it cannot take the number of a
     * descriptor the closer has just closed. */
    int warm[2];
    nb_pair(warm);
    weft_scope *w = scope_open();
    spawn_on(0, warm_reactor, &warm[0]);
    scope_end(w);
    close_pair(warm);
    long rounds = T_SCALE(2000);
    for (long i = 0; i < rounds; i++) {
        int sv[2];
        nb_pair(sv);
        struct close_race c = {.fd = sv[0], .yields = (int)(i % 7), .got = 1};
        weft_scope *s = scope_open();
        spawn_on(0, race_waiter, &c);
        spawn_on(1, race_closer, &c);
        scope_end(s);
        ASSERT_EQ(c.got, -EBADF);
        ASSERT_EQ(weft_close(sv[1]), 0);
    }
    return 0;
}

TEST(close_racing_a_starting_wait)
{
    int before = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_mono(2, close_race_root, NULL), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

/* ---- descriptors closed by someone else ------------------------------- */

/* Foreign code (libcurl, libpq, c-ares) closes descriptors weft has waited
 * on with close(2), and the next socket gets the number. The kernel drops
 * the old file's epoll registration; weft's record of the number must not
 * go on believing it is registered, or the next wait never wakes (it did:
 * a wait whose data came at 2 s timed out at 10 s). */

/* Gives the descriptor *fd's number to a new socket pair's end (closing
 * whatever the number held, as foreign code's close and the next socket()
 * would), and makes *peer its other end. */
static void reuse_number(int fd, int *peer)
{
    int nv[2];
    nb_pair(nv);
    if (nv[1] == fd) { /* the pair is symmetric */
        nv[1] = nv[0];
        nv[0] = fd;
    }
    if (nv[0] != fd) {
        ASSERT_EQ(dup2(nv[0], fd), fd);
        ASSERT_EQ(close(nv[0]), 0);
    }
    *peer = nv[1];
}

/* reader, but giving up after 10 s: a wait that never wakes fails the
 * test instead of hanging it. */
static int reader_10s(void *arg)
{
    struct rw *r = arg;
    r->got = read_byte(r->fd, weft_now() + 10 * WEFT_SEC);
    r->at = weft_now();
    return 0;
}

/* Registers fd in worker `worker`'s epoll: a wait that returns at once
 * (a socket is writable). */
static void register_on(int worker, int *fd)
{
    weft_scope *s = scope_open();
    spawn_on(worker, warm_reactor, fd);
    scope_end(s);
}

/* arg: the second reader (on worker 0), a weft_fn: its wait is
 * weft_fd_wait's or a select's. */
static int reuse_root(void *arg)
{
    weft_fn second = *(const weft_fn *)arg;
    int sv[2], peer;
    nb_pair(sv);
    int fd = sv[0];
    register_on(0, &fd);
    ASSERT_EQ(close(sv[0]), 0); /* plain close: weft is not told */
    ASSERT_EQ(weft_close(sv[1]), 0);
    reuse_number(fd, &peer);
    /* A reader on worker 1 comes first (on a worker that never saw the
     * old file it registers the new one), then one on worker 0, which has
     * the old file's registration on its books; a byte for each at 2 s. */
    struct rw r[2] = {{.fd = fd, .got = -1}, {.fd = fd, .got = -1}};
    weft_scope *s = scope_open();
    spawn_on(1, reader_10s, &r[1]);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    spawn_on(0, second, &r[0]);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(write(peer, "ab", 2), 2);
    scope_end(s);
    for (int i = 0; i < 2; i++) {
        ASSERT(r[i].got == 'a' || r[i].got == 'b');
        ASSERT_EQ(r[i].at, 2 * WEFT_SEC);
    }
    ASSERT(r[0].got != r[1].got);
    ASSERT_EQ(weft_close(fd), 0);
    ASSERT_EQ(weft_close(peer), 0);
    return 0;
}

TEST(foreign_close_then_reuse_wakes_the_next_wait)
{
    int before = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(1, reuse_root, &(weft_fn){reader_10s}), 0);
    ASSERT_EQ(t_run_virtual(2, reuse_root, &(weft_fn){reader_10s}), 0);
    ASSERT_EQ(t_run_virtual(3, reuse_root, &(weft_fn){reader_10s}), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

/* The same on several workers at once, many times, with real time: the
 * readers on every worker find the reused number together (one resets
 * the record while others register the new file or are parked on it),
 * and the byte each is sent must still wake it. */
struct reuse_round {
    int fd;
    int yields;
    atomic_int got;
};

static int reuse_reader(void *arg)
{
    struct reuse_round *c = arg;
    int b = read_byte(c->fd, weft_now() + 10 * WEFT_SEC);
    ASSERT(b >= 0);
    atomic_fetch_add(&c->got, 1);
    return 0;
}

static int reuse_stress_root(void *arg)
{
    int nw = *(int *)arg;
    long rounds = T_SCALE(300);
    for (long i = 0; i < rounds; i++) {
        int sv[2], peer;
        nb_pair(sv);
        struct reuse_round c = {.fd = sv[0], .yields = (int)(i % 5)};
        atomic_init(&c.got, 0);
        for (int pass = 0; pass < 2; pass++) {
            weft_scope *s = scope_open();
            for (int k = 0; k < nw; k++)
                spawn_on(k, reuse_reader, &c);
            for (int y = 0; y < c.yields; y++)
                weft_yield();
            for (int k = 0; k < nw; k++)
                write_byte(pass ? peer : sv[1], (unsigned char)k);
            scope_end(s);
            ASSERT_EQ(atomic_load(&c.got), nw * (pass + 1));
            if (pass == 0) { /* behind weft's back, then reused */
                ASSERT_EQ(close(sv[0]), 0);
                reuse_number(sv[0], &peer);
            }
        }
        ASSERT_EQ(weft_close(sv[0]), 0);
        ASSERT_EQ(weft_close(sv[1]), 0);
        ASSERT_EQ(weft_close(peer), 0);
    }
    return 0;
}

TEST(foreign_reuse_across_workers_at_once)
{
    int before = t_proc_count("/proc/self/fd");
    int workers[] = {2, 4};
    for (int k = 0; k < 2; k++)
        ASSERT_EQ(t_run_mono(workers[k], reuse_stress_root, &workers[k]), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

/* One wait, its result and when it returned. */
struct once {
    int fd;
    int rc;
    weft_time at;
};

static int wait_once(void *arg)
{
    struct once *o = arg;
    o->rc = weft_fd_wait(o->fd, WEFT_IO_READ, weft_now() + 10 * WEFT_SEC);
    o->at = weft_now();
    return 0;
}

/* The old file lives on under another number (a dup), so its registration
 * under the reused number stays in the epoll set: its events must not
 * wake a wait on the new file. */
static int dup_root(void *arg)
{
    (void)arg;
    int sv[2], peer;
    nb_pair(sv);
    int fd = sv[0];
    register_on(0, &fd);
    int old = dup(fd); /* the old file, under another number */
    ASSERT(old >= 0);
    reuse_number(fd, &peer);
    struct once o = {.fd = fd, .rc = 1};
    weft_scope *s = scope_open();
    spawn_on(0, wait_once, &o);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    write_byte(sv[1], 1); /* the old file becomes readable */
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    write_byte(peer, 2); /* the new one */
    scope_end(s);
    ASSERT_EQ(o.rc, 0);
    ASSERT_EQ(o.at, 2 * WEFT_SEC);
    ASSERT_EQ(read_byte(fd, WEFT_NEVER), 2);
    ASSERT_EQ(read_byte(old, WEFT_NEVER), 1);
    ASSERT_EQ(weft_close(old), 0);
    ASSERT_EQ(weft_close(sv[1]), 0);
    ASSERT_EQ(weft_close(fd), 0);
    ASSERT_EQ(weft_close(peer), 0);
    return 0;
}

TEST(foreign_dup_old_file_does_not_wake_the_new)
{
    int before = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(1, dup_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, dup_root, NULL), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

/* A socket weft makes may get the number of a foreign descriptor closed
 * behind weft's back: weft's own sockets skip the check that foreign ones
 * make when they park, so making one must forget the old file. */
static int udp_reader(void *arg)
{
    struct rw *r = arg;
    unsigned char c;
    ptrdiff_t n = weft_recvfrom(r->fd, &c, 1, NULL, weft_now() + 10 * WEFT_SEC);
    r->got = n == 1 ? c : (int)n;
    r->at = weft_now();
    return 0;
}

static int own_root(void *arg)
{
    (void)arg;
    int sv[2];
    nb_pair(sv);
    int fd = sv[0];
    register_on(0, &fd);
    ASSERT_EQ(close(sv[0]), 0); /* behind weft's back */
    ASSERT_EQ(weft_close(sv[1]), 0);
    /* The lowest free number goes to the next socket: collect sockets
     * until one has fd's. */
    int u = -1, extra[16], nextra = 0;
    while (nextra < 16 && (u = weft_udp_bind("127.0.0.1", 0, 0)) != fd) {
        ASSERT(u >= 0);
        extra[nextra++] = u;
    }
    ASSERT_EQ(u, fd);
    for (int i = 0; i < nextra; i++)
        ASSERT_EQ(weft_close(extra[i]), 0);
    int out = weft_udp_bind("127.0.0.1", 0, 0);
    ASSERT(out >= 0);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)weft_local_port(u)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct rw r = {.fd = u, .got = -1};
    weft_scope *s = scope_open();
    spawn_on(0, udp_reader, &r);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(
        weft_sendto(out, "x", 1, (struct sockaddr *)&to, sizeof to, WEFT_NEVER),
        1);
    scope_end(s);
    ASSERT_EQ(r.got, 'x');
    ASSERT_EQ(r.at, WEFT_SEC);
    ASSERT_EQ(weft_close(u), 0);
    ASSERT_EQ(weft_close(out), 0);
    return 0;
}

TEST(own_socket_on_a_foreign_number_wakes)
{
    int before = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(1, own_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, own_root, NULL), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

/* weft_fd_forget: wakes the waiters with -EBADF, leaves the descriptor
 * open and usable, and after it a plain close and a reused number are
 * safe, for weft's own sockets too (which otherwise skip the check). */
static int forget_root(void *arg)
{
    (void)arg;
    int sv[2];
    nb_pair(sv);
    struct rw r[3];
    weft_scope *s = scope_open();
    for (int i = 0; i < 3; i++) {
        r[i] = (struct rw){.fd = sv[0], .got = -1};
        spawn_on(i, reader_10s, &r[i]);
    }
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_fd_forget(sv[0]), 0);
    scope_end(s);
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(r[i].got, -EBADF);
        ASSERT_EQ(r[i].at, WEFT_SEC);
    }
    ASSERT(fcntl(sv[0], F_GETFD) >= 0); /* not closed */
    r[0] = (struct rw){.fd = sv[0], .got = -1};
    s = scope_open();
    spawn_on(1, reader_10s, &r[0]);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    write_byte(sv[1], 3);
    scope_end(s);
    ASSERT_EQ(r[0].got, 3);
    ASSERT_EQ(r[0].at, 2 * WEFT_SEC);
    ASSERT_EQ(weft_close(sv[0]), 0);
    ASSERT_EQ(weft_close(sv[1]), 0);

    /* One of weft's own sockets, handed to code that closes it itself. */
    int u = weft_udp_bind("127.0.0.1", 0, 0), peer;
    ASSERT(u >= 0);
    register_on(0, &u);
    ASSERT_EQ(weft_fd_forget(u), 0);
    ASSERT_EQ(close(u), 0);
    reuse_number(u, &peer);
    r[0] = (struct rw){.fd = u, .got = -1};
    s = scope_open();
    spawn_on(0, reader_10s, &r[0]);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    write_byte(peer, 4);
    scope_end(s);
    ASSERT_EQ(r[0].got, 4);
    ASSERT_EQ(r[0].at, 3 * WEFT_SEC);
    ASSERT_EQ(weft_close(u), 0);
    ASSERT_EQ(weft_close(peer), 0);

    /* Numbers weft never saw: nothing to forget. */
    ASSERT_EQ(weft_fd_forget(-1), -EBADF);
    ASSERT_EQ(weft_fd_forget(1 << 20), 0);
    ASSERT_EQ(weft_fd_forget(1000), 0);
    return 0;
}

TEST(fd_forget_wakes_waiters_and_keeps_the_descriptor)
{
    int before = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(1, forget_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(3, forget_root, NULL), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
    ASSERT_EQ(weft_fd_forget(0), 0); /* outside a runtime too */
}

/* ---- a sleeping worker is woken by I/O from a plain thread ------------- */

struct ping {
    int sv[2];
    long rounds;
};

static void *ping_thread(void *arg)
{
    struct ping *p = arg;
    for (long i = 0; i < p->rounds; i++) {
        unsigned char c = (unsigned char)i;
        /* Blocking-style on a non-blocking socket: spin on EAGAIN is fine
         * for the test's own thread (the buffer never fills). */
        while (write(p->sv[1], &c, 1) != 1)
            sched_yield();
        unsigned char back;
        for (;;) {
            ssize_t n = read(p->sv[1], &back, 1);
            if (n == 1)
                break;
            ASSERT(n < 0 && errno == EAGAIN);
            struct timespec ts = {0, 10000};
            nanosleep(&ts, NULL);
        }
        ASSERT_EQ(back, (unsigned char)(c + 1));
    }
    return NULL;
}

static int echo_plus_one(void *arg)
{
    struct ping *p = arg;
    for (long i = 0; i < p->rounds; i++) {
        int c = read_byte(p->sv[0], WEFT_NEVER);
        ASSERT(c >= 0);
        unsigned char out = (unsigned char)(c + 1);
        ASSERT_EQ(write(p->sv[0], &out, 1), 1);
    }
    return 0;
}

static int thread_root(void *arg)
{
    struct ping *p = arg;
    nb_pair(p->sv);
    pthread_t th;
    weft_scope *s = scope_open();
    spawn(echo_plus_one, p);
    ASSERT_EQ(pthread_create(&th, NULL, ping_thread, p), 0);
    scope_end(s);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    close_pair(p->sv);
    return 0;
}

TEST(sleeping_worker_woken_by_io_from_a_thread)
{
    int before = t_proc_count("/proc/self/fd");
    static struct ping p;
    int workers[] = {1, 2};
    for (int k = 0; k < 2; k++) {
        p.rounds = T_SCALE(2000);
        ASSERT_EQ(t_run_mono(workers[k], thread_root, &p), 0);
    }
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

/* ---- many descriptors, many waiters, across workers -------------------- */

#define NPAIRS 64

struct many {
    int sv[NPAIRS][2];
    atomic_long sum;
    long rounds;
};

struct mtask {
    struct many *m;
    int i;
};

static int many_echo(void *arg)
{
    struct mtask *a = arg;
    int fd = a->m->sv[a->i][0];
    for (long r = 0; r < a->m->rounds; r++) {
        int c = read_byte(fd, WEFT_NEVER);
        ASSERT(c >= 0);
        atomic_fetch_add(&a->m->sum, c);
        unsigned char out = (unsigned char)c;
        ASSERT_EQ(write(fd, &out, 1), 1);
    }
    return 0;
}

static int many_driver(void *arg)
{
    struct mtask *a = arg;
    int fd = a->m->sv[a->i][1];
    for (long r = 0; r < a->m->rounds; r++) {
        unsigned char c = (unsigned char)(r % 200);
        ASSERT_EQ(write(fd, &c, 1), 1);
        ASSERT_EQ(read_byte(fd, WEFT_NEVER), c);
    }
    return 0;
}

static int many_root(void *arg)
{
    struct many *m = arg;
    static struct mtask a[NPAIRS];
    for (int i = 0; i < NPAIRS; i++)
        nb_pair(m->sv[i]);
    weft_scope *s = scope_open();
    for (int i = 0; i < NPAIRS; i++) {
        a[i] = (struct mtask){m, i};
        spawn(many_echo, &a[i]);
        spawn(many_driver, &a[i]);
    }
    scope_end(s);
    for (int i = 0; i < NPAIRS; i++)
        close_pair(m->sv[i]);
    return 0;
}

TEST(many_descriptors_across_workers_exact)
{
    int before = t_proc_count("/proc/self/fd");
    static struct many m;
    int workers[] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        memset(&m, 0, sizeof m);
        m.rounds = T_SCALE(300);
        ASSERT_EQ(t_run_mono(workers[k], many_root, &m), 0);
        long want = 0;
        for (long r = 0; r < m.rounds; r++)
            want += r % 200;
        ASSERT_EQ(atomic_load(&m.sum), want * NPAIRS);
    }
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

/* ---- a regular file is always ready ------------------------------------ */

static int file_root(void *arg)
{
    (void)arg;
    int fd = open("/proc/self/status", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    ASSERT(fd >= 0);
    ASSERT_EQ(weft_fd_wait(fd, WEFT_IO_READ, weft_now() + WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 0);
    ASSERT_EQ(weft_close(fd), 0);
    return 0;
}

TEST(regular_file_is_always_ready)
{
    int before = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(1, file_root, NULL), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

/* ---- a close under a waiting wait, every way it can wait --------------- */

/* Fills fd's send buffer, so that it is not writable. */
static void fill(int fd)
{
    static const char buf[4096];
    while (write(fd, buf, sizeof buf) > 0) {
    }
    ASSERT_EQ(errno, EAGAIN);
}

struct dir_wait {
    int fd;
    int events;
    int rc;
    weft_time at;
};

static int dir_waiter(void *arg)
{
    struct dir_wait *d = arg;
    d->rc = weft_fd_wait(d->fd, d->events, WEFT_NEVER);
    d->at = weft_now();
    return 0;
}

static int close_fn(void *arg)
{
    return weft_close(*(int *)arg); /* on a pool thread: not a worker */
}

static int close_under_wait_root(void *arg)
{
    bool from_pool = *(bool *)arg;
    int sv[2];
    nb_pair(sv);
    fill(sv[0]); /* neither readable nor writable */
    /* Reads, writes, both (one wake for both arms), on every worker. */
    static const int evs[3] = {WEFT_IO_READ, WEFT_IO_WRITE,
                               WEFT_IO_READ | WEFT_IO_WRITE};
    struct dir_wait d[6];
    weft_scope *s = scope_open();
    for (int i = 0; i < 6; i++) {
        d[i] = (struct dir_wait){.fd = sv[0], .events = evs[i % 3], .rc = 1};
        spawn_on(i, dir_waiter, &d[i]);
    }
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    for (int i = 0; i < 6; i++)
        ASSERT_EQ(d[i].rc, 1); /* all still waiting */
    int fd = sv[0];
    ASSERT_EQ(from_pool ? weft_blocking(close_fn, &fd) : weft_close(fd), 0);
    scope_end(s);
    for (int i = 0; i < 6; i++) {
        ASSERT_EQ(d[i].rc, -EBADF);
        ASSERT_EQ(d[i].at, WEFT_SEC);
    }
    /* Nothing was left queued: a descriptor given the number works. */
    int nv[2];
    nb_pair(nv);
    struct dir_wait r = {.fd = nv[0], .events = WEFT_IO_READ, .rc = 1};
    s = scope_open();
    spawn(dir_waiter, &r);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    write_byte(nv[1], 1);
    scope_end(s);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(r.at, 2 * WEFT_SEC);
    close_pair(nv);
    ASSERT_EQ(weft_close(sv[1]), 0);
    return 0;
}

TEST(close_under_waiting_fd_wait_every_direction)
{
    int before = t_proc_count("/proc/self/fd");
    for (int workers = 1; workers <= 3; workers++) {
        bool from_pool = false;
        ASSERT_EQ(t_run_virtual(workers, close_under_wait_root, &from_pool), 0);
        from_pool = true;
        ASSERT_EQ(t_run_virtual(workers, close_under_wait_root, &from_pool), 0);
    }
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

/* ---- weft_select's descriptor cases ---- */

struct sel {
    weft_case cs[2];
    int got[3]; /* the three selects' results */
    int rc[3];  /* and their cases' */
    weft_time at[3];
};

static int selector(void *arg)
{
    struct sel *s = arg;
    for (int i = 0; i < 3; i++) {
        s->got[i] =
            weft_select(s->cs, 2, i == 2 ? weft_now() + WEFT_SEC : WEFT_NEVER);
        s->rc[i] = s->got[i] >= 0 ? s->cs[s->got[i]].rc : 1;
        s->at[i] = weft_now();
        if (s->got[i] == 0) /* readable: read it, or it stays ready */
            ASSERT(read_byte(s->cs[0].fd, WEFT_NEVER) >= 0);
    }
    return 0;
}

static int fd_case_root(void *arg)
{
    (void)arg;
    int a[2], b[2];
    nb_pair(a);
    nb_pair(b);
    fill(b[0]);
    struct sel s = {.cs = {{.op = WEFT_OP_READ, .fd = a[0], .rc = 1},
                           {.op = WEFT_OP_WRITE, .fd = b[0], .rc = 1}}};
    weft_scope *sc = scope_open();
    spawn_on(1, selector, &s);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    write_byte(a[1], 1); /* the read case, at 1 s */
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT_EQ(weft_close(b[0]), 0); /* the write case: -EBADF, at 2 s */
    scope_end(sc);
    ASSERT_EQ(s.got[0], 0);
    ASSERT_EQ(s.rc[0], 0);
    ASSERT_EQ(s.at[0], WEFT_SEC);
    ASSERT_EQ(s.got[1], 1);
    ASSERT_EQ(s.rc[1], -EBADF);
    ASSERT_EQ(s.at[1], 2 * WEFT_SEC);
    /* The third: the read edge was given to the first, and b[0]'s number
     * is not open now (registering it fails: the case's result). */
    ASSERT_EQ(s.got[2], 1);
    ASSERT_EQ(s.rc[2], -EBADF);
    ASSERT_EQ(s.at[2], 2 * WEFT_SEC);
    /* A select that times out leaves nothing queued; the next wait is
     * woken by the next byte, at its instant. */
    weft_case one = {.op = WEFT_OP_READ, .fd = a[0], .rc = 1};
    ASSERT_EQ(weft_select(&one, 1, weft_now() + WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    write_byte(a[1], 2);
    ASSERT_EQ(weft_fd_wait(a[0], WEFT_IO_READ, weft_now() + WEFT_SEC), 0);
    ASSERT_EQ(weft_now(), 3 * WEFT_SEC);
    ASSERT_EQ(weft__fd_case_check(&(weft_case){.fd = -1}), 1);
    ASSERT_EQ(weft__fd_case_check(&(weft_case){.fd = 1 << 20}), -EINVAL);
    close_pair(a);
    ASSERT_EQ(weft_close(b[1]), 0);
    return 0;
}

TEST(select_fd_case_ready_closed_and_timed_out)
{
    int before = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(1, fd_case_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, fd_case_root, NULL), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

/* reader_10s, waiting through a select's descriptor case. */
static int select_reader_10s(void *arg)
{
    struct rw *r = arg;
    weft_time deadline = weft_now() + 10 * WEFT_SEC;
    for (;;) {
        unsigned char c;
        ssize_t n = read(r->fd, &c, 1);
        if (n == 1) {
            r->got = c;
            break;
        }
        ASSERT(n < 0 && errno == EAGAIN);
        weft_case rc = {.op = WEFT_OP_READ, .fd = r->fd, .rc = 1};
        int got = weft_select(&rc, 1, deadline);
        if (got < 0 || rc.rc) {
            r->got = got < 0 ? got : rc.rc;
            break;
        }
    }
    r->at = weft_now();
    return 0;
}

/* foreign_close_then_reuse_wakes_the_next_wait with a select on the worker
 * that has the old file's registration: its case's check finds the file
 * replaced and wakes the wait parked on the new one (which must then
 * register the new file again), before the select parks. */
TEST(select_fd_case_on_a_reused_foreign_number)
{
    int before = t_proc_count("/proc/self/fd");
    ASSERT_EQ(t_run_virtual(2, reuse_root, &(weft_fn){select_reader_10s}), 0);
    ASSERT_EQ(t_run_virtual(3, reuse_root, &(weft_fn){select_reader_10s}), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}

/* ---- signals ------------------------------------------------------------ */

/* Atomics: the root reads rc while the waiter waits, and what orders the
 * waiter's write after that read is kill() and the signalfd, which TSan
 * cannot see. */
struct sw {
    atomic_int rc;
    _Atomic weft_time at;
};

static int sig_waiter(void *arg)
{
    struct sw *w = arg;
    static const int sigs[] = {SIGUSR1, SIGHUP};
    int rc = weft_signal_wait(sigs, 2, WEFT_NEVER);
    atomic_store(&w->at, weft_now());
    atomic_store(&w->rc, rc);
    return 0;
}

static int signal_root(void *arg)
{
    (void)arg;
    /* Waits, then a signal to the process wakes it at that instant. */
    struct sw w;
    atomic_init(&w.rc, 0);
    atomic_init(&w.at, 0);
    weft_scope *s = scope_open();
    spawn(sig_waiter, &w);
    ASSERT_EQ(weft_sleep_for(2 * WEFT_SEC), 0);
    ASSERT_EQ(w.rc, 0);
    ASSERT_EQ(kill(getpid(), SIGHUP), 0);
    scope_end(s);
    ASSERT_EQ(w.rc, SIGHUP);
    ASSERT_EQ(w.at, 2 * WEFT_SEC);
    /* One that came while nobody waited is pending for the next wait. */
    ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
    static const int usr1[] = {SIGUSR1};
    ASSERT_EQ(weft_signal_wait(usr1, 1, WEFT_NEVER), SIGUSR1);
    /* Deadline, and cancel: nothing taken, so the next wait gets it. */
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_signal_wait(usr1, 1, t0 + WEFT_SEC), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + WEFT_SEC);
    atomic_store(&w.rc, 0);
    s = scope_open();
    spawn(sig_waiter, &w);
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    scope_cancel_end(s);
    ASSERT_EQ(w.rc, -ECANCELED);
    ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
    ASSERT_EQ(weft_signal_wait(usr1, 1, WEFT_NEVER), SIGUSR1);
    /* Misuse: nothing listed, a bad number, a signal not blocked. */
    static const int term[] = {SIGTERM}, bad[] = {0};
    ASSERT_EQ(weft_signal_wait(usr1, 0, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_signal_wait(NULL, 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_signal_wait(bad, 1, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_signal_wait(term, 1, WEFT_NEVER), -EINVAL);
    return 0;
}

TEST(signal_wait_takes_each_signal_once)
{
    int before = t_proc_count("/proc/self/fd");
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGHUP);
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &set, &old), 0);
    ASSERT_EQ(t_run_virtual(1, signal_root, NULL), 0);
    ASSERT_EQ(t_run_virtual(2, signal_root, NULL), 0);
    ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
    ASSERT_EQ(t_proc_count("/proc/self/fd"), before);
}
