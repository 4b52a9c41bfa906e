#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs examples/fetch against the fault server and checks what it reports
# (a ctest, example_fetch):
#
#   scripts/fetch-check.sh PATH_TO_FETCH PATH_TO_FAULT_SERVER
#
# - with --json, each URL's line: a success at once, one after two 503s
#   (three attempts), a 404 not retried, a 429 whose Retry-After (1 s)
#   was waited for, a reset cured by a retry, a stalled body that times
#   out on every attempt, a name that does not resolve, a refused port
#   (each failure in libcurl's words: which host, which port), a URL
#   that does not parse (and why); exit status 1 (some failed);
# - Ctrl-C in the middle of slow transfers: exit status 130 at once, the
#   summary says what was cancelled and what never started.
# Every URL is on 127.0.0.1 (the unresolvable one is a reserved name).
set -euo pipefail
fetch=${1:?usage: fetch-check.sh PATH_TO_FETCH PATH_TO_FAULT_SERVER}
server_bin=${2:?usage: fetch-check.sh PATH_TO_FETCH PATH_TO_FAULT_SERVER}
work=$(mktemp -d)
server=""
cleanup() {
    [ -z "$server" ] || kill "$server" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
fail() {
    echo "fetch-check: $*" >&2
    for f in "$work"/*; do
        echo "--- $f" >&2
        cat "$f" >&2
    done
    exit 1
}

"$server_bin" --port 0 >"$work/server.out" 2>"$work/server.err" &
server=$!
for _ in $(seq 1 500); do
    [ -s "$work/server.out" ] && break
    kill -0 "$server" 2>/dev/null || fail "fault_server did not start"
    sleep 0.01
done
base=$(head -n 1 "$work/server.out")
case "$base" in http://127.0.0.1:*/) ;; *) fail "no base URL: '$base'" ;; esac

# A port nobody listens on: the server's, after it is gone, would race;
# port 1 (tcpmux) is refused on any ordinary machine.
status=0
"$fetch" --json -q -c 4 -t 0.5 -r 2 --backoff 0.05:0.2 \
    "${base}ok" "${base}flaky/check/2" "${base}status/404" \
    "${base}status/429?retry_after=1" "${base}flaky_reset/check/1" \
    "${base}stall/1000" "http://weft-check.invalid/" "http://127.0.0.1:1/" \
    "http://[::1" >"$work/json" 2>"$work/json.err" || status=$?
[ "$status" -eq 1 ] || fail "exit status $status, not 1"

python3 - "$work/json" "$base" <<'PY' || fail "the JSON report is not as expected"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
base = sys.argv[2]
by = {l["url"]: l for l in lines}
assert len(lines) == 9, len(lines)
def check(url, ok, attempts, status=None, error=None, min_ms=None):
    l = by[url]
    assert l["ok"] is ok, (url, l)
    if attempts is not None:
        assert l["attempts"] == attempts, (url, l)
    if status is not None:
        assert l["status"] == status, (url, l)
    if error is not None:
        assert error in (l["error"] or ""), (url, l)
    if min_ms is not None:
        assert l["ms"] >= min_ms, (url, l)
check(base + "ok", True, 1, 200)
check(base + "flaky/check/2", True, 3, 200)
check(base + "status/404", False, 1, 404, "HTTP 404")
# Retry-After: 1 replaces the 50 ms backoff (its cap is 0.2 s, and the
# server's word is capped by it: so >= 2 waits of 0.2 s).
check(base + "status/429?retry_after=1", False, 3, 429, "HTTP 429", 400)
# A reset: libcurl itself retries a request whose reused connection died,
# so one or two attempts, and it succeeds.
assert by[base + "flaky_reset/check/1"]["ok"] is True
check(base + "stall/1000", False, 3, None, "Timeout", 1500)
# Unresolvable: said at once by a working resolver; one that cannot
# reach its server runs into the request's timeout instead.
l = by["http://weft-check.invalid/"]
assert l["ok"] is False and ("resolve host: weft-check.invalid" in l["error"]
                             or "Timeout" in l["error"]), l
# libcurl's sentence (CURLOPT_ERRORBUFFER) names the port, its code alone
# would not.
check("http://127.0.0.1:1/", False, 3, None, "port 1")
check("http://[::1", False, 0, None, "bad URL: Bad IPv6 address")
for l in lines:
    assert set(l) == {"url", "ok", "status", "bytes", "attempts", "ms",
                      "error"}, l
PY

# Ctrl-C amid 40 slow transfers, 4 at a time: wait until fetch has its 4
# connections open, then one SIGINT.
for _ in $(seq 1 40); do echo "${base}slow/60000"; done >"$work/urls"
"$fetch" -c 4 -t 120 <"$work/urls" >"$work/int.out" 2>"$work/int.err" &
pid=$!
socks=0
for _ in $(seq 1 500); do
    # find fails when a descriptor closes under it (fetch is opening and
    # closing them): with pipefail and set -e that would end the script
    # silently, so a failed look is a look that found too few.
    socks=$(find "/proc/$pid/fd" -lname 'socket:*' 2>/dev/null | wc -l) ||
        socks=0
    [ "$socks" -ge 4 ] && break
    sleep 0.01
done
[ "$socks" -ge 4 ] || fail "fetch did not open its 4 connections"
kill -INT "$pid"
status=0
wait "$pid" || status=$?
[ "$status" -eq 130 ] || fail "after SIGINT: exit status $status, not 130"
grep -q "40 URLs: 0 succeeded, 0 failed, 4 cancelled, 36 not started" \
    "$work/int.out" || fail "the summary after SIGINT is not as expected"
echo "fetch-check: ok"
