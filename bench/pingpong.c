/* SPDX-License-Identifier: MIT */
/*
 * pingpong: two tasks, two rendezvous (capacity 0) channels of int64, N
 * round trips. One worker. Value: elapsed / N, in ns/roundtrip. See
 * bench/README.md; the peers (bench/peers/) are two goroutines on unbuffered
 * chan int64 with GOMAXPROCS(1), and two Tokio tasks on mpsc channels of
 * capacity 1 (Tokio has no rendezvous channel) on a current_thread runtime.
 *
 * As in the peers: the echo task answers every ping with value + 1 until
 * the ping channel is closed; the pinger sends 0 .. N-1, adds up the
 * answers, then closes ping. The sum is checked against N(N-1)/2 + N.
 *
 * The body is bench/pingpong.h, shared with timeout.
 */
#define PP_NAME "pingpong"
#define PP_DEADLINE 0
#include "pingpong.h"
