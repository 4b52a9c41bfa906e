/* SPDX-License-Identifier: MIT */
/*
 * Switching between a worker's scheduler context and its tasks.
 *
 * weft__ctx_make prepares a task's first frame; ctx_switch saves the running
 * context and resumes another, telling the sanitizers (ASan's fake stacks,
 * TSan's fibers) which stack is about to run. The annotations compile only
 * into the sanitizer builds; the release build is the bare jump.
 */
#ifndef WEFT_CTX_H
#define WEFT_CTX_H

#include "context/ctx_type.h"
#include "util/tsan.h"

#if defined(WEFT_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(WEFT_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

/* WEFT_NO_TSAN: a function TSan leaves alone, without even the entry and
 * exit hooks that keep a fiber's shadow stack (its own record of the call
 * stack, 65,536 frames at most). Two kinds of code need it:
 *   - the frames under a task's last switch, which never return: a slot's
 *     fiber serves the slot's next tasks, and a frame left on its shadow
 *     stack by each task overruns it after 65,536 tasks;
 *   - the fault handler, which may run while TSan's runtime holds its own
 *     locks (a fault inside the runtime): a hook taking them again would
 *     wait forever.
 * gcc's no_sanitize_thread drops the hooks too; clang's no_sanitize keeps
 * them, its disable_sanitizer_instrumentation (clang 14) does not. With an
 * older clang WEFT_TSAN_HOOKS_KEPT is 1 and the task's entry pops its own
 * frame (see weft__task_main). */
/* WEFT_NO_TSAN itself is in util.h (the signal-safe writer uses it). */

#if !defined(WEFT_UCONTEXT)
void weft__ctx_jump(void **save_sp, void *to_sp);
void weft__ctx_exit(void *to_sp) __attribute__((noreturn));
void weft__ctx_start(void);

/* Builds the first frame of a context that will call entry(arg) on the
 * stack [lo, hi). hi must be 16-byte aligned. */
static inline void weft__ctx_make(weft__ctx *c, char *lo, char *hi,
                                  void (*entry)(void *), void *arg)
{
    WEFT_UNUSED(lo);
    uintptr_t *sp;
#if defined(__x86_64__)
    /* 8 words popped by weft__ctx_jump, leaving rsp = hi - 16 (aligned) for
     * weft__ctx_start's call. */
    sp = (uintptr_t *)(hi - 16) - 8;
    sp[0] = 0x1F80u | ((uintptr_t)0x037Fu << 32); /* MXCSR, x87 CW */
    sp[1] = sp[2] = sp[3] = 0;                    /* r15 r14 r13 */
    sp[4] = (uintptr_t)arg;                       /* r12 */
    sp[5] = (uintptr_t)entry;                     /* rbx */
    sp[6] = 0;                                    /* rbp */
    sp[7] = (uintptr_t)weft__ctx_start;           /* return address */
#elif defined(__aarch64__)
    sp = (uintptr_t *)hi - 22;
    for (int i = 0; i < 22; i++)
        sp[i] = 0;
    sp[0] = (uintptr_t)entry;            /* x19 */
    sp[1] = (uintptr_t)arg;              /* x20 */
    sp[11] = (uintptr_t)weft__ctx_start; /* x30 */
#else
#error                                                                         \
    "no assembly context for this architecture: build with WEFT_CONTEXT=ucontext"
#endif
    c->sp = sp;
}

/* Asks the cache for the top of c's saved stack: the registers the switch
 * pops, then the frames it returns into, 12 lines (768 bytes; 8 and 16
 * gained less on bench/ring). For a task that will run soon whose stack
 * has gone cold. A prefetch never faults: a stack given back (a compact
 * task's) costs nothing. */
static inline __attribute__((always_inline)) void
weft__ctx_prefetch(const weft__ctx *c)
{
    const char *sp = (const char *)c->sp;
    for (int i = 0; i < 12; i++)
        __builtin_prefetch(sp + 64 * i, 0, 3);
}

/* Always inlined, at -O0 too: under TSan an out-of-line call here would
 * leave its frame on a finished task's fiber (see WEFT_NO_TSAN). */
static inline __attribute__((always_inline)) void ctx_jump(weft__ctx *from,
                                                           weft__ctx *to)
{
    weft__ctx_jump(&from->sp, to->sp);
}

/* Resumes `to`, leaving a context that never runs again: saves nothing. */
static inline __attribute__((always_inline, noreturn)) void
ctx_exit(weft__ctx *to)
{
    weft__ctx_exit(to->sp);
}
#else
/* makecontext passes int arguments only: the pointer goes in two halves.
 * The bottom frame of a task's stack, never returned from: WEFT_NO_TSAN. */
static WEFT_NO_TSAN void ctx_uc_entry(unsigned hi_, unsigned lo_, unsigned fhi,
                                      unsigned flo)
{
    void *arg = (void *)(((uintptr_t)hi_ << 32) | lo_);
    void (*entry)(void *) = (void (*)(void *))(((uintptr_t)fhi << 32) | flo);
    entry(arg);
    __builtin_trap();
}

static inline void weft__ctx_make(weft__ctx *c, char *lo, char *hi,
                                  void (*entry)(void *), void *arg)
{
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = lo;
    c->uc.uc_stack.ss_size = (size_t)(hi - lo);
    c->uc.uc_link = NULL;
    uintptr_t a = (uintptr_t)arg, f = (uintptr_t)entry;
    makecontext(&c->uc, (void (*)(void))ctx_uc_entry, 4, (unsigned)(a >> 32),
                (unsigned)a, (unsigned)(f >> 32), (unsigned)f);
}

static inline __attribute__((always_inline)) void ctx_jump(weft__ctx *from,
                                                           weft__ctx *to)
{
    swapcontext(&from->uc, &to->uc);
}

static inline __attribute__((always_inline, noreturn)) void
ctx_exit(weft__ctx *to)
{
    setcontext(&to->uc);
    __builtin_trap();
}

static inline __attribute__((always_inline)) void
weft__ctx_prefetch(const weft__ctx *c)
{
    WEFT_UNUSED(c);
}
#endif

/* First thing a new task does on its own stack. */
static inline void ctx_entered(void)
{
#if defined(WEFT_ASAN)
    __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
}

#endif
