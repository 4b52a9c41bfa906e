#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs examples/http_server against real clients on 127.0.0.1 only: curl
# for correctness (keep-alive, pipelining, the parser's 400/413/431, its
# 400 to ambiguous framing, a client that never finishes its request), a
# bounded wrk run for load with no socket errors, then SIGTERM: the
# server must exit 0, gracefully.
# With the weft_tls module, a server started with -T serves HTTPS: curl
# checks it against the test certificate (scripts/test-cert.sh).
# Then test/http_slow_clients attacks a second server, started with 2 s
# deadlines, with 1000 slowloris and 1000 non-reading clients: it must
# keep answering a normal client, and close every attacking connection
# once the deadlines pass (about 10 s).
#
#   scripts/http-check.sh [BUILD_DIR]    default build/release (make's)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build http
build=${1:-build/release}
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" -j2 --target http_server http_slow_clients >/dev/null

log=$(mktemp)
certs=$(mktemp -d)
server=""
cleanup() {
    [ -n "$server" ] && kill -9 "$server" 2>/dev/null || true
    rm -f "$log"
    rm -rf "$certs"
}
trap cleanup EXIT

"$build/http_server" 0 2>"$log" &
server=$!
port=""
for _ in $(seq 100); do
    port=$(awk '/^LISTEN [0-9]+$/ {print $2; exit}' "$log")
    [ -n "$port" ] && break
    sleep 0.05
done
[ -n "$port" ] || { echo "http-check: server did not start"; cat "$log"; exit 1; }
url="http://127.0.0.1:$port/"
fail() { echo "http-check: FAIL: $*"; exit 1; }

# One request, the exact answer.
body=$(curl -sS --max-time 5 "$url")
[ "$body" = "Hello, World!" ] || fail "GET body '$body'"
curl -sS --max-time 5 -o /dev/null -w '%{http_code} %{size_download}' "$url" |
    grep -qx '200 13' || fail "GET status/size"

# Keep-alive: curl reuses one connection for several URLs.
n=$(curl -sS --max-time 5 -v "$url" "$url" "$url" 2>&1 |
    grep -c 'Re-using existing connection\|Reusing existing connection' || true)
[ "$n" -ge 2 ] || fail "keep-alive: connection not reused ($n)"

# Raw requests over bash's /dev/tcp: pipelined and split, malformed,
# oversized header block, oversized body, HTTP/1.0 closes.
raw() { # raw REQUEST-BYTES: prints what the server sent until it closed
    exec 3<>"/dev/tcp/127.0.0.1/$port"
    printf '%b' "$1" >&3
    timeout 5 cat <&3 || true
    exec 3>&-
}
req='GET / HTTP/1.1\r\nHost: x\r\n\r\n'
ok=$'HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n\r\nHello, World!'
got=$(raw "$req$req${req}GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
[ "$got" = "$ok$ok$ok$ok" ] || fail "pipelined: '$got'"
raw 'GARBAGE\r\n\r\n' | head -n 1 | grep -q '^HTTP/1.1 400 ' || fail "malformed: no 400"
raw 'GET / HTTP/1.1\r\nBad Header\r\n\r\n' | head -n 1 |
    grep -q '^HTTP/1.1 400 ' || fail "bad header: no 400"
# Ambiguous framing (RFC 9112, 6.3): 400, whatever follows.
raw 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!' |
    head -n 1 | grep -q '^HTTP/1.1 400 ' || fail "two Content-Lengths: no 400"
raw 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5 26\r\n\r\nhello' |
    head -n 1 | grep -q '^HTTP/1.1 400 ' || fail "Content-Length '5 26': no 400"
raw 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n' |
    head -n 1 | grep -q '^HTTP/1.1 400 ' || fail "Transfer-Encoding and Content-Length: no 400"
big=$(head -c 9000 /dev/zero | tr '\0' 'a')
raw "GET / HTTP/1.1\r\nX-Big: $big\r\n\r\n" | head -n 1 |
    grep -q '^HTTP/1.1 431 ' || fail "big header: no 431"
raw 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n' | head -n 1 |
    grep -q '^HTTP/1.1 413 ' || fail "big body: no 413"
got=$(raw 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.0\r\n\r\n')
[ "$got" = "$ok$ok" ] || fail "body skipped, then HTTP/1.0 closes: '$got'"

# A client that sends half a request and stalls is answered by nothing;
# meanwhile the server keeps serving others.
exec 4<>"/dev/tcp/127.0.0.1/$port"
printf 'GET / HT' >&4
[ "$(curl -sS --max-time 5 "$url")" = "Hello, World!" ] ||
    fail "a stalled client blocked the others"
exec 4>&-

# Load: a bounded wrk run, no socket errors, every answer 2xx.
out=$(wrk -t1 -c64 -d2s "$url" 2>&1)
echo "$out" | sed 's/^/  wrk: /'
echo "$out" | grep -q '^Requests/sec:' || fail "wrk did not run"
! echo "$out" | grep -qE 'Socket errors|Non-2xx' || fail "wrk saw errors"

# Graceful shutdown.
kill -TERM "$server"
rc=0
wait "$server" || rc=$?
server=""
[ "$rc" -eq 0 ] || fail "exit status $rc after SIGTERM"

# HTTPS (-T), when http_server was built with weft_tls.
if "$build/http_server" -T /nonexistent /nonexistent 0 2>&1 |
    grep -q 'built without weft_tls'; then
    echo "http-check: HTTPS skipped (http_server built without weft_tls)"
else
    scripts/test-cert.sh "$certs"
    : >"$log"
    "$build/http_server" -T "$certs/cert.pem" "$certs/key.pem" 0 2>"$log" &
    server=$!
    tport=""
    for _ in $(seq 100); do
        tport=$(awk '/^LISTEN [0-9]+$/ {print $2; exit}' "$log")
        [ -n "$tport" ] && break
        sleep 0.05
    done
    [ -n "$tport" ] || { echo "http-check: HTTPS server did not start"; cat "$log"; exit 1; }
    surl="https://localhost:$tport/"
    body=$(curl -sS --max-time 5 --cacert "$certs/cert.pem" "$surl")
    [ "$body" = "Hello, World!" ] || fail "HTTPS GET body '$body'"
    # One TLS connection for several requests, ALPN's http/1.1.
    out=$(curl -sS --max-time 5 --cacert "$certs/cert.pem" -v "$surl" "$surl" 2>&1)
    echo "$out" | grep -q 'ALPN.*accepted http/1.1' || fail "HTTPS: no ALPN http/1.1"
    n=$(echo "$out" | grep -c 'Re-using existing connection\|Reusing existing connection' || true)
    [ "$n" -ge 1 ] || fail "HTTPS keep-alive: connection not reused"
    # Not trusted without the test certificate; plain HTTP is not served.
    rc=0
    curl -sS --max-time 5 -o /dev/null "$surl" 2>/dev/null || rc=$?
    [ "$rc" -eq 60 ] || fail "HTTPS: an untrusted certificate was accepted ($rc)"
    ! curl -sS --max-time 5 -o /dev/null "http://127.0.0.1:$tport/" 2>/dev/null ||
        fail "HTTPS port answered plain HTTP"
    [ "$(curl -sS --max-time 5 -k "$surl")" = "Hello, World!" ] ||
        fail "HTTPS server stopped serving after a bad client"
    kill -TERM "$server"
    rc=0
    wait "$server" || rc=$?
    server=""
    [ "$rc" -eq 0 ] || fail "HTTPS: exit status $rc after SIGTERM"
    echo "http-check: HTTPS ok (port $tport)"
fi

# Slow clients, against a server of their own with short deadlines.
"$build/http_slow_clients" "$build/http_server" 1000 1000 ||
    fail "slow clients"
echo "http-check: ok (port $port)"
