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

/* ---- where.c: where a parked task waits, and its stack ---- */

#define WEFT__FRAMES_MAX 64 /* frames of a stack kept, inline calls too */

/* One frame of a task's stack. The strings are the symbolizer's (valid
 * for the process's life, as long as the library they name stays
 * loaded), or NULL when unknown. */
typedef struct weft__frame {
    uintptr_t pc;       /* the return address into this frame */
    const char *func;   /* the function, or NULL */
    const char *file;   /* its source file (as compiled), or NULL */
    int line;           /* 0: unknown */
    bool inlined;       /* a call inlined into the frame below it */
    const char *module; /* without line info: the object (its base name) */
    uintptr_t offset;   /* pc's offset in module (addr2line -e module) */
} weft__frame;

typedef struct weft__stack {
    weft__frame f[WEFT__FRAMES_MAX]; /* innermost first */
    int n;
    int from; /* the public weft function that parked, or -1 */
    int at;   /* the frame that called it: the blocking line, or -1 */
} weft__stack;

/* Walks t's stack from its saved context (t parked, and kept alive by the
 * caller: its home scope's lock held), reading only inside the stack, and
 * symbolizes it. Returns the number of frames (0: none, e.g. the
 * ucontext build). Any thread; may take milliseconds the first time (the
 * symbolizer loads the program's debug information). */
int weft__task_stack(const weft_task *t, weft__stack *st);
/* The return addresses of the calling thread's stack (a running task's),
 * its caller's first, into pcs[0 .. max): how many (0 on a task stack
 * with too little room). Cheap: no symbols. */
int weft__self_pcs(uintptr_t *pcs, int max);
/* Readies weft__self_pcs (its first call loads a library, which takes
 * more stack than a task may have left): on a thread's own stack. */
void weft__where_warm(void);
/* Symbolizes return addresses (from weft__self_pcs) as weft__task_stack
 * does a task's. */
int weft__pcs_stack(const uintptr_t *pcs, int n, weft__stack *st);
/* Runs fn(arg) on a stack with room for the walks: the calling thread's
 * own, or, on a task's stack, a thread's made for the call (joined before
 * it returns). */
void weft__on_big_stack(void (*fn)(void *), void *arg);
/* Loads the symbolizer, so that no lock need be held meanwhile. */
void weft__where_prepare(void);
/* "func (file:line)", "func (module+0xoff)" or "0xpc": snprintf's return. */
int weft__frame_format(const weft__frame *f, char *buf, size_t n);
/* t's blocking line, as weft__frame_format writes it, in buf (n bytes):
 * 0, -EBUSY (t is running: no saved context to walk), -ENOENT (no public
 * weft call on its stack, or no symbols). For the watchdog and others:
 * any thread (from a task, the walk runs on a thread made for it); the
 * caller keeps t alive (its home scope's lock, or t is known parked for
 * good). */
int weft__where_format(const weft_task *t, char *buf, size_t n);
/* The function at the entry point pc (an actor's behaviour, say), and
 * where it is defined: 0 or -ENOENT. */
int weft__where_pc(uintptr_t pc, weft__frame *f);
/* True if built with a symbolizer that gives file and line (libdw). */
bool weft__where_lines(void);

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
