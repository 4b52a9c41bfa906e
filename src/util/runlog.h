/* SPDX-License-Identifier: MIT */
/*
 * The run log (weft.h, section 16): what a seeded run decided from its
 * seed, event by event (each task the scheduler resumed, at which virtual
 * instant; each fault a plan made), with a hash chained over the events,
 * for the swarm's determinism check. Off unless a check records a run:
 * then the sites pay a relaxed load and a branch (the resume site sits in
 * the seeded pick alone, so an unseeded run pays nothing at all).
 *
 * Process-wide, as a fault plan is: one log records at a time.
 */
#ifndef WEFT_UTIL_RUNLOG_H
#define WEFT_UTIL_RUNLOG_H

#include "util/util.h"

/* Events kept in memory per log; past them only the count and the hash
 * go on. */
#define WEFT__RUNLOG_KEEP ((size_t)1 << 22)

typedef struct weft__runlog {
    weft_swarm_event *ev; /* the first WEFT__RUNLOG_KEEP events */
    size_t n, cap;        /* events kept, room */
    uint64_t count;       /* events logged */
    uint64_t hash;        /* the chain's hash after the last event */
    bool nomem;           /* an event could not be kept */
} weft__runlog;

extern atomic_int weft__runlog_on;

/* Logs an event (kind, a, b) in the recording log. Any thread. */
void weft__runlog_add(weft_swarm_event_kind kind, uint64_t a, uint64_t b);

/* Starts recording into log (emptied first): 0, or -EBUSY if another
 * log records. */
int weft__runlog_start(weft__runlog *log);
/* Stops recording. */
void weft__runlog_stop(void);
/* Frees log's events. */
void weft__runlog_free(weft__runlog *log);

/* Schedule exploration (weft_swarm_profile.explore), PCT's random
 * priorities with change points: while shift is non-zero, the seeded pick
 * runs the ready task of highest priority (weft__pct_priority of its id),
 * and at each pick, with a chance of 1 in 2^shift (drawn from the
 * worker's seeded stream), every priority is drawn again. Process-wide,
 * as the log is: set by the swarm around one run. */
extern atomic_uint weft__pct_shift;

/* Sets the shift (0: off) and starts the priorities afresh, drawn from
 * seed. */
void weft__pct_set(unsigned shift, uint64_t seed);
/* A change point: every task's priority is drawn again. */
void weft__pct_change(void);
/* The priority of the task whose id is id (0 for the tasks made outside a
 * worker), in the run's current draw. */
uint64_t weft__pct_priority(uint64_t id);

/* The simulated network's seeded fault classes switched off for the next
 * runs (bit 1u << weft_sim_fault): the swarm's shrinking sets it around
 * one run, the simulation reads it when a run starts. Process-wide, as
 * the log is. */
extern atomic_uint weft__sim_off;

#endif
