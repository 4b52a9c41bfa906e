/* SPDX-License-Identifier: MIT */
/*
 * The runtime layer: weft_run and weft_main, signals, the shutdown
 * request and its drain (runtime.c). Above every other layer.
 */
#ifndef WEFT_RUNTIME_H
#define WEFT_RUNTIME_H

#include "sched/task.h"

/* The shutdown request (runtime.c's essay tells the protocol). Any thread
 * reads and requests; the root scope's lock orders deadline changes. */
typedef struct weft__shutdown {
    atomic_int requesting;    /* 1 once a request began; never cleared */
    atomic_int handed;        /* 1: a plain thread's request, on a virtual
                               * clock, for the keeper to make */
    atomic_int requested;     /* 1 once the request is visible: its
                               * deadline stored, the channel closed */
    _Atomic int64_t deadline; /* the drain deadline: the root scope is
                               * cancelled then (WEFT_NEVER: none) */
    bool task_deadline;       /* a task set it: the configured one is not used;
                               * under the root scope's lock, as the deadline's
                               * stores are */
    int64_t drain_ns;         /* weft_config.shutdown_drain_ns */
    weft_chan *chan;          /* closed by the request; the runtime's ref */
    /* The keeper: a task on worker 0 that cancels the root scope at the
     * deadline, through the timer wheel (so a virtual clock jumps to it).
     * Made, on any thread, by the first deadline that needs a timer. Its
     * home scope is outside the root's tree: it never keeps the runtime
     * alive, and one left parked at the end is freed by weft_run. */
    weft_task *keeper;
    weft_scope *keeper_home;
    atomic_int keeper_started; /* 1 once someone made it */
    atomic_int keeper_done;    /* 1 when it returns: its slot is recycled */
    weft_event poke;           /* set when the deadline moves */
    atomic_int notify_fd;      /* weft_main's signal thread's eventfd, -1: none;
                                * written when the deadline moves or the root
                                * scope is cancelled by the drain */
    weft_runtime *next_running; /* list of running runtimes (runtime.c) */
} weft__shutdown;

/* ---- the runtime layer's part of a runtime (weft_runtime.ext) ---- */

struct weft__runtime_rt {
    /* the shutdown request and its drain (allocated with the runtime) */
    weft__shutdown *shut;
};

_Static_assert(sizeof(struct weft__runtime_rt) <=
                   WEFT__RT_EXT - WEFT__RT_RUNTIME,
               "the runtime layer's part fits in weft_runtime.ext");

static inline struct weft__runtime_rt *weft__runtime_rt(weft_runtime *rt)
{
    return (struct weft__runtime_rt *)(void *)(weft__rtpub(rt)->ext +
                                               WEFT__RT_RUNTIME);
}

#endif
