/* SPDX-License-Identifier: MIT */
/*
 * What the NATS benchmarks (nats_ask.c, nats_jobs.c) share: the server's
 * URL, and two connections in a scope of their own.
 */
#ifndef WEFT_BENCH_NATS_H
#define WEFT_BENCH_NATS_H

#include <stdlib.h>

#include "weft.h"
#include "weft_nats.h"

/* The server: the second argument, else $NATS_URL (bench/run and
 * bench/compare set it), else nats.c's default. */
static inline const char *bench_nats_url(int argc, char **argv)
{
    if (argc > 2)
        return argv[2];
    return getenv("NATS_URL") ? getenv("NATS_URL") : "nats://127.0.0.1:4222";
}

/* Opens *sc and connects *c and *d to url, their drivers in it. Returns 0
 * or the first error. */
static inline int bench_nats_open(const char *url, weft_scope **sc,
                                  weft_nats_conn **c, weft_nats_conn **d)
{
    weft_time deadline = weft_now() + 10 * WEFT_SEC;
    weft_nats_opts o = {.url = url};
    int rc = weft_scope_open(sc, NULL);
    if (rc == 0)
        rc = weft_nats_connect(*sc, &o, c, deadline);
    if (rc == 0)
        rc = weft_nats_connect(*sc, &o, d, deadline);
    return rc;
}

/* Closes c and d, joins and frees sc; returns rc, else the join's. */
static inline int bench_nats_close(weft_scope *sc, weft_nats_conn *c,
                                   weft_nats_conn *d, int rc)
{
    weft_time deadline = weft_now() + 10 * WEFT_SEC;
    weft_nats_close(c, deadline);
    weft_nats_close(d, deadline);
    int jrc = weft_scope_join(sc);
    weft_scope_free(sc);
    return rc ? rc : jrc;
}

#endif
