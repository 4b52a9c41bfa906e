/* SPDX-License-Identifier: MIT */
/*
 * Files (weft.h section 8, "Files"): open, read, write, pread, pwrite,
 * fsync and close of regular files without holding the worker.
 *
 * A regular file is always "ready" to a poller (epoll refuses it, a poll
 * reports it ready at once), yet a read of a page not in the page cache
 * waits for the disk. So each call runs where it may wait: on the
 * blocking pool, as a call that is waited for once it runs
 * (weft__blocking_finish). That is what makes the buffers safe: the
 * caller's buffer is written by the call only while the caller waits for
 * it, and a deadline or a cancel that comes while the call runs waits for
 * its end and returns its result (the bytes it read are never lost, the
 * descriptor it opened is the caller's); one that comes before the call
 * started drops it (-ETIMEDOUT, -ECANCELED: it had no effect). The same
 * contract holds for any backend that may run these calls later (an
 * io_uring one: a request in flight is cancelled, and its completion
 * waited for, before the call returns).
 */
#include "io/io.h"
#include "sched/clock.h"
#include "sched/poller.h"
#include "wait/wait.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

/* Linux moves at most this much in one read or write (read(2)). */
#define MAX_IO ((size_t)0x7ffff000)

enum { OP_OPEN, OP_READ, OP_WRITE, OP_PREAD, OP_PWRITE, OP_FSYNC };

/* One call, on the caller's stack (the pool's call is waited for). */
typedef struct file_op {
    int op;
    int fd;
    const char *path;
    int flags;
    unsigned mode;
    void *buf;
    size_t n;
    int64_t off;
    ptrdiff_t res; /* the system call's result, or -errno */
} file_op;

static ptrdiff_t sys(const file_op *o)
{
    switch (o->op) {
    case OP_OPEN:
        return open(o->path, o->flags | O_CLOEXEC, (mode_t)o->mode);
    case OP_READ:
        return read(o->fd, o->buf, o->n);
    case OP_WRITE:
        return write(o->fd, o->buf, o->n);
    case OP_PREAD:
        return pread(o->fd, o->buf, o->n, (off_t)o->off);
    case OP_PWRITE:
        return pwrite(o->fd, o->buf, o->n, (off_t)o->off);
    default:
        return fsync(o->fd);
    }
}

/* On a pool thread. */
static int run(void *arg)
{
    file_op *o = arg;
    ptrdiff_t r;
    do
        r = sys(o);
    while (r < 0 && errno == EINTR);
    o->res = r < 0 ? -errno : r;
    return 0;
}

/* ---- through the worker's ring ---- */

static const weft__wait_kind wk_file = {WEFT_WAIT_BLOCKING, "file"};

/* An operation in the ring and the task that waits for it, on the task's
 * stack. */
typedef struct ring_call {
    weft__op op;
    weft__lock lock;      /* guards done and waiter */
    bool done;            /* op.res is the result */
    weft__waiter *waiter; /* the task, parked for it; or NULL */
} ring_call;

/* The poller's owner thread, once: the result is in; the waiting task, if
 * parked, is woken. */
static void ring_complete(weft__op *op)
{
    ring_call *c = (ring_call *)op;
    weft__lock_acquire(&c->lock);
    c->done = true;
    weft__waiter *w = weft__slot_claim(&c->waiter);
    weft_task *t = w ? w->task : NULL;
    weft__lock_release(&c->lock);
    if (t)
        weft__wake_finish(t, 0);
}

/* Parks until c is done, or the deadline or a cancel (unless firm);
 * returns 0 once done, else the park's -ETIMEDOUT or -ECANCELED. */
static int ring_wait(ring_call *c, int64_t deadline, int flags)
{
    weft__lock_acquire(&c->lock);
    if (c->done) {
        weft__lock_release(&c->lock);
        return 0;
    }
    weft__waiter w;
    weft__waiter_init(&w, NULL, 0);
    int rc = weft__wait(&w, &(weft__wait_spec){.kind = &wk_file,
                                               .obj = c,
                                               .lock = &c->lock,
                                               .slot = &c->waiter,
                                               .deadline = deadline,
                                               .flags = flags});
    return rc;
}

static const uint8_t ring_code[] = {
    [OP_OPEN] = WEFT__OP_OPEN,    [OP_READ] = WEFT__OP_READ,
    [OP_WRITE] = WEFT__OP_WRITE,  [OP_PREAD] = WEFT__OP_READ,
    [OP_PWRITE] = WEFT__OP_WRITE, [OP_FSYNC] = WEFT__OP_FSYNC,
};

/* Runs o in p's ring, waiting for it, with the same contract as the
 * pool's (file.c's head), and sets *res. Returns false if it could not be
 * started (the kernel lacks an operation, no room in the ring): run it on
 * the pool. */
static bool ring_run(weft_worker *wk, weft__poller *p, file_op *o,
                     int64_t deadline, ptrdiff_t *res)
{
    bool plain = o->op == OP_READ || o->op == OP_WRITE;
    ring_call c = {.op = {.code = ring_code[o->op],
                          .fd = o->fd,
                          .path = o->path,
                          .flags = o->flags,
                          .mode = o->mode,
                          .buf = o->buf,
                          .n = (uint32_t)o->n,
                          .off = plain ? -1 : o->off, /* -1: its offset */
                          .complete = ring_complete}};
    for (;;) {
        if (p->ops->op_submit(p, &c.op) != 0)
            return false;
        int rc = ring_wait(&c, deadline, 0);
        if (rc) {
            /* A deadline or a cancel: ask the kernel to stop it, and wait
             * for whichever comes, its cancel or its own result. Unless
             * its completion came in after the wake and before this task
             * ran (the worker read it meanwhile): its slot in the ring is
             * free then, maybe another call's. */
            weft__lock_acquire(&c.lock);
            bool done = c.done;
            weft__lock_release(&c.lock);
            if (!done && weft__tl_worker == wk)
                p->ops->op_cancel(p, &c.op);
            int frc = ring_wait(&c, WEFT_NEVER, WEFT__WAIT_FIRM);
            WEFT_ASSERT(frc == 0);
            (void)frc;
            /* Stopped before it moved anything (an interrupted read or
             * write transferred nothing). */
            *res = c.op.res == -ECANCELED || weft__op_interrupted(c.op.res)
                       ? rc
                       : c.op.res;
            return true;
        }
        if (!weft__op_interrupted(c.op.res)) {
            *res = c.op.res;
            return true;
        }
        c.done = false; /* interrupted, nothing moved: again */
    }
}

/* Whether the ring runs o as its system call would. The ring reads and
 * writes a descriptor that has no offset (a pipe, a socket, a terminal)
 * at its stream, where pread(2) and pwrite(2) say -ESPIPE: such a pread
 * or pwrite runs on the pool. */
static bool ring_fits(const file_op *o)
{
    if (o->op != OP_PREAD && o->op != OP_PWRITE)
        return true;
    /* The type only, never synced with a network file system's server:
     * nothing here waits. */
    struct statx st;
    return statx(o->fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE,
                 &st) != 0 ||
           S_ISREG(st.stx_mode) || S_ISBLK(st.stx_mode);
}

/* Runs o; its result, or the wait's error (the call did not run). */
static ptrdiff_t file_call(file_op *o, weft_time deadline)
{
    weft_worker *wk = weft__tl_worker;
    if (wk && o->n <= UINT32_MAX && ring_fits(o)) {
        int err;
        weft__poller *p = weft__io_poller(wk, &err);
        if (p && p->ops->op_submit) {
            int rc = weft__checkpoint();
            if (rc)
                return rc;
            if (deadline != WEFT_NEVER &&
                (weft__wait_past(deadline) ||
                 deadline <= weft__now(weft__wpub(wk)->rt)))
                return -ETIMEDOUT;
            /* The request is in this worker's ring: the task stays here
             * until its completion (a task that may move, too). */
            weft_task *t = ld_rlx(&weft__wpub(wk)->cur);
            ptrdiff_t r;
            weft__task_anchor(t, 1);
            bool ran = ring_run(wk, p, o, deadline, &r);
            weft__task_anchor(t, -1);
            if (ran)
                return r;
        }
    }
    int rc = weft__blocking_finish(run, o, deadline);
    return rc < 0 ? rc : o->res;
}

int weft_file_open(int *fd, const char *path, int flags, unsigned mode,
                   weft_time deadline)
{
    if (!fd || !path)
        return -EINVAL;
    *fd = -1;
    file_op o = {.op = OP_OPEN, .path = path, .flags = flags, .mode = mode};
    ptrdiff_t r = file_call(&o, deadline);
    if (r < 0)
        return (int)r;
    *fd = (int)r;
    return 0;
}

static ptrdiff_t rw(int op, int fd, void *buf, size_t n, int64_t off,
                    weft_time deadline)
{
    if (fd < 0)
        return -EBADF;
    if ((!buf && n) || off < 0)
        return -EINVAL;
    file_op o = {.op = op,
                 .fd = fd,
                 .buf = buf,
                 .n = n < MAX_IO ? n : MAX_IO,
                 .off = off};
    return file_call(&o, deadline);
}

ptrdiff_t weft_file_read(int fd, void *buf, size_t n, weft_time deadline)
{
    return rw(OP_READ, fd, buf, n, 0, deadline);
}

ptrdiff_t weft_file_write(int fd, const void *buf, size_t n, weft_time deadline)
{
    return rw(OP_WRITE, fd, (void *)buf, n, 0, deadline);
}

ptrdiff_t weft_file_pread(int fd, void *buf, size_t n, int64_t offset,
                          weft_time deadline)
{
    return rw(OP_PREAD, fd, buf, n, offset, deadline);
}

ptrdiff_t weft_file_pwrite(int fd, const void *buf, size_t n, int64_t offset,
                           weft_time deadline)
{
    return rw(OP_PWRITE, fd, (void *)buf, n, offset, deadline);
}

int weft_file_fsync(int fd, weft_time deadline)
{
    return (int)rw(OP_FSYNC, fd, NULL, 0, 0, deadline);
}

int weft_file_close(int fd)
{
    if (fd < 0)
        return -EBADF;
    /* Linux frees the number whatever close returns: EINTR is no reason
     * to close again (another thread may have the number by then). */
    if (close(fd) != 0 && errno != EINTR)
        return -errno;
    return 0;
}
