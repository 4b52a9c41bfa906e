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

#include "internal.h"

#if defined(WEFT_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(WEFT_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

#if !defined(WEFT_UCONTEXT)
void weft__ctx_jump(void **save_sp, void *to_sp);
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

static inline void ctx_jump(weft__ctx *from, weft__ctx *to)
{
    weft__ctx_jump(&from->sp, to->sp);
}
#else
/* makecontext passes int arguments only: the pointer goes in two halves. */
static void ctx_uc_entry(unsigned hi_, unsigned lo_, unsigned fhi, unsigned flo)
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

static inline void ctx_jump(weft__ctx *from, weft__ctx *to)
{
    swapcontext(&from->uc, &to->uc);
}
#endif

/* The stack a target context runs on, for ASan. */
static inline void ctx_target_stack(weft_worker *w, weft_task *to,
                                    const void **lo, size_t *size)
{
    if (to) {
        *lo = to->stack_lo;
        *size = (size_t)((char *)to - to->stack_lo);
    } else {
        *lo = w->stack_lo;
        *size = w->stack_size;
    }
}

/* Saves `from` (a task, or the scheduler if NULL) and resumes `to` (a task,
 * or the scheduler if NULL). `dying`: from will never run again. Returns
 * when from is resumed. */
static inline void ctx_switch(weft_worker *w, weft_task *from, weft_task *to,
                              bool dying)
{
    weft__ctx *fc = from ? &from->ctx : &w->sched_ctx;
    weft__ctx *tc = to ? &to->ctx : &w->sched_ctx;
#if defined(WEFT_ASAN)
    void *fake = NULL;
    const void *lo;
    size_t size;
    ctx_target_stack(w, to, &lo, &size);
    __sanitizer_start_switch_fiber(dying ? NULL : &fake, lo, size);
#else
    WEFT_UNUSED(dying);
#endif
#if defined(WEFT_TSAN)
    __tsan_switch_to_fiber(to ? to->tsan_fiber : w->tsan_fiber, 0);
#endif
    ctx_jump(fc, tc);
#if defined(WEFT_ASAN)
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

/* First thing a new task does on its own stack. */
static inline void ctx_entered(void)
{
#if defined(WEFT_ASAN)
    __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
}

#endif
