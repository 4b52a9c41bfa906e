// SPDX-License-Identifier: MIT
//! actor32: one actor task owning a counter (`mpsc` mailbox of capacity 64)
//! and 32 client tasks, each making N/32 sequential asks with a `oneshot`
//! reply per ask, on a multi_thread runtime of 2 workers (weft's 2).
//! Value: elapsed / N, ns/ask. The clock runs from before the actor's spawn
//! to after the clients have finished and the actor has exited.
use tokio::runtime::Builder;
use tokio::sync::{mpsc, oneshot};
use weft_peers::*;

const CLIENTS: u64 = 32;

fn main() {
    let mut n = n(100_000);
    n -= n % CLIENTS;
    if n == 0 {
        n = CLIENTS;
    }
    let rt = Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let (elapsed, max) = rt.block_on(async move {
        let (mailbox, inbox) = mpsc::channel::<Ask>(64);
        let start = std::time::Instant::now();
        let actor = tokio::spawn(counter(inbox)); // ask's actor
        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            let mailbox = mailbox.clone();
            clients.push(tokio::spawn(async move {
                let mut last = 0;
                for _ in 0..n / CLIENTS {
                    let (reply, answer) = oneshot::channel();
                    mailbox.send((1, reply)).await.unwrap();
                    last = last.max(answer.await.unwrap());
                }
                last
            }));
        }
        drop(mailbox); // the clients' clones stop the actor when dropped
        let mut max = 0;
        for c in clients {
            max = max.max(c.await.unwrap());
        }
        actor.await.unwrap();
        (start.elapsed(), max)
    });
    check(max == n as i64, || format!("largest reply {} != {}", max, n));
    print("actor32", per_op(elapsed, n), 1, "ns/ask");
}
