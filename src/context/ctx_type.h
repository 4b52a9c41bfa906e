/* SPDX-License-Identifier: MIT */
/*
 * A saved context, as a task holds it (ctx.h switches between them): the
 * type alone, for the headers that embed one.
 */
#ifndef WEFT_CTX_TYPE_H
#define WEFT_CTX_TYPE_H

#include "util/util.h"

#if defined(WEFT_UCONTEXT)
#include <ucontext.h>
#endif

typedef struct weft__ctx {
#if defined(WEFT_UCONTEXT)
    ucontext_t uc;
#else
    void *sp; /* saved stack pointer; the registers are on that stack */
#endif
} weft__ctx;

#endif
