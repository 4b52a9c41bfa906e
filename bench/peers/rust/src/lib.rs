// SPDX-License-Identifier: MIT
//! What every Tokio peer benchmark shares: N from the command line, the one
//! stdout line, the checksum failure, peak RSS, the two runtime shapes, and
//! a countdown to wait for many tasks.

use std::process::exit;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::runtime::{Builder, Runtime};
use tokio::sync::Notify;

/// The first argument as a positive integer, or `default` when there is
/// none; a bad value exits 2.
pub fn n(default: u64) -> u64 {
    let arg = match std::env::args().nth(1) {
        Some(arg) => arg,
        None => return default,
    };
    match arg.parse::<u64>() {
        Ok(v) if v > 0 => v,
        _ => {
            eprintln!("bad N {:?}", arg);
            exit(2)
        }
    }
}

/// Writes `BENCH <name> tokio <value> <unit>`, value with `prec` decimals.
pub fn print(name: &str, value: f64, prec: usize, unit: &str) {
    println!("BENCH {} tokio {:.*} {}", name, prec, value, unit);
}

/// `elapsed / ops` in nanoseconds.
pub fn per_op(elapsed: Duration, ops: u64) -> f64 {
    elapsed.as_nanos() as f64 / ops as f64
}

/// Exits 1, printing nothing on stdout, when `ok` is false.
pub fn check(ok: bool, what: impl FnOnce() -> String) {
    if !ok {
        eprintln!("checksum failed: {}", what());
        exit(1);
    }
}

/// VmHWM of /proc/self/status in bytes; exits 1 if it cannot be read.
pub fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok());
    match kb {
        Some(kb) => kb * 1024,
        None => {
            eprintln!("cannot read VmHWM from /proc/self/status");
            exit(1)
        }
    }
}

/// "One worker": a current_thread runtime. `time` enables the timer driver;
/// no other driver is enabled (none is used, and an enabled I/O driver is
/// polled on every trip through the scheduler).
pub fn one_worker(time: bool) -> Runtime {
    let mut b = Builder::new_current_thread();
    if time {
        b.enable_time();
    }
    b.build().expect("runtime")
}

/// "All cores": a multi_thread runtime with one worker per available CPU
/// (Tokio's default), the I/O driver only when `io` asks for it.
pub fn all_cores(io: bool) -> Runtime {
    let mut b = Builder::new_multi_thread();
    if io {
        b.enable_io();
    }
    b.build().expect("runtime")
}

/// Waits for a known number of tasks, as Go's sync.WaitGroup: each calls
/// `done` once, one task awaits `wait`. Keeping a JoinHandle per task
/// instead would keep every finished task's memory until it is joined.
pub struct Countdown {
    left: AtomicUsize,
    zero: Notify,
}

impl Countdown {
    /// A countdown from `n`, leaked so that tasks can share it by reference
    /// (as Go closures share a WaitGroup) without a reference count.
    pub fn leaked(n: usize) -> &'static Countdown {
        Box::leak(Box::new(Countdown {
            left: AtomicUsize::new(n),
            zero: Notify::new(),
        }))
    }

    pub fn done(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            // notify_one keeps a permit if the waiter is not waiting yet.
            self.zero.notify_one();
        }
    }

    pub async fn wait(&self) {
        while self.left.load(Ordering::Acquire) != 0 {
            self.zero.notified().await;
        }
    }
}

/// An ask: what to add, and where to reply (ask's, ask2's and actor32's).
pub type Ask = (i64, tokio::sync::oneshot::Sender<i64>);

/// The actor of the ask benchmarks: owns a counter (nobody else touches
/// it), answers each ask with the new value, ends when every sender is
/// dropped.
pub async fn counter(mut inbox: tokio::sync::mpsc::Receiver<Ask>) {
    let mut count = 0i64;
    while let Some((add, reply)) = inbox.recv().await {
        count += add;
        let _ = reply.send(count);
    }
}

/// The ask and ask2 peers, which differ only in the runtime: one actor, a
/// task owning a counter with an `mpsc` mailbox of capacity 64; a client
/// task makes `n` asks in sequence, each "add 1 and reply with the new
/// value" with a `oneshot` for the reply (Tokio's documented actor
/// pattern), and waits for each reply. The clock runs inside `block_on`
/// from before the actor's spawn to after both tasks have been awaited (the
/// actor ends when the client drops its sender). Checks the last reply ==
/// `n` and prints the BENCH line of `name`.
pub fn run_ask(name: &str, rt: Runtime, n: u64) {
    use tokio::sync::{mpsc, oneshot};

    let (elapsed, last) = rt.block_on(async move {
        let (mailbox, inbox) = mpsc::channel::<Ask>(64);
        let start = std::time::Instant::now();
        let actor = tokio::spawn(counter(inbox));
        let client = tokio::spawn(async move {
            let mut last = 0;
            for _ in 0..n {
                let (reply, answer) = oneshot::channel();
                mailbox.send((1, reply)).await.unwrap();
                last = answer.await.unwrap();
            }
            last // dropping `mailbox` stops the actor
        });
        let last = client.await.unwrap();
        actor.await.unwrap();
        (start.elapsed(), last)
    });
    check(last == n as i64, || format!("last reply {} != {}", last, n));
    print(name, per_op(elapsed, n), 1, "ns/ask");
}
