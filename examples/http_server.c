/* SPDX-License-Identifier: MIT */
/*
 * http_server: a plaintext HTTP/1.1 server, one task per connection.
 *
 * Every request gets "Hello, World!" (the `http` benchmark). Keep-alive
 * and pipelining: all the complete requests in what one read brought are
 * answered with one write. The protocol, without I/O, is in http_parse.c
 * (shared with its unit test and the fuzzers): a strict parser that
 * answers 400 to anything malformed or ambiguous (two Content-Lengths,
 * Content-Length with Transfer-Encoding, bare CR or LF, ...), 413 to a
 * body over 1 MiB, 431 to a head over 8 KiB, 501 to a chunked body, and
 * closes the connection after those.
 *
 * Deadlines, so that slow or stalled clients cannot pin a connection (its
 * task, descriptor and buffers):
 *   - request (-r): a request's line, headers and body must all arrive
 *     within this time of the read that brought its first byte (a
 *     connection's first request: of the accept). Trickling a byte at a
 *     time does not extend it. Expired: a 408 if part of a request not
 *     yet answered came (a body comes after its request's answer), then
 *     close.
 *   - write (-w): the answers to one read must be written within this
 *     time of that read; a client that pipelines requests and never reads
 *     its answers is closed then.
 *   - idle (-i): a keep-alive connection may wait this long for the next
 *     request's first byte after the previous answer was written.
 * Each read or write takes an absolute deadline, computed from one clock
 * read per read that brought data; a write that the socket takes at once
 * (the usual case) needs no second one.
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
 * HTTPS (-T CERT KEY, when built with the weft_tls module): each
 * connection's task runs the TLS handshake first, under the request
 * deadline (a client that stalls in it is closed then, as one that
 * stalls in its request), then the same protocol over the stream. A
 * client that closes without close_notify (weft_tls_read's -EPIPE) is
 * taken as a close: HTTP/1.1 frames every message (Content-Length), so a
 * request cut short is only left unanswered, never taken for whole.
 *
 *   http_server [OPTIONS] [PORT]   PORT 0: any free port (default 8080).
 *                                  Prints "LISTEN <port>" on stderr once
 *                                  it accepts.
 *   -r, --request-timeout SEC   default 10
 *   -w, --write-timeout SEC     default 10
 *   -i, --idle-timeout SEC      default 60
 *   -T, --tls CERT KEY          HTTPS, with this certificate (PEM, its
 *                               chain after it) and key
 * SEC is a number of seconds, fractions allowed (0.5).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getopt_long */
#endif
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "http_parse.h"
#include "weft.h"
#ifdef WEFT_HAVE_TLS
#include "weft_tls.h"
static weft_tls_ctx *tls_ctx; /* -T: HTTPS; NULL: plain HTTP */
#endif

#define OUT_SIZE 4096

static const char TIMEOUT[] = "HTTP/1.1 408 Request Timeout\r\n"
                              "Content-Length: 0\r\nConnection: close\r\n\r\n";

/* The deadlines, set once by main. */
static struct {
    int64_t request, write, idle; /* nanoseconds */
} timeout = {10 * WEFT_SEC, 10 * WEFT_SEC, 60 * WEFT_SEC};

/* Writes out[0..n), the answers to the read made at `now`, by now + the
 * write timeout. The first try passes a deadline already past, so it
 * writes what the socket takes without waiting: all of it, usually. Only
 * if the socket pushes back does the rest wait (and *waited says so).
 * Returns 0 or weft_write's errors. */
static int flush(int fd, const char *out, size_t n, weft_time now, bool *waited)
{
    ptrdiff_t k = weft_write(fd, out, n, now);
    if (k == (ptrdiff_t)n)
        return 0;
    if (k < 0 && k != -ETIMEDOUT)
        return (int)k;
    *waited = true;
    size_t sent = k > 0 ? (size_t)k : 0;
    return weft_write_all(fd, out + sent, n - sent, NULL, now + timeout.write);
}

#ifdef WEFT_HAVE_TLS
/* HTTPS's read and write, as serve() makes them over plain sockets. */
static ptrdiff_t conn_read(int fd, weft_tls *tls, void *buf, size_t n,
                           weft_time deadline)
{
    return tls ? weft_tls_read(tls, buf, n, deadline)
               : weft_read(fd, buf, n, deadline);
}

static int conn_flush(int fd, weft_tls *tls, const char *out, size_t n,
                      weft_time now, bool *waited)
{
    if (!tls)
        return flush(fd, out, n, now, waited);
    *waited = true; /* maybe: the idle deadline then reads the clock */
    return weft_tls_write(tls, out, n, NULL, now + timeout.write);
}
#else
typedef void weft_tls;
#define conn_read(fd, tls, buf, n, deadline) weft_read(fd, buf, n, deadline)
#define conn_flush(fd, tls, out, n, now, waited) flush(fd, out, n, now, waited)
#endif

/* Closes in stages after an answer that closes the connection (RFC 9112,
 * 9.6): a close with the client's bytes still unread would send a reset,
 * and a reset makes the client's TCP drop the answer it has not read yet.
 * So: end our side, then read and discard until the client closes, for at
 * most a second. */
static void linger(int fd)
{
    char sink[1024];
    weft_time until = weft_now() + WEFT_SEC;
    if (weft_shutdown(fd, SHUT_WR) != 0)
        return;
    for (int i = 0; i < 64; i++)
        if (weft_read(fd, sink, sizeof sink, until) <= 0)
            return;
}

/* One connection: read, answer, write, until the client closes, a
 * deadline passes, an answer closes it, or a cancel. */
static int serve(void *arg)
{
    int fd = (int)(intptr_t)arg;
    weft_tls *tls = NULL;
    struct http_conn c;
    char out[OUT_SIZE];
    http_conn_init(&c);
    /* in_request: the deadline is a request's (its first byte came, or
     * the connection is new), not the idle one. */
    bool in_request = true;
    weft_time deadline = weft_now() + timeout.request;
    int err = 0;
#ifdef WEFT_HAVE_TLS
    if (tls_ctx && (err = weft_tls_accept(tls_ctx, fd, &tls, deadline)))
        goto done; /* not TLS, a stall, a cancel */
#endif
    for (;;) {
        ptrdiff_t got =
            conn_read(fd, tls, c.in + c.have, sizeof c.in - c.have, deadline);
        if (got <= 0) {
            err = (int)got; /* 0: the client closed; or a deadline, a reset */
            if (err == -ETIMEDOUT && c.have && !tls) /* no waiting */
                (void)weft_write(fd, TIMEOUT, sizeof TIMEOUT - 1, deadline);
            break;
        }
        c.have += (size_t)got;
        c.done = 0;
        bool was_in_request = in_request;
        size_t n = http_answer(&c, out, sizeof out);
        if (!n && was_in_request && !c.done && (c.have || c.skip))
            continue; /* more of the same request: its deadline holds */
        weft_time now = weft_now();
        bool waited = false;
        while (n) {
            if ((err = conn_flush(fd, tls, out, n, now, &waited)))
                goto done;
            n = c.full ? http_answer(&c, out, sizeof out) : 0;
        }
        if (c.close) {
#ifdef WEFT_HAVE_TLS
            if (tls) /* close_notify, then the client's */
                (void)weft_tls_shutdown(tls, WEFT_TLS_SHUTDOWN_WAIT,
                                        weft_now() + WEFT_SEC);
            else
#endif
                linger(fd);
            break;
        }
        in_request = c.have || c.skip;
        if (!in_request) /* idle: from the end of the last answer */
            deadline = (waited ? weft_now() : now) + timeout.idle;
        else if (c.done || !was_in_request) /* it began in this read */
            deadline = now + timeout.request;
    }
done:
#ifdef WEFT_HAVE_TLS
    if (tls && err == 0) /* the client's close_notify: ours back */
        (void)weft_tls_shutdown(tls, 0, weft_now() + timeout.write);
    weft_tls_free(tls);
    if (tls_ctx && (err == -EPROTO || err == -EKEYREJECTED || err == -EIO))
        err = 0; /* not TLS, or a broken stream: the client's doing */
#endif
    weft_close(fd);
    return err == -ECANCELED || err == -ETIMEDOUT || err == -ECONNRESET ||
                   err == -EPIPE
               ? 0
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
    int err = weft_scope_open(&conns, &(weft_scope_opts){.policy = WEFT_SERVE});
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

/* Seconds (fractions allowed) to nanoseconds; false unless 0 < SEC <= a
 * day. */
static bool seconds(const char *s, int64_t *ns)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v > 0 && v <= 86400))
        return false;
    *ns = (int64_t)(v * WEFT_SEC);
    return *ns > 0;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: http_server [-r SEC] [-w SEC] [-i SEC] [-T CERT KEY] "
            "[PORT]\n"
            "  -r, --request-timeout SEC  a request must arrive "
            "within SEC of its first byte (10)\n"
            "  -w, --write-timeout SEC    answers must be written "
            "within SEC (10)\n"
            "  -i, --idle-timeout SEC     a keep-alive connection "
            "may idle SEC (60)\n"
            "  -T, --tls CERT KEY         HTTPS with this "
            "certificate and key (PEM)\n");
    return 2;
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"request-timeout", required_argument, NULL, 'r'},
        {"write-timeout", required_argument, NULL, 'w'},
        {"idle-timeout", required_argument, NULL, 'i'},
        {"tls", required_argument, NULL, 'T'},
        {NULL, 0, NULL, 0}};
    const char *cert = NULL, *key = NULL;
    int o;
    while ((o = getopt_long(argc, argv, "r:w:i:T:", longs, NULL)) != -1) {
        if (o == 'T') { /* CERT, then KEY: the next argument */
            if (optind >= argc)
                return usage();
            cert = optarg;
            key = argv[optind++];
            continue;
        }
        int64_t *t = o == 'r'   ? &timeout.request
                     : o == 'w' ? &timeout.write
                     : o == 'i' ? &timeout.idle
                                : NULL;
        if (!t || !seconds(optarg, t))
            return usage();
    }
    char *end = NULL;
    long port = optind < argc ? strtol(argv[optind], &end, 10) : 8080;
    if (argc - optind > 1 || (end && (*end || end == argv[optind])) ||
        port < 0 || port > 65535)
        return usage();
    if (cert) {
#ifdef WEFT_HAVE_TLS
        int e = weft_tls_ctx_new(&tls_ctx, WEFT_TLS_SERVER,
                                 &(weft_tls_opts){.cert_file = cert,
                                                  .key_file = key,
                                                  .alpn = "http/1.1"});
        if (e < 0) {
            fprintf(stderr, "http_server: %s, %s: %s\n", cert, key,
                    weft_strerror(e));
            return 1;
        }
#else
        fprintf(stderr, "http_server: -T %s %s: built without weft_tls\n", cert,
                key);
        return 2;
#endif
    }
    weft_config cfg = {.pin_workers = 1};
    int err = weft_main_cfg(&cfg, root, (void *)(intptr_t)port);
    if (err < 0) {
        fprintf(stderr, "http_server: %s\n", weft_strerror(err));
        return 1;
    }
    return 0;
}
