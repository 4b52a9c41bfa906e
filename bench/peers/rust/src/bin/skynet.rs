// SPDX-License-Identifier: MIT
//! skynet: a 10-ary tree of tasks over N leaves (N rounded down to a power
//! of 10; 1,000,000 by default). A leaf returns its ordinal; an inner node
//! spawns its 10 children, awaits their JoinHandles in order and returns the
//! sum. All cores. Value: elapsed, ms.
use std::future::Future;
use std::time::Instant;
use weft_peers::*;

/// The sum of the leaves first .. first+size-1. Written as a function
/// returning a `Send` future rather than an `async fn`: the recursion
/// through `tokio::spawn` needs the bound stated.
fn node(first: u64, size: u64) -> impl Future<Output = u64> + Send + 'static {
    async move {
        if size == 1 {
            return first;
        }
        let step = size / 10;
        let kids: [_; 10] =
            std::array::from_fn(|i| tokio::spawn(node(first + i as u64 * step, step)));
        let mut sum = 0;
        for kid in kids {
            sum += kid.await.unwrap();
        }
        sum
    }
}

fn main() {
    let n = n(1_000_000);
    let mut leaves = 1;
    while leaves <= n / 10 {
        leaves *= 10;
    }
    if leaves != n {
        eprintln!("skynet: N rounded down to a power of 10: {} leaves", leaves);
    }
    let rt = all_cores(false);
    let (elapsed, sum) = rt.block_on(async move {
        let start = Instant::now();
        let sum = tokio::spawn(node(0, leaves)).await.unwrap();
        (start.elapsed(), sum)
    });
    let want = leaves * (leaves - 1) / 2;
    check(sum == want, || format!("root {} != {}", sum, want));
    print("skynet", elapsed.as_nanos() as f64 / 1e6, 1, "ms");
}
