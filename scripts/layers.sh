#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks the layering of src/: every #include "..." in src/ (src/arch/
# too) against the table below, and fails on a file that is in no layer
# or on an include of a higher layer.
#
#   scripts/layers.sh [-v] [SRC_DIR]
#
#   -v        also prints the include graph: each file, its layer, and the
#             headers it includes
#   SRC_DIR   the tree to check (default: the src/ beside this script)
#
# The rule: a file may include the headers of its own layer or of any
# layer with a lower number. Two layers with the same number (context and
# timer) sit side by side and may not include each other. System headers
# (#include <...>) and "weft.h", "weft_curl.h" (the public headers) are always allowed.
# An include is resolved as the compiler does: beside the including file
# first, then in SRC_DIR.
set -euo pipefail

# The layers, bottom up (docs/design.md's table): number, name, files (paths under src/; a * in a
# path is a glob). A file listed twice, or a file of src/ in no line, is an
# error: add new files here, in the layer their includes allow.
LAYERS='
0 util     util.h util.c atomic.h
1 context  ctx.h arch/*
1 timer    timer.h timer.c
2 sched    scheduler.h sched.c stack.c clock.h clock.c poller.h
3 wait     wait.h wait.c
4 scope    scope.h scope.c task.c policy.h policy.c spawn.c
5 sync     sync.h sync.c rwlock.c cond.c chan.c
6 io       io.h io.c net.c blocking.c poll_epoll.c
7 future   future.h future.c parallel.c retry.c breaker.c limiter.c bulkhead.c
8 select   select.c
9 actors   actor.h actor.c registry.c
10 supervisor supervisor.c
11 observe  observe.h dump.c deadlock.c stats.c trace.c where.c
12 runtime runtime.h runtime.c
13 curl     curl/*
'
UNCHECKED=''

usage() {
    sed -n '3,11s/^# \{0,1\}//p' "$0"
    exit "${1:-2}"
}

verbose=0
while [ $# -gt 0 ]; do
    case "$1" in
    -v) verbose=1 ;;
    -h | --help) usage 0 ;;
    -*) usage ;;
    *) break ;;
    esac
    shift
done
[ $# -le 1 ] || usage
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -eq 1 ]; then
    src=$1
elif [ "$PWD" = "$root" ]; then
    src=src
else
    src=$root/src
fi
[ -d "$src" ] || { echo "layers: no directory $src" >&2; exit 2; }
src=${src%/}

# ---- the table ----
pat_num=() pat_name=() pat_glob=()
while read -r line; do
    line=${line%%#*}
    read -r num name files <<<"$line" || true
    [ -n "${num:-}" ] || continue
    for g in $files; do
        pat_num+=("$num")
        pat_name+=("$name")
        pat_glob+=("$g")
    done
done <<<"$LAYERS"

# classify REL: sets lnum and lname (empty if REL is in no layer); a path
# that two table entries match is reported.
classify() {
    lnum='' lname=''
    local i
    for i in "${!pat_glob[@]}"; do
        # shellcheck disable=SC2053 # a glob on purpose
        if [[ $1 == ${pat_glob[$i]} ]]; then
            if [ -n "$lnum" ]; then
                problem "$src/$1 is in two lines of the table ($lname, ${pat_name[$i]})"
                return
            fi
            lnum=${pat_num[$i]} lname=${pat_name[$i]}
        fi
    done
}

problems=0
problem() {
    echo "layers: $*" >&2
    problems=$((problems + 1))
}

# normalize PATH: drops "." and resolves ".." (lexically); sets norm.
normalize() {
    local IFS=/ part out=()
    for part in $1; do
        case "$part" in
        '' | .) ;;
        ..) [ ${#out[@]} -gt 0 ] && unset 'out[${#out[@]}-1]' || out+=(..) ;;
        *) out+=("$part") ;;
        esac
    done
    norm="${out[*]}"
}

# ---- the files ----
declare -A num_of name_of incs_of
files=()
while IFS= read -r f; do
    rel=${f#"$src"/}
    files+=("$rel")
    classify "$rel"
    if [ -z "$lnum" ]; then
        problem "$src/$rel is in no layer: add it to the table at the top of $0"
        continue
    fi
    num_of[$rel]=$lnum
    name_of[$rel]=$lname
done < <(find "$src" -type f | LC_ALL=C sort)

# ---- the includes: one grep over the tree ----
nincs=0
while IFS= read -r hit; do
    f=${hit%%:*}
    rest=${hit#*:}
    lineno=${rest%%:*}
    text=${rest#*:}
    [[ $text =~ \"([^\"]+)\" ]] || continue
    inc=${BASH_REMATCH[1]}
    rel=${f#"$src"/}
    nincs=$((nincs + 1))
    incs_of[$rel]+=" $inc"
    [ "$inc" = weft.h ] && continue
    [ "$inc" = weft_curl.h ] && continue
    [ -n "${num_of[$rel]:-}" ] || continue # reported above
    case " $UNCHECKED " in *" $rel "*) continue ;; esac
    # Beside the including file first, then in src/.
    dir=.
    [[ $rel == */* ]] && dir=${rel%/*}
    normalize "$dir/$inc"
    if [ ! -f "$src/$norm" ]; then
        normalize "$inc"
        if [ ! -f "$src/$norm" ]; then
            problem "$src/$rel:$lineno includes \"$inc\", which is no file of $src"
            continue
        fi
    fi
    tnum=${num_of[$norm]:-}
    [ -n "$tnum" ] || continue # in no layer: reported above
    tname=${name_of[$norm]}
    fnum=${num_of[$rel]} fname=${name_of[$rel]}
    if [ "$tnum" -gt "$fnum" ]; then
        problem "$src/$rel:$lineno includes \"$inc\": $fname ($fnum) may not include $tname ($tnum), a higher layer"
    elif [ "$tnum" -eq "$fnum" ] && [ "$tname" != "$fname" ]; then
        problem "$src/$rel:$lineno includes \"$inc\": $fname ($fnum) may not include $tname ($tnum), a layer beside it"
    fi
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$src" |
    LC_ALL=C sort -t: -k1,1 -k2,2n || true)

if [ "$verbose" = 1 ]; then
    for rel in "${files[@]}"; do
        printf '%-22s %-12s ->%s\n' "$rel" \
            "${num_of[$rel]:-?} ${name_of[$rel]:-(none)}" \
            "${incs_of[$rel]:- (nothing)}"
    done
fi

if [ "$problems" -gt 0 ]; then
    echo "layers: $problems problem(s) in $src" >&2
    exit 1
fi
echo "layers: ok (${#files[@]} files, $nincs includes in $src)"
