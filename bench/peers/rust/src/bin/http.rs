// SPDX-License-Identifier: MIT
//! http: the benchmark's plaintext HTTP/1.1 server, a task per connection
//! on a raw `TcpStream` (no HTTP library), keep-alive and pipelining. Every
//! request head (everything up to an empty line) in what has been read gets
//! the fixed response; the answers to one read go out in one write. All
//! cores, I/O driver only.
//!
//! Usage: http [PORT] (0 or none: any free port). It listens on 127.0.0.1
//! and prints `LISTEN <port>` on stderr once it accepts.
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weft_peers::*;

const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n\r\nHello, World!";
const BUF_SIZE: usize = 16 << 10;

/// Where the first request head in `buf` ends (just past its empty line).
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut i = 3;
    while i < buf.len() {
        if buf[i] == b'\n' && &buf[i - 3..i] == b"\r\n\r" {
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

async fn serve(mut conn: TcpStream) {
    let mut input = vec![0u8; BUF_SIZE];
    let mut out = Vec::with_capacity(BUF_SIZE);
    let mut kept = 0; // bytes of an unfinished request head at input[..kept]
    loop {
        let got = match conn.read(&mut input[kept..]).await {
            Ok(0) | Err(_) => return,
            Ok(got) => got,
        };
        let end = kept + got;
        let mut used = 0;
        out.clear();
        while let Some(len) = head_end(&input[used..end]) {
            used += len;
            out.extend_from_slice(RESPONSE);
        }
        input.copy_within(used..end, 0);
        kept = end - used;
        if kept == input.len() {
            return; // a request head that does not fit
        }
        if !out.is_empty() && conn.write_all(&out).await.is_err() {
            return;
        }
    }
}

fn main() {
    let port: u16 = match std::env::args().nth(1) {
        None => 0,
        Some(p) => p.parse().unwrap_or_else(|_| {
            eprintln!("bad port {:?}", p);
            std::process::exit(2)
        }),
    };
    let rt = all_cores(true);
    rt.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| {
                eprintln!("http: {}", e);
                std::process::exit(1)
            });
        eprintln!("LISTEN {}", listener.local_addr().unwrap().port());
        loop {
            match listener.accept().await {
                Ok((conn, _)) => {
                    let _ = conn.set_nodelay(true);
                    tokio::spawn(serve(conn));
                }
                Err(e) => eprintln!("http: accept: {}", e),
            }
        }
    });
}
