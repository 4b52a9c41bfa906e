/* SPDX-License-Identifier: MIT */
/*
 * weft_tls: TLS streams over weft's sockets, on OpenSSL.
 *
 * A task that holds a connected TCP socket (weft_tcp_connect,
 * weft_accept, or a descriptor weft adopted) runs TLS over it with
 * weft_tls_connect (a client) or weft_tls_accept (a server), then reads
 * and writes through the stream with weft_tls_read and weft_tls_write,
 * ends it with weft_tls_shutdown, and frees it with weft_tls_free. Each
 * call that waits takes an absolute deadline and is a cancellation point,
 * as weft's socket calls are; while it waits the task parks and its
 * worker runs other tasks.
 *
 * How: OpenSSL runs non-blocking on the socket (through a BIO of weft's
 * own that sends with MSG_NOSIGNAL, so a write to a closed peer is
 * -EPIPE, never SIGPIPE). When it says SSL_ERROR_WANT_READ or
 * SSL_ERROR_WANT_WRITE, the task waits with weft_fd_wait for that
 * readiness, then calls OpenSSL again. Nothing else runs: no thread, no
 * task.
 *
 * The end of a stream. A read returns 0 only when the peer ended the
 * stream with TLS's close_notify. A TCP close (or EOF) without it returns
 * WEFT_TLS_TRUNCATED (-EPIPE): the data may have been cut short by an
 * attacker or a crash, and the stream cannot say whether it was. A
 * protocol whose messages carry their own length (HTTP/1.1 with
 * Content-Length or chunked, a length-prefixed RPC) may take it as the end
 * when it arrives between two complete messages: what was read is known
 * to be whole. A protocol that ends its data by closing (HTTP/1.0 without
 * Content-Length, a file sent until EOF) must not.
 *
 * Errors are negative errno codes, named by weft_strerror; what OpenSSL
 * said (a certificate's verify error, an alert, a library error) is
 * weft_tls_error's string:
 *   -EKEYREJECTED  the peer's certificate was not accepted (weft_tls_error:
 *                  OpenSSL's verify error, "hostname mismatch",
 *                  "self-signed certificate", ...), or a server with
 *                  WEFT_TLS_VERIFY_CLIENT got none
 *   -EPROTO        the handshake failed otherwise (no common version or
 *                  cipher, the peer's alert, a malformed record), or a
 *                  record was bad after it
 *   -EPIPE         (WEFT_TLS_TRUNCATED) on a read: the TCP stream ended
 *                  without close_notify; on a write: the peer closed
 *   -ECONNRESET    the connection was reset (or closed during the
 *                  handshake)
 *   -ETIMEDOUT, -ECANCELED, -EINVAL, -ENOMEM, -EPERM (not in a task)
 *   -EIO           the stream is broken: an earlier write was cancelled or
 *                  timed out in the middle of a record, or an earlier error
 *                  ended the stream
 *
 * Threads. A context may be used by any number of tasks on any workers.
 * A stream may be used by one reading task and one writing task at once
 * (an echo's two directions), on any workers: each OpenSSL call on it is
 * made under the stream's lock, which is never held while a task waits.
 * Two tasks reading one stream at once (or writing) interleave at
 * records: do not.
 *
 * Link with -lweft_tls -lweft -lssl -lcrypto (pkg-config weft_tls; CMake:
 * find_package(weft COMPONENTS tls), target weft::tls). Nothing in
 * libweft depends on OpenSSL.
 */
#ifndef WEFT_TLS_H
#define WEFT_TLS_H

#include <errno.h> /* the codes above */
#include <openssl/ssl.h>
#include <stddef.h>

#include "weft.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_TLS_VERSION 0x000100 /* 0.1.0 */

/* A read's result when the TCP stream ended without the peer's
 * close_notify: a possible truncation, never a clean end (see above). */
#define WEFT_TLS_TRUNCATED (-EPIPE)

/* weft_tls_ctx_new's mode. */
#define WEFT_TLS_CLIENT 1
#define WEFT_TLS_SERVER 2

/* weft_tls_opts.min_version (0: WEFT_TLS_1_2). */
#define WEFT_TLS_1_2 0x0303
#define WEFT_TLS_1_3 0x0304

/* weft_tls_opts.flags. */
/* A client does not verify the server's certificate or name. For tests
 * against a throw-away certificate only: anybody on the path can then
 * read and change the stream. */
#define WEFT_TLS_NO_VERIFY 1
/* A server asks for the client's certificate and refuses a client
 * without a valid one (mutual TLS), verified against ca_file/ca_dir. */
#define WEFT_TLS_VERIFY_CLIENT 2

/* A context's settings; zero is the defaults. Files are PEM. */
typedef struct weft_tls_opts {
    /* The certificates trusted to sign the peer's. Both NULL: the
     * system's defaults (OpenSSL's default paths; SSL_CERT_FILE and
     * SSL_CERT_DIR move them). */
    const char *ca_file;
    const char *ca_dir;
    /* The certificate (with its chain after it) and private key this side
     * presents: required for a server; a client's, optional, for a server
     * that asks for one. key_file NULL: the key is in cert_file. */
    const char *cert_file;
    const char *key_file;
    /* The application protocols offered (a client) or accepted (a
     * server), comma-separated, by preference: "h2,http/1.1". NULL: no
     * ALPN. A server picks the first of its own list that the client
     * offers; none in common: the handshake goes on with none
     * (weft_tls_alpn returns NULL). */
    const char *alpn;
    /* The oldest protocol version allowed: WEFT_TLS_1_2 (0) or
     * WEFT_TLS_1_3. */
    int min_version;
    int flags; /* WEFT_TLS_NO_VERIFY, WEFT_TLS_VERIFY_CLIENT */
} weft_tls_opts;

/* Settings shared by many streams (OpenSSL's SSL_CTX, with its loaded
 * certificates and session cache). */
typedef struct weft_tls_ctx weft_tls_ctx;

/* One TLS connection over one socket. */
typedef struct weft_tls weft_tls;

/* Makes a context for clients (WEFT_TLS_CLIENT: the server's certificate
 * and name are verified unless WEFT_TLS_NO_VERIFY) or servers
 * (WEFT_TLS_SERVER: cert_file required), with opts (NULL: the defaults).
 * Returns 0 and stores it in *ctx, or -EINVAL (a bad mode, version, ALPN
 * list, a server without a certificate, a key that does not match the
 * certificate), -ENOENT, -EACCES (a file that cannot be read), -EBADMSG
 * (a file that holds no valid PEM certificate or key), -ENOMEM. Any
 * thread, also outside a runtime; never blocks (reads the files). */
int weft_tls_ctx_new(weft_tls_ctx **ctx, int mode, const weft_tls_opts *opts);

/* Frees ctx. Free it after the streams made with it (a server's use its
 * ALPN list). NULL: nothing. Any thread; never blocks. */
void weft_tls_ctx_free(weft_tls_ctx *ctx);

/* ctx's SSL_CTX, for OpenSSL's settings that weft_tls_opts lacks (cipher
 * lists, session cache, a verify callback); set them before the first
 * stream. Do not change its verify mode's meaning for clients, its BIOs
 * or its ALPN callback. Any thread; never blocks. */
SSL_CTX *weft_tls_ctx_ssl(weft_tls_ctx *ctx);

/* The client's handshake over fd, a connected non-blocking TCP socket (a
 * weft socket, or one weft_fd_wait may wait on), under the deadline.
 * host is the server's name: sent as SNI (unless it is a numeric address)
 * and matched against its certificate (a name or an IP address); NULL
 * only with WEFT_TLS_NO_VERIFY. Returns 0 with the stream ready, or
 * -EKEYREJECTED, -EPROTO, -ECONNRESET, -ETIMEDOUT, -ECANCELED, -EINVAL
 * (ctx a server's, fd < 0, host NULL), -ENOMEM, -EPERM.
 * *stream is set whenever a stream was made, also when the handshake
 * failed, so that weft_tls_error can say why; it is NULL only when the
 * call made none (-EINVAL, -ENOMEM, -EPERM, or -ECANCELED at the entry
 * of a cancelled scope). Free it with weft_tls_free on every return. A
 * stream whose handshake failed, timed out or was cancelled is dead: it
 * serves only weft_tls_error, weft_tls_verify_result and weft_tls_free;
 * close fd (OpenSSL may have sent part of the handshake).
 * The stream does not own fd: weft_tls_free leaves it open, and fd must
 * stay open while the stream is used.
 * Call from a task. Blocks; cancellation point (a cancel or the deadline
 * while it waits leaves the stream dead, as above). */
int weft_tls_connect(weft_tls_ctx *ctx, int fd, const char *host,
                     weft_tls **stream, weft_time deadline);

/* The server's handshake over fd (as weft_accept returns it), under the
 * deadline: a client that stalls in the handshake is let go at the
 * deadline (-ETIMEDOUT), so give each one its own (weft_now() + a few
 * seconds) and run it in the connection's task, not the accept loop.
 * Returns and sets *stream as weft_tls_connect (-EKEYREJECTED only with
 * WEFT_TLS_VERIFY_CLIENT; -EINVAL: ctx a client's). Call from a task.
 * Blocks; cancellation point (cancelled or timed out: the stream is
 * dead). */
int weft_tls_accept(weft_tls_ctx *ctx, int fd, weft_tls **stream,
                    weft_time deadline);

/* Reads up to n bytes of application data (read-some): waits until at
 * least one byte, the end, or an error. Returns the count (1 to n), 0
 * when the peer sent close_notify (also when n is 0), or
 * WEFT_TLS_TRUNCATED (-EPIPE: the TCP stream ended without close_notify,
 * see the top of this file), -ECONNRESET, -EPROTO, -ETIMEDOUT,
 * -ECANCELED (nothing read), -EIO, -EINVAL.
 * After -ETIMEDOUT or -ECANCELED the stream is still good: the wait was
 * between OpenSSL's calls, and a record it had partly received stays in
 * its buffer for the next read. After 0 the stream still writes (TLS
 * half-closes); after the others it is dead.
 * Call from a task. Blocks; cancellation point. */
ptrdiff_t weft_tls_read(weft_tls *stream, void *buf, size_t n,
                        weft_time deadline);

/* Writes all n bytes of buf, in as many records as it takes, under one
 * deadline (as weft_write_all). Returns 0, or -EPIPE (the peer closed),
 * -ECONNRESET, -EPROTO, -ETIMEDOUT, -ECANCELED, -EIO, -EINVAL. If done is
 * not NULL, *done is the number of bytes written into records that went
 * to the kernel whole, whatever the result.
 * A cancel or the deadline that comes while the socket is full stops the
 * write in the middle of a record that OpenSSL has encrypted and partly
 * sent (OpenSSL's rule: such a write can only go on with the same bytes):
 * the stream is then broken for writing, and later writes and
 * weft_tls_shutdown return -EIO; reading still works. A cancel seen at
 * the entry, before any byte, leaves it whole.
 * Call from a task. Blocks; cancellation point. */
int weft_tls_write(weft_tls *stream, const void *buf, size_t n, size_t *done,
                   weft_time deadline);

/* weft_tls_shutdown's flag: after sending close_notify, read (and
 * discard) until the peer's comes. */
#define WEFT_TLS_SHUTDOWN_WAIT 1

/* Ends the stream for writing: sends close_notify under the deadline (a
 * peer that does not read cannot make it wait longer). With
 * WEFT_TLS_SHUTDOWN_WAIT, then reads until the peer's close_notify,
 * discarding any data. Returns 0, or -EPIPE (the TCP stream ended before
 * the peer's close_notify), -ECONNRESET, -ETIMEDOUT, -ECANCELED, -EIO,
 * -EINVAL (bad flags). fd stays open: close it after (weft_close).
 * A cancel or the deadline while close_notify is being sent leaves it
 * half sent: the stream is broken for writing (-EIO), and still reads;
 * while waiting for the peer's, the stream is as after a cancelled read.
 * Call from a task. Blocks; cancellation point. */
int weft_tls_shutdown(weft_tls *stream, int flags, weft_time deadline);

/* Frees the stream (NULL: nothing); fd stays open. Send close_notify
 * first (weft_tls_shutdown) unless the stream failed. Any thread; never
 * blocks. */
void weft_tls_free(weft_tls *stream);

/* The application protocol the handshake agreed on ("h2"), or NULL: none
 * (or no handshake yet). Valid until weft_tls_free. Any thread (not
 * while the handshake runs); never blocks. */
const char *weft_tls_alpn(weft_tls *stream);

/* Whether the peer presented a certificate and it was verified (chain and
 * name): 1 or 0. A client with verification on that completed its
 * handshake always has 1. Any thread (not while the handshake runs);
 * never blocks. */
int weft_tls_peer_verified(weft_tls *stream);

/* The verification's result, OpenSSL's X509_V_OK (0) or an X509_V_ERR_*
 * code (X509_V_ERR_HOSTNAME_MISMATCH, ...). Any thread (not while the
 * handshake runs); never blocks. */
long weft_tls_verify_result(weft_tls *stream);

/* Why the stream's last call failed, in OpenSSL's words ("certificate
 * verify failed: hostname mismatch", "tlsv1 alert unknown ca",
 * "unexpected eof while reading"); "" when nothing failed. Valid until the
 * next call on the stream (with a reader and a writer task, the text is
 * the last failed call's, of either). Any thread; never blocks. */
const char *weft_tls_error(weft_tls *stream);

/* The stream's SSL, for OpenSSL's queries (the cipher, the peer's
 * certificate). Do not read, write or shut it down directly. Any
 * thread; never blocks. */
SSL *weft_tls_ssl(weft_tls *stream);

#ifdef __cplusplus
}
#endif
#endif
