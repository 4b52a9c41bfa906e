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

/* Runs o; its result, or the wait's error (the call did not run). */
static ptrdiff_t file_call(file_op *o, weft_time deadline)
{
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
