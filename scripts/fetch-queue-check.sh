#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs examples/fetch_queue on one machine and checks what it reports (a
# ctest, example_fetch_queue):
#
#   scripts/fetch-queue-check.sh PATH_TO_FETCH_QUEUE PATH_TO_FAULT_SERVER
#
# Starts nats-server with JetStream (a free port, a temporary store) and
# the fault server, two workers, then the producer with URLs that
# succeed, fail for good (404), succeed after two 503s (naks, delivered
# again), fail on every delivery (500, three deliveries), and one given
# twice (one job); checks the producer's report and exit status (1: some
# failed), that both workers took jobs, that Ctrl-C on a worker holding a
# job gives it back, for the next worker to do it (before ack_wait), and
# that the workers stop on Ctrl-C. Skips (exit 77) where no nats-server
# is installed.
set -euo pipefail
fq=${1:?usage: fetch-queue-check.sh PATH_TO_FETCH_QUEUE PATH_TO_FAULT_SERVER}
server_bin=${2:?usage: fetch-queue-check.sh PATH_TO_FETCH_QUEUE PATH_TO_FAULT_SERVER}
nats=""
for p in "${WEFT_NATS_SERVER:-}" "$(command -v nats-server || true)" /usr/sbin/nats-server; do
    [ -n "$p" ] && [ -x "$p" ] && nats=$p && break
done
if [ -z "$nats" ]; then
    case " ${WEFT_TEST_REQUIRE:-} " in
    *" nats "*) echo "fetch-queue-check: no nats-server" >&2; exit 1 ;;
    esac
    echo "fetch-queue-check: no nats-server (scripts/deps.sh nats): skipped"
    exit 77
fi
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        { kill -9 "$p" && wait "$p"; } 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
fail() {
    echo "fetch-queue-check: $*" >&2
    for f in "$work"/*.out "$work"/*.err; do
        [ -e "$f" ] || continue
        echo "--- $f" >&2
        cat "$f" >&2
    done
    exit 1
}
# wait_for FILE PATTERN PID: until FILE has a line matching PATTERN, while
# PID runs (at most 10 s).
wait_for() {
    for _ in $(seq 1 1000); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || fail "$1: the process ended before '$2'"
        sleep 0.01
    done
    fail "$1: no '$2' within 10 s"
}

"$nats" -a 127.0.0.1 -p -1 -js -sd "$work/store" >"$work/nats.out" 2>"$work/nats.err" &
pids+=($!)
wait_for "$work/nats.err" "Server is ready" "${pids[0]}"
port=$(sed -n 's/.*Listening for client connections on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/nats.err" | head -n 1)
[ -n "$port" ] || fail "no port in nats-server's log"
url=nats://127.0.0.1:$port
"$server_bin" --port 0 >"$work/http.out" 2>"$work/http.err" &
pids+=($!)
wait_for "$work/http.out" "^http://" "${pids[1]}"
base=$(head -n 1 "$work/http.out")

# w2 starts once w1 has made the stream and the consumer: nats-server
# releases before April 2023 (Debian 12's 2.9.10 among them) did not
# guard against two clients creating the same stream and consumer at the
# same moment, and here that left the pulls of one worker, or of both,
# unanswered in about one run in 25 (docs/nats.md, "Work queues").
"$fq" -s "$url" work -n w1 -c 2 -t 1 >"$work/w1.out" 2>"$work/w1.err" &
w1=$!
pids+=("$w1")
wait_for "$work/w1.out" "taking jobs" "$w1"
"$fq" -s "$url" work -n w2 -c 2 -t 1 >"$work/w2.out" 2>"$work/w2.err" &
w2=$!
pids+=("$w2")
wait_for "$work/w2.out" "taking jobs" "$w2"

status=0
"$fq" -s "$url" produce -d 20 "${base}ok" "${base}bytes/1000" "${base}status/404" \
    "${base}flaky/qcheck/2" "${base}status/500" "${base}ok" \
    >"$work/produce.out" 2>"$work/produce.err" || status=$?
[ "$status" -eq 1 ] || fail "the producer exited $status, not 1"
out=$work/produce.out
grep -q "^${base}ok: given twice, one job$" "$out" || fail "the twice-given URL"
grep -q "^published 5 jobs$" "$out" || fail "not 5 jobs published"
grep -Eq "^ok +200 +3 bytes .* delivery 1  ${base}ok$" "$out" || fail "ok"
grep -Eq "^ok +200 +1000 bytes .* ${base}bytes/1000$" "$out" || fail "bytes/1000"
grep -Eq "^FAIL 404 .* delivery 1  ${base}status/404$" "$out" || fail "404 not final at once"
grep -Eq "^ok +200 .* delivery 3  ${base}flaky/qcheck/2$" "$out" || fail "flaky: not done at its third delivery"
grep -Eq "^FAIL 500 .* delivery 3  ${base}status/500$" "$out" || fail "500: not final at its third delivery"
grep -q "^5 jobs: 2 succeeded, 3 failed, 0 without a result$" "$out" ||
    grep -q "^5 jobs: 3 succeeded, 2 failed, 0 without a result$" "$out" ||
    fail "the summary"
n1=$(grep -c ": take " "$work/w1.out" || true)
n2=$(grep -c ": take " "$work/w2.out" || true)
if [ "$n1" -eq 0 ] || [ "$n2" -eq 0 ]; then
    # Where each worker's tasks wait (weft_main's SIGQUIT dump, to its
    # stderr, which fail prints), so that the failure says why. Best
    # effort: a worker that has ended, or no dump, must not hide this
    # failure behind another.
    for w in "$w1" "$w2"; do
        kill -QUIT "$w" 2>/dev/null || true
    done
    for i in 1 2; do
        for _ in $(seq 1 500); do
            grep -q "^end of dump" "$work/w$i.err" 2>/dev/null && break
            sleep 0.01
        done
    done
    fail "both workers should have taken jobs ($n1, $n2)"
fi

# A job held by a worker when it gets Ctrl-C: given back, and another
# takes it at once (long before ack_wait's 30 s). w2 stops first, so that
# w1 takes it; w1 fetches for 3 s, and is stopped once it said "take".
kill -INT "$w2"
wait "$w2" || fail "w2 did not exit 0 on Ctrl-C"
grep -q "^w2: stopped$" "$work/w2.out" || fail "w2 did not say it stopped"
kill -INT "$w1"
wait "$w1" || fail "w1 did not exit 0 on Ctrl-C"
"$fq" -s "$url" work -n w3 -c 1 -t 30 >"$work/w3.out" 2>"$work/w3.err" &
w3=$!
pids+=("$w3")
wait_for "$work/w3.out" "taking jobs" "$w3"
"$fq" -s "$url" produce -d 20 "${base}slow/3000" >"$work/produce2.out" 2>"$work/produce2.err" &
p2=$!
pids+=("$p2")
wait_for "$work/w3.out" "take  ${base}slow/3000 (delivery 1)" "$w3"
kill -INT "$w3"
wait "$w3" || fail "w3 did not exit 0 on Ctrl-C"
grep -q "^w3: back  ${base}slow/3000: stopped, given back$" "$work/w3.out" ||
    fail "w3 did not give the job back"
t0=$(date +%s)
"$fq" -s "$url" work -n w4 -c 1 -t 30 >"$work/w4.out" 2>"$work/w4.err" &
w4=$!
pids+=("$w4")
wait "$p2" || fail "the second producer exited $?"
t1=$(date +%s)
[ $((t1 - t0)) -lt 20 ] || fail "the given-back job took $((t1 - t0)) s"
grep -Eq "^ok +200 .* by w4, .*slow/3000$" "$work/produce2.out" ||
    fail "w4 did not do the given-back job"
kill -INT "$w4"
wait "$w4" || fail "w4 did not exit 0 on Ctrl-C"
echo "fetch-queue-check: ok"
