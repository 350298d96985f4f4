#!/usr/bin/env bash
# The main job on the embedded default: the seed experiment (shared/seeds/000_*) on this machine.
# A pool in a local directory made "far away" (40 ms round trip per request), PostgreSQL 15 on
# ext4 on the pool's FUSE image, `pgbench -i -s 1` and a short TPC-B run, once without a log
# device (every fsync waits for the store) and once with a log and a cache device on local files.
#
#   scripts/demo.sh                  (env: DEMO_SECONDS=20 TPC-B length, DEMO_INIT_LIMIT_S=180)
set -euo pipefail
FD_NAME=demo
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$FARDISK_ROOT"
umask 022 # PostgreSQL runs as postgres and must reach directories made here

SECONDS_TPCB="${DEMO_SECONDS:-20}"
INIT_LIMIT_S="${DEMO_INIT_LIMIT_S:-180}"
LATENCY_MS=20 # each way: a 40 ms round trip, "half way across the country"

# One progress line per step, with the time since the demo started.
T0=$SECONDS
step() { fd_log "[$(printf '%3d' $((SECONDS - T0))) s] $*"; }

step "1/4 installing what the demo uses (scripts/install-deps.sh --demo: Debian packages, Rust)"
scripts/install-deps.sh --demo
# The demo's store is a local directory: no cloud clients (their TLS and crypto libraries are
# most of a fresh build), no debug info. `cargo build --release -p fardisk` builds everything.
step "2/4 building fardisk (cargo build --profile demo --no-default-features: file:// stores only)"
cargo build --profile demo --no-default-features -q -p fardisk
BIN="${CARGO_TARGET_DIR:-$FARDISK_ROOT/target}/demo/fardisk"
step "   built $BIN"

WORK="$(mktemp -d /tmp/fardisk-demo.XXXXXX)"
chmod 755 "$WORK" # PostgreSQL runs as postgres and must reach its data directory
export FARDISK_HOME="$WORK/home" FARDISK_RUN_DIR="$WORK/run"
mkdir -p "$FARDISK_RUN_DIR" && chmod 755 "$FARDISK_RUN_DIR"
LOOPS=()
cleanup() {
    set +e
    for d in "$WORK"/pg-*; do [ -d "$d/data" ] && scripts/postgres.sh stop "$d/data" >/dev/null 2>&1; done
    for m in "$WORK"/fs-*; do mountpoint -q "$m" && umount "$m"; done
    for l in "${LOOPS[@]}"; do losetup -d "$l"; done
    for p in nolog withlog; do "$BIN" export "$p" >/dev/null 2>&1; done
    rm -rf "$WORK"
}
trap cleanup EXIT

declare -A INIT TPS LAT
run_setup() { # run_setup NAME [create args...]
    local name="$1"; shift
    fd_log "== $name: create, import, volume, mkfs.ext4, initdb"
    "$BIN" create "$name" "file://$WORK/store-$name" "$@" --simulate "latency=$((2 * LATENCY_MS))"
    "$BIN" import "$name" --mount "$WORK/mnt-$name"
    "$BIN" volume create "$name/pg" 4G
    local loop; loop="$(losetup --direct-io=on -f --show "$WORK/mnt-$name/pg")"
    LOOPS+=("$loop")
    mkfs.ext4 -q "$loop"
    mkdir -p "$WORK/fs-$name"
    mount "$loop" "$WORK/fs-$name"
    local data="$WORK/fs-$name/data"
    PG_INITDB_NOSYNC=1 scripts/postgres.sh init "$data"
    scripts/postgres.sh start "$data"
    fd_log "== $name: pgbench -i -s 1 (limit ${INIT_LIMIT_S} s)"
    local t0; t0="$(date +%s.%N)"
    if timeout "$INIT_LIMIT_S" scripts/postgres.sh pgbench "$data" -i -s 1 -q postgres >"$WORK/pgbench-i-$name.log" 2>&1; then
        INIT[$name]="$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f} s')" "$t0" "$(date +%s.%N)")"
        fd_log "== $name: TPC-B, 4 clients, ${SECONDS_TPCB} s"
        local out; out="$(scripts/postgres.sh pgbench "$data" -c4 -j2 -T "$SECONDS_TPCB" postgres 2>/dev/null)"
        TPS[$name]="$(sed -n 's/^tps = \([0-9]*\.[0-9]\).*/\1/p' <<<"$out" | head -n 1)"
        LAT[$name]="$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' <<<"$out")"
        if scripts/postgres.sh check "$data" postgres >/dev/null; then fd_log "TPC-B invariant holds"; else fd_die "TPC-B invariant broken on $name"; fi
    else
        INIT[$name]="unfinished after ${INIT_LIMIT_S} s"
        TPS[$name]="-"
        LAT[$name]="-"
    fi
    scripts/postgres.sh stop "$data" >/dev/null
    "$BIN" status "$name" | sed 's/^/    /'
}

step "3/4 pool without a log device: PostgreSQL on it, pgbench -i -s 1, TPC-B ${SECONDS_TPCB} s"
run_setup nolog
step "4/4 pool with a log and a cache device on local files: the same"
run_setup withlog log "$WORK/log0" cache "$WORK/cache0"
step "done"

echo
echo "fardisk on a store ${LATENCY_MS} ms away each way (file:// + --simulate), PostgreSQL 15 on ext4:"
printf '%-34s %-24s %-10s %s\n' "setup" "pgbench -i -s 1" "TPC-B tps" "latency avg (ms)"
printf '%-34s %-24s %-10s %s\n' "no log device (fsync = txg sync)" "${INIT[nolog]}" "${TPS[nolog]}" "${LAT[nolog]}"
printf '%-34s %-24s %-10s %s\n' "log + cache on local files" "${INIT[withlog]}" "${TPS[withlog]}" "${LAT[withlog]}"
