/* SPDX-License-Identifier: MIT */
/*
 * Fault injection sites (weft.h, section 15): every place where weft calls
 * the system or allocates asks, just before, whether a test's plan wants
 * that call to fail, and if so fails it as the system would (the call is
 * not made). Built with WEFT__FAULTS (CMake's WEFT_FAULTS); without it
 * every site is a constant 0 and compiles to nothing.
 *
 * A site reads:
 *
 *     int e = weft__fault(WEFT_FAULT_SOCKET);
 *     int fd = e ? (errno = e, -1) : socket(...);
 *
 * The plan is process-wide (one runtime at a time runs with one: the
 * sites run on workers, pool threads and plain threads alike, which do
 * not all know their runtime), installed by weft_run and removed when it
 * ends.
 */
#ifndef WEFT_UTIL_FAULT_H
#define WEFT_UTIL_FAULT_H

#include "util/util.h"

#include <stdlib.h>
#include <string.h>

/* A short transfer instead of an errno (READ and WRITE only). */
#define WEFT__FAULT_SHORT (-1)

#if defined(WEFT__FAULTS)
extern atomic_int weft__faults_on; /* a plan is installed */
int weft__fault_hit(weft_fault_site site);

/* The fault the plan makes at this pass through site: an errno to fail
 * with, WEFT__FAULT_SHORT (a short transfer), or 0 (make the call). Any
 * thread. */
static inline int weft__fault(weft_fault_site site)
{
    if (WEFT_LIKELY(!ld_rlx(&weft__faults_on)))
        return 0;
    return weft__fault_hit(site);
}

/* Installs plan for a run whose seed is run_seed: 0, -EBUSY (another run
 * has one). Clears the counts of the last plan. */
int weft__fault_install(const weft_fault_plan *plan, uint64_t run_seed);
/* Removes the plan; its counts stay for weft_fault_stats_get. */
void weft__fault_remove(void);
#else
static inline int weft__fault(weft_fault_site site)
{
    (void)site;
    return 0;
}
#endif

/* True if the plan fails this pass through site, with errno set to the
 * error: for a call that returns -1 (or MAP_FAILED, or an error number)
 * and sets errno, written `weft__fault_fails(S) ? -1 : call(...)`. A
 * short transfer is not a failure here (READ and WRITE use
 * weft__fault). */
static inline bool weft__fault_fails(weft_fault_site site)
{
    int e = weft__fault(site);
    if (WEFT_LIKELY(e <= 0))
        return false;
    errno = e;
    return true;
}

/* A short transfer's length: fewer than n bytes, at least one (n > 1);
 * n itself when n <= 1. Drawn from the plan's seed. */
size_t weft__fault_short(size_t n);

/* weft's allocations, each a pass through WEFT_FAULT_ALLOC: NULL with
 * errno ENOMEM when the plan says so. Freed with free(). */
static inline bool weft__alloc_fails(void)
{
    if (WEFT_LIKELY(!weft__fault(WEFT_FAULT_ALLOC)))
        return false;
    errno = ENOMEM;
    return true;
}
static inline void *weft__malloc(size_t n)
{
    return weft__alloc_fails() ? NULL : malloc(n);
}
static inline void *weft__calloc(size_t n, size_t size)
{
    return weft__alloc_fails() ? NULL : calloc(n, size);
}
static inline void *weft__realloc(void *p, size_t n)
{
    return weft__alloc_fails() ? NULL : realloc(p, n);
}
static inline void *weft__aligned_alloc(size_t align, size_t n)
{
    return weft__alloc_fails() ? NULL : aligned_alloc(align, n);
}
static inline char *weft__strdup(const char *s)
{
    return weft__alloc_fails() ? NULL : strdup(s);
}

#endif
