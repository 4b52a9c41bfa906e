/* SPDX-License-Identifier: MIT */
/*
 * The scope layer's cases of weft_select: a scope's join (scope.c) and a
 * task handle's (task.c), for select.c and the files that give them. The
 * protocol is wait/many.h's "select's cases".
 */
#ifndef WEFT_SCOPE_CASES_H
#define WEFT_SCOPE_CASES_H

#include "util/util.h"

/* Select's cases (wait/many.h). */
typedef struct weft__arm weft__arm;
typedef struct weft__chain weft__chain;

/* select's scope case (wait/many.h, "select's cases"): joins the scope once no
 * child runs. check: scope NULL 1; the caller not its owner -EPERM;
 * joined already, or not the caller's innermost open scope -EINVAL. try
 * returns 0 without setting rc when no child runs (the join, which takes
 * the lock, is won()'s, which select calls then with code 0), else
 * -EAGAIN with a->q the done queue. won: rc = weft_scope_join(scope). */
int weft__scope_case_check(const weft_case *c);
weft__lock *weft__scope_case_lock(weft_case *c);
int weft__scope_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__scope_case_won(weft_case *c, int code);

/* Select's JOIN case (task.c, at its end; wait/many.h's "select's cases"):
 * check: 1 for a zero handle, -EPERM outside a task, what
 * weft_task_join would refuse (-EINVAL, -ESRCH, -EDEADLK); try (under the
 * record's lock): the task done: joins it (status to elem, the record's
 * life ended) with c->rc = 0; the handle gone meanwhile: c->rc = -ESRCH;
 * else -EAGAIN with a->q the joiners' queue. ready: puts the ended
 * record back on the free list. won: joins as try would. */
int weft__join_case_check(const weft_case *c);
weft__lock *weft__join_case_lock(weft_case *c);
int weft__join_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__join_case_won(weft_case *c, int code);
void weft__join_case_ready(weft_case *c);

#endif
