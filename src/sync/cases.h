/* SPDX-License-Identifier: MIT */
/*
 * The sync layer's cases of weft_select: a channel's send and receive
 * (chan.c), the semaphore, mutex, event and wait group (sync.c), the
 * rwlock (rwlock.c), for select.c and the files that give them. The
 * protocol is wait/many.h's "select's cases".
 */
#ifndef WEFT_SYNC_CASES_H
#define WEFT_SYNC_CASES_H

#include "util/util.h"

/* Select's cases (wait/many.h). */
typedef struct weft__arm weft__arm;
typedef struct weft__chain weft__chain;

/* Select's channel cases (chan.c; the interface is in wait/many.h). */
int weft__chan_case_check(const weft_case *c);
weft__lock *weft__chan_case_lock(weft_case *c);
int weft__chan_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__chan_case_won(weft_case *c, int code);

/* Select's semaphore case (sync.c; the four calls of wait/many.h's "select's
 * cases"): check: 1 for a NULL sem (off), else 0; try (under the sem's
 * lock): takes one permit if one is there and nobody waits ahead (0,
 * c->rc = 0), else -EAGAIN with a->q the sem's queue and a->w.n = 1; won:
 * c->rc = code (0: the permit was handed over). */
int weft__sem_case_check(const weft_case *c);
weft__lock *weft__sem_case_lock(weft_case *c);
int weft__sem_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__sem_case_won(weft_case *c, int code);

/* Select's event, wait group and rwlock cases (the four calls of wait/many.h's
 * "select's cases", at the end of sync.c and rwlock.c). EVENT and
 * WAITGROUP: check 1 for NULL (off); try (under the object's lock): 0
 * with c->rc = 0 if the event is set (the count is zero), else -EAGAIN
 * with a->q the object's queue; won: c->rc = code. RDLOCK and WRLOCK:
 * check: 1 for NULL, -EPERM outside a task, -EDEADLK for a WRLOCK by the
 * writer; try: enters as weft_rwlock_rdlock / _wrlock would without
 * waiting, else -EAGAIN with a->q the lock's queue and a->w.n what it
 * wants; lost: lets in the waiters its waiter kept out. */
/* MUTEX: check: 1 for NULL, -EPERM outside a task, -EINVAL destroyed,
 * -EDEADLK held by the caller; try: takes it if free (c->rc = 0), else
 * -EAGAIN queued as a lock's waiter, which unlock hands the mutex to;
 * won: c->rc = 0; lost: M_WAITERS goes with the last waiter. */
int weft__mutex_case_check(const weft_case *c);
weft__lock *weft__mutex_case_lock(weft_case *c);
int weft__mutex_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__mutex_case_won(weft_case *c, int code);
void weft__mutex_case_lost(weft_case *c);
int weft__event_case_check(const weft_case *c);
weft__lock *weft__event_case_lock(weft_case *c);
int weft__event_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__event_case_won(weft_case *c, int code);
int weft__wg_case_check(const weft_case *c);
weft__lock *weft__wg_case_lock(weft_case *c);
int weft__wg_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
int weft__rwlock_case_check(const weft_case *c);
weft__lock *weft__rwlock_case_lock(weft_case *c);
int weft__rwlock_case_try(weft_case *c, weft__arm *a, weft__chain *woken);
void weft__rwlock_case_won(weft_case *c, int code);
void weft__rwlock_case_lost(weft_case *c);

#endif
