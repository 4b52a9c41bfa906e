/* SPDX-License-Identifier: MIT */
/*
 * Every atomic in weft goes through these macros, so the memory orders are
 * visible in one place and a checking build can hook them.
 *
 * Naming: ld/st/xchg/cas/add with a suffix for the order: _rlx (relaxed),
 * _acq (acquire), _rel (release), _sc (sequentially consistent). Use _sc
 * where two threads each store then load (Dekker pairs: "I am going to
 * sleep" against "I queued work"); the comment at each use names its pair.
 */
#ifndef WEFT_ATOMIC_H
#define WEFT_ATOMIC_H

#include <stdatomic.h>

#define ld_rlx(p) atomic_load_explicit((p), memory_order_relaxed)
#define ld_acq(p) atomic_load_explicit((p), memory_order_acquire)
#define ld_sc(p) atomic_load_explicit((p), memory_order_seq_cst)
#define st_rlx(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)
#define st_rel(p, v) atomic_store_explicit((p), (v), memory_order_release)
#define st_sc(p, v) atomic_store_explicit((p), (v), memory_order_seq_cst)
#define xchg_acq_rel(p, v)                                                     \
    atomic_exchange_explicit((p), (v), memory_order_acq_rel)
#define xchg_sc(p, v) atomic_exchange_explicit((p), (v), memory_order_seq_cst)
#define add_rlx(p, v) atomic_fetch_add_explicit((p), (v), memory_order_relaxed)
#define add_sc(p, v) atomic_fetch_add_explicit((p), (v), memory_order_seq_cst)
#define add_acq_rel(p, v)                                                      \
    atomic_fetch_add_explicit((p), (v), memory_order_acq_rel)
/* Strong compare-and-swap; *expected is updated on failure. */
#define cas_sc(p, expected, desired)                                           \
    atomic_compare_exchange_strong_explicit((p), (expected), (desired),        \
                                            memory_order_seq_cst,              \
                                            memory_order_seq_cst)
#define cas_acq_rel(p, expected, desired)                                      \
    atomic_compare_exchange_strong_explicit((p), (expected), (desired),        \
                                            memory_order_acq_rel,              \
                                            memory_order_acquire)

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

#endif
