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

#endif
