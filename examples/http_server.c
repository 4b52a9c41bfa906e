/* SPDX-License-Identifier: MIT */
/*
 * http_server: a plaintext HTTP/1.1 server, one task per connection.
 *
 * Every request gets "Hello, World!" (the `http` benchmark of
 * ../shared/bench/SPEC.md). Keep-alive and pipelining: all the complete
 * requests in what one read brought are answered with one write. The
 * parser rejects what it does not understand: a malformed request line or
 * header gets 400, a header block over 8 KiB gets 431, a body over 1 MiB
 * gets 413, and the connection is closed after the answer. A client that
 * does not finish its request within 10 s is dropped (read deadline), so
 * slow clients cannot pin connections forever.
 *
 * The root task accepts; each connection's task starts on its worker,
 * and an idle worker takes connections that have not started yet when
 * that worker falls behind (weft balances load before tasks start). With
 * the benchmark's client on the same two cores, one busy worker serving
 * every connection does about 13% more requests a second than two that split
 * them; a server whose requests do real work would rather run one
 * acceptor per worker, each on its own SO_REUSEPORT socket and started
 * there with weft_spawn_opts.worker. Workers are pinned one to a CPU
 * (pin_workers): the kernel then cannot put the busy worker and the client
 * on one CPU while the other idles. SIGINT/SIGTERM stop it gracefully
 * (weft_main): the accept and the connections see -ECANCELED and close.
 *
 *   http_server [PORT]    0: any free port (default 8080). Prints
 *                         "LISTEN <port>" on stderr once it accepts.
 */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "weft.h"

#define MAX_HEADER (8 * 1024) /* request line and headers */
#define IN_SIZE (MAX_HEADER + 1024)
#define OUT_SIZE 4096
#define MAX_BODY (1024 * 1024)
#define READ_TIMEOUT (10 * WEFT_SEC)

static const char OK[] = "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n"
                         "Content-Type: text/plain\r\n\r\nHello, World!";
static const char BAD[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                          "Connection: close\r\n\r\n";
static const char TOO_BIG[] = "HTTP/1.1 413 Content Too Large\r\n"
                              "Content-Length: 0\r\nConnection: close\r\n\r\n";
static const char HDR_BIG[] = "HTTP/1.1 431 Request Header Fields Too Large\r\n"
                              "Content-Length: 0\r\nConnection: close\r\n\r\n";

enum {
    PARSE_MORE = 0,     /* the headers are not complete yet */
    PARSE_OK = 1,       /* headers complete: see struct request */
    PARSE_BAD = -400,   /* malformed */
    PARSE_BIG = -413,   /* body too large */
    PARSE_HEADER = -431 /* header block too large */
};

struct request {
    size_t head; /* bytes of the request line and headers */
    size_t body; /* bytes of body that follow (Content-Length) */
    bool close;  /* the client asked to close after the answer */
};

static bool token_char(char c)
{
    return c > 32 && c < 127 && !strchr("()<>@,;:\\\"/[]?={}", c);
}

/* Case-insensitive: does the header line [p, end) have name `name`? */
static const char *header_value(const char *p, const char *end,
                                const char *name)
{
    size_t n = strlen(name);
    if ((size_t)(end - p) <= n || p[n] != ':' || strncasecmp(p, name, n))
        return NULL;
    p += n + 1;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

/* Parses the request that starts at buf[0..n): PARSE_MORE, PARSE_OK with
 * r filled in (its body may not have arrived yet), or an error. */
static int parse(const char *buf, size_t n, struct request *r)
{
    const char *end = memmem(buf, n, "\r\n\r\n", 4);
    if (!end)
        return n > MAX_HEADER ? PARSE_HEADER : PARSE_MORE;
    size_t head = (size_t)(end - buf) + 4;
    if (head > MAX_HEADER)
        return PARSE_HEADER;
    /* Request line: METHOD SP TARGET SP HTTP/1.x */
    const char *p = buf, *eol = memmem(buf, head, "\r\n", 2);
    const char *m = p;
    while (p < eol && token_char(*p))
        p++;
    if (p == m || p >= eol || *p++ != ' ')
        return PARSE_BAD;
    const char *target = p;
    while (p<eol && * p> 32 && *p < 127)
        p++;
    if (p == target || p >= eol || *p++ != ' ')
        return PARSE_BAD;
    if (eol - p != 8 || memcmp(p, "HTTP/1.", 7) || (p[7] != '0' && p[7] != '1'))
        return PARSE_BAD;
    r->close = p[7] == '0';
    size_t body = 0;
    /* Header lines: NAME ":" VALUE */
    for (p = eol + 2; p < end + 2; p = eol + 2) {
        eol = memmem(p, (size_t)(end + 2 - p), "\r\n", 2);
        const char *q = p;
        while (q < eol && token_char(*q))
            q++;
        if (q == p || q >= eol || *q != ':')
            return PARSE_BAD;
        const char *v;
        if ((v = header_value(p, eol, "content-length"))) {
            if (v == eol)
                return PARSE_BAD;
            body = 0;
            for (; v < eol && *v != ' '; v++) {
                if (*v < '0' || *v > '9')
                    return PARSE_BAD;
                body = body * 10 + (size_t)(*v - '0');
                if (body > MAX_BODY)
                    return PARSE_BIG;
            }
        } else if ((v = header_value(p, eol, "transfer-encoding"))) {
            return PARSE_BAD; /* no chunked bodies here */
        } else if ((v = header_value(p, eol, "connection"))) {
            if (eol - v >= 5 && !strncasecmp(v, "close", 5))
                r->close = true;
            else if (eol - v >= 10 && !strncasecmp(v, "keep-alive", 10))
                r->close = false;
        }
    }
    r->head = head;
    r->body = body;
    return PARSE_OK;
}

static int serve(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char in[IN_SIZE], out[OUT_SIZE];
    size_t have = 0, skip = 0; /* skip: body bytes still to discard */
    int err = 0;
    for (;;) {
        ptrdiff_t got = weft_read(fd, in + have, sizeof in - have,
                                  weft_now() + READ_TIMEOUT);
        if (got <= 0) {
            err = (int)got; /* 0: the client closed; or a deadline, a reset */
            break;
        }
        have += (size_t)got;
        size_t used = 0, nout = 0;
        bool close_after = false;
        while (used < have && !close_after) {
            if (skip) { /* the body of a request already answered */
                size_t k = have - used < skip ? have - used : skip;
                used += k;
                skip -= k;
                continue;
            }
            struct request r;
            int st = parse(in + used, have - used, &r);
            if (st == PARSE_MORE)
                break;
            const char *msg = st == PARSE_OK       ? OK
                              : st == PARSE_HEADER ? HDR_BIG
                              : st == PARSE_BIG    ? TOO_BIG
                                                   : BAD;
            size_t len = strlen(msg);
            if (nout + len > sizeof out) {
                if ((err = weft_write_all(fd, out, nout, NULL, WEFT_NEVER)))
                    goto done;
                nout = 0;
            }
            memcpy(out + nout, msg, len);
            nout += len;
            if (st != PARSE_OK)
                close_after = true;
            else {
                used += r.head;
                skip = r.body;
                close_after = r.close;
            }
        }
        if (nout && (err = weft_write_all(fd, out, nout, NULL, WEFT_NEVER)))
            break;
        if (close_after)
            break;
        memmove(in, in + used, have - used);
        have -= used;
    }
done:
    weft_close(fd);
    return err == -ECANCELED || err == -ETIMEDOUT || err == -ECONNRESET ? 0
                                                                        : err;
}

static int root(void *arg)
{
    int port = (int)(intptr_t)arg;
    int lfd = weft_tcp_listen("127.0.0.1", port, 1024, 0);
    if (lfd < 0)
        return lfd;
    fprintf(stderr, "LISTEN %d\n", weft_local_port(lfd));
    /* Connections live in a scope of their own, each failing alone; it
     * keeps nothing per connection (WEFT_SERVE). */
    weft_scope *conns;
    int err =
        weft_scope_open(&conns, &(weft_scope_opts){.policy = WEFT_SERVE});
    if (err) {
        weft_close(lfd);
        return err;
    }
    for (;;) {
        int fd = weft_accept(lfd, NULL, WEFT_NEVER);
        if (fd == -ECANCELED)
            break; /* SIGINT or SIGTERM */
        if (fd < 0)
            continue; /* a failed handshake, or EMFILE after a back-off */
        if (weft_spawn(conns, serve, (void *)(intptr_t)fd) < 0)
            weft_close(fd);
    }
    weft_close(lfd);
    weft_scope_join(conns); /* the connections see -ECANCELED and close */
    weft_scope_free(conns);
    return 0;
}

int main(int argc, char **argv)
{
    int port = argc > 1 ? atoi(argv[1]) : 8080;
    weft_config cfg = {.pin_workers = 1};
    int err = weft_main_cfg(&cfg, root, (void *)(intptr_t)port);
    if (err < 0) {
        fprintf(stderr, "http_server: %s\n", weft_strerror(err));
        return 1;
    }
    return 0;
}
