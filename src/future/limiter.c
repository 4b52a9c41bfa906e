/* SPDX-License-Identifier: MIT */
/*
 * The rate limiter: a token bucket, kept as GCRA (the generic cell rate
 * algorithm) in exact integer arithmetic.
 *
 * The rate is T tokens every P ns (T = tokens, P = per_ns), the bucket
 * holds at most B (burst). Time is kept scaled by T ("scaled ns", in a
 * signed 128-bit integer), in which one token is worth exactly P: no rate
 * is ever rounded, so nothing drifts however long the limiter runs.
 *
 * The whole state is one scaled instant Z, the instant at which the bucket
 * is (or was, or will be) empty: at time t it holds (t*T - Z) / P tokens
 * (a rational number), at most B. Z > t*T means tokens are owed to
 * reservations that have not come due yet (the bucket is negative, as in
 * Go's x/time/rate Reservation).
 *
 *   reserve n at t:  Z := max(Z, t*T - B*P) + n*P
 *                    (the max keeps at most B tokens; before the first
 *                    reservation Z is minus infinity: full at the start)
 *   its tokens are due at  d = ceil(Z / T)   (the new Z)
 *
 * So after a full bucket is emptied at t0 (t0*T - B*P + B*P = t0*T), token
 * k (k = 1, 2, ...) after it is due at exactly t0 + ceil(k*P / T): with 3
 * tokens per second, at 333333334, 666666667, 1000000000, 1333333334 ns...
 *
 * weft_limiter_acquire(n, deadline) reserves under the lock: if d <= now
 * the tokens are taken at once; if d > deadline it returns -ETIMEDOUT at
 * once and Z is not changed (nothing taken); else it keeps the reservation
 * and sleeps until exactly d (weft__wait_sleep, which records the
 * limiter as what the task waits on). Reservations are made in
 * arrival order and each one's d is at or after the one before, so takers
 * are served in arrival order (FIFO) with no queue, no polling and no
 * background task. weft_limiter_try_acquire takes n tokens only if d <= now (so
 * it never jumps ahead of sleeping reservations).
 *
 * A cancelled wait gives its tokens back as Go's Reservation.CancelAt
 * does: the reservations made after it have been promised instants that
 * count on its tokens, so only the tokens that later reservations did not
 * count on come back. With Zr the Z this reservation left and Z the
 * current one, Z - Zr (scaled) was reserved after it (clamped at 0: the
 * cancel of an earlier reservation may have pulled Z below Zr), and
 *
 *   restore = n*P - max(0, Z - Zr);   if restore > 0:  Z := Z - restore
 *
 * (Go then also caps the bucket at B; here the max() of the next
 * reservation does that.) A restore never exceeds n*P, so Z stays at or
 * above the instant the live reservations alone would need: the bound
 * "at most B + T*elapsed/P tokens granted" holds through any cancels.
 *
 * The lock is a weft__lock (a spinlock held for a few arithmetic steps,
 * never across a sleep); `sleepers` counts tasks sleeping on a
 * reservation, for weft_limiter_free's -EBUSY.
 */
#include "future/future.h"
#include "util/fault.h"
#include "wait/many.h"
#include "wait/wait.h"

#include <stdlib.h>

const weft__wait_kind weft__wk_limiter = {WEFT_WAIT_LIMITER, "rate limiter"};

#ifndef __SIZEOF_INT128__
#error "weft's limiter needs a 128-bit integer type"
#endif

typedef __int128 i128;

struct weft_limiter {
    weft__lock lock;
    int64_t tokens, per_ns, burst; /* T, P, B */
    bool started;                  /* Z is set (else: minus infinity) */
    i128 z;                        /* empty instant, in ns * T */
    int sleepers;                  /* tasks sleeping in acquire */
};

/* ceil(a / b) for b > 0. */
static i128 div_ceil(i128 a, int64_t b)
{
    i128 q = a / b; /* truncates toward zero: the ceiling when a < 0 */
    if (a % b > 0)
        q++;
    return q;
}

int weft_limiter_new(weft_limiter **out, int64_t tokens, int64_t per_ns,
                     int64_t burst)
{
    if (!out || tokens < 1 || per_ns < 1 || burst < 1)
        return -EINVAL;
    weft_limiter *l = weft__calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->tokens = tokens;
    l->per_ns = per_ns;
    l->burst = burst;
    *out = l;
    return 0;
}

int weft_limiter_free(weft_limiter *l)
{
    if (!l)
        return -EINVAL;
    weft__lock_acquire(&l->lock);
    bool busy = l->sleepers > 0;
    weft__lock_release(&l->lock);
    if (busy)
        return -EBUSY;
    free(l);
    return 0;
}

/* Under the lock: the Z that reserving n tokens at `now` would leave.
 * Every term is below 2^126 in magnitude (products of two int64s, Z below
 * (2^63) * T since every kept reservation is due before WEFT_NEVER), so
 * the sum cannot overflow. */
static i128 reserve_z(const weft_limiter *l, weft_time now, int64_t n)
{
    i128 full = (i128)now * l->tokens - (i128)l->burst * l->per_ns;
    i128 z = l->started && l->z > full ? l->z : full;
    return z + (i128)n * l->per_ns;
}

/* Under the lock: keeps the reservation that leaves z. */
static void reserve(weft_limiter *l, i128 z)
{
    l->z = z;
    l->started = true;
}

/* Under the lock: takes n tokens if they are due at now (true). Else
 * false, with *z the Z that reserving them would leave and *due the
 * instant they would be due. The one test of try_acquire, acquire and
 * select's case. */
static bool take_if_due(weft_limiter *l, weft_time now, int64_t n, i128 *z,
                        i128 *due)
{
    *z = reserve_z(l, now, n);
    *due = div_ceil(*z, l->tokens);
    if (*due > now)
        return false;
    reserve(l, *z);
    return true;
}

int weft_limiter_try_acquire(weft_limiter *l, int64_t n)
{
    if (!l || n < 1 || n > l->burst)
        return -EINVAL;
    weft__lock_acquire(&l->lock);
    i128 z, due;
    int rc = take_if_due(l, weft_now(), n, &z, &due) ? 0 : -EAGAIN;
    weft__lock_release(&l->lock);
    return rc;
}

int weft_limiter_acquire(weft_limiter *l, int64_t n, weft_time deadline)
{
    if (!l || n < 1 || n > l->burst)
        return -EINVAL;
    int rc = weft__checkpoint();
    if (rc)
        return rc;
    /* The scope's deadline cancels the task at that instant: tokens due
     * then or later could only be waited for in vain. */
    weft_time scoped = weft_deadline();
    weft__lock_acquire(&l->lock);
    i128 zr, due;
    if (take_if_due(l, weft_now(), n, &zr, &due)) {
        weft__lock_release(&l->lock);
        return 0;
    }
    if (due > deadline || due >= scoped) {
        weft__lock_release(&l->lock);
        return -ETIMEDOUT;
    }
    reserve(l, zr);
    l->sleepers++;
    weft__lock_release(&l->lock);

    /* Nothing wakes it but the instant its tokens are due or a cancel. */
    rc = weft__wait_sleep(&(weft__wait_spec){
        .kind = &weft__wk_limiter, .obj = l, .deadline = (int64_t)due});
    if (rc == -ETIMEDOUT)
        rc = 0; /* due: the tokens are ours */

    weft__lock_acquire(&l->lock);
    l->sleepers--;
    if (rc != 0) {
        /* Cancelled: give back what later reservations did not count on
         * (Go's Reservation.CancelAt; see the top of the file). */
        i128 later = l->z > zr ? l->z - zr : 0;
        i128 restore = (i128)n * l->per_ns - later;
        if (restore > 0)
            l->z -= restore;
    }
    weft__lock_release(&l->lock);
    return rc;
}

/* ---- select's cases ----
 * LIMITER (wait/many.h, "select's cases"): no queue and no reservation. try
 * takes the tokens as weft_limiter_try_acquire does (due now, so never ahead of
 * a sleeping reservation); if they are not due, recheck gives the instant they
 * would be, at which select looks again (a reservation made meanwhile pushes it
 * later). A select that another case won took nothing, and left nothing
 * reserved. */

static int64_t case_n(const weft_case *c)
{
    return c->n == 0 ? 1 : c->n;
}

int weft__limiter_case_check(const weft_case *c)
{
    if (!c->limiter)
        return 1;
    int64_t n = case_n(c);
    return n < 1 || n > c->limiter->burst ? -EINVAL : 0;
}

weft__lock *weft__limiter_case_lock(weft_case *c)
{
    return &c->limiter->lock;
}

int weft__limiter_case_try(weft_case *c, weft__arm *a, weft__chain *woken)
{
    WEFT_UNUSED(woken);
    i128 z, due;
    if (take_if_due(c->limiter, weft_now(), case_n(c), &z, &due)) {
        c->rc = 0;
        return 0;
    }
    a->q = NULL; /* nothing wakes it: recheck's instant does */
    return -EAGAIN;
}

void weft__limiter_case_won(weft_case *c, int code)
{
    c->rc = code; /* never claimed: it has no queue */
}

int64_t weft__limiter_case_recheck(const weft_case *c)
{
    weft_limiter *l = c->limiter;
    i128 due = div_ceil(reserve_z(l, weft_now(), case_n(c)), l->tokens);
    return due > WEFT_NEVER ? WEFT_NEVER : (int64_t)due;
}
