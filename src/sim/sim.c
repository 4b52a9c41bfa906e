/* SPDX-License-Identifier: MIT */
/*
 * Simulation (weft.h, section 17): a whole program and its network in
 * virtual time, a function of one seed.
 *
 * What the mode replaces, each behind a seam that already existed: the
 * clock (the virtual one, with no real-time grace before it jumps:
 * clock.c), the scheduler's order (one seeded worker), the blocking pool
 * (calls run inline: blocking.c), the socket calls (io.h's weft__netsys
 * table, which this layer fills in: net.c) and the poller (below: its
 * readiness comes from the network's timer, so a wait on a simulated
 * socket is not work outside the runtime). runtime.c makes the config
 * (sim_config) and calls weft__sim_start before the first task runs and
 * weft__sim_end after the last.
 *
 * Why everything is a function of the seed: one worker runs every task
 * and every packet (a timer on its wheel), ties are broken by the
 * packets' sequence numbers, ports and descriptors are handed out lowest
 * first, and every draw (latency, jitter, loss, resets) comes from the
 * network's own splitmix64 stream, seeded from the run's seed: the same
 * calls in the same order draw the same numbers.
 *
 * Hosts, as turmoil's: a host is an address and a root scope. A boot task
 * (weft_sim_host_start) opens the scope and runs the host's function in
 * it; a task belongs to the host whose scope encloses it (found by
 * walking up from its current scope), or to "main" (10.0.0.1). A crash
 * cancels the scope and drops the host's sockets at once; the tasks of
 * that incarnation unwind on their own (calls on their sockets now fail
 * with EBADF, a new socket with ENETDOWN) while a restart may already
 * boot the next one.
 *
 * The event log: every packet sent, delivered, lost or parked, every
 * verb, boot and crash, and every task the seeded worker picks, one line
 * each with its virtual time, hashed as it is written (FNV-1a 64), and
 * kept as text up to log_max bytes. It outlives the run, so that a test
 * can run a seed twice and compare.
 */
#include "sim/sim.h"
#include "scope/struct.h"
#include "util/fault.h"
#include "util/runlog.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_LATENCY (1 * WEFT_MSEC)
#define DEFAULT_JITTER (1 * WEFT_MSEC)
#define DEFAULT_LOG_MAX ((size_t)4 << 20)
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

sim_net *weft__sim;
static atomic_int sim_busy; /* one simulated runtime at a time */

/* ---- the event log (kept after the run) ---- */

static struct {
    char *text;
    size_t len, cap, max;
    bool cut;              /* text beyond max was not kept */
    _Atomic uint64_t hash; /* FNV-1a of every byte written */
} slog;

static void log_append(const char *s, size_t n)
{
    uint64_t h = ld_rlx(&slog.hash);
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * FNV_PRIME;
    st_rlx(&slog.hash, h);
    if (slog.cut || slog.len + n > slog.max) {
        slog.cut = true;
        return;
    }
    if (slog.len + n > slog.cap) {
        size_t cap = slog.cap ? slog.cap : 4096;
        while (cap < slog.len + n)
            cap *= 2;
        char *t = weft__realloc(slog.text, cap);
        if (!t) {
            slog.cut = true;
            return;
        }
        slog.text = t;
        slog.cap = cap;
    }
    memcpy(slog.text + slog.len, s, n);
    slog.len += n;
}

void weft__sim_logf(const char *fmt, ...)
{
    if (!weft__sim)
        return;
    char line[512];
    int64_t now = weft__now(weft__sim->rt);
    int n = snprintf(line, sizeof line, "%lld.%09lld ",
                     (long long)(now / WEFT_SEC), (long long)(now % WEFT_SEC));
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0
                              : (size_t)m < sizeof line - (size_t)n - 1
                                  ? (size_t)m
                                  : sizeof line - (size_t)n - 2);
    line[len++] = '\n';
    log_append(line, len);
}

static void log_reset(size_t max)
{
    free(slog.text);
    slog.text = NULL;
    slog.len = slog.cap = 0;
    slog.max = max;
    slog.cut = false;
    st_rlx(&slog.hash, FNV_OFFSET);
}

/* The seeded worker picked t (scheduler.h, on_pick). */
static void log_pick(weft_worker *w, weft_task *t)
{
    WEFT_UNUSED(w);
    uint64_t id = ld_rlx(&t->id);
    weft__sim_logf("run task %llu.%llu", (unsigned long long)(id >> 40),
                   (unsigned long long)(id & ((1ull << 40) - 1)));
}

/* ---- random numbers: splitmix64 ---- */

uint64_t weft__sim_rand(void)
{
    uint64_t z = (weft__sim->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- the poller: readiness comes from the network's timer ---- */

static weft__poller *sp_init(weft_worker *w, int *err)
{
    WEFT_UNUSED(w);
    weft__poller *p = weft__calloc(1, sizeof(*p));
    if (!p) {
        *err = -ENOMEM;
        return NULL;
    }
    p->ops = weft__sim_netsys.poller;
    return p;
}

/* Nothing comes from outside: the network reports each arrival to io.c
 * (weft__fd_ready) as its timer delivers it. */
static int sp_poll(weft__poller *p, int64_t timeout)
{
    WEFT_UNUSED(p);
    WEFT_UNUSED(timeout);
    return 0;
}

static void sp_wake(weft__poller *p)
{
    WEFT_UNUSED(p);
}

/* Every simulated socket is watched from the start; a descriptor of the
 * kernel's cannot be (nothing real is touched). */
static int sp_wait(weft__poller *p, int fd, uint32_t gen, bool check)
{
    WEFT_UNUSED(p);
    WEFT_UNUSED(gen);
    WEFT_UNUSED(check);
    return fd >= WEFT__SIM_FD_BASE ? 0 : -ENOTSUP;
}

static void sp_fini(weft__poller *p)
{
    free(p);
}

const weft__poller_ops weft__sim_poller = {
    .name = "sim",
    .in_runtime = true,
    .init = sp_init,
    .poll = sp_poll,
    .wake = sp_wake,
    .wait = sp_wait,
    .fini = sp_fini,
};

/* ---- hosts ---- */

uint32_t weft__sim_host_ip(const weft_sim_host *h)
{
    return (10u << 24) | (uint32_t)(h->idx + 1);
}

weft_sim_host *weft__sim_host_by_ip(uint32_t ip, weft_sim_host *self)
{
    if (ip == 0 || (ip >> 24) == 127)
        return self;
    uint32_t n = ip - (10u << 24) - 1;
    if ((ip >> 24) != 10 || n >= (uint32_t)weft__sim->nhosts)
        return NULL;
    return weft__sim->hosts[n];
}

weft_sim_host *weft__sim_host_here(bool *dead)
{
    *dead = false;
    for (weft_scope *s = weft_scope_current(); s; s = s->parent)
        for (sim_life *l = weft__sim->lives; l; l = l->next)
            if (l->scope == s) {
                *dead = l->dead;
                return l->h;
            }
    return weft__sim->hosts[0];
}

static int host_add(sim_net *n, const char *name, weft_sim_host **out)
{
    if (n->nhosts == SIM_MAX_HOSTS)
        return -ENOSPC;
    weft_sim_host *h = weft__calloc(1, sizeof(*h));
    char *copy = weft__strdup(name);
    if (!h || !copy) {
        free(h);
        free(copy);
        return -ENOMEM;
    }
    h->name = copy;
    h->idx = n->nhosts;
    h->next_port = 49152;
    n->hosts[n->nhosts++] = h;
    *out = h;
    return 0;
}

/* The calling task's simulation: 0, -EPERM (not a task), -ENOTSUP (its
 * runtime is not simulated). */
static int sim_here(void)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !weft__current())
        return -EPERM;
    return weft__sim && weft__sim->rt == w->rt ? 0 : -ENOTSUP;
}

static bool host_ok(const weft_sim_host *h)
{
    return h && h->idx < weft__sim->nhosts && weft__sim->hosts[h->idx] == h;
}

int weft_sim_host_new(weft_sim_host **out, const char *name)
{
    int rc = sim_here();
    if (rc)
        return rc;
    if (!name || !*name || !out || strcmp(name, "localhost") == 0)
        return -EINVAL;
    for (int i = 0; i < weft__sim->nhosts; i++)
        if (strcmp(weft__sim->hosts[i]->name, name) == 0)
            return -EINVAL;
    if ((rc = host_add(weft__sim, name, out)) == 0)
        weft__sim_logf("host %s is 10.0.0.%d", name, (*out)->idx + 1);
    return rc;
}

weft_sim_host *weft_sim_host_self(void)
{
    bool dead;
    return sim_here() ? NULL : weft__sim_host_here(&dead);
}

int weft_sim_host_addr(const weft_sim_host *h, char *buf, size_t n)
{
    if (!h || !buf || n < 16)
        return -EINVAL;
    snprintf(buf, n, "10.0.0.%d", h->idx + 1);
    return 0;
}

/* A host's boot task: its root scope, fn in it, until both have ended. */
static int host_boot(void *arg)
{
    weft_sim_host *h = arg;
    h->booting--;
    if (h->crash_booting) { /* crashed before it booted */
        h->crash_booting = false;
        return 0;
    }
    sim_life life = {.h = h};
    int rc = weft_scope_open(&life.scope, NULL);
    if (rc)
        return rc;
    life.next = weft__sim->lives;
    weft__sim->lives = &life;
    h->cur = &life;
    weft__sim_logf("boot %s", h->name);
    rc = weft_spawn_ex(life.scope, h->fn, h->arg,
                       &(weft_spawn_opts){.name = h->name});
    int jr = weft_scope_join(life.scope);
    weft_scope_free(life.scope);
    for (sim_life **p = &weft__sim->lives; *p; p = &(*p)->next)
        if (*p == &life) {
            *p = life.next;
            break;
        }
    if (h->cur == &life)
        h->cur = NULL;
    weft__sim_logf("%s's tasks have ended", h->name);
    return life.dead ? 0 : rc < 0 ? rc : jr;
}

static int host_boot_spawn(weft_sim_host *h)
{
    int rc = weft_spawn_ex(h->home, host_boot, h,
                           &(weft_spawn_opts){.name = "sim host boot"});
    if (rc < 0)
        return rc;
    h->booting++;
    h->down = false;
    return 0;
}

int weft_sim_host_start(weft_sim_host *h, weft_fn fn, void *arg)
{
    int rc = sim_here();
    if (rc)
        return rc;
    if (!host_ok(h) || !fn || h->idx == 0)
        return -EINVAL;
    if (h->cur || h->booting)
        return -EBUSY;
    h->fn = fn;
    h->arg = arg;
    h->home = weft_scope_current();
    return host_boot_spawn(h);
}

int weft_sim_host_restart(weft_sim_host *h)
{
    int rc = sim_here();
    if (rc)
        return rc;
    if (!host_ok(h) || !h->fn)
        return -EINVAL;
    if (h->cur || h->booting)
        return -EBUSY;
    weft__sim_logf("restart %s", h->name);
    return host_boot_spawn(h);
}

int weft_sim_host_crash(weft_sim_host *h)
{
    int rc = sim_here();
    if (rc)
        return rc;
    if (!host_ok(h) || h->idx == 0)
        return -EINVAL;
    if (!h->cur && !h->booting)
        return -ESRCH;
    weft__sim_logf("crash %s", h->name);
    if (h->cur) {
        h->cur->dead = true;
        weft_scope_cancel(h->cur->scope);
        h->cur = NULL;
    } else {
        h->crash_booting = true;
    }
    h->down = true;
    weft__sim_net_crash(h);
    return 0;
}

const char *weft_sim_fault_name(weft_sim_fault c)
{
    static const char *const names[WEFT_SIM_FAULTS] = {"loss", "dup", "reorder",
                                                       "reset", "partition"};
    return (unsigned)c < WEFT_SIM_FAULTS ? names[c] : NULL;
}

/* ---- the network's verbs ---- */

enum { VERB_PARTITION, VERB_REPAIR, VERB_HOLD, VERB_RELEASE };

static int verb(weft_sim_host *a, weft_sim_host *b, int v)
{
    static const char *const names[] = {"partition", "repair", "hold",
                                        "release"};
    int rc = sim_here();
    if (rc)
        return rc;
    a = a ? a : weft__sim->hosts[0];
    b = b ? b : weft__sim->hosts[0];
    if (!host_ok(a) || !host_ok(b) || a == b)
        return -EINVAL;
    /* Partitions and holds are a fault class shrinking switches off:
     * then they (and their repairs and releases) change nothing. */
    bool off = weft__sim->off & (1u << WEFT_SIM_PARTITION);
    weft__sim_logf("%s %s %s%s", names[v], a->name, b->name,
                   off ? " (off)" : "");
    if (off)
        return 0;
    sim_link *ls[2] = {&weft__sim->links[a->idx][b->idx],
                       &weft__sim->links[b->idx][a->idx]};
    for (int i = 0; i < 2; i++) {
        sim_link *l = ls[i];
        unsigned char bit = v <= VERB_REPAIR ? LINK_PART : LINK_HOLD;
        if (v == VERB_PARTITION || v == VERB_HOLD) {
            l->flags |= bit;
        } else {
            l->flags &= (unsigned char)~bit;
            weft__sim_unpark(l); /* what the link still refuses parks again */
        }
    }
    return 0;
}

int weft_sim_partition(weft_sim_host *a, weft_sim_host *b)
{
    return verb(a, b, VERB_PARTITION);
}

int weft_sim_repair(weft_sim_host *a, weft_sim_host *b)
{
    return verb(a, b, VERB_REPAIR);
}

int weft_sim_hold(weft_sim_host *a, weft_sim_host *b)
{
    return verb(a, b, VERB_HOLD);
}

int weft_sim_release(weft_sim_host *a, weft_sim_host *b)
{
    return verb(a, b, VERB_RELEASE);
}

/* ---- the log's public side ---- */

int weft_sim_log(const char *text)
{
    int rc = sim_here();
    if (rc)
        return rc;
    if (!text)
        return -EINVAL;
    weft__sim_logf("note %s", text);
    return 0;
}

uint64_t weft_sim_log_hash(void)
{
    return ld_rlx(&slog.hash);
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int weft_sim_log_write(int fd)
{
    static const char cut[] = "(the log goes on: its text was cut at "
                              "weft_sim_opts.log_max)\n";
    int rc = write_all(fd, slog.text ? slog.text : "", slog.len);
    if (rc == 0 && slog.cut)
        rc = write_all(fd, cut, sizeof cut - 1);
    return rc;
}

/* ---- start and end ---- */

static int opts_resolve(const weft_sim_opts *in, weft_sim_opts *o)
{
    if (in->latency_ns < 0 || in->reset_permille > 1000 ||
        in->loss_permille > 1000 || in->dup_permille > 1000 ||
        in->reorder_permille > 1000)
        return -EINVAL;
    *o = *in;
    o->latency_ns = in->latency_ns ? in->latency_ns : DEFAULT_LATENCY;
    o->jitter_ns = in->jitter_ns == 0  ? DEFAULT_JITTER
                   : in->jitter_ns < 0 ? 0
                                       : in->jitter_ns;
    o->log_max = in->log_max ? in->log_max : DEFAULT_LOG_MAX;
    return 0;
}

int weft__sim_start(weft_runtime *rt, const weft_sim_opts *opts)
{
    weft_sim_opts o;
    int rc = opts_resolve(opts, &o);
    if (rc)
        return rc;
    int idle = 0;
    if (!atomic_compare_exchange_strong(&sim_busy, &idle, 1))
        return -EBUSY;
    sim_net *n = weft__calloc(1, sizeof(*n));
    weft_sim_host *main_host;
    if (!n || host_add(n, "main", &main_host) != 0) {
        free(n);
        st_rel(&sim_busy, 0);
        return -ENOMEM;
    }
    n->rt = rt;
    n->o = o;
    n->rng = rt->seed ^ 0x5EED5EED5EED5EEDull;
    n->off = ld_acq(&weft__sim_off);
    n->timer.fn = weft__sim_net_fire;
    weft__sim = n;
    log_reset(o.log_max);
    rt->on_pick = log_pick;
    weft__sim_logf("simulation seed %llu latency %lld jitter %lld",
                   (unsigned long long)rt->seed, (long long)o.latency_ns,
                   (long long)o.jitter_ns);
    st_rel(&weft__netsys_sim, &weft__sim_netsys);
    return 0;
}

void weft__sim_end(weft_runtime *rt)
{
    sim_net *n = weft__sim;
    if (!n || n->rt != rt)
        return;
    weft__sim_logf("end");
    st_rel(&weft__netsys_sim, NULL);
    rt->on_pick = NULL;
    weft__sim = NULL;
    weft__sim_net_free(n);
    st_rel(&sim_busy, 0);
}
