// SPDX-License-Identifier: MIT
//! switch: two tasks each call `tokio::task::yield_now()` N times on a
//! current_thread runtime. Value: elapsed / 2N, ns/switch. The clock runs
//! inside `block_on`, from before the first spawn to after both are joined.
use std::time::Instant;
use weft_peers::*;

fn main() {
    let n = n(10_000_000);
    let rt = one_worker(false);
    let (elapsed, yields) = rt.block_on(async move {
        let start = Instant::now();
        let a = tokio::spawn(yielder(n));
        let b = tokio::spawn(yielder(n));
        let yields = a.await.unwrap() + b.await.unwrap();
        (start.elapsed(), yields)
    });
    check(yields == 2 * n, || {
        format!("yields {} != {}", yields, 2 * n)
    });
    print("switch", per_op(elapsed, 2 * n), 1, "ns/switch");
}

/// Yields n times; returns how many yields it made.
async fn yielder(n: u64) -> u64 {
    let mut made = 0;
    for _ in 0..n {
        tokio::task::yield_now().await;
        made += 1;
    }
    made
}
