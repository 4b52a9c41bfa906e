#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks the layering of src/, a folder per layer: every #include "..."
# in src/ against the table below, and fails on a file that is in no layer
# or on an include of a higher layer; that only wait/ and sched/ arm a
# waiter, park or claim a park token; then, asked, the calls: every symbol
# an object file of the library uses against the layer of the object that
# defines it.
#
#   scripts/layers.sh [-v] [--objects BUILD_DIR | --build] [SRC_DIR]
#
#   -v         also prints the include graph: each file, its layer, and
#              the headers it includes
#   --objects BUILD_DIR  checks the symbols of the object files CMake made
#              for weft_static in BUILD_DIR (any build: nm, or gcc-nm for
#              LTO objects, reads them); also WEFT_LAYERS_OBJECTS=BUILD_DIR
#   --build    configures and builds weft_static alone, without LTO, in
#              the checkout's build/layers, and checks its objects
#   SRC_DIR    the tree to check (default: the src/ beside this script)
#
# The rule: a file may include the headers of its own layer or of any
# layer with a lower number. Two layers with the same number (context and
# timer) sit side by side and may not include each other. System headers
# (#include <...>) and "weft.h", "weft_curl.h", "weft_tls.h", "weft_nats.h"
# (the public headers) are always allowed.
# An include is resolved as the compiler does: beside the including file
# first, then in SRC_DIR.
# The same rule holds for calls, which the includes alone do not show (a
# public function is declared in weft.h, which every file includes): an
# object may use a symbol defined by an object of its own layer or of a
# lower one, never of a layer above or beside it. A lower layer reaches a
# higher one through a hook or a table of functions the higher one
# installs. Uses that are allowed all the same are listed in EXCEPTIONS
# below, and printed.
set -euo pipefail

# The layers, bottom up (docs/design.md's table): number, name, folder
# under src/. A layer is a folder: every file in it is the layer's, and a
# file of src/ in no folder of the table is an error (add a new layer's
# folder here, in the place its includes allow).
LAYERS='
0 util       util
1 context    context
1 timer      timer
2 sched      sched
3 wait       wait
4 scope      scope
5 sync       sync
6 io         io
7 future     future
7 process    process
7 sim        sim
8 select     select
8 pool       pool
9 actor      actor
10 supervisor supervisor
11 observe   observe
12 runtime   runtime
13 curl      curl
13 tls       tls
13 swarm     swarm
13 nats      nats
'
UNCHECKED=''

# Symbol uses the symbol check allows although they go up or sideways:
# "user-file symbol", one a line, each with the reason in a comment above
# it. Each is printed; keep the list empty.
EXCEPTIONS='
'

usage() {
    sed -n '9,18s/^# \{0,1\}//p' "$0"
    exit "${1:-2}"
}

verbose=0
objdir=${WEFT_LAYERS_OBJECTS:-}
build=0
while [ $# -gt 0 ]; do
    case "$1" in
    -v) verbose=1 ;;
    --objects)
        [ $# -ge 2 ] || usage
        objdir=$2
        shift
        ;;
    --objects=*) objdir=${1#--objects=} ;;
    --build) build=1 ;;
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
        pat_glob+=("$g/*")
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
        problem "$src/$rel is in no layer: put it in its layer's folder (the table at the top of $0)"
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
    [ "$inc" = weft_tls.h ] && continue
    [ "$inc" = weft_nats.h ] && continue
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

if [ "$problems" -eq 0 ]; then
    echo "layers: includes ok (${#files[@]} files, $nincs includes in $src)"
fi

# ---- parking: only the wait layer and the scheduler ----
# A blocking primitive waits through the wait layer's entry (wait.h:
# weft__wait and its variants); arming a waiter, parking and claiming a
# park token by hand belong to the wait layer and the scheduler alone.
nparks=0
while IFS=: read -r f lineno text; do
    problem "$f:$lineno arms, parks or claims by hand (${text#"${text%%[![:space:]]*}"}): wait through weft__wait (wait.h)"
    nparks=$((nparks + 1))
done < <(grep -rnE '\<(weft__wait_arm|weft__wait_block|weft__park_prepare|weft__park_commit|weft__wake_claim)[[:space:]]*\(' \
    --include='*.c' --include='*.h' "$src" |
    grep -vE "^$src/(wait|sched)/" || true)
[ "$nparks" -eq 0 ] && echo "layers: parking ok (only wait/ and sched/ arm, park and claim)"

# ---- the symbols: nm over weft_static's objects ----
if [ "$build" = 1 ]; then
    objdir=$root/build/layers
    echo "layers: building weft_static without LTO in $objdir"
    cmake -S "$root" -B "$objdir" -DCMAKE_BUILD_TYPE=Debug -DWEFT_LTO=OFF \
        -DWEFT_TESTS=OFF -DWEFT_BENCH=OFF -DWEFT_EXAMPLES=OFF >/dev/null
    cmake --build "$objdir" -j"${JOBS:-2}" --target weft_static >/dev/null
fi
if [ -n "$objdir" ]; then
    odir=${objdir%/}/CMakeFiles/weft_static.dir/src
    [ -d "$odir" ] || {
        echo "layers: no objects of weft_static in $objdir ($odir): build it first, or use --build" >&2
        exit 2
    }
    # The objects whose source is a file of the table; an object of a
    # source since removed is left out.
    objs=()
    declare -A rel_of
    while IFS= read -r o; do
        rel=${o#"$odir"/}
        rel=${rel%.o}
        [ -n "${num_of[$rel]:-}" ] || {
            [ -f "$src/$rel" ] || continue
            problem "$o: $rel is in no layer"
            continue
        }
        objs+=("$o")
        rel_of[$o]=$rel
    done < <(find "$odir" -name '*.o' | LC_ALL=C sort)
    [ ${#objs[@]} -gt 0 ] || { echo "layers: no object files in $odir" >&2; exit 2; }
    # The first nm that reads a global definition in every object (an LTO
    # object without machine code needs the compiler's plugin: gcc-nm).
    syms='' nmtool=''
    for t in ${NM:-} nm gcc-nm llvm-nm; do
        command -v "$t" >/dev/null || continue
        nmout=$("$t" -A -P "${objs[@]}" 2>/dev/null) || continue
        ndef=$(awk '$3 ~ /^[A-TV-Zu]$/ { sub(/:$/, "", $1); d[$1] = 1 }
                    END { print length(d) }' <<<"$nmout")
        if [ "$ndef" -eq ${#objs[@]} ]; then
            syms=$nmout nmtool=$t
            break
        fi
    done
    [ -n "$nmtool" ] || { echo "layers: no nm here reads every object of $odir" >&2; exit 2; }
    # Each use of a symbol another of weft's objects defines: "user sym
    # definer".
    nuses=0 nup=0 nexc=0
    while read -r uo sym dobj; do
        nuses=$((nuses + 1))
        u=${rel_of[$uo]} d=${rel_of[$dobj]}
        un=${num_of[$u]} uname=${name_of[$u]}
        dn=${num_of[$d]} dname=${name_of[$d]}
        what=''
        if [ "$dn" -gt "$un" ]; then
            what='a higher layer'
        elif [ "$dn" -eq "$un" ] && [ "$dname" != "$uname" ]; then
            what='a layer beside it'
        else
            continue
        fi
        if grep -qxF "$u $sym" <<<"$(sed 's/#.*//; s/^[[:space:]]*//; s/[[:space:]]*$//' <<<"$EXCEPTIONS")"; then
            echo "layers: allowed by EXCEPTIONS: $src/$u uses $sym, defined in $src/$d: $uname ($un) calls $dname ($dn), $what"
            nexc=$((nexc + 1))
            continue
        fi
        problem "$src/$u uses $sym, defined in $src/$d: $uname ($un) may not call $dname ($dn), $what"
        nup=$((nup + 1))
    done < <(awk '
        { sub(/:$/, "", $1) }
        $3 ~ /^[A-TV-Zu]$/ { if (!($2 in def)) def[$2] = $1; next }
        $3 == "U" || $3 == "w" { n++; uo[n] = $1; us[n] = $2 }
        END {
            for (i = 1; i <= n; i++)
                if ((us[i] in def) && def[us[i]] != uo[i])
                    print uo[i], us[i], def[us[i]]
        }' <<<"$syms" | LC_ALL=C sort)
    if [ "$nup" -gt 0 ]; then
        echo "layers: $nup use(s) of a symbol of a higher layer or one beside it" >&2
    else
        echo "layers: symbols ok (${#objs[@]} objects of $odir, $nuses uses of weft's own symbols, $nexc allowed by EXCEPTIONS; $nmtool)"
    fi
fi

if [ "$problems" -gt 0 ]; then
    echo "layers: $problems problem(s) in $src" >&2
    exit 1
fi
