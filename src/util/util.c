/* SPDX-License-Identifier: MIT */
/*
 * The bottom of the runtime: fatal errors, and the debug builds' husks of
 * freed objects.
 */
#include "util/util.h"
#include "util/json.h"
#include "util/sig.h"
#include "util/tsan.h"

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

#if defined(WEFT_TSAN) && (defined(__x86_64__) || defined(__aarch64__))
#define RAW_WRITE 1
#include <sys/syscall.h>
#else
#define RAW_WRITE 0
#endif

WEFT_NO_TSAN void weft__sig_write(const char *s)
{
    size_t n = 0;
    while (((const volatile char *)s)[n]) /* volatile: no strlen call */
        n++;
    while (n > 0) {
#if RAW_WRITE
        long k = syscall(SYS_write, 2, s, n);
#else
        ssize_t k = write(2, s, n);
#endif
        if (k <= 0)
            return;
        s += k;
        n -= (size_t)k;
    }
}

WEFT_NO_TSAN void weft__sig_write_num(unsigned long v)
{
    char buf[24], *p = buf + sizeof(buf);
    *--p = '\0';
    do
        *--p = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    weft__sig_write(p);
}

#if defined(WEFT__ASSERTS)
void weft__assert_fail(const char *file, int line, const char *func,
                       const char *expr, const char *msg)
{
    /* No stdio (it locks and allocates; the failure may be anywhere, a
     * lock held, on a task's small stack). */
    weft__sig_write("weft: assertion failed at ");
    weft__sig_write(file);
    weft__sig_write(":");
    weft__sig_write_num(line > 0 ? (unsigned long)line : 0);
    weft__sig_write(" in ");
    weft__sig_write(func);
    weft__sig_write("(): ");
    weft__sig_write(expr);
    if (msg) {
        weft__sig_write(" (");
        weft__sig_write(msg);
        weft__sig_write(")");
    }
    weft__sig_write("\n");
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
        return "no such file, name or item";
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
