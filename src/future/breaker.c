/* SPDX-License-Identifier: MIT */
/*
 * Circuit breaker.
 *
 * Everything lives under one spinlock (b->lock): acquire, record and
 * stats_get come from tasks on any worker and from plain threads, and
 * each holds the lock for a few dozen instructions. Time is weft_now(),
 * read under the lock (the runtime's clock, virtual in tests; outside a
 * runtime CLOCK_MONOTONIC), and never goes back as far as the breaker is
 * concerned: a reading older than the last one seen counts as the last one.
 * One breaker must be used with one clock.
 *
 * States.
 * - CLOSED: calls go through. Each outcome recorded in this state counts
 *   towards two triggers, either of which opens the breaker:
 *   consecutive failures (failure_threshold; a success resets the count),
 *   and the failure rate over a sliding window of time (below). The
 *   triggers are evaluated after every outcome, success or failure.
 * - OPEN: acquire returns -EHOSTDOWN (counted in `rejected`) until
 *   open_until = the instant it opened + cooldown_ns. Nothing runs at that
 *   instant (no timer, no background task): the first acquire at or after
 *   open_until moves the breaker to HALF_OPEN, lazily, and is the first
 *   trial. stats_get shows an open breaker whose cool-down is over as
 *   HALF_OPEN, as it would be for the next acquire.
 * - HALF_OPEN: up to half_open_calls trial calls are let through, in all,
 *   for this half-open period; further acquires are rejected until the
 *   trials have decided. The first trial to fail opens the breaker again
 *   (a fresh cool-down from that instant); when half_open_calls trials
 *   have succeeded, it closes, with the window and the consecutive count
 *   reset.
 *
 * The rate window. A fixed ring of NBUCKETS (10) buckets, each `width` =
 * ceil(window_ns / 10) ns wide and aligned to multiples of width on the
 * clock (bucket number floor(t / width)); each holds the calls and
 * failures recorded in it. A bucket is reused (zeroed) when its slot comes
 * round for a newer bucket number. At time t the window is the current
 * bucket and the 9 before it. So an outcome recorded at time r counts
 * until the instant (floor(r / width) + 10) * width and no longer: for a
 * time in (window_ns - width, window_ns] when width divides window_ns
 * (exactly window_ns for one recorded at a bucket's start). The rate
 * opens the breaker when failure_rate is set, the window holds at least
 * min_calls calls (and at least one), and failures * 100 >= failure_rate
 * * calls. Outcomes are placed in the window at the time they are
 * recorded (a call counts when it ends).
 *
 * Permits, generations and late records. Every transition starts a new
 * generation (b->gen). A call let through in one generation may report
 * in a later one: a call acquired while closed may finish after the
 * breaker opened, or during the next half-open period, or after it closed
 * again. Such a late outcome must not be taken for a trial's (the trials
 * would be miscounted: a decision made on the wrong call, or a trial
 * counted twice). Two kinds of permit:
 * - weft_breaker_call keeps the generation that granted its permit (on
 *   its stack), so its record is exact: an outcome of the current
 *   generation counts (as a closed-state outcome or as a trial's); one of
 *   an older generation is stale: it is counted in the statistics
 *   (`failures`) and changes no state.
 * - weft_breaker_acquire/record carry no token, so the breaker counts
 *   these permits by class: cur_bare (granted in the current generation)
 *   and stale_bare (granted in an older one; at every transition cur_bare
 *   moves into stale_bare), and matches each record with a permit of the
 *   class its outcome can least mislead:
 *     a failure retires a stale permit if one is out (statistics only),
 *     else a current one (it counts);
 *     a success retires a current permit if one is out (it counts), else
 *     a stale one.
 *   Invariants, whatever the order of records: every permit is retired
 *   exactly once and the counts never go negative; no more outcomes count
 *   for a generation than it let calls through (so a half-open period
 *   never sees more trial outcomes than trials); a failure never counts
 *   while a bare permit from an older generation is out, so as long as
 *   only older calls fail (calls that hung through the outage and time
 *   out late: the usual late records), none of their failures counts,
 *   in whatever order they come: they neither reopen a half-open breaker
 *   nor count against a closed one, and a trial's success is never held
 *   up by them. The price, when calls of two generations are out at once: a
 *   trial's failure that retires an older permit is not counted, and the
 *   period is decided by the next outcome that counts (the half-open
 *   breaker keeps rejecting meanwhile: the decision comes late, never
 *   early, and on an outcome observed after the cool-down); and a late
 *   success may count as a trial's (it is a success observed during the
 *   half-open period). Use weft_breaker_call for exact attribution.
 *   A record with no bare permit out (none acquired, or all already
 *   recorded) is -EINVAL, even while weft_breaker_call calls are out:
 *   those record themselves.
 *
 * Reporting changes. on_change must run with no lock held, and the
 * changes must be reported in the order they happened. Each transition is
 * queued, under the lock, in a FIFO of reports; the thread that finds no
 * report in progress becomes the reporter: it pops one report at a time
 * under the lock and calls on_change with the lock released, until the
 * queue is empty (a reporter that finds the queue empty clears the flag
 * under the same lock, so no report is stranded). A transition caused
 * while another thread is reporting is reported by that thread after the
 * ones before it; so a change is reported on the thread that caused it
 * unless two changes race, and then in transition order. No thread ever
 * waits for another, so on_change may block, or call the breaker itself
 * (its own changes are reported after it returns). The queue holds 16
 * reports and grows when on_change is slower than the changes; if memory
 * for that cannot be had, the report is dropped (the state still
 * changes).
 *
 * weft_breaker_call needs nothing of a task: like acquire and record it
 * may be called from any thread (fn decides whether it blocks).
 *
 * free returns -EBUSY while permits are out or a report is being made, so
 * nothing touches a freed breaker: acquire, record and the reporter drop
 * every reference to it when they release the lock for the last time.
 */
#include "util/fault.h"
#include "util/util.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKETS 10
#define NREPORTS_INLINE 16

#define DEF_THRESHOLD 5
#define DEF_WINDOW (10 * WEFT_SEC)
#define DEF_COOLDOWN (5 * WEFT_SEC)

typedef struct bucket {
    int64_t idx; /* bucket number floor(t / width); INT64_MIN: unused */
    int64_t calls, failures;
} bucket;

typedef struct report {
    unsigned char from, to;
} report;

struct weft_breaker {
    weft__lock lock; /* guards every field below the options */

    /* options, fixed at creation */
    int threshold, rate, min_calls, trial_max;
    int64_t width, cooldown;
    int (*is_failure)(int status, void *ctx);
    void (*on_change)(weft_breaker *b, weft_breaker_state from,
                      weft_breaker_state to, void *ctx);
    void *ctx;

    weft_breaker_state state;
    uint64_t gen;       /* generation: +1 at every transition */
    int64_t last_now;   /* latest clock reading (time never goes back) */
    int64_t open_until; /* end of the last open period (0: never opened) */
    int consecutive;    /* closed: failures in a row */
    bucket win[NBUCKETS];
    int trials, trials_ok; /* half-open: let through, succeeded */

    int64_t out;        /* permits out, both kinds */
    int64_t cur_bare;   /* bare permits of the current generation */
    int64_t stale_bare; /* bare permits of older generations */

    int64_t calls, failures, rejected, opened; /* statistics */

    /* reports of transitions not yet made, FIFO */
    report *rq;
    unsigned rqcap, rqhead, rqlen;
    bool reporting; /* a thread is making reports */
    report rq_inline[NREPORTS_INLINE];
};

/* Under the lock: the clock, never earlier than a previous reading. */
static int64_t clock_now(weft_breaker *b)
{
    int64_t now = weft_now();
    if (now < b->last_now)
        now = b->last_now;
    b->last_now = now;
    return now;
}

static void window_reset(weft_breaker *b)
{
    for (int i = 0; i < NBUCKETS; i++)
        b->win[i] = (bucket){.idx = INT64_MIN};
}

/* Records one outcome at `now` and returns the window's totals. */
static void window_add(weft_breaker *b, int64_t now, bool failed,
                       int64_t *calls, int64_t *failures)
{
    int64_t k = now / b->width; /* now >= 0: last_now starts at 0 */
    bucket *cur = &b->win[k % NBUCKETS];
    if (cur->idx != k)
        *cur = (bucket){.idx = k};
    cur->calls++;
    cur->failures += failed;
    int64_t c = 0, f = 0;
    for (int i = 0; i < NBUCKETS; i++) {
        /* Buckets in (k - NBUCKETS, k]; an unused one is INT64_MIN. */
        if (b->win[i].idx > k - NBUCKETS) {
            c += b->win[i].calls;
            f += b->win[i].failures;
        }
    }
    *calls = c;
    *failures = f;
}

static void report_push(weft_breaker *b, weft_breaker_state from,
                        weft_breaker_state to)
{
    if (!b->on_change)
        return;
    if (b->rqlen == b->rqcap) {
        /* on_change is slower than the changes: grow (rare; allocating
         * under the spinlock is acceptable here). */
        unsigned cap = b->rqcap * 2;
        report *nq = cap > b->rqcap ? weft__malloc(cap * sizeof(*nq)) : NULL;
        if (!nq)
            return; /* dropped: see the top comment */
        for (unsigned i = 0; i < b->rqlen; i++)
            nq[i] = b->rq[(b->rqhead + i) % b->rqcap];
        if (b->rq != b->rq_inline)
            free(b->rq);
        b->rq = nq;
        b->rqcap = cap;
        b->rqhead = 0;
    }
    b->rq[(b->rqhead + b->rqlen) % b->rqcap] =
        (report){(unsigned char)from, (unsigned char)to};
    b->rqlen++;
}

/* Under the lock: moves to state `to` at `now`, starting a generation. */
static void transition(weft_breaker *b, weft_breaker_state to, int64_t now)
{
    weft_breaker_state from = b->state;
    b->state = to;
    b->gen++;
    b->stale_bare += b->cur_bare;
    b->cur_bare = 0;
    switch (to) {
    case WEFT_BREAKER_OPEN:
        b->opened++;
        b->open_until = weft__add_sat(now, b->cooldown);
        break;
    case WEFT_BREAKER_HALF_OPEN:
        b->trials = b->trials_ok = 0;
        break;
    case WEFT_BREAKER_CLOSED:
        b->consecutive = 0;
        window_reset(b);
        break;
    }
    report_push(b, from, to);
}

/* Releases the lock; if this thread is to make the queued reports, makes
 * them. Last use of b unless a report is made (see the top comment). */
static void unlock_and_report(weft_breaker *b)
{
    bool mine = b->rqlen > 0 && !b->reporting;
    if (mine)
        b->reporting = true;
    weft__lock_release(&b->lock);
    if (!mine)
        return;
    for (;;) {
        weft__lock_acquire(&b->lock);
        if (b->rqlen == 0) {
            b->reporting = false;
            weft__lock_release(&b->lock);
            return;
        }
        report r = b->rq[b->rqhead];
        b->rqhead = (b->rqhead + 1) % b->rqcap;
        b->rqlen--;
        weft__lock_release(&b->lock);
        b->on_change(b, (weft_breaker_state)r.from, (weft_breaker_state)r.to,
                     b->ctx);
    }
}

int weft_breaker_new(weft_breaker **out, const weft_breaker_opts *opts)
{
    if (!out)
        return -EINVAL;
    weft_breaker_opts o = {0};
    if (opts)
        o = *opts;
    if (o.failure_threshold == 0 && o.failure_rate == 0)
        o.failure_threshold = DEF_THRESHOLD; /* zeroed: the defaults */
    if (o.failure_threshold < 0 || o.failure_rate < 0 || o.failure_rate > 100 ||
        o.min_calls < 0 || o.window_ns < 0 || o.cooldown_ns < 0 ||
        o.half_open_calls < 0)
        return -EINVAL;
    weft_breaker *b = weft__calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    int64_t window = o.window_ns ? o.window_ns : DEF_WINDOW;
    b->threshold = o.failure_threshold;
    b->rate = o.failure_rate;
    b->min_calls = o.min_calls;
    b->trial_max = o.half_open_calls ? o.half_open_calls : 1;
    b->width = window / NBUCKETS + (window % NBUCKETS != 0);
    b->cooldown = o.cooldown_ns ? o.cooldown_ns : DEF_COOLDOWN;
    b->is_failure = o.is_failure;
    b->on_change = o.on_change;
    b->ctx = o.ctx;
    b->state = WEFT_BREAKER_CLOSED;
    window_reset(b);
    b->rq = b->rq_inline;
    b->rqcap = NREPORTS_INLINE;
    *out = b;
    return 0;
}

int weft_breaker_free(weft_breaker *b)
{
    if (!b)
        return -EINVAL;
    weft__lock_acquire(&b->lock);
    bool busy = b->out > 0 || b->reporting || b->rqlen > 0;
    weft__lock_release(&b->lock);
    if (busy)
        return -EBUSY;
    if (b->rq != b->rq_inline)
        free(b->rq);
    free(b);
    return 0;
}

/* Asks for a permit; on 0, *gen is the generation that granted it. */
static int acquire(weft_breaker *b, bool bare, uint64_t *gen)
{
    weft__lock_acquire(&b->lock);
    int64_t now = clock_now(b);
    if (b->state == WEFT_BREAKER_OPEN && now >= b->open_until)
        transition(b, WEFT_BREAKER_HALF_OPEN, now);
    int rc = 0;
    if (b->state == WEFT_BREAKER_OPEN ||
        (b->state == WEFT_BREAKER_HALF_OPEN && b->trials >= b->trial_max)) {
        b->rejected++;
        rc = -EHOSTDOWN;
    } else {
        if (b->state == WEFT_BREAKER_HALF_OPEN)
            b->trials++;
        b->calls++;
        b->out++;
        if (bare)
            b->cur_bare++;
        *gen = b->gen;
    }
    unlock_and_report(b);
    return rc;
}

/* Under the lock: an outcome of the current generation. */
static void outcome(weft_breaker *b, bool failed, int64_t now)
{
    switch (b->state) {
    case WEFT_BREAKER_CLOSED: {
        /* Saturating: with only the rate trigger on, nothing resets it. */
        b->consecutive =
            !failed ? 0 : b->consecutive + (b->consecutive < INT_MAX);
        bool trip = b->threshold && b->consecutive >= b->threshold;
        if (b->rate) {
            int64_t calls, failures;
            window_add(b, now, failed, &calls, &failures);
            if (calls >= b->min_calls &&
                failures * 100 >= (int64_t)b->rate * calls)
                trip = true;
        }
        if (trip)
            transition(b, WEFT_BREAKER_OPEN, now);
        break;
    }
    case WEFT_BREAKER_HALF_OPEN:
        if (failed)
            transition(b, WEFT_BREAKER_OPEN, now);
        else if (++b->trials_ok >= b->trial_max)
            transition(b, WEFT_BREAKER_CLOSED, now);
        break;
    case WEFT_BREAKER_OPEN:
        /* Not reached: permits of an open generation are never granted. */
        break;
    }
}

static bool is_failure(weft_breaker *b, int status)
{
    return b->is_failure ? b->is_failure(status, b->ctx) != 0 : status < 0;
}

/* Retires a permit: bare (matched by class) or tagged with gen. */
static int record(weft_breaker *b, bool bare, uint64_t gen, int status)
{
    bool failed = is_failure(b, status); /* user code: outside the lock */
    weft__lock_acquire(&b->lock);
    bool counts;
    if (bare) {
        if (b->stale_bare + b->cur_bare == 0) {
            weft__lock_release(&b->lock);
            return -EINVAL;
        }
        /* A failure is matched with an older permit, a success with a
         * current one, when there is one (see the top comment). */
        counts = failed ? b->stale_bare == 0 : b->cur_bare > 0;
        if (counts)
            b->cur_bare--;
        else
            b->stale_bare--;
    } else {
        counts = gen == b->gen;
    }
    b->out--;
    b->failures += failed;
    if (counts)
        outcome(b, failed, clock_now(b));
    unlock_and_report(b);
    return 0;
}

int weft_breaker_acquire(weft_breaker *b)
{
    if (!b)
        return -EINVAL;
    uint64_t gen;
    return acquire(b, true, &gen);
}

int weft_breaker_record(weft_breaker *b, int status)
{
    if (!b)
        return -EINVAL;
    return record(b, true, 0, status);
}

int weft_breaker_call(weft_breaker *b, weft_fn fn, void *arg)
{
    if (!b || !fn)
        return -EINVAL;
    uint64_t gen = 0;
    int rc = acquire(b, false, &gen);
    if (rc)
        return rc;
    int status = fn(arg);
    record(b, false, gen, status);
    return status;
}

int weft_breaker_stats_get(weft_breaker *b, weft_breaker_stats *out)
{
    if (!b || !out)
        return -EINVAL;
    weft__lock_acquire(&b->lock);
    int64_t now = clock_now(b);
    out->state = b->state;
    if (b->state == WEFT_BREAKER_OPEN && now >= b->open_until)
        out->state = WEFT_BREAKER_HALF_OPEN;
    out->calls = b->calls;
    out->failures = b->failures;
    out->rejected = b->rejected;
    out->opened = b->opened;
    out->open_until = b->open_until;
    weft__lock_release(&b->lock);
    return 0;
}
