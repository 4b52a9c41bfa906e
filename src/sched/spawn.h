/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's steps of a spawn (a slot, its preparation, its
 * submission) and of a task's end, and the instrument hooks: for the
 * scope layer's spawn and the runtime's own tasks. And the hooks through
 * which the scheduler calls the layer above (weft__task_hooks).
 */
#ifndef WEFT_SCHED_SPAWN_H
#define WEFT_SCHED_SPAWN_H

#include "sched/task.h"

/* ---- slots (stack.c) ---- */

/* A fresh task in a slot with a stack of stack_size (0: default). */
weft_task *weft__task_alloc(weft_worker *w, size_t stack_size);
void weft__task_free(weft_worker *w, weft_task *t);
/* A fresh compact task (task.h, weft__compact): its struct on the heap,
 * its stack a slot of stack_size (0: default) borrowed from the pool.
 * Freed by weft__task_free. A plain task where stacks cannot be copied
 * (the ucontext build). */
weft_task *weft__task_alloc_compact(weft_worker *w, size_t stack_size);

/* ---- spawn (sched.c) ---- */

/* Resets a slot's task for a new life running fn(arg). */
void weft__task_prepare(weft_task *t, weft_fn fn, void *arg,
                        const weft_spawn_opts *o, const char *file, int line);
/* t, the running task, is finishing (its function has returned): the
 * watchdog (stats.c) stops reading its name and spawn site, and one read
 * in progress is waited for. Called by the scheduler before the layers
 * above finish t, and by them again after a park there (joining the
 * scopes t left open), before t's end is known. On t's worker. */
void weft__watch_leave(weft_worker *w, weft_task *t);
/* A task just made on w's thread (prepared, registered in its scope)
 * becomes runnable: on `pin` if not NULL (nobody steals it), else in w's
 * deque, where idle workers may steal it (one asleep is woken). A
 * spawner that has spawned a budget's worth since it last ran yields. */
void weft__task_submit(weft_worker *w, weft_task *t, weft_worker *pin);

/* ---- instrument hooks (weft_instrument) ----
 * Each hook point reads w->instr once (NULL: nothing more) and calls the
 * slow part below, which fills a weft_task_info and calls the callback. */

static inline void weft__task_info(const weft_task *t, weft_task_info *i)
{
    i->id = t->id;
    i->name = t->name;
    i->file = t->file;
    i->line = t->line;
    i->worker = (t->flags & TASK_STARTED) ? weft__wpub(t->worker)->id : -1;
}
/* The calls, cold (sched.c): spawn (on the spawner's thread; parent may
 * be NULL), park (t stops running: what it waits on, or yield), and
 * scope_cancel (s cancelled for reason by the running task, if any). */
void weft__instr_spawn(const weft_instrument *in, weft_task *t,
                       weft_task *parent);
void weft__instr_park(const weft_instrument *in, weft_task *t, int kind,
                      const void *obj);
void weft__instr_scope_cancel(const weft_instrument *in, weft_scope *s,
                              int reason, weft_task *by);

/* The layer above the scheduler, as the scheduler sees it. */
typedef struct weft__task_hooks {
    /* t's function has returned (t->status holds its result): the layers
     * above finish it (the scopes it left open, its handle, its home
     * scope's books). On t, which the scheduler then switches away from
     * for good and recycles. */
    void (*exit)(weft_task *t);
    /* What t, parked (or parking), waits on: the wait layer's kind
     * (weft__wait_kind), and the object in *obj. For the instrument's park
     * callback: cold. */
    int (*wait_of)(const weft_task *t, const void **obj);
} weft__task_hooks;

#endif
