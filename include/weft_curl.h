/* SPDX-License-Identifier: MIT */
/*
 * weft_curl: libcurl's transfers, driven by weft's reactor.
 *
 * A task calls weft_curl_perform(easy, deadline) where it would call
 * curl_easy_perform(easy), and gets the same transfer (HTTP/1.1, HTTP/2,
 * TLS, redirects, proxies, everything libcurl does) without blocking its
 * worker: the task parks, and the worker runs other tasks meanwhile.
 *
 * How: each worker keeps one curl multi handle, made on first use. Its
 * sockets sit in an epoll set of their own, which the worker's reactor
 * watches like any descriptor, and its one timer is a deadline of a weft
 * wait. Of the tasks with a transfer on a worker, one at a time drives the
 * multi handle (calls curl_multi_socket_action and reads its messages);
 * the others park until their transfer ends or it is their turn to drive.
 * No thread and no task is added, and nothing runs while no transfer is
 * under way. Connections (and TLS sessions, and DNS entries) live in the
 * multi handle, so tasks on the same worker reuse them; the handles are
 * freed when the worker stops, at the end of weft_run.
 *
 * Link with -lweft_curl -lweft -lcurl (pkg-config weft_curl; CMake:
 * find_package(weft COMPONENTS curl), target weft::curl). Nothing in
 * libweft depends on libcurl.
 *
 * Callbacks. libcurl runs an easy handle's callbacks (CURLOPT_WRITEFUNCTION
 * and the others) from curl_multi_socket_action, so they run on the task
 * that drives the worker's multi handle at the time, which may not be the
 * task that called weft_curl_perform. They run on the same worker (the
 * same thread), so state that only tasks of one worker touch needs no
 * lock, but a callback should not park (a weft call that blocks): while it
 * does, every transfer of that worker waits. To hand a body to another
 * task, use a try form (weft_chan_try_send) and CURL_WRITEFUNC_PAUSE, or
 * collect it in memory. Do not set CURLOPT_PRIVATE's meaning aside for
 * weft: it stays the caller's.
 *
 * One option is weft's: for each transfer weft_curl_perform sets
 * CURLOPT_OPENSOCKETFUNCTION and CURLOPT_OPENSOCKETDATA on the handle (it
 * makes the sockets itself, with socket(2) as libcurl would, to keep the
 * errno that libcurl drops) and unsets them on return. A function of your
 * own set there is not called (libcurl has no way to read it back); set
 * socket options with CURLOPT_SOCKOPTFUNCTION, which stays yours.
 */
#ifndef WEFT_CURL_H
#define WEFT_CURL_H

#include <curl/curl.h>
#include <errno.h> /* the codes below: -ETIMEDOUT, -EKEYREJECTED, ... */

#include "weft.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_CURL_VERSION 0x000100 /* 0.1.0 */

/* Performs the transfer easy describes, as curl_easy_perform does, parking
 * the calling task until it ends. deadline is absolute (weft_now() base;
 * WEFT_NEVER: none) and comes on top of the scope's deadline and of
 * libcurl's own CURLOPT_TIMEOUT; it is checked with weft's clock. Returns
 * 0 when the transfer completed (whatever the HTTP status: read it with
 * CURLINFO_RESPONSE_CODE), else a negative code:
 *   -ETIMEDOUT     the deadline came, or libcurl's own timeout (also
 *                  its connect timeout)
 *   -ECANCELED     the task's scope was cancelled
 *   -ENOENT        the host (or proxy) name could not be resolved
 *   -ECONNREFUSED  the connection was refused (other connect failures
 *                  give the system's code: -ENETUNREACH, -EHOSTUNREACH,
 *                  -ENETDOWN, -EHOSTDOWN, -EADDRNOTAVAIL,
 *                  -ETIMEDOUT)
 *   -EMFILE        no descriptor left for the transfer's socket: the
 *                  process's limit (RLIMIT_NOFILE), not the server;
 *                  -ENFILE: the system's. For a name lookup that failed
 *                  it is a guess: libcurl's resolver keeps no errno, so
 *                  the system is asked right after whether descriptors
 *                  ran out (the lookup needs some: /etc/hosts, a socket
 *                  to the name server), and the answer may be another
 *                  thread's doing
 *   -EPROTO        the TLS handshake failed
 *   -EKEYREJECTED  the peer's certificate was not accepted
 *   -ECONNRESET    the connection broke: reset, a send or receive that
 *                  failed, or closed with no reply
 *   -EPIPE         the body ended before its announced length
 *   -EBADMSG       the server's reply was not valid HTTP: no status line
 *                  (a garbage first line, binary bytes: libcurl's
 *                  CURLE_UNSUPPORTED_PROTOCOL once the request went out
 *                  and no final status came back, none or only a 1xx such
 *                  as 100 Continue; after a redirect this cannot be told
 *                  from a redirect refused, and is -EINVAL), a bad chunk
 *                  size (CURLE_RECV_ERROR with no system error, see
 *                  below), a weird reply (CURLE_WEIRD_SERVER_REPLY), bad
 *                  HTTP/2, a body that does not decode
 *   -ELOOP         too many redirects
 *   -EINVAL        a malformed URL or option, an unsupported protocol (or
 *                  a redirect to one)
 *   -EBUSY         easy is already in a transfer
 *   -EPERM         not called from a task
 *   -ENOMEM        out of memory
 *   -ECONNABORTED  a callback aborted the transfer (or a write or read
 *                  callback failed)
 *   -EIO           any other libcurl error.
 * The system's error (CURLINFO_OS_ERRNO) tells a refusal from an
 * unreachable network, and a receive that failed from bytes that did not
 * decode. libcurl before 8.8 does not clear it when a transfer starts: it
 * keeps the last one of any earlier transfer of the handle (a refused
 * connect before a retry). weft_curl_perform takes it as this transfer's
 * when it changed, when this transfer tried to connect (after
 * CURLE_COULDNT_CONNECT), or, after CURLE_RECV_ERROR, when it is one a
 * receive gives (ECONNRESET, ETIMEDOUT, EPIPE, EHOSTUNREACH, ENETUNREACH),
 * since a second reset is as common as a first: so with such a libcurl a
 * reply that does not decode, on a handle whose last system error (of any
 * earlier transfer) was one of these, is -ECONNRESET rather than
 * -EBADMSG. libcurl 8.8 and later clear it, and the code is exact.
 * The code says what kind of failure it was, not why: a bad URL is only
 * -EINVAL. libcurl says why, when asked: weft_curl_perform_ex gives its
 * CURLcode (CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL, ...), which
 * curl_easy_strerror names, and the buffer set with CURLOPT_ERRORBUFFER
 * gets its own sentence (which host did not resolve, which protocol is
 * unknown, and from libcurl 8.1.1 which part of the URL is wrong; emptied
 * when a transfer starts, left empty when weft ended it at a deadline or
 * a cancel):
 *
 *     char why[CURL_ERROR_SIZE] = "";  // lives as long as easy uses it
 *     curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, why);
 *     CURLcode code;
 *     int rc = weft_curl_perform_ex(easy, &code, deadline);
 *     if (rc < 0)  // "invalid argument: URL rejected: Bad hostname"
 *         fprintf(stderr, "%s: %s\n", weft_strerror(rc),
 *                 why[0] ? why : curl_easy_strerror(code));
 *
 * To check a URL before any transfer (and, with older libcurl, to learn
 * what is wrong with it), parse it: curl_url_set(u, CURLUPART_URL, url,
 * 0) returns a CURLUcode that curl_url_strerror names ("Port number was
 * not a decimal number between 0 and 65535").
 * On any return, easy has left the multi handle and can be used again (a
 * new weft_curl_perform, curl_easy_cleanup). A cancelled or timed-out
 * transfer is abandoned where it stood: its connection is closed, not
 * reused.
 * The transfer runs on the calling task's worker's multi handle, kept in
 * a thread-local across the wait: call it from a task that does not move
 * (the default; not one spawned with weft_spawn_opts.movable or in a
 * movable scope).
 * Cancellation point. Blocks (the task, not the worker). */
int weft_curl_perform(CURL *easy, weft_time deadline);

/* weft_curl_perform that also stores libcurl's result in *code (if code
 * is not NULL): CURLE_OK with a return of 0; the CURLcode behind an error
 * return; CURLE_OPERATION_TIMEDOUT for weft's deadline, and
 * CURLE_ABORTED_BY_CALLBACK for a cancel (libcurl never ran to an end).
 * Cancellation point. Blocks. */
int weft_curl_perform_ex(CURL *easy, CURLcode *code, weft_time deadline);

/* The weft code for libcurl's result code, by weft_curl_perform's table.
 * os_errno is the transfer's system error (or 0): after
 * CURLE_COULDNT_CONNECT it tells a refused connection (or 0) from an
 * unreachable network or no descriptor left (EMFILE, ENFILE); after
 * CURLE_RECV_ERROR, a receive that failed (any system error:
 * -ECONNRESET) from bytes libcurl could not decode (0: -EBADMSG).
 * CURLINFO_OS_ERRNO is that only with libcurl 8.8 and later: before, it
 * may be an earlier transfer's (weft_curl_perform allows for it, see
 * there). What only weft_curl_perform tells, since it needs the handle or
 * the transfer: a reply with no final status (CURLE_UNSUPPORTED_PROTOCOL,
 * which is -EINVAL here), and a socket() that failed for want of a
 * descriptor (libcurl drops that errno). Any thread; never blocks. */
int weft_curl_error(CURLcode code, long os_errno);

/* The calling worker's multi handle, made if it was not (NULL: not on a
 * worker, or out of memory). For curl_multi_setopt of limits such as
 * CURLMOPT_MAX_HOST_CONNECTIONS or CURLMOPT_MAX_TOTAL_CONNECTIONS; do not
 * change its socket or timer functions, and do not add handles to it
 * yourself. Each worker has its own: set the same options from a task on
 * every worker (weft_spawn_opts' worker field places one there). Never
 * blocks. */
CURLM *weft_curl_multi(void);

/* ------------------------------------------------------------------------
 * Deprecated names (0.2), removed in 0.4: see weft.h's block of the same
 * name. WEFT_NO_DEPRECATED hides them.
 * ---------------------------------------------------------------------- */
#ifndef WEFT_NO_DEPRECATED
/* The deadline goes last. */
WEFT_DEPRECATED("weft_curl_perform_ex(easy, code, deadline)")
static inline int weft_curl_perform_code(CURL *easy, weft_time deadline,
                                         CURLcode *code)
{
    return weft_curl_perform_ex(easy, code, deadline);
}
#endif /* WEFT_NO_DEPRECATED */

#ifdef __cplusplus
}
#endif
#endif
