/* SPDX-License-Identifier: MIT */
/*
 * pingpong-compact: pingpong (bench/pingpong.c) with both tasks compact
 * (weft_scope_opts.compact): each of the two parks of a round trip copies
 * the parking task's stack out and gives its pages back, and each resume
 * copies it in again (a page fault). Value: elapsed / N, in ns/roundtrip,
 * the cost of a compact task's park and resume against pingpong's. Not in
 * bench/compare (no peer has compact tasks). N defaults to 100,000.
 */
#define PP_NAME "pingpong-compact"
#define PP_DEADLINE 0
#define PP_COMPACT 1
#define PP_N 100000
#include "pingpong.h"
