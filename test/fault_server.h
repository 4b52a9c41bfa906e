/* SPDX-License-Identifier: MIT */
/*
 * fault_server: a local HTTP/1.1 (and HTTPS) server whose faults are chosen
 * by the request's path, for the tests of HTTP clients (the libcurl
 * module's tests link it; the program test/fault_server_main.c serves it
 * from the command line). Written on weft's public API only: it runs as
 * tasks inside the caller's runtime, and every delay is weft time
 * (weft_sleep_for, deadlines), so under the virtual clock /slow/5000 takes
 * five virtual seconds and no real time.
 *
 * Connections are persistent (HTTP/1.1 keep-alive; HTTP/1.0 only with
 * "Connection: keep-alive"), one request at a time (no pipelining), and a
 * request that says "Connection: close" gets its answer with
 * "Connection: close", then the connection closes. Requests are read by
 * examples/http_parse.c, a strict parser: a malformed request gets 400
 * (also a missing Host in HTTP/1.1), a body over 1 MiB 413, a head over
 * 8 KiB 431, a chunked request body 501, and the connection closes.
 * Every answer that is not chunked has a Content-Length (but 204 and 304,
 * which have no body and no Content-Length). HEAD is answered as GET
 * without the body; any method is accepted on any path.
 *
 * Paths (a query string "?..." is allowed after each; N, MS, K, CODE and
 * S are decimal numbers; a malformed or out-of-range number gets 400):
 *
 *   /ok                 200, body "ok\n".
 *   /bytes/N            200 with an N-byte body (N <= 64 MiB), written as
 *                       the socket takes it. Byte i of the body is
 *                       'a' + i % 26 ("abc...zabc...").
 *   /slow/MS            waits MS milliseconds (weft_sleep_for; MS <= 3600000),
 *                       then 200 "ok\n".
 *   /status/CODE        status CODE (200 to 599) with the body "CODE\n"
 *                       (204 and 304: no body).
 *   ...?retry_after=S   on any path that answers (e.g. /status/429 and
 *                       /status/503): a "Retry-After: S" header too
 *                       (S <= 86400).
 *   /reset              reads the request, then closes with an RST
 *                       (SO_LINGER 0): the client's read gets ECONNRESET.
 *   /close              reads the request, then closes without any answer
 *                       (a FIN; over TLS after a close_notify).
 *   /stall/N            headers with Content-Length N (N <= 64 MiB), the
 *                       first N/2 bytes of the /bytes body, then nothing:
 *                       the connection stays open until the client closes
 *                       it or the server stops.
 *   /flaky/KEY/K        the first K requests for KEY get 503 with
 *                       "Retry-After: 0" (body "flaky\n"), the later ones
 *                       200 "ok\n". Counted per server and per KEY (1 to
 *                       63 bytes of [A-Za-z0-9_.-]; at most 1024 keys, a
 *                       new key beyond that gets 503 "too many keys").
 *   /flaky_reset/KEY/K  the same, but the first K requests are reset (as
 *                       /reset). Its keys are counted apart from /flaky's.
 *   /chunked/N          200 with an N-byte body (N <= 64 MiB; the /bytes
 *                       pattern) in Transfer-Encoding: chunked, in chunks
 *                       of at most 16 KiB.
 *   /echo               200 with the request's body (Content-Length
 *                       bodies, up to 1 MiB), type application/octet-stream.
 *   /garbage            a status line that is not one ("HTTP/1.1 abc
 *                       Garbage"), headers and a 3-byte body, then closes.
 *   /binary             1024 bytes of binary (0x00 to 0xff, four times)
 *                       instead of any answer, then closes.
 *   /bad_chunk          200 chunked: one good chunk of 16 bytes (the
 *                       /bytes pattern), then a chunk size that is not hex
 *                       ("zz"), then closes.
 *   anything else       404, body "not found\n".
 *
 * HTTPS: with cert_file and key_file, each connection starts with a TLS
 * handshake (OpenSSL, one SSL_CTX per server; TLS 1.2 or 1.3), then speaks
 * the same paths. A handshake must end within 10 s (weft time) of the
 * accept. scripts/test-cert.sh DIR makes a self-signed certificate for
 * 127.0.0.1 and localhost (DIR/cert.pem, DIR/key.pem). Built without
 * OpenSSL, fault_server_start refuses certificates with -ENOTSUP; CMake's
 * target weft_fault_server defines FAULT_SERVER_TLS for the code that
 * links it when it has OpenSSL (and links OpenSSL::SSL to it).
 *
 * Lifetime. fault_server_start runs from a task: it listens, then spawns
 * the acceptor task into scope s; each connection is a task of a
 * WEFT_SERVE scope the acceptor owns. fault_server_stop cancels the
 * acceptor, which cancels every connection (their blocking calls return
 * -ECANCELED, and they close their sockets) and closes the listener;
 * stop waits for all that, then frees the server. Cancelling s (or its
 * deadline) ends them the same way, but the server must still be freed
 * with fault_server_stop, before weft_run returns.
 */
#ifndef FAULT_SERVER_H
#define FAULT_SERVER_H

#include "weft.h"

typedef struct fault_server fault_server;

typedef struct fault_server_opts {
    /* Numeric address to listen on; NULL: "127.0.0.1". */
    const char *host;
    /* Port; 0: any free one (fault_server_port says which). */
    int port;
    /* PEM files of the certificate (chain) and its private key. Both set:
     * HTTPS; both NULL: plain HTTP; one alone: -EINVAL. */
    const char *cert_file;
    const char *key_file;
} fault_server_opts;

/* The paths, for fault_server_stats.by_kind (a request with a bad number,
 * answered 400, counts under its path). */
enum fault_kind {
    FAULT_OK,          /* /ok */
    FAULT_BYTES,       /* /bytes/N */
    FAULT_SLOW,        /* /slow/MS */
    FAULT_STATUS,      /* /status/CODE */
    FAULT_RESET,       /* /reset */
    FAULT_CLOSE,       /* /close */
    FAULT_STALL,       /* /stall/N */
    FAULT_FLAKY,       /* /flaky/KEY/K */
    FAULT_FLAKY_RESET, /* /flaky_reset/KEY/K */
    FAULT_CHUNKED,     /* /chunked/N */
    FAULT_ECHO,        /* /echo */
    FAULT_GARBAGE,     /* /garbage */
    FAULT_BINARY,      /* /binary */
    FAULT_BAD_CHUNK,   /* /bad_chunk */
    FAULT_NOT_FOUND,   /* any other path (404) */
    FAULT_KINDS
};

typedef struct fault_server_stats {
    long accepted; /* connections accepted */
    long open;     /* connections open now (accepted, not yet closed) */
    long requests; /* requests read (complete and well-formed) */
    long by_kind[FAULT_KINDS]; /* requests, by path (enum fault_kind) */
    long bad;                  /* requests refused by the parser (4xx/501) */
    long resets;               /* connections closed with an RST */
    long tls_handshakes;       /* TLS handshakes completed */
    long tls_failures;         /* TLS handshakes failed or timed out */
} fault_server_stats;

/* Starts a server: listens on o->host:o->port (o may be NULL: 127.0.0.1,
 * any port, plain HTTP), loads the certificate if asked, and spawns the
 * acceptor into scope s (NULL: the calling task's current scope). Returns
 * 0 and sets *out, or -EINVAL (out NULL, one of cert_file and key_file
 * alone, a certificate or key OpenSSL cannot use), -ENOENT/-EACCES (a
 * file that cannot be read), -ENOTSUP (certificates, built without
 * OpenSSL), -ENOMEM, weft_tcp_listen's and weft_spawn's errors. Call it
 * from a task; it does not block. */
int fault_server_start(weft_scope *s, const fault_server_opts *o,
                       fault_server **out);

/* The port the server listens on. Any thread; never blocks. */
int fault_server_port(const fault_server *f);

/* Copies the server's counters into *out (each read atomically; the set
 * is not one snapshot). Any thread, while the server is not freed; never
 * blocks. */
void fault_server_stats_get(const fault_server *f, fault_server_stats *out);

/* Stops the server: closes the listener and every open connection (a
 * request in progress is cut off; a stalled one ends), waits until their
 * tasks have ended, and frees the server. NULL: does nothing. Call it
 * from a task of the server's runtime, once; it blocks (in a shielded
 * scope, so it finishes also in a cancelled one). */
void fault_server_stop(fault_server *f);

#endif
