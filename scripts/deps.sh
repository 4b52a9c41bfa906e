#!/bin/sh
# SPDX-License-Identifier: MIT
# Installs what building weft needs, only when something is missing.
#
#   scripts/deps.sh [need...]
#
# A need is one of: build (cmake, make, a C compiler: the default),
# cxx (g++), format (clang-format), clang (clang and its sanitizer runtimes),
# pkg-config, http (curl and wrk, to test the HTTP server), aarch64 (a
# cross compiler and qemu-user), valgrind (valgrind and valgrind/valgrind.h,
# which the build needs to tell valgrind about task stacks; configure
# again after installing it). When everything
# asked for is present this is a few `command -v` calls and exits 0 at
# once, so the Makefile runs it before every target. Otherwise it runs
# apt-get (Debian/Ubuntu) as root, or through sudo when not root.
set -eu

[ $# -gt 0 ] || set -- build

missing=""
add() { missing="$missing $*"; }
have() { command -v "$1" >/dev/null 2>&1; }

for need in "$@"; do
    case "$need" in
    build)
        have make || add make
        have cmake || add cmake
        if ! have cc && ! have gcc; then
            add gcc libc6-dev
        elif [ ! -e /usr/include/stdio.h ]; then
            add libc6-dev
        fi
        ;;
    cxx) have g++ || add g++ ;;
    format) have clang-format || add clang-format ;;
    clang)
        have clang || add clang
        # clang's TSan/ASan runtimes live in libclang-rt-NN-dev.
        if ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.tsan-*.a \
            >/dev/null 2>&1; then
            add libclang-rt-14-dev
        fi
        ;;
    pkg-config) have pkg-config || add pkg-config ;;
    valgrind)
        if ! have valgrind || [ ! -e /usr/include/valgrind/valgrind.h ]; then
            add valgrind
        fi
        ;;
    http)
        have curl || add curl
        have wrk || add wrk
        ;;
    aarch64)
        have qemu-aarch64 || add qemu-user
        have aarch64-linux-gnu-gcc || add gcc-aarch64-linux-gnu
        [ -e /usr/aarch64-linux-gnu/include/stdio.h ] ||
            add libc6-dev-arm64-cross
        ;;
    *)
        echo "deps.sh: unknown need '$need'" >&2
        exit 2
        ;;
    esac
done

if [ -n "$missing" ]; then
    echo "deps.sh: installing:$missing" >&2
    if [ "$(id -u)" -eq 0 ]; then
        sudo=""
    elif have sudo; then
        sudo="sudo"
    else
        echo "deps.sh: not root and no sudo; install:$missing" >&2
        exit 1
    fi
    if ! have apt-get; then
        echo "deps.sh: no apt-get; install by hand:$missing" >&2
        exit 1
    fi
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
        echo "deps.sh: cmake >= 3.20 is needed, found $1.$2" >&2
        exit 1
    fi
    ;;
esac
exit 0
