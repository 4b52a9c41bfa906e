/* SPDX-License-Identifier: MIT */
/*
 * http: the plaintext HTTP/1.1 server of bench/README.md. It is
 * examples/http_server.c itself (keep-alive, pipelining, a strict parser,
 * read deadlines); bench/run starts it with port 0, reads "LISTEN <port>",
 * checks its answers and loads it with `wrk -t1 -c64 -d5s`.
 */
#include "bench.h"
#include "weft.h"

/* The example's weft_main_cfg, with bench_faults's plan (BENCH_FAULTS). */
static int bench_main_cfg(const weft_config *cfg, weft_fn fn, void *arg)
{
    weft_config c = *cfg;
    c.faults = bench_faults();
    return weft_main_cfg(&c, fn, arg);
}
#define weft_main_cfg bench_main_cfg
#include "../examples/http_server.c"
