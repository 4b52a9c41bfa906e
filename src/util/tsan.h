/* SPDX-License-Identifier: MIT */
/*
 * The util layer's attribute for the functions TSan must leave alone:
 * the context switch (context/ctx.h) and the code around it. Included by
 * those alone.
 */
#ifndef WEFT_UTIL_TSAN_H
#define WEFT_UTIL_TSAN_H

/* A function TSan leaves alone, hooks and all (see ctx.h). */
#if defined(WEFT_TSAN) && defined(__clang__)
#if __has_attribute(disable_sanitizer_instrumentation)
#define WEFT_NO_TSAN __attribute__((disable_sanitizer_instrumentation))
#else
#define WEFT_NO_TSAN __attribute__((no_sanitize("thread")))
#define WEFT_TSAN_HOOKS_KEPT 1
void __tsan_func_exit(void); /* the runtime's exit hook; no header has it */
#endif
#elif defined(WEFT_TSAN)
#define WEFT_NO_TSAN __attribute__((no_sanitize_thread))
#else
#define WEFT_NO_TSAN
#endif

#endif
