/* SPDX-License-Identifier: MIT */
/*
 * file: read a file in 64 KiB chunks, three ways, and print the time per
 * chunk of each: plain read(2) on one thread (the floor), weft_file_read
 * on the blocking pool (the epoll poller), and weft_file_read through the
 * worker's io_uring ring. The file (N MiB, default 256) is written first
 * and read once before the rounds, so the page cache holds it: the figure
 * is each way's cost per call, not the disk's. One worker, one task.
 *
 *   build/bench/bench_file [MiB]
 *
 * Prints, per way, `BENCH file-<way> weft <ns> ns/chunk` (ways: read,
 * pool, uring; uring only where the kernel gives a ring), the median of
 * five rounds.
 */
#include "bench.h"
#include "weft.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define CHUNK (64 * 1024)
#define ROUNDS 5

static char path[64];
static long mib;
static char buf[CHUNK];

/* Reads the whole file once; its chunks, or -1. */
static long read_plain(void)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    long n = 0;
    ssize_t r;
    while ((r = read(fd, buf, CHUNK)) > 0)
        n++;
    close(fd);
    return r < 0 ? -1 : n;
}

static int read_weft(void *arg)
{
    long *chunks = arg;
    int fd;
    if (weft_file_open(&fd, path, O_RDONLY, 0, WEFT_NEVER) != 0)
        return -1;
    long n = 0;
    ptrdiff_t r;
    while ((r = weft_file_read(fd, buf, CHUNK, WEFT_NEVER)) > 0)
        n++;
    weft_file_close(fd);
    *chunks = r < 0 ? -1 : n;
    return 0;
}

static int poller_is_uring(void *arg)
{
    const char *name = weft_poller_name();
    *(int *)arg = name && strcmp(name, "io_uring") == 0;
    return 0;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* way: 0 plain, 1 pool, 2 uring. The median ns per chunk, or -1. */
static int64_t measure(int way)
{
    int64_t t[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        long chunks;
        int64_t t0 = bench_clock_ns();
        if (way == 0) {
            chunks = read_plain();
        } else {
            weft_config cfg = {.workers = 1,
                               .poller = way == 2 ? WEFT_POLLER_IO_URING
                                                  : WEFT_POLLER_EPOLL};
            if (weft_run(&cfg, read_weft, &chunks) != 0)
                chunks = -1;
        }
        int64_t ns = bench_clock_ns() - t0;
        if (chunks != mib * 16)
            return -1;
        t[r] = ns / chunks;
    }
    qsort(t, ROUNDS, sizeof *t, cmp64);
    return t[ROUNDS / 2];
}

int main(int argc, char **argv)
{
    mib = bench_n(argc, argv, 256);
    snprintf(path, sizeof path, "/tmp/weft-bench-file-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return 1;
    memset(buf, 'x', sizeof buf);
    for (long i = 0; i < mib * 16; i++)
        if (write(fd, buf, CHUNK) != CHUNK)
            return 1;
    close(fd);
    int rc = 0;
    if (read_plain() != mib * 16) /* into the page cache */
        rc = 1;
    static const char *const names[] = {"read", "pool", "uring"};
    int uring = 0;
    weft_config probe = {.workers = 1, .poller = WEFT_POLLER_IO_URING};
    weft_run(&probe, poller_is_uring, &uring);
    for (int way = 0; way < 3 && rc == 0; way++) {
        if (way == 2 && !uring)
            break;
        int64_t ns = measure(way);
        if (ns < 0) {
            rc = 1;
            break;
        }
        printf("BENCH file-%s weft %lld ns/chunk\n", names[way], (long long)ns);
    }
    unlink(path);
    return rc;
}
