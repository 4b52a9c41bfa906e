/* SPDX-License-Identifier: MIT */
/*
 * The run log (runlog.h): a hash chained over the events of a run, and
 * the events themselves, for the determinism check to name the first
 * one where two runs of a seed part.
 */
#include "util/runlog.h"

#include <stdlib.h>
#include <string.h>

atomic_int weft__runlog_on;
static atomic_int claimed;
static weft__lock lock;
static weft__runlog *cur; /* under lock */

/* One step of the chain: the hash of (the previous hash, the event). */
static uint64_t chain(uint64_t h, uint64_t kind, uint64_t a, uint64_t b)
{
    const uint64_t w[3] = {kind, a, b};
    for (int i = 0; i < 3; i++) {
        h ^= w[i] + 0x9e3779b97f4a7c15u + (h << 6) + (h >> 2);
        h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9u;
        h = (h ^ (h >> 27)) * 0x94d049bb133111ebu;
        h ^= h >> 31;
    }
    return h;
}

void weft__runlog_add(weft_swarm_event_kind kind, uint64_t a, uint64_t b)
{
    weft__lock_acquire(&lock);
    weft__runlog *l = cur;
    if (l) {
        l->hash = chain(l->hash, (uint64_t)kind, a, b);
        l->count++;
        if (l->n == l->cap && l->cap < WEFT__RUNLOG_KEEP && !l->nomem) {
            size_t cap = l->cap ? l->cap * 2 : 4096;
            /* Plain realloc: the log is the test's, not the program's,
             * and must not pass through the allocation fault site. */
            weft_swarm_event *ev = realloc(l->ev, cap * sizeof(*ev));
            if (ev) {
                l->ev = ev;
                l->cap = cap;
            } else {
                l->nomem = true;
            }
        }
        if (l->n < l->cap)
            l->ev[l->n++] = (weft_swarm_event){kind, a, b, l->hash};
    }
    weft__lock_release(&lock);
}

int weft__runlog_start(weft__runlog *log)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&claimed, &expected, 1))
        return -EBUSY;
    log->n = 0;
    log->count = 0;
    log->hash = 0;
    log->nomem = false;
    weft__lock_acquire(&lock);
    cur = log;
    weft__lock_release(&lock);
    st_rel(&weft__runlog_on, 1);
    return 0;
}

void weft__runlog_stop(void)
{
    st_rel(&weft__runlog_on, 0);
    weft__lock_acquire(&lock);
    cur = NULL;
    weft__lock_release(&lock);
    st_rel(&claimed, 0);
}

void weft__runlog_free(weft__runlog *log)
{
    free(log->ev);
    memset(log, 0, sizeof(*log));
}

/* ---- schedule exploration ---- */

atomic_uint weft__pct_shift;
atomic_uint weft__sim_off;
static uint64_t pct_epoch; /* change points so far; the seeded worker's */
static uint64_t pct_salt;  /* the run's seed */

void weft__pct_set(unsigned shift, uint64_t seed)
{
    pct_epoch = 0;
    pct_salt = seed;
    st_rel(&weft__pct_shift, shift);
}

void weft__pct_change(void)
{
    pct_epoch++;
}

uint64_t weft__pct_priority(uint64_t id)
{
    return chain(pct_salt, 0x5043540000000000u, id, pct_epoch);
}
