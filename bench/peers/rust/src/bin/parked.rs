// SPDX-License-Identifier: MIT
//! parked: N tasks on a current_thread runtime, each blocked receiving from
//! its own `async_channel::bounded(1)` of u64 (the leaner of the two
//! channels the benchmark allows: see bench/peers/README.md). Peak RSS
//! (VmHWM) is read before the first channel is made and again once every
//! task has started; then each is sent its ordinal and all are awaited with
//! a `Countdown`; the sum of what they received is checked. Value: (peak
//! RSS after - before) / N, bytes/task.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use weft_peers::*;

static STARTED: AtomicU64 = AtomicU64::new(0);
static SUM: AtomicU64 = AtomicU64::new(0);

fn main() {
    let n = n(100_000);
    let rt = one_worker(false);
    let (before, after) = rt.block_on(async move {
        let before = peak_rss();
        let all = Countdown::leaked(n as usize);
        let senders: Vec<_> = (0..n)
            .map(|_| {
                let (tx, rx) = async_channel::bounded::<u64>(1);
                tokio::spawn(async move {
                    STARTED.fetch_add(1, Relaxed);
                    SUM.fetch_add(rx.recv().await.unwrap(), Relaxed);
                    all.done();
                });
                tx
            })
            .collect();
        while STARTED.load(Relaxed) < n {
            tokio::task::yield_now().await;
        }
        let after = peak_rss();
        for (i, tx) in senders.iter().enumerate() {
            tx.send(i as u64).await.unwrap();
        }
        all.wait().await;
        (before, after)
    });
    let (sum, want) = (SUM.load(Relaxed), n * (n - 1) / 2);
    check(sum == want, || format!("sum {} != {}", sum, want));
    print(
        "parked",
        (after - before) as f64 / n as f64,
        0,
        "bytes/task",
    );
}
