/* SPDX-License-Identifier: MIT */
/*
 * The observe layer: seeing inside a running program. Each part keeps its
 * own block below.
 */
#ifndef WEFT_OBSERVE_H
#define WEFT_OBSERVE_H

#include "actor.h"

/* ---- deadlocks (deadlock.c) ---- */

/* Sets up detection for rt as cfg asks (nothing for WEFT_DEADLOCK_IGNORE):
 * the scheduler's all-idle hook and the mutex layer's cycle hook. Before
 * any task runs. Returns 0 or -ENOMEM. */
int weft__deadlock_init(weft_runtime *rt, const weft_config *cfg);
/* Objects a plain thread or a signal may end a wait on, besides futures
 * (the shutdown request's channel): such waits are never deadlocked. */
void weft__deadlock_outside(weft_runtime *rt, const void *obj);
/* True once a deadlock of every task was found (weft_run then returns
 * -EDEADLK). */
bool weft__deadlock_found(weft_runtime *rt);
void weft__deadlock_fini(weft_runtime *rt);

#endif
