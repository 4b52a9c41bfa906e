#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks the patterns cookbook, docs/patterns.md, against its examples,
# examples/patterns/*.c. Builds nothing: build first, e.g.
#
#   cmake -S . -B build/release && cmake --build build/release -j2
#   scripts/patterns-check.sh build/release
#
# 1. Every examples/patterns/NAME.c has an executable BUILD/pattern_NAME,
#    and every BUILD/pattern_* runs and exits 0 (each checks its own
#    result) within 10 seconds.
# 2. Every ```c block of docs/patterns.md whose preceding line is
#    <!-- from examples/patterns/NAME.c --> appears verbatim in that file:
#    the same consecutive whole lines, once the block's leading and
#    trailing blank lines are trimmed. So the quoted code stays true.
#    <!-- from examples/pg/NAME.c --> is checked the same way (the libpq
#    example, which needs a PostgreSQL server: its tests run it).
# 3. Every example is quoted at least once that way.
#
# Usage: scripts/patterns-check.sh [BUILD_DIR]  (default: build/release)
# Exits 0 if everything holds, else 1 with a message per problem.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -ge 1 ]; then
    build=$(cd "$1" 2>/dev/null && pwd) ||
        { echo "patterns-check: no build directory '$1'" >&2; exit 1; }
else
    build=$root/build/release
fi
cd "$root" || exit 1
doc=docs/patterns.md
failed=0
fail() {
    echo "FAIL: $*" >&2
    failed=1
}

# ---- 1. run the examples -------------------------------------------------
for src in examples/patterns/*.c; do
    [ -e "$src" ] || { fail "no examples/patterns/*.c"; break; }
    name=$(basename "$src" .c)
    # tls_echo needs the weft_tls module: a build without it has no
    # libweft_tls.a, and no pattern_tls_echo to run.
    [ "$name" = tls_echo ] && [ ! -e "$build/libweft_tls.a" ] && continue
    [ -x "$build/pattern_$name" ] ||
        fail "$src has no executable $build/pattern_$name (build it first)"
done
ran=0
for exe in "$build"/pattern_*; do
    if [ ! -f "$exe" ] || [ ! -x "$exe" ]; then continue; fi
    ran=$((ran + 1))
    if out=$(timeout 10 "$exe" 2>&1); then
        echo "ok    $(basename "$exe")"
    else
        rc=$?
        fail "$(basename "$exe") exited with status $rc; its output:"
        printf '%s\n' "$out" | sed 's/^/    /' >&2
    fi
done
[ "$ran" -gt 0 ] || fail "no pattern_* executable in $build"

# ---- 2. the quoted code is the examples' code ----------------------------
[ -f "$doc" ] || { fail "no $doc"; exit 1; }
tmp=$(mktemp -d /tmp/patterns-check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# Extracts each marked block into $tmp/N.snip (blank lines trimmed at both
# ends), with "SOURCE LINE" in $tmp/N.from; reports malformed markers.
awk -v dir="$tmp" '
function flush(   i, lo, hi, f) {
    lo = 1; hi = nl
    while (lo <= hi && lines[lo] ~ /^[ \t]*$/) lo++
    while (hi >= lo && lines[hi] ~ /^[ \t]*$/) hi--
    n++
    f = dir "/" n ".snip"
    printf "" > f
    for (i = lo; i <= hi; i++) print lines[i] > f
    close(f)
    f = dir "/" n ".from"
    print src, start > f
    close(f)
}
inblock {
    if ($0 ~ /^```[ \t]*$/) { flush(); inblock = 0 } else lines[++nl] = $0
    next
}
want {
    want = 0
    if ($0 ~ /^```c[ \t]*$/) { inblock = 1; nl = 0; start = FNR; next }
    printf "%s:%d: a from-marker must be followed by a ```c block\n",
        FILENAME, FNR - 1 > "/dev/stderr"
    bad = 1
}
/^<!-- from examples\/(patterns|pg)\/[A-Za-z0-9_]+\.c -->[ \t]*$/ {
    src = $0
    sub(/^<!-- from /, "", src); sub(/ -->.*$/, "", src)
    want = 1
    next
}
/<!-- from / {
    printf "%s:%d: malformed marker (want <!-- from examples/patterns/NAME.c -->)\n",
        FILENAME, FNR > "/dev/stderr"
    bad = 1
}
END {
    if (inblock) {
        printf "%s:%d: unterminated ```c block\n", FILENAME, start > "/dev/stderr"
        bad = 1
    }
    exit bad
}' "$doc" || fail "$doc has malformed quotes (above)"

blocks=0
for from in "$tmp"/*.from; do
    [ -e "$from" ] || break
    blocks=$((blocks + 1))
    read -r src line <"$from"
    snip=${from%.from}.snip
    if [ ! -f "$src" ]; then
        fail "$doc:$line quotes $src, which does not exist"
        continue
    fi
    if [ ! -s "$snip" ]; then
        fail "$doc:$line: the block quoting $src is empty"
        continue
    fi
    # Whole consecutive lines: compare "\n"-framed strings.
    if ! awk 'FNR == 1 { f++ }
              f == 1 { s = s $0 "\n"; next }
              { t = t $0 "\n" }
              END { exit index("\n" t, "\n" s) ? 0 : 1 }' "$snip" "$src"; then
        fail "$doc:$line: the c block is not verbatim in $src"
        while IFS= read -r l; do
            if ! grep -Fxq -- "$l" "$src"; then
                echo "    first line not in $src: $l" >&2
                break
            fi
        done <"$snip"
    fi
done
for src in examples/patterns/*.c; do
    [ -e "$src" ] || break
    grep -qx "<!-- from $src -->" "$doc" ||
        fail "$src is never quoted in $doc (<!-- from $src --> before a \`\`\`c block)"
done

if [ "$failed" -ne 0 ]; then
    echo "patterns-check: FAILED" >&2
    exit 1
fi
echo "patterns-check: $ran examples ran, $blocks quoted blocks match"
