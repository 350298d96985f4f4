#!/usr/bin/env bash
# Profile of the FUSE path for one ext4 fsync (docs/design/0004-fuse-path-profile.md).
# Builds the stack users run -- a pool with a log file and a cache file, store `file://` made
# far away with --simulate, its volume's image on a loop device (--direct-io=on), ext4 on it --
# and runs fio's 4 KiB randwrite with fsync=1 (psync, queue depth 1) twice:
#   1. under `perf record` of the fuse:fuse_request_{send,end} and block:block_rq_{issue,complete}
#      tracepoints: FUSE requests per fsync by opcode, their latency as the kernel sees it (send
#      to end), the flushes the loop device receives, and the engine's own counters before and
#      after (intent log sync requests, log commits, log-device writes, commit latency);
#   2. under `perf record -e cpu-clock -g` of the daemon: where its CPU goes per request.
# The same fio job on ext4 on a loop file on the local disk gives the reference fsync latency.
#
# Env: PROFILE_SECONDS (per fio run, default 15), FARDISK_BIN (default target/debug/fardisk),
#      PROFILE_FUSE_URING (on|off|auto: passed as `import --fuse-uring`, when set),
#      PROFILE_OUT (directory for the raw outputs, default a temp dir that is kept).
# Needs root, perf (linux-perf), fio, losetup, mkfs.ext4.
set -euo pipefail
FD_NAME=fuse-profile
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

SECS="${PROFILE_SECONDS:-15}"
B="${FARDISK_BIN:-$FARDISK_ROOT/target/debug/fardisk}"
OUT="${PROFILE_OUT:-$(mktemp -d /tmp/fardisk-profile.XXXXXX)}"
W="$(mktemp -d /tmp/fardisk-profile-work.XXXXXX)"
export FARDISK_HOME="$W/home" FARDISK_RUN_DIR="$W/run" FARDISK_CONFIG="$W/none.conf"
: >"$FARDISK_CONFIG"
LOOPS=()
URING_ARGS=()
[ -n "${PROFILE_FUSE_URING:-}" ] && URING_ARGS=(--fuse-uring "$PROFILE_FUSE_URING")
[ -x "$B" ] || fd_die "no fardisk binary at $B (cargo build -p fardisk)"
mkdir -p "$OUT"

POOL=prof
. "$(dirname "${BASH_SOURCE[0]}")/stack.sh"
trap stack_cleanup EXIT

fio_syncw() { # fio_syncw DIR OUT.json
    fio --name=syncw --filename="$1/syncw" --rw=randwrite --bs=4k --size=256M --fsync=1 \
        --ioengine=psync --iodepth=1 --randseed=1 --runtime="$SECS" --time_based \
        --output-format=json >"$2"
}

log_counters() { # one JSON line with the engine's log counters
    "$B" status prof --json | python3 -c '
import json, sys
p = json.load(sys.stdin)["pools"][0]
log = p.get("log") or {}
print(json.dumps({k: log.get(k) for k in ("sync_requests", "commits", "device_writes", "commit_latency_us_total", "bytes_logged", "records_logged")}))'
}

fd_log "reference: ext4 on a loop file on the local disk"
truncate -s 2G "$W/local.img"
ext4_on "$W/local.img" "$W/fs-local" >/dev/null
fio_syncw "$W/fs-local" "$OUT/local-syncw.json"

fd_log "fardisk: pool with a log and a cache file, store 40 ms away (round trip)"
"$B" create prof "file://$W/store" log "$W/log0" cache "$W/cache0" --simulate latency=40 >/dev/null
"$B" import prof --mount "$W/mnt" ${URING_ARGS[@]+"${URING_ARGS[@]}"} >/dev/null
"$B" volume create prof/v 2G >/dev/null
loop="$(ext4_on "$W/mnt/v" "$W/fs")"
"$B" status prof --json >"$OUT/status-before.json"
pid="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pools"][0]["pid"])' "$OUT/status-before.json")"
fio_syncw "$W/fs" "$OUT/warmup-syncw.json" # lays the file out; not measured

fd_log "run 1: tracepoints (${SECS} s)"
log_counters >"$OUT/log-before.json"
perf record -q -o "$OUT/trace.data" -a -e fuse:fuse_request_send -e fuse:fuse_request_end \
    -e block:block_rq_issue -e block:block_rq_complete -- \
    bash -c "$(declare -f fio_syncw); SECS=$SECS fio_syncw '$W/fs' '$OUT/fuse-syncw.json'" >/dev/null 2>&1
log_counters >"$OUT/log-after.json"
perf script -i "$OUT/trace.data" -F event,trace,time >"$OUT/trace.txt" 2>/dev/null

fd_log "run 2: CPU profile of the daemon (pid $pid, ${SECS} s)"
perf record -q -o "$OUT/cpu.data" -e cpu-clock -F 2000 -g -p "$pid" -- sleep "$SECS" >/dev/null 2>&1 &
perf_pid=$!
fio_syncw "$W/fs" "$OUT/fuse-cpu-syncw.json"
wait "$perf_pid" || true
report() { # report FILE LINES perf-report-args...: the report without comments, first LINES lines
    local file="$1" lines="$2"
    shift 2
    perf report -i "$OUT/cpu.data" --stdio "$@" >"$OUT/report.tmp" 2>/dev/null || true
    grep -v -e '^#' -e '^$' "$OUT/report.tmp" | sed -n "1,${lines}p" >"$file" || true
}
report "$OUT/cpu-by-thread.txt" 20 --no-children --sort comm
report "$OUT/cpu-by-symbol.txt" 60 --no-children --sort dso,sym -g none
report "$OUT/cpu-inclusive.txt" 80 --children --sort sym -g none
ps -L -o comm=,time= -p "$pid" >"$OUT/threads.txt" || true

loop_dev="$(basename "$loop")"
python3 "$FARDISK_ROOT/bench/profile/summarize.py" "$OUT" "$loop_dev" | tee "$OUT/summary.txt"
fd_log "raw outputs in $OUT"
