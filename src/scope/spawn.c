/* SPDX-License-Identifier: MIT */
/*
 * A task's life as the scope layer sees it: its spawn into a scope and
 * its exit from it.
 *
 * Above the scheduler: weft__spawn takes a slot (stack.c), prepares the
 * task, registers it as a child of its scope (scope.c; with a handle,
 * task.c's record too) and hands it to the scheduler
 * (weft__task_submit). The scheduler knows nothing of scopes: when a
 * task's function returns it calls the runtime's exit hook, which is
 * task_exit below (weft__scope_hooks, set by runtime_new).
 */
#include "sched/spawn.h"
#include "scope/struct.h"
#include "wait/seen.h"

/* A spawn with a handle failed (rc): the record goes back unused and the
 * caller's handle reads zero. */
WEFT_COLD static int spawn_failed(const weft_spawn_opts *o, weft__handle *h,
                                  int rc)
{
    if (o && o->handle) {
        if (h)
            weft__handle_abandon(h);
        *o->handle = (weft_task_handle){0};
    }
    return rc;
}

int weft__spawn(weft_scope *s, weft_fn fn, void *arg, const weft_spawn_opts *o,
                const char *file, int line)
{
    weft_worker *w = weft__tl_worker;
    if (!w || !weft__wpub(w)->cur)
        return spawn_failed(o, NULL, -EPERM);
    if (!fn)
        return spawn_failed(o, NULL, -EINVAL);
    /* The stack limit is weft_config's, which also keeps the slot size
     * arithmetic from wrapping (SIZE_MAX became a one-page stack). */
    if (o && (o->worker < 0 || o->movable < -1 || o->movable > 1 ||
              (unsigned)o->background > 1 || o->compact < -1 ||
              o->compact > 1 || (o->compact > 0 && o->movable > 0) ||
              o->worker > weft__rtpub(weft__wpub(w)->rt)->nworkers ||
              o->stack_size > WEFT__MAX_STACK))
        return spawn_failed(o, NULL, -EINVAL);
    /* the worker the task must start on */
    weft_worker *pin = o && o->worker
                           ? weft__rt_worker(weft__wpub(w)->rt, o->worker - 1)
                           : NULL;
    weft_task *self = weft__wpub(w)->cur;
    if (!s) {
        s = weft__task_scope_cur(self);
        /* A handle's scope, or an actor's, is not the task's to fill
         * (an actor run by a task with a handle: two of them). */
        while (WEFT_UNLIKELY(s->task_scope))
            s = s->parent;
    }
    /* Only a spawn that asks for a handle pays for one. */
    weft__handle *h = NULL;
    if (WEFT_UNLIKELY(o && o->handle) &&
        !(h = weft__handle_new(weft__wpub(w)->rt)))
        return spawn_failed(o, NULL, -ENOMEM);
    /* Compact: its own choice, else its scope's; such a task never moves
     * (its stack is given back and copied in by its worker). */
    bool compact = o && o->compact ? o->compact > 0 : s->compact;
    size_t stack_size = o ? o->stack_size : 0;
    weft_task *t = WEFT_UNLIKELY(compact)
                       ? weft__task_alloc_compact(w, stack_size)
                       : weft__task_alloc(w, stack_size);
    if (!t)
        return spawn_failed(o, h, -ENOMEM);
    weft__task_prepare(t, fn, arg, o, file, line);
    /* Its scope may make it movable (prepare took the spawn's own 1). */
    if (WEFT__CAN_MOVE && WEFT_UNLIKELY(s->movable) && !compact &&
        !(o && (o->movable < 0 || o->worker)))
        t->mobile = WEFT__MOBILE_TASK | WEFT__MOBILE_EVER;
    WEFT_ASSERT_MSG(!(t->flags & TASK_COMPACT) || !t->mobile,
                    "a compact task that may move");
    weft__scope_task_init(t, h);
    int idx = weft__scope_add_child(s, t, o && o->background);
    if (idx < 0) {
        weft__task_free(w, t);
        return spawn_failed(o, h, idx);
    }
    if (WEFT_UNLIKELY(h != NULL)) /* before the task can run anywhere */
        o->handle->id = weft__handle_id(h);
    if (WEFT_UNLIKELY(weft__wpub(w)->instr != NULL))
        weft__instr_spawn(weft__wpub(w)->instr, t, self);
    weft__task_submit(w, t, pin);
    return idx;
}

/* task_exit in every case. */
static __attribute__((noinline)) void task_exit_any(weft_task *t)
{
    weft__task_scope *ts = weft__scope_of_task(t);
    weft_scope *keep = WEFT_LIKELY(!ts->handle) ? ts->home : &ts->handle->scope;
    if (WEFT_UNLIKELY(weft__task_scope_cur(t) != keep)) {
        weft__scope_join_above(t, keep);
        /* It may have parked, and run again: the watchdog may be reading
         * it anew, before its end is known. */
        weft__watch_leave(t->worker, t);
    }
    if (WEFT_UNLIKELY(ts->handle != NULL))
        weft__handle_exit(t);
    /* Every scope it opened is closed: it leaves its home as it came. */
    WEFT_ASSERT_MSG(weft__task_scope_cur(t) == ts->home,
                    "a task left with a scope of its own open");
    weft__scope_child_done(ts->home, t);
}

/* t's function returned: the scopes it left open (with a handle, those
 * inside the handle's scope, which handle_exit then closes, waking the
 * joiners), then its home scope's books (its status, the joiner). The
 * usual case (no handle, no scope left open) calls last, so it saves no
 * register. */
static void task_exit(weft_task *t)
{
    weft__task_scope *ts = weft__scope_of_task(t);
    if (WEFT_UNLIKELY(ts->handle != NULL) ||
        WEFT_UNLIKELY(weft__task_scope_cur(t) != ts->home)) {
        task_exit_any(t);
        return;
    }
    weft__scope_child_done(ts->home, t);
}

const weft__task_hooks weft__scope_hooks = {.exit = task_exit,
                                            .wait_of = weft__wait_of};

/* ---- public: spawning ---- */

int weft_spawn_at(weft_scope *s, weft_fn fn, void *arg,
                  const weft_spawn_opts *opts, const char *file, int line)
{
    return weft__spawn(s, fn, arg, opts, file, line);
}
