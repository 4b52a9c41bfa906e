/* SPDX-License-Identifier: MIT */
/*
 * sim_counter: a bug of the kind simulation finds, found by a seed sweep.
 *
 * A counter server (a simulated host) and a client that asks it, twenty
 * times, to add one. The client is careful in the usual way: each request
 * has a deadline, and when the reply does not come in time (the network
 * held it, or reset the connection) it reconnects and asks again. But
 * "add one" is not idempotent: when the first request did reach the
 * server and only its reply was late or lost, the retry adds one more,
 * and the counter ends above the number of increments the client saw
 * succeed.
 *
 * The program sweeps seeds on the simulated network (weft.h sections 16
 * and 17): each seed draws the network's latency and resets and a
 * nemesis that holds or partitions the link at random instants for a
 * virtual moment, and, in a build with the fault sites (weft.h section
 * 15; Debug builds), which of connect, accept, read and write fail and
 * how often; then the faults stop and the network heals (the
 * liveness phase), every increment completes, and the invariant is
 * checked: the counter equals the number of increments the client
 * believes succeeded. A failing seed is printed with the command that
 * replays it, its faults shrunk to the fewest that still fail it (the
 * fault sites, and the network's classes of faults: its seeded resets,
 * and the partitions and holds the nemesis makes), replayed with them,
 * and its event log shown (the program's notes and the network's verbs
 * and resets).
 *
 * --fixed gives each increment an idempotency key: the client sends the
 * request's id, and the server remembers the ids it has answered and
 * answers a repeated one with its first answer. The sweep then passes.
 *
 *   sim_counter [--fixed] [--seeds N] [--log] [--trace FILE]
 *
 * --seeds N  seeds 1..N (default 1000; WEFT_SWARM_SEEDS too)
 * --log      the whole event log of the run shown, every packet and task
 * --trace F  the replay's trace, for ui.perfetto.dev
 * WEFT_SEED=S sim_counter runs seed S alone, and shows its event log.
 *
 * Exits 0 when every seed passed, 1 when a seed failed, 2 on a usage or
 * setup error.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

#define PORT 7000
#define INCREMENTS 20
#define REPLY_TIMEOUT (30 * WEFT_MSEC) /* the client's patience */
#define FAULT_PHASE (400 * WEFT_MSEC)  /* then the network heals */
#define MAX_TRIES 1000                 /* a liveness failure, past this */
#define MSG 16                         /* every message: 16 bytes */

/* The server's state. It lives outside the host, as a disk would. */
typedef struct counter {
    long long value;
    int fixed;
    /* --fixed: the ids answered, and each one's answer. */
    uint64_t ids[INCREMENTS];
    long long answers[INCREMENTS];
    int n;
} counter;

/* One seed's run. */
typedef struct run {
    counter server;
    int believed;    /* increments the client saw succeed */
    int tries;       /* requests it sent */
    uint64_t rng[2]; /* the client's draws and the nemesis's */
} run;

static uint64_t draw(uint64_t *rng, uint64_t n) /* splitmix64 */
{
    uint64_t z = (*rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (z ^ (z >> 31)) % n;
}

/* A line of the program's own in the event log. */
#define note(...)                                                              \
    do {                                                                       \
        char text_[128];                                                       \
        snprintf(text_, sizeof text_, __VA_ARGS__);                            \
        weft_sim_log(text_);                                                   \
    } while (0)

/* ---- the server: "INC <id>" adds one and answers "OK <value>" ---- */

typedef struct conn {
    counter *c;
    int fd;
} conn;

static long long increment(counter *c, uint64_t id)
{
    if (c->fixed && id) { /* the idempotency key: a repeat, the first answer */
        for (int i = 0; i < c->n; i++)
            if (c->ids[i] == id) {
                note("server: increment %llu again: answered %lld, as before",
                     (unsigned long long)id, c->answers[i]);
                return c->answers[i];
            }
    }
    long long v = ++c->value;
    if (c->fixed && id && c->n < (int)(sizeof c->ids / sizeof c->ids[0])) {
        c->ids[c->n] = id;
        c->answers[c->n++] = v;
    }
    if (id)
        note("server: increment %llu, counter now %lld", (unsigned long long)id,
             v);
    else
        note("server: increment, counter now %lld", v);
    return v;
}

static int serve_conn(void *arg)
{
    conn *k = arg;
    char req[MSG + 1], rep[MSG + 1];
    while (weft_read_exact(k->fd, req, MSG, NULL, WEFT_NEVER) == 0) {
        req[MSG] = '\0';
        unsigned long long id;
        if (sscanf(req, "INC %llu", &id) != 1)
            break;
        snprintf(rep, sizeof rep, "OK %012lld\n", increment(k->c, id));
        int rc = weft_write_all(k->fd, rep, MSG, NULL, WEFT_NEVER);
        if (rc < 0) {
            note("server: the answer was not sent: %s", strerror(-rc));
            break;
        }
    }
    weft_close(k->fd);
    free(k);
    return 0;
}

static int server(void *arg)
{
    counter *c = arg;
    int lfd = weft_tcp_listen(NULL, PORT, 16, 0);
    if (lfd < 0)
        return lfd;
    weft_scope *s;
    int rc = weft_scope_open(&s, &(weft_scope_opts){.policy = WEFT_SERVE});
    while (rc == 0) {
        int fd = weft_accept(lfd, NULL, WEFT_NEVER);
        if (fd == -ECONNABORTED || fd == -EINTR)
            continue; /* that connection failed, not the listener */
        if (fd == -EMFILE || fd == -ENFILE) { /* out of descriptors */
            weft_sleep_for(WEFT_MSEC);
            continue;
        }
        if (fd < 0) /* cancelled (the host crashed), or the listener */
            break;
        conn *k = malloc(sizeof *k);
        if (k)
            *k = (conn){c, fd};
        if (!k || weft_spawn(s, serve_conn, k) < 0) {
            free(k);
            weft_close(fd);
        }
    }
    if (rc == 0) {
        weft_scope_cancel(s);
        weft_scope_join(s);
        weft_scope_free(s);
    }
    weft_close(lfd);
    return rc;
}

/* ---- the client: retries until each increment is answered ---- */

/* One request on *fd (connecting first if it is -1) by a deadline. */
static int ask(int *fd, uint64_t id, long long *value)
{
    weft_time deadline = weft_now() + REPLY_TIMEOUT;
    if (*fd < 0 && (*fd = weft_tcp_connect("server", PORT, deadline)) < 0)
        return *fd;
    char req[MSG + 1], rep[MSG + 1];
    snprintf(req, sizeof req, "INC %011llu\n", (unsigned long long)id);
    int rc = weft_write_all(*fd, req, MSG, NULL, deadline);
    if (rc == 0)
        rc = weft_read_exact(*fd, rep, MSG, NULL, deadline);
    if (rc == 0) {
        rep[MSG] = '\0';
        rc = sscanf(rep, "OK %lld", value) == 1 ? 0 : -EBADMSG;
    }
    return rc;
}

static int client(void *arg)
{
    run *r = arg;
    int fd = -1;
    for (int i = 1; i <= INCREMENTS; i++) {
        /* Without the fix the request carries no id (0). */
        uint64_t id = r->server.fixed ? (uint64_t)i : 0;
        long long value;
        int rc, retried = 0;
        while ((rc = ask(&fd, id, &value)) != 0) {
            if (rc == -ECANCELED)
                return rc;
            note("client: increment %d: %s, retrying", i, strerror(-rc));
            retried = 1;
            if (fd >= 0) /* a late reply must not answer the next request */
                weft_close(fd);
            fd = -1;
            if (++r->tries >= MAX_TRIES) {
                weft_swarm_fail("the client gave up after the network healed");
                return -ETIMEDOUT;
            }
            weft_sleep_for((int64_t)(5 + draw(&r->rng[0], 10)) * WEFT_MSEC);
        }
        r->tries++;
        r->believed++;
        weft_sim_sometimes(retried, "an increment was retried");
        note("client: increment %d done, the server says %lld", i, value);
        weft_sleep_for((int64_t)draw(&r->rng[0], 20) * WEFT_MSEC);
    }
    if (fd >= 0)
        weft_close(fd);
    return 0;
}

/* ---- the nemesis: holds and partitions, then heals ---- */

typedef struct nemesis {
    run *r;
    weft_sim_host *srv;
} nemesis;

static int nemesis_task(void *arg)
{
    nemesis *ch = arg;
    uint64_t *rng = &ch->r->rng[1];
    while (weft_now() < FAULT_PHASE) {
        if (weft_sleep_for((int64_t)(20 + draw(rng, 100)) * WEFT_MSEC))
            return -ECANCELED;
        int64_t ms = 5 + (int64_t)draw(rng, 35);
        switch (draw(rng, 8)) {
        case 0: /* in flight and later: parked, then delivered late */
            weft_sim_hold(NULL, ch->srv);
            weft_sleep_for(ms * WEFT_MSEC);
            weft_sim_release(NULL, ch->srv);
            break;
        case 1: /* connects lost, a stream's segments parked */
            weft_sim_partition(NULL, ch->srv);
            weft_sleep_for(ms * WEFT_MSEC);
            weft_sim_repair(NULL, ch->srv);
            break;
        default: /* a calm moment */
            break;
        }
    }
    weft_sim_log("the faults stop: the network heals");
    return 0;
}

/* ---- one seed: the body the sweep runs ---- */

static int body(void *arg)
{
    run *r = arg;
    int fixed = r->server.fixed;
    *r = (run){.server = {.fixed = fixed}, .rng = {weft_seed(), ~weft_seed()}};
    weft_sim_host *srv;
    int rc = weft_sim_host_new(&srv, "server");
    if (rc == 0)
        rc = weft_sim_host_start(srv, server, &r->server);
    if (rc)
        return rc;
    weft_scope *s;
    if ((rc = weft_scope_open(&s, NULL)) != 0)
        return rc;
    nemesis ch = {r, srv};
    if ((rc = weft_spawn(s, nemesis_task, &ch)) >= 0)
        rc = weft_spawn(s, client, r);
    int jrc = weft_scope_join(s);
    weft_scope_free(s);
    weft_sim_host_crash(srv); /* its tasks end with the run */
    if (rc < 0)
        return rc;
    if (jrc)
        return jrc;
    /* The liveness phase is over: every increment was answered. */
    if (r->server.value != r->believed) {
        char what[128];
        snprintf(what, sizeof what,
                 "the counter is %lld, but the client saw %d increments "
                 "succeed",
                 r->server.value, r->believed);
        weft_sim_log(what);
        weft_swarm_fail(what);
        return -EPROTO;
    }
    return 0;
}

/* The sweep's options: the simulated network with its seeded resets,
 * the fault sites that matter to a network service, shrinking, and the
 * determinism check on a few seeds. */
static void sweep_opts(weft_swarm_opts *o, uint64_t seeds)
{
    static const weft_sim_opts sim = {.reset_permille = 1};
    static const weft_config cfg = {.sim = &sim};
    *o = (weft_swarm_opts){
        .name = "counter",
        .seeds = seeds,
        .shrink = 1,
        .check_every = 50,
        .max_permille = 10,
        .sites = 1u << WEFT_FAULT_CONNECT | 1u << WEFT_FAULT_ACCEPT |
                 1u << WEFT_FAULT_READ | 1u << WEFT_FAULT_WRITE,
        .config = &cfg,
    };
}

/* Writes the last simulated run's event log to out: all of it, or only
 * the program's notes and the network's verbs and resets. */
static void show_log(FILE *out, int all)
{
    FILE *tmp = tmpfile();
    if (!tmp || weft_sim_log_write(fileno(tmp)) < 0) {
        fprintf(out, "(no event log)\n");
        if (tmp)
            fclose(tmp);
        return;
    }
    rewind(tmp);
    static const char *const keep[] = {" note ",      " hold ",   " release ",
                                       " partition ", " repair ", "reset"};
    char line[512];
    while (fgets(line, sizeof line, tmp)) {
        int show = all;
        for (size_t k = 0; !show && k < sizeof keep / sizeof keep[0]; k++)
            show = strstr(line, keep[k]) != NULL;
        if (show)
            fprintf(out, "  %s", line);
    }
    fclose(tmp);
}

int main(int argc, char **argv)
{
    run r = {0};
    uint64_t seeds = 1000;
    int all = 0;
    const char *trace = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--fixed") == 0)
            r.server.fixed = 1;
        else if (strcmp(argv[i], "--log") == 0)
            all = 1;
        else if (strcmp(argv[i], "--seeds") == 0 && i + 1 < argc)
            seeds = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--trace") == 0 && i + 1 < argc)
            trace = argv[++i];
        else {
            fprintf(stderr, "usage: sim_counter [--fixed] [--seeds N] [--log] "
                            "[--trace FILE]\n");
            return 2;
        }
    }
    weft_swarm_opts o;
    sweep_opts(&o, seeds);
    weft_swarm_stats st;
    int rc = weft_swarm_run(&o, body, &r, &st);
    if (rc < 0) {
        fprintf(stderr, "sim_counter: %s\n", weft_strerror(rc));
        return 2;
    }
    if (st.failed == 0) {
        printf("sim_counter: %" PRIu64 " seeds, no failure%s\n", st.runs,
               rc ? " (but the sweep found another problem)" : "");
        if (getenv("WEFT_SEED")) { /* one seed: what happened in it */
            printf("sim_counter: its event log (%s):\n",
                   all ? "all of it" : "notes, verbs and resets");
            fflush(stdout);
            show_log(stdout, all);
        }
        return rc ? 1 : 0;
    }
    /* Run the failing seed once more, with the fault sites the shrinking
     * left, and show what happened. */
    uint64_t seed = st.first_failed_seed;
    int status = weft_swarm_replay(&o, seed, st.shrunk, st.shrunk_sites, trace,
                                   body, &r);
    printf("sim_counter: seed %" PRIu64 " replayed: status %d; the counter "
           "is %lld, the client saw %d increments succeed (%d requests "
           "sent)%s%s\n",
           seed, status, r.server.value, r.believed, r.tries,
           trace ? "; trace in " : "", trace ? trace : "");
    printf("sim_counter: its event log (%s):\n",
           all ? "all of it" : "notes, verbs and resets");
    fflush(stdout);
    show_log(stdout, all);
    return 1;
}
