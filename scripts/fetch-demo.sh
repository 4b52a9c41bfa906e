#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Shows examples/fetch at work against the local fault server
# (test/fault_server.h) on 127.0.0.1: builds both, starts the server on a
# free port, fetches a mix of its paths that succeed, fail, need retries,
# time out and trip a circuit breaker, then stops the server.
#
#   scripts/fetch-demo.sh [BUILD_DIR] [-- FETCH_OPTIONS...]
#
# BUILD_DIR defaults to build/release (make's); any configuration with
# the examples and the libcurl module will do (tests on or off). One
# configured without them (-DWEFT_EXAMPLES=OFF or -DWEFT_CURL=OFF, as the
# sanitizer builds are) is left as it is: the demo then builds in
# BUILD_DIR-demo instead, and says so. Options after "--" go to fetch
# after the demo's own (--json, -q, -c 1, ...). Some URLs fail on
# purpose, so fetch's exit status 1 is the expected one: the script exits
# 0 for fetch's 0 or 1, and with fetch's status otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/release
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    build=$1
    shift
fi
[ "${1:-}" = "--" ] && shift
scripts/deps.sh build curl
# An option of build's cache ("" when it is not set there).
cached() {
    sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" 2>/dev/null || true
}
off() {
    case "$(echo "$1" | tr '[:lower:]' '[:upper:]')" in
    OFF | 0 | NO | FALSE | N) return 0 ;;
    *) return 1 ;;
    esac
}
options=(-DCMAKE_BUILD_TYPE=Release) # for a build dir made here
if off "$(cached WEFT_EXAMPLES)" || off "$(cached WEFT_CURL)"; then
    echo "fetch-demo: $build is configured without the examples or the" \
        "libcurl module (WEFT_EXAMPLES, WEFT_CURL); building in $build-demo"
    build=$build-demo
    options+=(-DWEFT_EXAMPLES=ON -DWEFT_CURL=ON -DWEFT_TESTS=OFF
        -DWEFT_BENCH=OFF)
fi
# Configuring again is cheap, and finds files new since the last time.
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" "${options[@]}" >/dev/null
else
    cmake -S . -B "$build" >/dev/null
fi
if ! cmake --build "$build" -j2 --target fetch fault_server >/dev/null; then
    echo "fetch-demo: building fetch and fault_server in $build failed" \
        "(fetch needs libcurl's development files: scripts/deps.sh curl)"
    exit 1
fi

out=$(mktemp)
log=$(mktemp)
server=""
cleanup() {
    [ -n "$server" ] && kill -9 "$server" 2>/dev/null || true
    rm -f "$out" "$log"
}
trap cleanup EXIT

"$build/fault_server" --port 0 >"$out" 2>"$log" &
server=$!
base=""
for _ in $(seq 100); do
    base=$(head -n 1 "$out")
    [ -n "$base" ] && break
    sleep 0.05
done
if [ -z "$base" ]; then
    echo "fetch-demo: fault_server did not start"
    cat "$log"
    exit 1
fi
port=${base##*:}
port=${port%/}
other="http://localhost:$port/" # another host:port key: its own breaker

urls=(
    "${base}ok"                     # 200
    "${base}bytes/100000"           # 200, 100000 bytes
    "${base}chunked/50000"          # 200, chunked
    "${base}flaky/demo/2"           # 503, 503 (Retry-After: 0), then 200
    "${base}status/429?retry_after=1" # 429: waits 1 s per retry, fails
    "${base}status/404"             # 404: never retried
    "${base}slow/5000"              # times out (-t 1), retried, fails
    "${base}flaky_reset/demo/1"     # reset once, then 200
    "${other}status/500"            # 500 x3: the breaker opens...
    "${other}status/500"
    "${other}status/500"
    "${other}ok"                    # ...and this one fails fast
)
echo "fetch-demo: fault_server at $base"
echo "+ fetch -c 4 -t 1 -r 2 --backoff 0.1:1 --breaker 3:5 --rate 20 $*" \
    "<${#urls[@]} URLs>"
status=0
"$build/fetch" -c 4 -t 1 -r 2 --backoff 0.1:1 --breaker 3:5 --rate 20 "$@" \
    "${urls[@]}" || status=$?

kill -TERM "$server" # weft_main: a graceful stop
wait "$server" || true
server=""
echo "fetch-demo: fetch exited $status (1 is expected: some URLs fail on purpose)"
[ "$status" -le 1 ]
