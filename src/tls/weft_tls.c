/* SPDX-License-Identifier: MIT */
/*
 * weft_tls: OpenSSL's non-blocking streams driven by weft's waits (see
 * include/weft_tls.h). Built on weft.h alone: this file knows nothing of
 * the runtime's insides, and the runtime nothing of OpenSSL.
 *
 * Each stream's SSL does its socket I/O through a BIO of ours (recv and
 * send with MSG_NOSIGNAL), which also notes what the socket said: the
 * errno of a failed call, and an EOF. Every operation is a loop: call
 * OpenSSL under the stream's lock; on SSL_ERROR_WANT_READ or WANT_WRITE,
 * drop the lock and weft_fd_wait for that readiness under the caller's
 * deadline (a cancel or the deadline ends the loop there, between two
 * OpenSSL calls); anything else is the result. OpenSSL's error queue is
 * per thread, and another task of the worker may run while this one
 * waits: it is cleared before each call and read right after, with no
 * park between.
 */
#define _GNU_SOURCE 1
#include "weft_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

struct weft_tls_ctx {
    SSL_CTX *ssl;
    int mode;
    bool verify;         /* a client that verifies, or VERIFY_CLIENT */
    unsigned char *alpn; /* the list in ALPN's wire form, or NULL */
    unsigned alpn_len;
};

struct weft_tls {
    SSL *ssl;
    int fd;
    pthread_mutex_t lock; /* around each OpenSSL call, never over a wait */
    int sys_err;          /* errno of the BIO's last failed recv or send */
    bool eof;             /* the BIO's recv saw the TCP stream's end */
    bool dead;            /* a failed handshake, or a fatal error */
    bool wbroken;         /* a write stopped mid-record */
    bool closed;          /* the peer's close_notify came */
    char why[256];        /* weft_tls_error's text */
    char alpn[256];       /* weft_tls_alpn's, terminated */
};

/* ---- the BIO: the socket, with what it said noted in the stream ---- */

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static int bio_write(BIO *b, const char *buf, int len)
{
    weft_tls *t = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t k;
    do
        k = send(t->fd, buf, (size_t)len, MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    if (k >= 0)
        return (int)k;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        BIO_set_retry_write(b);
    else
        t->sys_err = errno;
    return -1;
}

static int bio_read(BIO *b, char *buf, int len)
{
    weft_tls *t = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t k;
    do
        k = recv(t->fd, buf, (size_t)len, 0);
    while (k < 0 && errno == EINTR);
    if (k > 0)
        return (int)k;
    if (k == 0) {
        t->eof = true;
        return 0;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        BIO_set_retry_read(b);
    else
        t->sys_err = errno;
    return -1;
}

static int bio_puts(BIO *b, const char *s)
{
    return bio_write(b, s, (int)strlen(s));
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num, (void)ptr;
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;      /* nothing is buffered here */
    case BIO_CTRL_EOF: /* OpenSSL 3 asks, to tell an EOF from an error */
        return ((weft_tls *)BIO_get_data(b))->eof;
    default:
        return 0;
    }
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static void bio_setup(void)
{
    BIO_METHOD *m =
        BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "weft");
    if (m && BIO_meth_set_write(m, bio_write) &&
        BIO_meth_set_read(m, bio_read) && BIO_meth_set_puts(m, bio_puts) &&
        BIO_meth_set_ctrl(m, bio_ctrl) && BIO_meth_set_create(m, bio_create))
        bio_method = m;
    else if (m)
        BIO_meth_free(m);
}

/* ---- contexts ---- */

/* "h2,http/1.1" to ALPN's wire form (a length byte before each name). */
static int alpn_wire(const char *list, unsigned char **out, unsigned *len)
{
    size_t n = strlen(list);
    unsigned char *w = malloc(n + 1);
    if (!w)
        return -ENOMEM;
    size_t at = 0;
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t k = comma ? (size_t)(comma - p) : strlen(p);
        if (k == 0 || k > 255) {
            free(w);
            return -EINVAL;
        }
        w[at++] = (unsigned char)k;
        memcpy(w + at, p, k);
        at += k;
        if (!comma)
            break;
        p = comma + 1;
    }
    *out = w;
    *len = (unsigned)at;
    return 0;
}

/* A server's choice: the first of its list that the client offers. */
static int alpn_select(SSL *ssl, const unsigned char **out,
                       unsigned char *outlen, const unsigned char *in,
                       unsigned inlen, void *arg)
{
    (void)ssl;
    weft_tls_ctx *c = arg;
    unsigned char *sel;
    if (SSL_select_next_proto(&sel, outlen, c->alpn, c->alpn_len, in, inlen) !=
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

/* Why a file could not be loaded: the system's error if it could not be
 * read, else its content. */
static int file_error(const char *path)
{
    unsigned long code = ERR_peek_last_error();
    ERR_clear_error();
    if (ERR_GET_LIB(code) == ERR_LIB_X509 &&
        ERR_GET_REASON(code) == X509_R_KEY_VALUES_MISMATCH)
        return -EINVAL; /* a key, but not the certificate's */
    if (access(path, R_OK) != 0)
        return errno == EACCES ? -EACCES : -ENOENT;
    return -EBADMSG;
}

/* The trusted certificates, and this side's certificate and key. */
static int ctx_files(weft_tls_ctx *c, const weft_tls_opts *opts)
{
    if (opts->ca_file || opts->ca_dir) {
        if (!SSL_CTX_load_verify_locations(c->ssl, opts->ca_file, opts->ca_dir))
            return file_error(opts->ca_file ? opts->ca_file : opts->ca_dir);
    } else if (!SSL_CTX_set_default_verify_paths(c->ssl)) {
        return -ENOENT;
    }
    if (!opts->cert_file)
        return 0;
    if (SSL_CTX_use_certificate_chain_file(c->ssl, opts->cert_file) != 1)
        return file_error(opts->cert_file);
    const char *key = opts->key_file ? opts->key_file : opts->cert_file;
    if (SSL_CTX_use_PrivateKey_file(c->ssl, key, SSL_FILETYPE_PEM) != 1)
        return file_error(key);
    if (SSL_CTX_check_private_key(c->ssl) != 1)
        return -EINVAL;
    return 0;
}

/* Whom to verify, and the ALPN list. */
static int ctx_peer(weft_tls_ctx *c, const weft_tls_opts *opts)
{
    if (c->mode == WEFT_TLS_CLIENT) {
        c->verify = !(opts->flags & WEFT_TLS_NO_VERIFY);
        SSL_CTX_set_verify(c->ssl,
                           c->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    } else {
        c->verify = opts->flags & WEFT_TLS_VERIFY_CLIENT;
        SSL_CTX_set_verify(c->ssl,
                           c->verify ? SSL_VERIFY_PEER |
                                           SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                                     : SSL_VERIFY_NONE,
                           NULL);
    }
    if (!opts->alpn)
        return 0;
    int err = alpn_wire(opts->alpn, &c->alpn, &c->alpn_len);
    if (err)
        return err;
    if (c->mode == WEFT_TLS_SERVER)
        SSL_CTX_set_alpn_select_cb(c->ssl, alpn_select, c);
    else if (SSL_CTX_set_alpn_protos(c->ssl, c->alpn, c->alpn_len))
        return -ENOMEM;
    return 0;
}

int weft_tls_ctx_new(weft_tls_ctx **ctx, int mode, const weft_tls_opts *opts)
{
    static const weft_tls_opts none = {0};
    if (!ctx)
        return -EINVAL;
    *ctx = NULL;
    if (!opts)
        opts = &none;
    int minv = opts->min_version ? opts->min_version : WEFT_TLS_1_2;
    if ((mode != WEFT_TLS_CLIENT && mode != WEFT_TLS_SERVER) ||
        (minv != WEFT_TLS_1_2 && minv != WEFT_TLS_1_3) ||
        (opts->flags & ~(WEFT_TLS_NO_VERIFY | WEFT_TLS_VERIFY_CLIENT)) ||
        (mode == WEFT_TLS_SERVER && !opts->cert_file))
        return -EINVAL;
    weft_tls_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->mode = mode;
    int err = -ENOMEM;
    c->ssl = SSL_CTX_new(mode == WEFT_TLS_CLIENT ? TLS_client_method()
                                                 : TLS_server_method());
    if (c->ssl) {
        SSL_CTX_set_min_proto_version(c->ssl, minv);
        /* Partial writes: each SSL_write returns once one record went out
         * whole, so a write's count is exact. A moving buffer: a retry may
         * pass the same bytes from another address. No renegotiation (TLS
         * 1.2): a write never has to read. An unexpected EOF stays an
         * error (SSL_OP_IGNORE_UNEXPECTED_EOF is not set): see
         * weft_tls_read. */
        SSL_CTX_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE |
                                     SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        SSL_CTX_set_options(c->ssl, SSL_OP_NO_RENEGOTIATION);
        if (!(err = ctx_files(c, opts)))
            err = ctx_peer(c, opts);
    }
    ERR_clear_error();
    if (err) {
        weft_tls_ctx_free(c);
        return err;
    }
    *ctx = c;
    return 0;
}

void weft_tls_ctx_free(weft_tls_ctx *ctx)
{
    if (!ctx)
        return;
    SSL_CTX_free(ctx->ssl);
    free(ctx->alpn);
    free(ctx);
}

SSL_CTX *weft_tls_ctx_ssl(weft_tls_ctx *ctx)
{
    return ctx ? ctx->ssl : NULL;
}

/* ---- the loop around OpenSSL's calls ---- */

enum { OP_HANDSHAKE, OP_READ, OP_WRITE, OP_SHUTDOWN };

/* The result of an OpenSSL call that returned ret <= 0, taken right
 * after it (under the lock): WEFT_IO_READ or WEFT_IO_WRITE to wait for,
 * 0 for close_notify, or a negative code (the stream's why is set). */
static int classify(weft_tls *t, int ret, int op)
{
    int e = SSL_get_error(t->ssl, ret);
    if (e == SSL_ERROR_WANT_READ) {
        ERR_clear_error();
        return WEFT_IO_READ;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
        ERR_clear_error();
        return WEFT_IO_WRITE;
    }
    if (e == SSL_ERROR_ZERO_RETURN) {
        ERR_clear_error();
        t->closed = true;
        return 0;
    }
    unsigned long code = ERR_peek_last_error();
    if (code)
        ERR_error_string_n(code, t->why, sizeof t->why);
    ERR_clear_error();
    int err;
    long v = SSL_get_verify_result(t->ssl);
    if (op == OP_HANDSHAKE && v != X509_V_OK) {
        snprintf(t->why, sizeof t->why, "certificate verify failed: %s",
                 X509_verify_cert_error_string(v));
        err = -EKEYREJECTED;
    } else if (op == OP_HANDSHAKE && ERR_GET_LIB(code) == ERR_LIB_SSL &&
               ERR_GET_REASON(code) ==
                   SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
        err = -EKEYREJECTED; /* a server's WEFT_TLS_VERIFY_CLIENT */
    } else if (t->sys_err) {
        /* A send to a closed peer is -EPIPE for a write; for a read
         * (a TLS 1.3 key update's reply) or a handshake, a broken
         * connection. */
        err = t->sys_err == EPIPE && op != OP_WRITE && op != OP_SHUTDOWN
                  ? -ECONNRESET
                  : -t->sys_err;
        if (!code)
            snprintf(t->why, sizeof t->why, "%s", strerror(t->sys_err));
    } else if (t->eof) {
        /* The TCP stream ended without close_notify. OpenSSL 3 says
         * SSL_R_UNEXPECTED_EOF_WHILE_READING, 1.1.1 SSL_ERROR_SYSCALL with
         * no error: either way it is not the clean end. */
        err = op == OP_HANDSHAKE ? -ECONNRESET : WEFT_TLS_TRUNCATED;
        if (!code)
            snprintf(t->why, sizeof t->why, "unexpected eof while reading");
    } else {
        err = -EPROTO;
    }
    t->dead = true;
    return err;
}

/* One step of op under the lock: > 0 done (a count), 0 close_notify,
 * WAIT_CODE(the events to wait for), or a negative code. */
#define WAIT_CODE(ev) (-1000 - (ev))

static int step(weft_tls *t, int op, void *buf, int n)
{
    pthread_mutex_lock(&t->lock);
    ERR_clear_error();
    t->sys_err = 0;
    int ret;
    switch (op) {
    case OP_HANDSHAKE:
        ret = SSL_do_handshake(t->ssl);
        break;
    case OP_READ:
        ret = SSL_read(t->ssl, buf, n);
        break;
    case OP_WRITE:
        ret = SSL_write(t->ssl, buf, n);
        break;
    default:
        ret = SSL_shutdown(t->ssl);
        ret = ret >= 0 ? 1 : ret; /* 0: sent, the peer's not yet read */
        break;
    }
    int r = ret;
    if (ret <= 0) {
        r = classify(t, ret, op);
        if (r > 0)
            r = WAIT_CODE(r);
    }
    pthread_mutex_unlock(&t->lock);
    return r;
}

/* The stream's flags and text are read and set under its lock: a reader
 * and a writer may be on two threads. enter() starts a call: clears its
 * text, and returns 1 (go on), 0 (a read after close_notify) or -EIO (the
 * stream, or its writing side, is broken). */
static int enter(weft_tls *t, int op)
{
    pthread_mutex_lock(&t->lock);
    t->why[0] = 0;
    int r = 1;
    if (op == OP_READ && t->closed)
        r = 0;
    else if (t->dead || (op != OP_READ && t->wbroken))
        r = -EIO;
    pthread_mutex_unlock(&t->lock);
    return r;
}

/* A write or shutdown stopped with a record partly sent. */
static void break_writing(weft_tls *t)
{
    pthread_mutex_lock(&t->lock);
    t->wbroken = true;
    pthread_mutex_unlock(&t->lock);
}

/* Runs op until it is done, fails, or the wait for the readiness it
 * needs ends (a cancel, the deadline). *waited_write: the last wait was
 * for writing (a write stopped mid-record). */
static int drive(weft_tls *t, int op, void *buf, int n, weft_time deadline,
                 bool *waited_write)
{
    for (;;) {
        int r = step(t, op, buf, n);
        if (r != WAIT_CODE(WEFT_IO_READ) && r != WAIT_CODE(WEFT_IO_WRITE))
            return r;
        int ev = WAIT_CODE(0) - r;
        if (waited_write)
            *waited_write = true;
        int w = weft_fd_wait(t->fd, ev, deadline);
        if (w < 0) {
            pthread_mutex_lock(&t->lock);
            snprintf(t->why, sizeof t->why, "%s", weft_strerror(w));
            if (op == OP_HANDSHAKE)
                t->dead = true; /* OpenSSL cannot resume it for another */
            pthread_mutex_unlock(&t->lock);
            return w;
        }
    }
}

/* ---- streams ---- */

static int handshake(weft_tls_ctx *ctx, int mode, int fd, const char *host,
                     weft_tls **stream, weft_time deadline)
{
    if (!stream)
        return -EINVAL;
    *stream = NULL;
    if (!ctx || ctx->mode != mode || fd < 0 ||
        (mode == WEFT_TLS_CLIENT && ctx->verify && !host))
        return -EINVAL;
    if (weft_cancelled())
        return -ECANCELED;
    pthread_once(&bio_once, bio_setup);
    if (!bio_method)
        return -ENOMEM;
    weft_tls *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->fd = fd;
    pthread_mutex_init(&t->lock, NULL);
    BIO *bio = NULL;
    if (!(t->ssl = SSL_new(ctx->ssl)) || !(bio = BIO_new(bio_method)))
        goto nomem;
    BIO_set_data(bio, t);
    SSL_set_bio(t->ssl, bio, bio);
    if (mode == WEFT_TLS_CLIENT) {
        SSL_set_connect_state(t->ssl);
        if (host) {
            unsigned char addr[16];
            bool numeric = inet_pton(AF_INET, host, addr) == 1 ||
                           inet_pton(AF_INET6, host, addr) == 1;
            if (!numeric && !SSL_set_tlsext_host_name(t->ssl, host))
                goto nomem;
            if (ctx->verify) {
                X509_VERIFY_PARAM *p = SSL_get0_param(t->ssl);
                X509_VERIFY_PARAM_set_hostflags(
                    p, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
                if (numeric ? !X509_VERIFY_PARAM_set1_ip_asc(p, host)
                            : !SSL_set1_host(t->ssl, host))
                    goto nomem;
            }
        }
    } else {
        SSL_set_accept_state(t->ssl);
    }
    *stream = t;
    int r = drive(t, OP_HANDSHAKE, NULL, 0, deadline, NULL);
    if (r > 0)
        return 0;
    /* Dead already (classify, drive), unless close_notify came. */
    pthread_mutex_lock(&t->lock);
    t->dead = true;
    pthread_mutex_unlock(&t->lock);
    return r == 0 ? -ECONNRESET : r;
nomem:
    ERR_clear_error();
    weft_tls_free(t);
    return -ENOMEM;
}

int weft_tls_connect(weft_tls_ctx *ctx, int fd, const char *host,
                     weft_tls **stream, weft_time deadline)
{
    return handshake(ctx, WEFT_TLS_CLIENT, fd, host, stream, deadline);
}

int weft_tls_accept(weft_tls_ctx *ctx, int fd, weft_tls **stream,
                    weft_time deadline)
{
    return handshake(ctx, WEFT_TLS_SERVER, fd, NULL, stream, deadline);
}

ptrdiff_t weft_tls_read(weft_tls *stream, void *buf, size_t n,
                        weft_time deadline)
{
    weft_tls *t = stream;
    if (!t || (!buf && n))
        return -EINVAL;
    int e = enter(t, OP_READ);
    if (e <= 0 || n == 0)
        return e < 0 ? e : 0;
    if (weft_cancelled())
        return -ECANCELED;
    int k = n > INT_MAX ? INT_MAX : (int)n;
    return drive(t, OP_READ, buf, k, deadline, NULL);
}

int weft_tls_write(weft_tls *stream, const void *buf, size_t n, size_t *done,
                   weft_time deadline)
{
    weft_tls *t = stream;
    if (done)
        *done = 0;
    if (!t || (!buf && n))
        return -EINVAL;
    int e = enter(t, OP_WRITE);
    if (e < 0)
        return e;
    if (n && weft_cancelled())
        return -ECANCELED;
    size_t sent = 0;
    while (sent < n) {
        size_t left = n - sent;
        int k = left > INT_MAX ? INT_MAX : (int)left;
        bool waited = false;
        int r = drive(t, OP_WRITE, (char *)buf + sent, k, deadline, &waited);
        if (r > 0) {
            sent += (size_t)r;
            if (done)
                *done = sent;
            continue;
        }
        if ((r == -ETIMEDOUT || r == -ECANCELED) && waited)
            break_writing(t); /* OpenSSL holds a record partly sent */
        return r == 0 ? -EPIPE : r;
    }
    return 0;
}

int weft_tls_shutdown(weft_tls *stream, int flags, weft_time deadline)
{
    weft_tls *t = stream;
    if (!t || (flags & ~WEFT_TLS_SHUTDOWN_WAIT))
        return -EINVAL;
    int e = enter(t, OP_SHUTDOWN);
    if (e < 0)
        return e;
    if (weft_cancelled())
        return -ECANCELED;
    bool waited = false;
    int r = drive(t, OP_SHUTDOWN, NULL, 0, deadline, &waited);
    if (r < 0) {
        if (r == -ETIMEDOUT || r == -ECANCELED)
            break_writing(t);
        return r;
    }
    if (!(flags & WEFT_TLS_SHUTDOWN_WAIT))
        return 0;
    char sink[4096];
    for (;;) {
        ptrdiff_t k = weft_tls_read(t, sink, sizeof sink, deadline);
        if (k <= 0)
            return (int)k;
    }
}

void weft_tls_free(weft_tls *stream)
{
    if (!stream)
        return;
    SSL_free(stream->ssl); /* and its BIO */
    pthread_mutex_destroy(&stream->lock);
    free(stream);
}

const char *weft_tls_alpn(weft_tls *stream)
{
    if (!stream)
        return NULL;
    const unsigned char *p;
    unsigned len;
    SSL_get0_alpn_selected(stream->ssl, &p, &len);
    if (!len)
        return NULL;
    /* OpenSSL's copy is not terminated: the stream keeps one that is. */
    memcpy(stream->alpn, p, len);
    stream->alpn[len] = 0;
    return stream->alpn;
}

int weft_tls_peer_verified(weft_tls *stream)
{
    if (!stream)
        return 0;
    X509 *peer = SSL_get1_peer_certificate(stream->ssl);
    if (!peer)
        return 0;
    X509_free(peer);
    return SSL_get_verify_mode(stream->ssl) != SSL_VERIFY_NONE &&
           SSL_get_verify_result(stream->ssl) == X509_V_OK;
}

long weft_tls_verify_result(weft_tls *stream)
{
    return stream ? SSL_get_verify_result(stream->ssl) : X509_V_OK;
}

const char *weft_tls_error(weft_tls *stream)
{
    return stream ? stream->why : "";
}

SSL *weft_tls_ssl(weft_tls *stream)
{
    return stream ? stream->ssl : NULL;
}
