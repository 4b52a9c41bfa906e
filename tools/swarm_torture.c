/* SPDX-License-Identifier: MIT */
/*
 * swarm_torture: a swarm sweep (weft.h, section 16) over a torture body.
 *
 * Each seed grows a random tree of tasks in scopes with random policies
 * and deadlines, with cancellers that cancel a scope at a random instant;
 * the tasks send and receive numbered values on one channel (plain
 * sends and receives with deadlines, select with a deadline case, try
 * forms) and stream numbered words over socket pairs, all under the
 * seed's fault profile. When the tree is done the body checks:
 *   - no orphan: every task it started has ended;
 *   - every scope joined after all of its children had ended;
 *   - no value lost or duplicated: each value whose send succeeded was
 *     received exactly once (by a task, or from the closed channel after
 *     the tree), and no value whose send failed was received;
 *   - a stream's reader got exactly the bytes its writer wrote, in order;
 *   - no leak: every node it allocated was freed, and (over the sweep)
 *     no descriptor is left open.
 *
 * A second sweep runs the net body (below) on half as many seeds: real
 * sockets, signals and the blocking pool, which reach the fault sites
 * the torture body cannot; between them every site must fire.
 *
 *   swarm_torture [--seeds N | --long] [--first SEED] [--check-every K]
 *                 [--workers W] [--no-shrink] [--bug]
 *                 [--body torture|net] [--verbose]
 *
 * --long is --seeds 100000 (WEFT_SWARM_SEEDS=N too); --body runs one of
 * the two sweeps alone; WEFT_SEED=S replays one seed, as a failure's
 * report says (its command names the body). --bug plants a bug (a
 * stream writer that takes a short write for a whole one, so bytes are
 * lost) for the sweep to find and shrink. Exits 0 if the sweep passed, 1 if
 * not, 2 on bad arguments.
 */
#include "weft.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEPTH 5
#define MAX_KIDS 4
#define MAX_VALUES 4096
#define STREAM_WORDS 64

static bool plant_bug;

typedef struct world {
    weft_chan *chan;
    atomic_uint next_value;
    atomic_uchar sent[MAX_VALUES]; /* 1: a send of the value succeeded */
    atomic_uchar got[MAX_VALUES];  /* how many times it was received */
    atomic_int live;               /* node tasks started and not ended */
    atomic_long made, freed;       /* nodes allocated and freed */
} world;

typedef struct node {
    world *w;
    uint64_t rng;
    int depth;
    weft_scope *target; /* a canceller's: the scope it cancels */
    atomic_int ended;
} node;

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* A random instant up to 4 ms ahead. */
static weft_time soon(uint64_t *r)
{
    return weft_now() + (weft_time)(rnd(r) % 4000) * WEFT_USEC;
}

static int broken(const char *what)
{
    weft_swarm_fail(what);
    return -EPROTO;
}

/* ---- values over the channel ---- */

static void produce(node *n, uint64_t *r)
{
    world *w = n->w;
    int k = 1 + (int)(rnd(r) % 6);
    for (int i = 0; i < k; i++) {
        unsigned v = atomic_fetch_add(&w->next_value, 1);
        if (v >= MAX_VALUES)
            return;
        int rc;
        switch (rnd(r) % 3) {
        case 0:
            rc = weft_chan_send_until(w->chan, &v, soon(r));
            break;
        case 1: {
            weft_case c[2] = {
                {.op = WEFT_OP_SEND, .chan = w->chan, .elem = &v},
                {.op = WEFT_OP_DEADLINE, .deadline = soon(r)},
            };
            int idx = weft_select(c, 2, WEFT_NEVER);
            rc = idx == 0 ? c[0].rc : -ETIMEDOUT;
            break;
        }
        default:
            rc = weft_chan_try_send(w->chan, &v);
        }
        if (rc == 0)
            atomic_store(&w->sent[v], 1);
        if (rnd(r) % 4 == 0)
            weft_yield();
    }
}

static void consume(node *n, uint64_t *r)
{
    world *w = n->w;
    int k = 1 + (int)(rnd(r) % 6);
    for (int i = 0; i < k; i++) {
        unsigned v = UINT32_MAX;
        int rc;
        switch (rnd(r) % 3) {
        case 0:
            rc = weft_chan_recv_until(w->chan, &v, soon(r));
            break;
        case 1: {
            weft_case c[2] = {
                {.op = WEFT_OP_RECV, .chan = w->chan, .elem = &v},
                {.op = WEFT_OP_DEADLINE, .deadline = soon(r)},
            };
            int idx = weft_select(c, 2, WEFT_NEVER);
            rc = idx == 0 ? c[0].rc : -ETIMEDOUT;
            break;
        }
        default:
            rc = weft_chan_try_recv(w->chan, &v);
        }
        if (rc == 0 && v < MAX_VALUES)
            atomic_fetch_add(&w->got[v], 1);
        else if (rc == 0)
            broken("received a value nobody sent");
    }
}

/* ---- a stream over a socket pair ---- */

static int stream(uint64_t *r)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                   sv) != 0)
        return 0;
    uint32_t out[STREAM_WORDS], in[STREAM_WORDS];
    for (int i = 0; i < STREAM_WORDS; i++)
        out[i] = (uint32_t)rnd(r);
    /* Write it all in chunks, each with write-some calls, going on
     * after a short write from where it stopped (the planted bug: as if
     * the chunk had gone whole) and retrying after a fault; a cancel ends
     * the writing. */
    size_t total = 0, len = sizeof(out);
    for (int tries = 0; total < len && tries < 1000; tries++) {
        size_t chunk = 32 - total % 32;
        ptrdiff_t n = weft_write(sv[1], (char *)out + total, chunk, WEFT_NEVER);
        if (n == -ECANCELED)
            break;
        if (n > 0)
            total += plant_bug ? chunk : (size_t)n;
    }
    close(sv[1]);
    /* Read it back: exactly total bytes, then the end. */
    size_t got = 0;
    int rc = 0;
    for (int tries = 0; tries < 100; tries++) {
        size_t done = 0;
        rc = weft_read_exact(sv[0], (char *)in + got, len - got, &done,
                             WEFT_NEVER);
        got += done;
        if (rc == 0 || rc == -EPIPE || rc == -ECANCELED)
            break;
    }
    char extra;
    ptrdiff_t more = rc == -ECANCELED ? 0 : weft_read(sv[0], &extra, 1, 0);
    close(sv[0]);
    if (rc == -ECANCELED)
        return got <= total && memcmp(in, out, got) == 0
                   ? 0
                   : broken("stream: bytes not as written");
    if (got != total || more > 0 || memcmp(in, out, got) != 0)
        return broken("stream: bytes lost or duplicated");
    return 0;
}

/* ---- the tree ---- */

static int node_task(void *arg);

static int canceller(void *arg)
{
    node *n = arg;
    uint64_t r = n->rng;
    if (weft_sleep_until(soon(&r)) == 0)
        weft_scope_cancel(n->target);
    atomic_store(&n->ended, 1);
    return 0;
}

static node *node_new(world *w, uint64_t *r, int depth)
{
    node *k = malloc(sizeof(*k));
    if (!k)
        return NULL;
    atomic_fetch_add(&w->made, 1);
    k->w = w;
    k->rng = rnd(r);
    k->depth = depth;
    k->target = NULL;
    atomic_init(&k->ended, 0);
    return k;
}

static void node_free(node *k)
{
    atomic_fetch_add(&k->w->freed, 1);
    free(k);
}

/* Opens a scope of random policy and deadline, spawns children (and
 * maybe a canceller), does some of its own work inside, joins, and
 * checks that every child had ended. */
static int grow(node *n, uint64_t *r)
{
    static const weft_policy policies[] = {WEFT_FAIL_FAST, WEFT_COLLECT,
                                           WEFT_FIRST, WEFT_RACE};
    weft_scope_opts o = {.policy = policies[rnd(r) % 4]};
    if (rnd(r) % 3 == 0)
        o.deadline = soon(r);
    weft_scope *s = NULL;
    if (weft_scope_open(&s, &o) != 0)
        return 0; /* a fault: no subtree this time */
    node *kids[MAX_KIDS + 1];
    int nk = 0, want = 1 + (int)(rnd(r) % MAX_KIDS);
    for (int i = 0; i <= want; i++) {
        bool cancel = i == want;
        if (cancel && rnd(r) % 3)
            break;
        node *k = node_new(n->w, r, n->depth + 1);
        if (!k)
            continue;
        k->target = cancel ? s : NULL;
        if (weft_spawn(s, cancel ? canceller : node_task, k) < 0) {
            node_free(k); /* a fault refused it: it never ran */
            continue;
        }
        kids[nk++] = k;
    }
    if (rnd(r) % 2)
        consume(n, r);
    weft_scope_join(s); /* any result: cancels and deadlines are the point */
    int rc = 0;
    for (int i = 0; i < nk; i++) {
        if (!atomic_load(&kids[i]->ended))
            rc = broken("a scope joined before its child ended");
        node_free(kids[i]);
    }
    weft_scope_free(s);
    return rc;
}

static int node_task(void *arg)
{
    node *n = arg;
    world *w = n->w;
    uint64_t r = n->rng;
    atomic_fetch_add(&w->live, 1);
    int rc = 0;
    switch (rnd(&r) % 6) {
    case 0:
    case 1:
        produce(n, &r);
        break;
    case 2:
    case 3:
        consume(n, &r);
        break;
    case 4:
        rc = stream(&r);
        break;
    default:
        weft_sleep_until(soon(&r));
    }
    if (n->depth < MAX_DEPTH && rnd(&r) % 4 != 0 && grow(n, &r))
        rc = -EPROTO;
    atomic_fetch_sub(&w->live, 1);
    atomic_store(&n->ended, 1);
    /* Now and then a failure, so fail-fast scopes cancel siblings. */
    return rc ? rc : rnd(&r) % 16 == 0 ? -EIO : 0;
}

static int torture(void *arg)
{
    (void)arg;
    uint64_t r = weft_seed();
    world *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    int rc = weft_chan_new(&w->chan, sizeof(unsigned), rnd(&r) % 5);
    if (rc) {
        free(w);
        return 0; /* a fault: nothing to run */
    }
    node *root = node_new(w, &r, 0);
    if (root) {
        node_task(root);
        node_free(root);
    }
    /* The tree is done: what is left in the channel was sent, once. */
    weft_chan_close(w->chan);
    unsigned v;
    while (weft_chan_try_recv(w->chan, &v) == 0)
        if (v < MAX_VALUES)
            atomic_fetch_add(&w->got[v], 1);
    weft_chan_unref(w->chan);
    rc = 0;
    if (atomic_load(&w->live) != 0)
        rc = broken("an orphan: a task still running after the tree");
    if (atomic_load(&w->made) != atomic_load(&w->freed))
        rc = broken("a leak: nodes not freed");
    unsigned n = atomic_load(&w->next_value);
    for (unsigned i = 0; i < n && i < MAX_VALUES; i++) {
        unsigned s = atomic_load(&w->sent[i]), g = atomic_load(&w->got[i]);
        weft_sim_sometimes(s && g, "a value went through");
        weft_sim_sometimes(!s, "a send failed");
        if (g > s)
            rc = broken(s ? "a value duplicated" : "a failed send delivered");
        else if (g < s)
            rc = broken("a value lost");
    }
    free(w);
    return rc;
}

/* ---- the net body: a real runtime's sockets, signals and pool ---- */

/* The sites the torture body cannot reach (it makes no socket of weft's
 * and never waits for a descriptor, and the simulated network has no
 * poller of the kernel's) come from this body: a seeded runtime of one
 * to four workers (the virtual clock gives real descriptors a grace
 * before it jumps) running a TCP echo service on 127.0.0.1, clients that
 * check every byte they get back, a signal taken through weft's signal
 * API, and calls on the blocking pool. Every call's error must be one
 * the API documents. */

#define NET_CLIENTS 4
#define NET_BYTES 256

typedef struct net_world {
    int lfd, port;
    uint64_t seed;     /* the body's draws */
    uint64_t acc_seed; /* the acceptor's, drawn before it starts */
    atomic_int live;   /* tasks started and not ended */
} net_world;

typedef struct net_conn {
    net_world *w;
    int fd;
    uint64_t rng;
} net_conn;

/* The errors a fault may bring out of the calls this body makes (weft.h,
 * sections 12 and 15): anything else is a bug. */
static bool documented(long rc)
{
    static const int errs[] = {ENOMEM,       EAGAIN,      EMFILE,        ENFILE,
                               ENOBUFS,      ECONNRESET,  EPIPE,         EIO,
                               ECONNREFUSED, ENETUNREACH, EADDRNOTAVAIL, ENOSPC,
                               ETIMEDOUT,    ECANCELED,   ECONNABORTED};
    if (rc >= 0)
        return true;
    for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
        if (rc == -errs[i])
            return true;
    return false;
}

static long net_rc(long rc, const char *what)
{
    if (!documented(rc))
        broken(what);
    return rc;
}

static int echo_conn(void *arg)
{
    net_conn *c = arg;
    char b[64];
    for (;;) {
        ptrdiff_t n = net_rc(weft_read(c->fd, b, 1 + rnd(&c->rng) % sizeof(b),
                                       weft_now() + WEFT_SEC),
                             "echo: read: an undocumented error");
        if (n <= 0)
            break;
        if (net_rc(weft_write_all(c->fd, b, (size_t)n, NULL,
                                  weft_now() + WEFT_SEC),
                   "echo: write: an undocumented error"))
            break;
    }
    weft_close(c->fd);
    atomic_fetch_sub(&c->w->live, 1);
    free(c);
    return 0;
}

static int acceptor(void *arg)
{
    net_world *w = arg;
    uint64_t r = w->acc_seed;
    for (;;) {
        int fd = (int)net_rc(weft_accept(w->lfd, NULL, WEFT_NEVER),
                             "accept: an undocumented error");
        if (fd == -ECANCELED)
            return 0;
        if (fd < 0)
            continue;
        net_conn *c = malloc(sizeof(*c));
        if (c) {
            *c = (net_conn){w, fd, rnd(&r)};
            atomic_fetch_add(&w->live, 1);
        }
        if (!c || weft_spawn(NULL, echo_conn, c) < 0) {
            if (c)
                atomic_fetch_sub(&w->live, 1);
            free(c);
            weft_close(fd);
        }
    }
}

/* Writes NET_BYTES in random pieces and reads them back: what comes back
 * is a prefix of what went, and all of it when every call succeeded. */
static int net_client(void *arg)
{
    net_conn *c = arg;
    net_world *w = c->w;
    unsigned char out[NET_BYTES], in[NET_BYTES];
    for (int i = 0; i < NET_BYTES; i++)
        out[i] = (unsigned char)rnd(&c->rng);
    int fd = (int)net_rc(
        weft_tcp_connect("127.0.0.1", w->port, weft_now() + WEFT_SEC),
        "connect: an undocumented error");
    size_t sent = 0, got = 0;
    int rc = fd < 0 ? fd : 0;
    while (!rc && sent < NET_BYTES) {
        size_t n = 1 + rnd(&c->rng) % (NET_BYTES - sent);
        rc = (int)net_rc(
            weft_write_all(fd, out + sent, n, NULL, weft_now() + WEFT_SEC),
            "client: write: an undocumented error");
        if (!rc)
            sent += n;
        size_t done = 0;
        int r2 = (int)net_rc(weft_read_exact(fd, in + got, rc ? 0 : n, &done,
                                             weft_now() + WEFT_SEC),
                             "client: read: an undocumented error");
        got += done;
        if (!rc)
            rc = r2;
    }
    weft_sim_sometimes(fd >= 0 && !rc, "an echo came back whole");
    if (got > sent || memcmp(in, out, got) != 0)
        broken("echo: bytes not as written");
    else if (!rc && got != sent)
        broken("echo: bytes lost");
    if (fd >= 0)
        weft_close(fd);
    atomic_fetch_sub(&w->live, 1);
    free(c);
    return 0;
}

/* A raise of SIGUSR2, taken once: by the wait, or after the run. */
static int raiser(void *arg)
{
    (void)arg;
    weft_yield(); /* most often while the wait waits */
    kill(getpid(), SIGUSR2);
    return 0;
}

static int pool_call(void *arg)
{
    return *(int *)arg + 1;
}

static int net_body(void *arg)
{
    (void)arg;
    net_world *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->seed = weft_seed();
    w->acc_seed = rnd(&w->seed);
    w->lfd = (int)net_rc(weft_tcp_listen("127.0.0.1", 0, 16, 0),
                         "listen: an undocumented error");
    weft_scope *srv = NULL, *cl = NULL;
    if (w->lfd >= 0 && weft_scope_open(&srv, NULL) == 0 &&
        weft_spawn(srv, acceptor, w) >= 0 && weft_scope_open(&cl, NULL) == 0) {
        w->port = weft_local_port(w->lfd);
        for (int i = 0; i < NET_CLIENTS; i++) {
            net_conn *c = malloc(sizeof(*c));
            if (!c)
                continue;
            *c = (net_conn){w, -1, rnd(&w->seed)};
            atomic_fetch_add(&w->live, 1);
            if (net_rc(weft_spawn(cl, net_client, c), "spawn") < 0) {
                atomic_fetch_sub(&w->live, 1);
                free(c);
            }
        }
    }
    /* Meanwhile, a signal and the blocking pool. */
    int sig = SIGUSR2, v = 41;
    weft_scope *s = NULL;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    struct timespec zero = {0, 0};
    int raised = 0, taken = 0;
    for (int i = 0; i < 3; i++) {
        if (weft_scope_open(&s, NULL) != 0)
            continue;
        raised += weft_spawn(s, raiser, NULL) >= 0;
        int rc =
            (int)net_rc(weft_signal_wait(&sig, 1, weft_now() + 2 * WEFT_MSEC),
                        "signal wait: an undocumented error");
        weft_scope_join(s);
        weft_scope_free(s);
        taken += rc == SIGUSR2;
        /* A raise the wait did not take is pending: take it now. */
        if (sigtimedwait(&set, NULL, &zero) == SIGUSR2)
            taken++;
    }
    for (int i = 0; i < 2; i++) {
        int rc = (int)net_rc(weft_blocking(pool_call, &v),
                             "blocking: an undocumented error");
        if (rc >= 0 && rc != 42)
            broken("blocking: not the call's result");
    }
    if (cl) {
        weft_scope_join(cl);
        weft_scope_free(cl);
    }
    if (srv) {
        weft_scope_cancel(srv);
        weft_scope_join(srv);
        weft_scope_free(srv);
    }
    if (w->lfd >= 0)
        weft_close(w->lfd);
    weft_sim_sometimes(taken == raised, "every signal taken");
    if (taken != raised)
        broken("a signal lost or taken twice");
    if (atomic_load(&w->live) != 0)
        broken("an orphan: a connection's task still running");
    free(w);
    return 0;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int usage(void)
{
    fprintf(stderr, "usage: swarm_torture [--seeds N | --long] [--first SEED] "
                    "[--check-every K] [--workers W] [--no-shrink] [--bug] "
                    "[--body torture|net] [--verbose]\n");
    return 2;
}

/* This process's command line with "--body name" added: what replays one
 * of the two sweeps' seeds. */
static const char *command_for(int argc, char **argv, const char *body,
                               char *buf, size_t len)
{
    size_t at = 0;
    for (int i = 0; i < argc && at < len; i++) {
        if (strcmp(argv[i], "--body") == 0 && i + 1 < argc) {
            i++;
            continue;
        }
        at += (size_t)snprintf(buf + at, len - at, "%s ", argv[i]);
    }
    if (at < len)
        snprintf(buf + at, len - at, "--body %s", body);
    return buf;
}

int main(int argc, char **argv)
{
    weft_swarm_opts o = {.name = "torture",
                         .seeds = 1000,
                         .check_every = 50,
                         .shrink = 1,
                         .max_permille = 100,
                         .require_sometimes = 1};
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool val = i + 1 < argc;
        if (strcmp(a, "--seeds") == 0 && val)
            o.seeds = strtoull(argv[++i], NULL, 0);
        else if (strcmp(a, "--first") == 0 && val)
            o.first_seed = strtoull(argv[++i], NULL, 0);
        else if (strcmp(a, "--check-every") == 0 && val)
            o.check_every = atoi(argv[++i]);
        else if (strcmp(a, "--workers") == 0 && val)
            o.max_workers = atoi(argv[++i]);
        else if (strcmp(a, "--long") == 0)
            o.seeds = 100000;
        else if (strcmp(a, "--no-shrink") == 0)
            o.shrink = 0;
        else if (strcmp(a, "--bug") == 0)
            plant_bug = true;
        else if (strcmp(a, "--verbose") == 0)
            o.verbose = 1;
        else if (strcmp(a, "--body") == 0 && val &&
                 (strcmp(argv[i + 1], "torture") == 0 ||
                  strcmp(argv[i + 1], "net") == 0))
            only = argv[++i];
        else
            return usage();
    }
    /* WEFT_SWARM_SEEDS replaces the count: split it here, as --seeds. */
    const char *env = getenv("WEFT_SWARM_SEEDS");
    if (env && *env >= '0' && *env <= '9') {
        o.seeds = strtoull(env, NULL, 0);
        unsetenv("WEFT_SWARM_SEEDS");
    }
    /* Every seed runs the torture body, and one in two the net body too
     * (both from the first seed), unless --body names one. */
    weft_swarm_opts net = o;
    net.name = "net";
    net.seeds = only ? o.seeds : o.seeds / 2 ? o.seeds / 2 : 1;
    net.max_workers = o.max_workers ? o.max_workers : 4;
    /* Real descriptors and more than one worker: a run is not a function
     * of its seed, and the determinism check is the torture body's. */
    net.check_every = 0;
    /* Some sites pass once or twice a run (a worker's eventfd, the signal
     * wait's signalfd): higher rates, so that a few hundred seeds fire each. */
    net.max_permille = 400;
    char cmd[2][1024];
    o.command = command_for(argc, argv, "torture", cmd[0], sizeof(cmd[0]));
    net.command = command_for(argc, argv, "net", cmd[1], sizeof(cmd[1]));
    /* Every site must fire over the sweep. The torture body reaches its
     * allocations and stacks, the watchdog's thread at each start, and
     * the streams' reads and writes; the net body every site. */
    weft_fault_stats fs;
    bool sites = weft_fault_stats_get(&fs) == 0;
    if (sites) {
        o.must_fire = 1u << WEFT_FAULT_ALLOC | 1u << WEFT_FAULT_STACK |
                      1u << WEFT_FAULT_THREAD | 1u << WEFT_FAULT_READ |
                      1u << WEFT_FAULT_WRITE;
        net.must_fire = (1u << WEFT_FAULT_SITES) - 1;
    }
    /* The net body's signal is blocked in every thread (the workers
     * inherit this mask), as weft_signal_wait asks. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    int fds = open_fds();
    weft_swarm_stats st;
    int rc = 0, problems = 0;
    for (int k = 0; k < 2 && rc >= 0; k++) {
        bool is_net = k == 1;
        if (only && strcmp(only, is_net ? "net" : "torture") != 0)
            continue;
        rc = weft_swarm_run(is_net ? &net : &o, is_net ? net_body : torture,
                            NULL, &st);
        problems += rc > 0 ? rc : 0;
    }
    if (rc < 0) {
        fprintf(stderr, "swarm_torture: %s\n", weft_strerror(rc));
        return 2;
    }
    int fds_after = open_fds();
    if (fds_after != fds) {
        fprintf(stderr,
                "swarm_torture: %d descriptors open before the "
                "sweep, %d after: a leak\n",
                fds, fds_after);
        problems++;
    }
    return problems ? 1 : 0;
}
