// SPDX-License-Identifier: MIT
//! timeout: pingpong where every receive waits at most 1 s, on a
//! current_thread runtime with the timer driver. Two tasks, two
//! `tokio::sync::mpsc` channels of i64 with capacity 1 (see pingpong.rs);
//! the echo task makes exactly N receives. Every receive is wrapped in
//! `tokio::time::timeout`, which polls the receive first and registers its
//! timer only when that is pending: here it always is, as the other task
//! has not run yet, so each receive adds a timer entry and drops it once
//! the value arrives. A timeout fails the run. Value: elapsed / N,
//! ns/roundtrip.
use std::time::{Duration, Instant};
use tokio::sync::mpsc::Receiver;
use weft_peers::*;

const LIMIT: Duration = Duration::from_secs(1);

/// Receives from `rx` within LIMIT.
async fn recv(rx: &mut Receiver<i64>) -> i64 {
    match tokio::time::timeout(LIMIT, rx.recv()).await {
        Ok(Some(v)) => v,
        Ok(None) => {
            check(false, || "channel closed".to_string());
            unreachable!()
        }
        Err(_) => {
            check(false, || "receive timed out".to_string());
            unreachable!()
        }
    }
}

fn main() {
    let n = n(1_000_000) as i64;
    let rt = one_worker(true);
    let (elapsed, sum) = rt.block_on(async move {
        let (ping, mut ping_rx) = tokio::sync::mpsc::channel::<i64>(1);
        let (pong, mut pong_rx) = tokio::sync::mpsc::channel::<i64>(1);
        let start = Instant::now();
        let echo = tokio::spawn(async move {
            for _ in 0..n {
                let v = recv(&mut ping_rx).await;
                pong.send(v + 1).await.unwrap();
            }
        });
        let pinger = tokio::spawn(async move {
            let mut sum = 0;
            for i in 0..n {
                ping.send(i).await.unwrap();
                sum += recv(&mut pong_rx).await;
            }
            sum
        });
        let sum = pinger.await.unwrap();
        echo.await.unwrap();
        (start.elapsed(), sum)
    });
    let want = n * (n - 1) / 2 + n;
    check(sum == want, || format!("sum {} != {}", sum, want));
    print("timeout", per_op(elapsed, n as u64), 1, "ns/roundtrip");
}
