/* SPDX-License-Identifier: MIT */
/*
 * weft_curl: libcurl's transfers driven by weft, against the fault server
 * (test/fault_server.h) in the same runtime. Anything about time runs
 * under the virtual clock (the server's delays are weft time too), so a
 * stalled body times out at its deadline's virtual instant and no test
 * waits for real. HTTPS uses a certificate made by scripts/test-cert.sh.
 */
#include "t.h"
#include "weft.h"
#include "weft_curl.h"

#include "fault_server.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* ---- helpers ---- */

/* A response as the tests look at it. */
typedef struct resp {
    long status;
    size_t bytes;
    bool pattern_ok; /* the body is the server's a..z pattern so far */
    curl_off_t retry_after;
    CURLcode code;
    int rc;
} resp;

static size_t on_body(char *p, size_t size, size_t n, void *u)
{
    resp *r = u;
    for (size_t i = 0; i < size * n; i++)
        if (p[i] != (char)('a' + (r->bytes + i) % 26))
            r->pattern_ok = false;
    r->bytes += size * n;
    return size * n;
}

/* The options every request here sets. */
static void easy_setup(CURL *e, resp *r)
{
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
}

/* GET base+path with e (a fresh handle if e is NULL), until deadline. */
static resp get(CURL *e, const char *base, const char *path, weft_time deadline)
{
    resp r = {.pattern_ok = true};
    char url[256];
    snprintf(url, sizeof url, "%s%s", base, path);
    CURL *own = e ? NULL : curl_easy_init();
    if (own)
        e = own;
    ASSERT(e != NULL);
    curl_easy_setopt(e, CURLOPT_URL, url);
    easy_setup(e, &r);
    /* libcurl sends a request again, once, on a new connection when a
     * reused one dies before any answer: for the paths that kill the
     * connection, a new one, so each call is exactly one request. */
    bool kills = strncmp(path, "/reset", 6) == 0 ||
                 strncmp(path, "/close", 6) == 0 ||
                 strncmp(path, "/flaky_reset", 12) == 0;
    curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, kills ? 1L : 0L);
    r.rc = weft_curl_perform_ex(e, &r.code, deadline);
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.status);
    curl_easy_getinfo(e, CURLINFO_RETRY_AFTER, &r.retry_after);
    if (own)
        curl_easy_cleanup(own);
    return r;
}

/* A test body: runs with the server started, its base URL given. */
typedef struct env {
    fault_server *srv;
    char base[64];
    void (*body)(struct env *);
    const char *cert_dir; /* HTTPS when set */
    void *arg;
} env;

static int with_server(void *arg)
{
    env *v = arg;
    fault_server_opts o = {0};
    char cert[256], key[256];
    if (v->cert_dir) {
        snprintf(cert, sizeof cert, "%s/cert.pem", v->cert_dir);
        snprintf(key, sizeof key, "%s/key.pem", v->cert_dir);
        o.cert_file = cert;
        o.key_file = key;
    }
    ASSERT_EQ(fault_server_start(NULL, &o, &v->srv), 0);
    snprintf(v->base, sizeof v->base, "%s://127.0.0.1:%d",
             v->cert_dir ? "https" : "http", fault_server_port(v->srv));
    v->body(v);
    fault_server_stop(v->srv);
    return 0;
}

static int run_with_server(int workers, weft_clock_kind clock,
                           void (*body)(env *), void *arg)
{
    env v = {.body = body, .arg = arg};
    return t_run(workers, clock, 0, with_server, &v);
}

static fault_server_stats stats_of(env *v)
{
    fault_server_stats s;
    fault_server_stats_get(v->srv, &s);
    return s;
}

static int open_fds(void)
{
    return t_proc_count("/proc/self/fd");
}

/* "http://127.0.0.1:<port>" for a port nobody listens on: one taken,
 * then closed. */
static void refused_base(char *buf, size_t n)
{
    int fd = weft_tcp_listen("127.0.0.1", 0, 1, 0);
    ASSERT(fd >= 0);
    int port = weft_local_port(fd);
    ASSERT(port > 0);
    weft_close(fd);
    snprintf(buf, n, "http://127.0.0.1:%d", port);
}

/* Takes every descriptor left (duplicates of an open /dev/null) into
 * fds[*n...]: the process is then at its limit. */
static int null_fd = -1;

static void fill_fds(int *fds, int *n, int max)
{
    while (*n < max && (fds[*n] = dup(null_fd)) >= 0)
        (*n)++;
}

/* Lowers the process's descriptor limit to a little above what is open
 * (the old limit in *was, for setrlimit after), then takes every
 * descriptor left into fds: the process is at its limit (EMFILE). */
static void to_the_limit(struct rlimit *was, int *fds, int *n, int max)
{
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, was), 0);
    struct rlimit low = *was;
    low.rlim_cur = (rlim_t)open_fds() + 64;
    if (low.rlim_cur > was->rlim_cur)
        low.rlim_cur = was->rlim_cur;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    fill_fds(fds, n, max);
    ASSERT(*n < max);
    ASSERT_EQ(errno, EMFILE);
}

/* ---- the error table ---- */

TEST(error_table)
{
    ASSERT_EQ(weft_curl_error(CURLE_OK, 0), 0);
    ASSERT_EQ(weft_curl_error(CURLE_OPERATION_TIMEDOUT, 0), -ETIMEDOUT);
    ASSERT_EQ(weft_curl_error(CURLE_COULDNT_RESOLVE_HOST, 0), -ENOENT);
    ASSERT_EQ(weft_curl_error(CURLE_COULDNT_RESOLVE_PROXY, 0), -ENOENT);
    ASSERT_EQ(weft_curl_error(CURLE_COULDNT_CONNECT, 0), -ECONNREFUSED);
    ASSERT_EQ(weft_curl_error(CURLE_COULDNT_CONNECT, ECONNREFUSED),
              -ECONNREFUSED);
    ASSERT_EQ(weft_curl_error(CURLE_COULDNT_CONNECT, ENETUNREACH),
              -ENETUNREACH);
    ASSERT_EQ(weft_curl_error(CURLE_COULDNT_CONNECT, EHOSTUNREACH),
              -EHOSTUNREACH);
    ASSERT_EQ(weft_curl_error(CURLE_SSL_CONNECT_ERROR, 0), -EPROTO);
    ASSERT_EQ(weft_curl_error(CURLE_PEER_FAILED_VERIFICATION, 0),
              -EKEYREJECTED);
    ASSERT_EQ(weft_curl_error(CURLE_COULDNT_CONNECT, EMFILE), -EMFILE);
    ASSERT_EQ(weft_curl_error(CURLE_COULDNT_CONNECT, ENFILE), -ENFILE);
    /* A receive with the socket's error broke; one without, libcurl could
     * not decode (a bad chunk size). */
    ASSERT_EQ(weft_curl_error(CURLE_RECV_ERROR, ECONNRESET), -ECONNRESET);
    ASSERT_EQ(weft_curl_error(CURLE_RECV_ERROR, 0), -EBADMSG);
    ASSERT_EQ(weft_curl_error(CURLE_SEND_ERROR, 0), -ECONNRESET);
    ASSERT_EQ(weft_curl_error(CURLE_GOT_NOTHING, 0), -ECONNRESET);
    ASSERT_EQ(weft_curl_error(CURLE_PARTIAL_FILE, 0), -EPIPE);
    ASSERT_EQ(weft_curl_error(CURLE_WEIRD_SERVER_REPLY, 0), -EBADMSG);
    ASSERT_EQ(weft_curl_error(CURLE_TOO_MANY_REDIRECTS, 0), -ELOOP);
    ASSERT_EQ(weft_curl_error(CURLE_URL_MALFORMAT, 0), -EINVAL);
    ASSERT_EQ(weft_curl_error(CURLE_UNSUPPORTED_PROTOCOL, 0), -EINVAL);
    ASSERT_EQ(weft_curl_error(CURLE_OUT_OF_MEMORY, 0), -ENOMEM);
    ASSERT_EQ(weft_curl_error(CURLE_ABORTED_BY_CALLBACK, 0), -ECONNABORTED);
    ASSERT_EQ(weft_curl_error(CURLE_FTP_WEIRD_PASV_REPLY, 0), -EIO);
}

/* ---- misuse ---- */

static void *plain_thread_perform(void *arg)
{
    (void)arg;
    CURL *e = curl_easy_init();
    int rc = weft_curl_perform(e, WEFT_NEVER);
    curl_easy_cleanup(e);
    return (void *)(intptr_t)rc;
}

static int same_handle_twice(void *arg)
{
    CURL *e = arg;
    return weft_curl_perform(e, weft_now() + 60 * WEFT_SEC);
}

static void misuse_body(env *v)
{
    ASSERT_EQ(weft_curl_perform(NULL, WEFT_NEVER), -EINVAL);
    /* A deadline already past: not started. */
    CURL *e = curl_easy_init();
    CURLcode code;
    curl_easy_setopt(e, CURLOPT_URL, "http://127.0.0.1:1/");
    ASSERT_EQ(weft_curl_perform_ex(e, &code, weft_now()), -ETIMEDOUT);
    ASSERT_EQ(code, CURLE_OPERATION_TIMEDOUT);
    ASSERT_EQ(stats_of(v).accepted, 0);
    /* The same handle in two transfers at once: the second is refused,
     * the first goes on. */
    char url[128];
    snprintf(url, sizeof url, "%s/slow/100", v->base);
    curl_easy_setopt(e, CURLOPT_URL, url);
    resp r = {.pattern_ok = true};
    easy_setup(e, &r);
    weft_scope *s = scope_open();
    weft_task_handle h;
    ASSERT(weft_spawn_ex(s, same_handle_twice, e,
                         &(weft_spawn_opts){.handle = &h}) >= 0);
    weft_yield(); /* it adds e and parks */
    ASSERT_EQ(weft_curl_perform(e, WEFT_NEVER), -EBUSY);
    int st = -1;
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(st, 0);
    scope_end(s);
    /* A malformed URL. */
    curl_easy_setopt(e, CURLOPT_URL, "http://[::1");
    ASSERT_EQ(weft_curl_perform(e, WEFT_NEVER), -EINVAL);
    curl_easy_cleanup(e);
}

TEST(misuse_gets_clear_errors)
{
    pthread_t th;
    void *rc;
    ASSERT_EQ(pthread_create(&th, NULL, plain_thread_perform, NULL), 0);
    pthread_join(th, &rc);
    ASSERT_EQ((intptr_t)rc, -EPERM);
    ASSERT_EQ(run_with_server(1, WEFT_CLOCK_VIRTUAL, misuse_body, NULL), 0);
}

/* ---- plain transfers, connection reuse ---- */

/* GET path with a fresh handle: it must answer 200. */
static void get_200(env *v, const char *path)
{
    resp r = get(NULL, v->base, path, weft_now() + 10 * WEFT_SEC);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(r.status, 200);
}

static int get_ok_task(void *arg)
{
    get_200(arg, "/ok");
    return 0;
}

static void reuse_body(env *v)
{
    weft_time dl = weft_now() + 60 * WEFT_SEC;
    CURL *e = curl_easy_init();
    for (int i = 0; i < 20; i++) {
        resp r = get(e, v->base, "/bytes/1000", dl);
        ASSERT_EQ(r.rc, 0);
        ASSERT_EQ(r.code, CURLE_OK);
        ASSERT_EQ(r.status, 200);
        ASSERT_EQ(r.bytes, 1000);
        ASSERT(r.pattern_ok);
    }
    curl_easy_cleanup(e);
    /* Other tasks of the same worker, other handles: the same
     * connection, from the worker's multi handle. */
    for (int i = 0; i < 3; i++) {
        weft_scope *s = scope_open();
        ASSERT(weft_spawn(s, get_ok_task, v) >= 0);
        scope_end(s);
    }
    fault_server_stats st = stats_of(v);
    ASSERT_EQ(st.requests, 23);
    ASSERT_EQ(st.accepted, 1);
}

TEST(connections_are_reused_across_tasks_of_a_worker)
{
    ASSERT_EQ(run_with_server(1, WEFT_CLOCK_VIRTUAL, reuse_body, NULL), 0);
}

static int get_slow_task(void *arg)
{
    get_200(arg, "/slow/100");
    return 0;
}

static void multi_opts_body(env *v)
{
    CURLM *m = weft_curl_multi();
    ASSERT(m != NULL);
    ASSERT(weft_curl_multi() == m); /* the worker's one */
    ASSERT_EQ(curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, 2L),
              CURLM_OK);
    weft_time t = weft_now();
    weft_scope *s = scope_open();
    for (int i = 0; i < 8; i++)
        ASSERT(weft_spawn(s, get_slow_task, v) >= 0);
    scope_end(s);
    /* Two at a time: libcurl queues the others inside the multi handle. */
    ASSERT_EQ(stats_of(v).accepted, 2);
    ASSERT(weft_now() - t >= 400 * WEFT_MSEC);
    ASSERT(weft_now() - t < 500 * WEFT_MSEC);
}

static void *plain_thread_multi(void *arg)
{
    (void)arg;
    return weft_curl_multi();
}

TEST(the_workers_multi_handle_takes_limits)
{
    pthread_t th;
    void *m = &th;
    ASSERT_EQ(pthread_create(&th, NULL, plain_thread_multi, NULL), 0);
    pthread_join(th, &m);
    ASSERT(m == NULL);
    ASSERT_EQ(run_with_server(1, WEFT_CLOCK_VIRTUAL, multi_opts_body, NULL), 0);
}

/* A write callback that parks (which it should not do): the worker's
 * other transfers wait for it, then go on; nothing is lost. */
static size_t parking_body(char *p, size_t size, size_t n, void *u)
{
    resp *r = u;
    if (r->bytes == 0)
        ASSERT_EQ(weft_sleep_for(50 * WEFT_MSEC), 0);
    return on_body(p, size, n, u);
}

static int parking_get(void *arg)
{
    env *v = arg;
    resp r = {.pattern_ok = true};
    char url[128];
    snprintf(url, sizeof url, "%s/bytes/100000", v->base);
    CURL *e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, parking_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &r);
    ASSERT_EQ(weft_curl_perform(e, weft_now() + 10 * WEFT_SEC), 0);
    ASSERT_EQ(r.bytes, 100000);
    ASSERT(r.pattern_ok);
    curl_easy_cleanup(e);
    return 0;
}

static void parking_callback_body(env *v)
{
    weft_scope *s = scope_open();
    for (int i = 0; i < 4; i++)
        ASSERT(weft_spawn(s, parking_get, v) >= 0);
    /* While the first callback sleeps, more transfers come: they wait
     * for it to return before they enter the multi handle. */
    ASSERT_EQ(weft_sleep_for(10 * WEFT_MSEC), 0);
    for (int i = 0; i < 4; i++)
        ASSERT(weft_spawn(s, get_ok_task, v) >= 0);
    scope_end(s);
    ASSERT_EQ(stats_of(v).by_kind[FAULT_BYTES], 4);
    ASSERT_EQ(stats_of(v).by_kind[FAULT_OK], 4);
}

TEST(a_callback_that_parks_holds_up_only_its_worker)
{
    ASSERT_EQ(
        run_with_server(1, WEFT_CLOCK_VIRTUAL, parking_callback_body, NULL), 0);
}

/* ---- every fault, and what it gives ---- */

static void faults_body(env *v)
{
    weft_time t0 = weft_now();
    weft_time dl = t0 + 60 * WEFT_SEC;
    resp r;

    r = get(NULL, v->base, "/status/503?retry_after=3", dl);
    ASSERT_EQ(r.rc, 0); /* an HTTP status is not a transfer error */
    ASSERT_EQ(r.status, 503);
    ASSERT_EQ(r.retry_after, 3);
    r = get(NULL, v->base, "/status/429?retry_after=7", dl);
    ASSERT_EQ(r.status, 429);
    ASSERT_EQ(r.retry_after, 7);
    r = get(NULL, v->base, "/nothing-here", dl);
    ASSERT_EQ(r.status, 404);

    r = get(NULL, v->base, "/reset", dl);
    ASSERT_EQ(r.rc, -ECONNRESET);
    r = get(NULL, v->base, "/close", dl);
    ASSERT_EQ(r.rc, -ECONNRESET);
    ASSERT_EQ(r.code, CURLE_GOT_NOTHING);

    r = get(NULL, v->base, "/bytes/10000000", dl);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(r.bytes, 10000000);
    ASSERT(r.pattern_ok);
    r = get(NULL, v->base, "/chunked/100000", dl);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(r.bytes, 100000);
    ASSERT(r.pattern_ok);

    /* Slow: done at its virtual instant. */
    weft_time t = weft_now();
    r = get(NULL, v->base, "/slow/5000", dl);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(r.status, 200);
    ASSERT(weft_now() - t >= 5 * WEFT_SEC);
    ASSERT(weft_now() - t < 6 * WEFT_SEC);

    /* A body that stalls halfway: -ETIMEDOUT at the deadline, and the
     * handle is reusable at once. */
    CURL *e = curl_easy_init();
    t = weft_now();
    r = get(e, v->base, "/stall/100000", t + WEFT_SEC);
    ASSERT_EQ(r.rc, -ETIMEDOUT);
    ASSERT_EQ(r.code, CURLE_OPERATION_TIMEDOUT);
    ASSERT_EQ(r.bytes, 50000);
    ASSERT(weft_now() - t >= WEFT_SEC);
    ASSERT(weft_now() - t < WEFT_SEC + 100 * WEFT_MSEC);
    r = get(e, v->base, "/ok", dl);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(r.status, 200);
    curl_easy_cleanup(e);

    /* libcurl's own timeout (real time, 200 ms) against the stall. */
    e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 200L);
    r = get(e, v->base, "/stall/1000", dl);
    ASSERT_EQ(r.rc, -ETIMEDOUT);
    ASSERT_EQ(r.code, CURLE_OPERATION_TIMEDOUT);
    curl_easy_cleanup(e);

    /* The server saw every one, and nothing is left open but what the
     * handles freed above may still keep for a moment. */
    fault_server_stats st = stats_of(v);
    ASSERT_EQ(st.by_kind[FAULT_RESET], 1);
    ASSERT_EQ(st.by_kind[FAULT_CLOSE], 1);
    ASSERT_EQ(st.by_kind[FAULT_STALL], 2);
    ASSERT_EQ(st.by_kind[FAULT_SLOW], 1);
}

TEST(faults_give_their_codes_and_deadlines_hold)
{
    ASSERT_EQ(run_with_server(1, WEFT_CLOCK_VIRTUAL, faults_body, NULL), 0);
}

/* A bad URL is only -EINVAL; why is libcurl's to say, as weft_curl.h
 * shows: its CURLcode, its sentence in CURLOPT_ERRORBUFFER (for a
 * malformed URL from libcurl 8.1.1 on), and its URL parser's code. */
static int bad_url_reason(void *arg)
{
    (void)arg;
    const char *bad = "http://127.0.0.1:99999/";
    CURL *e = curl_easy_init();
    char why[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, why);
    CURLcode code;
    curl_easy_setopt(e, CURLOPT_URL, bad);
    ASSERT_EQ(weft_curl_perform_ex(e, &code, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(code, CURLE_URL_MALFORMAT);
    ASSERT(strstr(curl_easy_strerror(code), "URL") != NULL);
    if (curl_version_info(CURLVERSION_NOW)->version_num >= 0x080101)
        ASSERT(strstr(why, "Port number") != NULL);
    CURLU *u = curl_url();
    CURLUcode uc = curl_url_set(u, CURLUPART_URL, bad, 0);
    ASSERT_EQ(uc, CURLUE_BAD_PORT_NUMBER);
    ASSERT(strstr(curl_url_strerror(uc), "Port number") != NULL);
    curl_url_cleanup(u);
    /* A protocol libcurl does not know: named in the sentence. */
    curl_easy_setopt(e, CURLOPT_URL, "nosuch://127.0.0.1/");
    ASSERT_EQ(weft_curl_perform_ex(e, &code, WEFT_NEVER), -EINVAL);
    ASSERT_EQ(code, CURLE_UNSUPPORTED_PROTOCOL);
    ASSERT(strstr(why, "\"nosuch\" not supported") != NULL);
    /* Emptied when the next transfer starts. */
    curl_easy_setopt(e, CURLOPT_URL, "http://127.0.0.1:1/");
    ASSERT_EQ(weft_curl_perform_ex(e, &code, WEFT_NEVER), -ECONNREFUSED);
    ASSERT(strstr(why, "nosuch") == NULL);
    curl_easy_cleanup(e);
    return 0;
}

TEST(a_bad_urls_reason_is_libcurls)
{
    ASSERT_EQ(t_run_mono(1, bad_url_reason, NULL), 0);
}

/* Answers that are not HTTP: -EBADMSG, each with libcurl's own code;
 * a URL libcurl refuses stays -EINVAL. */
static void not_http_body(env *v)
{
    weft_time dl = weft_now() + 60 * WEFT_SEC;
    resp r = get(NULL, v->base, "/garbage", dl);
    ASSERT_EQ(r.rc, -EBADMSG);
    /* libcurl's word: HTTP/0.9 refused, or a weird reply (it varies with
     * the version). */
    ASSERT(r.code == CURLE_UNSUPPORTED_PROTOCOL ||
           r.code == CURLE_WEIRD_SERVER_REPLY);
    r = get(NULL, v->base, "/binary", dl);
    ASSERT_EQ(r.rc, -EBADMSG);
    ASSERT(r.code == CURLE_UNSUPPORTED_PROTOCOL ||
           r.code == CURLE_WEIRD_SERVER_REPLY);
    r = get(NULL, v->base, "/bad_chunk", dl);
    ASSERT_EQ(r.rc, -EBADMSG);
    ASSERT_EQ(r.code, CURLE_RECV_ERROR);
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(r.bytes, 16); /* the good chunk came */
    /* The same handle, after each: still told apart. */
    CURL *e = curl_easy_init();
    r = get(e, v->base, "/binary", dl);
    ASSERT_EQ(r.rc, -EBADMSG);
    r = get(e, v->base, "/ok", dl);
    ASSERT_EQ(r.rc, 0);
    r = get(e, v->base, "/garbage", dl);
    ASSERT_EQ(r.rc, -EBADMSG);
    r = get(e, v->base, "/bad_chunk", dl);
    ASSERT_EQ(r.rc, -EBADMSG);
    /* After a refused connect (a retry's first try): the refusal's system
     * error is not the bad chunk's (libcurl before 8.8 keeps it). */
    char refused[64];
    refused_base(refused, sizeof refused);
    r = get(e, refused, "/", dl);
    ASSERT_EQ(r.rc, -ECONNREFUSED);
    r = get(e, v->base, "/bad_chunk", dl);
    ASSERT_EQ(r.rc, -EBADMSG);
    ASSERT_EQ(r.code, CURLE_RECV_ERROR);
    /* A reset, and a reset again, are each -ECONNRESET. */
    r = get(e, v->base, "/reset", dl);
    ASSERT_EQ(r.rc, -ECONNRESET);
    r = get(e, v->base, "/reset", dl);
    ASSERT_EQ(r.rc, -ECONNRESET);
    r = get(e, refused, "/", dl);
    ASSERT_EQ(r.rc, -ECONNREFUSED);
    r = get(e, refused, "/", dl);
    ASSERT_EQ(r.rc, -ECONNREFUSED);
    r = get(e, v->base, "/reset", dl);
    ASSERT_EQ(r.rc, -ECONNRESET);
    r = get(e, v->base, "/ok", dl);
    ASSERT_EQ(r.rc, 0);
    /* A scheme libcurl does not speak: no request, -EINVAL. */
    CURLcode code;
    curl_easy_setopt(e, CURLOPT_URL, "nosuch://127.0.0.1/");
    ASSERT_EQ(weft_curl_perform_ex(e, &code, dl), -EINVAL);
    ASSERT_EQ(code, CURLE_UNSUPPORTED_PROTOCOL);
    curl_easy_cleanup(e);
    fault_server_stats st = stats_of(v);
    ASSERT_EQ(st.by_kind[FAULT_GARBAGE], 2);
    ASSERT_EQ(st.by_kind[FAULT_BINARY], 2);
    ASSERT_EQ(st.by_kind[FAULT_BAD_CHUNK], 3);
    ASSERT_EQ(st.by_kind[FAULT_RESET], 3);
}

TEST(replies_that_are_not_http_are_ebadmsg)
{
    ASSERT_EQ(run_with_server(1, WEFT_CLOCK_VIRTUAL, not_http_body, NULL), 0);
}

/* Out of descriptors: the process's problem, -EMFILE, not the server's
 * (-ECONNREFUSED); with descriptors free again, the next request works. */
static void emfile_body(env *v)
{
    weft_time dl = weft_now() + 60 * WEFT_SEC;
    CURL *e = curl_easy_init();
    /* No connection kept for the next time: it needs a new socket. */
    curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
    resp r = get(e, v->base, "/ok", dl); /* the worker's multi is made */
    ASSERT_EQ(r.rc, 0);
    struct rlimit was;
    int fds[1024], n = 0;
    to_the_limit(&was, fds, &n, 1024);
    r = get(e, v->base, "/ok", dl);
    /* A name: the resolver needs descriptors too (/etc/hosts, a socket
     * to the name server). */
    resp named = get(e, "http://weft-test.invalid", "/", dl);
    while (n > 0)
        close(fds[--n]);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &was), 0);
    ASSERT_EQ(r.rc, -EMFILE);
    ASSERT_EQ(r.code, CURLE_COULDNT_CONNECT);
    ASSERT_EQ(named.rc, -EMFILE);
    r = get(e, v->base, "/ok", dl);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(r.status, 200);
    curl_easy_cleanup(e);
    ASSERT_EQ(stats_of(v).by_kind[FAULT_OK], 2);
}

TEST(out_of_descriptors_is_emfile)
{
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT(null_fd >= 0);
    ASSERT_EQ(run_with_server(1, WEFT_CLOCK_VIRTUAL, emfile_body, NULL), 0);
    close(null_fd);
}

/* A refusal while the process is at its limit only after libcurl's socket
 * was made (another thread took the last descriptors): the refusal's code,
 * since this transfer's socket() did not fail. The test's own
 * CURLOPT_CLOSESOCKETFUNCTION takes the descriptor libcurl frees. */
typedef struct grab {
    int fds[1024];
    int n;
} grab;

static int close_and_grab(void *clientp, curl_socket_t fd)
{
    grab *g = clientp;
    int rc = close(fd);
    fill_fds(g->fds, &g->n, 1024);
    return rc;
}

static int refused_at_limit(void *arg)
{
    (void)arg;
    char refused[64];
    refused_base(refused, sizeof refused);
    CURL *e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_URL, refused);
    static grab g;
    g.n = 0;
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, close_and_grab);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, &g);
    weft_time dl = weft_now() + 60 * WEFT_SEC;
    ASSERT_EQ(weft_curl_perform(e, dl), -ECONNREFUSED); /* the multi made */
    while (g.n > 0)
        close(g.fds[--g.n]);
    /* All but a few free: libcurl's socket gets one. */
    struct rlimit was;
    int fds[1024], n = 0;
    to_the_limit(&was, fds, &n, 1024);
    for (int i = 0; i < 4; i++)
        close(fds[--n]);
    CURLcode code;
    int rc = weft_curl_perform_ex(e, &code, dl);
    int at_limit = dup(null_fd) < 0 && errno == EMFILE;
    while (g.n > 0)
        close(g.fds[--g.n]);
    while (n > 0)
        close(fds[--n]);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &was), 0);
    ASSERT(at_limit); /* as it was when the transfer ended */
    ASSERT_EQ(code, CURLE_COULDNT_CONNECT);
    ASSERT_EQ(rc, -ECONNREFUSED);
    curl_easy_cleanup(e);
    return 0;
}

TEST(a_refusal_at_the_limit_is_still_refused)
{
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT(null_fd >= 0);
    ASSERT_EQ(t_run_mono(1, refused_at_limit, NULL), 0);
    close(null_fd);
}

/* An interim 1xx status, then no HTTP: -EBADMSG, as with no status. */
static int interim_then_garbage_server(void *arg)
{
    int lfd = *(int *)arg;
    int c = weft_accept(lfd, NULL, WEFT_NEVER);
    ASSERT(c >= 0);
    char buf[4096];
    size_t have = 0;
    while (have < sizeof buf - 1) {
        ptrdiff_t k =
            weft_read(c, buf + have, sizeof buf - 1 - have, WEFT_NEVER);
        ASSERT(k > 0);
        have += (size_t)k;
        buf[have] = 0;
        if (strstr(buf, "\r\n\r\n"))
            break;
    }
    const char *reply = "HTTP/1.1 100 Continue\r\n\r\n"
                        "this is not HTTP\r\n\r\n";
    ASSERT_EQ(weft_write_all(c, reply, strlen(reply), NULL, WEFT_NEVER), 0);
    weft_close(c);
    return 0;
}

static int interim_then_garbage(void *arg)
{
    (void)arg;
    int lfd = weft_tcp_listen("127.0.0.1", 0, 4, 0);
    ASSERT(lfd >= 0);
    weft_scope *s = scope_open();
    ASSERT(weft_spawn(s, interim_then_garbage_server, &lfd) >= 0);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", weft_local_port(lfd));
    CURL *e = curl_easy_init();
    resp r = {.pattern_ok = true};
    curl_easy_setopt(e, CURLOPT_URL, url);
    easy_setup(e, &r);
    CURLcode code;
    int rc = weft_curl_perform_ex(e, &code, weft_now() + 60 * WEFT_SEC);
    long status = -1;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(e);
    scope_end(s);
    weft_close(lfd);
    ASSERT(code == CURLE_UNSUPPORTED_PROTOCOL ||
           code == CURLE_WEIRD_SERVER_REPLY);
    ASSERT(status < 200);
    ASSERT_EQ(rc, -EBADMSG);
    return 0;
}

TEST(an_interim_status_then_no_http_is_ebadmsg)
{
    ASSERT_EQ(t_run_mono(1, interim_then_garbage, NULL), 0);
}

static int refused_and_unresolved(void *arg)
{
    (void)arg;
    /* A port nobody listens on: take one, then close it. */
    int fd = weft_tcp_listen("127.0.0.1", 0, 1, 0);
    ASSERT(fd >= 0);
    int port = weft_local_port(fd);
    ASSERT(port > 0);
    weft_close(fd);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    CURL *e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_URL, url);
    ASSERT_EQ(weft_curl_perform(e, weft_now() + 30 * WEFT_SEC), -ECONNREFUSED);
    /* A reserved name (RFC 6761) no resolver knows. */
    curl_easy_setopt(e, CURLOPT_URL, "http://weft-test.invalid/");
    ASSERT_EQ(weft_curl_perform(e, weft_now() + 30 * WEFT_SEC), -ENOENT);
    curl_easy_cleanup(e);
    return 0;
}

TEST(refused_and_unresolved_have_their_codes)
{
    ASSERT_EQ(t_run_mono(1, refused_and_unresolved, NULL), 0);
}

/* ---- with retry, breaker and limiter ---- */

/* One attempt: GET path; 5xx and 429 are -EAGAIN (retryable), a
 * transport error is itself. */
typedef struct attempt {
    env *v;
    const char *path;
    int calls;
} attempt;

static int try_get(void *arg)
{
    attempt *a = arg;
    a->calls++;
    resp r = get(NULL, a->v->base, a->path, WEFT_NEVER);
    if (r.rc < 0)
        return r.rc;
    if (r.status == 429 || r.status >= 500)
        return -EAGAIN;
    return r.status == 200 ? 0 : -EIO;
}

static void retry_body(env *v)
{
    weft_retry p = {.max_attempts = 5,
                    .base_ns = 100 * WEFT_MSEC,
                    .jitter = WEFT_JITTER_NONE};
    /* 503 twice, then 200: three attempts, 100 + 200 ms of backoff. */
    attempt a = {v, "/flaky/k1/2", 0};
    weft_time t = weft_now();
    ASSERT_EQ(weft_retry_call(&p, try_get, &a), 0);
    ASSERT_EQ(a.calls, 3);
    ASSERT_EQ(weft_now() - t, 300 * WEFT_MSEC);
    /* Resets are retryable too (-ECONNRESET). */
    attempt b = {v, "/flaky_reset/k2/3", 0};
    t = weft_now();
    ASSERT_EQ(weft_retry_call(&p, try_get, &b), 0);
    ASSERT_EQ(b.calls, 4);
    ASSERT_EQ(weft_now() - t, 700 * WEFT_MSEC);
    /* Always failing: max_attempts, then its last status. */
    attempt c = {v, "/status/500", 0};
    ASSERT_EQ(weft_retry_call(&p, try_get, &c), -EAGAIN);
    ASSERT_EQ(c.calls, 5);
    /* A 404 is not retried. */
    attempt d = {v, "/nope", 0};
    ASSERT_EQ(weft_retry_call(&p, try_get, &d), -EIO);
    ASSERT_EQ(d.calls, 1);
    /* A stall with a timeout per attempt: each attempt is cut at 250 ms
     * and retried (-ETIMEDOUT), three in all. */
    weft_retry q = {.max_attempts = 3,
                    .base_ns = 50 * WEFT_MSEC,
                    .jitter = WEFT_JITTER_NONE,
                    .attempt_timeout_ns = 250 * WEFT_MSEC};
    attempt s = {v, "/stall/1000", 0};
    t = weft_now();
    int rc = weft_retry_call(&q, try_get, &s);
    ASSERT(rc == -ETIMEDOUT || rc == -ECANCELED);
    ASSERT_EQ(s.calls, 3);
    ASSERT_EQ(weft_now() - t,
              3 * 250 * WEFT_MSEC + 50 * WEFT_MSEC + 100 * WEFT_MSEC);
    fault_server_stats st = stats_of(v);
    ASSERT_EQ(st.by_kind[FAULT_FLAKY], 3);
    ASSERT_EQ(st.by_kind[FAULT_FLAKY_RESET], 4);
    ASSERT_EQ(st.by_kind[FAULT_STALL], 3);
}

TEST(retry_with_backoff_over_faults)
{
    ASSERT_EQ(run_with_server(1, WEFT_CLOCK_VIRTUAL, retry_body, NULL), 0);
}

static void breaker_body(env *v)
{
    weft_breaker *b;
    ASSERT_EQ(
        weft_breaker_new(&b, &(weft_breaker_opts){.failure_threshold = 3,
                                                  .cooldown_ns = WEFT_SEC}),
        0);
    attempt a = {v, "/status/500", 0};
    for (int i = 0; i < 3; i++)
        ASSERT_EQ(weft_breaker_call(b, try_get, &a), -EAGAIN);
    /* Open: rejected without a request. */
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(weft_breaker_call(b, try_get, &a), -EHOSTDOWN);
    ASSERT_EQ(a.calls, 3);
    ASSERT_EQ(stats_of(v).by_kind[FAULT_STATUS], 3);
    /* After the cool-down, one trial that succeeds closes it. */
    ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    attempt ok = {v, "/ok", 0};
    ASSERT_EQ(weft_breaker_call(b, try_get, &ok), 0);
    weft_breaker_stats bs;
    ASSERT_EQ(weft_breaker_stats_get(b, &bs), 0);
    ASSERT_EQ(bs.state, WEFT_BREAKER_CLOSED);
    ASSERT_EQ(bs.rejected, 5);
    ASSERT_EQ(weft_breaker_free(b), 0);
}

TEST(breaker_stops_requests_to_a_failing_server)
{
    ASSERT_EQ(run_with_server(1, WEFT_CLOCK_VIRTUAL, breaker_body, NULL), 0);
}

typedef struct paced {
    env *v;
    weft_limiter *l;
    weft_time t0;
    atomic_llong at[10];
    atomic_int n;
} paced;

static int paced_get(void *arg)
{
    paced *p = arg;
    ASSERT_EQ(weft_limiter_acquire(p->l, 1, WEFT_NEVER), 0);
    int i = atomic_fetch_add(&p->n, 1);
    atomic_store(&p->at[i], weft_now() - p->t0);
    resp r = get(NULL, p->v->base, "/ok", WEFT_NEVER);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(r.status, 200);
    return 0;
}

static void limiter_body(env *v)
{
    paced p = {.v = v, .t0 = weft_now()};
    ASSERT_EQ(weft_limiter_new(&p.l, 10, WEFT_SEC, 1), 0);
    weft_scope *s = scope_open();
    for (int i = 0; i < 10; i++)
        ASSERT(weft_spawn(s, paced_get, &p) >= 0);
    scope_end(s);
    /* 10 per second, burst 1: one every 100 ms, the first at once. */
    for (int i = 0; i < 10; i++)
        ASSERT_EQ(atomic_load(&p.at[i]), i * 100 * WEFT_MSEC);
    ASSERT_EQ(stats_of(v).by_kind[FAULT_OK], 10);
    ASSERT_EQ(weft_limiter_free(p.l), 0);
}

TEST(limiter_paces_requests)
{
    ASSERT_EQ(run_with_server(2, WEFT_CLOCK_VIRTUAL, limiter_body, NULL), 0);
}

/* ---- cancellation in the middle of many transfers ---- */

typedef struct many {
    env *v;
    atomic_int started, cancelled, other;
} many;

static int slow_get(void *arg)
{
    many *m = arg;
    CURL *e = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "%s/slow/600000", m->v->base);
    curl_easy_setopt(e, CURLOPT_URL, url);
    resp r = {.pattern_ok = true};
    easy_setup(e, &r);
    atomic_fetch_add(&m->started, 1);
    int rc = weft_curl_perform(e, WEFT_NEVER);
    atomic_fetch_add(rc == -ECANCELED ? &m->cancelled : &m->other, 1);
    /* The handle left the multi handle: it can be freed at once. */
    curl_easy_cleanup(e);
    return rc == -ECANCELED ? 0 : rc;
}

static void cancel_body(env *v)
{
    int n = (int)T_LIVE(1000);
    many m = {.v = v};
    int fds = open_fds();
    weft_scope *s = scope_open();
    for (int i = 0; i < n; i++)
        ASSERT(weft_spawn(s, slow_get, &m) >= 0);
    /* Virtual time moves only once every request is in and waiting. */
    while (stats_of(v).by_kind[FAULT_SLOW] < n)
        ASSERT_EQ(weft_sleep_for(WEFT_SEC), 0);
    ASSERT(weft_now() < 600 * WEFT_SEC);
    ASSERT_EQ(stats_of(v).open, n);
    ASSERT(open_fds() >= fds + 2 * n); /* both ends of each connection */
    scope_cancel_end(s);
    ASSERT_EQ(atomic_load(&m.started), n);
    ASSERT_EQ(atomic_load(&m.cancelled), n);
    ASSERT_EQ(atomic_load(&m.other), 0);
    /* The client closed its end of every connection at the cancel (the
     * server's tasks sleep, so their ends stay until the server stops).
     * A few more are the workers' own: each multi handle's epoll set and
     * libcurl's wake-up socket pair, each worker's poller. */
    ASSERT(open_fds() <= fds + n + 16);
}

TEST(cancel_in_the_middle_of_a_thousand_transfers)
{
    int fds = open_fds();
    ASSERT_EQ(run_with_server(2, WEFT_CLOCK_VIRTUAL, cancel_body, NULL), 0);
    /* The multi handles and their epoll sets went with the workers. */
    ASSERT_EQ(open_fds(), fds);
}

/* A transfer cancelled through its task's handle, in flight: the easy
 * handle is out of the multi handle, and the next transfer with it works. */
static int cancellable_get(void *arg)
{
    void **a = arg;
    env *v = a[0];
    CURL *e = a[1];
    resp r = get(e, v->base, "/slow/60000", WEFT_NEVER);
    ASSERT_EQ(r.code, CURLE_ABORTED_BY_CALLBACK);
    return r.rc;
}

static void cancel_reuse_body(env *v)
{
    CURL *e = curl_easy_init();
    void *a[2] = {v, e};
    weft_scope *s = scope_open();
    weft_task_handle h;
    ASSERT(weft_spawn_ex(s, cancellable_get, a,
                         &(weft_spawn_opts){.handle = &h}) >= 0);
    while (stats_of(v).by_kind[FAULT_SLOW] < 1)
        ASSERT_EQ(weft_sleep_for(WEFT_MSEC), 0);
    ASSERT_EQ(weft_task_cancel(h), 0);
    int st = 0;
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(st, -ECANCELED);
    ASSERT(weft_now() < WEFT_SEC); /* at once, not at the answer */
    scope_end(s);
    resp r = get(e, v->base, "/bytes/1234", weft_now() + 10 * WEFT_SEC);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(r.bytes, 1234);
    curl_easy_cleanup(e);
}

TEST(a_cancelled_transfer_leaves_its_handle_reusable)
{
    ASSERT_EQ(run_with_server(2, WEFT_CLOCK_VIRTUAL, cancel_reuse_body, NULL),
              0);
}

/* The task that is to drive next is cancelled just before the driver
 * hands over to it (here from the driver's own write callback, so the
 * order is fixed): the others must still get a driver. */
typedef struct handover {
    env *v;
    weft_task_handle b;
    atomic_int a_done, c_done, b_rc;
} handover;

static size_t cancel_b_on_body(char *p, size_t size, size_t n, void *u)
{
    handover *h = u;
    (void)p;
    ASSERT_EQ(weft_task_cancel(h->b), 0);
    return size * n;
}

static int handover_a(void *arg)
{
    handover *h = arg;
    char url[128];
    snprintf(url, sizeof url, "%s/slow/100", h->v->base);
    CURL *e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, cancel_b_on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, h);
    ASSERT_EQ(weft_curl_perform(e, WEFT_NEVER), 0);
    curl_easy_cleanup(e);
    atomic_store(&h->a_done, 1);
    return 0;
}

static int handover_b(void *arg)
{
    handover *h = arg;
    resp r = get(NULL, h->v->base, "/slow/60000", WEFT_NEVER);
    atomic_store(&h->b_rc, r.rc);
    return 0;
}

static int handover_c(void *arg)
{
    handover *h = arg;
    resp r = get(NULL, h->v->base, "/slow/300", WEFT_NEVER);
    ASSERT_EQ(r.rc, 0);
    atomic_store(&h->c_done, 1);
    return 0;
}

static void handover_body(env *v)
{
    handover h = {.v = v};
    weft_scope *s = scope_open();
    /* A first (it drives), then C, then B (the newest: the one A hands
     * over to). One worker: each runs until it parks in its transfer. */
    ASSERT(weft_spawn(s, handover_a, &h) >= 0);
    ASSERT_EQ(weft_yield(), 0);
    ASSERT(weft_spawn(s, handover_c, &h) >= 0);
    ASSERT_EQ(weft_yield(), 0);
    ASSERT(weft_spawn_ex(s, handover_b, &h,
                         &(weft_spawn_opts){.handle = &h.b}) >= 0);
    scope_end(s);
    ASSERT_EQ(atomic_load(&h.a_done), 1);
    ASSERT_EQ(atomic_load(&h.b_rc), -ECANCELED);
    ASSERT_EQ(atomic_load(&h.c_done), 1);
    ASSERT(weft_now() < WEFT_SEC);
    weft_task_detach(h.b);
}

TEST(a_cancel_of_the_next_driver_leaves_the_others_driven)
{
    ASSERT_EQ(run_with_server(1, WEFT_CLOCK_VIRTUAL, handover_body, NULL), 0);
}

/* ---- many requests, many tasks ---- */

typedef struct load {
    env *v;
    int per_task;
    atomic_long ok, bytes;
} load;

static int load_task(void *arg)
{
    load *l = arg;
    CURL *e = curl_easy_init();
    int me = weft_worker_id();
    for (int i = 0; i < l->per_task; i++) {
        char path[32];
        int size = 1 + (i * 37 + me) % 4000;
        snprintf(path, sizeof path, "/bytes/%d", size);
        resp r = get(e, l->v->base, path, weft_now() + 60 * WEFT_SEC);
        ASSERT_EQ(r.rc, 0);
        ASSERT_EQ(r.status, 200);
        ASSERT_EQ(r.bytes, size);
        ASSERT(r.pattern_ok);
        atomic_fetch_add(&l->ok, 1);
        atomic_fetch_add(&l->bytes, size);
    }
    curl_easy_cleanup(e);
    return 0;
}

static void load_body(env *v)
{
    load *l = v->arg;
    l->v = v;
    weft_scope *s = scope_open();
    for (int i = 0; i < 64; i++)
        ASSERT(weft_spawn(s, load_task, l) >= 0);
    scope_end(s);
    ASSERT_EQ(atomic_load(&l->ok), 64L * l->per_task);
    ASSERT_EQ(stats_of(v).by_kind[FAULT_BYTES], 64L * l->per_task);
    /* Connections are reused: far fewer than requests. */
    ASSERT(stats_of(v).accepted <= 64L * l->per_task / 10);
}

TEST(ten_thousand_requests_through_64_tasks)
{
    load l = {.per_task = (int)((T_SCALE(10000) + 63) / 64)};
    int fds = open_fds();
    ASSERT_EQ(run_with_server(2, WEFT_CLOCK_MONOTONIC, load_body, &l), 0);
    ASSERT_EQ(atomic_load(&l.ok), 64L * l.per_task);
    ASSERT_EQ(open_fds(), fds);
}

/* ---- HTTPS (when the fault server has OpenSSL) ---- */
#ifdef FAULT_SERVER_TLS

/* Makes a self-signed certificate in a fresh directory. */
static const char *make_cert(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/weft-test-curl.XXXXXX");
    ASSERT(mkdtemp(dir) != NULL);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s/scripts/test-cert.sh %s >/dev/null 2>&1",
             WEFT_SOURCE_DIR, dir);
    ASSERT_EQ(system(cmd), 0);
    return dir;
}

static void drop_cert(const char *dir)
{
    char p[512];
    snprintf(p, sizeof p, "%s/cert.pem", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/key.pem", dir);
    unlink(p);
    rmdir(dir);
}

static void https_body(env *v)
{
    char cert[256];
    snprintf(cert, sizeof cert, "%s/cert.pem", v->cert_dir);
    weft_time dl = weft_now() + 60 * WEFT_SEC;
    CURL *e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_CAINFO, cert);
    for (int i = 0; i < 5; i++) {
        resp r = get(e, v->base, "/bytes/1000000", dl);
        ASSERT_EQ(r.rc, 0);
        ASSERT_EQ(r.status, 200);
        ASSERT_EQ(r.bytes, 1000000);
        ASSERT(r.pattern_ok);
    }
    resp r = get(e, v->base, "/reset", dl);
    ASSERT_EQ(r.rc, -ECONNRESET);
    curl_easy_cleanup(e);
    /* A handshake that cannot agree (at most TLS 1.1 asked, at least 1.2
     * served) is -EPROTO, told apart from a certificate refused. */
    e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_CAINFO, cert);
    curl_easy_setopt(
        e, CURLOPT_SSLVERSION,
        (long)(CURL_SSLVERSION_TLSv1 | CURL_SSLVERSION_MAX_TLSv1_1));
    r = get(e, v->base, "/ok", dl);
    ASSERT_EQ(r.rc, -EPROTO);
    curl_easy_cleanup(e);
    /* Not trusted without the certificate. */
    e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_CAINFO, "/dev/null");
    r = get(e, v->base, "/ok", dl);
    ASSERT_EQ(r.rc, -EKEYREJECTED);
    curl_easy_cleanup(e);
    fault_server_stats st = stats_of(v);
    ASSERT(st.tls_handshakes >= 1);
    ASSERT(st.tls_handshakes <= 2); /* the one reset costs one more */
    ASSERT(st.tls_failures >= 1);
    ASSERT_EQ(st.by_kind[FAULT_BYTES], 5);
}

TEST(https_with_a_self_signed_certificate)
{
    char dir[64];
    env v = {.body = https_body, .cert_dir = make_cert(dir, sizeof dir)};
    int fds = open_fds();
    ASSERT_EQ(t_run_mono(2, with_server, &v), 0);
    ASSERT_EQ(open_fds(), fds);
    drop_cert(dir);
}
#endif /* FAULT_SERVER_TLS */
