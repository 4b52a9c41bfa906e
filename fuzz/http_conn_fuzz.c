/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: a connection of examples/http_server.c, driven from a
 * buffer. The input is the byte stream a client sends; it goes through
 * struct http_conn and http_answer as the server's loop feeds them (reads
 * of any size that fit the buffer, answers written in rounds when the out
 * buffer fills), three times: in the largest reads the buffer takes, in
 * reads of 1 to 64 bytes (sizes drawn from a hash of the input) with a
 * small out buffer, and, for inputs up to 1 KiB, a byte at a time. Each
 * must answer exactly as a model that parses the whole stream at once:
 * the same answers, the same count of complete requests, nothing after an
 * answer that closes; and the buffer must always keep room for a read.
 * scripts/fuzz.sh builds and runs it.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/http_parse.c"

#define CHECK(c)                                                               \
    do {                                                                       \
        if (!(c))                                                              \
            abort();                                                           \
    } while (0)

/* What came out of one run. */
struct result {
    char *out;     /* the answers, in order */
    size_t n, cap; /* bytes in out; its size */
    unsigned done; /* requests complete, head and body */
    bool close;    /* an answer closed the connection */
};

static void append(struct result *res, const char *p, size_t n)
{
    CHECK(res->n + n <= res->cap);
    memcpy(res->out + res->n, p, n);
    res->n += n;
}

/* The model: the whole stream parsed in place, request after request. */
static void model(const char *d, size_t n, struct result *res)
{
    size_t pos = 0;
    while (pos < n) {
        struct http_request r;
        int st = http_parse(d + pos, n - pos, &r);
        if (st == HTTP_MORE)
            break;
        size_t len;
        const char *a = answer_for(st, &len);
        append(res, a, len);
        if (st != HTTP_OK) {
            res->close = true;
            return;
        }
        pos += r.head;
        if (r.close) {
            res->close = true;
            res->done += r.body == 0;
            return;
        }
        if (r.body > n - pos)
            return; /* the body has not all come */
        pos += r.body;
        res->done++;
    }
}

/* A splitmix64 stream: read sizes. */
static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Feeds d[0..n) to a connection in reads of at most `most` bytes (0: as
 * many as fit; else 1 to `most`, drawn from *seed), answering into an out
 * buffer of cap bytes, as the server's loop does. */
static void feed(const char *d, size_t n, size_t most, uint64_t *seed,
                 size_t cap, struct result *res)
{
    static struct http_conn c;
    char out[4096];
    CHECK(cap <= sizeof out && cap >= HTTP_ANSWER_MAX);
    http_conn_init(&c);
    size_t pos = 0;
    while (pos < n && !c.close) {
        size_t room = sizeof c.in - c.have;
        CHECK(room > sizeof c.in - HTTP_MAX_HEADER); /* a read has room */
        size_t k = most ? 1 + next(seed) % most : room;
        k = k < room ? k : room;
        k = k < n - pos ? k : n - pos;
        memcpy(c.in + c.have, d + pos, k);
        c.have += k;
        pos += k;
        do {
            size_t m = http_answer(&c, out, cap);
            CHECK(m <= cap);
            append(res, out, m);
        } while (c.full);
        CHECK(c.used == 0);
        CHECK(c.close || c.have < HTTP_MAX_HEADER);
    }
    res->done = c.done;
    res->close = c.close;
}

static bool same(const struct result *a, const struct result *b)
{
    return a->n == b->n && !memcmp(a->out, b->out, a->n) &&
           a->done == b->done && a->close == b->close;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *d = (const char *)data;
    /* At most one answer per 18 bytes ("A * HTTP/1.0\r\n\r\n" and a
     * byte), and one more. */
    size_t cap = (size / 16 + 2) * HTTP_ANSWER_MAX;
    struct result want = {malloc(cap), 0, cap, 0, false};
    struct result got = {malloc(cap), 0, cap, 0, false};
    CHECK(want.out && got.out);
    model(d, size, &want);

    feed(d, size, 0, NULL, 4096, &got);
    CHECK(same(&got, &want));

    uint64_t seed = 14695981039346656037ull; /* FNV-1a of the input */
    for (size_t i = 0; i < size; i++)
        seed = (seed ^ data[i]) * 1099511628211ull;
    got.n = 0;
    feed(d, size, 64, &seed, HTTP_ANSWER_MAX + seed % 256, &got);
    CHECK(same(&got, &want));

    if (size <= 1024) {
        got.n = 0;
        feed(d, size, 1, &seed, 4096, &got);
        CHECK(same(&got, &want));
    }
    free(want.out);
    free(got.out);
    return 0;
}
