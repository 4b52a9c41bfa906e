#!/bin/sh
# SPDX-License-Identifier: MIT
# Checks for what building weft needs, and installs what is missing.
#
#   scripts/deps.sh [need...]
#
# A need is one of: build (cmake, make, a C compiler, python3 for the
# tests, libssl-dev and openssl for the tests' HTTPS server, libdw-dev for
# the task dump's blocking lines and stacks, and what uring installs: the
# default), uring (liburing-dev, for the io_uring poller),
# cxx (g++), format (clang-format), clang (clang and its sanitizer runtimes),
# pkg-config, curl (libcurl's headers for weft_curl, and openssl for its
# tests), pg (PostgreSQL's server and libpq's headers, for the libpq
# example and its tests), nats (nats.c's headers for weft_nats, and
# nats-server for its tests), nats-bench (what nats adds, and Go's NATS
# client, for the NATS benchmarks' peers in bench/peers/natsc and
# bench/peers/natsgo), http (curl and wrk, to test the HTTP server), aarch64 (a
# cross compiler and qemu-user), valgrind (valgrind and valgrind/valgrind.h,
# which the build needs to tell valgrind about task stacks; configure again
# after installing it). When everything asked for is present this
# is a few `command -v` calls and exits 0 at once, so the Makefile runs it
# before every target.
#
# When something is missing it says which packages it will install and what
# each is for, then runs apt-get (Debian/Ubuntu) as root, or through sudo
# when not root.
#
# WEFT_NO_DEPS=1 (any value but empty or 0) declines: nothing is installed;
# the missing packages are listed and the script exits 1, so a make target
# stops before a build that could not work. `make test WEFT_NO_DEPS=1`
# passes it on.
set -eu

[ $# -gt 0 ] || set -- build

missing=""
why=""
# add WHY PACKAGE...: PACKAGE is missing, needed for WHY.
add() {
    reason=$1
    shift
    for p in "$@"; do
        missing="$missing $p"
        why="$why
  $p: $reason"
    done
}
have() { command -v "$1" >/dev/null 2>&1; }

for need in "$@"; do
    case "$need" in
    build)
        have make || add "runs the Makefile and the build" make
        have cmake || add "configures and builds weft (3.20 or newer)" cmake
        if ! have cc && ! have gcc; then
            add "compiles weft (a C compiler, libc's headers)" gcc libc6-dev
        elif [ ! -e /usr/include/stdio.h ]; then
            add "libc's headers, to compile weft" libc6-dev
        fi
        have python3 || add "test_trace reads the trace files it writes" python3
        [ -e /usr/include/openssl/ssl.h ] ||
            add "OpenSSL's headers, for the tests' HTTPS server" libssl-dev
        have openssl ||
            add "scripts/test-cert.sh makes the tests' certificate" openssl
        # Optional for libweft (WEFT_LIBDW=AUTO), wanted for its tests:
        # the task dump's blocking lines and stacks (elfutils' libdw),
        # which CMake finds through pkg-config.
        [ -e /usr/include/elfutils/libdwfl.h ] ||
            add "task dumps name each task's blocking line and stack (elfutils)" libdw-dev
        have pkg-config ||
            add "CMake finds libdw (and libcurl's flags) through it" pkg-config
        # Optional too (WEFT_IO_URING=AUTO), wanted for the tests' uring:
        # runs of the I/O suite.
        [ -e /usr/include/liburing.h ] ||
            add "the io_uring poller (weft_config.poller)" liburing-dev
        ;;
    uring)
        [ -e /usr/include/liburing.h ] ||
            add "the io_uring poller (weft_config.poller)" liburing-dev
        have pkg-config || add "CMake finds liburing through it" pkg-config
        ;;
    cxx) have g++ || add "compiles weft.h as C++ (the header check)" g++ ;;
    format) have clang-format || add "make format" clang-format ;;
    clang)
        have clang || add "sanitizer builds with SAN_CC=clang" clang
        # clang's TSan/ASan runtimes live in libclang-rt-NN-dev.
        if ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.tsan-*.a \
            >/dev/null 2>&1; then
            add "clang's ASan and TSan runtimes" libclang-rt-14-dev
        fi
        ;;
    pkg-config)
        have pkg-config ||
            add "builds a consumer in scripts/install-check.sh" pkg-config
        ;;
    valgrind)
        if ! have valgrind || [ ! -e /usr/include/valgrind/valgrind.h ]; then
            add "valgrind, and the header the build needs for its stack hooks" valgrind
        fi
        ;;
    curl)
        # weft_curl (include/weft_curl.h) builds when libcurl's headers are
        # there; its tests need the openssl command for a certificate.
        found=""
        for h in /usr/include/curl/curl.h /usr/include/*/curl/curl.h; do
            [ -e "$h" ] && found=1
        done
        if [ -z "$found" ]; then
            add "weft_curl, the HTTP(S) client module (libcurl's headers)" \
                libcurl4-openssl-dev
        fi
        have openssl || add "the HTTPS tests make a certificate" openssl
        ;;
    pg)
        # examples/pg (libpq on weft) builds when libpq's headers are there;
        # its tests start a server (scripts/pg-test-server.sh).
        found=""
        for h in /usr/include/postgresql/libpq-fe.h /usr/include/libpq-fe.h; do
            [ -e "$h" ] && found=1
        done
        [ -n "$found" ] || add "the libpq example (libpq's headers)" libpq-dev
        if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
            add "the libpq example's tests run a PostgreSQL server" postgresql
        fi
        ;;
    nats)
        # weft_nats (include/weft_nats.h) builds when nats.c's headers are
        # there; its tests start a nats-server (Debian puts it in
        # /usr/sbin, which a user's PATH may lack).
        [ -e /usr/include/nats/nats.h ] ||
            add "weft_nats, the NATS module (nats.c's headers)" libnats-dev
        if ! have nats-server && [ ! -x /usr/sbin/nats-server ]; then
            add "weft_nats's tests run a NATS server" nats-server
        fi
        have pkg-config || add "CMake finds nats.c through it" pkg-config
        ;;
    nats-bench)
        # bench/nats_*.c and their peers: nats.c and nats-server as for
        # nats, Go and Debian's packaged Go NATS client (built without
        # modules, from /usr/share/gocode, by bench/compare).
        [ -e /usr/include/nats/nats.h ] ||
            add "the NATS benchmarks and their nats.c peer" libnats-dev
        if ! have nats-server && [ ! -x /usr/sbin/nats-server ]; then
            add "the NATS benchmarks run a NATS server" nats-server
        fi
        have pkg-config || add "CMake finds nats.c through it" pkg-config
        [ -x /usr/bin/go ] || add "builds the Go peers of the benchmarks" golang-go
        [ -e /usr/share/gocode/src/github.com/nats-io/nats.go/nats.go ] ||
            add "the NATS benchmarks' Go peer (Go's NATS client)" \
                golang-github-nats-io-go-nats-dev
        ;;
    http)
        have curl || add "scripts/http-check.sh" curl
        have wrk || add "the http benchmark and scripts/http-check.sh" wrk
        ;;
    aarch64)
        have qemu-aarch64 || add "runs the aarch64 build" qemu-user
        have aarch64-linux-gnu-gcc ||
            add "compiles for aarch64" gcc-aarch64-linux-gnu
        [ -e /usr/aarch64-linux-gnu/include/stdio.h ] ||
            add "aarch64 libc headers" libc6-dev-arm64-cross
        ;;
    *)
        echo "deps.sh: unknown need '$need'" >&2
        exit 2
        ;;
    esac
done

if [ -n "$missing" ]; then
    case "${WEFT_NO_DEPS:-0}" in
    "" | 0) ;;
    *)
        echo "deps.sh: missing (not installed, WEFT_NO_DEPS is set):$why" >&2
        echo "deps.sh: install them, or unset WEFT_NO_DEPS" >&2
        exit 1
        ;;
    esac
    if [ "$(id -u)" -eq 0 ]; then
        sudo=""
    elif have sudo; then
        sudo="sudo"
    else
        echo "deps.sh: missing, and not root and no sudo to install them:$why" >&2
        exit 1
    fi
    if ! have apt-get; then
        echo "deps.sh: missing, and no apt-get to install them:$why" >&2
        exit 1
    fi
    echo "deps.sh: missing:$why" >&2
    echo "deps.sh: installing them: ${sudo:+sudo }apt-get install$missing" >&2
    echo "deps.sh: (WEFT_NO_DEPS=1 declines: nothing is installed then)" >&2
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq </dev/null
    # shellcheck disable=SC2086 # word splitting of the list is wanted
    $sudo apt-get install -y -qq --no-install-recommends $missing </dev/null
fi

# CMakeLists.txt needs 3.20; Debian 12 ships 3.25, older systems do not.
case " $* " in
*" build "*)
    if ! have cmake; then
        echo "deps.sh: cmake is still missing" >&2
        exit 1
    fi
    v=$(cmake --version | sed -n '1s/[^0-9]*\([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
    # shellcheck disable=SC2086 # split "3 25" into two fields
    set -- $v
    if [ "${1:-0}" -lt 3 ] || { [ "${1:-0}" -eq 3 ] && [ "${2:-0}" -lt 20 ]; }
    then
        echo "deps.sh: cmake >= 3.20 is needed, found ${1:-?}.${2:-?}" >&2
        exit 1
    fi
    ;;
esac
exit 0
