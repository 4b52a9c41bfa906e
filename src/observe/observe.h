/* SPDX-License-Identifier: MIT */
/*
 * The observe layer: seeing inside a running program (the task dump,
 * deadlock detection, statistics and lag, instrument hooks and the trace
 * exporter). Above every layer that does work, below the runtime, which
 * sets it up; the scheduler reports to it through hooks in the runtime
 * (weft_runtime.instr: weft_instrument's callbacks). Its stack walks are
 * in observe/where.h.
 */
#ifndef WEFT_OBSERVE_H
#define WEFT_OBSERVE_H

#include "sched/task.h"

/* ---- the observe layer's part of a runtime (weft_runtime.ext) ---- */

struct weft__observe_rt {
    /* deadlock.c: the mode and what was found */
    struct weft__observe *observe;
    /* stats.c: the watchdog and slice monitor (the thread and what it
     * measured), or NULL: set before the workers start and freed with
     * the runtime */
    struct weft__watchdog *watchdog;
    struct weft__trace *trace; /* trace.c: the tracer, or NULL */
};

_Static_assert(sizeof(struct weft__observe_rt) <=
                   WEFT__RT_RUNTIME - WEFT__RT_OBSERVE,
               "the observe layer's part fits in weft_runtime.ext");

static inline struct weft__observe_rt *weft__observe_rt(weft_runtime *rt)
{
    return (struct weft__observe_rt *)(void *)(weft__rtpub(rt)->ext +
                                               WEFT__RT_OBSERVE);
}

/* ---- dump.c: the task dump ---- */

/* Writes a dump of rt to fd: every live task of its root scope's tree
 * (id, name, spawn site, state, what it waits on and since when, with a
 * mutex's holder, a descriptor's number and direction, a sleep's
 * deadline), where it blocks (weft__task_stack), under its scopes (policy,
 * owner, deadline, cancel state). flags: 0 for text, WEFT_DUMP_JSON for
 * JSON lines, WEFT_DUMP_STACKS for each parked task's whole stack.
 *
 * Never stops the world: it walks the scope tree taking each scope's lock
 * (with its ancestors', parent before child, as a cancel does) only while
 * it formats into a fixed buffer, and writes with no lock held, so its
 * memory does not grow with the number of tasks. Tasks that start or end
 * while it runs may be left out; every task that stays is shown once.
 * Dumps are taken one at a time (a process-wide mutex).
 *
 * Any thread, rt running: a task of rt (the dump then runs on a thread
 * made for it: walking stacks needs more room than a task has), a thread
 * outside it, or a worker of rt in its scheduler loop that holds no scope
 * lock (the deadlock detector, with the other workers asleep). Blocks the
 * calling thread
 * while it writes. Returns 0, -EINVAL (unknown flags), -ENOMEM, or
 * write's error (-EBADF, -EIO, -EPIPE, ...). */
int weft__dump_write(weft_runtime *rt, int fd, unsigned flags);

/* The dump's buffer, in bytes (64 KiB; at least one task's room, 24.25
 * KiB, whatever it is set to). Tests make it small, so that a dump lets
 * go of its locks and comes back after every few lines. */
extern size_t weft__dump_buf_size;

/* ---- deadlocks (deadlock.c) ---- */

/* Sets up detection for rt as cfg asks (nothing for WEFT_DEADLOCK_IGNORE):
 * the scheduler's all-idle hook and the mutex layer's cycle hook. Before
 * any task runs. Returns 0 or -ENOMEM. */
int weft__deadlock_init(weft_runtime *rt, const weft_config *cfg);
/* Objects a plain thread or a signal may end a wait on, besides futures
 * (the shutdown request's channel): such waits are never deadlocked. */
void weft__deadlock_outside(weft_runtime *rt, const void *obj);
/* True once a deadlock of every task was found (weft_run then returns
 * -EDEADLK). */
bool weft__deadlock_found(weft_runtime *rt);
void weft__deadlock_fini(weft_runtime *rt);

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

/* ---- statistics, lag and the watchdog (stats.c) ---- */

/* weft_stats_get's work for rt (its arguments checked): any thread, while
 * rt runs (its workers and blocking pool exist). */
void weft__stats_read(weft_runtime *rt, weft_stats *out,
                      weft_worker_stats *workers, int n);

struct weft__watchdog;
/* rt's slice monitor and watchdog as c asks (c->watchdog_ns,
 * c->slow_slice_ns; both off: none, weft__observe_rt(rt)->watchdog NULL, and so
 * on out of memory, said on stderr), before rt's workers start. */
void weft__watchdog_init(weft_runtime *rt, const weft_config *c);
/* Starts its thread, after rt's workers have started (if it cannot be
 * made, the runtime runs without it, and says so on stderr); stops it
 * (joins the thread) when the workers are done; frees it with rt. On
 * weft_run's thread. All do nothing when rt has none. */
void weft__watchdog_start(weft_runtime *rt);
void weft__watchdog_stop(weft_runtime *rt);
void weft__watchdog_free(weft_runtime *rt);
/* The checks of the config: 0 or -EINVAL. */
int weft__watchdog_check(const weft_config *c);
/* rt's slow slices for the task dump: the count (in all and per worker)
 * and the tasks with the longest slices, as text lines, or with json
 * one line {"type":"slices","threshold_ns":N,"slow":N,"workers":[N,...],
 * "top":[{"id":"W.N","name":..,"file":..,"line":N,"worker":N,"ns":N,
 * "slow":N},...]}. Into buf (cap bytes, NUL-terminated, cut if short:
 * 4 KiB holds it with 64 workers). Returns the length written; 0 (and
 * "") when rt does not measure slices. Any thread while rt runs; takes
 * the monitor's data lock for a moment. */
size_t weft__slices_format(weft_runtime *rt, bool json, char *buf, size_t cap);

#endif
