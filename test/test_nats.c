/* SPDX-License-Identifier: MIT */
/*
 * weft_nats (include/weft_nats.h) against a real nats-server, which each
 * test starts itself on 127.0.0.1 and a free port, and stops by its PID
 * (SIGKILL, then waitpid). The server is a child of a worker thread with
 * PR_SET_PDEATHSIG, so a test that aborts leaves none behind. Where no
 * nats-server is installed the tests are skipped, saying why (failed where
 * WEFT_TEST_REQUIRE names nats). Real time: a real server cannot run on
 * the virtual clock.
 */
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"
#include "weft_nats.h"

#define T_DEADLINE (weft_now() + 20 * WEFT_SEC)

/* ---- the server ---- */

typedef struct t_server {
    pid_t pid;
    int port;
    int err;      /* the read end of its stderr, drained by a task */
    char dir[64]; /* JetStream's store (-js -sd dir), or empty: none */
} t_server;

static const char *t_server_path(void)
{
    static const char *const paths[] = {"/usr/sbin/nats-server",
                                        "/usr/bin/nats-server",
                                        "/usr/local/bin/nats-server"};
    const char *env = getenv("WEFT_NATS_SERVER");
    if (env && *env)
        return env;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (access(paths[i], X_OK) == 0)
            return paths[i];
    return NULL;
}

static int t_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    ASSERT(fd >= 0);
    ASSERT(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    ASSERT(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Reads the server's stderr until it ends (the server exited): a task. */
static int t_drain(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[4096];
    while (weft_read(fd, buf, sizeof buf, WEFT_NEVER) > 0) {
    }
    weft_close(fd);
    return 0;
}

/* waitpid for a killed server, on the blocking pool: a server can take
 * a while to go (its store's files), and a worker must not wait. */
static int t_reap(void *arg)
{
    pid_t pid = *(pid_t *)arg;
    int st;
    return waitpid(pid, &st, 0) == pid ? 0 : -errno;
}

/* Starts nats-server on s->port and reads its stderr until it says it is
 * ready: returns 0; or, if it exits first (its port taken meanwhile, by
 * a test running beside this one), reaps it and returns -1, its log in
 * log. */
static int t_server_try(t_server *s, const char *path, char *log, size_t n)
{
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", s->port);
    int p[2];
    ASSERT(pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
    pid_t parent = getpid();
    s->pid = fork();
    ASSERT(s->pid >= 0);
    if (s->pid == 0) {
        dup2(p[1], 2);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        if (s->dir[0])
            execl(path, "nats-server", "-a", "127.0.0.1", "-p", portstr, "-js",
                  "-sd", s->dir, (char *)NULL);
        else
            execl(path, "nats-server", "-a", "127.0.0.1", "-p", portstr,
                  (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    s->err = p[0];
    size_t got = 0;
    weft_time deadline = T_DEADLINE;
    for (;;) {
        ptrdiff_t k = weft_read(s->err, log + got, n - 1 - got, deadline);
        if (k <= 0) {
            log[got] = 0;
            ASSERT(k == 0); /* it exited; a timeout fails the test */
            weft_close(s->err);
            ASSERT_EQ(weft_blocking(t_reap, &s->pid), 0);
            return -1;
        }
        got += (size_t)k;
        log[got] = 0;
        if (strstr(log, "Server is ready"))
            return 0;
        if (got == n - 1)
            got = 0;
    }
}

/* Starts nats-server on port (0: a free one) and waits until it is ready;
 * then a task of scope sc drains its stderr. Called from a task: the
 * server is a child of this worker's thread, which lives as long as the
 * runtime. */
static void t_server_start(t_server *s, int port, weft_scope *sc)
{
    const char *path = t_server_path();
    if (!path)
        T_NEED("nats", "no nats-server (scripts/deps.sh nats installs it)");
    char log[8192];
    for (int tries = 0;; tries++) {
        s->port = port ? port : t_free_port();
        if (t_server_try(s, path, log, sizeof log) == 0)
            break;
        if (tries == 4)
            T_FAIL("nats-server did not start: %s", log);
    }
    ASSERT(weft_spawn(sc, t_drain, (void *)(intptr_t)s->err) >= 0);
}

static void t_server_stop(t_server *s)
{
    ASSERT(kill(s->pid, SIGKILL) == 0);
    ASSERT_EQ(weft_blocking(t_reap, &s->pid), 0);
    s->pid = 0;
}

/* Opens the test's scope and starts a server whose stderr a task of it
 * drains. */
static void t_begin(weft_scope **sc, t_server *srv)
{
    ASSERT(weft_scope_open(sc, NULL) == 0);
    srv->dir[0] = 0;
    t_server_start(srv, 0, *sc);
}

/* t_begin with JetStream, its store in a new temporary directory. */
static void t_begin_js(weft_scope **sc, t_server *srv)
{
    ASSERT(weft_scope_open(sc, NULL) == 0);
    snprintf(srv->dir, sizeof srv->dir, "/tmp/weft-nats.XXXXXX");
    ASSERT(mkdtemp(srv->dir) != NULL);
    t_server_start(srv, 0, *sc);
}

static int t_rm(const char *path, const struct stat *st, int flag,
                struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int t_rm_dir(void *arg)
{
    return nftw(arg, t_rm, 16, FTW_DEPTH | FTW_PHYS);
}

/* Stops the server, removes its store (on the blocking pool: files), and
 * joins the scope (the drain task, the drivers). */
static void t_end(weft_scope *sc, t_server *srv)
{
    t_server_stop(srv);
    if (srv->dir[0])
        ASSERT_EQ(weft_blocking(t_rm_dir, srv->dir), 0);
    ASSERT_EQ(weft_scope_join(sc), 0);
    weft_scope_free(sc);
}

/* Takes c's next event, which must be of kind kind, and returns it. */
static weft_nats_event t_next_event(weft_nats_conn *c,
                                    weft_nats_event_kind kind)
{
    weft_nats_event ev;
    ASSERT_EQ(weft_nats_event_recv(c, &ev, T_DEADLINE), 0);
    ASSERT_EQ(ev.kind, kind);
    return ev;
}

/* Waits until s's queue is full with messages left behind at nats.c
 * (the driver fills the queue first). */
static void t_wait_producer(weft_nats_sub *s, weft_nats_sub_stats *st)
{
    do {
        ASSERT_EQ(weft_nats_sub_stats_get(s, st), 0);
        weft_yield();
    } while (!st->producer_waiting);
}

static void t_url(char *buf, size_t n, const t_server *s)
{
    snprintf(buf, n, "nats://127.0.0.1:%d", s->port);
}

/* Runs fn in a runtime of its own; then checks that nats.c let go of
 * everything (every connection and subscription released, its threads
 * done), which it says only once they are. */
static int t_run_nats(int workers, weft_fn fn)
{
    weft_config cfg = {0};
    cfg.workers = workers;
    int rc = weft_run(&cfg, fn, NULL);
    ASSERT_EQ(nats_CloseAndWait(10000), NATS_OK);
    return rc;
}

/* Connects to s, with a driver in sc, or fails the test. */
static weft_nats_conn *t_connect(const t_server *s, weft_scope *sc,
                                 weft_nats_opts *o)
{
    char url[64];
    weft_nats_opts none = {0};
    if (!o)
        o = &none;
    t_url(url, sizeof url, s);
    o->url = url;
    weft_nats_conn *c = NULL;
    int rc = weft_nats_connect(sc, o, &c, T_DEADLINE);
    if (rc != 0)
        T_FAIL("connect to %s: %s", url, weft_strerror(rc));
    o->url = NULL;
    return c;
}

static int64_t t_seq(natsMsg *m)
{
    char buf[32];
    int n = natsMsg_GetDataLength(m);
    ASSERT(n > 0 && n < (int)sizeof buf);
    memcpy(buf, natsMsg_GetData(m), (size_t)n);
    buf[n] = 0;
    return atoll(buf);
}

static int t_publish_seq(weft_nats_conn *c, const char *subj, int64_t i)
{
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%lld", (long long)i);
    return weft_nats_publish(c, subj, buf, (size_t)n, T_DEADLINE);
}

/* ---- pub/sub keeps the order ---- */

static int order_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_sub *s;
    ASSERT_EQ(weft_nats_subscribe(c, "t.order", NULL, &s, T_DEADLINE), 0);
    long n = T_SCALE(5000);
    for (long i = 0; i < n; i++)
        ASSERT_EQ(t_publish_seq(c, "t.order", i), 0);
    for (long i = 0; i < n; i++) {
        natsMsg *m;
        ASSERT_EQ(weft_nats_sub_recv(s, &m, T_DEADLINE), 0);
        ASSERT_EQ(t_seq(m), i);
        ASSERT(strcmp(natsMsg_GetSubject(m), "t.order") == 0);
        natsMsg_Destroy(m);
    }
    /* Nothing more, and the deadline is honoured. */
    natsMsg *m;
    ASSERT_EQ(weft_nats_sub_recv(s, &m, weft_now() + 20 * WEFT_MSEC),
              -ETIMEDOUT);
    weft_nats_sub_stats st;
    ASSERT_EQ(weft_nats_sub_stats_get(s, &st), 0);
    ASSERT_EQ(st.received, n);
    ASSERT_EQ(st.taken, n);
    ASSERT_EQ(st.queued, 0);
    ASSERT_EQ(st.dropped, 0);
    weft_nats_conn_stats cs;
    ASSERT_EQ(weft_nats_conn_stats_get(c, &cs), 0);
    ASSERT_EQ(cs.attaches, 1);
    ASSERT_EQ(cs.connected, 1);
    ASSERT(cs.read_events > 0 && cs.write_events > 0);
    ASSERT_EQ(weft_nats_sub_free(s), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(pubsub_order)
{
    ASSERT_EQ(t_run_nats(2, order_root), 0);
}

/* ---- request and reply, with deadlines ---- */

/* Replies to each request on s with its data and "!" appended, until s
 * ends. */
static int echo_task(void *arg)
{
    weft_nats_sub *s = ((void **)arg)[0];
    weft_nats_conn *c = ((void **)arg)[1];
    natsMsg *m;
    while (weft_nats_sub_recv(s, &m, WEFT_NEVER) == 0) {
        char buf[256];
        int n = natsMsg_GetDataLength(m);
        ASSERT(n >= 0 && n < (int)sizeof buf - 1);
        memcpy(buf, natsMsg_GetData(m), (size_t)n);
        buf[n++] = '!';
        if (natsMsg_GetReply(m))
            ASSERT_EQ(weft_nats_publish(c, natsMsg_GetReply(m), buf, (size_t)n,
                                        T_DEADLINE),
                      0);
        natsMsg_Destroy(m);
    }
    return 0;
}

static int request_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_sub *echo, *silent;
    ASSERT_EQ(weft_nats_subscribe(c, "t.echo", NULL, &echo, T_DEADLINE), 0);
    ASSERT_EQ(weft_nats_subscribe(c, "t.silent", NULL, &silent, T_DEADLINE), 0);
    void *ea[2] = {echo, c};
    ASSERT(weft_spawn(sc, echo_task, ea) >= 0);

    natsMsg *r = NULL;
    ASSERT_EQ(weft_nats_request(c, "t.echo", "hi", 2, &r, T_DEADLINE), 0);
    ASSERT_EQ(natsMsg_GetDataLength(r), 3);
    ASSERT(memcmp(natsMsg_GetData(r), "hi!", 3) == 0);
    natsMsg_Destroy(r);

    /* Nobody subscribes: the server says so at once. */
    ASSERT_EQ(weft_nats_request(c, "t.nobody", "x", 1, &r, T_DEADLINE), -ESRCH);
    ASSERT(r == NULL);

    /* A subscriber that never answers: the deadline passes. */
    weft_time t0 = weft_now();
    ASSERT_EQ(
        weft_nats_request(c, "t.silent", "x", 1, &r, t0 + 100 * WEFT_MSEC),
        -ETIMEDOUT);
    ASSERT(weft_now() >= t0 + 100 * WEFT_MSEC);
    /* It got the request: answer it now, late. */
    natsMsg *q;
    ASSERT_EQ(weft_nats_sub_recv(silent, &q, T_DEADLINE), 0);
    ASSERT(natsMsg_GetReply(q) != NULL);
    ASSERT_EQ(weft_nats_publish(c, natsMsg_GetReply(q), "late", 4, T_DEADLINE),
              0);
    natsMsg_Destroy(q);
    ASSERT_EQ(weft_nats_flush(c, T_DEADLINE), 0);
    weft_nats_conn_stats cs;
    ASSERT_EQ(weft_nats_conn_stats_get(c, &cs), 0);
    ASSERT_EQ(cs.late_replies, 1);
    ASSERT_EQ(cs.requests_waiting, 0);

    /* A deadline already past: -ETIMEDOUT, nothing left waiting. */
    ASSERT_EQ(weft_nats_request(c, "t.silent", "y", 1, &r, weft_now()),
              -ETIMEDOUT);
    ASSERT_EQ(weft_nats_sub_recv(silent, &q, T_DEADLINE), 0);
    natsMsg_Destroy(q);

    ASSERT_EQ(weft_nats_sub_free(silent), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    /* The echo task saw its subscription end (-EPIPE); then it is freed. */
    t_server_stop(&srv);
    ASSERT_EQ(weft_scope_join(sc), 0);
    ASSERT_EQ(weft_nats_sub_free(echo), 0);
    weft_scope_free(sc);
    return 0;
}

TEST(request_reply_deadline)
{
    ASSERT_EQ(t_run_nats(2, request_root), 0);
}

/* ---- requests on the reply slots, and past them ---- */

/* A request given up before its "no responders" status came: the status
 * comes later, and is never taken for the answer to a later request
 * (nats.c reports such a status without its subject, so a request waits
 * on a slot of its own; a slot given up on stays unused until a marker
 * sent after it comes back). */
static int slot_status_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_sub *echo;
    ASSERT_EQ(weft_nats_subscribe(c, "t.echo", NULL, &echo, T_DEADLINE), 0);
    void *ea[2] = {echo, c};
    ASSERT(weft_spawn(sc, echo_task, ea) >= 0);
    long rounds = T_SCALE(50), gave_up = 0;
    for (long i = 0; i < rounds; i++) {
        natsMsg *r = NULL;
        int rc = weft_nats_request(c, "t.nobody", "x", 1, &r,
                                   weft_now() + WEFT_USEC);
        ASSERT(rc == -ETIMEDOUT || rc == -ESRCH);
        gave_up += rc == -ETIMEDOUT;
        ASSERT_EQ(weft_nats_request(c, "t.echo", "hi", 2, &r, T_DEADLINE), 0);
        ASSERT_EQ(natsMsg_GetDataLength(r), 3);
        natsMsg_Destroy(r);
        ASSERT_EQ(weft_nats_request(c, "t.nobody", "x", 1, &r, T_DEADLINE),
                  -ESRCH);
    }
    ASSERT(gave_up > 0);
    ASSERT_EQ(weft_nats_flush(c, T_DEADLINE), 0);
    weft_nats_conn_stats cs;
    ASSERT_EQ(weft_nats_conn_stats_get(c, &cs), 0);
    ASSERT_EQ(cs.requests_waiting, 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_server_stop(&srv);
    ASSERT_EQ(weft_scope_join(sc), 0);
    ASSERT_EQ(weft_nats_sub_free(echo), 0);
    weft_scope_free(sc);
    return 0;
}

TEST(request_status_given_up_is_not_misread)
{
    ASSERT_EQ(t_run_nats(2, slot_status_root), 0);
}

#define T_MANY_REQUESTS 20 /* more than the connection's reply slots */

typedef struct many_req {
    weft_nats_conn *c;
    int i;
} many_req;

static int many_requester(void *arg)
{
    many_req *q = arg;
    char data[16];
    int n = snprintf(data, sizeof data, "%d", q->i);
    natsMsg *r = NULL;
    ASSERT_EQ(
        weft_nats_request(q->c, "t.gather", data, (size_t)n, &r, T_DEADLINE),
        0);
    char want[20];
    int w = snprintf(want, sizeof want, "%d!", q->i);
    ASSERT_EQ(natsMsg_GetDataLength(r), w);
    ASSERT(memcmp(natsMsg_GetData(r), want, (size_t)w) == 0);
    natsMsg_Destroy(r);
    return 0;
}

/* More requests at once than there are reply slots, answered in the
 * reverse order: those past the slots wait on the inbox, and each gets
 * its own answer. */
static int many_requests_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_sub *g;
    ASSERT_EQ(weft_nats_subscribe(c, "t.gather", NULL, &g, T_DEADLINE), 0);
    weft_scope *rs;
    ASSERT_EQ(weft_scope_open(&rs, NULL), 0);
    many_req q[T_MANY_REQUESTS];
    for (int i = 0; i < T_MANY_REQUESTS; i++) {
        q[i] = (many_req){.c = c, .i = i};
        ASSERT(weft_spawn(rs, many_requester, &q[i]) >= 0);
    }
    natsMsg *m[T_MANY_REQUESTS];
    for (int i = 0; i < T_MANY_REQUESTS; i++)
        ASSERT_EQ(weft_nats_sub_recv(g, &m[i], T_DEADLINE), 0);
    weft_nats_conn_stats cs;
    ASSERT_EQ(weft_nats_conn_stats_get(c, &cs), 0);
    ASSERT_EQ(cs.requests_waiting, T_MANY_REQUESTS);
    for (int i = T_MANY_REQUESTS - 1; i >= 0; i--) {
        char buf[20];
        int n = natsMsg_GetDataLength(m[i]);
        memcpy(buf, natsMsg_GetData(m[i]), (size_t)n);
        buf[n++] = '!';
        ASSERT_EQ(weft_nats_publish(c, natsMsg_GetReply(m[i]), buf, (size_t)n,
                                    T_DEADLINE),
                  0);
        natsMsg_Destroy(m[i]);
    }
    ASSERT_EQ(weft_scope_join(rs), 0);
    weft_scope_free(rs);
    ASSERT_EQ(weft_nats_sub_free(g), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(requests_past_the_reply_slots)
{
    ASSERT_EQ(t_run_nats(2, many_requests_root), 0);
}

/* ---- a blocked request, cancelled ---- */

static weft_nats_conn *cancel_conn;

static int blocked_request(void *arg)
{
    (void)arg;
    natsMsg *r = NULL;
    int rc = weft_nats_request(cancel_conn, "t.silent", "x", 1, &r, WEFT_NEVER);
    ASSERT(r == NULL);
    return rc;
}

static int cancel_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    weft_nats_conn *c = cancel_conn = t_connect(&srv, sc, NULL);
    weft_nats_sub *silent;
    ASSERT_EQ(weft_nats_subscribe(c, "t.silent", NULL, &silent, T_DEADLINE), 0);
    weft_task_handle h = {0};
    ASSERT(weft_spawn_ex(sc, blocked_request, NULL,
                         &(weft_spawn_opts){.handle = &h}) >= 0);
    /* The request reached the responder: the requester is blocked. */
    natsMsg *q;
    ASSERT_EQ(weft_nats_sub_recv(silent, &q, T_DEADLINE), 0);
    weft_nats_conn_stats cs;
    ASSERT_EQ(weft_nats_conn_stats_get(c, &cs), 0);
    ASSERT_EQ(cs.requests_waiting, 1);
    ASSERT_EQ(weft_task_cancel(h), 0);
    int status = 0;
    ASSERT_EQ(weft_task_join(h, &status), 0);
    ASSERT_EQ(status, -ECANCELED);
    ASSERT_EQ(weft_nats_conn_stats_get(c, &cs), 0);
    ASSERT_EQ(cs.requests_waiting, 0);
    /* Its reply, now, finds nobody: dropped and counted. */
    ASSERT_EQ(weft_nats_publish(c, natsMsg_GetReply(q), "late", 4, T_DEADLINE),
              0);
    natsMsg_Destroy(q);
    ASSERT_EQ(weft_nats_flush(c, T_DEADLINE), 0);
    ASSERT_EQ(weft_nats_conn_stats_get(c, &cs), 0);
    ASSERT_EQ(cs.late_replies, 1);
    /* A request in a cancelled scope does not start. */
    weft_scope *cx;
    ASSERT(weft_scope_open(&cx, NULL) == 0);
    weft_scope_cancel(cx);
    natsMsg *r = NULL;
    ASSERT_EQ(weft_nats_request(c, "t.silent", "x", 1, &r, WEFT_NEVER),
              -ECANCELED);
    weft_scope_join(cx);
    weft_scope_free(cx);
    ASSERT_EQ(weft_nats_sub_free(silent), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_server_stop(&srv);
    weft_scope_join(sc); /* counts the cancelled requester's status */
    weft_scope_free(sc);
    return 0;
}

TEST(request_cancel)
{
    ASSERT_EQ(t_run_nats(2, cancel_root), 0);
}

/* ---- the bounded queue: backpressure, and nats.c's drops counted ---- */

static int slow_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_sub *s;
    weft_nats_sub_opts so = {.capacity = 4, .pending_msgs = 16};
    ASSERT_EQ(weft_nats_subscribe(c, "t.slow", &so, &s, T_DEADLINE), 0);
    const long n = 400;
    for (long i = 0; i < n; i++)
        ASSERT_EQ(t_publish_seq(c, "t.slow", i), 0);
    /* Once the flush is back, nats.c has read every message: each is in
     * the queue, in nats.c's hands or dropped. */
    ASSERT_EQ(weft_nats_flush(c, T_DEADLINE), 0);
    weft_nats_sub_stats st;
    do { /* the driver fills the queue, and leaves the rest at nats.c */
        ASSERT_EQ(weft_nats_sub_stats_get(s, &st), 0);
        weft_yield();
    } while (!st.producer_waiting);
    ASSERT_EQ(st.queued, 4);
    ASSERT_EQ(st.capacity, 4);
    ASSERT_EQ(st.received, 4);
    ASSERT(st.full_waits >= 1);
    ASSERT(st.pending <= 16);
    ASSERT(st.dropped > 0);
    /* queued + nats.c's pending + dropped: every message, once */
    if (st.queued + (uint64_t)st.pending + (uint64_t)st.dropped != n)
        T_FAIL("queued %zu + pending %d + dropped %lld != %ld", st.queued,
               st.pending, (long long)st.dropped, n);
    weft_nats_event ev = t_next_event(c, WEFT_NATS_EVENT_SLOW_CONSUMER);
    ASSERT_EQ(ev.status, NATS_SLOW_CONSUMER);
    /* Draining: in order, each at most once, all but the dropped ones. */
    long got = 0;
    int64_t last = -1;
    while (got < n - st.dropped) {
        natsMsg *m;
        ASSERT_EQ(weft_nats_sub_recv(s, &m, T_DEADLINE), 0);
        int64_t seq = t_seq(m);
        ASSERT(seq > last);
        last = seq;
        natsMsg_Destroy(m);
        got++;
    }
    natsMsg *m;
    ASSERT_EQ(weft_nats_sub_recv(s, &m, weft_now() + 20 * WEFT_MSEC),
              -ETIMEDOUT);
    weft_nats_sub_stats st2;
    ASSERT_EQ(weft_nats_sub_stats_get(s, &st2), 0);
    ASSERT_EQ(st2.dropped, st.dropped);
    ASSERT_EQ(st2.taken, got);
    ASSERT_EQ(st2.producer_waiting, 0);
    weft_nats_conn_stats cs;
    ASSERT_EQ(weft_nats_conn_stats_get(c, &cs), 0);
    ASSERT(cs.slow_consumers >= 1);
    ASSERT_EQ(weft_nats_sub_free(s), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(backpressure_slow_consumer)
{
    ASSERT_EQ(t_run_nats(2, slow_root), 0);
}

/* A subscription freed while its queue is full and nats.c holds more:
 * nothing is left. */
static int free_full_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_sub *s;
    weft_nats_sub_opts so = {.capacity = 2};
    ASSERT_EQ(weft_nats_subscribe(c, "t.full", &so, &s, T_DEADLINE), 0);
    for (long i = 0; i < 50; i++)
        ASSERT_EQ(t_publish_seq(c, "t.full", i), 0);
    weft_nats_sub_stats st;
    t_wait_producer(s, &st);
    ASSERT_EQ(weft_nats_sub_free(s), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(free_while_full)
{
    ASSERT_EQ(t_run_nats(2, free_full_root), 0);
}

/* ---- the server killed and restarted mid-stream ---- */

static int restart_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    weft_nats_opts o = {.reconnect_wait_ns = 20 * WEFT_MSEC,
                        .max_reconnect = -1};
    weft_nats_conn *c = t_connect(&srv, sc, &o);
    weft_nats_sub *s;
    ASSERT_EQ(weft_nats_subscribe(c, "t.stream", NULL, &s, T_DEADLINE), 0);
    long n = T_SCALE(500);
    int64_t seq = 0, last = -1;
    for (; seq < n; seq++)
        ASSERT_EQ(t_publish_seq(c, "t.stream", seq), 0);
    ASSERT_EQ(weft_nats_flush(c, T_DEADLINE), 0);

    t_server_stop(&srv);
    t_next_event(c, WEFT_NATS_EVENT_DISCONNECTED);
    /* Published while disconnected: nats.c keeps them for the new
     * socket. */
    for (long i = 0; i < 10; i++, seq++)
        ASSERT_EQ(t_publish_seq(c, "t.stream", seq), 0);
    t_server_start(&srv, srv.port, sc);
    t_next_event(c, WEFT_NATS_EVENT_RECONNECTED);
    int64_t resumed = seq;
    for (long i = 0; i < n; i++, seq++)
        ASSERT_EQ(t_publish_seq(c, "t.stream", seq), 0);
    ASSERT_EQ(weft_nats_flush(c, T_DEADLINE), 0);

    /* In order, none twice; those sent before the kill (received before
     * it: flushed back) and after the reconnect all came. */
    long got = 0, after = 0;
    for (;;) {
        natsMsg *m;
        int rc = weft_nats_sub_recv(s, &m, weft_now() + 200 * WEFT_MSEC);
        if (rc == -ETIMEDOUT)
            break;
        ASSERT_EQ(rc, 0);
        int64_t v = t_seq(m);
        ASSERT(v > last);
        last = v;
        got++;
        after += v >= resumed;
        natsMsg_Destroy(m);
    }
    ASSERT(got >= 2 * n);
    ASSERT_EQ(after, n);
    weft_nats_conn_stats cs;
    ASSERT_EQ(weft_nats_conn_stats_get(c, &cs), 0);
    ASSERT_EQ(cs.attaches, 2);
    ASSERT_EQ(cs.disconnects, 1);
    ASSERT_EQ(cs.reconnects, 1);
    ASSERT_EQ(cs.connected, 1);
    /* Requests work on the new socket too. */
    ASSERT_EQ(
        weft_nats_request(c, "t.none", "x", 1, &(natsMsg *){NULL}, T_DEADLINE),
        -ESRCH);
    ASSERT_EQ(weft_nats_sub_free(s), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(server_restart_reconnects)
{
    ASSERT_EQ(t_run_nats(2, restart_root), 0);
}

/* ---- many tasks on two workers, publishing and requesting at once ---- */

typedef struct many {
    weft_nats_conn *c;
    long per_task;
    atomic_long replies;
    atomic_long published;
} many;

static int many_task(void *arg)
{
    many *m = arg;
    for (long i = 0; i < m->per_task; i++) {
        char buf[64];
        int n = snprintf(buf, sizeof buf, "%d:%ld", weft_worker_id(), i);
        ASSERT_EQ(
            weft_nats_publish(m->c, "t.many.pub", buf, (size_t)n, T_DEADLINE),
            0);
        atomic_fetch_add(&m->published, 1);
        natsMsg *r;
        ASSERT_EQ(weft_nats_request(m->c, "t.many.echo", buf, (size_t)n, &r,
                                    T_DEADLINE),
                  0);
        ASSERT_EQ(natsMsg_GetDataLength(r), n + 1);
        ASSERT(memcmp(natsMsg_GetData(r), buf, (size_t)n) == 0);
        natsMsg_Destroy(r);
        atomic_fetch_add(&m->replies, 1);
    }
    return 0;
}

static int many_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    /* Requesters on one connection, responders (a queue group) and a
     * counting subscriber on another. */
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_conn *d = t_connect(&srv, sc, NULL);
    weft_nats_sub *echo, *pubs;
    weft_nats_sub_opts qo = {.queue = "echoers", .capacity = 64};
    ASSERT_EQ(weft_nats_subscribe(d, "t.many.echo", &qo, &echo, T_DEADLINE), 0);
    ASSERT_EQ(weft_nats_subscribe(d, "t.many.pub", NULL, &pubs, T_DEADLINE), 0);
    weft_scope *responders;
    ASSERT(weft_scope_open(&responders, NULL) == 0);
    void *ea[2] = {echo, d};
    for (int i = 0; i < 4; i++)
        ASSERT(weft_spawn(responders, echo_task, ea) >= 0);

    static many m;
    m.c = c;
    m.per_task = T_SCALE(100);
    int tasks = (int)T_LIVE(32);
    weft_scope *work;
    ASSERT(weft_scope_open(&work, NULL) == 0);
    for (int i = 0; i < tasks; i++)
        ASSERT(weft_spawn(work, many_task, &m) >= 0);
    ASSERT_EQ(weft_scope_join(work), 0);
    weft_scope_free(work);
    ASSERT_EQ(atomic_load(&m.replies), tasks * m.per_task);

    long want = tasks * m.per_task;
    for (long i = 0; i < want; i++) {
        natsMsg *msg;
        ASSERT_EQ(weft_nats_sub_recv(pubs, &msg, T_DEADLINE), 0);
        natsMsg_Destroy(msg);
    }
    weft_nats_sub_stats st;
    ASSERT_EQ(weft_nats_sub_stats_get(pubs, &st), 0);
    ASSERT_EQ(st.dropped, 0);
    ASSERT_EQ(weft_nats_sub_free(pubs), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    ASSERT_EQ(weft_nats_close(d, T_DEADLINE), 0);
    ASSERT_EQ(weft_scope_join(responders), 0);
    weft_scope_free(responders);
    ASSERT_EQ(weft_nats_sub_free(echo), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(many_tasks_two_workers)
{
    ASSERT_EQ(t_run_nats(2, many_root), 0);
}

/* ---- a publish goes out at once ---- */

/* On one worker, where the driver runs only when this task lets it: a
 * publish asks the driver to write at once (nats.c's "send asap"), so a
 * few yields later it has written. Without that, nats.c's flusher thread
 * waits a millisecond before it asks, and a request and its reply each
 * took a millisecond more. */
static int asap_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    ASSERT_EQ(weft_nats_flush(c, T_DEADLINE), 0);
    for (int k = 0; k < 20; k++) {
        weft_nats_conn_stats before, after;
        ASSERT_EQ(weft_nats_conn_stats_get(c, &before), 0);
        ASSERT_EQ(weft_nats_publish(c, "t.asap", "x", 1, T_DEADLINE), 0);
        weft_time t0 = weft_now();
        do {
            weft_yield();
            ASSERT_EQ(weft_nats_conn_stats_get(c, &after), 0);
        } while (after.write_events == before.write_events &&
                 weft_now() - t0 < 200 * WEFT_USEC);
        if (after.write_events == before.write_events)
            T_FAIL("publish %d not written within 200 us", k);
    }
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(publish_written_at_once)
{
    ASSERT_EQ(t_run_nats(1, asap_root), 0);
}

/* ---- connecting: refused, and a connection whose scope is cancelled ---- */

static int refused_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    ASSERT(weft_scope_open(&sc, NULL) == 0);
    if (!t_server_path())
        T_NEED("nats", "no nats-server (scripts/deps.sh nats installs it)");
    char url[64];
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", t_free_port());
    weft_nats_opts o = {.url = url};
    weft_nats_conn *c = (weft_nats_conn *)1;
    ASSERT_EQ(weft_nats_connect(sc, &o, &c, T_DEADLINE), -ECONNREFUSED);
    ASSERT(c == NULL);
    ASSERT_EQ(weft_scope_join(sc), 0); /* its driver ended */
    weft_scope_free(sc);
    return 0;
}

TEST(connect_refused)
{
    ASSERT_EQ(t_run_nats(2, refused_root), 0);
}

static int scope_cancel_root(void *arg)
{
    (void)arg;
    weft_scope *sc, *conn_scope;
    t_server srv = {0};
    t_begin(&sc, &srv);
    ASSERT(weft_scope_open(&conn_scope, NULL) == 0);
    weft_nats_conn *c = t_connect(&srv, conn_scope, NULL);
    weft_nats_sub *s;
    ASSERT_EQ(weft_nats_subscribe(c, "t.x", NULL, &s, T_DEADLINE), 0);
    /* Cancelling the driver's scope closes the connection: the join ends,
     * the subscription ends, calls say -ENOTCONN. */
    weft_scope_cancel(conn_scope);
    weft_scope_join(conn_scope);
    weft_scope_free(conn_scope);
    natsMsg *m;
    ASSERT_EQ(weft_nats_sub_recv(s, &m, T_DEADLINE), -EPIPE);
    ASSERT_EQ(weft_nats_publish(c, "t.x", "a", 1, T_DEADLINE), -ENOTCONN);
    ASSERT_EQ(weft_nats_request(c, "t.x", "a", 1, &m, T_DEADLINE), -ENOTCONN);
    ASSERT_EQ(weft_nats_sub_free(s), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(scope_cancel_closes)
{
    ASSERT_EQ(t_run_nats(2, scope_cancel_root), 0);
}

/* ---- a burst bigger than nats.c's read buffer, read on one worker ---- */

/* The publishing task keeps the only worker busy while the server sends
 * the burst to the other connection, whose socket then holds far more
 * than one read of nats.c takes (32 KiB): with an edge-triggered poller
 * its driver must read on until the socket is empty, or the rest waits
 * for an edge that never comes. */
static int burst_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_conn *d = t_connect(&srv, sc, NULL);
    weft_nats_sub *s;
    weft_nats_sub_opts so = {.capacity = 4096};
    ASSERT_EQ(weft_nats_subscribe(d, "t.burst", &so, &s, T_DEADLINE), 0);
    const long n = 2000;
    static char big[1000];
    memset(big, 'x', sizeof big);
    for (long i = 0; i < n; i++) {
        int k = snprintf(big, 32, "%ld", i);
        big[k] = ' ';
        ASSERT_EQ(weft_nats_publish(c, "t.burst", big, sizeof big, T_DEADLINE),
                  0);
    }
    ASSERT_EQ(weft_nats_flush(c, T_DEADLINE), 0);
    for (long i = 0; i < n; i++) {
        natsMsg *m;
        int rc = weft_nats_sub_recv(s, &m, weft_now() + 5 * WEFT_SEC);
        if (rc != 0)
            T_FAIL("message %ld of %ld: %s", i, n, weft_strerror(rc));
        ASSERT_EQ(natsMsg_GetDataLength(m), sizeof big);
        ASSERT_EQ(atol(natsMsg_GetData(m)), i);
        natsMsg_Destroy(m);
    }
    ASSERT_EQ(weft_nats_sub_free(s), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    ASSERT_EQ(weft_nats_close(d, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(burst_one_worker)
{
    ASSERT_EQ(t_run_nats(1, burst_root), 0);
}

static void t_end_two(weft_scope *sc, t_server *srv, weft_nats_conn *c,
                      weft_nats_conn *d);

/* ---- closing while messages stream in ---- */

typedef struct flood {
    weft_nats_conn *c;
    _Atomic int stop;
    long sent;
} flood;

/* Publishes 1 KB messages on t.flood until told to stop, a flush every
 * 256. */
static int flood_task(void *arg)
{
    flood *f = arg;
    static char big[1024];
    memset(big, 'x', sizeof big);
    while (!atomic_load(&f->stop)) {
        int k = snprintf(big, 32, "%ld", f->sent++);
        big[k] = ' ';
        ASSERT_EQ(
            weft_nats_publish(f->c, "t.flood", big, sizeof big, T_DEADLINE), 0);
        if (f->sent % 256 == 0)
            ASSERT_EQ(weft_nats_flush(f->c, T_DEADLINE), 0);
    }
    return 0;
}

/* A connection closed while its socket is busy with incoming messages:
 * nats.c closes the socket in Close, and its reads run outside its lock,
 * so the driver must have stopped reading first (ThreadSanitizer says so
 * if not: the read and the close of one descriptor, unordered). What was
 * taken before the close came in order, and a publish from before the
 * close reached the server. */
static int close_flood_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_conn *w = t_connect(&srv, sc, NULL);
    weft_nats_sub *ws;
    ASSERT_EQ(weft_nats_subscribe(w, "t.last", NULL, &ws, T_DEADLINE), 0);
    flood f = {.c = c};
    weft_scope *fs;
    ASSERT_EQ(weft_scope_open(&fs, NULL), 0);
    ASSERT(weft_spawn(fs, flood_task, &f) >= 0);
    long rounds = T_SCALE(20);
    for (long r = 0; r < rounds; r++) {
        weft_nats_conn *d = t_connect(&srv, sc, NULL);
        weft_nats_sub *s;
        ASSERT_EQ(weft_nats_subscribe(d, "t.flood", NULL, &s, T_DEADLINE), 0);
        int64_t prev = -1;
        for (int i = 0; i < 50; i++) {
            natsMsg *m;
            ASSERT_EQ(weft_nats_sub_recv(s, &m, T_DEADLINE), 0);
            ASSERT_EQ(natsMsg_GetDataLength(m), 1024);
            int64_t q = atol(natsMsg_GetData(m));
            ASSERT(q > prev);
            prev = q;
            natsMsg_Destroy(m);
        }
        ASSERT_EQ(t_publish_seq(d, "t.last", r), 0);
        ASSERT_EQ(weft_nats_close(d, T_DEADLINE), 0);
        natsMsg *m;
        ASSERT_EQ(weft_nats_sub_recv(ws, &m, T_DEADLINE), 0);
        ASSERT_EQ(t_seq(m), r);
        natsMsg_Destroy(m);
        ASSERT_EQ(weft_nats_sub_free(s), 0);
    }
    atomic_store(&f.stop, 1);
    ASSERT_EQ(weft_scope_join(fs), 0);
    weft_scope_free(fs);
    ASSERT(f.sent > 0);
    ASSERT_EQ(weft_nats_sub_free(ws), 0);
    t_end_two(sc, &srv, c, w);
    return 0;
}

TEST(close_while_messages_stream_in)
{
    ASSERT_EQ(t_run_nats(2, close_flood_root), 0);
}

/* ---- remote actors: tell and ask across connections ---- */

/* Closes the connections c and d, and ends the test's server and scope. */
static void t_end_two(weft_scope *sc, t_server *srv, weft_nats_conn *c,
                      weft_nats_conn *d)
{
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    ASSERT_EQ(weft_nats_close(d, T_DEADLINE), 0);
    t_end(sc, srv);
}

/* Stops and drops actor a, closes the connections c and d, and ends the
 * test's server and scope. */
static void t_end_pair(weft_scope *sc, t_server *srv, weft_actor *a,
                       weft_nats_conn *c, weft_nats_conn *d)
{
    ASSERT_EQ(weft_actor_stop(a, WEFT_STOP_NOW), 0);
    weft_actor_unref(a);
    t_end_two(sc, srv, c, d);
}

/* A counter: a tell adds its value; an ask adds it and replies with the
 * sum, or, for a negative value, sleeps that many milliseconds first (a
 * slow actor). */
static int counter_fn(void *state, weft_actor_msg *m)
{
    int64_t *sum = state, v;
    memcpy(&v, m->data, sizeof v);
    if (m->kind == WEFT_MSG_ASK && v < 0) {
        weft_sleep_for(-v * WEFT_MSEC);
        v = 0;
    }
    *sum += v;
    if (m->kind == WEFT_MSG_ASK)
        weft_actor_reply(m, sum);
    return 0;
}

static int remote_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL); /* the asking node */
    weft_nats_conn *d = t_connect(&srv, sc, NULL); /* the actor's node */
    static int64_t sum;
    weft_actor *a;
    weft_actor_opts ao = {.fn = counter_fn,
                          .state = &sum,
                          .msg_size = sizeof(int64_t),
                          .reply_size = sizeof(int64_t),
                          .capacity = 64};
    ASSERT_EQ(weft_actor_spawn(sc, &ao, &a), 0);
    weft_nats_export *e;
    weft_nats_export_opts eo = {.node = "n1",
                                .msg_size = sizeof(int64_t),
                                .reply_size = sizeof(int64_t),
                                .scope = sc};
    ASSERT_EQ(weft_nats_export_new(&e, d, a, &eo, T_DEADLINE), 0);
    weft_nats_ref r, back;
    ASSERT_EQ(weft_nats_export_ref(e, &r), 0);
    ASSERT(strcmp(r.node, "n1") == 0);
    ASSERT(r.incarnation != 0);
    char text[96];
    ASSERT(weft_nats_ref_format(&r, text, sizeof text) > 0);
    ASSERT_EQ(weft_nats_ref_parse(&back, text), 0);
    ASSERT(memcmp(&back, &r, sizeof r) == 0);
    ASSERT_EQ(weft_nats_ref_parse(&back, "no dots"), -EINVAL);

    /* Tells, then an ask behind them: it sees their sum (one sender's
     * messages keep their order). */
    long n = T_SCALE(200);
    for (int64_t i = 1; i <= n; i++)
        ASSERT_EQ(weft_nats_tell(c, &r, &i, sizeof i, T_DEADLINE), 0);
    int64_t zero = 0, got = -1;
    ASSERT_EQ(
        weft_nats_ask(c, &r, &zero, sizeof zero, &got, sizeof got, T_DEADLINE),
        0);
    ASSERT_EQ(got, n * (n + 1) / 2);

    /* Another incarnation of the same actor number: nobody answers, and
     * that is certain. */
    weft_nats_ref old = r;
    old.incarnation++;
    ASSERT_EQ(weft_nats_ask(c, &old, &zero, sizeof zero, &got, sizeof got,
                            T_DEADLINE),
              -ESRCH);

    /* A slow actor: the deadline passes, the outcome is unknown (not
     * -ETIMEDOUT: the ask may still be handled, and here it is). */
    int64_t slow = -1000;
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_nats_ask(c, &r, &slow, sizeof slow, &got, sizeof got,
                            t0 + 50 * WEFT_MSEC),
              WEFT_NATS_OUTCOME_UNKNOWN);
    ASSERT(weft_now() - t0 < 800 * WEFT_MSEC); /* not the actor's 1 s */

    /* Withdrawn: no responder any more. */
    ASSERT_EQ(weft_nats_export_free(e), 0);
    ASSERT_EQ(weft_nats_flush(d, T_DEADLINE), 0);
    ASSERT_EQ(
        weft_nats_ask(c, &r, &zero, sizeof zero, &got, sizeof got, T_DEADLINE),
        -ESRCH);
    t_end_pair(sc, &srv, a, c, d);
    return 0;
}

TEST(remote_actor_tell_ask)
{
    ASSERT_EQ(t_run_nats(2, remote_root), 0);
}

/* ---- remote actors between two processes ---- */

/* The peer: this test program again, run by the test below with
 * WEFT_NATS_PEER set to the server's URL. It exports a counter as node
 * "peer", writes the reference's text form on its standard output, and
 * runs until its standard input ends (or it is killed). */
static int peer_root(void *arg)
{
    const char *url = arg;
    weft_scope *sc;
    ASSERT(weft_scope_open(&sc, NULL) == 0);
    weft_nats_opts o = {.url = url};
    weft_nats_conn *c;
    ASSERT_EQ(weft_nats_connect(sc, &o, &c, T_DEADLINE), 0);
    static int64_t sum;
    weft_actor *a;
    weft_actor_opts ao = {.fn = counter_fn,
                          .state = &sum,
                          .msg_size = sizeof(int64_t),
                          .reply_size = sizeof(int64_t),
                          .capacity = 64};
    ASSERT_EQ(weft_actor_spawn(sc, &ao, &a), 0);
    weft_nats_export *e;
    weft_nats_export_opts eo = {.node = "peer",
                                .msg_size = sizeof(int64_t),
                                .reply_size = sizeof(int64_t),
                                .scope = sc};
    ASSERT_EQ(weft_nats_export_new(&e, c, a, &eo, T_DEADLINE), 0);
    weft_nats_ref r;
    char line[128];
    ASSERT_EQ(weft_nats_export_ref(e, &r), 0);
    int n = weft_nats_ref_format(&r, line, sizeof line - 1);
    ASSERT(n > 0);
    line[n++] = '\n';
    ASSERT_EQ(weft_write_all(1, line, (size_t)n, NULL, T_DEADLINE), 0);
    char b;
    while (weft_read(0, &b, 1, WEFT_NEVER) > 0) {
    }
    ASSERT_EQ(weft_nats_export_free(e), 0);
    ASSERT_EQ(weft_actor_stop(a, WEFT_STOP_NOW), 0);
    weft_actor_unref(a);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    weft_scope_join(sc);
    weft_scope_free(sc);
    return 0;
}

/* Starts a peer process; reads its reference. */
/* Runs this test program again as test `test`, with the environment
 * variable `var` set to url (the child's role), its standard input and
 * output piped; reads the first line it writes into line (n bytes). */
static weft_process *t_spawn_self(const char *test, const char *var,
                                  const char *url, char *line, size_t n)
{
    char env[128];
    snprintf(env, sizeof env, "%s=%s", var, url);
    char *envp[] = {env, NULL};
    char *argv[] = {"/proc/self/exe", (char *)test, NULL};
    weft_process_opts po = {.argv = argv,
                            .envp = envp,
                            .in = WEFT_STDIO_PIPE,
                            .out = WEFT_STDIO_PIPE,
                            .pdeathsig = SIGKILL,
                            .kill_signal = SIGKILL};
    weft_process *p;
    ASSERT_EQ(weft_process_spawn(NULL, &po, &p), 0);
    size_t got = 0;
    while (got == 0 || line[got - 1] != '\n') {
        ptrdiff_t k = weft_read(weft_process_stdout(p), line + got, n - 1 - got,
                                T_DEADLINE);
        ASSERT(k > 0);
        got += (size_t)k;
    }
    line[got - 1] = 0;
    return p;
}

/* In the child: fn(url) in a runtime of one worker, with the pipes of
 * its standard input and output non-blocking, as weft wants them. */
static void t_child_run(weft_fn fn, const char *url)
{
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);
    weft_config cfg = {0};
    cfg.workers = 1;
    ASSERT_EQ(weft_run(&cfg, fn, (void *)url), 0);
}

/* A test with a child process: this program, run again as the child
 * (the environment variable var set, by t_spawn_self), runs child(its
 * value); run as the test, runs root on two workers. */
static void t_parent_or_child(const char *var, weft_fn child, weft_fn root)
{
    const char *value = getenv(var);
    if (value) {
        t_child_run(child, value);
        return;
    }
    ASSERT_EQ(t_run_nats(2, root), 0);
}

/* Kills p with SIGKILL, reaps and frees it. */
static void t_kill(weft_process *p)
{
    int status = 0;
    ASSERT_EQ(weft_process_kill(p, SIGKILL), 0);
    ASSERT_EQ(weft_process_join(p, &status), 0);
    ASSERT_EQ(status, -SIGKILL);
    weft_process_free(p);
}

static weft_process *peer_start(const char *url, weft_nats_ref *r)
{
    char line[128];
    weft_process *p = t_spawn_self("remote_two_processes", "WEFT_NATS_PEER",
                                   url, line, sizeof line);
    ASSERT_EQ(weft_nats_ref_parse(r, line), 0);
    return p;
}

/* Asks until the answer is -ESRCH: the server drops a killed peer's
 * subscriptions once it sees its connection end, and until then an ask
 * may reach nobody (its outcome unknown). */
static void ask_until_gone(weft_nats_conn *c, const weft_nats_ref *r)
{
    int64_t zero = 0, got;
    for (int i = 0;; i++) {
        int rc = weft_nats_ask(c, r, &zero, sizeof zero, &got, sizeof got,
                               weft_now() + 200 * WEFT_MSEC);
        if (rc == -ESRCH)
            return;
        ASSERT_EQ(rc, WEFT_NATS_OUTCOME_UNKNOWN);
        ASSERT(i < 50);
    }
}

static int two_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    char url[64];
    t_url(url, sizeof url, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_ref r1, r2;
    weft_process *p = peer_start(url, &r1);
    ASSERT(strcmp(r1.node, "peer") == 0);
    long n = T_SCALE(100);
    for (int64_t i = 1; i <= n; i++)
        ASSERT_EQ(weft_nats_tell(c, &r1, &i, sizeof i, T_DEADLINE), 0);
    int64_t zero = 0, got = -1;
    ASSERT_EQ(
        weft_nats_ask(c, &r1, &zero, sizeof zero, &got, sizeof got, T_DEADLINE),
        0);
    ASSERT_EQ(got, n * (n + 1) / 2);

    /* Killed: its node is gone, and asks say so. */
    t_kill(p);
    ask_until_gone(c, &r1);

    /* Started again: a new incarnation, a fresh counter; the old
     * reference still reaches nobody. */
    p = peer_start(url, &r2);
    ASSERT(r2.incarnation != r1.incarnation);
    int64_t seven = 7;
    ASSERT_EQ(weft_nats_ask(c, &r2, &seven, sizeof seven, &got, sizeof got,
                            T_DEADLINE),
              0);
    ASSERT_EQ(got, 7);
    ASSERT_EQ(
        weft_nats_ask(c, &r1, &zero, sizeof zero, &got, sizeof got, T_DEADLINE),
        -ESRCH);
    /* Its standard input ends: it withdraws and exits cleanly. */
    int status = -1;
    ASSERT_EQ(weft_process_close_stdin(p), 0);
    ASSERT_EQ(weft_process_join(p, &status), 0);
    ASSERT_EQ(status, 0);
    weft_process_free(p);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(remote_two_processes)
{
    /* the peer process: peer_root (two_root starts it) */
    t_parent_or_child("WEFT_NATS_PEER", peer_root, two_root);
}

/* ---- remote monitors ---- */

/* An actor that fails with a tell's value when it is negative, and
 * otherwise replies to an ask with it. */
static int exiter_fn(void *state, weft_actor_msg *m)
{
    (void)state;
    int64_t v;
    memcpy(&v, m->data, sizeof v);
    if (v < 0)
        return (int)v;
    if (m->kind == WEFT_MSG_ASK)
        weft_actor_reply(m, &v);
    return 0;
}

/* Spawns an exiter in as (whose policy lets it fail alone) and exports
 * it on d as node "n1", its server in sc. */
static weft_nats_export *t_export_exiter(weft_scope *as, weft_scope *sc,
                                         weft_nats_conn *d, weft_actor **a,
                                         weft_nats_ref *r)
{
    weft_actor_opts ao = {.fn = exiter_fn,
                          .msg_size = sizeof(int64_t),
                          .reply_size = sizeof(int64_t),
                          .capacity = 16};
    ASSERT_EQ(weft_actor_spawn(as, &ao, a), 0);
    weft_nats_export *e;
    weft_nats_export_opts eo = {.node = "n1",
                                .msg_size = sizeof(int64_t),
                                .reply_size = sizeof(int64_t),
                                .scope = sc};
    ASSERT_EQ(weft_nats_export_new(&e, d, *a, &eo, T_DEADLINE), 0);
    ASSERT_EQ(weft_nats_export_ref(e, r), 0);
    return e;
}

static int t_recv_forever(void *arg)
{
    weft_nats_down down;
    return -weft_nats_monitor_recv(arg, &down, WEFT_NEVER);
}

/* The actor exits: the exporter publishes its status, and the monitor
 * gives it at once (its heartbeat is far too slow to be what told it); a
 * monitor made after the exit learns it from its first heartbeat. Before
 * that, a wait's deadline passes and a cancelled wait returns, leaving
 * the monitor running. */
static int monitor_exit_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL); /* the monitoring node */
    weft_nats_conn *d = t_connect(&srv, sc, NULL); /* the actor's node */
    weft_actor *a;
    weft_nats_ref r;
    weft_scope *as;
    ASSERT_EQ(weft_scope_open(&as, &(weft_scope_opts){.policy = WEFT_COLLECT}),
              0);
    weft_nats_export *e = t_export_exiter(as, sc, d, &a, &r);

    weft_nats_monitor *m;
    weft_nats_monitor_opts mo = {
        .scope = sc, .interval_ns = 30 * WEFT_SEC, .timeout_ns = 60 * WEFT_SEC};
    ASSERT_EQ(weft_nats_monitor_new(&m, c, &r, &mo, T_DEADLINE), 0);
    weft_nats_down down;
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_nats_monitor_recv(m, &down, t0 + 50 * WEFT_MSEC),
              -ETIMEDOUT);
    ASSERT(weft_now() >= t0 + 50 * WEFT_MSEC);
    weft_task_handle h;
    ASSERT(weft_spawn_ex(sc, t_recv_forever, m,
                         &(weft_spawn_opts){.handle = &h}) >= 0);
    for (int i = 0; i < 10; i++)
        weft_yield();
    ASSERT_EQ(weft_task_cancel(h), 0);
    int st = 0;
    ASSERT_EQ(weft_task_join(h, &st), 0);
    ASSERT_EQ(st, ECANCELED);

    int64_t v = 5, got = 0;
    ASSERT_EQ(weft_nats_ask(c, &r, &v, sizeof v, &got, sizeof got, T_DEADLINE),
              0);
    ASSERT_EQ(got, 5);
    int64_t fail = -EPROTO;
    t0 = weft_now();
    ASSERT_EQ(weft_nats_tell(c, &r, &fail, sizeof fail, T_DEADLINE), 0);
    ASSERT_EQ(weft_nats_monitor_recv(m, &down, T_DEADLINE), 0);
    ASSERT(weft_now() - t0 < 10 * WEFT_SEC); /* not a heartbeat's 30 s */
    ASSERT_EQ(down.kind, WEFT_NATS_DOWN_EXITED);
    ASSERT_EQ(down.status, -EPROTO);
    ASSERT(memcmp(&down.ref, &r, sizeof r) == 0);
    /* Given again to a later wait. */
    memset(&down, 0, sizeof down);
    ASSERT_EQ(weft_nats_monitor_recv(m, &down, weft_now()), 0);
    ASSERT_EQ(down.kind, WEFT_NATS_DOWN_EXITED);
    ASSERT_EQ(down.status, -EPROTO);

    /* Monitored after the exit: its notice was published before, and
     * the first heartbeat says it. */
    weft_nats_monitor *late;
    ASSERT_EQ(weft_nats_monitor_new(&late, c, &r, &mo, T_DEADLINE), 0);
    ASSERT_EQ(weft_nats_monitor_recv(late, &down, T_DEADLINE), 0);
    ASSERT_EQ(down.kind, WEFT_NATS_DOWN_EXITED);
    ASSERT_EQ(down.status, -EPROTO);
    ASSERT_EQ(weft_nats_monitor_free(late), 0);

    /* A reference nothing serves: unreachable (no responder), at once. */
    weft_nats_ref none = r;
    none.incarnation++;
    ASSERT_EQ(weft_nats_monitor_new(&late, c, &none, &mo, T_DEADLINE), 0);
    ASSERT_EQ(weft_nats_monitor_recv(late, &down, T_DEADLINE), 0);
    ASSERT_EQ(down.kind, WEFT_NATS_DOWN_UNREACHABLE);
    ASSERT_EQ(down.status, -ESRCH);
    ASSERT_EQ(weft_nats_monitor_free(late), 0);
    ASSERT_EQ(weft_nats_monitor_new(
                  &late, c, &r,
                  &(weft_nats_monitor_opts){.interval_ns = 2, .timeout_ns = 1},
                  T_DEADLINE),
              -EINVAL);
    ASSERT(late == NULL);

    ASSERT_EQ(weft_nats_monitor_free(m), 0);
    ASSERT_EQ(weft_nats_export_free(e), 0);
    weft_actor_unref(a);
    ASSERT_EQ(weft_scope_join(as), 0);
    weft_scope_free(as);
    t_end_two(sc, &srv, c, d);
    return 0;
}

TEST(monitor_exit)
{
    ASSERT_EQ(t_run_nats(2, monitor_exit_root), 0);
}

#define T_BEAT (100 * WEFT_MSEC)
#define T_LOST (2 * WEFT_SEC)

/* The exporting process killed with SIGKILL: the server drops its
 * subscriptions, the next heartbeat finds no responder, and the monitor
 * says unreachable well within its timeout. */
static int monitor_killed_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    char url[64];
    t_url(url, sizeof url, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_ref r;
    weft_process *p = peer_start(url, &r);
    weft_nats_monitor *m;
    weft_nats_monitor_opts mo = {
        .scope = sc, .interval_ns = T_BEAT, .timeout_ns = T_LOST};
    ASSERT_EQ(weft_nats_monitor_new(&m, c, &r, &mo, T_DEADLINE), 0);
    int64_t one = 1, got = 0;
    ASSERT_EQ(
        weft_nats_ask(c, &r, &one, sizeof one, &got, sizeof got, T_DEADLINE),
        0);
    weft_nats_down down;
    ASSERT_EQ(weft_nats_monitor_recv(m, &down, weft_now() + 3 * T_BEAT),
              -ETIMEDOUT); /* alive: its beats are answered */

    weft_time t0 = weft_now();
    t_kill(p);
    ASSERT_EQ(weft_nats_monitor_recv(m, &down, t0 + T_LOST), 0);
    ASSERT_EQ(down.kind, WEFT_NATS_DOWN_UNREACHABLE);
    ASSERT_EQ(down.status, -ESRCH);
    ASSERT_EQ(weft_nats_monitor_free(m), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(monitor_node_killed)
{
    ASSERT_EQ(t_run_nats(2, monitor_killed_root), 0);
}

static void t_wait_event(weft_nats_conn *c, weft_nats_event_kind kind)
{
    weft_nats_event ev;
    do
        ASSERT_EQ(weft_nats_event_recv(c, &ev, T_DEADLINE), 0);
    while (ev.kind != kind);
}

/* Asks r until it answers (for up to 5 s): both connections are back
 * after a restart, and until the server has the exporter's subscription
 * again (nats.c says it reconnected once it has queued the subscription,
 * before the driver has written it), an ask finds no responder. */
static void t_ask_until_back(weft_nats_conn *c, const weft_nats_ref *r)
{
    int64_t v = 3, got = 0;
    weft_time until = weft_now() + 5 * WEFT_SEC;
    while (weft_nats_ask(c, r, &v, sizeof v, &got, sizeof got,
                         weft_now() + T_BEAT) != 0)
        ASSERT(weft_now() < until);
    ASSERT_EQ(got, 3);
}

/* The server killed and restarted within the monitor's timeout: no
 * notice. Killed for longer: unreachable once the timeout passed since
 * the last answered heartbeat, and the server's return does not undo
 * it. */
static int monitor_restart_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin(&sc, &srv);
    weft_nats_opts o = {.reconnect_wait_ns = 20 * WEFT_MSEC,
                        .max_reconnect = -1};
    weft_nats_conn *c = t_connect(&srv, sc, &o);
    /* The exporter reconnects later than the monitor: meanwhile the
     * monitor's heartbeats find no responder, which must not count as
     * the node's loss. */
    o.reconnect_wait_ns = 400 * WEFT_MSEC;
    weft_nats_conn *d = t_connect(&srv, sc, &o);
    weft_actor *a;
    weft_nats_ref r;
    weft_nats_export *e = t_export_exiter(sc, sc, d, &a, &r);
    weft_nats_monitor *m;
    weft_nats_monitor_opts mo = {
        .scope = sc, .interval_ns = T_BEAT, .timeout_ns = T_LOST};
    ASSERT_EQ(weft_nats_monitor_new(&m, c, &r, &mo, T_DEADLINE), 0);
    weft_nats_down down;
    ASSERT_EQ(weft_nats_monitor_recv(m, &down, weft_now() + 3 * T_BEAT),
              -ETIMEDOUT);

    /* Briefly down. */
    weft_time t0 = weft_now();
    t_server_stop(&srv);
    t_server_start(&srv, srv.port, sc);
    t_wait_event(c, WEFT_NATS_EVENT_RECONNECTED);
    t_wait_event(d, WEFT_NATS_EVENT_RECONNECTED);
    t_ask_until_back(c, &r);
    ASSERT(weft_now() - t0 < T_LOST); /* else the test proves nothing */
    ASSERT_EQ(weft_nats_monitor_recv(m, &down, t0 + T_LOST + 5 * T_BEAT),
              -ETIMEDOUT);

    /* Down for longer than the timeout. */
    t0 = weft_now();
    t_server_stop(&srv);
    ASSERT_EQ(weft_nats_monitor_recv(m, &down, t0 + T_LOST + 10 * T_BEAT), 0);
    weft_time took = weft_now() - t0;
    ASSERT_EQ(down.kind, WEFT_NATS_DOWN_UNREACHABLE);
    ASSERT_EQ(down.status, -ETIMEDOUT);
    /* The timeout counts from the last answered beat, before the kill;
     * on a loaded machine some beats before it may have gone unanswered
     * in time, so only half of it is certain. */
    if (took < T_LOST / 2)
        T_FAIL("unreachable %lld ms after the server's end",
               (long long)(took / WEFT_MSEC));
    /* Back: the actor answers again, but the notice stands. */
    t_server_start(&srv, srv.port, sc);
    t_wait_event(c, WEFT_NATS_EVENT_RECONNECTED);
    t_wait_event(d, WEFT_NATS_EVENT_RECONNECTED);
    t_ask_until_back(c, &r);
    memset(&down, 0, sizeof down);
    ASSERT_EQ(weft_nats_monitor_recv(m, &down, weft_now() + 3 * T_BEAT), 0);
    ASSERT_EQ(down.kind, WEFT_NATS_DOWN_UNREACHABLE);
    ASSERT_EQ(down.status, -ETIMEDOUT);

    ASSERT_EQ(weft_nats_monitor_free(m), 0);
    ASSERT_EQ(weft_nats_export_free(e), 0);
    t_end_pair(sc, &srv, a, c, d);
    return 0;
}

TEST(monitor_server_restart)
{
    ASSERT_EQ(t_run_nats(2, monitor_restart_root), 0);
}

/* ---- work queues on JetStream ---- */

/* A queue handle on stream JOBS (or DROP, with drop set: a stream of its
 * own, since a work queue's consumer's ack_wait is fixed). */
static weft_nats_queue *t_queue_on(weft_nats_conn *c, int drop,
                                   int64_t ack_wait_ns, int max_in_flight)
{
    weft_nats_queue_opts qo = {.stream = drop ? "DROP" : "JOBS",
                               .subject = drop ? "jobs.drop" : "jobs.work",
                               .consumer = "workers",
                               .ack_wait_ns = ack_wait_ns,
                               .max_in_flight = max_in_flight};
    weft_nats_queue *q = NULL;
    int rc = weft_nats_queue_new(&q, c, &qo, T_DEADLINE);
    if (rc != 0)
        T_FAIL("queue: %s", weft_strerror(rc));
    return q;
}

static weft_nats_queue *t_queue(weft_nats_conn *c, int64_t ack_wait_ns,
                                int max_in_flight)
{
    return t_queue_on(c, 0, ack_wait_ns, max_in_flight);
}

static int t_job_publish(weft_nats_queue *q, long i)
{
    char key[32];
    snprintf(key, sizeof key, "job-%ld", i);
    return weft_nats_job_publish(q, key, key, strlen(key), T_DEADLINE);
}

/* Keys are idempotent; a nak comes back after its delay, an unacked job
 * after ack_wait; max_in_flight holds takers back. */
static int jobs_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin_js(&sc, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_queue *q = t_queue(c, 0, 2);
    /* The same options find the same stream and consumer. */
    weft_nats_queue *q2 = t_queue(c, 0, 2);
    ASSERT_EQ(weft_nats_queue_free(q2), 0);
    /* A stream the server refuses for good (its subject is JOBS's): -EIO
     * once the tries are over, or -ETIMEDOUT at the caller's deadline,
     * and no handle either way. */
    weft_nats_queue_opts clash = {
        .stream = "CLASH", .subject = "jobs.work", .consumer = "workers"};
    q2 = q; /* not NULL: the failed call must clear it */
    ASSERT_EQ(weft_nats_queue_new(&q2, c, &clash, T_DEADLINE), -EIO);
    ASSERT(q2 == NULL);
    q2 = q;
    ASSERT_EQ(weft_nats_queue_new(&q2, c, &clash, weft_now() + 30 * WEFT_MSEC),
              -ETIMEDOUT);
    ASSERT(q2 == NULL);

    ASSERT_EQ(t_job_publish(q, 1), 0);
    ASSERT_EQ(t_job_publish(q, 2), 0);
    ASSERT_EQ(t_job_publish(q, 1), 0); /* again: stored once */
    natsMsg *a, *b, *x;
    ASSERT_EQ(weft_nats_job_take(q, &a, T_DEADLINE), 0);
    ASSERT(strcmp(weft_nats_job_key(a), "job-1") == 0);
    ASSERT_EQ(weft_nats_job_deliveries(a), 1);
    ASSERT_EQ(weft_nats_job_take(q, &b, T_DEADLINE), 0);
    ASSERT(strcmp(weft_nats_job_key(b), "job-2") == 0);
    /* Two held: a third take waits for a slot, even with a job there. */
    ASSERT_EQ(t_job_publish(q, 3), 0);
    ASSERT_EQ(weft_nats_job_take(q, &x, weft_now() + 50 * WEFT_MSEC),
              -ETIMEDOUT);
    ASSERT_EQ(weft_nats_job_ack(q, a, T_DEADLINE), 0);
    ASSERT_EQ(weft_nats_job_take(q, &x, T_DEADLINE), 0);
    ASSERT(strcmp(weft_nats_job_key(x), "job-3") == 0);
    ASSERT_EQ(weft_nats_job_ack(q, x, T_DEADLINE), 0);

    /* Nacked with a delay: back after it, delivered a second time. */
    weft_time t0 = weft_now();
    ASSERT_EQ(weft_nats_job_nak(q, b, 200 * WEFT_MSEC), 0);
    ASSERT_EQ(weft_nats_job_take(q, &b, T_DEADLINE), 0);
    ASSERT(weft_now() - t0 >= 150 * WEFT_MSEC);
    ASSERT(strcmp(weft_nats_job_key(b), "job-2") == 0);
    ASSERT_EQ(weft_nats_job_deliveries(b), 2);
    ASSERT_EQ(weft_nats_job_ack(q, b, T_DEADLINE), 0);
    /* Nothing left. */
    ASSERT_EQ(weft_nats_job_take(q, &x, weft_now() + 100 * WEFT_MSEC),
              -ETIMEDOUT);
    ASSERT_EQ(weft_nats_queue_free(q), 0);

    /* Taken and dropped (its worker "died", with its handle): back after
     * ack_wait, counted from its delivery. */
    q = t_queue_on(c, 1, 300 * WEFT_MSEC, 2);
    ASSERT_EQ(t_job_publish(q, 4), 0);
    ASSERT_EQ(weft_nats_job_take(q, &b, T_DEADLINE), 0);
    t0 = weft_now();
    natsMsg_Destroy(b);
    weft_nats_queue_free(q);
    q = t_queue_on(c, 1, 300 * WEFT_MSEC, 2);
    ASSERT_EQ(weft_nats_job_take(q, &b, T_DEADLINE), 0);
    ASSERT(weft_now() - t0 >= 200 * WEFT_MSEC);
    ASSERT(strcmp(weft_nats_job_key(b), "job-4") == 0);
    ASSERT_EQ(weft_nats_job_deliveries(b), 2);
    ASSERT_EQ(weft_nats_job_ack(q, b, T_DEADLINE), 0);
    ASSERT_EQ(weft_nats_queue_free(q), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(jobs_keys_nak_redelivery)
{
    ASSERT_EQ(t_run_nats(2, jobs_root), 0);
}

/* Many jobs through four workers on two workers' threads: none lost, none
 * done twice by key; a worker cancelled mid-job naks it. */
typedef struct pool_run {
    weft_nats_queue *q;
    long jobs;
    _Atomic long done;
    unsigned char *seen; /* per job: times done */
} pool_run;

static int job_worker(void *arg)
{
    pool_run *p = arg;
    while (atomic_load(&p->done) < p->jobs) {
        natsMsg *j;
        int rc = weft_nats_job_take(p->q, &j, weft_now() + 100 * WEFT_MSEC);
        if (rc == -ETIMEDOUT)
            continue;
        ASSERT_EQ(rc, 0);
        long i = atol(weft_nats_job_key(j) + 4);
        ASSERT(i >= 0 && i < p->jobs);
        if (p->seen[i]) { /* done already: a redelivery, acked again */
            ASSERT_EQ(weft_nats_job_ack(p->q, j, T_DEADLINE), 0);
            continue;
        }
        p->seen[i]++;
        ASSERT_EQ(weft_nats_job_ack(p->q, j, T_DEADLINE), 0);
        atomic_fetch_add(&p->done, 1);
    }
    return 0;
}

static int jobs_many_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin_js(&sc, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_conn *d = t_connect(&srv, sc, NULL);
    static pool_run p;
    p.jobs = T_SCALE(2000);
    p.seen = calloc((size_t)p.jobs, 1);
    weft_nats_queue *prod = t_queue(c, 0, 0);
    p.q = t_queue(d, 0, 8);
    for (long i = 0; i < p.jobs; i++)
        ASSERT_EQ(t_job_publish(prod, i), 0);
    weft_scope *ws;
    ASSERT(weft_scope_open(&ws, NULL) == 0);
    for (int i = 0; i < 4; i++)
        ASSERT(weft_spawn(ws, job_worker, &p) >= 0);
    ASSERT_EQ(weft_scope_join(ws), 0);
    weft_scope_free(ws);
    ASSERT_EQ(atomic_load(&p.done), p.jobs);
    for (long i = 0; i < p.jobs; i++)
        ASSERT_EQ(p.seen[i], 1);
    natsMsg *x;
    ASSERT_EQ(weft_nats_job_take(p.q, &x, weft_now() + 100 * WEFT_MSEC),
              -ETIMEDOUT);
    free(p.seen);
    ASSERT_EQ(weft_nats_queue_free(p.q), 0);
    ASSERT_EQ(weft_nats_queue_free(prod), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    ASSERT_EQ(weft_nats_close(d, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(jobs_four_workers)
{
    ASSERT_EQ(t_run_nats(2, jobs_many_root), 0);
}

/* The server killed (SIGKILL) and restarted on its store: every job it
 * had acknowledged is still there, and the client reconnects to take
 * them. */
static int jobs_restart_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin_js(&sc, &srv);
    weft_nats_opts o = {.reconnect_wait_ns = 20 * WEFT_MSEC,
                        .max_reconnect = -1};
    weft_nats_conn *c = t_connect(&srv, sc, &o);
    weft_nats_queue *q = t_queue(c, 0, 0);
    long n = T_SCALE(200);
    for (long i = 0; i < n; i++)
        ASSERT_EQ(t_job_publish(q, i), 0);
    t_server_stop(&srv);
    t_next_event(c, WEFT_NATS_EVENT_DISCONNECTED);
    t_server_start(&srv, srv.port, sc);
    t_next_event(c, WEFT_NATS_EVENT_RECONNECTED);
    unsigned char *seen = calloc((size_t)n, 1);
    for (long k = 0; k < n; k++) {
        natsMsg *j;
        int rc = weft_nats_job_take(q, &j, T_DEADLINE);
        if (rc != 0)
            T_FAIL("job %ld of %ld: %s", k, n, weft_strerror(rc));
        long i = atol(weft_nats_job_key(j) + 4);
        ASSERT(i >= 0 && i < n && !seen[i]);
        seen[i] = 1;
        ASSERT_EQ(weft_nats_job_ack(q, j, T_DEADLINE), 0);
    }
    free(seen);
    ASSERT_EQ(weft_nats_queue_free(q), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(jobs_survive_server_restart)
{
    ASSERT_EQ(t_run_nats(2, jobs_restart_root), 0);
}

/* ---- a worker process killed with SIGKILL mid-job ---- */

/* The worker: this program again, with WEFT_NATS_WORKER set to the
 * server's URL. It takes one job, says its key on its standard output,
 * and "works" on it until it is killed. */
static int worker_root(void *arg)
{
    weft_scope *sc;
    ASSERT(weft_scope_open(&sc, NULL) == 0);
    weft_nats_opts o = {.url = arg};
    weft_nats_conn *c;
    ASSERT_EQ(weft_nats_connect(sc, &o, &c, T_DEADLINE), 0);
    weft_nats_queue *q = t_queue_on(c, 1, 300 * WEFT_MSEC, 1);
    natsMsg *j;
    ASSERT_EQ(weft_nats_job_take(q, &j, T_DEADLINE), 0);
    char line[160];
    int n = snprintf(line, sizeof line, "%s\n", weft_nats_job_key(j));
    ASSERT_EQ(weft_write_all(1, line, (size_t)n, NULL, T_DEADLINE), 0);
    char b;
    while (weft_read(0, &b, 1, WEFT_NEVER) > 0) {
    }
    return 0; /* not reached: killed first */
}

static int killed_worker_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin_js(&sc, &srv);
    char url[64], line[160];
    t_url(url, sizeof url, &srv);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_queue *q = t_queue_on(c, 1, 300 * WEFT_MSEC, 1);
    ASSERT_EQ(t_job_publish(q, 42), 0);
    weft_process *p = t_spawn_self("jobs_worker_killed", "WEFT_NATS_WORKER",
                                   url, line, sizeof line);
    ASSERT(strcmp(line, "job-42") == 0);
    /* Mid-job: killed. The job comes back after ack_wait, once. */
    t_kill(p);
    natsMsg *j;
    ASSERT_EQ(weft_nats_job_take(q, &j, T_DEADLINE), 0);
    ASSERT(strcmp(weft_nats_job_key(j), "job-42") == 0);
    ASSERT_EQ(weft_nats_job_deliveries(j), 2);
    ASSERT_EQ(weft_nats_job_ack(q, j, T_DEADLINE), 0);
    ASSERT_EQ(weft_nats_job_take(q, &j, weft_now() + 500 * WEFT_MSEC),
              -ETIMEDOUT);
    ASSERT_EQ(weft_nats_queue_free(q), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(jobs_worker_killed)
{
    /* the worker process: worker_root (killed_worker_root starts it) */
    t_parent_or_child("WEFT_NATS_WORKER", worker_root, killed_worker_root);
}

/* ---- the driver's scope cancelled while the connect runs ---- */

/* A server of our own plays nats-server's part of the handshake (INFO,
 * then PONG to the client's PING) only once the driver has seen its
 * scope cancelled: the connection the connect then makes must be closed
 * by the driver, which then ends. */
typedef struct fake_connect {
    int port;
    weft_scope *driver_scope;
    weft_nats_conn *c;
    int rc;
} fake_connect;

static int fake_connector(void *arg)
{
    fake_connect *f = arg;
    char url[64];
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", f->port);
    weft_nats_opts o = {.url = url, .noreconnect = 1};
    f->rc = weft_nats_connect(f->driver_scope, &o, &f->c, T_DEADLINE);
    return 0;
}

static weft_event fake_eof; /* set when the client closed its socket */

/* Answers each PING on fd with a PONG until the client goes. */
static int fake_serve(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[4096], last[6] = {0}; /* the last 6 bytes read */
    ptrdiff_t n;
    while ((n = weft_read(fd, buf, sizeof buf, T_DEADLINE)) > 0) {
        for (ptrdiff_t i = 0; i < n; i++) {
            memmove(last, last + 1, sizeof last - 1);
            last[sizeof last - 1] = buf[i];
            if (memcmp(last, "PING\r\n", 6) == 0)
                ASSERT_EQ(weft_write_all(fd, "PONG\r\n", 6, NULL, T_DEADLINE),
                          0);
        }
    }
    weft_close(fd);
    weft_event_set(&fake_eof);
    return 0;
}

/* arg 0: the driver's scope is cancelled; 1: the connecting task is
 * (its connect returns -ECANCELED, and the driver closes what nats.c
 * then makes). */
static int cancel_connect_root(void *arg)
{
    int cancel_connector = arg != NULL;
    if (!t_server_path())
        T_NEED("nats", "no nats-server (scripts/deps.sh nats installs it)");
    int lfd = weft_tcp_listen("127.0.0.1", 0, 8, 0);
    ASSERT(lfd >= 0);
    static fake_connect f;
    f.port = weft_local_port(lfd);
    weft_scope *outer, *conn_scope, *sh;
    weft_scope_opts shield = {.shield = 1};
    ASSERT(weft_scope_open(&outer, NULL) == 0);
    ASSERT(weft_scope_open(&conn_scope, NULL) == 0);
    /* This task works on in a shield: conn_scope's cancel is the
     * driver's alone. */
    ASSERT(weft_scope_open(&sh, &shield) == 0);
    f.driver_scope = conn_scope;
    weft_task_handle h = {0};
    ASSERT(weft_spawn_ex(outer, fake_connector, &f,
                         &(weft_spawn_opts){.handle = &h}) >= 0);
    int fd = weft_accept(lfd, NULL, T_DEADLINE);
    ASSERT(fd >= 0);
    if (cancel_connector)
        ASSERT_EQ(weft_task_cancel(h), 0);
    else
        ASSERT_EQ(weft_scope_cancel(conn_scope), 0);
    for (int i = 0; i < 8; i++) /* one worker: the driver sees it now */
        weft_yield();
    static const char info[] =
        "INFO {\"server_id\":\"fake\",\"version\":\"2.9.10\",\"proto\":1,"
        "\"headers\":true,\"max_payload\":1048576}\r\n";
    ASSERT_EQ(weft_write_all(fd, info, sizeof info - 1, NULL, T_DEADLINE), 0);
    ASSERT(weft_spawn(outer, fake_serve, (void *)(intptr_t)fd) >= 0);
    /* The driver closes what the connect made: the connection says so
     * (or the connect, when the close came first, said -ENOTCONN). */
    ASSERT_EQ(weft_task_join(h, NULL), 0); /* the connect returned */
    if (cancel_connector)
        ASSERT_EQ(f.rc, -ECANCELED);
    else
        ASSERT(f.rc == 0 || f.rc == -ENOTCONN);
    if (f.rc == -ECANCELED) { /* nats.c's connection closed all the same */
        int rc = weft_event_wait_until(&fake_eof, weft_now() + 5 * WEFT_SEC);
        if (rc != 0)
            T_FAIL("the driver did not close: %s", weft_strerror(rc));
        ASSERT(f.c == NULL);
    } else if (f.rc == 0) {
        weft_nats_event ev = {0};
        do {
            int rc = weft_nats_event_recv(f.c, &ev, weft_now() + 5 * WEFT_SEC);
            if (rc != 0)
                T_FAIL("the driver did not close: %s", weft_strerror(rc));
        } while (ev.kind != WEFT_NATS_EVENT_CLOSED);
        ASSERT_EQ(weft_nats_publish(f.c, "t.x", "a", 1, T_DEADLINE), -ENOTCONN);
        ASSERT_EQ(weft_nats_close(f.c, T_DEADLINE), 0);
    }
    ASSERT_EQ(weft_scope_join(sh), 0);
    weft_scope_free(sh);
    weft_scope_join(conn_scope); /* the driver, ended */
    weft_scope_free(conn_scope);
    ASSERT_EQ(weft_scope_join(outer), 0);
    weft_scope_free(outer);
    weft_close(lfd);
    return 0;
}

TEST(driver_scope_cancelled_while_connecting)
{
    ASSERT_EQ(t_run_nats(1, cancel_connect_root), 0);
}

static int cancel_connector_root(void *arg)
{
    (void)arg;
    return cancel_connect_root((void *)1);
}

TEST(connect_cancelled_while_connecting)
{
    ASSERT_EQ(t_run_nats(1, cancel_connector_root), 0);
}

/* ---- many jobs through four consumer processes ---- */

/* What the consumers share with the test, in a file each maps: per job,
 * its "done" record (set once, by key: the idempotent effect) and how
 * many times it was delivered; per process, the jobs it did. */
#define T_CONSUMERS 4
typedef struct shared_jobs {
    long jobs;
    _Atomic long done; /* records made */
    _Atomic long did[T_CONSUMERS];
    _Atomic long redone; /* deliveries that found their record made */
    _Atomic unsigned char rec[];
    /* then jobs bytes: deliveries per job */
} shared_jobs;

static size_t t_shared_size(long jobs)
{
    return sizeof(shared_jobs) + 2 * (size_t)jobs;
}

static shared_jobs *t_shared_map(const char *path, long jobs, int create)
{
    int fd =
        open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0), 0600);
    ASSERT(fd >= 0);
    if (create)
        ASSERT(ftruncate(fd, (off_t)t_shared_size(jobs)) == 0);
    shared_jobs *sh = mmap(NULL, t_shared_size(jobs), PROT_READ | PROT_WRITE,
                           MAP_SHARED, fd, 0);
    ASSERT(sh != MAP_FAILED);
    close(fd);
    if (create)
        sh->jobs = jobs;
    ASSERT_EQ(sh->jobs, jobs);
    return sh;
}

typedef struct consumer {
    weft_nats_queue *q;
    shared_jobs *sh;
    int me;
} consumer;

/* Takes jobs until every job has its record: does each (makes its record,
 * unless a delivery before made it) and acks it. */
static int consumer_task(void *arg)
{
    consumer *k = arg;
    shared_jobs *sh = k->sh;
    _Atomic unsigned char *deliveries = sh->rec + sh->jobs;
    while (atomic_load(&sh->done) < sh->jobs) {
        natsMsg *j;
        int rc = weft_nats_job_take(k->q, &j, weft_now() + 100 * WEFT_MSEC);
        if (rc == -ETIMEDOUT)
            continue;
        ASSERT_EQ(rc, 0);
        const char *key = weft_nats_job_key(j);
        ASSERT(key && strncmp(key, "job-", 4) == 0);
        long i = atol(key + 4);
        ASSERT(i >= 0 && i < sh->jobs);
        atomic_fetch_add(&deliveries[i], 1);
        unsigned char no = 0;
        if (atomic_compare_exchange_strong(&sh->rec[i], &no, 1)) {
            atomic_fetch_add(&sh->did[k->me], 1);
            atomic_fetch_add(&sh->done, 1);
        } else {
            atomic_fetch_add(&sh->redone, 1); /* done before: only acked */
        }
        ASSERT_EQ(weft_nats_job_ack(k->q, j, T_DEADLINE), 0);
    }
    return 0;
}

#define T_CONSUMER_TASKS 16 /* per process, and its max_in_flight */

/* A consumer process: this program again, with WEFT_NATS_CONSUMER set to
 * "<url> <shared file> <jobs> <its number>". It says "ready" once its
 * queue is open, and exits once every job has its record. */
static int consumer_root(void *arg)
{
    char url[64], path[128];
    long jobs;
    int me;
    ASSERT_EQ(sscanf(arg, "%63s %127s %ld %d", url, path, &jobs, &me), 4);
    ASSERT(me >= 0 && me < T_CONSUMERS);
    consumer k = {.sh = t_shared_map(path, jobs, 0), .me = me};
    weft_scope *sc;
    ASSERT(weft_scope_open(&sc, NULL) == 0);
    weft_nats_opts o = {.url = url};
    weft_nats_conn *c;
    ASSERT_EQ(weft_nats_connect(sc, &o, &c, T_DEADLINE), 0);
    k.q = t_queue(c, 0, T_CONSUMER_TASKS);
    ASSERT_EQ(weft_write_all(1, "ready\n", 6, NULL, T_DEADLINE), 0);
    weft_scope *ws;
    ASSERT(weft_scope_open(&ws, NULL) == 0);
    for (int i = 0; i < T_CONSUMER_TASKS; i++)
        ASSERT(weft_spawn(ws, consumer_task, &k) >= 0);
    ASSERT_EQ(weft_scope_join(ws), 0);
    weft_scope_free(ws);
    ASSERT_EQ(weft_nats_queue_free(k.q), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    ASSERT_EQ(weft_scope_join(sc), 0);
    weft_scope_free(sc);
    munmap(k.sh, t_shared_size(jobs));
    return 0;
}

typedef struct producer {
    weft_nats_queue *q;
    long from, jobs, step;
} producer;

static int producer_task(void *arg)
{
    producer *p = arg;
    for (long i = p->from; i < p->jobs; i += p->step)
        ASSERT_EQ(t_job_publish(p->q, i), 0);
    return 0;
}

#define T_PRODUCER_TASKS 32

static int jobs_processes_root(void *arg)
{
    (void)arg;
    weft_scope *sc;
    t_server srv = {0};
    t_begin_js(&sc, &srv);
    long jobs = T_SCALE(100000);
    char url[64], path[128], line[32], env[256];
    t_url(url, sizeof url, &srv);
    snprintf(path, sizeof path, "%s/shared", srv.dir);
    shared_jobs *sh = t_shared_map(path, jobs, 1);
    weft_nats_conn *c = t_connect(&srv, sc, NULL);
    weft_nats_queue *q = t_queue(c, 0, 0);
    weft_time t0 = weft_now();
    weft_process *p[T_CONSUMERS];
    for (int k = 0; k < T_CONSUMERS; k++) {
        snprintf(env, sizeof env, "%s %s %ld %d", url, path, jobs, k);
        p[k] = t_spawn_self("jobs_four_processes", "WEFT_NATS_CONSUMER", env,
                            line, sizeof line);
        ASSERT(strcmp(line, "ready") == 0);
    }
    weft_time t1 = weft_now();
    /* The producer: its tasks publish with their keys, each waiting for
     * the stream to store its job, while the consumers take them. */
    static producer pr[T_PRODUCER_TASKS];
    weft_scope *ps;
    ASSERT(weft_scope_open(&ps, NULL) == 0);
    for (int i = 0; i < T_PRODUCER_TASKS; i++) {
        pr[i] = (producer){q, i, jobs, T_PRODUCER_TASKS};
        ASSERT(weft_spawn(ps, producer_task, &pr[i]) >= 0);
    }
    ASSERT_EQ(weft_scope_join(ps), 0);
    weft_scope_free(ps);
    weft_time t2 = weft_now();
    for (int k = 0; k < T_CONSUMERS; k++) {
        int status = -1;
        ASSERT_EQ(weft_process_join(p[k], &status), 0);
        ASSERT_EQ(status, 0);
        weft_process_free(p[k]);
    }
    weft_time t3 = weft_now();
    /* Every key done exactly once; every process did its share. */
    _Atomic unsigned char *deliveries = sh->rec + jobs;
    long did = 0, delivered = 0;
    for (int k = 0; k < T_CONSUMERS; k++) {
        ASSERT(atomic_load(&sh->did[k]) > 0);
        did += atomic_load(&sh->did[k]);
    }
    for (long i = 0; i < jobs; i++) {
        if (atomic_load(&sh->rec[i]) != 1)
            T_FAIL("job-%ld was lost", i);
        delivered += atomic_load(&deliveries[i]);
    }
    ASSERT_EQ(did, jobs);
    ASSERT_EQ(atomic_load(&sh->done), jobs);
    ASSERT_EQ(delivered - jobs, atomic_load(&sh->redone));
    fprintf(stderr,
            "%ld jobs: consumers up %.2f s, published %.2f s, done %.2f s; "
            "per process %ld %ld %ld %ld; redelivered %ld\n",
            jobs, (double)(t1 - t0) / WEFT_SEC, (double)(t2 - t1) / WEFT_SEC,
            (double)(t3 - t1) / WEFT_SEC, atomic_load(&sh->did[0]),
            atomic_load(&sh->did[1]), atomic_load(&sh->did[2]),
            atomic_load(&sh->did[3]), delivered - jobs);
    /* Nothing left on the queue. */
    natsMsg *x;
    ASSERT_EQ(weft_nats_job_take(q, &x, weft_now() + 100 * WEFT_MSEC),
              -ETIMEDOUT);
    munmap(sh, t_shared_size(jobs));
    ASSERT_EQ(weft_nats_queue_free(q), 0);
    ASSERT_EQ(weft_nats_close(c, T_DEADLINE), 0);
    t_end(sc, &srv);
    return 0;
}

TEST(jobs_four_processes)
{
    /* a consumer process: consumer_root (jobs_processes_root starts
     * them) */
    t_parent_or_child("WEFT_NATS_CONSUMER", consumer_root, jobs_processes_root);
}
