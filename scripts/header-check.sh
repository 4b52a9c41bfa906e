#!/bin/sh
# SPDX-License-Identifier: MIT
# Compiles a program that includes weft.h (and uses its initialiser macros)
# as C and as C++ with every warning on and warnings as errors:
#   gcc and clang   -std=c11 -Wall -Wextra -pedantic
#   clang           -std=c11 -Weverything -Wno-padded (-Wpadded names every
#                   hole the ABI leaves between fields: a layout note, not a
#                   defect; configuration structs are set by field name)
#   g++ and clang++ -std=c++11 -Wall -Wextra -pedantic (and -std=c++17)
# weft_curl.h, weft_tls.h and weft_nats.h too, when their libraries'
# headers are there.
# Then checks that a program written against 0.2's names (test/compat/v02.c)
# still compiles, warning for each old name, and not with WEFT_NO_DEPRECATED.
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
# module NAME DEP: include/weft_NAME.h, when its library's header DEP is
# there (the modules are optional). CI installs every module's library
# (scripts/deps.sh curl, build, nats): a check skipped there would prove
# nothing, so a missing DEP fails it.
module() {
    if ! printf '#include <%s>\n' "$2" | cc -E -x c - >/dev/null 2>&1; then
        if [ -n "${CI:-}" ]; then
            echo "header-check: no <$2> in CI" >&2
            exit 1
        fi
        echo "header-check: weft_$1.h skipped (no $2)"
        return 1
    fi
    printf '#include "weft_%s.h"\nint main(void) { return 0; }\n' "$1" \
        >"$dir/$1.c"
    cp "$dir/$1.c" "$dir/$1.cpp"
    check gcc -std=c11 -Wall -Wextra -pedantic -Werror "$dir/$1.c"
    check clang -std=c11 -Weverything -Wno-padded -Werror "$dir/$1.c"
    check g++ -std=c++11 -Wall -Wextra -pedantic -Werror "$dir/$1.cpp"
}
have_curl=
if module curl curl/curl.h; then have_curl=1; fi
module tls openssl/ssl.h || true
module nats nats/nats.h || true
# 0.2's names (removed in 0.4): test/compat/v02.c, written against them,
# compiles without -Werror, with a deprecation warning for each old name
# and no other warning; with WEFT_NO_DEPRECATED they are gone (it fails).
compat=test/compat/v02.c
old_names="weft_sleep weft_mutex_trylock weft_rwlock_tryrdlock
  weft_rwlock_trywrlock weft_future_try weft_limiter_try weft_once_done
  weft_blocking_stats weft_task_release weft_actor_wait weft_sup_counts
  weft_sup_wait weft_with_timeout weft_with_fallback weft_gather weft_map
  weft_shutdown_deadline"
compat_check() { # compat_check COMPILER SOURCE NAMES...
    cc=$1 src=$2
    shift 2
    printf 'header-check: %s -std=c11 -Wall -Wextra, 0.2 names: %s\n' "$cc" "$src"
    if ! LC_ALL=C "$cc" -std=c11 -Wall -Wextra -Iinclude -fsyntax-only "$src" \
        2>"$dir/compat.log"; then
        echo "  does not compile:"
        sed 's/^/  /' "$dir/compat.log"
        fail=1
        return
    fi
    for old in "$@"; do
        if ! grep -q "'$old' is deprecated: use " "$dir/compat.log"; then
            echo "  no deprecation warning for $old"
            fail=1
        fi
    done
    if grep 'warning:' "$dir/compat.log" | grep -v 'Wdeprecated-declarations'; then
        echo "  (warnings other than deprecations)"
        fail=1
    fi
    if LC_ALL=C "$cc" -std=c11 -Iinclude -DWEFT_NO_DEPRECATED \
        -Werror=implicit-function-declaration -fsyntax-only \
        "$src" 2>/dev/null; then
        echo "  compiles with WEFT_NO_DEPRECATED: the old names are not hidden"
        fail=1
    fi
}
# shellcheck disable=SC2086 # old_names is a list of words
compat_check gcc $compat $old_names
# shellcheck disable=SC2086
compat_check clang $compat $old_names
if [ -n "$have_curl" ]; then
    cat >"$dir/curl_v02.c" <<'END'
#include "weft_curl.h"
int perform(CURL *easy);
int perform(CURL *easy)
{
    CURLcode code;
    return weft_curl_perform_code(easy, WEFT_NEVER, &code);
}
END
    compat_check gcc "$dir/curl_v02.c" weft_curl_perform_code
fi
[ "$fail" -eq 0 ] && echo "header-check: ok"
exit "$fail"
