/* SPDX-License-Identifier: MIT */
/*
 * The bottom layer: compiler helpers, time arithmetic, the spinlock, fatal
 * errors and freed objects' husks. Includes nothing of weft's but the
 * public header and the atomics.
 */
#ifndef WEFT_UTIL_H
#define WEFT_UTIL_H

#include "weft.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/atomic.h"

#define WEFT_CACHELINE 64
#define WEFT_UNUSED(x) ((void)(x))
#define WEFT_LIKELY(x) __builtin_expect(!!(x), 1)
#define WEFT_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* A rare path kept out of line, so the hot function it hangs off (spawn,
 * a task's exit) stays small enough for its own calls to be inlined. */
#define WEFT_COLD __attribute__((cold, noinline))
/* Thread-local storage with the initial-exec model: a single %fs-relative
 * load even in the shared library (no __tls_get_addr on hot paths). */
#define WEFT_TLS __thread __attribute__((tls_model("initial-exec")))

/* a + b for times and durations (b may be negative), WEFT_NEVER (the
 * largest time) instead of overflowing. */
static inline int64_t weft__add_sat(int64_t a, int64_t b)
{
    return b > 0 && a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* A timeout in ns (WEFT_NEVER: none, <= 0: don't wait) as poll() and
 * epoll_wait() take it: milliseconds rounded up, -1 for none, and at most
 * INT_MAX (~24.8 days: the caller wakes then and looks again, rather than
 * sleeping past a far deadline or wrapping to 0). */
static inline int weft__timeout_ms(int64_t ns)
{
    if (ns == WEFT_NEVER)
        return -1;
    if (ns <= 0)
        return 0;
    return ns / WEFT_MSEC >= INT_MAX ? INT_MAX
                                     : (int)((ns + WEFT_MSEC - 1) / WEFT_MSEC);
}

/* Copies n bytes: one move for the sizes values mostly have (4, 8, 16:
 * an int, a pointer or an int64, a pair), no call to memcpy; memcpy for
 * the rest. For channels' elements and actors' messages. */
static inline void weft__copy_small(void *to, const void *from, size_t n)
{
    /* Out of gcc's sight (no instruction): inlined by LTO into a caller
     * whose buffer is smaller than 8 or 16, it warned of those branches,
     * which that caller's n never takes. */
    __asm__("" : "+r"(to));
    if (n == 8)
        __builtin_memcpy(to, from, 8);
    else if (n == 4)
        __builtin_memcpy(to, from, 4);
    else if (n == 16)
        __builtin_memcpy(to, from, 16);
    else
        __builtin_memcpy(to, from, n);
}

/* The largest stack a task may ask for (weft_config, weft_spawn_opts). */
#define WEFT__MAX_STACK ((size_t)1 << 30)

typedef struct weft_task weft_task;
typedef struct weft_worker weft_worker;
typedef struct weft_runtime weft_runtime;

/* ---- runtime asserts ----
 * WEFT_ASSERT(cond) checks an internal invariant, one the code relies on
 * between its layers (never a caller's input: misuse of the public API
 * returns its documented error). On in Debug builds (the sanitizer builds
 * are Debug builds) and with -DWEFT_ASSERTS=ON: a failure writes
 * file:line, the function and the expression to stderr with plain
 * write()s (it may fail anywhere, on a task's small stack, with a lock
 * held) and aborts. Off (Release), the condition is not evaluated, only
 * type-checked: no side effects in asserted expressions. */
#if defined(WEFT__ASSERTS)
void weft__assert_fail(const char *file, int line, const char *func,
                       const char *expr, const char *msg)
    __attribute__((noreturn, cold));
#define WEFT_ASSERT_MSG(cond, msg)                                             \
    (WEFT_LIKELY(cond)                                                         \
         ? (void)0                                                             \
         : weft__assert_fail(__FILE__, __LINE__, __func__, #cond, msg))
#else
#define WEFT_ASSERT_MSG(cond, msg) ((void)sizeof(!(cond)), (void)sizeof(msg))
#endif
#define WEFT_ASSERT(cond) WEFT_ASSERT_MSG(cond, NULL)

/* ---- spinlock: short sections only, never held across a park ---- */

typedef struct weft__lock {
    atomic_int held;
} weft__lock;

/* Out of line and cold: a contended lock is rare, and a call only there
 * lets the uncontended path keep no register across it. */
WEFT_COLD __attribute__((unused)) static void weft__lock_spin(weft__lock *l)
{
    for (;;) {
        int spins = 0;
        while (ld_rlx(&l->held)) {
            if (++spins < 128) {
                cpu_relax();
            } else {
                spins = 0;
                sched_yield();
            }
        }
        if (!atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
            return;
    }
}
/* The uncontended exchange inline everywhere (a hot function with several
 * locks, such as a task's exit, would otherwise get the whole loop as an
 * out-of-line call); the spinning apart. */
static inline __attribute__((always_inline)) void
weft__lock_acquire(weft__lock *l)
{
    if (WEFT_UNLIKELY(
            atomic_exchange_explicit(&l->held, 1, memory_order_acquire)))
        weft__lock_spin(l);
}
/* Takes l if it is free; false if it is held. Never waits. */
static inline __attribute__((always_inline)) bool weft__lock_try(weft__lock *l)
{
    return !atomic_exchange_explicit(&l->held, 1, memory_order_acquire);
}
static inline void weft__lock_release(weft__lock *l)
{
    WEFT_ASSERT_MSG(ld_rlx(&l->held), "releasing a spinlock nobody holds");
    st_rel(&l->held, 0);
}
/* For asserts: l is held (by someone: a spinlock has no owner). */
static inline bool weft__lock_is_held(weft__lock *l)
{
    return ld_rlx(&l->held) != 0;
}

/* ---- fatal errors, husks ---- */

void weft__fatal(const char *fmt, ...)
    __attribute__((noreturn, format(printf, 1, 2)));

/* Frees a channel or future whose magic now says "dead". Debug builds
 * (not ASan, which reports such uses itself) keep the last 1024 of them
 * before freeing, so a call on an object just freed finds the dead magic
 * and returns -EINVAL instead of touching freed memory. */
void weft__husk_free(void *p);

#endif
