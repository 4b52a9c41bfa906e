/* SPDX-License-Identifier: MIT */
/*
 * wake-compact: bench/wake.c with compact tasks (weft_scope_opts.compact).
 */
#define WAKE_COMPACT 1
#include "wake.c"
