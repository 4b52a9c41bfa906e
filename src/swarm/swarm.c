/* SPDX-License-Identifier: MIT */
/*
 * Swarm testing (weft.h, section 16): a test body over many seeds, each
 * with a fault profile drawn from its seed; replay, shrinking of a
 * failure's fault set, the determinism check over the run log
 * (util/runlog.h), and coverage of the fault sites and of the "sometimes"
 * assertions. It sits above the runtime: it starts runtimes, one after
 * the other, on the calling thread.
 */
#include "sched/clock.h"
#include "util/runlog.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALL_SITES ((1u << WEFT_FAULT_SITES) - 1)
#define NET WEFT_SWARM_NET_ALL
_Static_assert(WEFT_SWARM_NET_ALL ==
                   ((1u << WEFT_SIM_FAULTS) - 1) * WEFT_SWARM_NET(0),
               "WEFT_SWARM_NET_ALL names every class");
_Static_assert(WEFT_FAULT_SITES <= 16, "the sites' bits stay below NET's");
#define MAX_WORKERS 4
#define SOMETIMES_MAX 256

/* ---- the run in progress: the assertion hook and "sometimes" ---- */

static atomic_int busy;     /* a sweep, check, shrink or replay runs */
static atomic_int in_sweep; /* weft_sim_sometimes counts */
static atomic_int run_failed;
static char run_what[160]; /* written by the first weft_swarm_fail */

static pthread_mutex_t sometimes_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sometimes {
    const char *name;
    uint64_t reached, held;
} sometimes[SOMETIMES_MAX];
static int nsometimes;
static bool sometimes_full;

void weft_swarm_fail(const char *what)
{
    if (!what)
        what = "weft_swarm_fail";
    if (!ld_acq(&busy)) {
        fprintf(stderr, "weft_swarm_fail outside a sweep: %s\n", what);
        return;
    }
    int expected = 0;
    if (atomic_compare_exchange_strong(&run_failed, &expected, 1)) {
        snprintf(run_what, sizeof(run_what), "%s", what);
        st_rel(&run_failed, 2); /* the text is written */
    }
}

int weft_sim_sometimes(int cond, const char *name)
{
    if (!name || !ld_acq(&in_sweep))
        return cond;
    pthread_mutex_lock(&sometimes_lock);
    int i = 0;
    while (i < nsometimes && sometimes[i].name != name &&
           strcmp(sometimes[i].name, name) != 0)
        i++;
    if (i == nsometimes) {
        if (i == SOMETIMES_MAX) {
            sometimes_full = true;
            pthread_mutex_unlock(&sometimes_lock);
            return cond;
        }
        sometimes[nsometimes++] = (struct sometimes){name, 0, 0};
    }
    sometimes[i].reached++;
    sometimes[i].held += cond != 0;
    pthread_mutex_unlock(&sometimes_lock);
    return cond;
}

/* ---- profiles ---- */

/* splitmix64 */
static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static bool faults_built(void)
{
    weft_fault_stats st;
    return weft_fault_stats_get(&st) != -ENOTSUP;
}

static int opts_check(const weft_swarm_opts *o)
{
    if (o->max_workers < 0 || o->max_workers > MAX_WORKERS ||
        (o->sites & ~(ALL_SITES | NET)) || (o->must_fire & ~ALL_SITES) ||
        o->max_permille > 1000 || o->check_every < 0 || o->max_failures < 0 ||
        o->explore < -1 || o->explore > 1)
        return -EINVAL;
    return 0;
}

/* The network's fault classes a run under o can have: none outside
 * simulation; in it, each class whose chance the run's weft_sim_opts
 * sets, and partition (the verbs, which the body calls). */
static unsigned net_classes(const weft_swarm_opts *o)
{
    const weft_sim_opts *so = o->config ? o->config->sim : NULL;
    const char *env = getenv("WEFT_SIM");
    if (!so && !(env && strcmp(env, "1") == 0))
        return 0;
    unsigned m = WEFT_SWARM_NET(WEFT_SIM_PARTITION);
    if (so && so->loss_permille)
        m |= WEFT_SWARM_NET(WEFT_SIM_LOSS);
    if (so && so->dup_permille)
        m |= WEFT_SWARM_NET(WEFT_SIM_DUP);
    if (so && so->reorder_permille)
        m |= WEFT_SWARM_NET(WEFT_SIM_REORDER);
    if (so && so->reset_permille)
        m |= WEFT_SWARM_NET(WEFT_SIM_RESET);
    return m;
}

int weft_swarm_profile_get(const weft_swarm_opts *opts, uint64_t seed,
                           weft_swarm_profile *out)
{
    weft_swarm_opts none = {0};
    const weft_swarm_opts *o = opts ? opts : &none;
    if (!out || opts_check(o))
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    /* A stream of the swarm's own, apart from the run's uses of the
     * seed (the scheduler's picks, the fault draws). */
    uint64_t r = seed ^ 0x5357524d50524f46u;
    out->seed = seed;
    out->workers =
        o->max_workers > 1 ? 1 + (int)(next(&r) % o->max_workers) : 1;
    out->deterministic = out->workers == 1;
    unsigned allowed = o->sites & ALL_SITES ? o->sites & ALL_SITES : ALL_SITES;
    unsigned max = o->max_permille ? o->max_permille : 50;
    int bits = 0;
    while ((1u << bits) < max)
        bits++;
    /* Swarm: each seed first draws how crowded its fault set is (one in
     * eight none at all, else a chance per site from 1/8 to 1), then
     * which sites, then each one's rate, log-uniformly up to max. */
    uint64_t density = next(&r) % 8;
    for (unsigned s = 0; s < WEFT_FAULT_SITES; s++) {
        uint64_t pick = next(&r), rate = next(&r);
        if (!density || !(allowed & (1u << s)) || pick % 8 >= density)
            continue;
        unsigned span = 1u << (rate % (uint64_t)(bits + 1));
        unsigned permille = 1 + (unsigned)((rate >> 8) % span);
        out->faults.site_permille[s] = permille < max ? permille : max;
        out->sites |= 1u << s;
    }
    /* A simulated run has the network's classes on (drawing nothing:
     * the network's draws are the seed's); shrinking takes them away. */
    out->sites |= net_classes(o) & (o->sites & NET ? o->sites : NET);
    /* Schedule exploration, from a stream of its own (the fault draws
     * above stay as they were). */
    uint64_t e = seed ^ 0x4558504c4f524531u;
    if (out->deterministic &&
        (o->explore > 0 || (o->explore == 0 && next(&e) % 2)))
        out->explore = 2 + (unsigned)(next(&e) % 7);
    return 0;
}

/* Keeps only the sites (and network classes) in mask active in p. */
static void profile_limit(weft_swarm_profile *p, unsigned mask,
                          const weft_swarm_opts *o)
{
    unsigned max = o->max_permille ? o->max_permille : 50;
    for (unsigned s = 0; s < WEFT_FAULT_SITES; s++) {
        if (!(mask & (1u << s)))
            p->faults.site_permille[s] = 0;
        else if (!p->faults.site_permille[s]) /* named to replay: a rate */
            p->faults.site_permille[s] = max;
    }
    p->sites = mask;
}

/* ---- one run ---- */

typedef struct root {
    weft_fn body;
    void *arg;
    bool started;
} root;

static int root_fn(void *arg)
{
    root *r = arg;
    r->started = true;
    return r->body(r->arg);
}

/* A run's outcome. */
typedef struct outcome {
    int status;   /* 0, the body's status, weft_run's error, -EPROTO */
    bool started; /* the body ran */
    bool failed;  /* a failure of the run (not a fault before the body) */
    bool fired;   /* a fault was made */
    char what[160];
} outcome;

static void run_one(const weft_swarm_opts *o, const weft_swarm_profile *p,
                    const char *trace, weft_fn body, void *arg, outcome *out)
{
    weft_config cfg = {0};
    if (o->config)
        cfg = *o->config;
    cfg.workers = p->workers;
    cfg.clock = WEFT_CLOCK_VIRTUAL;
    cfg.seed = p->seed;
    cfg.faults = faults_built() ? &p->faults : NULL;
    cfg.trace_path = trace;
    root r = {body, arg, false};
    st_rlx(&run_failed, 0);
    run_what[0] = '\0';
    weft__pct_set(p->explore, p->seed);
    /* The network's classes the profile has off (shrinking, a replay's
     * WEFT_SWARM_SITES): the simulation switches them off. */
    st_rel(&weft__sim_off, (net_classes(o) & ~p->sites) / WEFT_SWARM_NET(0));
    int rc = weft_run(&cfg, root_fn, &r);
    st_rel(&weft__sim_off, 0);
    weft__pct_set(0, 0);
    memset(out, 0, sizeof(*out));
    out->status = rc;
    out->started = r.started;
    weft_fault_stats st;
    if (cfg.faults && weft_fault_stats_get(&st) == 0)
        for (int s = 0; s < WEFT_FAULT_SITES; s++)
            out->fired |= st.fired[s] != 0;
    if (ld_acq(&run_failed) == 2) {
        snprintf(out->what, sizeof(out->what), "%s", run_what);
        if (!out->status)
            out->status = -EPROTO;
    }
    out->failed = out->status != 0 && out->started;
}

/* ---- the environment ---- */

static int env_number(const char *name, uint64_t *v, bool *set)
{
    const char *s = getenv(name);
    *set = s != NULL;
    if (!s)
        return 0;
    char *end = NULL;
    errno = 0;
    if (*s < '0' || *s > '9')
        return -EINVAL;
    unsigned long long x = strtoull(s, &end, 0);
    if (end == s || *end != '\0' || errno == ERANGE)
        return -EINVAL;
    *v = (uint64_t)x;
    return 0;
}

/* The name of a swarm mask's bit k: a fault site's, or a network
 * class's; NULL for none. */
static const char *site_name(unsigned k)
{
    if (k < WEFT_FAULT_SITES)
        return weft_fault_site_name((weft_fault_site)k);
    if (k >= 16 && k < 16 + WEFT_SIM_FAULTS)
        return weft_sim_fault_name((weft_sim_fault)(k - 16));
    return NULL;
}

/* Reads a list of site names ("read,write", or "none") into *mask. */
static int parse_sites(const char *s, unsigned *mask)
{
    *mask = 0;
    if (strcmp(s, "none") == 0)
        return 0;
    while (*s) {
        size_t n = strcspn(s, ",");
        unsigned bit = 0;
        for (unsigned k = 0; k < 32 && !bit; k++) {
            const char *name = site_name(k);
            if (name && strlen(name) == n && strncmp(name, s, n) == 0)
                bit = 1u << k;
        }
        if (!bit)
            return -EINVAL;
        *mask |= bit;
        s += n;
        if (*s == ',')
            s++;
    }
    return 0;
}

/* Writes the names of mask's sites, comma-separated ("none" for none),
 * each with its rate in thousandths if rates is not NULL. */
static const char *site_list_rates(unsigned mask, const unsigned *rates,
                                   char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (unsigned s = 0; s < 32; s++)
        if ((mask & (1u << s)) && site_name(s)) {
            char rate[16] = "";
            if (rates && s < WEFT_FAULT_SITES)
                snprintf(rate, sizeof(rate), " %u/1000", rates[s]);
            else if (rates)
                snprintf(rate, sizeof(rate), " (network)");
            int n = snprintf(buf + at, len - at, "%s%s%s",
                             !at     ? ""
                             : rates ? ", "
                                     : ",",
                             site_name(s), rate);
            if (n < 0 || (size_t)n >= len - at)
                break;
            at += (size_t)n;
        }
    return at ? buf : "none";
}

/* The names alone, as WEFT_SWARM_SITES takes them. */
static const char *site_list(unsigned mask, char *buf, size_t len)
{
    return site_list_rates(mask, NULL, buf, len);
}

/* The command that runs this process again: opts' or the command line,
 * each argument quoted if the shell would split or expand it. */
static const char *command_line(const weft_swarm_opts *o, char *buf, size_t len)
{
    if (o->command)
        return o->command;
    char raw[1024];
    ssize_t n = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, raw, sizeof(raw) - 1);
        close(fd);
    }
    if (n <= 0)
        return "<this program>";
    raw[n] = '\0';
    size_t at = 0;
    for (ssize_t i = 0; i < n && at + 4 < len;) {
        const char *arg = raw + i;
        size_t alen = strlen(arg);
        bool plain = alen > 0 && strspn(arg, "abcdefghijklmnopqrstuvwxyz"
                                             "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                             "0123456789_-./=:,+") == alen;
        if (at)
            buf[at++] = ' ';
        if (!plain)
            buf[at++] = '\'';
        for (size_t k = 0; k < alen && at + 6 < len; k++) {
            if (arg[k] == '\'') {
                memcpy(buf + at, "'\\''", 4);
                at += 4;
            } else {
                buf[at++] = arg[k];
            }
        }
        if (!plain)
            buf[at++] = '\'';
        i += (ssize_t)alen + 1;
    }
    buf[at] = '\0';
    return buf;
}

/* ---- claiming the process ---- */

static int claim(void)
{
    if (weft__tl_worker) /* a task: weft_run would refuse every run */
        return -EBUSY;
    int expected = 0;
    return atomic_compare_exchange_strong(&busy, &expected, 1) ? 0 : -EBUSY;
}

static void unclaim(void)
{
    st_rel(&busy, 0);
}

/* ---- shrinking ---- */

static int shrink(const weft_swarm_opts *o, const weft_swarm_profile *p,
                  weft_fn body, void *arg, unsigned *sites)
{
    outcome oc;
    run_one(o, p, NULL, body, arg, &oc);
    if (!oc.failed)
        return 0;
    unsigned keep = p->sites;
    for (unsigned s = 0; s < 32; s++) {
        if (!(keep & (1u << s)))
            continue;
        weft_swarm_profile q = *p;
        profile_limit(&q, keep & ~(1u << s), o);
        run_one(o, &q, NULL, body, arg, &oc);
        if (oc.failed)
            keep &= ~(1u << s);
    }
    *sites = keep;
    return 1;
}

int weft_swarm_shrink(const weft_swarm_opts *opts, uint64_t seed, weft_fn body,
                      void *arg, unsigned *sites)
{
    weft_swarm_opts none = {0};
    const weft_swarm_opts *o = opts ? opts : &none;
    weft_swarm_profile p;
    if (!body || !sites || weft_swarm_profile_get(o, seed, &p))
        return -EINVAL;
    int rc = claim();
    if (rc)
        return rc;
    rc = shrink(o, &p, body, arg, sites);
    unclaim();
    return rc;
}

/* ---- the determinism check ---- */

static void diff_logs(const weft__runlog l[2], weft_swarm_diff *d)
{
    d->first = -1;
    for (int k = 0; k < 2; k++) {
        d->events[k] = l[k].count;
        d->hash[k] = l[k].hash;
    }
    size_t n = l[0].n < l[1].n ? l[0].n : l[1].n;
    size_t i = 0;
    while (i < n && l[0].ev[i].kind == l[1].ev[i].kind &&
           l[0].ev[i].a == l[1].ev[i].a && l[0].ev[i].b == l[1].ev[i].b)
        i++;
    if (i == n && l[0].count == l[1].count && l[0].hash == l[1].hash)
        return;
    d->first = (int64_t)i;
    for (int k = 0; k < 2; k++)
        if (i < l[k].n)
            d->at[k] = l[k].ev[i];
}

static int check(const weft_swarm_opts *o, const weft_swarm_profile *p,
                 weft_fn body, void *arg, weft_swarm_diff *d)
{
    memset(d, 0, sizeof(*d));
    d->first = -1;
    if (!p->deterministic)
        return -ENOTSUP;
    weft__runlog l[2] = {{0}, {0}};
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        outcome oc;
        if ((rc = weft__runlog_start(&l[k])) != 0)
            break;
        run_one(o, p, NULL, body, arg, &oc);
        weft__runlog_stop();
        d->status[k] = oc.status;
    }
    if (!rc) {
        diff_logs(l, d);
        rc = d->first >= 0 || d->status[0] != d->status[1];
    }
    weft__runlog_free(&l[0]);
    weft__runlog_free(&l[1]);
    return rc;
}

int weft_swarm_check(const weft_swarm_opts *opts, uint64_t seed, weft_fn body,
                     void *arg, weft_swarm_diff *out)
{
    weft_swarm_opts none = {0};
    const weft_swarm_opts *o = opts ? opts : &none;
    weft_swarm_profile p;
    weft_swarm_diff d;
    if (!body || weft_swarm_profile_get(o, seed, &p))
        return -EINVAL;
    int rc = claim();
    if (rc)
        return rc;
    rc = check(o, &p, body, arg, out ? out : &d);
    unclaim();
    return rc;
}

static void event_text(const weft_swarm_event *e, char *buf, size_t len)
{
    switch (e->kind) {
    case WEFT_SWARM_EVENT_RESUME:
        snprintf(buf, len, "resumed task %#llx at %lld ns",
                 (unsigned long long)e->a, (long long)e->b);
        break;
    case WEFT_SWARM_EVENT_FAULT:
        snprintf(buf, len, "fault at %s (pass %llu, errno %d)",
                 weft_fault_site_name((weft_fault_site)e->a) ?: "?",
                 (unsigned long long)(e->b >> 8), (int)(e->b & 0xff));
        break;
    default:
        snprintf(buf, len, "had ended");
    }
}

static void report_diff(const char *name, uint64_t seed,
                        const weft_swarm_diff *d)
{
    if (d->first < 0) {
        fprintf(stderr,
                "swarm %s: seed %llu is not deterministic: the same "
                "events, but statuses %d and %d\n",
                name, (unsigned long long)seed, d->status[0], d->status[1]);
        return;
    }
    char a[96], b[96];
    event_text(&d->at[0], a, sizeof(a));
    event_text(&d->at[1], b, sizeof(b));
    fprintf(stderr,
            "swarm %s: seed %llu is not deterministic: its two runs part at "
            "event %lld (of %llu and %llu): the first %s, the second %s\n",
            name, (unsigned long long)seed, (long long)d->first,
            (unsigned long long)d->events[0], (unsigned long long)d->events[1],
            a, b);
}

/* ---- replay ---- */

int weft_swarm_replay(const weft_swarm_opts *opts, uint64_t seed, int sites_set,
                      unsigned sites, const char *trace_path, weft_fn body,
                      void *arg)
{
    weft_swarm_opts none = {0};
    const weft_swarm_opts *o = opts ? opts : &none;
    weft_swarm_profile p;
    if (!body || (sites & ~(ALL_SITES | NET)) ||
        weft_swarm_profile_get(o, seed, &p))
        return -EINVAL;
    if (sites_set)
        profile_limit(&p, sites, o);
    int rc = claim();
    if (rc)
        return rc;
    outcome oc;
    run_one(o, &p, trace_path, body, arg, &oc);
    unclaim();
    return oc.status;
}

/* ---- the sweep ---- */

static void report_failure(const weft_swarm_opts *o, const char *name,
                           const weft_swarm_profile *p, const outcome *oc)
{
    char cmd[1200], list[320];
    const char *c = command_line(o, cmd, sizeof(cmd));
    fprintf(
        stderr,
        "swarm %s: seed %llu FAILED: status %d (%s)%s%s%s; %d worker%s, "
        "faults %s%s\n",
        name, (unsigned long long)p->seed, oc->status,
        oc->status < 0 ? weft_strerror(oc->status) : "the body's",
        oc->what[0] ? ", \"" : "", oc->what, oc->what[0] ? "\"" : "",
        p->workers, p->workers > 1 ? "s (not a function of the seed)" : "",
        site_list_rates(p->sites, p->faults.site_permille, list, sizeof(list)),
        p->explore ? ", schedule explored" : "");
    fprintf(stderr, "  replay: WEFT_SEED=%llu %s\n",
            (unsigned long long)p->seed, c);
}

static void report_shrunk(const weft_swarm_opts *o, const char *name,
                          uint64_t seed, unsigned sites)
{
    char cmd[1200], list[160];
    const char *c = command_line(o, cmd, sizeof(cmd));
    const char *l = site_list(sites, list, sizeof(list));
    if (!sites)
        fprintf(stderr, "swarm %s: seed %llu shrunk: it fails with no fault\n",
                name, (unsigned long long)seed);
    else
        fprintf(stderr,
                "swarm %s: seed %llu shrunk: it fails with faults %s alone\n",
                name, (unsigned long long)seed, l);
    fprintf(stderr, "  replay: WEFT_SEED=%llu WEFT_SWARM_SITES=%s %s\n",
            (unsigned long long)seed, l, c);
}

static void report_coverage(const char *name, const weft_swarm_opts *o,
                            weft_swarm_stats *st)
{
    int v = o->verbose;
    if (v >= 0 && st->faults) {
        fprintf(stderr, "swarm %s: fault sites (runs active, passes, fired):\n",
                name);
        for (unsigned s = 0; s < WEFT_FAULT_SITES; s++)
            fprintf(stderr, "  %-11s %8llu %12llu %10llu%s\n",
                    weft_fault_site_name((weft_fault_site)s),
                    (unsigned long long)st->active[s],
                    (unsigned long long)st->passes[s],
                    (unsigned long long)st->fired[s],
                    st->fired[s]               ? ""
                    : o->must_fire & (1u << s) ? "  NEVER FIRED (required)"
                                               : "  never fired");
    }
    if (!st->faults && o->must_fire && v >= 0)
        fprintf(stderr,
                "swarm %s: built without the fault sites: nothing to fire\n",
                name);
    pthread_mutex_lock(&sometimes_lock);
    for (int i = 0; i < nsometimes; i++) {
        const struct sometimes *e = &sometimes[i];
        bool never = e->held == 0;
        st->sometimes_never += never;
        if (v >= 0 || (never && o->require_sometimes))
            fprintf(stderr, "swarm %s: sometimes \"%s\": true %llu of %llu%s\n",
                    name, e->name, (unsigned long long)e->held,
                    (unsigned long long)e->reached,
                    never ? (o->require_sometimes ? "  NEVER (required)"
                                                  : "  never")
                          : "");
    }
    if (sometimes_full)
        fprintf(stderr,
                "swarm %s: more than %d sometimes names: the rest "
                "were not counted\n",
                name, SOMETIMES_MAX);
    pthread_mutex_unlock(&sometimes_lock);
}

/* A sweep in progress. */
typedef struct sweep_ctx {
    const weft_swarm_opts *o;
    const char *name;
    weft_fn body;
    void *arg;
    weft_swarm_stats *st;
    uint64_t first, seeds;
    bool sites_set; /* WEFT_SWARM_SITES gives the active sites */
    unsigned sites;
    int problems;
} sweep_ctx;

/* The seeds to run, from the options and the environment (WEFT_SEED:
 * that seed alone). 0, or -EINVAL. */
static int sweep_range(sweep_ctx *c)
{
    uint64_t env_seed = 0, env_seeds = 0;
    bool replay, seeds_set;
    const char *sites = getenv("WEFT_SWARM_SITES");
    c->first = c->o->first_seed ? c->o->first_seed : 1;
    c->seeds = c->o->seeds ? c->o->seeds : 100;
    c->sites_set = sites != NULL;
    if (env_number("WEFT_SEED", &env_seed, &replay) ||
        env_number("WEFT_SWARM_SEEDS", &env_seeds, &seeds_set) ||
        (sites && parse_sites(sites, &c->sites))) {
        fprintf(stderr,
                "swarm %s: WEFT_SEED, WEFT_SWARM_SEEDS or WEFT_SWARM_SITES "
                "not understood\n",
                c->name);
        return -EINVAL;
    }
    if (seeds_set)
        c->seeds = env_seeds;
    if (replay) {
        c->first = env_seed;
        c->seeds = 1;
    }
    return 0;
}

/* Adds the last run's fault counts to the sweep's. */
static void count_sites(weft_swarm_stats *st, const weft_swarm_profile *p)
{
    weft_fault_stats fs;
    if (!st->faults || weft_fault_stats_get(&fs) != 0)
        return;
    for (unsigned s = 0; s < WEFT_FAULT_SITES; s++) {
        st->passes[s] += fs.passes[s];
        st->fired[s] += fs.fired[s];
        st->active[s] += (p->sites >> s) & 1;
    }
}

/* A failing seed: reported; the first one shrunk and traced as asked. */
static void on_failure(sweep_ctx *c, const weft_swarm_profile *p,
                       const outcome *oc)
{
    const weft_swarm_opts *o = c->o;
    weft_swarm_stats *st = c->st;
    c->problems++;
    report_failure(o, c->name, p, oc);
    if (++st->failed > 1)
        return;
    st->first_failed_seed = p->seed;
    st->first_status = oc->status;
    st->failed_sites = p->sites;
    if (o->shrink && p->sites &&
        shrink(o, p, c->body, c->arg, &st->shrunk_sites) == 1) {
        st->shrunk = 1;
        report_shrunk(o, c->name, p->seed, st->shrunk_sites);
    }
    if (o->trace_path) {
        outcome again;
        run_one(o, p, o->trace_path, c->body, c->arg, &again);
        fprintf(stderr, "swarm %s: seed %llu traced to %s\n", c->name,
                (unsigned long long)p->seed, o->trace_path);
    }
}

/* Runs the i-th seed of the sweep (and checks it, if its turn): 0, or a
 * negative code that ends the sweep. */
static int sweep_seed(sweep_ctx *c, uint64_t i)
{
    const weft_swarm_opts *o = c->o;
    weft_swarm_stats *st = c->st;
    weft_swarm_profile p;
    weft_swarm_profile_get(o, c->first + i, &p);
    if (c->sites_set)
        profile_limit(&p, c->sites, o);
    if (!st->faults)
        profile_limit(&p, p.sites & NET, o);
    outcome oc;
    run_one(o, &p, NULL, c->body, c->arg, &oc);
    st->runs++;
    count_sites(st, &p);
    if (!oc.started && oc.status) {
        if (!oc.fired) { /* not a fault's doing: a misuse */
            fprintf(stderr, "swarm %s: seed %llu: weft_run: %s\n", c->name,
                    (unsigned long long)p.seed, weft_strerror(oc.status));
            return oc.status;
        }
        st->not_started++;
    }
    if (o->verbose > 0)
        fprintf(stderr, "swarm %s: seed %llu: %d\n", c->name,
                (unsigned long long)p.seed, oc.status);
    if (oc.failed)
        on_failure(c, &p, &oc);
    if (o->check_every && i % (uint64_t)o->check_every == 0 &&
        p.deterministic) {
        weft_swarm_diff d;
        int rc = check(o, &p, c->body, c->arg, &d);
        if (rc < 0)
            return rc;
        st->checked++;
        if (rc) {
            st->nondeterministic++;
            c->problems++;
            report_diff(c->name, p.seed, &d);
        }
    }
    return 0;
}

/* The sweep's end: required sites and sometimes-names, the report. */
static void sweep_end(sweep_ctx *c)
{
    const weft_swarm_opts *o = c->o;
    weft_swarm_stats *st = c->st;
    if (st->faults)
        for (unsigned s = 0; s < WEFT_FAULT_SITES; s++)
            if ((o->must_fire & (1u << s)) && !st->fired[s]) {
                st->unfired |= 1u << s;
                c->problems++;
            }
    report_coverage(c->name, o, st);
    if (o->require_sometimes)
        c->problems += st->sometimes_never;
    if (o->verbose < 0 && !c->problems)
        return;
    double secs = (double)st->elapsed_ns / 1e9;
    fprintf(stderr,
            "swarm %s: %llu seeds from %llu in %.2f s (%.0f/s): %llu "
            "failed, %llu checked twice (%llu parted), %llu stopped by a "
            "fault before the body%s\n",
            c->name, (unsigned long long)st->runs, (unsigned long long)c->first,
            secs, secs > 0 ? (double)st->runs / secs : 0.0,
            (unsigned long long)st->failed, (unsigned long long)st->checked,
            (unsigned long long)st->nondeterministic,
            (unsigned long long)st->not_started,
            st->faults ? "" : "; built without the fault sites");
}

static int sweep(const weft_swarm_opts *o, weft_fn body, void *arg,
                 weft_swarm_stats *st)
{
    sweep_ctx c = {.o = o,
                   .name = o->name ? o->name : "swarm",
                   .body = body,
                   .arg = arg,
                   .st = st};
    int rc = sweep_range(&c);
    if (rc)
        return rc;
    uint64_t max_failures = o->max_failures ? (uint64_t)o->max_failures : 1;
    st->faults = faults_built();
    int64_t t0 = weft__mono_now();
    for (uint64_t i = 0; i < c.seeds && st->failed < max_failures; i++)
        if ((rc = sweep_seed(&c, i)) != 0)
            return rc;
    st->elapsed_ns = weft__mono_now() - t0;
    sweep_end(&c);
    return c.problems;
}

int weft_swarm_run(const weft_swarm_opts *opts, weft_fn body, void *arg,
                   weft_swarm_stats *out)
{
    weft_swarm_opts none = {0};
    const weft_swarm_opts *o = opts ? opts : &none;
    weft_swarm_stats st;
    memset(&st, 0, sizeof(st));
    if (!body || opts_check(o))
        return -EINVAL;
    int rc = claim();
    if (rc)
        return rc;
    pthread_mutex_lock(&sometimes_lock);
    nsometimes = 0;
    sometimes_full = false;
    pthread_mutex_unlock(&sometimes_lock);
    st_rel(&in_sweep, 1);
    rc = sweep(o, body, arg, &st);
    st_rel(&in_sweep, 0);
    unclaim();
    if (out)
        *out = st;
    return rc;
}
