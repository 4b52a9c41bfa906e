/* SPDX-License-Identifier: MIT */
/*
 * simecho: seeds per second of a TCP echo client and server in
 * simulation (weft.h section 17). Each seed is a simulated run of its
 * own (weft_config.sim, one seeded worker, the virtual clock): a server
 * host runs examples/echo_server.c's server; four clients on the main host each
 * connect and make ten round trips of 64 bytes over a network with the default
 * latency and jitter, datagram-free. Checked: every echo came back as
 * sent. N (the first argument, 1,000) is the number of seeds. Value:
 * seeds / elapsed, in seeds/s (the elapsed time covers each run's start
 * and end). Not in bench/compare: no peer simulates a network.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "weft.h"

/* The server is examples/echo_server.c's, run as a simulated host (it
 * says where it listens on stderr, each seed). */
#define main echo_example_main
#include "../examples/echo_server.c"
#undef main

#define CLIENTS 4
#define TRIPS 10
#define MSG 64

static int port = 7;

static int client(void *arg)
{
    int *bad = arg;
    int fd = weft_tcp_connect("server", port, WEFT_NEVER);
    if (fd < 0)
        return fd;
    char out[MSG], in[MSG];
    for (int i = 0; i < TRIPS; i++) {
        memset(out, 'a' + i, sizeof out);
        if (weft_write_all(fd, out, MSG, NULL, WEFT_NEVER) ||
            weft_read_exact(fd, in, MSG, NULL, WEFT_NEVER) ||
            memcmp(in, out, MSG) != 0)
            ++*bad;
    }
    weft_close(fd);
    return 0;
}

static int sweep_root(void *arg)
{
    int *bad = arg;
    weft_sim_host *h;
    int rc = weft_sim_host_new(&h, "server");
    if (rc || (rc = weft_sim_host_start(h, root, &port)))
        return rc;
    weft_scope *s;
    if ((rc = weft_scope_open(&s, NULL)) != 0)
        return rc;
    for (int i = 0; i < CLIENTS; i++)
        if (weft_spawn(s, client, bad) < 0)
            ++*bad;
    rc = weft_scope_join(s);
    weft_scope_free(s);
    weft_sim_host_crash(h);
    return rc;
}

int main(int argc, char **argv)
{
    long n = bench_n(argc, argv, 1000);
    static const weft_sim_opts sim;
    int bad = 0;
    int64_t t0 = bench_clock_ns();
    for (long i = 1; i <= n; i++) {
        weft_config cfg = {
            .sim = &sim, .seed = (uint64_t)i, .faults = bench_faults()};
        int rc = weft_run(&cfg, sweep_root, &bad);
        if (rc || bad) {
            fprintf(stderr, "simecho: seed %ld: %s, %d echoes wrong\n", i,
                    rc ? weft_strerror(rc) : "ok", bad);
            return 1;
        }
    }
    double secs = (double)(bench_clock_ns() - t0) / 1e9;
    weft_fault_stats fs;
    if (bench_faults() && weft_fault_stats_get(&fs) == 0) {
        uint64_t passes = 0;
        for (int s = 0; s < WEFT_FAULT_SITES; s++)
            passes += fs.passes[s];
        fprintf(stderr, "simecho: the last seed passed %llu fault sites\n",
                (unsigned long long)passes);
    }
    printf("BENCH simecho weft %.0f seeds/s\n", (double)n / secs);
    return 0;
}
