/* SPDX-License-Identifier: MIT */
/*
 * Fault injection (fault.h): the plan, the draws, the counts, and weft's
 * allocation wrappers.
 *
 * Every draw is a hash of (seed, site, the pass's number at that site),
 * not a shared random stream: a site's faults do not depend on how the
 * passes through other sites interleave with it, only on how many passes
 * that site has seen. With one seeded worker the order of passes is the
 * seed's, so a run is a function of its seed; with several workers a
 * plan still fails the same share of passes.
 */
#include "util/fault.h"
#include "util/runlog.h"

#include <stdlib.h>
#include <string.h>

#define MAX_ERRS 4

static const struct site {
    const char *name;
    int n;              /* errors in errs */
    int errs[MAX_ERRS]; /* the first is a counter fault's default */
} sites[WEFT_FAULT_SITES] = {
    [WEFT_FAULT_ALLOC] = {"alloc", 1, {ENOMEM}},
    [WEFT_FAULT_STACK] = {"stack", 1, {ENOMEM}},
    [WEFT_FAULT_THREAD] = {"thread", 1, {EAGAIN}},
    [WEFT_FAULT_EVENTFD] = {"eventfd", 2, {EMFILE, ENFILE}},
    [WEFT_FAULT_POLLER] = {"poller", 2, {EMFILE, ENOMEM}},
    [WEFT_FAULT_POLLER_CTL] = {"poller_ctl", 2, {ENOMEM, ENOSPC}},
    [WEFT_FAULT_POLL] = {"poll", 1, {EINTR}},
    [WEFT_FAULT_SOCKET] = {"socket", 3, {EMFILE, ENFILE, ENOBUFS}},
    [WEFT_FAULT_ACCEPT] = {"accept", 4, {EMFILE, ENFILE, ECONNABORTED, EINTR}},
    [WEFT_FAULT_CONNECT] = {"connect",
                            3,
                            {ECONNREFUSED, ENETUNREACH, EADDRNOTAVAIL}},
    [WEFT_FAULT_READ] = {"read",
                         4,
                         {WEFT__FAULT_SHORT, ECONNRESET, EIO, EINTR}},
    [WEFT_FAULT_WRITE] = {"write",
                          4,
                          {WEFT__FAULT_SHORT, ECONNRESET, EPIPE, EINTR}},
    [WEFT_FAULT_SIGNALFD] = {"signalfd", 2, {EMFILE, ENFILE}},
};

const char *weft_fault_site_name(weft_fault_site site)
{
    return (unsigned)site < WEFT_FAULT_SITES ? sites[site].name : NULL;
}

/* splitmix64's finaliser over the three words. */
static uint64_t draw(uint64_t seed, uint64_t site, uint64_t k)
{
    uint64_t z =
        seed + 0x9e3779b97f4a7c15u * (site + 1) + 0xbf58476d1ce4e5b9u * (k + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

#if defined(WEFT__FAULTS)

atomic_int weft__faults_on;
static atomic_int installed;
/* Written by weft__fault_install before faults_on's release store, read
 * by the sites after its acquire load; left in place by remove. */
static weft_fault_plan plan;
static uint64_t seed;
static unsigned active;
static bool per_site; /* plan.site_permille gives the rates */
static _Atomic uint64_t passes[WEFT_FAULT_SITES], fired[WEFT_FAULT_SITES];
static _Atomic uint64_t shorts;

int weft__fault_install(const weft_fault_plan *p, uint64_t run_seed)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&installed, &expected, 1))
        return -EBUSY;
    plan = *p;
    seed = p->seed ? p->seed : run_seed ? run_seed : 1;
    active = 0;
    per_site = false;
    for (unsigned s = 0; s < WEFT_FAULT_SITES; s++)
        per_site |= p->site_permille[s] != 0;
    for (unsigned s = 0; s < WEFT_FAULT_SITES; s++) {
        if (per_site ? p->site_permille[s] != 0
                     : draw(seed, s, UINT64_MAX) % 1000 < p->active_permille)
            active |= 1u << s;
        st_rlx(&passes[s], 0);
        st_rlx(&fired[s], 0);
    }
    st_rlx(&shorts, 0);
    st_rel(&weft__faults_on, 1);
    return 0;
}

void weft__fault_remove(void)
{
    st_rel(&weft__faults_on, 0);
    st_rel(&installed, 0);
}

int weft__fault_hit(weft_fault_site s)
{
    if (!ld_acq(&weft__faults_on) || (unsigned)s >= WEFT_FAULT_SITES)
        return 0;
    uint64_t k = add_rlx(&passes[s], 1) + 1;
    const struct site *si = &sites[s];
    int e = 0;
    if (plan.nth && plan.site == s && k == plan.nth)
        e = plan.err ? plan.err : si->errs[0];
    else if ((active & (1u << s)) &&
             draw(seed, s, k) % 1000 <
                 (per_site ? plan.site_permille[s] : plan.fail_permille))
        e = si->errs[draw(seed, s, ~k) % (uint64_t)si->n];
    if (e) {
        add_rlx(&fired[s], 1);
        if (WEFT_UNLIKELY(ld_rlx(&weft__runlog_on)))
            weft__runlog_add(WEFT_SWARM_EVENT_FAULT, s,
                             k << 8 | (uint64_t)(e & 0xff));
    }
    return e;
}

size_t weft__fault_short(size_t n)
{
    if (n <= 1)
        return n;
    uint64_t k = add_rlx(&shorts, 1);
    return 1 + (size_t)(draw(seed, WEFT_FAULT_SITES, k) % (n - 1));
}

int weft_fault_stats_get(weft_fault_stats *out)
{
    if (!out)
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    for (unsigned s = 0; s < WEFT_FAULT_SITES; s++) {
        out->passes[s] = ld_rlx(&passes[s]);
        out->fired[s] = ld_rlx(&fired[s]);
    }
    out->active = active;
    return 0;
}

#else

size_t weft__fault_short(size_t n)
{
    return n;
}

int weft_fault_stats_get(weft_fault_stats *out)
{
    (void)out;
    (void)draw;
    return -ENOTSUP;
}

#endif
