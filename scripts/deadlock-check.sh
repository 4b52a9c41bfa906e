#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs examples/deadlock both ways and checks what weft says:
#
#   scripts/deadlock-check.sh PATH_TO_DEADLOCK_BINARY
#
# WEFT_EMULATOR, if set, is a command that runs the binary (a cross
# build's qemu-aarch64 -L SYSROOT).
#
# - the pipeline that forgets a close: exit status 1, and a report on
#   stderr whose first line says "deadlock" and that names the task asleep
#   ("printer", on a channel receive) and the root waiting for its scope;
# - the two transfers: exit status 0, a report of the mutex cycle naming
#   both transfers, and the balances after both went through.
set -euo pipefail
bin=${1:?usage: deadlock-check.sh PATH_TO_DEADLOCK_BINARY}
read -r -a run <<<"${WEFT_EMULATOR:-}"
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
fail() {
    echo "deadlock-check: $*" >&2
    echo "--- stdout" >&2
    cat "$out" >&2
    echo "--- stderr" >&2
    cat "$err" >&2
    exit 1
}

status=0
"${run[@]}" "$bin" >"$out" 2>"$err" || status=$?
[ "$status" -eq 1 ] || fail "pipeline: exit status $status, not 1"
head -n 1 "$err" | grep -q "all tasks are asleep: deadlock" ||
    fail "pipeline: the first line does not say deadlock"
grep -q '"printer".*examples/deadlock.c' "$err" || fail "pipeline: printer not named"
grep -A1 '"printer"' "$err" | grep -q "waits for channel receive" ||
    fail "pipeline: printer's wait not named"
grep -A1 '"root"' "$err" | grep -q "waits for scope join" ||
    fail "pipeline: the root's join not named"
grep -q "got 6" "$out" || fail "pipeline: the values did not all go through"

status=0
"${run[@]}" "$bin" transfer >"$out" 2>"$err" || status=$?
[ "$status" -eq 0 ] || fail "transfer: exit status $status, not 0"
head -n 1 "$err" | grep -q "mutex deadlock" || fail "transfer: no mutex deadlock report"
grep -q '"a to b"' "$err" && grep -q '"b to a"' "$err" ||
    fail "transfer: both transfers not named"
grep -q "a: 120, b: 80" "$out" || fail "transfer: wrong balances"
echo "deadlock-check: ok"
