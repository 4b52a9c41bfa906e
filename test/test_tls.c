/* SPDX-License-Identifier: MIT */
/* weft_tls: handshakes, echo, ALPN, verification, the end of a stream
 * (close_notify against a bare TCP close), handshake deadlines, and
 * cancellation. Certificates are made for each run by
 * scripts/test-cert.sh (self-signed, CN=127.0.0.1, names localhost and
 * 127.0.0.1), one trusted and one not. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "t.h"
#include "weft_tls.h"

static char dir[] = "/tmp/weft-tls-XXXXXX";
static char cert[64], key[64], other_cert[64], other_key[64];

static void certs_cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* Two self-signed certificates: dir/a (trusted by the clients that set
 * ca_file) and dir/b (trusted by nobody). */
static void certs(void)
{
    if (cert[0])
        return;
    ASSERT(mkdtemp(dir));
    atexit(certs_cleanup);
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "%s/scripts/test-cert.sh '%s/a' && %s/scripts/test-cert.sh "
             "'%s/b'",
             WEFT_SOURCE_DIR, dir, WEFT_SOURCE_DIR, dir);
    if (system(cmd) != 0)
        T_NEED("openssl", "scripts/test-cert.sh failed (no openssl command?)");
    snprintf(cert, sizeof cert, "%s/a/cert.pem", dir);
    snprintf(key, sizeof key, "%s/a/key.pem", dir);
    snprintf(other_cert, sizeof other_cert, "%s/b/cert.pem", dir);
    snprintf(other_key, sizeof other_key, "%s/b/key.pem", dir);
}

static weft_tls_ctx *server_ctx(const char *c, const char *k, const char *alpn)
{
    weft_tls_ctx *ctx;
    weft_tls_opts o = {.cert_file = c, .key_file = k, .alpn = alpn};
    ASSERT_EQ(weft_tls_ctx_new(&ctx, WEFT_TLS_SERVER, &o), 0);
    return ctx;
}

static weft_tls_ctx *client_ctx(const char *ca, const char *alpn)
{
    weft_tls_ctx *ctx;
    weft_tls_opts o = {.ca_file = ca, .alpn = alpn};
    ASSERT_EQ(weft_tls_ctx_new(&ctx, WEFT_TLS_CLIENT, &o), 0);
    return ctx;
}

/* A connected pair of TCP sockets over 127.0.0.1. */
static void tcp_pair(int *client, int *server)
{
    int lfd = weft_tcp_listen("127.0.0.1", 0, 16, 0);
    ASSERT(lfd >= 0);
    *client = weft_tcp_connect("127.0.0.1", weft_local_port(lfd),
                               weft_now() + 10 * WEFT_SEC);
    ASSERT(*client >= 0);
    *server = weft_accept(lfd, NULL, weft_now() + 10 * WEFT_SEC);
    ASSERT(*server >= 0);
    weft_close(lfd);
}

/* The server's half of a handshake, in a task of its own. */
typedef struct {
    weft_tls_ctx *ctx;
    int fd;
    weft_time deadline;
    weft_tls *stream;
    int rc;
    weft_time ended;
} accept_job;

static int accept_task(void *arg)
{
    accept_job *j = arg;
    j->rc = weft_tls_accept(j->ctx, j->fd, &j->stream, j->deadline);
    j->ended = weft_now();
    return 0;
}

/* Client and server streams over a fresh pair, both handshakes done. */
typedef struct {
    int cfd, sfd;
    weft_tls *c, *s;
} tls_pair;

static int pair_open(tls_pair *p, weft_tls_ctx *cctx, weft_tls_ctx *sctx,
                     const char *host, int *server_rc)
{
    tcp_pair(&p->cfd, &p->sfd);
    accept_job j = {sctx, p->sfd, weft_now() + 10 * WEFT_SEC, NULL, 0, 0};
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, accept_task, &j) >= 0);
    int rc =
        weft_tls_connect(cctx, p->cfd, host, &p->c, weft_now() + 10 * WEFT_SEC);
    if (rc < 0) /* the server hears of it (an alert) or at the close */
        weft_shutdown(p->cfd, SHUT_RDWR);
    ASSERT_EQ(weft_scope_join(s), 0);
    weft_scope_free(s);
    p->s = j.stream;
    if (server_rc)
        *server_rc = j.rc;
    return rc;
}

static void pair_close(tls_pair *p)
{
    weft_tls_free(p->c);
    weft_tls_free(p->s);
    weft_close(p->cfd);
    weft_close(p->sfd);
}

/* ---- echo: 1 MiB both ways at once, ALPN, clean shutdown ---- */

#define ECHO_BYTES (1 << 20)

static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 7 + (i >> 9));
}

static int echo_server(void *arg)
{
    weft_tls *s = arg;
    char buf[16384];
    for (;;) {
        ptrdiff_t k = weft_tls_read(s, buf, sizeof buf, WEFT_NEVER);
        if (k == 0)
            break; /* the client's close_notify */
        ASSERT(k > 0);
        ASSERT_EQ(weft_tls_write(s, buf, (size_t)k, NULL, WEFT_NEVER), 0);
    }
    ASSERT_EQ(weft_tls_shutdown(s, 0, WEFT_NEVER), 0);
    return 0;
}

static int echo_writer(void *arg)
{
    weft_tls *c = arg;
    unsigned char *buf = malloc(ECHO_BYTES);
    ASSERT(buf);
    for (size_t i = 0; i < ECHO_BYTES; i++)
        buf[i] = pattern(i);
    /* In uneven pieces, so records and reads do not line up. */
    size_t at = 0, piece = 1000;
    while (at < ECHO_BYTES) {
        size_t n = ECHO_BYTES - at < piece ? ECHO_BYTES - at : piece;
        size_t done = 0;
        ASSERT_EQ(weft_tls_write(c, buf + at, n, &done, WEFT_NEVER), 0);
        ASSERT_EQ(done, n);
        at += n;
        piece = piece * 3 % 70001 + 1;
    }
    free(buf);
    /* close_notify: the server's read returns 0. */
    ASSERT_EQ(weft_tls_shutdown(c, 0, WEFT_NEVER), 0);
    return 0;
}

static int echo_reader(void *arg)
{
    weft_tls *c = arg;
    char buf[10000];
    size_t got = 0;
    for (;;) {
        ptrdiff_t k = weft_tls_read(c, buf, sizeof buf, WEFT_NEVER);
        if (k == 0)
            break; /* the server's close_notify, after the echo */
        ASSERT(k > 0);
        for (ptrdiff_t i = 0; i < k; i++)
            if ((unsigned char)buf[i] != pattern(got + (size_t)i))
                T_FAIL("byte %zu differs", got + (size_t)i);
        got += (size_t)k;
    }
    ASSERT_EQ(got, ECHO_BYTES);
    /* The end stays the end. */
    ASSERT_EQ(weft_tls_read(c, buf, sizeof buf, WEFT_NEVER), 0);
    return 0;
}

static int echo_root(void *arg)
{
    (void)arg;
    weft_tls_ctx *sctx = server_ctx(cert, key, "http/1.1,h2");
    weft_tls_ctx *cctx = client_ctx(cert, "h2,http/1.1");
    tls_pair p;
    int src = -1;
    ASSERT_EQ(pair_open(&p, cctx, sctx, "localhost", &src), 0);
    ASSERT_EQ(src, 0);
    /* The server's preference among what the client offers. */
    ASSERT(weft_tls_alpn(p.c) && strcmp(weft_tls_alpn(p.c), "http/1.1") == 0);
    ASSERT(weft_tls_alpn(p.s) && strcmp(weft_tls_alpn(p.s), "http/1.1") == 0);
    ASSERT_EQ(weft_tls_peer_verified(p.c), 1);
    ASSERT_EQ(weft_tls_verify_result(p.c), X509_V_OK);
    ASSERT_EQ(weft_tls_peer_verified(p.s), 0); /* no client certificate */
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    /* The client's writer and reader on two workers (threads): the
     * stream's lock is what keeps OpenSSL's calls apart. */
    ASSERT(weft_spawn(s, echo_server, p.s) >= 0);
    ASSERT(weft_spawn_ex(s, echo_writer, p.c,
                         &(weft_spawn_opts){.worker = 1}) >= 0);
    ASSERT(weft_spawn_ex(s, echo_reader, p.c,
                         &(weft_spawn_opts){.worker = 2}) >= 0);
    ASSERT_EQ(weft_scope_join(s), 0);
    weft_scope_free(s);
    pair_close(&p);
    weft_tls_ctx_free(sctx);
    weft_tls_ctx_free(cctx);
    return 0;
}

/* Client and server in one runtime, two workers (the client's reader and
 * writer may run on different threads): a MiB each way at once. */
TEST(echo_both_ways)
{
    certs();
    ASSERT_EQ(t_run_mono(2, echo_root, NULL), 0);
}

static int numeric_host_root(void *arg)
{
    (void)arg;
    weft_tls_ctx *sctx = server_ctx(cert, key, "x");
    weft_tls_ctx *cctx = client_ctx(cert, "y");
    tls_pair p;
    ASSERT_EQ(pair_open(&p, cctx, sctx, "127.0.0.1", NULL), 0);
    ASSERT(weft_tls_alpn(p.c) == NULL); /* no protocol in common */
    ASSERT_EQ(weft_tls_peer_verified(p.c), 1);
    ASSERT_EQ(weft_tls_write(p.c, "ping", 4, NULL, WEFT_NEVER), 0);
    char buf[8];
    ASSERT_EQ(weft_tls_read(p.s, buf, sizeof buf, WEFT_NEVER), 4);
    ASSERT(memcmp(buf, "ping", 4) == 0);
    pair_close(&p);
    weft_tls_ctx_free(sctx);
    weft_tls_ctx_free(cctx);
    return 0;
}

/* An IP address is checked against the certificate's IP names (and sent
 * without SNI); ALPN lists with nothing in common agree on none. */
TEST(numeric_host_and_no_alpn)
{
    certs();
    ASSERT_EQ(t_run_virtual(1, numeric_host_root, NULL), 0);
}

/* ---- verification ---- */

typedef struct {
    const char *server_cert, *server_key, *ca, *host;
    long verify;
    const char *why;
} refusal;

static int refusal_root(void *arg)
{
    refusal *r = arg;
    weft_tls_ctx *sctx = server_ctx(r->server_cert, r->server_key, NULL);
    weft_tls_ctx *cctx = client_ctx(r->ca, NULL);
    tls_pair p;
    int src = 0;
    ASSERT_EQ(pair_open(&p, cctx, sctx, r->host, &src), -EKEYREJECTED);
    ASSERT(p.c); /* kept, to say why */
    ASSERT_EQ(weft_tls_verify_result(p.c), r->verify);
    ASSERT_EQ(weft_tls_peer_verified(p.c), 0);
    fprintf(stderr, "refused: %s\n", weft_tls_error(p.c));
    ASSERT(strstr(weft_tls_error(p.c), r->why));
    /* The server hears the client's alert. */
    ASSERT(src == -EPROTO || src == -ECONNRESET);
    /* A refused stream is dead. */
    char b[4];
    ASSERT_EQ(weft_tls_read(p.c, b, sizeof b, WEFT_NEVER), -EIO);
    ASSERT_EQ(weft_tls_write(p.c, "x", 1, NULL, WEFT_NEVER), -EIO);
    pair_close(&p);
    weft_tls_ctx_free(sctx);
    weft_tls_ctx_free(cctx);
    return 0;
}

/* A certificate for localhost and 127.0.0.1, asked for as example.com. */
TEST(wrong_host_refused)
{
    certs();
    refusal r = {cert,
                 key,
                 cert,
                 "example.com",
                 X509_V_ERR_HOSTNAME_MISMATCH,
                 "hostname mismatch"};
    ASSERT_EQ(t_run_virtual(1, refusal_root, &r), 0);
}

/* The server's self-signed certificate is not the one the client trusts. */
TEST(untrusted_refused)
{
    certs();
    refusal r = {other_cert,
                 other_key,
                 cert,
                 "localhost",
                 X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT,
                 "self-signed"};
    ASSERT_EQ(t_run_virtual(1, refusal_root, &r), 0);
}

/* A client context with no settings verifies against the system's
 * trusted certificates, which do not hold the test's. */
TEST(verification_on_by_default)
{
    certs();
    refusal r = {cert,
                 key,
                 NULL,
                 "localhost",
                 X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT,
                 "self-signed"};
    ASSERT_EQ(t_run_virtual(1, refusal_root, &r), 0);
}

static int no_verify_root(void *arg)
{
    (void)arg;
    weft_tls_ctx *sctx = server_ctx(other_cert, other_key, NULL);
    weft_tls_ctx *cctx;
    ASSERT_EQ(weft_tls_ctx_new(&cctx, WEFT_TLS_CLIENT,
                               &(weft_tls_opts){.flags = WEFT_TLS_NO_VERIFY}),
              0);
    tls_pair p;
    ASSERT_EQ(pair_open(&p, cctx, sctx, NULL, NULL), 0);
    ASSERT_EQ(weft_tls_peer_verified(p.c), 0); /* not checked */
    pair_close(&p);
    weft_tls_ctx_free(sctx);
    weft_tls_ctx_free(cctx);
    /* Verification needs a name to check. */
    weft_tls_ctx *strict = client_ctx(cert, NULL);
    weft_tls *t = (weft_tls *)1;
    ASSERT_EQ(weft_tls_connect(strict, 0, NULL, &t, WEFT_NEVER), -EINVAL);
    ASSERT(t == NULL);
    weft_tls_ctx_free(strict);
    return 0;
}

/* WEFT_TLS_NO_VERIFY turns it off, and says so. */
TEST(no_verify_is_explicit)
{
    certs();
    ASSERT_EQ(t_run_virtual(1, no_verify_root, NULL), 0);
}

static int mutual_root(void *arg)
{
    (void)arg;
    weft_tls_ctx *sctx, *good, *bad, *none;
    ASSERT_EQ(
        weft_tls_ctx_new(&sctx, WEFT_TLS_SERVER,
                         &(weft_tls_opts){.cert_file = cert,
                                          .key_file = key,
                                          .ca_file = cert,
                                          .flags = WEFT_TLS_VERIFY_CLIENT}),
        0);
    ASSERT_EQ(weft_tls_ctx_new(&good, WEFT_TLS_CLIENT,
                               &(weft_tls_opts){.ca_file = cert,
                                                .cert_file = cert,
                                                .key_file = key}),
              0);
    ASSERT_EQ(weft_tls_ctx_new(&bad, WEFT_TLS_CLIENT,
                               &(weft_tls_opts){.ca_file = cert,
                                                .cert_file = other_cert,
                                                .key_file = other_key}),
              0);
    none = client_ctx(cert, NULL);
    tls_pair p;
    int src = -1;
    /* A client with a certificate the server trusts. */
    ASSERT_EQ(pair_open(&p, good, sctx, "localhost", &src), 0);
    ASSERT_EQ(src, 0);
    ASSERT_EQ(weft_tls_peer_verified(p.s), 1);
    pair_close(&p);
    /* One the server does not trust: refused by the server. TLS 1.3
     * ends the client's handshake first; the alert comes at its read. */
    int crc = pair_open(&p, bad, sctx, "localhost", &src);
    ASSERT_EQ(src, -EKEYREJECTED);
    ASSERT(strstr(weft_tls_error(p.s), "self-signed"));
    if (crc == 0) {
        char b[4];
        ASSERT_EQ(weft_tls_read(p.c, b, sizeof b, weft_now() + WEFT_SEC),
                  -EPROTO);
    }
    pair_close(&p);
    /* None at all. */
    (void)pair_open(&p, none, sctx, "localhost", &src);
    ASSERT_EQ(src, -EKEYREJECTED);
    pair_close(&p);
    weft_tls_ctx_free(sctx);
    weft_tls_ctx_free(good);
    weft_tls_ctx_free(bad);
    weft_tls_ctx_free(none);
    return 0;
}

/* WEFT_TLS_VERIFY_CLIENT: a server that asks for a client certificate
 * takes a trusted one and refuses an untrusted one, or none. */
TEST(mutual_tls)
{
    certs();
    ASSERT_EQ(t_run_virtual(1, mutual_root, NULL), 0);
}

/* Contexts refuse what cannot work. */
TEST(ctx_errors)
{
    certs();
    weft_tls_ctx *c = (weft_tls_ctx *)1;
    ASSERT_EQ(weft_tls_ctx_new(&c, WEFT_TLS_SERVER, NULL), -EINVAL);
    ASSERT(c == NULL);
    ASSERT_EQ(weft_tls_ctx_new(&c, 7, NULL), -EINVAL);
    weft_tls_opts o = {.cert_file = "/nonexistent/cert.pem"};
    ASSERT_EQ(weft_tls_ctx_new(&c, WEFT_TLS_SERVER, &o), -ENOENT);
    o = (weft_tls_opts){.cert_file = WEFT_SOURCE_DIR "/README.md"};
    ASSERT_EQ(weft_tls_ctx_new(&c, WEFT_TLS_SERVER, &o), -EBADMSG);
    o = (weft_tls_opts){.cert_file = cert, .key_file = other_key};
    ASSERT_EQ(weft_tls_ctx_new(&c, WEFT_TLS_SERVER, &o), -EINVAL);
    o = (weft_tls_opts){.alpn = "h2,,x"};
    ASSERT_EQ(weft_tls_ctx_new(&c, WEFT_TLS_CLIENT, &o), -EINVAL);
    o = (weft_tls_opts){.min_version = 0x0301};
    ASSERT_EQ(weft_tls_ctx_new(&c, WEFT_TLS_CLIENT, &o), -EINVAL);
    o = (weft_tls_opts){.min_version = WEFT_TLS_1_3};
    ASSERT_EQ(weft_tls_ctx_new(&c, WEFT_TLS_CLIENT, &o), 0);
    weft_tls_ctx_free(c);
}

/* ---- the end of a stream ---- */

static int truncation_root(void *arg)
{
    (void)arg;
    weft_tls_ctx *sctx = server_ctx(cert, key, NULL);
    weft_tls_ctx *cctx = client_ctx(cert, NULL);
    tls_pair p;
    ASSERT_EQ(pair_open(&p, cctx, sctx, "localhost", NULL), 0);
    char data[3000];
    memset(data, 'd', sizeof data);
    ASSERT_EQ(weft_tls_write(p.s, data, sizeof data, NULL, WEFT_NEVER), 0);
    /* The server's TCP ends with no close_notify: a crash, or a cut. */
    weft_tls_free(p.s);
    p.s = NULL;
    ASSERT_EQ(weft_shutdown(p.sfd, SHUT_WR), 0);
    char buf[4096];
    size_t got = 0;
    ptrdiff_t k;
    while ((k = weft_tls_read(p.c, buf, sizeof buf,
                              weft_now() + 10 * WEFT_SEC)) > 0)
        got += (size_t)k;
    ASSERT_EQ(got, sizeof data); /* all that was sent, then: */
    ASSERT_EQ(k, WEFT_TLS_TRUNCATED);
    fprintf(stderr, "truncated: %s\n", weft_tls_error(p.c));
    ASSERT(strstr(weft_tls_error(p.c), "unexpected eof"));
    pair_close(&p);
    weft_tls_ctx_free(sctx);
    weft_tls_ctx_free(cctx);
    return 0;
}

/* A TCP end without close_notify is WEFT_TLS_TRUNCATED, never 0 (the
 * clean end that echo_both_ways sees after close_notify). */
TEST(truncation_is_not_a_clean_end)
{
    certs();
    ASSERT_EQ(t_run_virtual(1, truncation_root, NULL), 0);
}

static int shutdown_root(void *arg)
{
    (void)arg;
    weft_tls_ctx *sctx = server_ctx(cert, key, NULL);
    weft_tls_ctx *cctx = client_ctx(cert, NULL);
    tls_pair p;
    /* Both close_notify: the client's shutdown waits for the server's,
     * reading past what the server still sent. */
    ASSERT_EQ(pair_open(&p, cctx, sctx, "localhost", NULL), 0);
    ASSERT_EQ(weft_tls_write(p.s, "late", 4, NULL, WEFT_NEVER), 0);
    ASSERT_EQ(weft_tls_shutdown(p.s, 0, WEFT_NEVER), 0);
    ASSERT_EQ(
        weft_tls_shutdown(p.c, WEFT_TLS_SHUTDOWN_WAIT, weft_now() + WEFT_SEC),
        0);
    char b[8];
    ASSERT_EQ(weft_tls_read(p.c, b, sizeof b, WEFT_NEVER), 0);
    ASSERT_EQ(weft_tls_read(p.s, b, sizeof b, WEFT_NEVER), 0);
    pair_close(&p);
    /* The server's TCP ends without its close_notify: the wait says so. */
    ASSERT_EQ(pair_open(&p, cctx, sctx, "localhost", NULL), 0);
    weft_tls_free(p.s);
    p.s = NULL;
    ASSERT_EQ(weft_shutdown(p.sfd, SHUT_WR), 0);
    ASSERT_EQ(
        weft_tls_shutdown(p.c, WEFT_TLS_SHUTDOWN_WAIT, weft_now() + WEFT_SEC),
        WEFT_TLS_TRUNCATED);
    pair_close(&p);
    /* A peer that never answers: the wait ends at its deadline. */
    ASSERT_EQ(pair_open(&p, cctx, sctx, "localhost", NULL), 0);
    weft_time start = weft_now();
    ASSERT_EQ(
        weft_tls_shutdown(p.c, WEFT_TLS_SHUTDOWN_WAIT, start + 3 * WEFT_SEC),
        -ETIMEDOUT);
    ASSERT(weft_now() - start >= 3 * WEFT_SEC);
    ASSERT_EQ(weft_tls_read(p.s, b, sizeof b, WEFT_NEVER), 0);
    pair_close(&p);
    weft_tls_ctx_free(sctx);
    weft_tls_ctx_free(cctx);
    return 0;
}

/* weft_tls_shutdown with WEFT_TLS_SHUTDOWN_WAIT: 0 once the peer's
 * close_notify came, WEFT_TLS_TRUNCATED if its TCP ended first,
 * -ETIMEDOUT at the deadline. */
TEST(shutdown_waits_for_the_peer)
{
    certs();
    ASSERT_EQ(t_run_virtual(1, shutdown_root, NULL), 0);
}

/* ---- handshake deadlines ---- */

static int stall_root(void *arg)
{
    (void)arg;
    weft_tls_ctx *sctx = server_ctx(cert, key, NULL);
    int cfd, sfd;
    tcp_pair(&cfd, &sfd); /* the client says nothing */
    weft_time start = weft_now();
    weft_tls *s = NULL;
    ASSERT_EQ(weft_tls_accept(sctx, sfd, &s, start + 3 * WEFT_SEC), -ETIMEDOUT);
    weft_time took = weft_now() - start;
    ASSERT(took >= 3 * WEFT_SEC && took < 3 * WEFT_SEC + 100 * WEFT_MSEC);
    ASSERT(s);
    char b[4];
    ASSERT_EQ(weft_tls_read(s, b, sizeof b, WEFT_NEVER), -EIO); /* dead */
    weft_tls_free(s);
    weft_close(cfd);
    weft_close(sfd);
    weft_tls_ctx_free(sctx);
    return 0;
}

/* A client that connects and sends nothing: the server's handshake ends
 * at its deadline, on the virtual clock. */
TEST(handshake_deadline)
{
    certs();
    ASSERT_EQ(t_run_virtual(1, stall_root, NULL), 0);
}

typedef struct {
    weft_tls_ctx *ctx;
    int lfd;
    int expected; /* connections to accept */
    int timed_out, served;
    weft_time last_timeout;
} server_state;

typedef struct {
    server_state *st;
    int fd;
} conn_job;

/* One connection's task: the handshake under its own deadline, then an
 * echo of one message. */
static int serve_conn(void *arg)
{
    conn_job *j = arg;
    weft_tls *s = NULL;
    int rc = weft_tls_accept(j->st->ctx, j->fd, &s, weft_now() + 5 * WEFT_SEC);
    if (rc == -ETIMEDOUT) {
        j->st->timed_out++;
        j->st->last_timeout = weft_now();
    } else if (rc == 0) {
        char buf[64];
        ptrdiff_t k = weft_tls_read(s, buf, sizeof buf, WEFT_NEVER);
        ASSERT(k > 0);
        ASSERT_EQ(weft_tls_write(s, buf, (size_t)k, NULL, WEFT_NEVER), 0);
        ASSERT_EQ(weft_tls_shutdown(s, 0, WEFT_NEVER), 0);
        j->st->served++;
    }
    weft_tls_free(s);
    weft_close(j->fd);
    free(j);
    return 0;
}

static int accept_loop(void *arg)
{
    server_state *st = arg;
    weft_scope *conns;
    ASSERT_EQ(weft_scope_open(&conns, NULL), 0);
    for (int i = 0; i < st->expected; i++) {
        int fd = weft_accept(st->lfd, NULL, WEFT_NEVER);
        ASSERT(fd >= 0);
        conn_job *j = malloc(sizeof *j);
        ASSERT(j);
        *j = (conn_job){st, fd};
        ASSERT(weft_spawn(conns, serve_conn, j) >= 0);
    }
    ASSERT_EQ(weft_scope_join(conns), 0);
    weft_scope_free(conns);
    return 0;
}

static int stalled_many_root(void *arg)
{
    int n = *(int *)arg;
    server_state st = {0};
    st.ctx = server_ctx(cert, key, NULL);
    st.lfd = weft_tcp_listen("127.0.0.1", 0, 4096, 0);
    ASSERT(st.lfd >= 0);
    int port = weft_local_port(st.lfd);
    st.expected = n + 1;
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, accept_loop, &st) >= 0);
    weft_time start = weft_now();
    /* n clients that connect and send nothing. */
    int *stalled = malloc(sizeof(int) * (size_t)n);
    ASSERT(stalled);
    for (int i = 0; i < n; i++) {
        stalled[i] = weft_tcp_connect("127.0.0.1", port, WEFT_NEVER);
        ASSERT(stalled[i] >= 0);
    }
    /* Then a good one: served at once, while they all stall. */
    weft_tls_ctx *cctx = client_ctx(cert, NULL);
    int fd = weft_tcp_connect("127.0.0.1", port, WEFT_NEVER);
    ASSERT(fd >= 0);
    weft_tls *c = NULL;
    ASSERT_EQ(
        weft_tls_connect(cctx, fd, "localhost", &c, weft_now() + 10 * WEFT_SEC),
        0);
    ASSERT_EQ(weft_tls_write(c, "hello", 5, NULL, WEFT_NEVER), 0);
    char buf[8];
    ASSERT_EQ(weft_tls_read(c, buf, sizeof buf, WEFT_NEVER), 5);
    ASSERT_EQ(weft_tls_read(c, buf, sizeof buf, WEFT_NEVER), 0);
    ASSERT(weft_now() - start < 5 * WEFT_SEC); /* before any stall ended */
    ASSERT_EQ(st.timed_out, 0);
    ASSERT_EQ(st.served, 1);
    weft_tls_free(c);
    weft_close(fd);
    weft_tls_ctx_free(cctx);
    /* Each stalled handshake ends at its own deadline. */
    ASSERT_EQ(weft_scope_join(s), 0);
    weft_scope_free(s);
    ASSERT_EQ(st.timed_out, n);
    ASSERT(st.last_timeout - start < 6 * WEFT_SEC);
    for (int i = 0; i < n; i++)
        weft_close(stalled[i]);
    free(stalled);
    weft_close(st.lfd);
    weft_tls_ctx_free(st.ctx);
    return 0;
}

/* 200 clients stall mid-handshake; the accept loop still serves a good
 * client at once, and each stalled handshake ends at its deadline. */
TEST(stalled_clients_do_not_hold_the_server)
{
    certs();
    int n = T_SCALE(200);
    if (n < 2)
        n = 2;
    ASSERT_EQ(t_run_virtual(1, stalled_many_root, &n), 0);
}

/* ---- cancellation ---- */

typedef struct {
    weft_tls *t;
    ptrdiff_t rc;
    size_t done;
} io_job;

static int read_task(void *arg)
{
    io_job *j = arg;
    char b[16];
    j->rc = weft_tls_read(j->t, b, sizeof b, WEFT_NEVER);
    return 0;
}

static int cancel_read_root(void *arg)
{
    (void)arg;
    weft_tls_ctx *sctx = server_ctx(cert, key, NULL);
    weft_tls_ctx *cctx = client_ctx(cert, NULL);
    tls_pair p;
    ASSERT_EQ(pair_open(&p, cctx, sctx, "localhost", NULL), 0);
    /* A read that waits for a record, cancelled between OpenSSL's calls. */
    io_job j = {p.c, 1, 0};
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, read_task, &j) >= 0);
    ASSERT_EQ(weft_sleep_for(100 * WEFT_MSEC), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    weft_scope_join(s);
    weft_scope_free(s);
    ASSERT_EQ(j.rc, -ECANCELED);
    /* So does a read whose deadline passes, on the virtual clock. */
    char b0[4];
    weft_time start = weft_now();
    ASSERT_EQ(weft_tls_read(p.c, b0, sizeof b0, start + 2 * WEFT_SEC),
              -ETIMEDOUT);
    ASSERT(weft_now() - start >= 2 * WEFT_SEC);
    /* The stream is still good. */
    ASSERT_EQ(weft_tls_write(p.s, "after", 5, NULL, WEFT_NEVER), 0);
    char b[8];
    ASSERT_EQ(weft_tls_read(p.c, b, sizeof b, WEFT_NEVER), 5);
    ASSERT(memcmp(b, "after", 5) == 0);
    pair_close(&p);
    weft_tls_ctx_free(sctx);
    weft_tls_ctx_free(cctx);
    return 0;
}

/* A read waiting for data, cancelled: -ECANCELED; or timed out:
 * -ETIMEDOUT; either way the stream reads on. */
TEST(cancel_read)
{
    certs();
    ASSERT_EQ(t_run_virtual(1, cancel_read_root, NULL), 0);
}

static int cancel_handshake_root(void *arg)
{
    (void)arg;
    weft_tls_ctx *sctx = server_ctx(cert, key, NULL);
    int cfd, sfd;
    tcp_pair(&cfd, &sfd);
    accept_job j = {sctx, sfd, WEFT_NEVER, NULL, 1, 0};
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, accept_task, &j) >= 0);
    ASSERT_EQ(weft_sleep_for(100 * WEFT_MSEC), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    weft_scope_join(s);
    weft_scope_free(s);
    ASSERT_EQ(j.rc, -ECANCELED);
    ASSERT(j.stream);
    char b[4];
    ASSERT_EQ(weft_tls_read(j.stream, b, sizeof b, WEFT_NEVER), -EIO);
    weft_tls_free(j.stream);
    /* A cancel seen on entry makes no stream. */
    weft_scope *dead;
    ASSERT_EQ(weft_scope_open(&dead, NULL), 0);
    ASSERT_EQ(weft_scope_cancel(dead), 0);
    weft_tls *t = (weft_tls *)1;
    ASSERT_EQ(weft_tls_accept(sctx, sfd, &t, WEFT_NEVER), -ECANCELED);
    ASSERT(t == NULL);
    weft_scope_join(dead);
    weft_scope_free(dead);
    weft_close(cfd);
    weft_close(sfd);
    weft_tls_ctx_free(sctx);
    return 0;
}

/* A handshake cancelled while it waits: -ECANCELED, the stream dead. */
TEST(cancel_handshake)
{
    certs();
    ASSERT_EQ(t_run_virtual(1, cancel_handshake_root, NULL), 0);
}

static int write_task(void *arg)
{
    io_job *j = arg;
    size_t n = 16 << 20;
    char *big = calloc(1, n);
    ASSERT(big);
    j->rc = weft_tls_write(j->t, big, n, &j->done, WEFT_NEVER);
    free(big);
    return 0;
}

static int cancel_write_root(void *arg)
{
    (void)arg;
    weft_tls_ctx *sctx = server_ctx(cert, key, NULL);
    weft_tls_ctx *cctx = client_ctx(cert, NULL);
    tls_pair p;
    ASSERT_EQ(pair_open(&p, cctx, sctx, "localhost", NULL), 0);
    /* The server does not read: the socket fills, mid-record. */
    io_job j = {p.c, 1, 0};
    weft_scope *s;
    ASSERT_EQ(weft_scope_open(&s, NULL), 0);
    ASSERT(weft_spawn(s, write_task, &j) >= 0);
    ASSERT_EQ(weft_sleep_for(100 * WEFT_MSEC), 0);
    ASSERT_EQ(weft_scope_cancel(s), 0);
    weft_scope_join(s);
    weft_scope_free(s);
    ASSERT_EQ(j.rc, -ECANCELED);
    ASSERT(j.done > 0 && j.done < (16 << 20));
    /* Broken for writing; reading still works. */
    ASSERT_EQ(weft_tls_write(p.c, "x", 1, NULL, WEFT_NEVER), -EIO);
    ASSERT_EQ(weft_tls_shutdown(p.c, 0, WEFT_NEVER), -EIO);
    ASSERT_EQ(weft_tls_write(p.s, "back", 4, NULL, WEFT_NEVER), 0);
    char b[8];
    ASSERT_EQ(weft_tls_read(p.c, b, sizeof b, WEFT_NEVER), 4);
    pair_close(&p);
    weft_tls_ctx_free(sctx);
    weft_tls_ctx_free(cctx);
    return 0;
}

/* A write cancelled while the socket is full stops mid-record: the
 * stream is broken for writing (-EIO after), not for reading. */
TEST(cancel_write_mid_record)
{
    certs();
    ASSERT_EQ(t_run_virtual(1, cancel_write_root, NULL), 0);
}
