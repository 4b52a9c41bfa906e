#!/bin/sh
# SPDX-License-Identifier: MIT
# Compiles a program that includes weft.h (and uses its initialiser macros)
# as C and as C++ with every warning on and warnings as errors:
#   gcc and clang   -std=c11 -Wall -Wextra -pedantic
#   clang           -std=c11 -Weverything -Wno-padded (-Wpadded names every
#                   hole the ABI leaves between fields: a layout note, not a
#                   defect; configuration structs are set by field name)
#   g++ and clang++ -std=c++11 -Wall -Wextra -pedantic (and -std=c++17)
# Installs g++ and clang when missing (scripts/deps.sh cxx clang).
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh build cxx clang
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
check() { # check COMPILER FLAGS... SOURCE
    printf 'header-check: %s\n' "$*"
    if ! "$@" -Iinclude -Itest/header -fsyntax-only 2>"$dir/log"; then
        sed 's/^/  /' "$dir/log"
        fail=1
    elif [ -s "$dir/log" ]; then
        sed 's/^/  /' "$dir/log"
        fail=1
    fi
}
c=test/header/header_c.c
cxx=test/header/header_cxx.cpp
check gcc -std=c11 -Wall -Wextra -pedantic -Werror $c
check clang -std=c11 -Wall -Wextra -pedantic -Werror $c
check clang -std=c11 -Weverything -Wno-padded -Werror $c
check g++ -std=c++11 -Wall -Wextra -pedantic -Werror $cxx
check g++ -std=c++17 -Wall -Wextra -pedantic -Werror $cxx
check clang++ -std=c++11 -Wall -Wextra -pedantic -Werror $cxx
check clang++ -std=c++17 -Wall -Wextra -pedantic -Werror $cxx
[ "$fail" -eq 0 ] && echo "header-check: ok"
exit "$fail"
