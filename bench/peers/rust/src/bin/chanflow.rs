// SPDX-License-Identifier: MIT
//! chanflow: 4 consumer and 4 producer tasks share one
//! `async_channel::bounded(1024)` of i64 (Tokio's own channels have a single
//! receiver). N messages in all (rounded down to a multiple of 4): producer
//! p sends p*N/4 .. (p+1)*N/4 - 1. Once every producer is joined the root
//! closes the channel; the consumers receive until it is drained and closed,
//! and the sum and count of what they received are checked. All cores.
//! Value: N / elapsed, Mmsg/s.
use std::time::Instant;
use weft_peers::*;

const PRODUCERS: u64 = 4;
const CONSUMERS: usize = 4;

fn main() {
    let per = n(10_000_000) / PRODUCERS;
    let total = per * PRODUCERS;
    let rt = all_cores(false);
    let (elapsed, sum, count) = rt.block_on(async move {
        let (tx, rx) = async_channel::bounded::<i64>(1024);
        let start = Instant::now();
        let consumers: Vec<_> = (0..CONSUMERS)
            .map(|_| {
                let rx = rx.clone();
                tokio::spawn(async move {
                    let (mut sum, mut count) = (0i64, 0u64);
                    while let Ok(v) = rx.recv().await {
                        sum += v;
                        count += 1;
                    }
                    (sum, count)
                })
            })
            .collect();
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let tx = tx.clone();
                let first = (p * per) as i64;
                tokio::spawn(async move {
                    for v in first..first + per as i64 {
                        tx.send(v).await.unwrap();
                    }
                })
            })
            .collect();
        for p in producers {
            p.await.unwrap();
        }
        tx.close();
        let (mut sum, mut count) = (0, 0);
        for c in consumers {
            let (s, k) = c.await.unwrap();
            sum += s;
            count += k;
        }
        (start.elapsed(), sum, count)
    });
    let want = (total * (total - 1) / 2) as i64;
    check(sum == want && count == total, || {
        format!(
            "sum {} (want {}), count {} (want {})",
            sum, want, count, total
        )
    });
    print(
        "chanflow",
        total as f64 / elapsed.as_secs_f64() / 1e6,
        2,
        "Mmsg/s",
    );
}
