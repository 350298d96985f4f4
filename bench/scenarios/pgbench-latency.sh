#!/usr/bin/env bash
# about: seed 000: PostgreSQL on ext4, pgbench -i -s 1 and TPC-B at 1, 4 and 8 clients, store 0/10/20 ms one-way (MinIO via toxiproxy): local loop file vs fardisk without log vs with log + cache (FUSE over /dev/fuse, over io_uring, and under --holder)
# Every setup runs in this one invocation, so the ratios compare like with like on a noisy
# machine. For each one-way latency L (toxiproxy between fardisk and MinIO, both directions):
#   fardisk without a log (every fsync waits for a txg in MinIO), fardisk with a log and a
#   cache file on local disk, and the same over FUSE-over-io_uring (`import --fuse-uring on`,
#   which turns the kernel's enable_uring switch on; left out on a kernel without it), and the
#   same under `import --holder` (every write durable in the log before its reply, so that it
#   survives an engine restart);
#   PostgreSQL 15 on ext4 on a loop device over the pool's FUSE image.
# The local row (ext4 on a loop file on local disk, no fardisk) is the limit and runs once.
# Each row: `pgbench -i -s SCALE` time, TPC-B with 1, 4 and 8 clients (synchronous_commit
# on; -n: the history of every run is kept, so the TPC-B invariant covers all), TPS per second of
# the 8-client run (a series), and the invariant, which must hold.
#
# Env: FARDISK_PGBENCH_LATENCIES_MS ("0 10 20"), FARDISK_PGBENCH_SECONDS (30 per TPC-B run),
#      FARDISK_PGBENCH_SCALE (1), FARDISK_PGBENCH_INIT_LIMIT_S (600: a slower init is reported
#      as unfinished, not waited for), FARDISK_PGBENCH_SETUPS ("nolog logcache logcache-uring
#      logcache-holder"; also "logcache-ahead": log + cache with the pool property
#      log_write_ahead=on, plain writes' records written to the log before the fsync that
#      flushes them; and "logcache-bin2": log + cache run by FARDISK_BIN2, a second binary, its
#      label suffixed with FARDISK_BIN2_LABEL: a before/after pair in one run),
#      FARDISK_PGBENCH_ARC_MAX (bytes, the pools' arc_max; default the pool default, 1 GiB),
#      FARDISK_PGBENCH_SCENARIO (result scenario name, default pgbench-latency), FARDISK_BIN (a
#      fardisk binary to measure instead of a fresh release build, e.g. a before/after pair).
# The larger scale that does not fit in the ARC (seed 000's second experiment):
#   FARDISK_PGBENCH_SCALE=50 FARDISK_PGBENCH_LATENCIES_MS=20 FARDISK_PGBENCH_SETUPS="nolog logcache logcache-uring" \
#   FARDISK_PGBENCH_ARC_MAX=268435456 FARDISK_PGBENCH_SCENARIO=pgbench-scale50 bench/run.sh pgbench-latency
set -euo pipefail
FD_NAME=pgbench-latency
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cd "$FARDISK_ROOT"
umask 022

LATENCIES="${FARDISK_PGBENCH_LATENCIES_MS:-0 10 20}"
RUN_S="${FARDISK_PGBENCH_SECONDS:-30}"
SCALE="${FARDISK_PGBENCH_SCALE:-1}"
INIT_LIMIT_S="${FARDISK_PGBENCH_INIT_LIMIT_S:-600}"
SETUPS="${FARDISK_PGBENCH_SETUPS:-nolog logcache logcache-uring logcache-holder}"
[ -e /sys/module/fuse/parameters/enable_uring ] || { SETUPS="${SETUPS/logcache-uring/}"; fd_log "no FUSE over io_uring on this kernel: its rows are left out"; }
FUSE_URING=off # per row: import --fuse-uring
HOLDER_ARGS=() # per row: import --holder
SCENARIO="${FARDISK_PGBENCH_SCENARIO:-pgbench-latency}"
ARC_ARGS=()
[ -n "${FARDISK_PGBENCH_ARC_MAX:-}" ] && ARC_ARGS=(-o "arc_max=$FARDISK_PGBENCH_ARC_MAX")
PG="$FARDISK_ROOT/scripts/postgres.sh"
WORK="$FARDISK_RUN_DIR/bench/pgbench-latency"
RESULTS="$FARDISK_BENCH_RESULTS"
STAMP="$(date -u +%Y%m%dT%H%M%S)"
export FARDISK_BENCH_STARTED_AT="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

BIN="$(fd_fardisk_bin)"

rm -rf "$WORK"
mkdir -p "$WORK/series"
chmod 755 "$FARDISK_RUN_DIR" "$FARDISK_RUN_DIR/bench" "$WORK"
export FARDISK_HOME="$WORK/home" FARDISK_CONFIG="$WORK/none.conf"
: > "$FARDISK_CONFIG"
LOOP=""
POOL=""
teardown_row() {
    set +e
    [ -d "$WORK/fs/data" ] && "$PG" stop "$WORK/fs/data" >/dev/null 2>&1
    mountpoint -q "$WORK/fs" && umount "$WORK/fs"
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    LOOP=""
    # The pool's objects go too: a day of runs left 35 GB of pools in MinIO's data directory.
    [ -n "$POOL" ] && "$BIN" export "$POOL" >/dev/null 2>&1 && "$BIN" destroy "$POOL" >/dev/null 2>&1
    POOL=""
    set -e
}
cleanup() {
    teardown_row
    "$FARDISK_ROOT/scripts/toxiproxy.sh" stop >/dev/null 2>&1
    "$FARDISK_ROOT/scripts/minio.sh" stop >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT

"$FARDISK_ROOT/scripts/minio.sh" start
"$FARDISK_ROOT/scripts/toxiproxy.sh" start
eval "$("$FARDISK_ROOT/scripts/toxiproxy.sh" env)"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

# CPU time in jiffies (USER_HZ): the whole machine's busy time (every CPU's user, nice, system,
# irq, softirq and steal; idle and iowait are not busy), and one process's user + system time
# (0 when there is no such process).
machine_busy_jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
process_jiffies() {
    local pid="$1"
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || { echo 0; return; }
    # Fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
    sed 's/^.*) //' "/proc/$pid/stat" | awk '{ print $12 + $13 }'
}
# The store's processes (MinIO and toxiproxy): their CPU is the store's, which in production runs
# on other machines, so it is reported apart from the machine total.
store_jiffies() {
    local total=0 f pid
    for f in "$FARDISK_RUN_DIR/minio/pid" "$FARDISK_RUN_DIR/toxiproxy/pid"; do
        pid="$(cat "$f" 2>/dev/null || true)"
        total=$((total + $(process_jiffies "$pid")))
    done
    echo "$total"
}

# loop_stat: the loop device's /sys/block/loopN/stat (the layer both rows share: what ext4
# asks of its block device, and how long each kind took).
loop_stat() { cat "/sys/block/$(basename "$LOOP")/stat"; }

# loop_io_per_tx STAT0 STAT1 TX: "flushes-per-tx flush-ms-mean data-writes-per-tx
# data-KiB-per-tx data-write-ms-mean" of the loop device between two loop_stat readings (fields
# 5, 7, 8: writes, sectors, ms; 16, 17: flushes, ms). An fsync's flush reaches the device as an
# empty write with a preflush, counted as a write (of no sectors) and as a flush, taking about
# as long as the flush: data writes are writes less flushes, their time the write time less the
# flush time (fio's own write latency agreed within 4 us on this kernel, 6.18).
loop_io_per_tx() {
    python3 -c 'import sys
a, b = [int(x) for x in sys.argv[1].split()], [int(x) for x in sys.argv[2].split()]
tx = max(int(sys.argv[3] or 0), 1)
d = [y - x for x, y in zip(a, b)]
flushes, flush_ms = (d[15], d[16]) if len(d) >= 17 else (0, 0)
writes, write_ms = max(d[4] - flushes, 0), max(d[7] - flush_ms, 0)
print(f"{flushes / tx:.2f} {flush_ms / max(flushes, 1):.3f} {writes / tx:.2f} {d[6] / 2 / tx:.1f} {write_ms / max(writes, 1):.3f}")' "$1" "$2" "$3"
}

# tpcb CLIENTS SERIES: a TPC-B run of RUN_S seconds with CLIENTS clients; prints tps, latency,
# transactions, the CPU-seconds per 10,000 transactions of the machine (all of it: PostgreSQL,
# the kernel, fardisk, the store), of the fardisk daemon ($DAEMON_PID, 0 for the local row) and
# of the store's processes, then the loop device's I/O per transaction (loop_io_per_tx); writes
# the per-second TPS of the run to SERIES.
tpcb() {
    local clients="$1" series="$2" out m0 d0 s0 m1 d1 s1 tx io0 io1
    m0="$(machine_busy_jiffies)" d0="$(process_jiffies "$DAEMON_PID")" s0="$(store_jiffies)"
    io0="$(loop_stat)"
    out="$("$PG" pgbench "$WORK/fs/data" -c "$clients" -j "$((clients < 2 ? 1 : 2))" -T "$RUN_S" -n --progress=1 postgres 2>&1)" \
        || { printf '%s\n' "$out" >&2; fd_die "pgbench -c $clients failed"; }
    m1="$(machine_busy_jiffies)" d1="$(process_jiffies "$DAEMON_PID")" s1="$(store_jiffies)"
    io1="$(loop_stat)"
    { echo "# seconds, TPS"; sed -n 's/^progress: \([0-9.]*\) s, \([0-9.]*\) tps.*/\1 \2/p' <<<"$out"; } > "$series"
    tx="$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")"
    echo "$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out") $(sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' <<<"$out") $tx" \
        "$(python3 -c 'import os, sys
hz = os.sysconf("SC_CLK_TCK"); tx = max(int(sys.argv[1] or 0), 1)
print(" ".join(f"{10000 * int(j) / hz / tx:.2f}" for j in sys.argv[2:]))' "$tx" $((m1 - m0)) $((d1 - d0)) $((s1 - s0)))" \
        "$(loop_io_per_tx "$io0" "$io1" "$tx")"
}

# run_row ORDER SETUP LATENCY_MS KIND [create args]: one configuration, one result file.
run_row() {
    local order="$1" setup="$2" lat="$3" kind="$4"; shift 4
    fd_log "== $setup"
    mkdir -p "$WORK/fs"
    if [ "$kind" = local ]; then
        truncate -s 4G "$WORK/local.img"
        LOOP="$(losetup --direct-io=on -f --show "$WORK/local.img")"
    else
        POOL="p$order"
        "$BIN" create "$POOL" "s3://${FARDISK_BUCKET:-fardisk}/bench-$STAMP-$POOL" "$@" ${ARC_ARGS[@]+"${ARC_ARGS[@]}"} >/dev/null
        "$BIN" import "$POOL" --mount "$WORK/mnt-$POOL" --fuse-uring "$FUSE_URING" ${HOLDER_ARGS[@]+"${HOLDER_ARGS[@]}"} >/dev/null
        "$BIN" volume create "$POOL/pg" 4G >/dev/null
        LOOP="$(losetup --direct-io=on -f --show "$WORK/mnt-$POOL/pg")"
    fi
    mkfs.ext4 -q "$LOOP"
    mount "$LOOP" "$WORK/fs"
    chmod 755 "$WORK/fs"
    PG_INITDB_NOSYNC=1 "$PG" init "$WORK/fs/data" >/dev/null
    "$PG" start "$WORK/fs/data" >/dev/null
    local t0 init_s c1 c8
    t0="$(date +%s.%N)"
    if ! timeout "$INIT_LIMIT_S" "$PG" pgbench "$WORK/fs/data" -i -q -s "$SCALE" postgres >"$WORK/init.log" 2>&1; then
        fd_log "$setup: pgbench -i did not finish in $INIT_LIMIT_S s; row written with init_unfinished"
        FARDISK_BENCH_BINARY="${POOL:+$BIN}" python3 "$FARDISK_ROOT/bench/lib/result.py" --out-dir "$RESULTS" --scenario "$SCENARIO" --setup "$setup" \
            --order "$order" --durable yes --param latency_ms_one_way="$lat" --param scale="$SCALE" \
            --metric init_s="$INIT_LIMIT_S" --metric init_unfinished=1 >/dev/null
        teardown_row
        return
    fi
    init_s="$(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$t0" "$(date +%s.%N)")"
    DAEMON_PID=""
    [ -n "$POOL" ] && DAEMON_PID="$("$BIN" status "$POOL" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["pools"][0]["pid"])')"
    local tx1 cpu1 daemon1 store1 tx4 cpu4 daemon4 store4 tx8 cpu8 daemon8 store8 io1 io4 io8
    read -r tps1 lat1 tx1 cpu1 daemon1 store1 io1 <<<"$(tpcb 1 "$WORK/series/c1")"
    read -r tps4 lat4 tx4 cpu4 daemon4 store4 io4 <<<"$(tpcb 4 "$WORK/series/c4")"
    read -r tps8 lat8 tx8 cpu8 daemon8 store8 io8 <<<"$(tpcb 8 "$WORK/series/tps-c8-$order")"
    # In the table: the loop device's flush and data write times with 4 and 8 clients, and its
    # flushes and data writes per transaction with 8 (the log line has all three runs).
    local io_metrics=() fl flm wr wrk wrm
    read -r fl flm wr wrk wrm <<<"$io4"
    io_metrics+=(--metric "loop_flush_ms_mean_c4=$flm" --metric "loop_data_write_ms_mean_c4=$wrm")
    read -r fl flm wr wrk wrm <<<"$io8"
    io_metrics+=(--metric "loop_flush_ms_mean_c8=$flm" --metric "loop_data_write_ms_mean_c8=$wrm"
        --metric "loop_flushes_per_tx_c8=$fl" --metric "loop_data_writes_per_tx_c8=$wr")
    fd_log "$setup: loop device per transaction (flushes, flush ms mean, data writes, KiB written, data write ms mean): 1 client $io1; 4 clients $io4; 8 clients $io8"
    "$PG" check "$WORK/fs/data" postgres || fd_die "$setup: TPC-B invariant broken"
    fd_log "$setup: init ${init_s} s, TPC-B ${tps1} tps (1 client), ${tps4} tps (4 clients), ${tps8} tps (8 clients); CPU-s per 10k transactions with 8 clients: machine ${cpu8}, daemon ${daemon8}, store ${store8}"
    local puts=""
    if [ -n "$POOL" ]; then
        puts="$("$BIN" status "$POOL" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["pools"][0]["store_requests"]["put"]["requests"])')"
    fi
    # A fardisk row names the commit its binary was built from (FARDISK_BIN2 may be an older one).
    FARDISK_BENCH_BINARY="${POOL:+$BIN}" python3 "$FARDISK_ROOT/bench/lib/result.py" --out-dir "$RESULTS" --scenario "$SCENARIO" --setup "$setup" \
        --order "$order" --durable yes --duration-s "$RUN_S" \
        --param latency_ms_one_way="$lat" --param scale="$SCALE" --param seconds="$RUN_S" \
        --metric init_s="$init_s" --metric tps_c1="$tps1" --metric latency_ms_c1="$lat1" \
        --metric tps_c4="$tps4" --metric latency_ms_c4="$lat4" \
        --metric tps_c8="$tps8" --metric latency_ms_c8="$lat8" ${puts:+--metric store_puts="$puts"} \
        --metric cpu_s_per_10k_tx_c1="$cpu1" --metric daemon_cpu_s_per_10k_tx_c1="$daemon1" \
        --metric store_cpu_s_per_10k_tx_c1="$store1" --metric cpu_s_per_10k_tx_c8="$cpu8" \
        --metric daemon_cpu_s_per_10k_tx_c8="$daemon8" --metric store_cpu_s_per_10k_tx_c8="$store8" \
        "${io_metrics[@]}" --series "tps_8_clients=$WORK/series/tps-c8-$order" \
        --notes "store: MinIO on loopback behind toxiproxy; load average $load_before at the start" >/dev/null
    teardown_row
}

order=0
run_row "$order" "local ext4 on a loop file (the limit)" 0 local
for lat in $LATENCIES; do
    "$FARDISK_ROOT/scripts/toxiproxy.sh" latency "$lat" >/dev/null
    order=$((order + 1))
    if [[ " $SETUPS " == *" nolog "* ]]; then
        run_row "$order" "fardisk, no log, ${lat} ms one-way" "$lat" pool
    fi
    order=$((order + 1))
    if [[ " $SETUPS " == *" logcache "* ]]; then
        run_row "$order" "fardisk, log + cache, ${lat} ms one-way" "$lat" pool log "$WORK/log-$order" cache "$WORK/cache-$order"
    fi
    rm -f "$WORK/log-$order" "$WORK/cache-$order"
    order=$((order + 1))
    if [[ " $SETUPS " == *" logcache-uring "* ]]; then
        FUSE_URING=on
        run_row "$order" "fardisk, log + cache, FUSE over io_uring, ${lat} ms one-way" "$lat" pool log "$WORK/log-$order" cache "$WORK/cache-$order"
        FUSE_URING=off
    fi
    rm -f "$WORK/log-$order" "$WORK/cache-$order"
    order=$((order + 1))
    if [[ " $SETUPS " == *" logcache-holder "* ]]; then
        HOLDER_ARGS=(--holder)
        run_row "$order" "fardisk, log + cache, under --holder, ${lat} ms one-way" "$lat" pool log "$WORK/log-$order" cache "$WORK/cache-$order"
        HOLDER_ARGS=()
    fi
    rm -f "$WORK/log-$order" "$WORK/cache-$order"
    order=$((order + 1))
    if [[ " $SETUPS " == *" logcache-ahead "* ]]; then
        run_row "$order" "fardisk, log + cache, log_write_ahead=on, ${lat} ms one-way" "$lat" pool log "$WORK/log-$order" cache "$WORK/cache-$order" -o log_write_ahead=on
    fi
    rm -f "$WORK/log-$order" "$WORK/cache-$order"
    order=$((order + 1))
    if [[ " $SETUPS " == *" logcache-bin2 "* ]]; then
        [ -x "${FARDISK_BIN2:-}" ] || fd_die "setup logcache-bin2 needs FARDISK_BIN2, a second fardisk binary"
        MAIN_BIN="$BIN"
        BIN="$FARDISK_BIN2"
        run_row "$order" "fardisk, log + cache, ${FARDISK_BIN2_LABEL:-second binary}, ${lat} ms one-way" "$lat" pool log "$WORK/log-$order" cache "$WORK/cache-$order"
        BIN="$MAIN_BIN"
    fi
    rm -f "$WORK/log-$order" "$WORK/cache-$order"
done
"$FARDISK_ROOT/scripts/toxiproxy.sh" latency 0 >/dev/null
fd_log "done: $(ls "$RESULTS"/"$SCENARIO"-* 2>/dev/null | wc -l) $SCENARIO result files in $RESULTS"
