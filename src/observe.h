/* SPDX-License-Identifier: MIT */
/*
 * The observe layer: seeing inside a running program (the task dump,
 * deadlock detection, statistics and lag, instrument hooks and the trace
 * exporter). Above every layer that does work, below the runtime, which
 * sets it up; the scheduler reports to it through hooks in the runtime
 * (weft_runtime.instr: weft_instrument's callbacks).
 */
#ifndef WEFT_OBSERVE_H
#define WEFT_OBSERVE_H

#include "actor.h"

/* ---- instruments and traces (trace.c) ----
 * The tracer is an instrument (weft_instrument) that records, per worker
 * and without a lock, each run of a task as a slice and each wake and
 * scope cancel as an instant, then passes the event on to the user's
 * instrument, if any; weft_run writes the file when every worker has
 * stopped. */

typedef struct weft__trace weft__trace;

/* The file to trace to: WEFT_TRACE if set (empty: none), else
 * cfg->trace_path; NULL: no trace. */
const char *weft__trace_path(const weft_config *cfg);
/* A tracer for rt (its nworkers and clock set), writing to path (created
 * now, so a bad path fails before anything runs), passing events on to
 * user (may be NULL). NULL and *err (a message on stderr) on failure. */
weft__trace *weft__trace_new(weft_runtime *rt, const char *path,
                             const weft_instrument *user, int *err);
/* The instrument to install in rt->instr. */
const weft_instrument *weft__trace_instrument(weft__trace *tr);
/* Writes the file (every worker has stopped) and closes it; 0 or the
 * write's error (a message on stderr). */
int weft__trace_write(weft__trace *tr);
/* Frees the tracer (NULL: nothing); the file too if not written. */
void weft__trace_free(weft__trace *tr);

#endif
