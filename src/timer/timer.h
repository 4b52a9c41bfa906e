/* SPDX-License-Identifier: MIT */
/*
 * The timer layer: a per-worker hierarchical timing wheel (timer.c). The
 * types, for the headers that embed a timer or a wheel, are in
 * timer/timer_type.h.
 */
#ifndef WEFT_TIMER_H
#define WEFT_TIMER_H

#include "timer/timer_type.h"

void weft__wheel_init(weft__wheel *wh, int64_t now);
void weft__wheel_arm(weft__wheel *wh, weft__timer *t, int64_t when);
void weft__wheel_disarm(weft__wheel *wh, weft__timer *t);
/* Fires every timer due at or before now; returns how many fired. */
size_t weft__wheel_advance(weft__wheel *wh, int64_t now);
/* Earliest time at which a timer may be due (a lower bound, exact at level
 * 0), or WEFT_NEVER if none is armed. */
int64_t weft__wheel_next(const weft__wheel *wh);
/* Exact earliest deadline, or WEFT_NEVER: O(1) plus a scan of one slot. */
int64_t weft__wheel_next_exact(const weft__wheel *wh);

static inline bool weft__timer_armed(const weft__timer *t)
{
    return t->next != NULL;
}

#endif
