#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs weft into a temporary prefix and builds three tiny consumers
# against it, as users would: with pkg-config, and with CMake's
# find_package(weft) linking weft::weft (shared) and weft::weft_static.
# Each must link and run. Usage: scripts/install-check.sh [PREFIX]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build pkg-config

prefix=${1:-$(mktemp -d /tmp/weft-inst.XXXXXX)}
work=$(mktemp -d /tmp/weft-consumer.XXXXXX)
trap 'rm -rf "$work"' EXIT

make --no-print-directory install PREFIX="$prefix" >"$work/install.log" 2>&1 ||
    { cat "$work/install.log"; exit 1; }
echo "installed into $prefix"

cat >"$work/app.c" <<'C'
#include <stdio.h>
#include <weft.h>

static int child(void *arg)
{
    return weft_sleep(WEFT_MSEC);
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

libdir=$(dirname "$(find "$prefix" -name weft.pc | head -n 1)")/..
libdir=$(cd "$libdir" && pwd)

# pkg-config, shared library
read -ra flags <<<"$(PKG_CONFIG_PATH="$libdir/pkgconfig" \
    pkg-config --cflags --libs weft)"
cc -o "$work/app-pc" "$work/app.c" "${flags[@]}"
printf 'pkg-config (%s): ' "${flags[*]}"
LD_LIBRARY_PATH="$libdir" "$work/app-pc"

# CMake, shared and static
for target in weft::weft weft::weft_static; do
    mkdir -p "$work/cm"
    cat >"$work/cm/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(app C)
find_package(weft 0.1 REQUIRED)
add_executable(app ../app.c)
target_link_libraries(app PRIVATE $target)
CM
    rm -rf "$work/cm/build"
    if ! { cmake -S "$work/cm" -B "$work/cm/build" \
        -DCMAKE_PREFIX_PATH="$prefix" && cmake --build "$work/cm/build"; } \
        >"$work/cm.log" 2>&1; then
        cat "$work/cm.log"
        exit 1
    fi
    printf 'find_package(weft), %s: ' "$target"
    "$work/cm/build/app"
done
