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
#include <time.h>

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

/* CLOCK_MONOTONIC in nanoseconds. */
static inline int64_t bench_clock_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
