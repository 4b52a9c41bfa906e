/* SPDX-License-Identifier: MIT */
/*
 * The observe layer: seeing inside a running program (section 14 of
 * weft.h). It reads the layers below, never changes how they run; the
 * runtime layer above starts and stops what runs beside the workers.
 */
#ifndef WEFT_OBSERVE_H
#define WEFT_OBSERVE_H

#include "actor.h"

/* ---- statistics, lag and the watchdog (stats.c) ---- */

struct weft__watchdog;
/* Starts rt's watchdog thread as c asks (c->watchdog_ns), after rt's
 * workers have started: returns it, or NULL if c turns it off or the
 * thread cannot be made (then the runtime runs without one, and says so
 * on stderr). On weft_run's thread. */
struct weft__watchdog *weft__watchdog_start(weft_runtime *rt,
                                            const weft_config *c);
/* Stops and frees it (NULL: nothing), before rt's workers are freed. */
void weft__watchdog_stop(struct weft__watchdog *wd);
/* The watchdog's defaults and check of the config: 0 or -EINVAL. */
int weft__watchdog_check(const weft_config *c);

#endif
