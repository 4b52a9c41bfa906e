/* SPDX-License-Identifier: MIT */
/*
 * examples/sim_counter.c, the example of docs/simulation.md: a seed sweep
 * on the simulated network finds its client's retry counting twice, the
 * seed replays the same failure, and with the idempotency key every seed
 * passes.
 */
#include "t.h"

#define main sim_counter_main
#include "../examples/sim_counter.c"
#undef main

static uint64_t seeds(void)
{
    int n = T_SCALE(300);
    return (uint64_t)(n > 50 ? n : 50);
}

TEST(the_sweep_finds_the_retry_that_counts_twice_and_replays_it)
{
    run r = {0};
    weft_swarm_opts o;
    sweep_opts(&o, seeds());
    o.verbose = -1;
    weft_swarm_stats st;
    ASSERT(weft_swarm_run(&o, body, &r, &st) > 0);
    ASSERT_EQ(st.failed, 1u);
    ASSERT_EQ(st.first_status, -EPROTO);
    uint64_t seed = st.first_failed_seed;
    ASSERT(seed > 0);
    /* The seed fails again, the same way, with the same event log. */
    uint64_t hash = 0;
    for (int k = 0; k < 2; k++) {
        ASSERT_EQ(weft_swarm_replay(&o, seed, 0, 0, NULL, body, &r), -EPROTO);
        ASSERT(r.server.value > r.believed);
        ASSERT_EQ(r.believed, INCREMENTS);
        if (k)
            ASSERT_EQ(weft_sim_log_hash(), hash);
        hash = weft_sim_log_hash();
    }
    /* With the fault sites the shrinking left, it still fails. */
    if (st.shrunk)
        ASSERT_EQ(
            weft_swarm_replay(&o, seed, 1, st.shrunk_sites, NULL, body, &r),
            -EPROTO);
}

TEST(with_the_idempotency_key_every_seed_passes)
{
    run r = {.server = {.fixed = 1}};
    weft_swarm_opts o;
    sweep_opts(&o, seeds());
    o.verbose = -1;
    o.require_sometimes = 1; /* and some increments were retried */
    weft_swarm_stats st;
    ASSERT_EQ(weft_swarm_run(&o, body, &r, &st), 0);
    ASSERT_EQ(st.failed, 0u);
    ASSERT_EQ(st.runs, seeds());
    ASSERT(st.checked > 0);
    ASSERT_EQ(st.nondeterministic, 0u);
    ASSERT_EQ(st.sometimes_never, 0);
}
