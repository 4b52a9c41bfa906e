/* SPDX-License-Identifier: MIT */
/*
 * ask: one actor owning a counter, with a bounded mailbox of capacity 64;
 * one client makes N=1,000,000 asks in sequence, each "add 1 and reply with
 * the new value", waiting for each reply; the last reply is checked == N.
 * One worker. Value: elapsed / N, in ns/ask. See bench/README.md; the peers
 * (bench/peers/) are a goroutine with a chan mailbox and one reused reply
 * channel (GOMAXPROCS(1)), a Tokio task with an mpsc mailbox and a oneshot
 * reply per ask (current_thread), and an Erlang process (erl +S 1:1).
 *
 * The body is bench/ask.h, shared with ask2.
 */
#define ASK_NAME "ask"
#define ASK_WORKERS 1
#include "ask.h"
