/* SPDX-License-Identifier: MIT */
/*
 * ask2: the ask benchmark on all cores, every task placed by the runtime's
 * default (workers = 0, no pinning, the actor spawned with worker = 0):
 * what a program started with weft's defaults gets. Value: elapsed / N, in
 * ns/ask. See bench/README.md; the peers (bench/peers/) are ask's with Go's
 * default GOMAXPROCS, Tokio's multi_thread runtime and every Erlang
 * scheduler.
 *
 * The body is bench/ask.h, shared with ask.
 */
#define ASK_NAME "ask2"
#define ASK_WORKERS 0
#include "ask.h"
