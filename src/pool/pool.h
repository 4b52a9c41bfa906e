/* SPDX-License-Identifier: MIT */
/*
 * The pool layer (pool.c): resource pools, weft_pool_*. What the layers
 * above read of a pool: its wait kind, for the dump and the deadlock
 * detector, and its name.
 */
#ifndef WEFT_POOL_H
#define WEFT_POOL_H

#include "wait/record.h"

/* A task waiting in weft_pool_acquire or weft_pool_close (obj: the pool). */
extern const weft__wait_kind weft__wk_pool;

/* The name of the pool obj (a weft_pool recorded as a wait's object), ""
 * if it has none. Immutable from weft_pool_new on: any thread, while the
 * pool lives. */
const char *weft__pool_name(const void *obj);

#endif
