/* SPDX-License-Identifier: MIT */
/*
 * weft_select over every kind of case: channels, descriptors, futures,
 * scopes, semaphores and deadlines; each alone, mixed, racing, cancelled.
 * Channel-only select has its own tests in test_chan.c.
 *
 * Times are on the virtual clock and checked exactly. The races run on
 * two workers with seeds from the harness, and check after each round that
 * exactly one case took effect and the other's resource is untouched.
 */
#include "t.h"

#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#define MS WEFT_MSEC

static weft_case recv_case(weft_chan *c, void *out)
{
    return (weft_case){.chan = c, .op = WEFT_OP_RECV, .elem = out};
}
static weft_case fd_case(int fd, weft_op op)
{
    return (weft_case){.op = op, .fd = fd};
}
static weft_case future_case(weft_future *f, void *out)
{
    return (weft_case){.op = WEFT_OP_FUTURE, .future = f, .elem = out};
}
static weft_case scope_case(weft_scope *s)
{
    return (weft_case){.op = WEFT_OP_SCOPE, .scope = s};
}
static weft_case sem_case(weft_sem *s)
{
    return (weft_case){.op = WEFT_OP_SEM, .sem = s};
}
static weft_case deadline_case(weft_time t)
{
    return (weft_case){.op = WEFT_OP_DEADLINE, .deadline = t};
}

/* ---- deadlines ---- */

static int deadline_main(void *arg)
{
    (void)arg;
    weft_time t0 = weft_now();
    weft_chan *c;
    int v = 0;
    ASSERT_EQ(weft_chan_new(&c, sizeof(int), 1), 0);
    weft_case cs[2] = {recv_case(c, &v), deadline_case(t0 + 5 * MS)};
    /* The case's instant comes first: it is chosen, exactly then. */
    ASSERT_EQ(weft_select(cs, 2, t0 + 7 * MS), 1);
    ASSERT_EQ(cs[1].rc, 0);
    ASSERT_EQ(weft_now(), t0 + 5 * MS);
    /* The select's own deadline first: -ETIMEDOUT then. */
    cs[1] = deadline_case(weft_now() + 9 * MS);
    ASSERT_EQ(weft_select(cs, 2, weft_now() + 2 * MS), -ETIMEDOUT);
    ASSERT_EQ(weft_now(), t0 + 7 * MS);
    /* A tie goes to the case. */
    weft_time at = weft_now() + 3 * MS;
    cs[1] = deadline_case(at);
    ASSERT_EQ(weft_select(cs, 2, at), 1);
    ASSERT_EQ(weft_now(), at);
    /* A past instant is ready at once, for try_select too; WEFT_NEVER is
     * off. */
    cs[1] = deadline_case(at - 1);
    ASSERT_EQ(weft_try_select(cs, 2), 1);
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), 1);
    ASSERT_EQ(weft_now(), at);
    cs[1] = deadline_case(WEFT_NEVER);
    ASSERT_EQ(weft_try_select(cs, 2), -EAGAIN);
    ASSERT_EQ(weft_select(cs, 2, at + MS), -ETIMEDOUT);
    /* A negative instant is malformed. */
    cs[1] = deadline_case(-5);
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(weft_chan_unref(c), 0);
    return 0;
}

TEST(deadline_case_alone)
{
    ASSERT_EQ(t_run_virtual(1, deadline_main, NULL), 0);
}

/* ---- descriptors ---- */

struct fdrun {
    int sv[2];
    int closer;           /* 1: close sv[0] instead of writing to sv[1] */
    _Atomic weft_time at; /* the write reaches the selector through the
                           * kernel, which TSan does not see */
};

static int fd_poker(void *arg)
{
    struct fdrun *r = arg;
    ASSERT_EQ(weft_sleep_for(3 * MS), 0);
    r->at = weft_now();
    if (r->closer)
        ASSERT_EQ(weft_close(r->sv[0]), 0);
    else
        ASSERT_EQ(write(r->sv[1], "x", 1), 1);
    return 0;
}

static int fd_main(void *arg)
{
    struct fdrun *r = arg;
    weft_scope *s;
    weft_chan *c;
    int v;
    ASSERT_EQ(weft_chan_new(&c, sizeof(int), 0), 0);
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, r->sv), 0);
    /* A fresh socket is writable at once; not readable. */
    weft_case w1[1] = {fd_case(r->sv[0], WEFT_OP_WRITE)};
    ASSERT_EQ(weft_select(w1, 1, WEFT_NEVER), 0);
    ASSERT_EQ(w1[0].rc, 0);
    weft_case cs[3] = {recv_case(c, &v), fd_case(r->sv[0], WEFT_OP_READ),
                       fd_case(-1, WEFT_OP_READ)};
    ASSERT_EQ(weft_try_select(cs, 3), -EAGAIN);
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, fd_poker, r) >= 0);
    int got = weft_select(cs, 3, WEFT_NEVER);
    ASSERT_EQ(got, 1);
    ASSERT_EQ(weft_now(), r->at);
    if (r->closer) {
        ASSERT_EQ(cs[1].rc, -EBADF);
    } else {
        char b;
        ASSERT_EQ(cs[1].rc, 0);
        ASSERT_EQ(read(r->sv[0], &b, 1), 1);
        ASSERT_EQ(weft_close(r->sv[0]), 0);
    }
    ASSERT_EQ(weft_scope_join(s), 0);
    weft_scope_free(s);
    ASSERT_EQ(weft_close(r->sv[1]), 0);
    ASSERT_EQ(weft_chan_unref(c), 0);
    return 0;
}

TEST(fd_case_readable)
{
    struct fdrun r = {.closer = 0};
    ASSERT_EQ(t_run_virtual(2, fd_main, &r), 0);
}

TEST(fd_closed_under_waiting_select)
{
    struct fdrun r = {.closer = 1};
    ASSERT_EQ(t_run_virtual(2, fd_main, &r), 0);
}

/* ---- futures ---- */

struct futrun {
    weft_future *f;
    int reject;
};

static int fut_settler(void *arg)
{
    struct futrun *r = arg;
    ASSERT_EQ(weft_sleep_for(2 * MS), 0);
    if (r->reject)
        ASSERT_EQ(weft_future_reject(r->f, -ECONNREFUSED), 0);
    else
        ASSERT_EQ(weft_future_resolve(r->f, &(int){42}), 0);
    return 0;
}

static int fut_main(void *arg)
{
    (void)arg;
    for (int reject = 0; reject < 2; reject++) {
        struct futrun r = {.reject = reject};
        weft_scope *s;
        int out = -1;
        ASSERT_EQ(weft_future_new(&r.f, sizeof(int)), 0);
        weft_case cs[2] = {future_case(r.f, &out),
                           deadline_case(weft_now() + 10 * MS)};
        ASSERT_EQ(weft_try_select(cs, 2), -EAGAIN);
        ASSERT_EQ(weft_scope_open(&s, NULL), 0);
        ASSERT(weft_spawn(s, fut_settler, &r) >= 0);
        ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), 0);
        ASSERT_EQ(cs[0].rc, reject ? -ECONNREFUSED : 0);
        ASSERT_EQ(out, reject ? -1 : 42);
        /* Settled: ready at once from now on. */
        out = -1;
        ASSERT_EQ(weft_try_select(cs, 1), 0);
        ASSERT_EQ(out, reject ? -1 : 42);
        ASSERT_EQ(weft_scope_join(s), 0);
        weft_scope_free(s);
        ASSERT_EQ(weft_future_unref(r.f), 0);
    }
    return 0;
}

TEST(future_case)
{
    ASSERT_EQ(t_run_virtual(2, fut_main, NULL), 0);
}

/* ---- scopes ---- */

static int sleeper(void *arg)
{
    return weft_sleep_for(*(int64_t *)arg) ? -1 : 7;
}

static int not_owner(void *arg)
{
    weft_case cs[1] = {scope_case(arg)};
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), -EPERM);
    return 0;
}

static int scope_main(void *arg)
{
    (void)arg;
    weft_time t0 = weft_now();
    int64_t d = 10 * MS;
    weft_scope *outer, *s;
    ASSERT_EQ(weft_scope_open(&outer, NULL), 0);
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, sleeper, &d) >= 0);
    ASSERT(weft_spawn(outer, not_owner, s) >= 0);
    weft_case cs[2] = {scope_case(s), deadline_case(t0 + 4 * MS)};
    /* The child still runs: the deadline comes first, and the scope is
     * left open (a child can still be spawned into it). */
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), 1);
    ASSERT_EQ(weft_now(), t0 + 4 * MS);
    ASSERT(weft_spawn(s, sleeper, &d) >= 0); /* until t0 + 14 ms */
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), 0);
    ASSERT_EQ(weft_now(), t0 + 14 * MS);
    ASSERT_EQ(cs[0].rc, 0); /* the join's result */
    /* Joined: a second join says so, as it would. */
    ASSERT_EQ(weft_scope_join(s), -EINVAL);
    weft_scope_free(s);
    ASSERT_EQ(weft_scope_join(outer), 0);
    weft_scope_free(outer);
    return 0;
}

TEST(scope_case)
{
    ASSERT_EQ(t_run_virtual(2, scope_main, NULL), 0);
}

/* ---- semaphores ---- */

static int releaser(void *arg)
{
    ASSERT_EQ(weft_sleep_for(MS), 0);
    return weft_sem_release(arg, 1);
}

static int sem_main(void *arg)
{
    (void)arg;
    weft_sem sem;
    weft_scope *s;
    ASSERT_EQ(weft_sem_init(&sem, 0), 0);
    weft_case cs[2] = {sem_case(&sem), deadline_case(weft_now() + 5 * MS)};
    ASSERT_EQ(weft_try_select(cs, 2), -EAGAIN);
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, releaser, &sem) >= 0);
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), 0);
    ASSERT_EQ(cs[0].rc, 0);
    ASSERT_EQ(weft_sem_available(&sem), 0); /* the permit is ours */
    ASSERT_EQ(weft_sem_release(&sem, 1), 0);
    ASSERT_EQ(weft_try_select(cs, 1), 0);
    ASSERT_EQ(weft_sem_available(&sem), 0);
    ASSERT_EQ(weft_sem_release(&sem, 1), 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    weft_scope_free(s);
    ASSERT_EQ(weft_sem_available(&sem), 1);
    /* A timed-out select took nothing: the next release is available. */
    ASSERT_EQ(weft_sem_acquire(&sem, 1), 0);
    ASSERT_EQ(weft_select(cs, 1, weft_now() + MS), -ETIMEDOUT);
    ASSERT_EQ(weft_sem_release(&sem, 1), 0);
    ASSERT_EQ(weft_sem_available(&sem), 1);
    ASSERT_EQ(weft_sem_destroy(&sem), 0);
    return 0;
}

TEST(sem_case)
{
    ASSERT_EQ(t_run_virtual(2, sem_main, NULL), 0);
}

/* ---- every kind in one select ---- */

struct mixed {
    weft_chan *c;
    int sv[2];
    weft_future *f;
    weft_sem sem;
    int which; /* what the poker triggers */
};

static int mixed_poker(void *arg)
{
    struct mixed *m = arg;
    ASSERT_EQ(weft_sleep_for(MS), 0);
    switch (m->which) {
    case 0:
        return weft_chan_send(m->c, &(int){5});
    case 1:
        return write(m->sv[1], "y", 1) == 1 ? 0 : -EIO;
    case 2:
        return weft_future_resolve(m->f, &(int){6});
    case 3:
        return weft_sem_release(&m->sem, 1);
    default:
        return 0; /* the deadline, or the scope, will do */
    }
}

static int mixed_main(void *arg)
{
    (void)arg;
    struct mixed m;
    ASSERT_EQ(weft_chan_new(&m.c, sizeof(int), 0), 0);
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, m.sv), 0);
    ASSERT_EQ(weft_sem_init(&m.sem, 0), 0);
    for (m.which = 0; m.which < 6; m.which++) {
        ASSERT_EQ(weft_future_new(&m.f, sizeof(int)), 0);
        weft_scope *s, *kid;
        int v = 0, fv = 0;
        int64_t d = 2 * MS, long_d = 10 * MS;
        ASSERT_EQ(weft_scope_open(&s, NULL), 0);
        ASSERT(weft_spawn(s, mixed_poker, &m) >= 0);
        ASSERT_EQ(weft_scope_open(&kid, NULL), 0);
        if (m.which == 5)
            ASSERT(weft_spawn(kid, sleeper, &d) >= 0);
        else
            ASSERT(weft_spawn(kid, sleeper, &long_d) >= 0);
        weft_time t0 = weft_now();
        weft_case cs[6] = {recv_case(m.c, &v),
                           fd_case(m.sv[0], WEFT_OP_READ),
                           future_case(m.f, &fv),
                           sem_case(&m.sem),
                           deadline_case(t0 + (m.which == 4 ? MS : 5 * MS)),
                           scope_case(kid)};
        int got = weft_select(cs, 6, WEFT_NEVER);
        ASSERT_EQ(got, m.which);
        ASSERT_EQ(cs[got].rc, 0);
        switch (got) {
        case 0:
            ASSERT_EQ(v, 5);
            break;
        case 1: {
            char b;
            ASSERT_EQ(read(m.sv[0], &b, 1), 1);
            break;
        }
        case 2:
            ASSERT_EQ(fv, 6);
            break;
        case 3:
            ASSERT_EQ(weft_sem_available(&m.sem), 0);
            break;
        case 4:
            ASSERT_EQ(weft_now(), t0 + MS);
            break;
        case 5:
            ASSERT_EQ(weft_now(), t0 + 2 * MS);
            break;
        }
        if (got != 5) {
            ASSERT_EQ(weft_scope_cancel(kid), 0);
            weft_scope_join(kid);
        }
        weft_scope_free(kid);
        ASSERT_EQ(weft_scope_join(s), 0);
        weft_scope_free(s);
        ASSERT_EQ(weft_future_unref(m.f), 0);
    }
    ASSERT_EQ(weft_sem_destroy(&m.sem), 0);
    ASSERT_EQ(weft_close(m.sv[0]), 0);
    ASSERT_EQ(weft_close(m.sv[1]), 0);
    ASSERT_EQ(weft_chan_unref(m.c), 0);
    return 0;
}

TEST(mixed_kinds)
{
    ASSERT_EQ(t_run_virtual(2, mixed_main, NULL), 0);
}

/* ---- races: two kinds ready at once, exactly one taken ---- */

struct race {
    weft_chan *c; /* capacity 1 */
    weft_sem sem;
    weft_future *f;
    int kind; /* 0: sem against chan; 1: future against chan */
    atomic_int went;
};

static int race_chan(void *arg)
{
    struct race *r = arg;
    return weft_chan_send(r->c, &(int){1});
}

static int race_other(void *arg)
{
    struct race *r = arg;
    return r->kind == 0 ? weft_sem_release(&r->sem, 1)
                        : weft_future_resolve(r->f, &(int){2});
}

static int race_main(void *arg)
{
    struct race *r = arg;
    /* 100,000 rounds in every build, sanitizers included (under TSan
     * about 5 s): the races are the point. */
    long rounds = 100000;
    long taken[2] = {0, 0};
    ASSERT_EQ(weft_chan_new(&r->c, sizeof(int), 1), 0);
    ASSERT_EQ(weft_sem_init(&r->sem, 0), 0);
    for (long i = 0; i < rounds; i++) {
        weft_scope *s;
        int v = 0, fv = 0;
        if (r->kind == 1)
            ASSERT_EQ(weft_future_new(&r->f, sizeof(int)), 0);
        ASSERT_EQ(weft_scope_open(&s, NULL), 0);
        ASSERT(weft_spawn(s, race_chan, r) >= 0);
        ASSERT(weft_spawn(s, race_other, r) >= 0);
        weft_case cs[2] = {recv_case(r->c, &v), r->kind == 0
                                                    ? sem_case(&r->sem)
                                                    : future_case(r->f, &fv)};
        int got = weft_select(cs, 2, WEFT_NEVER);
        ASSERT(got == 0 || got == 1);
        ASSERT_EQ(cs[got].rc, 0);
        taken[got]++;
        ASSERT_EQ(weft_scope_join(s), 0);
        weft_scope_free(s);
        /* Both have happened now: the case not chosen left its
         * resource where it was. */
        int left;
        if (got == 0) {
            ASSERT_EQ(v, 1);
            ASSERT_EQ(weft_chan_len(r->c), 0);
            if (r->kind == 0)
                ASSERT_EQ(weft_sem_try_acquire(&r->sem, 1), 0);
            else
                ASSERT_EQ(weft_future_try_await(r->f, &fv), 0);
        } else {
            ASSERT_EQ(weft_chan_try_recv(r->c, &left), 0);
            ASSERT_EQ(left, 1);
            if (r->kind == 0)
                ASSERT_EQ(weft_sem_available(&r->sem), 0);
            else
                ASSERT_EQ(fv, 2);
        }
        ASSERT_EQ(weft_chan_len(r->c), 0);
        ASSERT_EQ(weft_sem_available(&r->sem), 0);
        if (r->kind == 1)
            ASSERT_EQ(weft_future_unref(r->f), 0);
    }
    ASSERT_EQ(taken[0] + taken[1], rounds);
    ASSERT_EQ(weft_sem_destroy(&r->sem), 0);
    ASSERT_EQ(weft_chan_unref(r->c), 0);
    return 0;
}

TEST(race_sem_against_chan_two_workers)
{
    struct race r = {.kind = 0};
    ASSERT_EQ(t_run_mono(2, race_main, &r), 0);
}

TEST(race_future_against_chan_two_workers)
{
    struct race r = {.kind = 1};
    ASSERT_EQ(t_run_mono(2, race_main, &r), 0);
}

/* ---- cancellation in the middle ---- */

struct cancel_run {
    weft_chan *c;
    weft_sem sem;
    weft_future *f;
    int sv[2];
    int rc;
};

static int cancel_selector(void *arg)
{
    struct cancel_run *r = arg;
    int v, fv;
    weft_case cs[5] = {recv_case(r->c, &v), sem_case(&r->sem),
                       future_case(r->f, &fv), fd_case(r->sv[0], WEFT_OP_READ),
                       deadline_case(weft_now() + 50 * MS)};
    r->rc = weft_select(cs, 5, WEFT_NEVER);
    return 0;
}

static int cancel_main(void *arg)
{
    struct cancel_run *r = arg;
    weft_scope *s;
    ASSERT_EQ(weft_chan_new(&r->c, sizeof(int), 0), 0);
    ASSERT_EQ(weft_sem_init(&r->sem, 0), 0);
    ASSERT_EQ(weft_future_new(&r->f, sizeof(int)), 0);
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, r->sv), 0);
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, cancel_selector, r) >= 0);
    ASSERT_EQ(weft_sleep_for(3 * MS), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    weft_scope_join(s);
    weft_scope_free(s);
    ASSERT_EQ(r->rc, -ECANCELED);
    /* Nothing was taken, and no waiter is left behind: each resource goes
     * to the next taker. */
    ASSERT_EQ(weft_sem_release(&r->sem, 1), 0);
    ASSERT_EQ(weft_sem_try_acquire(&r->sem, 1), 0);
    ASSERT_EQ(weft_chan_try_send(r->c, &(int){1}), -EAGAIN);
    ASSERT_EQ(weft_future_resolve(r->f, &(int){3}), 0);
    ASSERT_EQ(write(r->sv[1], "z", 1), 1);
    ASSERT_EQ(weft_fd_wait(r->sv[0], WEFT_IO_READ, WEFT_NEVER), 0);
    ASSERT_EQ(weft_sem_destroy(&r->sem), 0);
    ASSERT_EQ(weft_future_unref(r->f), 0);
    ASSERT_EQ(weft_chan_unref(r->c), 0);
    ASSERT_EQ(weft_close(r->sv[0]), 0);
    ASSERT_EQ(weft_close(r->sv[1]), 0);
    return 0;
}

TEST(cancel_in_the_middle)
{
    struct cancel_run r = {0};
    ASSERT_EQ(t_run_virtual(2, cancel_main, &r), 0);
}

/* ---- closed channels next to other kinds ---- */

static int closed_main(void *arg)
{
    (void)arg;
    weft_chan *c;
    weft_sem sem;
    int v;
    ASSERT_EQ(weft_chan_new(&c, sizeof(int), 0), 0);
    ASSERT_EQ(weft_sem_init(&sem, 0), 0);
    ASSERT_EQ(weft_chan_close(c), 0);
    weft_case cs[2] = {recv_case(c, &v), sem_case(&sem)};
    ASSERT_EQ(weft_select(cs, 2, WEFT_NEVER), 0);
    ASSERT_EQ(cs[0].rc, -EPIPE);
    ASSERT_EQ(weft_sem_available(&sem), 0);
    ASSERT_EQ(weft_sem_destroy(&sem), 0);
    ASSERT_EQ(weft_chan_unref(c), 0);
    return 0;
}

TEST(closed_channel_next_to_a_semaphore)
{
    ASSERT_EQ(t_run_virtual(1, closed_main, NULL), 0);
}

/* ---- misuse ---- */

static int misuse_main(void *arg)
{
    (void)arg;
    weft_case cs[1] = {{.op = (weft_op)0}};
    ASSERT_EQ(weft_select(cs, 1, WEFT_NEVER), -EINVAL);
    cs[0] = future_case(NULL, NULL); /* off: never ready */
    ASSERT_EQ(weft_try_select(cs, 1), -EAGAIN);
    cs[0] = sem_case(NULL);
    ASSERT_EQ(weft_select(cs, 1, weft_now() + MS), -ETIMEDOUT);
    cs[0] = scope_case(NULL);
    ASSERT_EQ(weft_try_select(cs, 1), -EAGAIN);
    return 0;
}

TEST(misuse)
{
    ASSERT_EQ(t_run_virtual(1, misuse_main, NULL), 0);
}
