/* SPDX-License-Identifier: MIT */
/*
 * http_parse: the HTTP/1.1 side of examples/http_server.c, without any
 * I/O, so that a unit test (test/test_http_parse.c) and the fuzzers
 * (fuzz/) drive it from buffers. Part of the example, not of weft.
 *
 * http_parse() reads one request's line and headers and says how the
 * message is framed; http_answer() answers the complete requests a
 * connection's buffer holds (every request gets "Hello, World!"),
 * skipping their bodies.
 *
 * The parser is strict where leniency lets two parsers disagree on where
 * a request ends (request smuggling; RFC 9112, section 6.3): it answers
 * 400, and the connection closes, for a malformed request line (the
 * version must be HTTP/1.0 or HTTP/1.1); a header line without a name and
 * colon, with whitespace before the colon, or starting with whitespace
 * (obs-fold); NUL, a bare CR, a bare LF or another control character
 * (HTAB aside) anywhere in the head; a Content-Length that is not 1*DIGIT
 * ("5 junk", "5 26", "-1", "+5", "5, 5") or two Content-Length fields of
 * different values; Transfer-Encoding with Content-Length, in an HTTP/1.0
 * request, or without chunked as its last coding; two Host fields, or none
 * in HTTP/1.1. Lines end with CRLF only. A valid Transfer-Encoding gets
 * 501 (bodies in chunks are not read here), a body over HTTP_MAX_BODY gets
 * 413, a head over HTTP_MAX_HEADER gets 431; each closes the connection.
 */
#ifndef HTTP_PARSE_H
#define HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#define HTTP_MAX_HEADER (8 * 1024)  /* request line and headers */
#define HTTP_MAX_BODY (1024 * 1024) /* Content-Length */
#define HTTP_IN_SIZE (HTTP_MAX_HEADER + 1024)
#define HTTP_ANSWER_MAX 128 /* the longest answer http_answer writes */

/* http_parse's results: a request is there, more bytes are needed, or an
 * HTTP status to answer before closing. */
enum {
    HTTP_MORE = 0,              /* the head is not complete yet */
    HTTP_OK = 1,                /* a request: see struct http_request */
    HTTP_BAD = -400,            /* malformed or ambiguous */
    HTTP_TOO_LARGE = -413,      /* Content-Length over HTTP_MAX_BODY */
    HTTP_HEADER_LARGE = -431,   /* head over HTTP_MAX_HEADER bytes */
    HTTP_NOT_IMPLEMENTED = -501 /* Transfer-Encoding: chunked */
};

/* What http_parse found at the start of a buffer. */
struct http_request {
    size_t head; /* bytes of the request line and headers, with the empty
                    line that ends them (at most HTTP_MAX_HEADER) */
    size_t body; /* bytes of body that follow (Content-Length) */
    bool close;  /* the connection closes after the answer: HTTP/1.0
                    without "Connection: keep-alive", or "close" */
};

/* Parses the request at buf[0..n). Returns HTTP_OK with *r filled in (the
 * body may not have arrived yet), HTTP_MORE (no error so far, and no end
 * of the head within n < HTTP_MAX_HEADER bytes), or one of the errors
 * above; *r is set only for HTTP_OK. Reads at most HTTP_MAX_HEADER bytes
 * of buf. */
int http_parse(const char *buf, size_t n, struct http_request *r);

/* A connection's input. A new connection's is zero-initialised, or set
 * up by http_conn_init, which leaves `in` alone (zeroing it would touch
 * 9 KiB of a task's stack). The caller reads into in[have..HTTP_IN_SIZE),
 * adds the count to have, and calls http_answer; only http_answer changes
 * the other fields. */
struct http_conn {
    char in[HTTP_IN_SIZE]; /* received and not yet used: in[0..have) */
    size_t have;           /* bytes in `in` (the caller adds to it) */
    size_t used;           /* of those, taken by requests answered while
                              `full` (the next call goes on from there) */
    size_t skip;           /* body bytes of an answered request still to
                              come: they are discarded as they arrive */
    unsigned done;         /* requests complete, head and body: counts up,
                              the caller resets it when it likes */
    bool full;             /* out filled up: write it, then call again */
    bool close;            /* an answer closes the connection: stop */
};

static inline void http_conn_init(struct http_conn *c)
{
    c->have = c->used = c->skip = 0;
    c->done = 0;
    c->full = c->close = false;
}

/* Answers the complete requests in c->in, in order, writing the answers
 * to out[0..cap) (cap >= HTTP_ANSWER_MAX), and returns their length. It
 * stops when a request is incomplete, when out cannot take another answer
 * (c->full: write out and call again), or after an answer that closes the
 * connection (c->close: write out and close; the rest of the input is
 * ignored). Unless c->full, the used bytes are gone from c->in when it
 * returns; unless c->close too, c->in[0..c->have) is the start of the
 * next request, at most HTTP_MAX_HEADER - 1 bytes of it, so that a read
 * always has room. */
size_t http_answer(struct http_conn *c, char *out, size_t cap);

#endif
