#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks that an installed weft can be used from wherever it was put, as
# users would use it. Three installed trees:
#
#   1. cmake --install build/release --prefix A, where A is not the prefix
#      build/release was configured with (make's PREFIX, /usr/local);
#   2. that tree moved, after installing, from A to B;
#   3. make install DESTDIR=S: the staged tree S/usr/local, used in place.
#
# Against each, four consumers are built and run: a C program with
# pkg-config (shared library), a C++ program (g++) with pkg-config (weft.h
# compiles as C++ and links), and CMake's find_package(weft) linking
# weft::weft (shared) and weft::weft_static; and, for each module built
# (weft_curl, weft_tls, weft_nats), a program through its pkg-config file and its
# CMake component. Each must have taken weft
# from that tree (pkg-config's prefix, CMake's weft_DIR), so weft.pc and
# the CMake package must be relocatable.
#
# Usage: scripts/install-check.sh   (builds build/release first if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
# The version to ask find_package for: the project's MAJOR.MINOR (the package
# accepts the same minor only, as the ABI policy says).
minor=$(sed -n 's/^project(weft VERSION \([0-9]*\.[0-9]*\)\..*/\1/p' CMakeLists.txt)
scripts/deps.sh build cxx pkg-config

work=$(mktemp -d /tmp/weft-install-check.XXXXXX)
trap 'rm -rf "$work"' EXIT

# run LOG COMMAND...: runs COMMAND with its output in LOG, shown if it fails.
run() {
    local log=$1
    shift
    if ! "$@" >"$log" 2>&1; then
        echo "install-check: failed: $*" >&2
        cat "$log" >&2
        exit 1
    fi
}
fail() {
    echo "install-check: FAIL: $*" >&2
    exit 1
}

# The benchmarks are not installed: a tree built without them (as CI's
# test-noasserts leaves it) is not built again for them.
run "$work/release.log" make --no-print-directory release WEFT_BENCH=OFF
configured=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' \
    build/release/CMakeCache.txt)

cat >"$work/app.c" <<'C'
#include <stdio.h>
#include <weft.h>

static int child(void *arg)
{
    return weft_sleep_for(WEFT_MSEC);
}

static int root(void *arg)
{
    weft_scope *s;
    if (weft_scope_open(&s, NULL) != 0)
        return -1;
    for (int i = 0; i < 4; i++)
        weft_spawn(s, child, NULL);
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    return rc;
}

int main(void)
{
    weft_config cfg = {.workers = 2};
    int rc = weft_run(&cfg, root, NULL);
    printf("weft %#x: %s\n", weft_version(), weft_strerror(rc));
    return rc == 0 && weft_version() == WEFT_VERSION_HEX ? 0 : 1;
}
C

cat >"$work/app.cpp" <<'CXX'
#include <cstdio>
#include <weft.h>

static weft_mutex lock = WEFT_MUTEX_INIT;
static int done;

static int child(void *)
{
    int rc = weft_sleep_for(WEFT_MSEC);
    if (rc == 0 && (rc = weft_mutex_lock(&lock)) == 0) {
        done++;
        weft_mutex_unlock(&lock);
    }
    return rc;
}

static int root(void *)
{
    weft_scope *s = nullptr;
    if (weft_scope_open(&s, nullptr) != 0)
        return -1;
    for (int i = 0; i < 4; i++)
        weft_spawn(s, child, nullptr);
    int rc = weft_scope_join(s);
    weft_scope_free(s);
    return rc;
}

int main()
{
    weft_config cfg{};
    cfg.workers = 2;
    int rc = weft_run(&cfg, root, nullptr);
    std::printf("weft %#x from C++: %s, %d tasks\n", weft_version(),
                weft_strerror(rc), done);
    return rc == 0 && done == 4 && weft_version() == WEFT_VERSION_HEX ? 0 : 1;
}
CXX

# The curl module's consumer (when weft was built with it): reads this
# file through libcurl's file:// protocol, driven by weft.
cat >"$work/app_curl.c" <<'C'
#include <stdio.h>
#include <weft_curl.h>

static const char *url;
static size_t got;

static size_t sink(char *p, size_t size, size_t n, void *u)
{
    (void)p;
    (void)u;
    got += size * n;
    return size * n;
}

static int root(void *arg)
{
    (void)arg;
    CURL *e = curl_easy_init();
    if (!e)
        return -1;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
    int rc = weft_curl_perform(e, weft_now() + 10 * WEFT_SEC);
    curl_easy_cleanup(e);
    return rc;
}

int main(int argc, char **argv)
{
    url = argc > 1 ? argv[1] : "";
    int rc = weft_run(NULL, root, NULL);
    printf("weft_curl %#x: %s, %zu bytes\n", WEFT_CURL_VERSION,
           weft_strerror(rc), got);
    return rc == 0 && got > 0 ? 0 : 1;
}
C

# The TLS module's consumer (when weft was built with it): a client
# context with the system's trusted certificates, and a handshake whose
# peer has closed: -ECONNRESET, from OpenSSL driven by weft.
cat >"$work/app_tls.c" <<'C'
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
#include <weft_tls.h>

static int root(void *arg)
{
    (void)arg;
    weft_tls_ctx *ctx;
    int rc = weft_tls_ctx_new(&ctx, WEFT_TLS_CLIENT, NULL);
    if (rc < 0)
        return rc;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0)
        return -1;
    close(sv[1]);
    weft_tls *t = NULL;
    rc = weft_tls_connect(ctx, sv[0], "localhost", &t,
                          weft_now() + 10 * WEFT_SEC);
    weft_tls_free(t);
    weft_close(sv[0]);
    weft_tls_ctx_free(ctx);
    return rc == -ECONNRESET ? 0 : rc;
}

int main(void)
{
    int rc = weft_run(NULL, root, NULL);
    printf("weft_tls %#x: %s\n", WEFT_TLS_VERSION, weft_strerror(rc));
    return rc == 0 ? 0 : 1;
}
C

# The NATS module's consumer (when weft was built with it): a connect to
# a port where no server listens is refused, through nats.c driven by weft
# (the connect runs on weft's blocking pool, its driver in a task).
cat >"$work/app_nats.c" <<'C'
#include <stdio.h>
#include <weft_nats.h>

static int root(void *arg)
{
    (void)arg;
    weft_nats_opts o = {.url = "nats://127.0.0.1:1", .noreconnect = 1};
    weft_nats_conn *c = NULL;
    int rc = weft_nats_connect(NULL, &o, &c, weft_now() + 10 * WEFT_SEC);
    return rc == -ECONNREFUSED && c == NULL ? 0 : rc;
}

int main(void)
{
    int rc = weft_run(NULL, root, NULL);
    printf("weft_nats %#x: %s\n", WEFT_NATS_VERSION, weft_strerror(rc));
    return rc == 0 ? 0 : 1;
}
C

# same_dir A B: A and B are the same directory.
same_dir() { [ "$(cd "$1" && pwd -P)" = "$(cd "$2" && pwd -P)" ]; }
# inside A B: directory A is B or under it.
inside() {
    case "$(cd "$1" && pwd -P)/" in
    "$(cd "$2" && pwd -P)/"*) return 0 ;;
    *) return 1 ;;
    esac
}

# consumers TREE: builds and runs the four consumers against TREE.
consumers() {
    local tree=$1 lib pc flags prefix target
    pc=$(find "$tree" -name weft.pc | head -n 1)
    [ -n "$pc" ] || fail "no weft.pc under $tree"
    lib=$(cd "$(dirname "$pc")/.." && pwd)
    export PKG_CONFIG_PATH="$lib/pkgconfig"

    prefix=$(pkg-config --variable=prefix weft)
    same_dir "$prefix" "$tree" ||
        fail "weft.pc in $tree says prefix=$prefix"
    read -ra flags <<<"$(pkg-config --cflags --libs weft)"

    run "$work/cc.log" cc -o "$work/app-c" "$work/app.c" "${flags[@]}"
    printf '  pkg-config, C: '
    LD_LIBRARY_PATH="$lib" "$work/app-c" || fail "the C program failed"

    run "$work/cxx.log" g++ -std=c++11 -Wall -Wextra -pedantic -Werror \
        -o "$work/app-cxx" "$work/app.cpp" "${flags[@]}"
    printf '  pkg-config, C++: '
    LD_LIBRARY_PATH="$lib" "$work/app-cxx" || fail "the C++ program failed"
    local curl_targets=""
    if [ -f "$lib/pkgconfig/weft_curl.pc" ]; then
        read -ra flags <<<"$(pkg-config --cflags --libs weft_curl)"
        run "$work/curl.log" cc -o "$work/app-curl" "$work/app_curl.c" \
            "${flags[@]}"
        printf '  pkg-config, weft_curl: '
        LD_LIBRARY_PATH="$lib" "$work/app-curl" "file://$work/app_curl.c" ||
            fail "the weft_curl program failed"
        curl_targets="weft::curl weft::curl_static"
    fi
    if [ -f "$lib/pkgconfig/weft_tls.pc" ]; then
        read -ra flags <<<"$(pkg-config --cflags --libs weft_tls)"
        run "$work/tls.log" cc -o "$work/app-tls" "$work/app_tls.c" \
            "${flags[@]}"
        printf '  pkg-config, weft_tls: '
        LD_LIBRARY_PATH="$lib" "$work/app-tls" ||
            fail "the weft_tls program failed"
        curl_targets="$curl_targets weft::tls weft::tls_static"
    fi
    if [ -f "$lib/pkgconfig/weft_nats.pc" ]; then
        read -ra flags <<<"$(pkg-config --cflags --libs weft_nats)"
        run "$work/nats.log" cc -o "$work/app-nats" "$work/app_nats.c" \
            "${flags[@]}"
        printf '  pkg-config, weft_nats: '
        LD_LIBRARY_PATH="$lib" "$work/app-nats" ||
            fail "the weft_nats program failed"
        curl_targets="$curl_targets weft::nats weft::nats_static"
    fi
    unset PKG_CONFIG_PATH

    for target in weft::weft weft::weft_static $curl_targets; do
        local comp="" src=app.c arg=""
        case $target in weft::curl*)
            comp=" COMPONENTS curl" src=app_curl.c arg="file://$work/app_curl.c"
            ;;
        weft::tls*) comp=" COMPONENTS tls" src=app_tls.c ;;
        weft::nats*) comp=" COMPONENTS nats" src=app_nats.c ;;
        esac
        rm -rf "$work/cm"
        mkdir -p "$work/cm"
        cat >"$work/cm/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(app C)
find_package(weft $minor REQUIRED$comp)
message(STATUS "weft_DIR=\${weft_DIR}")
add_executable(app ../$src)
target_link_libraries(app PRIVATE $target)
CM
        run "$work/cm.log" cmake -S "$work/cm" -B "$work/cm/build" \
            -DCMAKE_PREFIX_PATH="$tree"
        local dir
        dir=$(sed -n 's/^-- weft_DIR=//p' "$work/cm.log")
        if [ -z "$dir" ] || ! inside "$dir" "$tree"; then
            fail "find_package(weft) found ${dir:-nothing}, not $tree"
        fi
        run "$work/cm-build.log" cmake --build "$work/cm/build"
        printf '  find_package(weft), %s: ' "$target"
        "$work/cm/build/app" $arg || fail "the find_package program failed"
    done
}

# 1. --prefix at install time, not the configured one.
a=$work/a
[ "$a" != "$configured" ] || fail "the prefix must differ from $configured"
run "$work/install-a.log" cmake --install build/release --prefix "$a"
echo "cmake --install --prefix $a (configured: $configured)"
consumers "$a"

# 2. The same tree, moved.
b=$work/moved
mv "$a" "$b"
echo "moved to $b"
consumers "$b"

# 3. make install DESTDIR=..., used in place.
s=$work/stage
run "$work/install-s.log" make --no-print-directory install DESTDIR="$s" \
    WEFT_BENCH=OFF
echo "make install DESTDIR=$s (PREFIX $configured)"
[ -f "$s$configured/include/weft.h" ] ||
    fail "make install DESTDIR=$s put no weft.h in $s$configured/include"
consumers "$s$configured"
echo "install-check: ok"
