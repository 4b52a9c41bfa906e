/* SPDX-License-Identifier: MIT */
/*
 * copy_file: copy a large file in chunks with bounded memory, reading the
 * next chunks while the last ones are written, with a progress count
 * (Go's io.Copy with a bufio pool, Tokio's tokio::fs with
 * tokio::io::copy_buf, Node's stream.pipeline).
 *
 * A reader task fills 64 KiB buffers with weft_file_pread and sends them
 * down a channel to a writer task, which writes them with
 * weft_file_pwrite and hands each buffer back on a second channel. Four
 * buffers exist per copy: memory stays at 256 KiB whatever the file's
 * size, and the buffers are reused, never freshly allocated (each copy
 * has its own: several may run at once). Neither task holds
 * its worker while the disk works. Exits 1 unless the copy has the
 * source's size and bytes; the demonstration runs two copies at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft.h"

#define CHUNK (64 * 1024)
#define NBUF 4

typedef struct chunk {
    char *data;
    int64_t off;
    size_t len; /* 0: the end */
} chunk;

typedef struct copy {
    int in, out;
    weft_chan *full, *empty; /* of chunk: filled by the reader, returned */
    int64_t copied;
} copy;

static int reader(void *arg)
{
    copy *c = arg;
    int64_t off = 0;
    for (;;) {
        chunk k;
        int rc = weft_chan_recv(c->empty, &k); /* waits for a free buffer */
        if (rc)
            return rc;
        ptrdiff_t n = weft_file_pread(c->in, k.data, CHUNK, off, WEFT_NEVER);
        if (n < 0)
            return (int)n;
        k.off = off;
        k.len = (size_t)n;
        rc = weft_chan_send(c->full, &k);
        if (rc || n == 0)
            return rc;
        off += n;
    }
}

static int writer(void *arg)
{
    copy *c = arg;
    for (;;) {
        chunk k;
        int rc = weft_chan_recv(c->full, &k);
        if (rc || k.len == 0)
            return rc;
        for (size_t done = 0; done < k.len;) {
            ptrdiff_t n = weft_file_pwrite(c->out, k.data + done, k.len - done,
                                           k.off + (int64_t)done, WEFT_NEVER);
            if (n < 0)
                return (int)n;
            done += (size_t)n;
        }
        c->copied += (int64_t)k.len;
        if (c->copied % (2 << 20) == 0)
            printf("  copied %lld MiB\n", (long long)(c->copied >> 20));
        rc = weft_chan_send(c->empty, &k); /* the buffer goes back */
        if (rc)
            return rc;
    }
}

/* Copies the file `from` to `to`; 0 or a negative error. */
static int copy_file(const char *from, const char *to, int64_t *copied)
{
    copy c = {.in = -1, .out = -1};
    /* This copy's own buffers: several copies may run at once. */
    char *bufs = malloc((size_t)NBUF * CHUNK);
    if (!bufs)
        return -ENOMEM;
    int rc = weft_file_open(&c.in, from, O_RDONLY, 0, WEFT_NEVER);
    if (rc == 0)
        rc = weft_file_open(&c.out, to, O_WRONLY | O_CREAT | O_TRUNC, 0644,
                            WEFT_NEVER);
    if (rc == 0)
        rc = weft_chan_new(&c.full, sizeof(chunk), NBUF);
    if (rc == 0)
        rc = weft_chan_new(&c.empty, sizeof(chunk), NBUF);
    for (int i = 0; rc == 0 && i < NBUF; i++)
        rc = weft_chan_try_send(c.empty, &(chunk){.data = bufs + i * CHUNK});
    if (rc == 0) {
        weft_scope *s;
        weft_scope_open(&s, NULL); /* WEFT_FAIL_FAST: one error stops both */
        weft_spawn(s, reader, &c);
        weft_spawn(s, writer, &c);
        rc = weft_scope_join(s);
        weft_scope_free(s);
    }
    if (rc == 0)
        rc = weft_file_fsync(c.out, WEFT_NEVER);
    if (c.full)
        weft_chan_unref(c.full);
    if (c.empty)
        weft_chan_unref(c.empty);
    if (c.in >= 0)
        weft_file_close(c.in);
    if (c.out >= 0)
        weft_file_close(c.out);
    free(bufs);
    *copied = c.copied;
    return rc;
}

/* ---- the demonstration: two files of 8 MiB and a bit, copied at once
 * and compared ---- */

#define SIZE (8 * 1024 * 1024 + 12345)

typedef struct job {
    const char *dir;
    int id;
} job;

static int copy_one(void *arg)
{
    const job *j = arg;
    char from[256], to[256];
    snprintf(from, sizeof from, "%s/from%d", j->dir, j->id);
    snprintf(to, sizeof to, "%s/to%d", j->dir, j->id);
    char *data = malloc(SIZE), *back = malloc(SIZE);
    int rc = data && back ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < SIZE; i++)
        data[i] = (char)(i * 7 + i / 4096 + (size_t)j->id * 131);
    int fd;
    if (rc == 0 && (rc = weft_file_open(&fd, from, O_WRONLY | O_CREAT | O_TRUNC,
                                        0644, WEFT_NEVER)) == 0) {
        ptrdiff_t n = weft_file_write(fd, data, SIZE, WEFT_NEVER);
        weft_file_close(fd);
        rc = n == SIZE ? 0 : -EIO;
    }
    int64_t copied = 0;
    if (rc == 0)
        rc = copy_file(from, to, &copied);
    printf("copy_file %d: %s, %lld bytes\n", j->id, weft_strerror(rc),
           (long long)copied);
    if (rc == 0 &&
        (rc = weft_file_open(&fd, to, O_RDONLY, 0, WEFT_NEVER)) == 0) {
        ptrdiff_t n = weft_file_pread(fd, back, SIZE + 1, 0, WEFT_NEVER);
        weft_file_close(fd);
        rc = n == SIZE && memcmp(data, back, SIZE) == 0 ? 0 : -EIO;
        printf("copy %d is %s\n", j->id, rc == 0 ? "the same" : "different");
    }
    unlink(from);
    unlink(to);
    free(data);
    free(back);
    return rc;
}

static int run(void *arg)
{
    job jobs[2] = {{arg, 1}, {arg, 2}};
    weft_scope *s;
    int rc = weft_scope_open(&s, NULL);
    if (rc)
        return rc;
    for (int i = 0; i < 2; i++)
        if (weft_spawn(s, copy_one, &jobs[i]) < 0)
            weft_scope_cancel(s);
    rc = weft_scope_join(s);
    weft_scope_free(s);
    return rc;
}

int main(void)
{
    char dir[] = "/tmp/weft-copy-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    weft_config cfg = {.workers = 2};
    int rc = weft_run(&cfg, run, dir);
    rmdir(dir);
    return rc == 0 ? 0 : 1;
}
