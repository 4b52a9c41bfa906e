#!/bin/sh
# SPDX-License-Identifier: MIT
# Cross-builds weft for aarch64 and runs the test suite under qemu-user, so
# that the aarch64 context switch (src/context/aarch64_aapcs.S) runs somewhere
# even on an x86-64 machine.
#
#   scripts/aarch64-check.sh [build-dir]     (default: build/aarch64)
#
# Installs qemu-user and the aarch64 cross compiler with apt-get when they
# are missing (scripts/deps.sh aarch64). WEFT_TEST_SCALE defaults to 10:
# everything runs emulated. The library's runtime asserts are on. Built
# without LTO: what this checks is the switch and the atomics' orders on a
# weaker memory model, and LTO links took most of the build's time.
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build/aarch64}
scripts/deps.sh build aarch64
sysroot=/usr/aarch64-linux-gnu
mkdir -p "$dir"
cmake -S . -B "$dir" -DCMAKE_SYSTEM_NAME=Linux \
    -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
    -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc \
    -DCMAKE_ASM_COMPILER=aarch64-linux-gnu-gcc \
    "-DCMAKE_CROSSCOMPILING_EMULATOR=qemu-aarch64;-L;$sysroot" \
    -DWEFT_WERROR=ON -DWEFT_BENCH=OFF -DWEFT_ASSERTS=ON -DWEFT_LTO=OFF \
    >"$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; exit 1; }
grep -q 'context switch: asm' "$dir/configure.log" ||
    { echo "aarch64 build did not pick the assembly switch" >&2; exit 1; }
cmake --build "$dir" -j"${JOBS:-2}"
qemu-aarch64 -L "$sysroot" "$dir/demo" >/dev/null
# qemu-user has no io_uring and no seccomp filters: what needs them skips
# here, whatever the caller requires (T_NEED in test/t.h).
WEFT_TEST_SCALE=${WEFT_TEST_SCALE:-10} WEFT_TEST_REQUIRE= \
    ctest --test-dir "$dir" -j"${JOBS:-2}" --timeout 300 --output-on-failure \
    --no-tests=error
