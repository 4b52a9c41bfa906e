/* SPDX-License-Identifier: MIT */
/*
 * timeout: pingpong with deadlines. Two tasks, two rendezvous (capacity 0)
 * channels of int64, N round trips, and every receive is made under a 1 s
 * deadline. One worker. Value: elapsed / N, in ns/roundtrip. See
 * bench/README.md; the peers (bench/peers/) are Go (one reused time.Timer per
 * goroutine, Reset before a select on the channel and the timer, Stop
 * after it) and Tokio (each mpsc recv wrapped in tokio::time::timeout).
 *
 * Every receive is weft_chan_recv_until(c, &v, weft_now() + WEFT_SEC); the
 * deadline never passes, so -ETIMEDOUT fails the run. With one worker each
 * receive finds its channel empty (the other task has not run yet), so it
 * arms its timer, blocks, and disarms the timer when the value arrives.
 * As in the peers, the echo task makes exactly N receives (there is no
 * close), and the pinger's sum of answers is checked against N(N-1)/2 + N.
 *
 * The body is bench/pingpong.h, shared with pingpong.
 */
#define PP_NAME "timeout"
#define PP_DEADLINE WEFT_SEC
#include "pingpong.h"
