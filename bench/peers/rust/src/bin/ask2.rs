// SPDX-License-Identifier: MIT
//! ask2: the ask benchmark on Tokio's default multi_thread runtime (one
//! worker per CPU): one actor task owning a counter (`mpsc` mailbox of
//! capacity 64), N sequential asks from a client task, a `oneshot` reply
//! per ask. Value: elapsed / N, ns/ask. The body is `run_ask` in lib.rs.
use weft_peers::*;

fn main() {
    run_ask("ask2", all_cores(false), n(1_000_000));
}
