/* SPDX-License-Identifier: MIT */
/*
 * The io layer's case of weft_select: a descriptor's readiness (io.c),
 * for select.c and io.c. The protocol is wait/many.h's "select's
 * cases".
 */
#ifndef WEFT_IO_CASES_H
#define WEFT_IO_CASES_H

#include "util/util.h"

/* Select's cases (wait/many.h). */
typedef struct weft__arm weft__arm;
typedef struct weft__chain weft__chain;

/* select's descriptor case (wait/many.h, "select's cases"): WEFT_OP_READ or
 * WEFT_OP_WRITE on c->fd.
 * check: 1 (off) for fd < 0, -EINVAL for fd >= 2^20, -ENOMEM if fd's
 *   record cannot be made; else 0 (the record is made).
 * lock: the record's lock.
 * try: an edge not yet given to a wait is consumed: rc 0. Else fd is
 *   registered with the worker's poller if it is not (and, for a
 *   descriptor weft did not make, the check at park: see io.c), and the
 *   wait goes on the record's read or write queue: -EAGAIN with a->q set.
 *   A registration that fails is the case's result (c->rc = the error,
 *   return 0), except for an always ready regular file (rc 0). The check
 *   may find the number's file replaced: the old file's waiters are then
 *   appended to woken with -EAGAIN returned and a->q set (the new file is
 *   registered already), and the select must finish them (with 0) before
 *   it parks: select.c does so still holding the locks, then parks.
 *   Outside a task (weft_try_select on a
 *   plain thread) only a kept edge counts.
 * won: c->rc = code: 0 (an edge, or the number was found to name a new
 *   file), -EBADF (weft_close or weft_fd_forget under the wait).
 * lost: the case's try said -EAGAIN and it was not chosen. won and lost
 *   end the request a one-shot poller armed for the case (poller.h).
 * A select that parks on descriptor cases counts itself pending
 * (weft__pending_add(w, WEFT__PENDING_IO, +1), -1 after), so that its
 * worker reads (and sleeps in) its poller meanwhile. */
int weft__fd_case_check(const weft_case *c);
weft__lock *weft__fd_case_lock(weft_case *c);
int weft__fd_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__fd_case_won(weft_case *c, int code);
void weft__fd_case_lost(weft_case *c);

#endif
