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
# weft_curl.h, when libcurl's headers are there (the module is optional).
if printf '#include <curl/curl.h>\n' | cc -E -x c - >/dev/null 2>&1; then
    printf '#include "weft_curl.h"\nint main(void) { return 0; }\n' \
        >"$dir/curl.c"
    cp "$dir/curl.c" "$dir/curl.cpp"
    check gcc -std=c11 -Wall -Wextra -pedantic -Werror "$dir/curl.c"
    check clang -std=c11 -Weverything -Wno-padded -Werror "$dir/curl.c"
    check g++ -std=c++11 -Wall -Wextra -pedantic -Werror "$dir/curl.cpp"
else
    echo "header-check: weft_curl.h skipped (no curl/curl.h)"
fi
[ "$fail" -eq 0 ] && echo "header-check: ok"
exit "$fail"
