/* SPDX-License-Identifier: MIT */
/*
 * The select layer's table of case kinds: one row per weft_op, the four
 * functions of wait/many.h's "select's cases" protocol (check, lock, try,
 * won) and three optional ones. Layers below select give their rows to
 * select.c's table directly; a layer above it (the actors) installs its
 * rows with weft__select_install before any case of its kinds can name
 * an object of it.
 */
#ifndef WEFT_SELECT_H
#define WEFT_SELECT_H

#include "wait/many.h"

typedef struct weft__case_ops {
    /* wait/many.h, "select's cases" */
    int (*check)(const weft_case *c);
    weft__lock *(*lock)(weft_case *c);
    int (*try)(weft_case *c, weft__arm *a, weft__chain *woken);
    void (*won)(weft_case *c, int code);
    /* The case was performed by try (it returned 0), and every lock is
     * released: what must wait for that (a scope's join, a handle's
     * record going back to its table). NULL: nothing. */
    void (*ready)(weft_case *c);
    /* Under the locks, after try returned -EAGAIN: the instant at which
     * the case may be ready without anybody waking it (a limiter's tokens
     * coming due). select then bounds its wait by it and, if the wait
     * ends there, takes the locks again and tries every case once more.
     * NULL: WEFT_NEVER. */
    int64_t (*recheck)(const weft_case *c);
    /* try returned -EAGAIN and the round of tries and the wait that
     * followed ended without choosing this case (another case won, the
     * deadline, a cancel, a recheck, or weft_try_select's -EAGAIN); its
     * waiter is off its queue and no lock is held: undo what try
     * counted, or let in waiters it kept out. NULL: nothing. */
    void (*lost)(weft_case *c);
} weft__case_ops;

/* Installs the row of op (a layer above select, once its first object is
 * made; every call installs the same row). Any thread. */
void weft__select_install(weft_op op, const weft__case_ops *ops);

#endif
