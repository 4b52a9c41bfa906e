/* SPDX-License-Identifier: MIT */
/*
 * The wait layer's part of compact tasks (weft_spawn_opts.compact): the
 * waits during which a compact task's stack may be given back.
 *
 * A parked task's stack is normally touched by others: its waiter is on
 * it (queues link to it, wakers claim it and write it), and a channel's
 * waker copies the value straight into, or out of, the waiting task's
 * stack (w->elem). A compact task whose stack is copied out and given
 * back while parked (sched/stack.c) would lose those writes, or hand out
 * zeros. So a compact task parks, in a wait that is flagged
 * WEFT__WAIT_COMPACT (wait.h: wakers touch nothing but the waiter and
 * elem_size bytes at w->elem), on a waiter of its own off its stack, in
 * its compact record, with a bounce buffer standing in for elem: the
 * value to send is copied in before the park, the value received copied
 * out after it. Only then does it mark the park TASK_MAY_RELEASE, which
 * lets its worker give the stack back once it has switched away.
 * Flagged: channel sends and receives, mutexes, semaphores, rwlocks,
 * events, wait groups, one-direction descriptor waits (and sleeps, which
 * have no waiter: wait.c). Every other wait (select, wait sets, publish
 * callbacks, the blocking pool, files, joins, actors, an elem larger
 * than the bounce buffer) keeps the stack where it is for that park.
 */
#include "wait/wait.h"

#include <string.h>

#define BOUNCE 16 /* bytes of elem carried off the stack */

/* The wait layer's part of a compact task's record (weft__compact.ext). */
typedef struct compact_wait {
    weft__waiter w;
    void *elem; /* the caller's elem, in w's stead */
    unsigned char bounce[BOUNCE];
} compact_wait;
_Static_assert(sizeof(compact_wait) <= WEFT__COMPACT_EXT,
               "the compact wait record does not fit weft__compact.ext");

weft__waiter *weft__compact_enter(weft__waiter *w, size_t elem_size)
{
    weft_task *t = ld_rlx(&weft__wpub(weft__tl_worker)->cur);
    WEFT_ASSERT(t->flags & TASK_COMPACT);
    WEFT_ASSERT_MSG(w->fired == NULL,
                    "a wait flagged compact whose claim writes the stack");
    if (w->elem && elem_size > BOUNCE)
        return w; /* the stack stays */
    compact_wait *cw = (compact_wait *)(void *)weft__compact_of(t)->ext;
    weft__waiter *x = &cw->w;
    *x = *w; /* what the primitive set: elem, n, since */
    cw->elem = w->elem;
    if (w->elem) {
        memcpy(cw->bounce, w->elem, elem_size);
        x->elem = cw->bounce;
    }
    /* w itself is dead until weft__compact_leave writes it whole again:
     * the image of a released stack leaves it out. */
    weft__compact *cp = weft__compact_of(t);
    char *wa = (char *)w;
    if (wa >= t->stack_lo && wa + sizeof(*w) <= t->stack_hi &&
        (uintptr_t)wa % 8 == 0) {
        cp->hole = (uint32_t)(t->stack_hi - wa);
        cp->hole_len = sizeof(*w);
    }
    WEFT_ASSERT(!(t->flags & (TASK_MAY_RELEASE | TASK_RELEASED)));
    t->flags |= TASK_MAY_RELEASE;
    return x;
}

int weft__compact_leave(weft__waiter *w, weft__waiter *x, int rc, bool out,
                        size_t elem_size)
{
    weft_task *t = ld_rlx(&weft__wpub(weft__tl_worker)->cur);
    compact_wait *cw = (compact_wait *)(void *)weft__compact_of(t)->ext;
    WEFT_ASSERT(x == &cw->w && (t->flags & TASK_MAY_RELEASE));
    WEFT_ASSERT_MSG(!(t->flags & (TASK_RELEASED | TASK_PENDING)),
                    "a compact task runs with its stack given back");
    t->flags &= ~(unsigned)TASK_MAY_RELEASE;
    weft__compact_of(t)->hole = 0;
    void *elem = cw->elem; /* w is not read: it was left out of the image */
    WEFT_ASSERT(!elem || x->elem == cw->bounce);
    if (elem && rc == 0 && out)
        memcpy(elem, cw->bounce, elem_size);
    *w = *x; /* what the wait and its waker wrote */
    w->elem = elem;
    return rc;
}
