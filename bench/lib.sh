# shellcheck shell=bash disable=SC2034,SC2154 # globals shared with the sourcing script
# SPDX-License-Identifier: MIT
# What bench/run, bench/compare and bench/ab share: the list of benchmarks,
# installing missing packages, building weft's benchmark programs, and
# running one program (an http server or client included) into one `BENCH`
# line.
# Sourced, not run; the sourcing script sets `set -euo pipefail`, `repo`
# and `log_tag`.

# The benchmarks of bench/README.md, in its order.
BENCH_ORDER="switch spawn skynet pingpong chanflow timeout mutex parked parked-compact http https fetch ask ask2 actor32 ring restart nats_ask nats_jobs"

log() { echo "$log_tag: $*" >&2; }
die() {
    log "$*"
    exit 2
}

# pkg_missing PKG: true if the Debian package PKG is not installed.
pkg_missing() {
    ! dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# apt_install PKG...: installs the packages with apt-get, saying which. Callers
# pass only what is missing.
apt_install() {
    (($#)) || return 0
    log "installing $*"
    export DEBIAN_FRONTEND=noninteractive
    local sudo=
    ((EUID == 0)) || sudo=sudo
    $sudo apt-get update -qq >/dev/null
    $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# need_weft_tools [BENCH...]: adds to the array `missing` the packages that
# building weft's benchmarks needs and lacks (fetch: libcurl's headers).
need_weft_tools() {
    command -v cmake >/dev/null || missing+=(cmake)
    command -v make >/dev/null || missing+=(make)
    command -v cc >/dev/null || missing+=(gcc libc6-dev)
    if [[ " $* " == *" fetch "* ]] && ! command -v curl-config >/dev/null &&
        pkg_missing libcurl4-openssl-dev; then
        missing+=(libcurl4-openssl-dev pkg-config)
    fi
    if [[ " $* " == *" nats_"* ]]; then
        [[ -e /usr/include/nats/nats.h ]] || missing+=(libnats-dev pkg-config)
        nats_server_path >/dev/null || missing+=(nats-server)
    fi
    return 0
}

# nats_server_path: the nats-server to run (Debian's is in /usr/sbin, which
# a user's PATH may lack); nothing and status 1 if there is none.
nats_server_path() {
    local p
    for p in "${NATS_SERVER:-}" "$(command -v nats-server || true)" /usr/sbin/nats-server; do
        [[ -n $p && -x $p ]] && { echo "$p"; return 0; }
    done
    return 1
}
# A benchmark's program: bench_NAME, a '-' of its name a '_' there
# (parked-compact is bench_parked_compact, from bench/parked_compact.c).
bench_prog() { echo "bench_${1//-/_}"; }

# build_weft BUILD_DIR BENCH...: a Release build without tests in
# BUILD_DIR, of the programs bench_BENCH (bench_prog). Configuring every time is cheap
# once cached, and picks up new bench/*.c.
build_weft() { build_weft_from "$repo" "$@"; }

# build_weft_from SRC BUILD_DIR BENCH...: build_weft of the source tree SRC
# (bench/ab builds two revisions, each in a worktree of its own).
build_weft_from() {
    local src=$1 dir=$2 out b targets=()
    shift 2
    for b; do targets+=("$(bench_prog "$b")"); done
    log "building ${targets[*]} in $dir"
    if ! out=$({ cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release \
        -DWEFT_TESTS=OFF -DWEFT_EXAMPLES=OFF -DWEFT_BENCH=ON &&
        cmake --build "$dir" --target "${targets[@]}" -j2; } 2>&1); then
        echo "$out" >&2
        die "building weft's benchmarks failed"
    fi
}

# The BENCH line of the last run_program, run_http or run_https that succeeded. (They
# set it rather than print it so that they run in the calling shell, where
# an interrupted run's trap can still stop the server.)
bench_line=

# run_program NAME IMPL BIN [N]: runs one non-http benchmark program for at
# most BENCH_TIMEOUT seconds and sets bench_line to its BENCH line; returns
# 1, saying why on stderr, if it failed or printed something else.
run_program() {
    local name=$1 impl=$2 bin=$3 n=${4:-} line rc=0
    line=$(timeout "$BENCH_TIMEOUT" "$bin" ${n:+"$n"}) || rc=$?
    if ((rc)); then
        log "FAIL $name $impl (exit $rc$( ((rc == 124)) && echo ": timed out after ${BENCH_TIMEOUT}s"))"
        return 1
    fi
    if [[ ! $line =~ ^BENCH\ $name\ $impl\ [0-9.]+\ [^\ ]+$ ]]; then
        log "FAIL $name $impl: bad output '$line'"
        return 1
    fi
    bench_line=$line
}

# The one http server running, so that an interrupted run stops it.
server_pid=
server_log=

# stop_server: stops the running http server by its PID (SIGTERM, then
# SIGKILL after 5 s) and removes its log.
stop_server() {
    local i
    if [[ -n $server_pid ]]; then
        kill "$server_pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    server_pid=
    [[ -n $server_log ]] && rm -f "$server_log"
    server_log=
    return 0
}

HTTP_RESPONSE=$'HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n\r\nHello, World!'
HTTP_REQUEST=$'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'

# start_server BIN [ARG...]: starts the http server BIN (with ARG..., then
# port 0: any free one), which prints `LISTEN <port>` on stderr, and sets
# server_port once it accepts connections. Returns 1, saying why on stderr
# and stopping it, if it did not start. Every wait is bounded.
server_port=
start_server() {
    local bin=$1 port='' i
    server_log=$(mktemp)
    "$bin" "${@:2}" 0 >/dev/null 2>"$server_log" &
    server_pid=$!
    for ((i = 0; i < 100; i++)); do
        port=$(awk '/^LISTEN [0-9]+$/ {print $2; exit}' "$server_log")
        [[ -n $port ]] && break
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    if [[ -z $port ]]; then
        log "the server $bin did not start"
        cat "$server_log" >&2
        stop_server
        return 1
    fi
    for ((i = 0; i < 50; i++)); do # LISTEN may come just before listen()
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
    done
    server_port=$port
}

# run_https IMPL BIN: the https benchmark: the http benchmark's server
# over TLS. BIN takes -T CERT KEY PORT (a certificate made once per run by
# scripts/test-cert.sh, in BUILD_DIR/https-cert); two requests on one connection are
# checked with curl against that certificate, then `wrk -t1 -c64 -d5s`
# loads https://127.0.0.1:PORT/ (its connections are kept alive: the
# handshakes are 64 of some hundred thousand requests, and the figure is
# mostly the records' encryption). Sets bench_line; returns 1, saying why
# on stderr, if anything went wrong.
run_https() {
    local impl=$1 bin=$2 got wrk_out rps https_certs=$BUILD_DIR/https-cert
    if [[ ! -f $https_certs/key.pem ]]; then
        "$repo/scripts/test-cert.sh" "$https_certs" || return 1
    fi
    start_server "$bin" -T "$https_certs/cert.pem" "$https_certs/key.pem" || return 1
    got=$(timeout 10 curl -sS --cacert "$https_certs/cert.pem" \
        "https://127.0.0.1:$server_port/" "https://127.0.0.1:$server_port/" 2>&1 || true)
    if [[ $got != "Hello, World!Hello, World!" ]]; then
        log "https $impl: wrong or missing answers on 127.0.0.1:$server_port: $got"
        stop_server
        return 1
    fi
    wrk_out=$(timeout 30 wrk -t1 -c64 -d5s "https://127.0.0.1:$server_port/" 2>&1) || true
    stop_server
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$wrk_out")
    if [[ -z $rps ]] || grep -qE 'Socket errors|Non-2xx' <<<"$wrk_out"; then
        log "https $impl: wrk failed or saw errors:"
        echo "$wrk_out" >&2
        return 1
    fi
    printf '  wrk: %s\n' "${wrk_out//$'\n'/$'\n'  wrk: }" >&2
    printf -v bench_line 'BENCH https %s %.0f req/s' "$impl" "$rps"
}

# run_http IMPL BIN: the http benchmark. BIN takes a port as its first
# argument (0: any free one), listens on 127.0.0.1 and prints `LISTEN
# <port>` on stderr. Its answers are checked (two pipelined requests in one
# write, then one request split over two writes), `wrk -t1 -c64 -d5s`
# loads it, and it is stopped by its PID. Sets bench_line; returns 1, saying
# why on stderr, if anything went wrong. Every wait is bounded.
run_http() {
    local impl=$1 bin=$2 port fd got='' wrk_out rps
    start_server "$bin" || return 1
    port=$server_port
    if exec {fd}<>"/dev/tcp/127.0.0.1/$port"; then
        printf '%s%s%s' "$HTTP_REQUEST" "$HTTP_REQUEST" "${HTTP_REQUEST:0:20}" >&"$fd"
        sleep 0.05
        printf '%s' "${HTTP_REQUEST:20}" >&"$fd"
        got=$(timeout 5 head -c $((3 * ${#HTTP_RESPONSE})) <&"$fd" || true)
        exec {fd}>&-
    fi
    if [[ $got != "$HTTP_RESPONSE$HTTP_RESPONSE$HTTP_RESPONSE" ]]; then
        log "http $impl: wrong or missing answers on 127.0.0.1:$port"
        stop_server
        return 1
    fi
    wrk_out=$(timeout 30 wrk -t1 -c64 -d5s "http://127.0.0.1:$port/" 2>&1) || true
    stop_server
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$wrk_out")
    if [[ -z $rps ]] || grep -qE 'Socket errors|Non-2xx' <<<"$wrk_out"; then
        log "http $impl: wrk failed or saw errors:"
        echo "$wrk_out" >&2
        return 1
    fi
    printf '  wrk: %s\n' "${wrk_out//$'\n'/$'\n'  wrk: }" >&2
    printf -v bench_line 'BENCH http %s %.0f req/s' "$impl" "$rps"
}

# The running nats-server's store (a temporary directory), removed by
# stop_nats_server.
nats_store=

# stop_nats_server: stops the NATS server (stop_server: by its PID) and
# removes its store.
stop_nats_server() {
    stop_server
    [[ -n $nats_store ]] && rm -rf "$nats_store"
    nats_store=
    return 0
}

# run_nats NAME IMPL BIN [N]: a NATS benchmark (nats_ask, nats_jobs).
# Starts a fresh nats-server with JetStream (-js, its store in a new
# temporary directory) on 127.0.0.1 and a port of its choosing, runs BIN
# with N (nothing: its default) and the server's URL in NATS_URL for at
# most BENCH_TIMEOUT seconds, and stops the server. Sets bench_line; returns
# 1, saying why on stderr, if anything went wrong.
run_nats() {
    local name=$1 impl=$2 bin=$3 n=${4:-} server port='' i rc=0
    server=$(nats_server_path) || { log "no nats-server"; return 1; }
    nats_store=$(mktemp -d)
    server_log=$(mktemp)
    "$server" -a 127.0.0.1 -p -1 -js -sd "$nats_store" >/dev/null 2>"$server_log" &
    server_pid=$!
    for ((i = 0; i < 100; i++)); do
        grep -q 'Server is ready' "$server_log" && break
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    port=$(sed -n 's/.*Listening for client connections on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$server_log" | head -n 1)
    if [[ -z $port ]] || ! grep -q 'Server is ready' "$server_log"; then
        log "nats-server did not start"
        cat "$server_log" >&2
        stop_nats_server
        return 1
    fi
    export NATS_URL="nats://127.0.0.1:$port"
    run_program "$name" "$impl" "$bin" "$n" || rc=$?
    unset NATS_URL
    stop_nats_server
    return "$rc"
}

# run_fetch IMPL BIN SERVER [N]: the fetch benchmark. Starts weft's http
# server SERVER (the same for every implementation), runs the client BIN
# with N (default 100000) and the server's URL for at most BENCH_TIMEOUT
# seconds, and stops the server. Sets bench_line; returns 1, saying why on
# stderr, if anything went wrong.
run_fetch() {
    local impl=$1 bin=$2 server=$3 n=${4:-100000} line rc=0
    start_server "$server" || return 1
    line=$(timeout "$BENCH_TIMEOUT" "$bin" "$n" "http://127.0.0.1:$server_port/") || rc=$?
    stop_server
    if ((rc)); then
        log "FAIL fetch $impl (exit $rc$( ((rc == 124)) && echo ": timed out after ${BENCH_TIMEOUT}s"))"
        return 1
    fi
    if [[ ! $line =~ ^BENCH\ fetch\ $impl\ [0-9.]+\ req/s$ ]]; then
        log "FAIL fetch $impl: bad output '$line'"
        return 1
    fi
    bench_line=$line
}
