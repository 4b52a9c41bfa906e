// SPDX-License-Identifier: MIT
//! spawn: one task spawns N tasks, each adds 1 to a shared atomic counter,
//! and waits for them all with a `Countdown` (Go's WaitGroup). All cores.
//! Value: elapsed / N, ns/task. The spawning loop and the clock run in a
//! task, as weft's root task and Go's main goroutine do, so the spawns go
//! to that worker's own queue.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;
use weft_peers::*;

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn main() {
    let n = n(1_000_000);
    let rt = all_cores(false);
    let elapsed = rt.block_on(async move {
        let spawner = tokio::spawn(async move {
            let all = Countdown::leaked(n as usize);
            let start = Instant::now();
            for _ in 0..n {
                tokio::spawn(async move {
                    COUNTER.fetch_add(1, Relaxed);
                    all.done();
                });
            }
            all.wait().await;
            start.elapsed()
        });
        spawner.await.unwrap()
    });
    let got = COUNTER.load(Relaxed);
    check(got == n, || format!("counter {} != {}", got, n));
    print("spawn", per_op(elapsed, n), 1, "ns/task");
}
