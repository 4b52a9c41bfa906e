// SPDX-License-Identifier: MIT
//! pingpong: two tasks and two `tokio::sync::mpsc` channels of i64 on a
//! current_thread runtime. The pinger sends 0 .. N-1 and adds up the
//! answers, then drops its sender; the echo task answers every value with
//! value + 1 until its channel is closed. Value: elapsed / N, ns/roundtrip.
//!
//! Tokio has no rendezvous channel (capacity 0 panics). With capacity 1 and
//! one value in flight per direction, each receive still finds its channel
//! empty and parks, and each send wakes the other task, as with unbuffered
//! channels.
use std::time::Instant;
use tokio::sync::mpsc;
use weft_peers::*;

fn main() {
    let n = n(1_000_000) as i64;
    let rt = one_worker(false);
    let (elapsed, sum) = rt.block_on(async move {
        let (ping, mut ping_rx) = mpsc::channel::<i64>(1);
        let (pong, mut pong_rx) = mpsc::channel::<i64>(1);
        let start = Instant::now();
        let echo = tokio::spawn(async move {
            while let Some(v) = ping_rx.recv().await {
                pong.send(v + 1).await.unwrap();
            }
        });
        let pinger = tokio::spawn(async move {
            let mut sum = 0;
            for i in 0..n {
                ping.send(i).await.unwrap();
                sum += pong_rx.recv().await.unwrap();
            }
            sum // dropping `ping` closes it: the echo task ends
        });
        let sum = pinger.await.unwrap();
        echo.await.unwrap();
        (start.elapsed(), sum)
    });
    let want = n * (n - 1) / 2 + n;
    check(sum == want, || format!("sum {} != {}", sum, want));
    print("pingpong", per_op(elapsed, n as u64), 1, "ns/roundtrip");
}
