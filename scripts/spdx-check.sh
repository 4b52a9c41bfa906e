#!/bin/sh
# SPDX-License-Identifier: MIT
# Lists every tracked source file (C, headers, assembly, scripts, CMake,
# Makefile) whose first lines lack the SPDX licence line, and fails if any
# does. weft is MIT-licensed (LICENSE).
set -eu
cd "$(dirname "$0")/.."
bad=0
for f in $(git ls-files -- '*.c' '*.h' '*.S' '*.cpp' '*.inc' '*.sh' \
    '*.cmake.in' CMakeLists.txt Makefile .ci/run bench/run bench/compare \
    bench/ab); do
    if ! head -n 3 "$f" | grep -q 'SPDX-License-Identifier: MIT'; then
        echo "spdx-check: no SPDX-License-Identifier line: $f"
        bad=1
    fi
done
[ "$bad" -eq 0 ] && echo "spdx-check: ok"
exit "$bad"
