// SPDX-License-Identifier: MIT
//! ring: M=1,000 tasks in a ring on a current_thread runtime, each with a
//! `tokio::sync::mpsc` mailbox of capacity 16, each forwarding the token it
//! receives, decremented, to the next; the token starts at N in the first
//! mailbox, and the task that receives 0 sends it to the main task. Value:
//! elapsed / N, ns/hop.
//!
//! Spawning is not timed: the main task waits (a `Countdown`) until every
//! task has started, then the clock runs from before the first send to the
//! receipt of the final token. The task that received 0 returns, dropping
//! its successor's only sender, and so on around the ring: all end.
use std::time::Instant;
use tokio::sync::mpsc;
use weft_peers::*;

const M: usize = 1000;

fn main() {
    let n = n(1_000_000) as i64;
    let rt = one_worker(false);
    let (elapsed, token) = rt.block_on(async move {
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..M).map(|_| mpsc::channel::<i64>(16)).unzip();
        let (done, mut final_token) = mpsc::channel::<i64>(1);
        let started = Countdown::leaked(M);
        let first = senders[0].clone();
        let mut tasks = Vec::with_capacity(M);
        for (i, mut inbox) in receivers.into_iter().enumerate() {
            let next = senders[(i + 1) % M].clone();
            let done = done.clone();
            tasks.push(tokio::spawn(async move {
                started.done();
                while let Some(t) = inbox.recv().await {
                    if t == 0 {
                        done.send(t).await.unwrap();
                        return;
                    }
                    next.send(t - 1).await.unwrap();
                }
            }));
        }
        drop(senders); // each mailbox's one sender is now its predecessor's
        started.wait().await;

        let start = Instant::now();
        first.send(n).await.unwrap();
        drop(first);
        let token = final_token.recv().await.unwrap();
        let elapsed = start.elapsed();
        for t in tasks {
            t.await.unwrap();
        }
        (elapsed, token)
    });
    check(token == 0, || format!("final token {} != 0", token));
    print("ring", per_op(elapsed, n as u64), 1, "ns/hop");
}
