/* SPDX-License-Identifier: MIT */
/*
 * examples/http_parse.c, the protocol of examples/http_server.c: what the
 * parser accepts and how it frames it, what it rejects (each case of RFC
 * 9112 that lets two parsers disagree on where a request ends), and how
 * http_answer answers a connection's buffer: pipelined, split, with
 * bodies, with an out buffer that fills up. No runtime, no I/O.
 */
#include "t.h"

#include "../examples/http_parse.c"

/* http_parse on a string literal, NULs included. */
#define PARSE(lit, r) http_parse((lit), sizeof(lit) - 1, (r))

static const char OK_ANSWER[] = "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n"
                                "Content-Type: text/plain\r\n\r\nHello, World!";

/* Asserts that lit parses as HTTP_OK with this framing. */
#define ACCEPT(lit, body_, close_)                                             \
    do {                                                                       \
        struct http_request r_ = {0, 99, true};                                \
        ASSERT_EQ(PARSE(lit, &r_), HTTP_OK);                                   \
        ASSERT_EQ(r_.head, sizeof(lit) - 1);                                   \
        ASSERT_EQ(r_.body, (body_));                                           \
        ASSERT_EQ(r_.close, (close_));                                         \
    } while (0)

#define REJECT(lit, status)                                                    \
    do {                                                                       \
        struct http_request r_;                                                \
        ASSERT_EQ(PARSE(lit, &r_), (status));                                  \
    } while (0)

#define H "GET / HTTP/1.1\r\nHost: x\r\n"

/* ---- accepted ---- */

TEST(accepts_minimal_requests)
{
    ACCEPT("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 0, false);
    ACCEPT("GET / HTTP/1.1\r\nHost:\r\n\r\n", 0, false); /* empty host */
    ACCEPT("GET / HTTP/1.0\r\n\r\n", 0, true); /* 1.0: no Host needed */
    ACCEPT("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 0, false);
    ACCEPT("m-1.x~ /a?b=c&d=%20#f HTTP/1.1\r\nhOsT: x\r\n\r\n", 0, false);
    ACCEPT(H "X-Empty:\r\nX-Tab:\tv\t\r\nX-Obs: \x80\xff\r\n\r\n", 0, false);
    ACCEPT(H "X-Many:  a  b  \r\n\r\n", 0, false);
}

TEST(accepts_connection_options)
{
    ACCEPT(H "Connection: close\r\n\r\n", 0, true);
    ACCEPT(H "Connection: keep-alive, CLOSE\r\n\r\n", 0, true);
    ACCEPT(H "Connection: ,, foo ,close,\r\n\r\n", 0, true);
    ACCEPT(H "Connection: closed\r\n\r\n", 0, false); /* a token: whole */
    ACCEPT(H "Connection: keep-alive\r\n\r\n", 0, false);
    ACCEPT("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 0, false);
    ACCEPT("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", 0, true);
}

TEST(accepts_content_length)
{
    ACCEPT(H "Content-Length: 5\r\n\r\n", 5, false);
    ACCEPT(H "Content-Length: 0\r\n\r\n", 0, false);
    ACCEPT(H "content-length:7\r\n\r\n", 7, false);
    ACCEPT(H "Content-Length: \t 12 \t\r\n\r\n", 12, false); /* OWS */
    ACCEPT(H "Content-Length: 0005\r\n\r\n", 5, false);
    ACCEPT(H "Content-Length: 1048576\r\n\r\n", HTTP_MAX_BODY, false);
    /* The same length twice (RFC 9110, 8.6 lets a recipient take it). */
    ACCEPT(H "Content-Length: 5\r\nContent-Length: 005\r\n\r\n", 5, false);
    ACCEPT(H "Content-Length: 0\r\nContent-Length: 00\r\n\r\n", 0, false);
}

TEST(head_complete_only_at_the_empty_line)
{
    static const char req[] = H "Content-Length: 3\r\n\r\nabc";
    size_t head = sizeof(req) - 1 - 3;
    struct http_request r;
    for (size_t n = 0; n < head; n++)
        ASSERT_EQ(http_parse(req, n, &r), HTTP_MORE);
    for (size_t n = head; n < sizeof req; n++) {
        ASSERT_EQ(http_parse(req, n, &r), HTTP_OK);
        ASSERT_EQ(r.head, head);
        ASSERT_EQ(r.body, 3);
    }
}

/* The head may be HTTP_MAX_HEADER bytes, not one more; without its end,
 * the parser waits for HTTP_MAX_HEADER - 1 bytes, not HTTP_MAX_HEADER. */
TEST(header_size_limit)
{
    static char buf[HTTP_MAX_HEADER + 16];
    const char *start = H "X-Pad: ";
    size_t s = strlen(start);
    memcpy(buf, start, s);
    memset(buf + s, 'a', sizeof buf - s);
    struct http_request r;
    /* The head ends at exactly HTTP_MAX_HEADER: accepted. */
    memcpy(buf + HTTP_MAX_HEADER - 4, "\r\n\r\n", 4);
    ASSERT_EQ(http_parse(buf, HTTP_MAX_HEADER, &r), HTTP_OK);
    ASSERT_EQ(r.head, HTTP_MAX_HEADER);
    ASSERT_EQ(http_parse(buf, sizeof buf, &r), HTTP_OK);
    /* One byte more: 431, once HTTP_MAX_HEADER bytes have come. */
    memset(buf + s, 'a', sizeof buf - s);
    memcpy(buf + HTTP_MAX_HEADER - 3, "\r\n\r\n", 4);
    ASSERT_EQ(http_parse(buf, HTTP_MAX_HEADER - 1, &r), HTTP_MORE);
    ASSERT_EQ(http_parse(buf, HTTP_MAX_HEADER, &r), HTTP_HEADER_LARGE);
    ASSERT_EQ(http_parse(buf, sizeof buf, &r), HTTP_HEADER_LARGE);
}

/* ---- rejected: framing (RFC 9112, 6.3) ---- */

TEST(rejects_conflicting_content_lengths)
{
    REJECT(H "Content-Length: 5\r\nContent-Length: 6\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length: 6\r\nContent-Length: 5\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length: 5\r\nContent-Length: 50\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length: 0\r\nContent-Length: 5\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length: 5\r\nX: y\r\ncontent-length: 1\r\n\r\n",
           HTTP_BAD);
    /* Equal once saturated, different all the same. */
    REJECT(H "Content-Length: 99999999999999999999\r\n"
             "Content-Length: 99999999999999999998\r\n\r\n",
           HTTP_BAD);
}

TEST(rejects_malformed_content_length)
{
    REJECT(H "Content-Length: 5 junk\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length: 5 26\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length: 5,5\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length: 5, 5\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length: -1\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length: -0\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length: +5\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length: 0x5\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length: 5.0\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length:\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length: \r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length: 1\x00"
             "0\r\n\r\n",
           HTTP_BAD);
    /* Too large to be a number is too large, and still a number. */
    REJECT(H "Content-Length: 1048577\r\n\r\n", HTTP_TOO_LARGE);
    REJECT(H "Content-Length: 18446744073709551617\r\n\r\n", HTTP_TOO_LARGE);
    REJECT(H "Content-Length: 99999999999999999999999999999999\r\n\r\n",
           HTTP_TOO_LARGE);
    REJECT(H "Content-Length: 99999999999999999999 x\r\n\r\n", HTTP_BAD);
}

TEST(rejects_transfer_encoding)
{
    /* With Content-Length: 6.3 says TE wins; we do not read chunks, so
     * the request is refused either way, and the connection closed. */
    REJECT(H "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
           HTTP_BAD);
    REJECT(H "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
           HTTP_BAD);
    /* Chunked not last: the length cannot be known. */
    REJECT(H "Transfer-Encoding: gzip\r\n\r\n", HTTP_BAD);
    REJECT(H "Transfer-Encoding: chunked, gzip\r\n\r\n", HTTP_BAD);
    REJECT(H "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n",
           HTTP_BAD);
    REJECT(H "Transfer-Encoding:\r\n\r\n", HTTP_BAD);
    REJECT(H "Transfer-Encoding: xchunked\r\n\r\n", HTTP_BAD);
    /* HTTP/1.0 with a Transfer-Encoding: faulty framing (6.1). */
    REJECT("GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", HTTP_BAD);
    /* Well-formed chunked: not implemented here. */
    REJECT(H "Transfer-Encoding: chunked\r\n\r\n", HTTP_NOT_IMPLEMENTED);
    REJECT(H "Transfer-Encoding: gzip, CHUNKED \r\n\r\n", HTTP_NOT_IMPLEMENTED);
}

/* ---- rejected: characters and line structure ---- */

TEST(rejects_control_characters_in_values)
{
    REJECT(H "X: a\x00"
             "b\r\n\r\n",
           HTTP_BAD);
    REJECT(H "X: a\rb\r\n\r\n", HTTP_BAD); /* bare CR */
    REJECT(H "X: a\nb\r\n\r\n", HTTP_BAD); /* bare LF */
    REJECT(H "X: a\r\r\n\r\n", HTTP_BAD);  /* CR CR LF */
    REJECT(H "X: a\x01"
             "b\r\n\r\n",
           HTTP_BAD);
    REJECT(H "X: a\x7f"
             "b\r\n\r\n",
           HTTP_BAD);
    REJECT(H "X: \x1b[31m\r\n\r\n", HTTP_BAD);
    REJECT("GET / HTTP/1.1\r\nHost: x\n\r\n\r\n", HTTP_BAD); /* LF alone */
    REJECT("GET / HTTP/1.1\nHost: x\r\n\r\n", HTTP_BAD);
    /* A value made of a bare LF hiding a second request. */
    REJECT(H "X: a\nContent-Length: 5\r\n\r\n", HTTP_BAD);
}

TEST(rejects_malformed_header_lines)
{
    REJECT(H "X: a\r\n b\r\n\r\n", HTTP_BAD);  /* obs-fold, SP */
    REJECT(H "X: a\r\n\tb\r\n\r\n", HTTP_BAD); /* obs-fold, HTAB */
    REJECT("GET / HTTP/1.1\r\n Host: x\r\n\r\n", HTTP_BAD);
    REJECT(H "Content-Length : 5\r\n\r\n", HTTP_BAD); /* space, colon */
    REJECT(H "Content-Length\t: 5\r\n\r\n", HTTP_BAD);
    REJECT(H "No colon\r\n\r\n", HTTP_BAD);
    REJECT(H "NoColon\r\n\r\n", HTTP_BAD);
    REJECT(H ": no name\r\n\r\n", HTTP_BAD);
    REJECT(H "X(y): z\r\n\r\n", HTTP_BAD);
    REJECT(H "X\x00: z\r\n\r\n", HTTP_BAD);
}

TEST(rejects_malformed_request_lines)
{
    REJECT("GARBAGE\r\n\r\n", HTTP_BAD);
    REJECT("\r\n\r\n", HTTP_BAD);
    REJECT("GET /\r\nHost: x\r\n\r\n", HTTP_BAD);
    REJECT("GET  / HTTP/1.1\r\nHost: x\r\n\r\n", HTTP_BAD);
    REJECT("GET /  HTTP/1.1\r\nHost: x\r\n\r\n", HTTP_BAD);
    REJECT("GET / HTTP/1.1 \r\nHost: x\r\n\r\n", HTTP_BAD);
    REJECT("GET\t/ HTTP/1.1\r\nHost: x\r\n\r\n", HTTP_BAD);
    REJECT(" GET / HTTP/1.1\r\nHost: x\r\n\r\n", HTTP_BAD);
    REJECT("GET / HTTP/1.2\r\nHost: x\r\n\r\n", HTTP_BAD);
    REJECT("GET / HTTP/2.0\r\nHost: x\r\n\r\n", HTTP_BAD);
    REJECT("GET / http/1.1\r\nHost: x\r\n\r\n", HTTP_BAD);
    REJECT("GET / HTTP/1.10\r\nHost: x\r\n\r\n", HTTP_BAD);
    REJECT("GET /\x80 HTTP/1.1\r\nHost: x\r\n\r\n", HTTP_BAD);
    REJECT("GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n", HTTP_BAD);
    REJECT("G(T / HTTP/1.1\r\nHost: x\r\n\r\n", HTTP_BAD);
    REJECT("GET / HTTP/1.1\r\r\nHost: x\r\n\r\n", HTTP_BAD);
}

TEST(rejects_host_count)
{
    REJECT("GET / HTTP/1.1\r\n\r\n", HTTP_BAD);
    REJECT("GET / HTTP/1.1\r\nX-Host: x\r\n\r\n", HTTP_BAD);
    REJECT(H "Host: y\r\n\r\n", HTTP_BAD);
    REJECT("GET / HTTP/1.0\r\nHost: x\r\nHost: x\r\n\r\n", HTTP_BAD);
}

/* ---- http_answer ---- */

/* Copies lit into c's buffer after what is there. */
static void feed(struct http_conn *c, const char *s, size_t n)
{
    ASSERT(c->have + n <= sizeof c->in);
    memcpy(c->in + c->have, s, n);
    c->have += n;
}
#define FEED(c, lit) feed((c), (lit), sizeof(lit) - 1)

/* Is out[0..n) k OK answers? */
static bool oks(const char *out, size_t n, size_t k)
{
    size_t len = sizeof OK_ANSWER - 1;
    if (n != k * len)
        return false;
    for (size_t i = 0; i < k; i++)
        if (memcmp(out + i * len, OK_ANSWER, len))
            return false;
    return true;
}

TEST(answers_pipelined_and_split_requests)
{
    static struct http_conn c;
    char out[4096];
    FEED(&c, H "\r\n" H "\r\n" H "\r\nGET / HT");
    size_t n = http_answer(&c, out, sizeof out);
    ASSERT(oks(out, n, 3));
    ASSERT_EQ(c.done, 3);
    ASSERT(!c.full && !c.close);
    ASSERT_EQ(c.have, 8); /* the start of the fourth, moved to the front */
    ASSERT(memcmp(c.in, "GET / HT", 8) == 0);
    ASSERT_EQ(http_answer(&c, out, sizeof out), 0);
    FEED(&c, "TP/1.1\r\nHost: x\r\n");
    ASSERT_EQ(http_answer(&c, out, sizeof out), 0);
    FEED(&c, "\r\n");
    n = http_answer(&c, out, sizeof out);
    ASSERT(oks(out, n, 1));
    ASSERT_EQ(c.done, 4);
    ASSERT_EQ(c.have, 0);
}

TEST(answers_skip_bodies)
{
    static struct http_conn c;
    char out[4096];
    /* Answered when its head is in; done once its body has gone by. */
    FEED(&c, H "Content-Length: 10\r\n\r\nabcdef");
    size_t n = http_answer(&c, out, sizeof out);
    ASSERT(oks(out, n, 1));
    ASSERT_EQ(c.done, 0);
    ASSERT_EQ(c.skip, 4);
    ASSERT_EQ(c.have, 0);
    FEED(&c, "gh");
    ASSERT_EQ(http_answer(&c, out, sizeof out), 0);
    ASSERT_EQ(c.skip, 2);
    /* The body's last bytes look like a request: they are body. */
    FEED(&c, "\r\n" H "\r\n");
    n = http_answer(&c, out, sizeof out);
    ASSERT(oks(out, n, 1));
    ASSERT_EQ(c.done, 2);
    ASSERT_EQ(c.skip, 0);
    ASSERT_EQ(c.have, 0);
}

TEST(answers_until_an_error_then_closes)
{
    static struct http_conn c;
    char out[4096];
    FEED(&c, H "\r\nGET / HTTP/1.1\r\nX: a\nb\r\n\r\n" H "\r\n");
    size_t n = http_answer(&c, out, sizeof out);
    size_t ok = sizeof OK_ANSWER - 1;
    ASSERT(n > ok && oks(out, ok, 1));
    ASSERT(strncmp(out + ok, "HTTP/1.1 400 ", 13) == 0);
    ASSERT(c.close);
    ASSERT_EQ(http_answer(&c, out, sizeof out), 0); /* nothing more */
}

TEST(answers_connection_close_last)
{
    static struct http_conn c;
    char out[4096];
    FEED(&c, H "Connection: close\r\n\r\n" H "\r\n");
    size_t n = http_answer(&c, out, sizeof out);
    ASSERT(oks(out, n, 1));
    ASSERT(c.close);
}

TEST(answers_in_rounds_when_out_fills)
{
    static struct http_conn c;
    size_t len = sizeof OK_ANSWER - 1;
    char out[4096];
    for (int i = 0; i < 10; i++)
        FEED(&c, H "\r\n");
    size_t cap = 3 * len + len / 2, total = 0;
    int rounds = 0;
    do {
        size_t n = http_answer(&c, out, cap);
        ASSERT(oks(out, n, n / len));
        total += n / len;
        rounds++;
    } while (c.full);
    ASSERT_EQ(total, 10);
    ASSERT_EQ(rounds, 4);
    ASSERT_EQ(c.done, 10);
    ASSERT_EQ(c.have, 0);
}

TEST(answers_oversized_heads_and_bodies)
{
    static struct http_conn c;
    char out[4096];
    /* A head that never ends: 431 once the buffer holds HTTP_MAX_HEADER
     * bytes, so a read always has room. */
    FEED(&c, H "X: ");
    while (c.have < HTTP_MAX_HEADER - 1) {
        feed(&c, "a", 1);
        ASSERT_EQ(http_answer(&c, out, sizeof out), 0);
        ASSERT(c.have < HTTP_MAX_HEADER);
    }
    feed(&c, "a", 1);
    size_t n = http_answer(&c, out, sizeof out);
    ASSERT(n > 13 && strncmp(out, "HTTP/1.1 431 ", 13) == 0);
    ASSERT(c.close);
    http_conn_init(&c);
    FEED(&c, H "Content-Length: 2000000\r\n\r\n");
    n = http_answer(&c, out, sizeof out);
    ASSERT(n > 13 && strncmp(out, "HTTP/1.1 413 ", 13) == 0);
    ASSERT(c.close);
}
