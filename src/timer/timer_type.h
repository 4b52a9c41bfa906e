/* SPDX-License-Identifier: MIT */
/*
 * A timer and a timing wheel, as their owners hold them (timer.h arms
 * and fires them): the types alone, for the headers that embed one.
 */
#ifndef WEFT_TIMER_TYPE_H
#define WEFT_TIMER_TYPE_H

#include "util/util.h"

/* ---- timers ---- */

typedef struct weft__timer weft__timer;
typedef void (*weft__timer_fn)(weft__timer *t);

/* A timer in a worker's wheel. Embedded in its owner (a task, a scope);
 * armed and disarmed only on the wheel's worker. */
struct weft__timer {
    weft__timer *next, *prev; /* slot list; both NULL when not armed */
    int64_t when;             /* absolute deadline, ns of the runtime clock */
    weft__timer_fn fn;        /* called on the wheel's worker when due */
    uint16_t level, slot;     /* where it is filed, for disarm */
};

#define WEFT_WHEEL_LEVELS 11 /* 6 bits a level: 66 bits cover int64 time */
#define WEFT_WHEEL_SLOTS 64

/* Hierarchical timing wheel with 1 ns resolution at level 0 (as Tokio's and
 * the Linux kernel's, but exact): a timer due at `when` is filed at the
 * level of the highest 6-bit group in which `when` and `elapsed` differ,
 * so arm and disarm are O(1); advancing moves a higher-level slot's timers
 * down (at most 10 times in a timer's life) and fires level-0 slots, each
 * of which holds timers of one exact deadline, in the order armed.
 * Invariant: every armed timer has when >= elapsed, and sits at a slot at or
 * after elapsed's slot at its level. */
typedef struct weft__wheel {
    int64_t elapsed;     /* time the wheel has reached */
    int64_t now;         /* the time of the latest advance: while timers
                          * fire, how late each is (the lag histogram) */
    atomic_size_t count; /* armed timers: the wheel's worker writes it
                          * (relaxed), weft_stats_get reads it */
    uint64_t occupied[WEFT_WHEEL_LEVELS]; /* bit s: slot s not empty */
    weft__timer slots[WEFT_WHEEL_LEVELS][WEFT_WHEEL_SLOTS]; /* sentinels */
} weft__wheel;

#endif
