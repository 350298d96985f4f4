#!/usr/bin/env bash
# PostgreSQL 15 helpers for tests and benchmarks, for a data directory on any path
# (a fardisk-backed ext4 mount, a loop file, a local dir).
#
#   postgres.sh init DIR            initdb into DIR (created, owned by postgres)
#   postgres.sh start DIR           start on a free port; socket dir in the run dir
#   postgres.sh stop DIR            fast shutdown (waits for the checkpoint)
#   postgres.sh crash DIR           immediate shutdown: no checkpoint, like a power cut
#                                   of the server (the kernel still has the page cache)
#   postgres.sh status DIR
#   postgres.sh env DIR             `export PGHOST/PGPORT/PGUSER` lines
#   postgres.sh psql DIR [ARGS]     psql connected to the server of DIR
#   postgres.sh pgbench DIR [ARGS]  pgbench connected to the server of DIR
#   postgres.sh check DIR [DB]      TPC-B invariant (scripts/sql/tpcb_invariant.sql);
#                                   exits 1 and says why when it does not hold
#   postgres.sh tpcb DIR [SCALE] [SECONDS] [CLIENTS] [JOBS]
#                                   pgbench -i, a TPC-B run, then check; prints
#                                   key=value lines (init_s, tps, latency_avg_ms)
#
# Binaries: /usr/lib/postgresql/15/bin (override with PG_BIN). As root the server
# runs as the `postgres` user via runuser. The running server's port and socket dir
# are read back from DIR/postmaster.pid, so no other state is kept.
set -euo pipefail
FD_NAME=postgres
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PG_USER=postgres
START_TIMEOUT_S=120

# as_pg CMD...: run CMD as the server's owner.
as_pg() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u "$PG_USER" -- "$@"
    else
        "$@"
    fi
}

need_dir() {
    [ -n "${1:-}" ] || fd_die "missing data directory argument"
    realpath -m "$1"
}

# One socket dir per data dir, short enough for the 107-byte unix socket path limit.
sock_dir() {
    local hash
    hash="$(printf '%s' "$1" | sha256sum | cut -c1-8)"
    printf '%s/pg/%s\n' "$FARDISK_RUN_DIR" "$hash"
}

# pm_field DIR N: line N of postmaster.pid (4 = port, 5 = socket dir).
pm_field() {
    [ -f "$1/postmaster.pid" ] || fd_die "no server running for $1 (postgres.sh start $1)"
    sed -n "${2}p" "$1/postmaster.pid"
}

conn_args() {
    printf '%s\n' -h "$(pm_field "$1" 5)" -p "$(pm_field "$1" 4)" -U "$PG_USER"
}

owned_dir() {
    mkdir -p "$1"
    if [ "$(id -u)" -eq 0 ]; then
        chown "$PG_USER:" "$1"
    fi
    chmod 700 "$1"
    as_pg test -w "$1" || fd_die "user $PG_USER cannot write $1: make its parent dirs traversable (chmod o+x)"
}

cmd_init() {
    local dir
    dir="$(need_dir "${1:-}")"
    if [ -e "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
        fd_die "$dir exists and is not empty"
    fi
    owned_dir "$dir"
    mkdir -p "$FARDISK_RUN_DIR"
    # PG_INITDB_NOSYNC=1: initdb without its own fsyncs, then one sync of the file system
    # (setup cost, not the thing measured).
    as_pg "$PG_BIN/initdb" -D "$dir" -U "$PG_USER" -A trust -E UTF8 --locale=C ${PG_INITDB_NOSYNC:+--no-sync} >"$FARDISK_RUN_DIR/initdb.log" 2>&1 \
        || { tail -n 20 "$FARDISK_RUN_DIR/initdb.log" >&2; fd_die "initdb $dir failed"; }
    [ -z "${PG_INITDB_NOSYNC:-}" ] || sync -f "$dir"
    fd_log "initialised $dir"
}

cmd_start() {
    local dir sock port
    dir="$(need_dir "${1:-}")"
    [ -f "$dir/PG_VERSION" ] || fd_die "$dir is not a data directory (postgres.sh init $dir)"
    sock="$(sock_dir "$dir")"
    mkdir -p "$FARDISK_RUN_DIR/pg"
    owned_dir "$sock"
    port="$(fd_free_port)"
    as_pg "$PG_BIN/pg_ctl" -D "$dir" -l "$sock/postgres.log" -w -t "$START_TIMEOUT_S" \
        -o "-p $port -k $sock -c listen_addresses=127.0.0.1" start >/dev/null \
        || { tail -n 20 "$sock/postgres.log" >&2; fd_die "pg_ctl start $dir failed (log: $sock/postgres.log)"; }
    fd_log "started $dir on port $port, socket dir $sock, log $sock/postgres.log"
}

cmd_stop_mode() {
    local dir="$1" mode="$2"
    if [ ! -f "$dir/postmaster.pid" ]; then
        fd_log "not running: $dir"
        return
    fi
    as_pg "$PG_BIN/pg_ctl" -D "$dir" -m "$mode" -w -t "$START_TIMEOUT_S" stop >/dev/null \
        || fd_die "pg_ctl stop -m $mode $dir failed"
    fd_log "stopped ($mode) $dir"
}

cmd_status() {
    local dir
    dir="$(need_dir "${1:-}")"
    as_pg "$PG_BIN/pg_ctl" -D "$dir" status
}

cmd_env() {
    local dir
    dir="$(need_dir "${1:-}")"
    printf 'export PGHOST=%s\nexport PGPORT=%s\nexport PGUSER=%s\n' \
        "$(pm_field "$dir" 5)" "$(pm_field "$dir" 4)" "$PG_USER"
}

cmd_client() {
    local tool="$1" dir args
    dir="$(need_dir "${2:-}")"
    shift 2
    [ -f "$dir/postmaster.pid" ] || fd_die "no server running for $dir (postgres.sh start $dir)"
    mapfile -t args < <(conn_args "$dir")
    "$PG_BIN/$tool" "${args[@]}" "$@"
}

cmd_check() {
    local dir db="${2:-postgres}" row ok
    dir="$(need_dir "${1:-}")"
    row="$(cmd_client psql "$dir" -X -At -v ON_ERROR_STOP=1 -d "$db" \
        -f "$FARDISK_ROOT/scripts/sql/tpcb_invariant.sql")" || fd_die "invariant query failed on $dir"
    IFS='|' read -r ok b t a h n nb nt na bad_b bad_t bad_a <<<"$row"
    local detail="branches=$b tellers=$t accounts=$a history=$h history_rows=$n rows=$nb/$nt/$na bad=$bad_b/$bad_t/$bad_a"
    if [ "$ok" = t ]; then
        fd_log "TPC-B invariant OK: $detail"
    else
        fd_log "TPC-B invariant BROKEN: $detail"
        return 1
    fi
}

cmd_tpcb() {
    local dir scale="${2:-1}" seconds="${3:-10}" clients="${4:-4}" jobs="${5:-2}" out t0 t1
    dir="$(need_dir "${1:-}")"
    t0="$(date +%s.%N)"
    cmd_client pgbench "$dir" -i -q -s "$scale" postgres >/dev/null 2>&1 || fd_die "pgbench -i failed"
    t1="$(date +%s.%N)"
    echo "init_s=$(python3 -c "print(round($t1 - $t0, 3))")"
    out="$(cmd_client pgbench "$dir" -c "$clients" -j "$jobs" -T "$seconds" postgres 2>&1)" \
        || { printf '%s\n' "$out" >&2; fd_die "pgbench run failed"; }
    echo "tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out")"
    echo "latency_avg_ms=$(sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' <<<"$out")"
    echo "transactions=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")"
    cmd_check "$dir"
}

main() {
    local cmd="${1:-}"
    [ $# -gt 0 ] && shift
    case "$cmd" in
        init) cmd_init "$@" ;;
        start) cmd_start "$@" ;;
        stop) cmd_stop_mode "$(need_dir "${1:-}")" fast ;;
        crash) cmd_stop_mode "$(need_dir "${1:-}")" immediate ;;
        status) cmd_status "$@" ;;
        env) cmd_env "$@" ;;
        psql | pgbench) cmd_client "$cmd" "$@" ;;
        check) cmd_check "$@" ;;
        tpcb) cmd_tpcb "$@" ;;
        *) sed -n '2,21p' "$0" >&2; exit 2 ;;
    esac
}

main "$@"
