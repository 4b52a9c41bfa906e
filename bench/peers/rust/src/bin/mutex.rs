// SPDX-License-Identifier: MIT
//! mutex: 4 tasks each lock a `tokio::sync::Mutex<u64>`, increment the
//! counter it guards and unlock, N times; the counter must end at 4N. All
//! cores. Value: elapsed / 4N, ns/op.
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Mutex;
use weft_peers::*;

const LOCKERS: u64 = 4;

fn main() {
    let n = n(1_000_000);
    let rt = all_cores(false);
    let (elapsed, counter) = rt.block_on(async move {
        let counter = Arc::new(Mutex::new(0u64));
        let start = Instant::now();
        let lockers: Vec<_> = (0..LOCKERS)
            .map(|_| {
                let counter = Arc::clone(&counter);
                tokio::spawn(async move {
                    for _ in 0..n {
                        *counter.lock().await += 1;
                    }
                })
            })
            .collect();
        for l in lockers {
            l.await.unwrap();
        }
        let elapsed = start.elapsed();
        let count = *counter.lock().await;
        (elapsed, count)
    });
    check(counter == LOCKERS * n, || {
        format!("counter {} != {}", counter, LOCKERS * n)
    });
    print("mutex", per_op(elapsed, LOCKERS * n), 1, "ns/op");
}
