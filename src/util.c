/* SPDX-License-Identifier: MIT */
/*
 * The bottom of the runtime: fatal errors, and the debug builds' husks of
 * freed objects.
 */
#include "util.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void weft__fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

#if !defined(NDEBUG) && !defined(WEFT_ASAN)
#define HUSKS 1024
#endif

void weft__husk_free(void *p)
{
#ifdef HUSKS
    /* A ring of the last HUSKS husks: the newest goes in, the oldest is
     * freed, so a debug build catches a call on an object just freed
     * without keeping every object it ever freed. */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static void *ring[HUSKS];
    static unsigned next;
    pthread_mutex_lock(&mu);
    void *old = ring[next];
    ring[next] = p;
    next = (next + 1) % HUSKS;
    pthread_mutex_unlock(&mu);
    free(old);
#else
    free(p);
#endif
}
