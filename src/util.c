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
#include <string.h>
#include <unistd.h>

void weft__fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

#if defined(WEFT__ASSERTS)
static void assert_put(const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t k = write(2, s, n);
        if (k <= 0)
            return;
        s += k;
        n -= (size_t)k;
    }
}

void weft__assert_fail(const char *file, int line, const char *func,
                       const char *expr, const char *msg)
{
    /* No stdio (it locks and allocates; the failure may be anywhere, a
     * lock held, on a task's small stack): the line number by hand. */
    char num[16];
    int i = (int)sizeof(num) - 1;
    unsigned u = line > 0 ? (unsigned)line : 0;
    num[i] = '\0';
    do {
        num[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u && i > 0);
    assert_put("weft: assertion failed at ");
    assert_put(file);
    assert_put(":");
    assert_put(num + i);
    assert_put(" in ");
    assert_put(func);
    assert_put("(): ");
    assert_put(expr);
    if (msg) {
        assert_put(" (");
        assert_put(msg);
        assert_put(")");
    }
    assert_put("\n");
    abort();
}
#endif

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

/* ---- public: versions and errors ---- */

unsigned weft_version(void)
{
    return WEFT_VERSION_HEX;
}

const char *weft_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
    case -ECANCELED:
        return "operation cancelled";
    case -ETIMEDOUT:
        return "deadline passed";
    case -EINVAL:
        return "invalid argument";
    case -EPERM:
        return "not allowed here (outside a task of this runtime, or not "
               "the owner)";
    case -EBUSY:
        return "busy (in use, held, or full)";
    case -ESHUTDOWN:
        return "closed (scope already joined)";
    case -ENOMEM:
        return "out of memory";
    case -EAGAIN:
        return "not ready yet (try again)";
    case -ENOENT:
        return "no such item";
    case -ENODATA:
        return "nothing recorded (no samples yet, or a scope whose policy "
               "keeps no such data)";
    case -EOVERFLOW:
        return "too many";
    case -EPIPE:
        return "closed";
    case -EINPROGRESS:
        return "not settled yet";
    case -EHOSTDOWN:
        return "rejected: the circuit breaker is open";
    case -EALREADY:
        return "already settled";
    }
    if (err < 0 && err > -4096)
        return strerror(-err);
    return "unknown error";
}

size_t weft__json_char(unsigned char c, char out[6])
{
    static const char hex[] = "0123456789abcdef";
    if (c == '"' || c == '\\') {
        out[0] = '\\';
        out[1] = (char)c;
        return 2;
    }
    if (c >= 0x20 && c != 0x7f) {
        out[0] = (char)c;
        return 1;
    }
    memcpy(out, "\\u00", 4);
    out[4] = hex[c >> 4];
    out[5] = hex[c & 15];
    return 6;
}
