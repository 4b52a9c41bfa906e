/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the benchmark programs: reading N and timing.
 */
#ifndef WEFT_BENCH_H
#define WEFT_BENCH_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"

/* N from the first argument (the peers' meaning), or def; exits 2 on a bad
 * value. */
static inline long bench_n(int argc, char **argv, long def)
{
    char *end;
    long n;

    if (argc < 2)
        return def;
    errno = 0;
    n = strtol(argv[1], &end, 10);
    if (errno || end == argv[1] || *end || n <= 0) {
        fprintf(stderr, "bad N \"%s\"\n", argv[1]);
        exit(2);
    }
    return n;
}

/* The placement variant in the second argument, as actor32 and chanflow
 * take it: none, "split" (some tasks start on the other worker: *split
 * 1) or "split-movable" (the same in a scope with
 * weft_scope_opts.movable: *split and *movable 1). Returns the BENCH
 * line's suffix ("", "-split", "-split-movable"); exits 2 on another
 * word, naming the benchmark. */
static inline const char *bench_split(const char *name, int argc, char **argv,
                                      int *split, int *movable)
{
    *split = *movable = 0;
    if (argc < 3)
        return "";
    *split = 1;
    if (strcmp(argv[2], "split") == 0)
        return "-split";
    *movable = 1;
    if (strcmp(argv[2], "split-movable") == 0)
        return "-split-movable";
    fprintf(stderr, "%s: unknown variant '%s'\n", name, argv[2]);
    exit(2);
}

/* CLOCK_MONOTONIC in nanoseconds. */
static inline int64_t bench_clock_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The fault plan of a run: with BENCH_FAULTS=1 in the environment, a
 * plan that fails nothing, so that every fault site counts its passes
 * (the cost of the sites switched on; a library built with WEFT_FAULTS=ON
 * only, another refuses the plan); else NULL (the sites, if compiled in,
 * are a load and a branch each). */
static inline const weft_fault_plan *bench_faults(void)
{
    static const weft_fault_plan none_fail;
    const char *s = getenv("BENCH_FAULTS");
    return s && s[0] == '1' ? &none_fail : NULL;
}

#endif
