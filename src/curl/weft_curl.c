/* SPDX-License-Identifier: MIT */
/*
 * weft_curl: libcurl's multi-socket interface driven by weft (see
 * include/weft_curl.h). Built on weft.h alone: this file knows nothing of
 * the runtime's insides, and the runtime nothing of libcurl.
 *
 * Per worker (a thread-local, since a started task never changes worker):
 * one multi handle, one epoll set holding the descriptors libcurl asks to
 * watch (level-triggered, as libcurl expects: it may leave bytes unread),
 * and the instant libcurl wants to be called back. The epoll set is one
 * descriptor to weft, so a wait on it costs one registration however many
 * connections are open.
 *
 * Each weft_curl_perform is an xfer on the worker's list while its easy
 * handle is in the multi handle. One of them drives: its task waits (one
 * weft_select) for the epoll set to be readable, for libcurl's instant,
 * for its own deadline, or for a poke; then it calls
 * curl_multi_socket_action and reads the finished transfers, marking each
 * done and waking its task. Every other task waits on its xfer's
 * semaphore, released when its transfer is done or when the driver left
 * and it is its turn. Everything here runs on one thread (the worker's),
 * between parks, so nothing needs a lock: the one thing to guard against
 * is a call into libcurl while another is under way, which happens only
 * when a transfer's callback parks inside curl_multi_socket_action
 * (wc->busy): the other tasks then wait on wc->idle until it returns.
 */
#define _GNU_SOURCE 1
#include "weft_curl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct xfer {
    CURL *easy;
    struct xfer *prev, *next; /* wc->head's list, while in the multi */
    weft_sem wake; /* released: done, or the driver left (take over) */
    CURLcode code;
    bool done;
    int sockets;         /* made for this transfer (on_opensocket) */
    int socket_errno;    /* the last socket() of it that failed, or 0 */
    long os_errno_start; /* CURLINFO_OS_ERRNO when it started */
} xfer;

/* What the epoll set holds for a descriptor number (wcurl.reg). */
enum {
    REG_IN = 1,    /* added, with EPOLLIN */
    REG_OUT = 2,   /* added, with EPOLLOUT */
    REG_ADDED = 4, /* added (with the events above, maybe none) */
    REG_IDLE = 8,  /* libcurl said REMOVE: left in the set, unwatched */
};

typedef struct wcurl {
    CURLM *multi;
    int epfd;
    unsigned char *reg; /* per descriptor number: REG_* */
    int nreg;
    weft_time timer;    /* libcurl's instant (WEFT_NEVER: none) */
    xfer *driver;       /* whose task drives, or NULL */
    bool driver_parked; /* it waits in its select: poke it on news */
    int busy;           /* inside a curl_multi_* call */
    int idle_waiters;   /* tasks waiting for busy to come back to 0 */
    weft_sem idle;      /* ... on this */
    xfer *head;         /* the transfers in the multi handle */
} wcurl;

static _Thread_local wcurl *tl_wc;

/* ---- errors ---- */

/* One table, read top to bottom: a split by families of codes would only
 * spread it out (it is the one function here over 60 lines). */
int weft_curl_error(CURLcode code, long os_errno)
{
    switch (code) {
    case CURLE_OK:
        return 0;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return -ENOENT;
    case CURLE_COULDNT_CONNECT:
        /* libcurl says "could not connect" for all of them; the socket's
         * error tells a refusal from an unreachable network, and from a
         * process out of descriptors. */
        if (os_errno == ENETUNREACH || os_errno == EHOSTUNREACH ||
            os_errno == ENETDOWN || os_errno == EHOSTDOWN ||
            os_errno == ETIMEDOUT || os_errno == EADDRNOTAVAIL ||
            os_errno == EMFILE || os_errno == ENFILE)
            return -(int)os_errno;
        return -ECONNREFUSED;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_USE_SSL_FAILED:
        return -EPROTO;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
        return -EKEYREJECTED;
    case CURLE_RECV_ERROR:
        /* A receive that failed (the socket's error) or bytes that libcurl
         * could not decode (a bad chunk size: no system error). */
        return os_errno ? -ECONNRESET : -EBADMSG;
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
        return -ECONNRESET;
    case CURLE_PARTIAL_FILE:
        return -EPIPE;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_BAD_CONTENT_ENCODING:
        return -EBADMSG;
    case CURLE_TOO_MANY_REDIRECTS:
        return -ELOOP;
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_UNKNOWN_OPTION:
        return -EINVAL;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    case CURLE_ABORTED_BY_CALLBACK:
    case CURLE_WRITE_ERROR:
    case CURLE_READ_ERROR:
        return -ECONNABORTED;
    default:
        return -EIO;
    }
}

static int multi_error(CURLMcode mc)
{
    switch (mc) {
    case CURLM_OK:
        return 0;
    case CURLM_BAD_EASY_HANDLE:
    case CURLM_BAD_HANDLE:
        return -EINVAL;
    case CURLM_ADDED_ALREADY:
    case CURLM_RECURSIVE_API_CALL:
        return -EBUSY;
    case CURLM_OUT_OF_MEMORY:
        return -ENOMEM;
    default:
        return -EIO;
    }
}

/* The process is out of descriptors (or the system is): -EMFILE or
 * -ENFILE, else 0. A guess, asked of the system after the fact, for a
 * name lookup that failed: libcurl's resolver (a thread, getaddrinfo)
 * keeps no errno, and it may have failed for want of a descriptor (to
 * read /etc/hosts, to ask the name server). */
static int out_of_descriptors(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    return errno == EMFILE || errno == ENFILE ? -errno : 0;
}

/* libcurl before 8.8 does not clear CURLINFO_OS_ERRNO when a transfer
 * starts: it keeps the last system error of any earlier transfer of the
 * handle. */
static bool os_errno_kept(void)
{
    static _Atomic int kept = -1; /* unknown yet */
    int k = kept;
    if (k < 0) {
        k = curl_version_info(CURLVERSION_NOW)->version_num < 0x080800;
        kept = k;
    }
    return k;
}

/* x's system error, CURLINFO_OS_ERRNO if its transfer set it, else 0. */
static long fresh_os_errno(CURL *easy, const xfer *x, CURLcode code)
{
    long os_errno = 0;
    curl_easy_getinfo(easy, CURLINFO_OS_ERRNO, &os_errno);
    if (!os_errno_kept() || os_errno != x->os_errno_start)
        return os_errno; /* set by this transfer */
    /* The value it started with: kept, or set again to the same. */
    if (code == CURLE_COULDNT_CONNECT && x->sockets > 0)
        return os_errno; /* a connect failed: libcurl set it */
    if (code == CURLE_RECV_ERROR &&
        (os_errno == ECONNRESET || os_errno == ETIMEDOUT || os_errno == EPIPE ||
         os_errno == EHOSTUNREACH || os_errno == ENETUNREACH))
        return os_errno; /* one a receive gives: taken as set again */
    return 0;
}

/* weft_curl_error for the transfer x of easy, ended with code, told
 * apart with what the handle and the transfer know. */
static int transfer_error(CURL *easy, const xfer *x, CURLcode code)
{
    long os_errno = 0, sent = 0, status = 0;
    switch (code) {
    case CURLE_COULDNT_CONNECT:
        /* No socket made, and socket() failed: its errno (EMFILE), which
         * libcurl does not keep. */
        if (x->sockets == 0 && x->socket_errno != 0)
            os_errno = x->socket_errno;
        else
            os_errno = fresh_os_errno(easy, x, code);
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        if (fresh_os_errno(easy, x, code) == 0) {
            int err = out_of_descriptors();
            if (err)
                return err;
        }
        break;
    case CURLE_RECV_ERROR:
        os_errno = fresh_os_errno(easy, x, code);
        break;
    case CURLE_UNSUPPORTED_PROTOCOL:
        /* Also libcurl's word for an answer that does not start with an
         * HTTP status line (HTTP/0.9, which it refuses): a request went
         * out, and no final status came back (none, or only an interim
         * 1xx such as 100 Continue). A redirect to a protocol it will not
         * follow has a status (3xx) and stays -EINVAL. */
        curl_easy_getinfo(easy, CURLINFO_REQUEST_SIZE, &sent);
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
        if (sent > 0 && status < 200)
            return -EBADMSG;
        break;
    default:
        break;
    }
    return weft_curl_error(code, os_errno);
}

/* libcurl's socket(), made here to keep its errno, which libcurl drops
 * (it says only CURLE_COULDNT_CONNECT), and to count the sockets: a
 * transfer that made one tried to connect. */
static curl_socket_t on_opensocket(void *clientp, curlsocktype purpose,
                                   struct curl_sockaddr *addr)
{
    xfer *x = clientp;
    (void)purpose;
    int fd = socket(addr->family, addr->socktype, addr->protocol);
    if (fd < 0) {
        x->socket_errno = errno;
        return CURL_SOCKET_BAD;
    }
    x->sockets++;
    return fd;
}

/* ---- libcurl's callbacks: where to watch, when to call back ---- */

/* wc->reg[s], growing the table; NULL: out of memory. */
static unsigned char *reg_of(wcurl *wc, curl_socket_t s)
{
    if (s >= wc->nreg) {
        int n = wc->nreg ? wc->nreg : 64;
        while (n <= s)
            n *= 2;
        unsigned char *r = realloc(wc->reg, (size_t)n);
        if (!r)
            return NULL;
        memset(r + wc->nreg, 0, (size_t)(n - wc->nreg));
        wc->reg = r;
        wc->nreg = n;
    }
    return &wc->reg[s];
}

/* libcurl says REMOVE when a transfer ends and its connection goes back
 * to the cache, and again before it closes a socket. Taking the
 * descriptor out of the set at once would cost an epoll_ctl per request,
 * and putting it back on the connection's next use another; so it stays
 * in the set, marked idle, and leaves only if it reports an event while
 * idle (a level-triggered set would report it again and again) or when
 * libcurl wants it again with other events. A closed socket leaves the
 * set by itself (the kernel drops a closed file's registrations), and a
 * new socket may get its number: so a descriptor that comes back from
 * idle is re-armed with EPOLL_CTL_MOD, which succeeds only for the file
 * that was added (epoll keys registrations by number and file), ENOENT
 * saying it is another file, which is added. */
static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp,
                     void *socketp)
{
    (void)easy;
    wcurl *wc = userp;
    unsigned char *reg = reg_of(wc, s);
    if (what == CURL_POLL_REMOVE) {
        if (reg && (*reg & REG_ADDED)) {
            *reg |= REG_IDLE;
        } else {
            /* The descriptor may be closed already (and then left the
             * set). */
            epoll_ctl(wc->epfd, EPOLL_CTL_DEL, s, NULL);
            if (reg)
                *reg = 0;
        }
        curl_multi_assign(wc->multi, s, NULL);
        return 0;
    }
    if (!reg)
        return -1; /* libcurl fails the transfer */
    unsigned char want = REG_ADDED;
    struct epoll_event ev = {.data.fd = s};
    if (what & CURL_POLL_IN) {
        ev.events |= EPOLLIN;
        want |= REG_IN;
    }
    if (what & CURL_POLL_OUT) {
        ev.events |= EPOLLOUT;
        want |= REG_OUT;
    }
    /* socketp marks a descriptor libcurl has not removed since it was
     * added here: the same file, so the same events need no call. */
    if (socketp && *reg == want)
        return 0;
    /* Otherwise MOD if the set holds this number (ENOENT: a file closed
     * and made again behind libcurl's back, or since it went idle), ADD if
     * not (EEXIST: it holds it after all). */
    int op = socketp || (*reg & REG_ADDED) ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    int rc = epoll_ctl(wc->epfd, op, s, &ev);
    if (rc != 0 && errno == ENOENT)
        rc = epoll_ctl(wc->epfd, EPOLL_CTL_ADD, s, &ev);
    else if (rc != 0 && errno == EEXIST)
        rc = epoll_ctl(wc->epfd, EPOLL_CTL_MOD, s, &ev);
    if (rc != 0) {
        *reg = 0;
        return -1; /* libcurl fails the transfer */
    }
    *reg = want;
    curl_multi_assign(wc->multi, s, wc);
    return 0;
}

static int on_timer(CURLM *multi, long ms, void *userp)
{
    (void)multi;
    wcurl *wc = userp;
    weft_time was = wc->timer;
    wc->timer = ms < 0 ? WEFT_NEVER : weft_now() + (weft_time)ms * WEFT_MSEC;
    /* A driver asleep until a later instant must look again. */
    if (wc->timer < was && wc->driver && wc->driver_parked)
        weft_sem_release(&wc->driver->wake, 1);
    return 0;
}

/* ---- the worker's state ---- */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* At the worker's end: every transfer is over (their tasks have ended). */
static void wc_free(void *arg)
{
    wcurl *wc = arg;
    curl_multi_cleanup(wc->multi);
    weft_close(wc->epfd);
    free(wc->reg);
    free(wc);
    if (tl_wc == wc)
        tl_wc = NULL;
}

/* The calling worker's state, made on first use; NULL with *err set. */
static wcurl *wc_get(int *err)
{
    if (tl_wc)
        return tl_wc;
    if (weft_worker_id() < 0) {
        *err = -EPERM;
        return NULL;
    }
    pthread_once(&global_once, global_init);
    *err = -ENOMEM;
    if (global_rc != CURLE_OK)
        return NULL;
    wcurl *wc = calloc(1, sizeof(*wc));
    if (!wc)
        return NULL;
    wc->timer = WEFT_NEVER;
    wc->epfd = epoll_create1(EPOLL_CLOEXEC);
    wc->multi = curl_multi_init();
    if (wc->epfd < 0 || !wc->multi || weft_on_worker_exit(wc_free, wc) != 0) {
        if (wc->epfd >= 0)
            close(wc->epfd);
        if (wc->multi)
            curl_multi_cleanup(wc->multi);
        free(wc);
        return NULL;
    }
    curl_multi_setopt(wc->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(wc->multi, CURLMOPT_SOCKETDATA, wc);
    curl_multi_setopt(wc->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(wc->multi, CURLMOPT_TIMERDATA, wc);
    tl_wc = wc;
    return wc;
}

CURLM *weft_curl_multi(void)
{
    int err;
    wcurl *wc = wc_get(&err);
    return wc ? wc->multi : NULL;
}

/* ---- driving ---- */

/* Around every call into the multi handle. */
static void curl_enter(wcurl *wc)
{
    wc->busy++;
}

static void curl_leave(wcurl *wc)
{
    if (--wc->busy == 0 && wc->idle_waiters > 0) {
        weft_sem_release(&wc->idle, wc->idle_waiters);
        wc->idle_waiters = 0;
    }
}

/* Waits while a callback of a transfer is parked inside libcurl (which
 * refuses calls made meanwhile). Not a cancellation point: a cancelled
 * task still waits (yielding), since it must take its handle out. */
static void wait_not_busy(wcurl *wc)
{
    while (wc->busy) {
        wc->idle_waiters++;
        if (weft_sem_acquire(&wc->idle, 1) != 0) {
            if (wc->idle_waiters > 0)
                wc->idle_waiters--;
            weft_yield();
        }
    }
}

static void unlink_xfer(wcurl *wc, xfer *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        wc->head = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->prev = x->next = NULL;
}

static void act(wcurl *wc, curl_socket_t s, int mask)
{
    int running;
    curl_enter(wc);
    curl_multi_socket_action(wc->multi, s, mask, &running);
    curl_leave(wc);
}

/* Takes the finished transfers out of the multi handle and wakes their
 * tasks (self's is only marked: its task is the caller). */
static void harvest(wcurl *wc, xfer *self)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(wc->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE)
            continue;
        CURL *easy = m->easy_handle; /* m dies with the removal */
        CURLcode code = m->data.result;
        xfer *y = wc->head;
        while (y && y->easy != easy)
            y = y->next;
        curl_enter(wc);
        curl_multi_remove_handle(wc->multi, easy);
        curl_leave(wc);
        if (!y)
            continue; /* not ours: cannot happen */
        unlink_xfer(wc, y);
        y->code = code;
        y->done = true;
        if (y != self)
            weft_sem_release(&y->wake, 1);
    }
}

/* One round of the driver x: wait for news, act on it. 0, or x's error
 * (-ETIMEDOUT at its deadline, -ECANCELED). */
static int drive(wcurl *wc, xfer *x, weft_time deadline)
{
    weft_case c[2] = {
        {.op = WEFT_OP_READ, .fd = wc->epfd},
        {.op = WEFT_OP_SEM, .sem = &x->wake},
    };
    weft_time until = wc->timer < deadline ? wc->timer : deadline;
    wc->driver_parked = true;
    int r = weft_select(c, 2, until);
    wc->driver_parked = false;
    if (r < 0 && r != -ETIMEDOUT)
        return r;
    if (r == 0) {
        struct epoll_event ev[64];
        int n = epoll_wait(wc->epfd, ev, 64, 0);
        /* An idle connection's news (the peer closed it, or reset it):
         * it leaves the watch, and libcurl sees the news when it next
         * checks the connection. Without EPOLLIN or EPOLLOUT it stays in
         * the set, where its next use re-arms it with one MOD; an error
         * or hang-up, which epoll reports whatever the events, takes it
         * out. */
        for (int i = 0; i < n; i++) {
            int fd = ev[i].data.fd;
            if (fd >= wc->nreg || !(wc->reg[fd] & REG_IDLE))
                continue;
            struct epoll_event none = {.data.fd = fd};
            if ((ev[i].events & (EPOLLERR | EPOLLHUP)) ||
                epoll_ctl(wc->epfd, EPOLL_CTL_MOD, fd, &none) != 0) {
                epoll_ctl(wc->epfd, EPOLL_CTL_DEL, fd, NULL);
                wc->reg[fd] = 0;
            } else {
                wc->reg[fd] = REG_ADDED | REG_IDLE;
            }
            ev[i].data.fd = -1;
        }
        for (int i = 0; i < n; i++) {
            int fd = ev[i].data.fd;
            /* Gone idle since epoll_wait: the transfer that ended (run by
             * an earlier action, with libcurl's timeouts) took what was
             * there; anything left is reported again next round. */
            if (fd < 0 || (fd < wc->nreg && (wc->reg[fd] & REG_IDLE)))
                continue;
            int mask = 0;
            if (ev[i].events & EPOLLIN)
                mask |= CURL_CSELECT_IN;
            if (ev[i].events & EPOLLOUT)
                mask |= CURL_CSELECT_OUT;
            if (ev[i].events & (EPOLLERR | EPOLLHUP))
                mask |= CURL_CSELECT_ERR;
            act(wc, fd, mask);
        }
    }
    if (wc->timer <= weft_now()) {
        wc->timer = WEFT_NEVER; /* libcurl sets it again if it must */
        act(wc, CURL_SOCKET_TIMEOUT, 0);
    }
    harvest(wc, x);
    if (!x->done && r == -ETIMEDOUT && weft_now() >= deadline)
        return -ETIMEDOUT;
    return 0;
}

/* x's transfer is over, or x's task left: if it drove, or if nobody
 * drives (the task woken to take over was cancelled before it could),
 * wakes the next one, which takes over. A wake too many only makes a
 * task look again. */
static void hand_over(wcurl *wc, xfer *x)
{
    if (wc->driver == x)
        wc->driver = NULL;
    if (!wc->driver && wc->head)
        weft_sem_release(&wc->head->wake, 1);
}

/* Puts easy, whose transfer x is, into the worker's multi handle and x
 * on its list. Returns 0, or the error with *code set. */
static int xfer_start(wcurl *wc, xfer *x, CURL *easy, CURLcode *code)
{
    wait_not_busy(wc);
    curl_enter(wc);
    CURLMcode mc = curl_multi_add_handle(wc->multi, easy);
    curl_leave(wc);
    if (mc != CURLM_OK) {
        *code = mc == CURLM_OUT_OF_MEMORY ? CURLE_OUT_OF_MEMORY
                                          : CURLE_BAD_FUNCTION_ARGUMENT;
        return multi_error(mc);
    }
    /* Set only now that easy is ours: a handle in another transfer
     * (-EBUSY) keeps its own. Nothing connects before the first action. */
    curl_easy_getinfo(easy, CURLINFO_OS_ERRNO, &x->os_errno_start);
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, on_opensocket);
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, x);
    x->next = wc->head;
    if (wc->head)
        wc->head->prev = x;
    wc->head = x;
    return 0;
}

/* Waits for x's end, driving the multi handle when it is x's turn.
 * Returns 0 once x is done, or -ETIMEDOUT / -ECANCELED with x taken out
 * of the multi handle and its code set to say so. */
static int xfer_wait(wcurl *wc, xfer *x, weft_time deadline)
{
    int rc = 0;
    while (!x->done) {
        if (!wc->driver)
            wc->driver = x;
        if (wc->driver == x)
            rc = drive(wc, x, deadline);
        else
            rc = weft_sem_acquire_until(&x->wake, 1, deadline);
        if (rc < 0 && !x->done)
            break;
        rc = 0;
    }
    if (!x->done) {
        /* Cancelled or out of time: out of the multi handle at once. */
        wait_not_busy(wc);
        curl_enter(wc);
        curl_multi_remove_handle(wc->multi, x->easy);
        curl_leave(wc);
        unlink_xfer(wc, x);
        x->code = rc == -ETIMEDOUT ? CURLE_OPERATION_TIMEDOUT
                                   : CURLE_ABORTED_BY_CALLBACK;
    }
    return rc;
}

int weft_curl_perform_ex(CURL *easy, CURLcode *code, weft_time deadline)
{
    int err;
    CURLcode dummy;
    if (!code)
        code = &dummy;
    *code = CURLE_BAD_FUNCTION_ARGUMENT;
    if (!easy)
        return -EINVAL;
    wcurl *wc = wc_get(&err);
    if (!wc) {
        *code = err == -ENOMEM ? CURLE_OUT_OF_MEMORY : CURLE_FAILED_INIT;
        return err;
    }
    if (deadline <= weft_now()) {
        *code = CURLE_OPERATION_TIMEDOUT;
        return -ETIMEDOUT;
    }
    xfer x = {.easy = easy};
    err = xfer_start(wc, &x, easy, code);
    if (err < 0)
        return err;
    int rc = xfer_wait(wc, &x, deadline);
    hand_over(wc, &x);
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, NULL);
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, NULL);
    *code = x.code;
    if (rc < 0)
        return rc;
    return transfer_error(easy, &x, x.code);
}

int weft_curl_perform(CURL *easy, weft_time deadline)
{
    return weft_curl_perform_ex(easy, NULL, deadline);
}
