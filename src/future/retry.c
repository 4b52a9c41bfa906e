/* SPDX-License-Identifier: MIT */
/*
 * Retry with exponential backoff and jitter, and fallback.
 *
 * The delays follow the AWS Architecture Blog's "Exponential Backoff And
 * Jitter" (Marc Brooker, 2015), in integer nanoseconds. With
 *
 *   base = policy->base_ns, or 100 ms if 0
 *   cap  = policy->cap_ns, or INT64_MAX (no cap) if 0
 *   k    = the index of the delay being drawn: 0, 1, 2, ...
 *   exp  = min(cap, base * 2^k), computed without overflow: it is cap as
 *          soon as base > floor(cap / 2^k), and for every k >= 63
 *   U[a, b] = a uniform integer in a..b, both included
 *
 * the k-th delay is
 *
 *   NONE          exp
 *   FULL          U[0, exp]
 *   EQUAL         (exp - floor(exp/2)) + U[0, floor(exp/2)], that is exp/2
 *                 plus U[0, exp/2], rounded so that it lies in
 *                 [ceil(exp/2), exp]
 *   DECORRELATED  prev = min(cap, U[base, max(base, 3 * prev)]), with prev
 *                 starting at base and 3 * prev saturating at INT64_MAX;
 *                 the delay is the new prev (k plays no part)
 *
 * so no delay is ever above cap. The random numbers come from splitmix64
 * (Steele, Lea and Flood; the seeder of xoshiro) whose 64-bit state is the
 * backoff's `rng`, seeded with policy->seed. U[a, b] is Lemire's
 * multiply-shift with rejection ("Fast Random Integer Generation in an
 * Interval", 2019): a 64x64->128-bit product, redrawn in the rare case
 * that would be biased, so every value is exactly equally likely.
 *
 * Seed 0 draws a seed. In a runtime configured with a seed (weft_seed() !=
 * 0) it is the next number of the worker's generator (weft__rand), so a
 * seeded run stays a pure function of its seed. Otherwise it mixes that
 * (outside a task: nothing) with a per-process random value (getrandom,
 * else the clock, the pid and an address) and a process-wide counter: the
 * workers' generators start from the same constant in every process, and
 * replicas of one service retrying against one server must not draw the
 * same delays, which is what jitter is for.
 *
 * weft_retry_call, attempt a = 1, 2, ...: the attempt starts at weft_now()
 * (the first one's start is `start`) and calls fn. Without an
 * attempt_timeout_ns, fn is called directly. With one, fn runs under
 * weft_call_for, in a scope whose deadline is now + attempt_timeout_ns,
 * and a failure after that deadline passed reads -ETIMEDOUT; but if that
 * instant is at or after weft_deadline(), the task's own deadline comes
 * first and governs: the scope gets no deadline (so the two never race at
 * one instant, and a call cut short by the task's deadline keeps its own
 * status, -ECANCELED typically, as it would without the option). A status
 * >= 0 is returned; so is a status the policy says is not retryable
 * (default: weft_retry_transient, a fixed set of transient codes), and so
 * is the status of attempt max_attempts. Otherwise the next delay d is
 * drawn and the next attempt would start at now + d (saturating). If that
 * is after start + budget_ns (when there is a budget), or at or after
 * weft_deadline() (the scope is cancelled at that instant, so an attempt
 * starting then could only fail), the last status is returned at once,
 * with no sleep. Else on_retry(a, status, d, ctx) is called and the task
 * sleeps until now + d (the instant checked, however long on_retry took);
 * a sleep that is cancelled makes the call return -ECANCELED, and fn is
 * not called again.
 *
 * weft_call_fallback_for runs fn under weft_call_for; a result >= 0 is
 * returned; a negative one runs the fallback in the caller's scope and
 * returns its status, unless the caller's own scope is cancelled, in which
 * case it returns -ECANCELED and the fallback does not run.
 */
#include "sched/park.h"
#include "sched/task.h"

#include <limits.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_ATTEMPTS 3
#define DEFAULT_BASE (100 * WEFT_MSEC)

/* ---- random numbers ---- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* splitmix64's output function alone: a bijective mix of x. */
static uint64_t mix64(uint64_t x)
{
    uint64_t s = x - 0x9E3779B97F4A7C15ull;
    return splitmix64(&s);
}

/* A uniform integer in [lo, hi] (lo <= hi), without bias: Lemire's method.
 * hi - lo + 1 fits in 64 bits as both are non-negative int64s. */
static int64_t uniform(uint64_t *s, int64_t lo, int64_t hi)
{
    uint64_t range = (uint64_t)hi - (uint64_t)lo + 1;
    unsigned __int128 m = (unsigned __int128)splitmix64(s) * range;
    uint64_t low = (uint64_t)m;
    if (low < range) {
        uint64_t threshold = -range % range; /* 2^64 mod range */
        while (low < threshold) {
            m = (unsigned __int128)splitmix64(s) * range;
            low = (uint64_t)m;
        }
    }
    return lo + (int64_t)(uint64_t)(m >> 64);
}

/* A random value drawn once per process. */
static uint64_t process_entropy(void)
{
    static _Atomic uint64_t cached;
    uint64_t v = ld_acq(&cached);
    if (v)
        return v;
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = mix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
        v ^= mix64(((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&v);
    }
    if (!v)
        v = 1;
    uint64_t expected = 0;
    if (!cas_acq_rel(&cached, &expected, v))
        v = expected; /* another thread was first: everyone uses its value */
    return v;
}

static uint64_t draw_seed(void)
{
    weft_worker *w = weft__tl_worker;
    if (w && weft__rtpub(weft__wpub(w)->rt)->seed)
        return weft__rand(); /* reproducible under a seed */
    static _Atomic uint64_t counter;
    uint64_t x = process_entropy() ^ mix64(add_rlx(&counter, 1) + 1);
    if (w)
        x ^= weft__rand();
    return mix64(x);
}

/* ---- backoff ---- */

static const weft_retry default_policy = {0};

static bool policy_ok(const weft_retry *p)
{
    return p->max_attempts >= 0 && p->base_ns >= 0 && p->cap_ns >= 0 &&
           p->budget_ns >= 0 && p->attempt_timeout_ns >= 0 &&
           (int)p->jitter >= WEFT_JITTER_NONE &&
           (int)p->jitter <= WEFT_JITTER_DECORRELATED;
}

static int64_t policy_base(const weft_retry *p)
{
    return p->base_ns ? p->base_ns : DEFAULT_BASE;
}

static int64_t policy_cap(const weft_retry *p)
{
    return p->cap_ns ? p->cap_ns : INT64_MAX;
}

/* min(cap, base * 2^k) for base >= 1, cap >= 0, k >= 0, without overflow. */
static int64_t exp_delay(int64_t base, int64_t cap, int k)
{
    if (k >= 63 || base > (cap >> k))
        return cap;
    return base << k; /* <= cap, so no overflow */
}

int weft_backoff_init(weft_backoff *b, const weft_retry *policy)
{
    if (!b)
        return -EINVAL;
    if (!policy)
        policy = &default_policy;
    if (!policy_ok(policy))
        return -EINVAL;
    b->policy = policy;
    b->attempt = 0;
    b->prev = policy_base(policy);
    b->rng = policy->seed ? policy->seed : draw_seed();
    return 0;
}

int64_t weft_backoff_next(weft_backoff *b)
{
    if (!b || !b->policy || !policy_ok(b->policy) || b->attempt < 0)
        return -EINVAL;
    const weft_retry *p = b->policy;
    int64_t base = policy_base(p), cap = policy_cap(p);
    int64_t e = exp_delay(base, cap, b->attempt), d;
    switch (p->jitter) {
    case WEFT_JITTER_FULL:
        d = uniform(&b->rng, 0, e);
        break;
    case WEFT_JITTER_EQUAL: {
        int64_t half = e / 2;
        d = (e - half) + uniform(&b->rng, 0, half);
        break;
    }
    case WEFT_JITTER_DECORRELATED: {
        int64_t prev = b->prev > 0 ? b->prev : 0;
        int64_t hi = prev > INT64_MAX / 3 ? INT64_MAX : prev * 3;
        if (hi < base)
            hi = base;
        d = uniform(&b->rng, base, hi);
        if (d > cap)
            d = cap;
        break;
    }
    default:
        d = e;
        break;
    }
    b->prev = d;
    if (b->attempt < INT_MAX)
        b->attempt++;
    return d;
}

/* ---- retry ---- */

int weft_retry_transient(int status, void *ctx)
{
    WEFT_UNUSED(ctx);
    switch (status) {
    case -ETIMEDOUT:
    case -EAGAIN: /* = -EWOULDBLOCK */
    case -EINTR:
    case -ENOBUFS:
    case -ECONNRESET:
    case -ECONNREFUSED:
    case -ECONNABORTED:
    case -ENETRESET:
    case -EHOSTUNREACH:
    case -ENETUNREACH:
    case -ENETDOWN:
        return 1;
    default:
        return 0;
    }
}

static bool is_retryable(const weft_retry *p, int status)
{
    if (p->retryable)
        return p->retryable(status, p->ctx) != 0;
    return weft_retry_transient(status, NULL) != 0;
}

/* One attempt: fn(arg), in a scope with the attempt's deadline if there is
 * one that comes before the task's own (see the top). */
static int run_attempt(const weft_retry *p, weft_fn fn, void *arg)
{
    if (!p->attempt_timeout_ns)
        return fn(arg);
    int64_t timeout = p->attempt_timeout_ns;
    if (weft__add_sat(weft_now(), timeout) >= weft_deadline())
        timeout = INT64_MAX; /* a scope with no deadline of its own */
    return weft_call_for(fn, arg, timeout);
}

int weft_retry_call(const weft_retry *policy, weft_fn fn, void *arg)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !weft__wpub(w)->cur)
        return -EPERM;
    if (!fn)
        return -EINVAL;
    weft_backoff b;
    int rc = weft_backoff_init(&b, policy);
    if (rc)
        return rc;
    const weft_retry *p = b.policy;
    int max = p->max_attempts ? p->max_attempts : DEFAULT_ATTEMPTS;
    weft_time start = weft_now();
    weft_time last_start =
        p->budget_ns ? weft__add_sat(start, p->budget_ns) : WEFT_NEVER;
    for (int attempt = 1;; attempt++) {
        int status = run_attempt(p, fn, arg);
        if (status >= 0 || !is_retryable(p, status) || attempt >= max)
            return status;
        int64_t delay = weft_backoff_next(&b);
        weft_time next = weft__add_sat(weft_now(), delay);
        if (next > last_start || next >= weft_deadline())
            return status;
        if (p->on_retry)
            p->on_retry(attempt, status, delay, p->ctx);
        /* Until `next`, not for `delay` from now: time on_retry took
         * (it may block) must not push the attempt past what was checked
         * against the budget and the deadline. */
        if (weft_sleep_until(next) == -ECANCELED)
            return -ECANCELED;
    }
}

/* ---- fallback ---- */

int weft_call_fallback_for(weft_fn fn, void *arg, weft_fn fallback,
                           void *fallback_arg, int64_t timeout_ns)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !weft__wpub(w)->cur)
        return -EPERM;
    if (!fn || !fallback)
        return -EINVAL;
    int rc = weft_call_for(fn, arg, timeout_ns);
    if (rc >= 0)
        return rc;
    if (weft_cancelled())
        return -ECANCELED;
    return fallback(fallback_arg);
}
