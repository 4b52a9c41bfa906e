/* SPDX-License-Identifier: MIT */
/*
 * parked-compact: bench/parked.c with compact tasks (weft_scope_opts.compact).
 */
#define PARKED_COMPACT 1
#include "parked.c"
