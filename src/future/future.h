/* SPDX-License-Identifier: MIT */
/*
 * The futures and patterns layer: futures and their combinators
 * (future.c), parallel map and pipelines (parallel.c), retry, circuit
 * breaker, rate limiter, bulkhead.
 */
#ifndef WEFT_FUTURE_H
#define WEFT_FUTURE_H

#include "util/util.h"

/* Select's cases (wait/many.h). */
typedef struct weft__arm weft__arm;
typedef struct weft__chain weft__chain;

/* ---- futures ---- */

/* The wait kinds of this layer (wait/record.h): a future or a combinator of
 * futures (future.c), the bulkhead (bulkhead.c), the rate limiter
 * (limiter.c, a sleep: its deadline is recorded). */
extern const struct weft__wait_kind weft__wk_future, weft__wk_bulkhead,
    weft__wk_limiter;

/* For the tests: how many waiter nodes are on f's list now. */
int weft__future_nwaiters(const weft_future *f);

/* select's future case (wait/many.h, "select's cases"): check: future NULL 1,
 * not a live future -EINVAL; try: settled: rc its result (the value
 * copied to elem, if elem is not NULL and the future has one), else
 * -EAGAIN with a->q its waiter queue; won: the same result, read without
 * the lock (it is final). */
int weft__future_case_check(const weft_case *c);
weft__lock *weft__future_case_lock(weft_case *c);
int weft__future_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__future_case_won(weft_case *c, int code);

/* select's LIMITER case (limiter.c, at its end): check: 1 for NULL,
 * -EINVAL for n out of range; try: takes the tokens if they are due now,
 * as weft_limiter_try_acquire (c->rc = 0), else -EAGAIN with no queue; recheck:
 * the instant they would be due. */
int weft__limiter_case_check(const weft_case *c);
weft__lock *weft__limiter_case_lock(weft_case *c);
int weft__limiter_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__limiter_case_won(weft_case *c, int code);
int64_t weft__limiter_case_recheck(const weft_case *c);

/* select's BULKHEAD case (bulkhead.c, at its end): check: 1 for NULL;
 * try: a free turn and nobody waiting: held (c->rc = 0); the queue full:
 * c->rc = -EBUSY; else counted as waiting, -EAGAIN with a->q the queue;
 * won: c->rc = code (0: a turn was handed over); lost: no longer
 * counted as waiting. */
int weft__bulkhead_case_check(const weft_case *c);
weft__lock *weft__bulkhead_case_lock(weft_case *c);
int weft__bulkhead_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__bulkhead_case_won(weft_case *c, int code);
void weft__bulkhead_case_lost(weft_case *c);

#endif
