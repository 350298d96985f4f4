#!/usr/bin/env bash
# A/B of `log_write_ahead` on the FUSE path, alternated on one pool (docs/design/0004,
# "Records written ahead after the WRITE's reply, on its own thread"): a pool with a log and a
# cache file, store `file://` made far away with --simulate, its volume's image on a loop device
# (--direct-io=on), ext4 on it; then, for each setting in SETTINGS (`fardisk set
# log_write_ahead=...` between jobs), two fio jobs at queue depth 1: PostgreSQL's WAL pattern
# (8 KiB buffered writes, fdatasync after each, a 256 MiB file written once first) and 4 KiB
# randwrite with fsync=1. The same two jobs on ext4 on a loop file on the local disk first, as
# the reference. Prints one line per job: setting, job, IOPS, sync mean and p99 (µs), the
# daemon's CPU ticks during the job, and the log's blocks written ahead (all, and those written
# by the request's own thread: that counter, `blocks_written_ahead_by_caller`, exists only with
# bench/tried/log-ahead-after-reply.patch applied; "-" without it).
#
# Env: AB_SECONDS (per job, default 10), SETTINGS (default "off on off on"), FARDISK_BIN
#      (default target/release/fardisk), AB_FUSE_URING (on|off, default off).
# Needs root, fio, losetup, mkfs.ext4.
set -euo pipefail
FD_NAME=log-ahead-ab
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

SECS="${AB_SECONDS:-10}"
SETTINGS="${SETTINGS:-off on off on}"
B="${FARDISK_BIN:-$FARDISK_ROOT/target/release/fardisk}"
W="$(mktemp -d /tmp/fardisk-ab.XXXXXX)"
export FARDISK_HOME="$W/home" FARDISK_RUN_DIR="$W/run" FARDISK_CONFIG="$W/none.conf"
: >"$FARDISK_CONFIG"
LOOPS=()
[ -x "$B" ] || fd_die "no fardisk binary at $B (cargo build --release -p fardisk)"

POOL=ab
. "$(dirname "${BASH_SOURCE[0]}")/stack.sh"
trap stack_cleanup EXIT

daemon_ticks() { # utime + stime of the daemon, in clock ticks (0 for the local row)
    [ -n "${PID:-}" ] || { echo 0; return; }
    awk '{print $14 + $15}' "/proc/$PID/stat"
}

ahead_counters() { # "all, by the request's own thread": blocks written ahead
    [ -n "${PID:-}" ] || { echo "- -"; return; }
    "$B" status ab --json | python3 -c '
import json, sys
log = json.load(sys.stdin)["pools"][0].get("log") or {}
print(log.get("blocks_written_ahead", "-"), log.get("blocks_written_ahead_by_caller", "-"))'
}

job() { # job LABEL DIR NAME fio-args...
    local label="$1" dir="$2" name="$3" t0 t1 before after
    shift 3
    before="$(ahead_counters)"
    t0="$(daemon_ticks)"
    fio --name="$name" --filename="$dir/$name" --runtime="$SECS" --time_based --ioengine=psync \
        --iodepth=1 --randseed=1 --output-format=json "$@" >"$W/out.json"
    t1="$(daemon_ticks)"
    after="$(ahead_counters)"
    python3 - "$W/out.json" "$label" "$name" "$((t1 - t0))" "$before" "$after" <<'PY'
import json, sys
out, label, name, ticks, before, after = sys.argv[1:]
job = json.load(open(out))["jobs"][0]
w = job["write"]
sync = job["sync"]["lat_ns"]
p99 = sync.get("percentile", {}).get("99.000000", 0) / 1000
print(f"{label:6} {name:6} iops {w['iops']:8.0f}  sync mean {sync['mean'] / 1000:7.1f} us  p99 {p99:7.1f} us  daemon ticks {ticks:>5}  ahead (all, by caller) {before} -> {after}")
PY
}

jobs() { # jobs LABEL DIR
    job "$1" "$2" wal --rw=write --bs=8k --size=256M --fdatasync=1
    job "$1" "$2" syncw --rw=randwrite --bs=4k --size=256M --fsync=1
}

truncate -s 2G "$W/local.img"
ext4_on "$W/local.img" "$W/fs-local" >/dev/null
fio --name=wal --filename="$W/fs-local/wal" --rw=write --bs=1M --size=256M --output-format=terse >/dev/null
jobs local "$W/fs-local"

"$B" create ab "file://$W/store" log "$W/log0" cache "$W/cache0" --simulate latency=40 >/dev/null
"$B" import ab --mount "$W/mnt" --fuse-uring "${AB_FUSE_URING:-off}" >/dev/null
"$B" volume create ab/v 2G >/dev/null
ext4_on "$W/mnt/v" "$W/fs" >/dev/null
PID="$("$B" status ab --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["pools"][0]["pid"])')"
# Lay the files out once; not measured.
fio --name=wal --filename="$W/fs/wal" --rw=write --bs=1M --size=256M --output-format=terse >/dev/null
fio --name=syncw --filename="$W/fs/syncw" --rw=write --bs=1M --size=256M --output-format=terse >/dev/null
for setting in $SETTINGS; do
    "$B" set "log_write_ahead=$setting" ab >/dev/null
    jobs "$setting" "$W/fs"
done
