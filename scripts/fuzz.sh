#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets in fuzz/ with clang (-fsanitize=fuzzer,
# address,undefined) and runs each for a bounded time from the seed corpus
# in fuzz/corpus (valid and invalid requests) with fuzz/http.dict:
#   http_parse_fuzz  the parser of examples/http_server.c (http_parse)
#   http_conn_fuzz   a connection (http_conn, http_answer) fed in reads
#                    of every size, against a model of the whole stream
# A crash, a sanitizer report, a failed check or a leak fails the run; the
# input that did it is left in build/fuzz/ (crash-*, leak-*, timeout-*),
# and `build/fuzz/NAME FILE` replays it. New inputs found go to
# build/fuzz/corpus-NAME, not into the repository.
#
#   scripts/fuzz.sh [SECONDS [TARGET...]]   default 20 s each, all targets
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh clang
secs=${1:-20}
[[ $secs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: SECONDS must be a positive integer" >&2; exit 2; }
shift || true
targets=${*:-http_parse_fuzz http_conn_fuzz}
out=build/fuzz
mkdir -p "$out"
for t in $targets; do
    [ -f "fuzz/$t.c" ] || { echo "fuzz: no fuzz/$t.c" >&2; exit 2; }
    clang -std=gnu11 -g -O1 -Wall -Wextra -Werror \
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        "fuzz/$t.c" -o "$out/$t"
done
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1
for t in $targets; do
    mkdir -p "$out/corpus-$t"
    echo "=== fuzz $t: ${secs}s"
    # -max_len above HTTP_MAX_HEADER (8 KiB) reaches the 431 paths and a
    # connection's full buffer; -timeout catches a parser gone quadratic.
    "$out/$t" -max_total_time="$secs" -max_len=20000 -timeout=10 \
        -rss_limit_mb=2048 -dict=fuzz/http.dict -print_final_stats=1 \
        -artifact_prefix="$out/" "$out/corpus-$t" fuzz/corpus 2>&1 |
        grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|stat::number_of_executed_units|ERROR|SUMMARY|Test unit written|==[0-9]+==' || true
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "fuzz: $t FAILED (exit $rc)"; exit 1; }
done
echo "fuzz: ok"
