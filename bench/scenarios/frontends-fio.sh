#!/usr/bin/env bash
# about: seed 001's fio 4k randrw 75/25 iodepth 64 and 4 KiB sync writes on ext4: local loop file vs fardisk FUSE image (/dev/fuse and io_uring) vs fardisk NBD (nbdfuse)
# Four setups in one run, each ext4 (plain mkfs.ext4) on a loop device (--direct-io=on):
#   local          a loop file on the local disk (the limit);
#   fardisk FUSE   the volume's image file from `fardisk import --mount --fuse-uring off`;
#   fardisk FUSE over io_uring   the same with `--fuse-uring on` (turns the kernel's
#                  enable_uring switch on; the row is left out, with the reason, on a kernel
#                  without FUSE over io_uring);
#   fardisk NBD    the volume served by `fardisk import --nbd unix:...`, made a file by nbdfuse;
#   fardisk FUSE, log_write_ahead=on   only with FARDISK_FIO_WRITE_AHEAD_ROW=1: the /dev/fuse
#                  row with the pool property on (plain writes' records written to the log
#                  before the fsync), to compare with the default in one run.
# Both pools: a `file://` store made far away (--simulate latency=FARDISK_FIO_LATENCY_MS, a
# round trip, default 40), a log file and a cache file on the local disk, defaults otherwise.
# Jobs: (a) seed 001's command (libaio, 4k, iodepth 64, randrw 75/25, gtod_reduce) with
# --direct=1 so the device, not the page cache, is measured, on a FARDISK_FIO_SIZE file (default
# 512M, the seed used 4G); (b) 4 KiB randwrite, fsync=1, psync, queue depth 1. Each runs
# FARDISK_BENCH_SECONDS (default 60). One result file per setup (bench/lib/result.py).
# FARDISK_BIN: a fardisk binary to measure instead of a fresh release build.
set -euo pipefail
FD_NAME=frontends-fio
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

SECS="$FARDISK_BENCH_SECONDS"
SIZE="${FARDISK_FIO_SIZE:-512M}"
LATENCY_MS="${FARDISK_FIO_LATENCY_MS:-40}"
VOL_SIZE=2G
WORK="$FARDISK_RUN_DIR/bench/frontends-fio"
RESULTS="$FARDISK_BENCH_RESULTS"
export FARDISK_HOME="$WORK/home" FARDISK_RUN_DIR="$WORK/run"
B="$(fd_fardisk_bin)"
LOOPS=()
NBDFUSE_PID=""

cleanup() {
    local l
    for m in "$WORK/fs-local" "$WORK/fs-fuse" "$WORK/fs-fuseahead" "$WORK/fs-uring" "$WORK/fs-nbd"; do mountpoint -q "$m" && umount "$m"; done
    for l in "${LOOPS[@]}"; do losetup -d "$l" 2>/dev/null; done
    [ -n "$NBDFUSE_PID" ] && { fusermount3 -u "$WORK/nbdfuse" 2>/dev/null; kill "$NBDFUSE_PID" 2>/dev/null; }
    "$B" export fusepool >/dev/null 2>&1
    "$B" export aheadpool >/dev/null 2>&1
    "$B" export uringpool >/dev/null 2>&1
    "$B" export nbdpool >/dev/null 2>&1
    rm -rf "$WORK/local.img" "$WORK/store-"* "$WORK/log-"* "$WORK/cache-"*
    return 0
}
mkdir -p "$WORK"
cleanup || true  # set -e does not apply inside a function called in a || list
rm -rf "$WORK"
mkdir -p "$WORK/series" "$WORK/fs-local" "$WORK/fs-fuse" "$WORK/fs-fuseahead" "$WORK/fs-uring" "$WORK/fs-nbd" "$WORK/nbdfuse"
trap "cleanup || true" EXIT

# ext4_on FILE MOUNTPOINT: loop device over FILE, plain mkfs.ext4, mount. Prints mkfs seconds.
ext4_on() {
    local loop t0
    loop="$(losetup --direct-io=on -f --show "$1")" || fd_die "losetup $1 failed"
    LOOPS+=("$loop")
    t0=$(date +%s.%N)
    mkfs.ext4 -q "$loop" || fd_die "mkfs.ext4 on $1 failed"
    awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f\n", b - a }' >"$WORK/mkfs-$(basename "$2").s"
    mount "$loop" "$2" || fd_die "mount $loop failed"
}

puts_of() { # puts_of POOL: PUT requests the pool made so far
    "$B" status "$1" --json | python3 -c 'import json,sys; p=json.load(sys.stdin)["pools"][0]; print(p["store_requests"]["put"]["requests"])'
}

# run_jobs NAME DIR: both fio jobs in DIR; JSON outputs in $WORK/NAME-{randrw,syncw}.json
run_jobs() {
    local name="$1" dir="$2"
    fd_log "$name: fio randrw 75/25 iodepth 64, $SIZE, ${SECS} s"
    fio --randrepeat=1 --ioengine=libaio --direct=1 --gtod_reduce=1 --name=test --filename="$dir/test" \
        --bs=4k --iodepth=64 --size="$SIZE" --readwrite=randrw --rwmixread=75 \
        --runtime="$SECS" --time_based --output-format=json >"$WORK/$name-randrw.json" || fd_die "fio randrw on $name failed"
    fd_log "$name: fio 4 KiB sync writes (fsync=1, qd 1), ${SECS} s"
    fio --name=syncw --filename="$dir/syncw" --rw=randwrite --bs=4k --size=256M --fsync=1 \
        --ioengine=psync --iodepth=1 --randseed="${FARDISK_SEED:-1}" --runtime="$SECS" --time_based \
        --output-format=json >"$WORK/$name-syncw.json" || fd_die "fio sync writes on $name failed"
}

started_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

truncate -s "$VOL_SIZE" "$WORK/local.img"
ext4_on "$WORK/local.img" "$WORK/fs-local"
run_jobs local "$WORK/fs-local"

# fuse_row NAME POOL URING [create args]: a pool with a log and a cache file, its store far away,
# ext4 on its image (`import --fuse-uring URING`), both jobs, and the PUTs they cost.
fuse_row() {
    local name="$1" pool="$2" uring="$3" puts0; shift 3
    "$B" create "$pool" "file://$WORK/store-$name" log "$WORK/log-$name" cache "$WORK/cache-$name" --simulate "latency=$LATENCY_MS" "$@" >/dev/null
    "$B" import "$pool" --mount "$WORK/mnt-$name" --fuse-uring "$uring" >/dev/null
    "$B" volume create "$pool/v" "$VOL_SIZE" >/dev/null
    ext4_on "$WORK/mnt-$name/v" "$WORK/fs-$name"
    puts0="$(puts_of "$pool")"
    run_jobs "$name" "$WORK/fs-$name"
    echo "$(( $(puts_of "$pool") - puts0 ))" >"$WORK/$name.puts"
}

fuse_row fuse fusepool off
"$B" export fusepool >/dev/null

if [ "${FARDISK_FIO_WRITE_AHEAD_ROW:-0}" = 1 ]; then
    fuse_row fuseahead aheadpool off -o log_write_ahead=on
    "$B" export aheadpool >/dev/null
fi

if [ -e /sys/module/fuse/parameters/enable_uring ]; then
    fuse_row uring uringpool on
    "$B" status uringpool --json | python3 -c 'import json,sys; f=json.load(sys.stdin)["pools"][0]["fuse"]; print(f["requests_uring"], f["requests_device"])' >"$WORK/uring.requests"
else
    fd_log "no FUSE over io_uring on this kernel: the io_uring row is left out"
fi

"$B" create nbdpool "file://$WORK/store-nbd" log "$WORK/log-nbd" cache "$WORK/cache-nbd" --simulate "latency=$LATENCY_MS" >/dev/null
"$B" import nbdpool --nbd "unix:$WORK/nbd.sock" >/dev/null
"$B" volume create nbdpool/v "$VOL_SIZE" >/dev/null
nbdfuse "$WORK/nbdfuse/v" "nbd+unix:///v?socket=$WORK/nbd.sock" &
NBDFUSE_PID=$!
for _ in $(seq 100); do [ -e "$WORK/nbdfuse/v" ] && break; sleep 0.1; done
[ -e "$WORK/nbdfuse/v" ] || fd_die "nbdfuse did not show $WORK/nbdfuse/v"
ext4_on "$WORK/nbdfuse/v" "$WORK/fs-nbd"
puts0="$(puts_of nbdpool)"
run_jobs nbd "$WORK/fs-nbd"
echo "$(( $(puts_of nbdpool) - puts0 ))" >"$WORK/nbd.puts"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

FARDISK_BENCH_STARTED_AT="$started_at" python3 - "$WORK" "$RESULTS" "$FARDISK_ROOT/bench/lib/result.py" \
    "$SECS" "$SIZE" "$LATENCY_MS" "load average $load_before at the start, $load_after at the end; shared 2-core machine" <<'PY'
import json, os, subprocess, sys
work, results, result_py, secs, size, latency, note = sys.argv[1:8]
setups = [("local", "ext4 on a loop file, local disk (the limit)", 0),
          ("fuse", "ext4 on fardisk FUSE image (log+cache local)", 1),
          ("uring", "ext4 on fardisk FUSE image over io_uring (log+cache local)", 2),
          ("nbd", "ext4 on fardisk NBD via nbdfuse (log+cache local)", 3),
          ("fuseahead", "ext4 on fardisk FUSE image, log_write_ahead=on (log+cache local)", 4)]
def job(name, kind):
    return json.load(open(os.path.join(work, f"{name}-{kind}.json")))["jobs"][0]
base = {}
for name, label, order in setups:
    if not os.path.exists(os.path.join(work, f"{name}-randrw.json")):
        continue  # the io_uring row on a kernel without it; the log_write_ahead=on row unless asked
    rw, sw = job(name, "randrw"), job(name, "syncw")
    m = {
        "randrw_read_iops": round(rw["read"]["iops"], 1),
        "randrw_write_iops": round(rw["write"]["iops"], 1),
        "randrw_mib_per_s": round((rw["read"]["bw_bytes"] + rw["write"]["bw_bytes"]) / 2**20, 2),
        "syncw_iops": round(sw["write"]["iops"], 1),
    }
    sync_lat = sw.get("sync", {}).get("lat_ns", {})
    sync_pct = sync_lat.get("percentile", {})
    if "mean" in sync_lat:
        m["fsync_mean_us"] = round(sync_lat["mean"] / 1000, 1)
    if sync_pct:
        m["fsync_p50_us"] = round(sync_pct.get("50.000000", 0) / 1000, 1)
        m["fsync_p99_us"] = round(sync_pct.get("99.000000", 0) / 1000, 1)
    if name == "local":
        base = m
    else:
        m["randrw_to_local_pct"] = round(100 * m["randrw_mib_per_s"] / max(base["randrw_mib_per_s"], 1e-9), 1)
        m["syncw_to_local_pct"] = round(100 * m["syncw_iops"] / max(base["syncw_iops"], 1e-9), 1)
        m["store_puts"] = int(open(os.path.join(work, f"{name}.puts")).read())
    if name == "uring":
        via_uring, via_device = open(os.path.join(work, "uring.requests")).read().split()
        m["fuse_requests_uring"], m["fuse_requests_device"] = int(via_uring), int(via_device)
    m["mkfs_s"] = float(open(os.path.join(work, f"mkfs-fs-{name}.s")).read())
    args = [sys.executable, result_py, "--out-dir", results, "--scenario", "frontends-fio", "--setup", label,
            "--order", str(order), "--durable", "yes", "--duration-s", str(2 * int(secs)), "--notes", note,
            f"--param=seconds={secs}", f"--param=randrw_file={size}", "--param=randrw=4k iodepth 64 libaio direct 75/25",
            "--param=syncw=4k randwrite fsync=1 psync qd1", f"--param=store_latency_ms={latency}"]
    args += [f"--metric={k}={v}" for k, v in m.items()]
    subprocess.run(args, check=True)
PY
fd_log "done: results in $RESULTS"
