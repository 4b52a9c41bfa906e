// SPDX-License-Identifier: MIT
//! ask: one actor task owning a counter (`tokio::sync::mpsc` mailbox of
//! capacity 64), N sequential asks "add 1, reply with the new value" from a
//! client task, a `oneshot` reply per ask, on a current_thread runtime.
//! Value: elapsed / N, ns/ask. The body is `run_ask` in lib.rs.
use weft_peers::*;

fn main() {
    run_ask("ask", one_worker(false), n(1_000_000));
}
