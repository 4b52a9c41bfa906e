/* SPDX-License-Identifier: MIT */
/*
 * The io_uring poller (see poller.h): one ring per worker, readiness
 * only. Chosen by weft_config.poller or WEFT_POLLER (io.c); if the kernel
 * refuses a ring, the worker runs on epoll and the process says why once.
 *
 * One request per wait, not per descriptor. epoll's registration is
 * dropped by the kernel when its file is closed; an io_uring poll request
 * holds a reference to its file, so a request left armed on a socket
 * that weft_close closed would keep the connection open (the peer would
 * not see its end). So a request lives only while waits need it: `arm`,
 * as a wait is about to park, asks for an IORING_OP_POLL_ADD (one-shot,
 * level: it reports a readiness present when it is armed, so the one
 * between a call's EAGAIN and its wait is not lost) for the direction
 * waited for; `cancel`, at the end of every wait that armed (an event, a
 * deadline, a cancel, a close: weft_close wakes its waiters, which end
 * their waits), withdraws it with IORING_OP_POLL_REMOVE once no wait of
 * this worker needs it, and submits that at once: once a wait has ended,
 * nothing of it holds the file (a listener closed after its acceptor was
 * cancelled refuses connections, as with epoll); weft_close and
 * weft_fd_forget withdraw the requests of their own worker at once
 * (`forget`), the other workers' go as their woken waits end. A
 * withdrawal that cannot
 * be submitted then counts as pending I/O (park.h) until the next poll
 * submits it, so the worker looks before it sleeps.
 *
 * Per descriptor number and direction (read, write) the poller keeps the
 * worker's waits armed and not ended, and the state of its request: none,
 * queued (to be submitted by the next poll: the submission and the sleep
 * are one io_uring_enter) or in flight, tagged in its user_data with the
 * descriptor, the direction, the generation it was armed for (io.c
 * ignores a completion for an older one) and a sequence number, so that
 * the completion of a request withdrawn or replaced is recognised and
 * consumed without a report. Several waits of one worker on one
 * descriptor and direction share its request: its completion wakes them
 * all (io.c claims the whole queue).
 *
 * How this keeps io.c's semantics (io.c's essay). Edges: a completion is
 * reported as epoll's edge is (weft__fd_ready counts it); an edge that
 * nobody waits for is kept the same way, it only comes more rarely (a
 * completion that raced a withdrawal). Nothing else changes: each park
 * arms a level poll, which sees whatever is ready at that moment, so the
 * skipped reads of weft__fd_read_wait_first and the end of a stream
 * queued behind data are seen as with epoll. Registration (`wait`, not
 * check) is bookkeeping for a generation, plus fstat: a regular file or
 * a directory, which epoll refuses with EPERM and a poll would report
 * ready at once, is WEFT__POLL_ALWAYS without a park (other files that
 * cannot be polled complete their poll at once). The check at park of a
 * descriptor weft did not make (rec_check) compares the file's device
 * and inode with the registered one (WEFT__POLL_GONE if they differ:
 * the number names another file); files that share one anonymous inode
 * cannot be told apart this way, so the check also makes this park
 * replace, rather than share, a request in flight for the descriptor,
 * which may sit on a file closed behind weft's back.
 *
 * Wakes from other threads: an eventfd with a multishot POLL_ADD (a
 * one-shot one re-armed after each wake where the kernel has no
 * multishot poll). Only the owner's thread touches the ring.
 *
 * Full queues. A submission queue found full is submitted and the entry
 * taken again; if even that fails (a kernel short of memory), what is
 * left stays on the poller's own lists for the next poll, which does not
 * sleep meanwhile: nothing is dropped. The completion queue is four
 * times the submission queue; beyond that the kernel keeps completions
 * on its overflow list (IORING_FEAT_NODROP, required) and the poll
 * flushes them in.
 */
#include "io/io.h"
#include "sched/park.h"
#include "sched/poller.h"
#include "util/fault.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if WEFT_HAVE_URING

#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#define SQ_ENTRIES 256
#define CQ_ENTRIES (4 * SQ_ENTRIES)
#define BATCH 64

/* user_data: fd (io.c's numbers are below 2^20), direction, sequence (1
 * to 2047), generation. Sequence 0 tags the poller's own requests. */
#define UD_DIR_SHIFT 20
#define UD_SEQ_SHIFT 21
#define UD_SEQ_MASK 0x7ffu
#define UD_IGNORE 0u /* a withdrawal's own completion */
#define UD_WAKE 1u   /* the eventfd's poll */
#define UD_OP 2u     /* a file operation: its slot in the high 32 bits */

enum { ST_IDLE, ST_QUEUED, ST_INFLIGHT };

/* One descriptor and direction of one worker. */
typedef struct ur_dir {
    uint32_t waits; /* the worker's waits armed here and not ended */
    uint32_t gen;   /* the generation its request is (to be) tagged with */
    uint16_t seq;   /* its request's sequence number, while in flight */
    uint8_t state;  /* ST_*: no request, one to submit, one in flight */
    uint8_t listed; /* on the list of requests to submit (todo) */
    int32_t next;   /* that list's next entry (fd * 2 + dir), -1: last */
} ur_dir;

typedef struct ur_fd {
    uint32_t reg; /* generation + 1 registered for (0: none) */
    bool suspect; /* checked at park: the next arm replaces a request
                   * in flight, which may sit on a file now closed */
    dev_t dev;    /* the file registered, for the check */
    ino_t ino;
    ur_dir d[2]; /* read, write */
} ur_fd;

typedef struct ur_poller {
    weft__poller base;
    weft_worker *w; /* the owner */
    struct io_uring ring;
    int evfd;        /* wakes the ring's owner from other threads */
    bool wake_armed; /* the eventfd's poll is queued or in flight */
    bool multishot;  /* the kernel has multishot polls */
    ur_fd *slots;    /* per descriptor number (nslots of them) */
    int nslots;
    int32_t todo_head; /* requests to submit, first queued first */
    int32_t todo_tail;
    uint64_t *rm;     /* withdrawals to submit (user_data of each) */
    int nrm, caprm;   /* caprm: 2 * nslots, as each direction of each
                       * descriptor is withdrawn at most once between
                       * two flushes */
    uint16_t seq;     /* the last sequence number given */
    bool rm_pending;  /* withdrawals not yet submitted: counted once in
                       * the owner's pending I/O */
    bool files;       /* the kernel has the file operations (probed) */
    bool recv;        /* and IORING_OP_RECV (probed) */
    weft__op **ops;   /* file operations in flight, by slot */
    uint32_t *opfree; /* free slots (a stack), nopfree of them */
    uint32_t nops, nopfree;
    uint32_t *cancels; /* slots whose cancel found no free entry: put in
                        * by the next flush (room for nops) */
    uint32_t ncancels;
} ur_poller;

static uint64_t ud_make(int fd, int dir, unsigned seq, uint32_t gen)
{
    return (uint64_t)gen << 32 | (uint64_t)seq << UD_SEQ_SHIFT |
           (uint64_t)dir << UD_DIR_SHIFT | (uint32_t)fd;
}

/* ---- the fallback's one line ---- */

static void refused(const char *why)
{
    static atomic_int said;
    int no = 0;
    if (cas_acq_rel(&said, &no, 1))
        fprintf(stderr, "weft: io_uring refused (%s); using epoll\n", why);
}

static void refused_errno(int err)
{
    const char *hint = err == EPERM    ? ": kernel.io_uring_disabled?"
                       : err == ENOSYS ? ": no io_uring in this kernel, or "
                                         "a seccomp filter"
                       : err == ENOMEM ? ": the locked memory limit?"
                                       : "";
    char why[160];
    snprintf(why, sizeof why, "%s%s", strerror(err), hint);
    refused(why);
}

/* ---- submission ---- */

/* A submission queue entry, submitting the queue first if it is full;
 * NULL if even that failed (left for the next poll). */
static struct io_uring_sqe *sqe_get(ur_poller *u)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe && io_uring_submit(&u->ring) >= 0)
        sqe = io_uring_get_sqe(&u->ring);
    return sqe;
}

static void wake_arm(ur_poller *u)
{
    struct io_uring_sqe *sqe = sqe_get(u);
    if (!sqe)
        return;
    if (u->multishot)
        io_uring_prep_poll_multishot(sqe, u->evfd, POLLIN);
    else
        io_uring_prep_poll_add(sqe, u->evfd, POLLIN);
    io_uring_sqe_set_data64(sqe, UD_WAKE);
    u->wake_armed = true;
}

/* Puts the withdrawals, then the requests waits asked for, in the
 * submission queue. Returns false if some are left (no entry to be had:
 * the caller must not sleep). */
static bool flush(ur_poller *u)
{
    while (u->ncancels > 0) {
        struct io_uring_sqe *sqe = sqe_get(u);
        if (!sqe)
            return false;
        uint32_t i = u->cancels[--u->ncancels];
        io_uring_prep_cancel64(sqe, (uint64_t)i << 32 | UD_OP, 0);
        io_uring_sqe_set_data64(sqe, UD_IGNORE);
    }
    while (u->nrm > 0) {
        struct io_uring_sqe *sqe = sqe_get(u);
        if (!sqe)
            return false;
        io_uring_prep_poll_remove(sqe, u->rm[--u->nrm]);
        io_uring_sqe_set_data64(sqe, UD_IGNORE);
    }
    while (u->todo_head >= 0) {
        int32_t i = u->todo_head;
        ur_dir *d = &u->slots[i >> 1].d[i & 1];
        if (d->state == ST_QUEUED) {
            struct io_uring_sqe *sqe = sqe_get(u);
            if (!sqe)
                return false;
            if (++u->seq > UD_SEQ_MASK)
                u->seq = 1;
            d->seq = u->seq;
            d->state = ST_INFLIGHT;
            io_uring_prep_poll_add(
                sqe, i >> 1, (i & 1) ? POLLOUT : POLLIN | POLLRDHUP | POLLPRI);
            io_uring_sqe_set_data64(sqe,
                                    ud_make(i >> 1, i & 1, d->seq, d->gen));
        }
        u->todo_head = d->next;
        d->listed = 0;
    }
    u->todo_tail = -1;
    if (!u->wake_armed)
        wake_arm(u);
    return u->wake_armed;
}

/* d's request in flight is withdrawn (submitted by the caller, or else by
 * the next poll, which the pending count makes come before the worker
 * sleeps). */
static void withdraw(ur_poller *u, int fd, int dir)
{
    ur_dir *d = &u->slots[fd].d[dir];
    WEFT_ASSERT(d->state == ST_INFLIGHT && u->nrm < u->caprm);
    u->rm[u->nrm++] = ud_make(fd, dir, d->seq, d->gen);
    d->state = ST_IDLE;
    if (!u->rm_pending) {
        u->rm_pending = true;
        weft__pending_add(u->w, WEFT__PENDING_IO, 1);
    }
}

/* ---- the table ---- */

static void ur_fini(weft__poller *p)
{
    ur_poller *u = (ur_poller *)p;
    io_uring_queue_exit(&u->ring);
    close(u->evfd);
    free(u->slots);
    free(u->rm);
    free(u->ops);
    free(u->opfree);
    free(u->cancels);
    free(u);
}

/* Sets up u's ring with what this poller needs of the kernel; a
 * negative errno, or 1 with the line said, if it cannot. */
static int ring_setup(ur_poller *u)
{
    struct io_uring_params prm = {.flags = IORING_SETUP_CQSIZE |
                                           IORING_SETUP_SUBMIT_ALL,
                                  .cq_entries = CQ_ENTRIES};
    int rc = weft__fault_fails(WEFT_FAULT_POLLER)
                 ? -errno
                 : io_uring_queue_init_params(SQ_ENTRIES, &u->ring, &prm);
    if (rc == -EINVAL) { /* no SUBMIT_ALL: an entry that fails to submit
                          * stops the rest, which the next enter submits */
        prm = (struct io_uring_params){.flags = IORING_SETUP_CQSIZE,
                                       .cq_entries = CQ_ENTRIES};
        rc = io_uring_queue_init_params(SQ_ENTRIES, &u->ring, &prm);
    }
    if (rc < 0)
        return rc;
    const char *missing = NULL;
    struct io_uring_probe *probe = io_uring_get_probe_ring(&u->ring);
    if (!probe)
        missing = "no opcode probe";
    else if (!io_uring_opcode_supported(probe, IORING_OP_POLL_ADD))
        missing = "no IORING_OP_POLL_ADD";
    else if (!io_uring_opcode_supported(probe, IORING_OP_POLL_REMOVE))
        missing = "no IORING_OP_POLL_REMOVE";
    else if (!(prm.features & IORING_FEAT_NODROP))
        missing = "no IORING_FEAT_NODROP";
    if (probe) {
        static const int file_ops[] = {IORING_OP_OPENAT, IORING_OP_READ,
                                       IORING_OP_WRITE, IORING_OP_FSYNC,
                                       IORING_OP_ASYNC_CANCEL};
        u->files = true;
        for (size_t i = 0; i < sizeof file_ops / sizeof *file_ops; i++)
            u->files &= io_uring_opcode_supported(probe, file_ops[i]) != 0;
        u->recv = u->files && io_uring_opcode_supported(probe, IORING_OP_RECV);
        io_uring_free_probe(probe);
    }
    if (missing) {
        io_uring_queue_exit(&u->ring);
        refused(missing);
        return 1;
    }
    return 0;
}

static weft__poller *ur_init(weft_worker *w, int *err)
{
    ur_poller *u = weft__calloc(1, sizeof(*u));
    if (!u) {
        *err = -ENOMEM;
        return NULL;
    }
    u->base.ops = &weft__poller_uring;
    u->w = w;
    u->todo_head = u->todo_tail = -1;
    u->multishot = true;
    int rc = ring_setup(u);
    if (rc != 0) {
        if (rc < 0)
            refused_errno(-rc);
        *err = rc < 0 ? rc : -ENOSYS;
        free(u);
        return NULL;
    }
    u->evfd = weft__fault_fails(WEFT_FAULT_EVENTFD)
                  ? -1
                  : eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (u->evfd < 0) {
        *err = -errno;
        io_uring_queue_exit(&u->ring);
        free(u);
        return NULL;
    }
    wake_arm(u);
    io_uring_submit(&u->ring);
    return &u->base;
}

/* Makes room for fd in the tables; 0 or -ENOMEM. */
static int grow(ur_poller *u, int fd)
{
    if (fd < u->nslots)
        return 0;
    int n = u->nslots ? u->nslots : 256;
    while (n <= fd)
        n *= 2;
    uint64_t *rm = weft__realloc(u->rm, (size_t)n * 2 * sizeof(*rm));
    if (!rm)
        return -ENOMEM;
    u->rm = rm;
    u->caprm = n * 2;
    ur_fd *s = weft__realloc(u->slots, (size_t)n * sizeof(*s));
    if (!s)
        return -ENOMEM;
    memset(s + u->nslots, 0, (size_t)(n - u->nslots) * sizeof(*s));
    u->slots = s;
    u->nslots = n;
    return 0;
}

static int ur_register(ur_poller *u, int fd, uint32_t gen)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
        return WEFT__POLL_ALWAYS; /* as epoll's EPERM: always ready */
    int rc = grow(u, fd);
    if (rc)
        return rc;
    ur_fd *s = &u->slots[fd];
    s->reg = gen + 1;
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    s->suspect = false;
    return WEFT__POLL_NEW;
}

static int ur_wait(weft__poller *p, int fd, uint32_t gen, bool check)
{
    ur_poller *u = (ur_poller *)p;
    if (!check) {
        if (WEFT_LIKELY(fd < u->nslots && u->slots[fd].reg == gen + 1))
            return 0;
        return ur_register(u, fd, gen);
    }
    WEFT_ASSERT(fd < u->nslots && u->slots[fd].reg == gen + 1);
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    ur_fd *s = &u->slots[fd];
    if (st.st_dev != s->dev || st.st_ino != s->ino)
        return WEFT__POLL_GONE;
    s->suspect = true;
    return 0;
}

static void ur_arm(weft__poller *p, int fd, uint32_t gen, int events)
{
    ur_poller *u = (ur_poller *)p;
    WEFT_ASSERT(fd < u->nslots && u->slots[fd].reg == gen + 1);
    ur_fd *s = &u->slots[fd];
    for (int k = 0; k < 2; k++) {
        if (!(events & (1 << k)))
            continue;
        ur_dir *d = &s->d[k];
        d->waits++;
        if (d->state == ST_INFLIGHT && (d->gen != gen || s->suspect))
            withdraw(u, fd, k);
        if (d->state == ST_INFLIGHT)
            continue;
        d->state = ST_QUEUED;
        d->gen = gen;
        if (d->listed)
            continue;
        int32_t i = fd * 2 + k;
        d->listed = 1;
        d->next = -1;
        if (u->todo_tail >= 0)
            u->slots[u->todo_tail >> 1].d[u->todo_tail & 1].next = i;
        else
            u->todo_head = i;
        u->todo_tail = i;
    }
    s->suspect = false;
}

/* Submits the withdrawals now: a request holds its file, which a close
 * may be waiting to let go of (the peer sees the end only then). */
static void withdraw_now(ur_poller *u)
{
    if (!u->rm_pending)
        return;
    flush(u);
    io_uring_submit(&u->ring);
    if (u->nrm == 0 && io_uring_sq_ready(&u->ring) == 0) {
        u->rm_pending = false;
        weft__pending_add(u->w, WEFT__PENDING_IO, -1);
    }
}

static void ur_forget(weft__poller *p, int fd)
{
    ur_poller *u = (ur_poller *)p;
    if (fd >= u->nslots)
        return;
    for (int k = 0; k < 2; k++) {
        ur_dir *d = &u->slots[fd].d[k];
        if (d->state == ST_QUEUED)
            d->state = ST_IDLE;
        else if (d->state == ST_INFLIGHT)
            withdraw(u, fd, k);
    }
    withdraw_now(u);
}

static void ur_cancel(weft__poller *p, int fd, int events)
{
    ur_poller *u = (ur_poller *)p;
    WEFT_ASSERT(fd < u->nslots);
    for (int k = 0; k < 2; k++) {
        ur_dir *d = &u->slots[fd].d[k];
        if (!(events & (1 << k)))
            continue;
        WEFT_ASSERT(d->waits > 0);
        if (--d->waits > 0)
            continue;
        if (d->state == ST_QUEUED) {
            d->state = ST_IDLE; /* never submitted: the flush skips it */
        } else if (d->state == ST_INFLIGHT) {
            withdraw(u, fd, k);
        }
    }
    withdraw_now(u);
}

/* ---- file operations ---- */

/* A slot for op, growing the table; false if there is no memory. */
static bool op_slot(ur_poller *u, weft__op *op)
{
    if (u->nopfree == 0) {
        uint32_t n = u->nops ? 2 * u->nops : 64;
        weft__op **ops = weft__realloc(u->ops, n * sizeof(*ops));
        if (!ops)
            return false;
        u->ops = ops;
        uint32_t *fr = weft__realloc(u->opfree, n * sizeof(*fr));
        if (!fr)
            return false;
        u->opfree = fr;
        uint32_t *cs = weft__realloc(u->cancels, n * sizeof(*cs));
        if (!cs)
            return false;
        u->cancels = cs;
        for (uint32_t i = n; i > u->nops; i--)
            u->opfree[u->nopfree++] = i - 1;
        u->nops = n;
    }
    op->slot = u->opfree[--u->nopfree];
    u->ops[op->slot] = op;
    return true;
}

static int ur_op_submit(weft__poller *p, weft__op *op)
{
    ur_poller *u = (ur_poller *)p;
    if (!u->files || (op->code == WEFT__OP_RECV && !u->recv))
        return -ENOTSUP;
    if (!op_slot(u, op))
        return -ENOMEM;
    struct io_uring_sqe *sqe = sqe_get(u);
    if (!sqe) {
        u->ops[op->slot] = NULL;
        u->opfree[u->nopfree++] = op->slot;
        return -EAGAIN;
    }
    switch (op->code) {
    case WEFT__OP_OPEN:
        io_uring_prep_openat(sqe, AT_FDCWD, op->path, op->flags | O_CLOEXEC,
                             op->mode);
        /* Straight to the kernel's workers, as open(2) would run: the
         * inline try opens with O_NONBLOCK, which changes what an open
         * does (a FIFO's for writing says ENXIO instead of waiting for a
         * reader, one for reading does not wait for a writer). */
        io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
        break;
    case WEFT__OP_READ:
        io_uring_prep_read(sqe, op->fd, op->buf, op->n, (uint64_t)op->off);
        break;
    case WEFT__OP_WRITE:
        io_uring_prep_write(sqe, op->fd, op->buf, op->n, (uint64_t)op->off);
        break;
    case WEFT__OP_RECV:
        io_uring_prep_recv(sqe, op->fd, op->buf, op->n, 0);
        break;
    default:
        io_uring_prep_fsync(sqe, op->fd, 0);
        break;
    }
    io_uring_sqe_set_data64(sqe, (uint64_t)op->slot << 32 | UD_OP);
    /* At once: the operation's latency is the point, and the submission
     * costs what a pool thread's wake would. The kernel completes it
     * inline or from its own workers; the owner reads the completion at
     * its next look, which the pending count makes it take before it
     * sleeps elsewhere than in the ring. */
    if (!op->lazy)
        io_uring_submit(&u->ring);
    weft__pending_add(u->w, WEFT__PENDING_IO, 1);
    return 0;
}

static void ur_op_cancel(weft__poller *p, weft__op *op)
{
    ur_poller *u = (ur_poller *)p;
    WEFT_ASSERT(op->slot < u->nops && u->ops[op->slot] == op);
    struct io_uring_sqe *sqe = sqe_get(u);
    if (!sqe) {
        /* No entry to be had now: the next flush puts the cancel in (the
         * operation in flight keeps the owner polling meanwhile), unless
         * the operation completes first (op_done takes it out). */
        u->cancels[u->ncancels++] = op->slot;
        return;
    }
    io_uring_prep_cancel64(sqe, (uint64_t)op->slot << 32 | UD_OP, 0);
    io_uring_sqe_set_data64(sqe, UD_IGNORE);
    io_uring_submit(&u->ring);
}

/* The completion of the operation in slot i. */
static int op_done(ur_poller *u, uint32_t i, int32_t res)
{
    WEFT_ASSERT(i < u->nops && u->ops[i] != NULL);
    weft__op *op = u->ops[i];
    u->ops[i] = NULL;
    for (uint32_t k = 0; k < u->ncancels; k++) /* a cancel not put in */
        if (u->cancels[k] == i)
            u->cancels[k--] = u->cancels[--u->ncancels];
    u->opfree[u->nopfree++] = i;
    weft__pending_add(u->w, WEFT__PENDING_IO, -1);
    u->base.ops_done++;
    op->res = res;
    op->complete(op);
    return 1;
}

/* One completion: reported to io.c if it is the request in flight.
 * Returns 1 if it was that or a wake, 0 if it was consumed unseen. */
static int dispatch(ur_poller *u, uint64_t ud, int32_t res, uint32_t flags)
{
    unsigned seq = (unsigned)(ud >> UD_SEQ_SHIFT) & UD_SEQ_MASK;
    if (ud == UINT64_MAX) /* liburing's own timeout, where the kernel
                           * takes no timeout in io_uring_enter */
        return 0;
    if (seq == 0) {
        if ((uint32_t)ud == UD_OP)
            return op_done(u, (uint32_t)(ud >> 32), res);
        if (ud != UD_WAKE)
            return 0;
        uint64_t v;
        if (read(u->evfd, &v, sizeof v) < 0) { /* EAGAIN: already drained */
        }
        if (!(flags & IORING_CQE_F_MORE)) {
            u->wake_armed = false; /* armed again by the next flush */
            if (res == -EINVAL && u->multishot)
                u->multishot = false;
        }
        return 1;
    }
    int fd = (int)(ud & ((1u << UD_DIR_SHIFT) - 1));
    int dir = (int)(ud >> UD_DIR_SHIFT) & 1;
    uint32_t gen = (uint32_t)(ud >> 32);
    ur_dir *d = fd < u->nslots ? &u->slots[fd].d[dir] : NULL;
    if (!d || d->state != ST_INFLIGHT || d->seq != seq || d->gen != gen)
        return 0; /* withdrawn or replaced: nobody here needs it */
    d->state = ST_IDLE;
    unsigned what = WEFT__FD_READ | WEFT__FD_WRITE;
    if (res >= 0) {
        unsigned m = (unsigned)res;
        what = 0;
        if (m & (POLLIN | POLLRDHUP | POLLPRI | POLLHUP | POLLERR))
            what |= WEFT__FD_READ;
        if (m & (POLLOUT | POLLHUP | POLLERR))
            what |= WEFT__FD_WRITE;
        if (m & (POLLRDHUP | POLLPRI | POLLHUP | POLLERR))
            what |= WEFT__FD_HUP;
    } /* else an error (the number closed before the submission): the
       * waiters try again and meet it */
    weft__fd_ready(fd, gen, what);
    return 1;
}

/* Reads every completion there is, the kernel's overflow list included;
 * returns how many were reports or wakes. */
static int reap(ur_poller *u)
{
    int total = 0;
    for (;;) {
        struct io_uring_cqe *cqes[BATCH];
        unsigned n = io_uring_peek_batch_cqe(&u->ring, cqes, BATCH);
        if (n == 0) {
            if (!io_uring_cq_has_overflow(&u->ring))
                return total;
            io_uring_get_events(&u->ring); /* flushes the overflow in */
            if (!io_uring_cq_ready(&u->ring))
                return total;
            continue;
        }
        struct {
            uint64_t ud;
            int32_t res;
            uint32_t flags;
        } got[BATCH];
        for (unsigned i = 0; i < n; i++) {
            got[i].ud = cqes[i]->user_data;
            got[i].res = cqes[i]->res;
            got[i].flags = cqes[i]->flags;
        }
        io_uring_cq_advance(&u->ring, n);
        for (unsigned i = 0; i < n; i++)
            total += dispatch(u, got[i].ud, got[i].res, got[i].flags);
    }
}

static int ur_poll(weft__poller *p, int64_t timeout)
{
    ur_poller *u = (ur_poller *)p;
    bool flushed = flush(u);
    /* Withdrawals in the queue now: submitted below, not slept on (the
     * worker counted them pending to come here; it looks again). */
    bool rm_done = u->rm_pending && u->nrm == 0;
    if (!flushed || rm_done || io_uring_cq_ready(&u->ring) ||
        io_uring_cq_has_overflow(&u->ring))
        timeout = 0;
    if (weft__fault_fails(WEFT_FAULT_POLL)) {
        /* EINTR before the kernel took anything: nothing submitted,
         * nothing waited for; the completions already there are read. */
    } else if (timeout == 0) {
        if (io_uring_sq_ready(&u->ring))
            io_uring_submit(&u->ring);
    } else if (timeout == WEFT_NEVER) {
        io_uring_submit_and_wait(&u->ring, 1);
    } else {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec ts = {.tv_sec = timeout / WEFT_SEC,
                                       .tv_nsec = timeout % WEFT_SEC};
        io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1, &ts, NULL);
    }
    if (rm_done && io_uring_sq_ready(&u->ring) == 0) {
        u->rm_pending = false;
        weft__pending_add(u->w, WEFT__PENDING_IO, -1);
    }
    return reap(u);
}

static void ur_wake(weft__poller *p)
{
    ur_poller *u = (ur_poller *)p;
    uint64_t one = 1;
    if (write(u->evfd, &one, sizeof one) < 0) { /* full: it is awake */
    }
}

const weft__poller_ops weft__poller_uring = {
    .name = "io_uring",
    .init = ur_init,
    .poll = ur_poll,
    .wake = ur_wake,
    .wait = ur_wait,
    .arm = ur_arm,
    .cancel = ur_cancel,
    .forget = ur_forget,
    .op_submit = ur_op_submit,
    .op_cancel = ur_op_cancel,
    .fini = ur_fini,
};

#else /* built without liburing */

static weft__poller *ur_init(weft_worker *w, int *err)
{
    static atomic_int said;
    int no = 0;
    WEFT_UNUSED(w);
    if (cas_acq_rel(&said, &no, 1))
        fprintf(stderr, "weft: io_uring refused (this libweft was built "
                        "without liburing); using epoll\n");
    *err = -ENOSYS;
    return NULL;
}

const weft__poller_ops weft__poller_uring = {.name = "io_uring",
                                             .init = ur_init};

#endif
