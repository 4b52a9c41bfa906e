#!/bin/sh
# SPDX-License-Identifier: MIT
# A throwaway PostgreSQL server for weft's tests (test/test_pg.c) and the
# examples in examples/pg/: it listens on a Unix socket only, in DIR.
#
#   scripts/pg-test-server.sh start DIR    initdb into DIR/data (if not
#                                          there yet), then start the server
#   scripts/pg-test-server.sh restart DIR  pg_ctl restart -m fast: the
#                                          server drops every connection
#   scripts/pg-test-server.sh stop DIR     pg_ctl stop -m immediate
#
# The socket is DIR/.s.PGSQL.5432: connect with "host=DIR dbname=postgres".
# fsync is off (a test's data need not survive a crash). PostgreSQL refuses
# to run as root: as root, DIR is given to the user `nobody` and the server
# runs as it (through runuser or setpriv). The binaries are Debian's
# (/usr/lib/postgresql/VERSION/bin, the newest there) or those on PATH;
# scripts/deps.sh pg installs them. Exits 0, or non-zero with a message on
# stderr (the tests skip, saying why).
set -eu

usage() {
    echo "usage: $0 start|restart|stop DIR" >&2
    exit 2
}
[ $# -eq 2 ] || usage
cmd=$1
dir=$2
case "$dir" in /*) ;; *) dir=$(pwd)/$dir ;; esac

bin=""
for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/pg_ctl" ] && [ -x "$d/initdb" ]; then
        bin=$d
        break
    fi
done
if [ -z "$bin" ]; then
    p=$(command -v pg_ctl 2>/dev/null || true)
    [ -n "$p" ] && bin=$(dirname "$p")
fi
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "pg-test-server: no PostgreSQL server binaries (initdb, pg_ctl):" \
        "scripts/deps.sh pg installs them" >&2
    exit 1
fi

# as CMD...: runs CMD as the server's user (nobody when we are root).
as() {
    if [ "$(id -u)" -ne 0 ]; then
        "$@"
    elif command -v runuser >/dev/null 2>&1; then
        runuser -u nobody -- "$@"
    elif command -v setpriv >/dev/null 2>&1; then
        setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"
    else
        echo "pg-test-server: running as root, and neither runuser nor" \
            "setpriv to run the server as nobody" >&2
        exit 1
    fi
}

data=$dir/data
log=$dir/server.log
case "$cmd" in
start)
    mkdir -p "$dir"
    # The server's user may not be allowed into the caller's directory.
    cd "$dir"
    if [ "$(id -u)" -eq 0 ]; then
        chown nobody "$dir"
        [ -d "$data" ] && chown -R nobody "$data"
    fi
    if [ ! -f "$data/PG_VERSION" ]; then
        as "$bin/initdb" -D "$data" -A trust -U postgres --no-sync \
            >"$dir/initdb.log" 2>&1 || {
            echo "pg-test-server: initdb failed:" >&2
            cat "$dir/initdb.log" >&2
            exit 1
        }
    fi
    as "$bin/pg_ctl" -D "$data" -l "$log" -w -t 30 \
        -o "-c listen_addresses='' -c unix_socket_directories='$dir' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=40" \
        start >/dev/null || {
        echo "pg-test-server: pg_ctl start failed:" >&2
        cat "$log" >&2 2>/dev/null || true
        exit 1
    }
    ;;
restart)
    cd "$dir"
    as "$bin/pg_ctl" -D "$data" -l "$log" -w -t 30 -m fast restart >/dev/null
    ;;
stop)
    [ -f "$data/postmaster.pid" ] || exit 0
    cd "$dir"
    as "$bin/pg_ctl" -D "$data" -w -t 30 -m immediate stop >/dev/null
    ;;
*) usage ;;
esac
