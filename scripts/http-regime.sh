#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Who limits the http benchmark: the server or the client?
#
#   scripts/http-regime.sh [ROUNDS] [NAME=[VAR=VALUE ...] SERVER-BINARY ...]
#
# Runs each server (default: weft's bench_http, and the peers' builds in
# build/peers when bench/compare has made them) under the http
# benchmark's load, `wrk -t1 -c64 -d5s`, in alternating rounds, and prints
# per run: requests/s; the share of one core that wrk's thread and the server
# (all its threads) used over the 3 s steady window from 1 s in; the
# machine's idle share over the same window (of both cores); and the CPU
# time wrk and the server each spent per request, and the server's system
# calls per request over the window (perf's raw_syscalls tracepoint; "-"
# where perf cannot count it). A client at ~100% of
# its core is the bottleneck: then only what the server makes the
# client's core pay per request can move requests/s. A server takes a
# port as its first argument and prints `LISTEN <port>` on stderr; a spec
# may set its environment before the binary (quote it), which is how
# weft's server runs on each poller: by default `weft` (epoll) and
# `weft-uring` (WEFT_POLLER=io_uring).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
rounds=3
if [[ ${1:-} =~ ^[0-9]+$ ]]; then rounds=$1; shift; fi
specs=("$@")
if ((${#specs[@]} == 0)); then
    "$repo/bench/run" http >/dev/null 2>&1 || { echo "bench/run http failed" >&2; exit 1; }
    specs=("weft=$repo/build/bench/bench_http"
        "weft-uring=WEFT_POLLER=io_uring $repo/build/bench/bench_http")
    for p in go/http rust/release/http libuv/http; do
        name=${p%%/*}; [[ $name == rust ]] && name=tokio
        [[ -x $repo/build/peers/$p ]] && specs+=("$name=$repo/build/peers/$p")
    done
fi
command -v wrk >/dev/null || { echo "wrk is missing: scripts/deps.sh http" >&2; exit 2; }
hz=$(getconf CLK_TCK)

ticks() { awk '{print $14 + $15}' "$1" 2>/dev/null || echo 0; }
idle() { awk '/^cpu / {print $5 + $6}' /proc/stat; }

perf_ok=0
perf stat -x, -e raw_syscalls:sys_enter -- true >/dev/null 2>&1 && perf_ok=1
printf '%-10s %9s %8s %8s %6s %12s %12s %9s\n' server req/s wrk% server% idle% 'wrk us/req' 'srv us/req' 'sys/req'
for ((r = 1; r <= rounds; r++)); do
    for spec in "${specs[@]}"; do
        name=${spec%%=*} bin=${spec#*=}
        log=$(mktemp)
        # shellcheck disable=SC2086 # the spec's words: VAR=VALUE ... BINARY
        env $bin 0 2>"$log" >/dev/null &
        pid=$!
        port=
        for ((i = 0; i < 100; i++)); do
            port=$(awk '/^LISTEN [0-9]+$/ {print $2; exit}' "$log")
            [[ -n $port ]] && break
            sleep 0.1
        done
        rm -f "$log"
        if [[ -z $port ]]; then
            echo "$name: no LISTEN line" >&2; kill "$pid" 2>/dev/null || true; continue
        fi
        out=$(mktemp)
        wrk -t1 -c64 -d5s "http://127.0.0.1:$port/" >"$out" 2>&1 &
        wpid=$!
        sleep 1
        # wrk's load thread: the newest of its threads.
        wt=$(ls /proc/$wpid/task | sort -n | tail -1)
        w0=$(ticks /proc/$wpid/task/$wt/stat) s0=$(ticks /proc/$pid/stat) i0=$(idle)
        t0=$(date +%s%N)
        pf=$(mktemp)
        if ((perf_ok)); then
            perf stat -x, -e raw_syscalls:sys_enter -p "$pid" -- sleep 3 2>"$pf" >/dev/null || sleep 3
        else
            sleep 3
        fi
        sc=$(awk -F, '/raw_syscalls:sys_enter/ {print $1; exit}' "$pf")
        rm -f "$pf"
        w1=$(ticks /proc/$wpid/task/$wt/stat) s1=$(ticks /proc/$pid/stat) i1=$(idle)
        t1=$(date +%s%N)
        wait "$wpid" || true
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        rps=$(awk '/^Requests\/sec:/ {print $2}' "$out")
        rm -f "$out"
        [[ -n $rps ]] || { echo "$name: wrk failed" >&2; continue; }
        awk -v n="$name" -v rps="$rps" -v w=$((w1 - w0)) -v s=$((s1 - s0)) \
            -v id=$((i1 - i0)) -v hz="$hz" -v ns=$((t1 - t0)) -v sc="${sc:-}" 'BEGIN {
            sec = ns / 1e9; req = rps * sec
            sys = sc ~ /^[0-9]+$/ ? sprintf("%9.2f", sc / req) : sprintf("%9s", "-")
            printf "%-10s %9.0f %7.1f%% %7.1f%% %5.1f%% %12.2f %12.2f %s\n", n, rps,
                100 * w / hz / sec, 100 * s / hz / sec, 100 * id / hz / sec / 2,
                1e6 * w / hz / req, 1e6 * s / hz / req, sys }'
    done
done
