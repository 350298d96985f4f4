#!/usr/bin/env bash
# about: seed 002: a VM disk over NBD (fio's nbd engine, a real client): 4 KiB write + FLUSH latency p50/p99 with no log, one log device and a mirrored log, store 20 ms away (MinIO via toxiproxy); and 4k randrw 75/25 at iodepth 64 against a local file (libaio, O_DIRECT)
# Every setup runs in this one invocation, so the rows compare like with like on a noisy machine:
#   local           a preallocated file on the local disk, fio libaio with O_DIRECT (the limit);
#   fardisk NBD     `fardisk import --nbd unix:SOCK`, fio --ioengine=nbd on the volume, for a pool
#                   without a log, with one log file and with a mirrored log (two files), all on
#                   the local disk; the store is MinIO behind toxiproxy, FARDISK_NBD_LATENCY_MS
#                   (default 20) each way.
# Jobs, FARDISK_BENCH_SECONDS each (default 60):
#   (a) syncw: 4 KiB random writes, each followed by a FLUSH (fio --fsync=1: fdatasync on the
#       local file, NBD_CMD_FLUSH over NBD), queue depth 1: a VM's sync write. p50/p99 of the
#       write and of the flush, and sync writes per second;
#   (b) randrw: seed 001's 4k randrw 75/25 at iodepth 64 over FARDISK_NBD_SIZE (default 512M),
#       read and write IOPS (issue #19: NBD at depth >= 0.8x local). Run for every row.
# The log rows also report, for the sync-write job, the log's bytes per device write (`status
# --json`: what the log block layout costs per 4 KiB sync write, docs/format/slog.md) and its
# commit latency (mean; p50/p99 as histogram bucket bounds).
#
# Env: FARDISK_BENCH_SECONDS, FARDISK_NBD_LATENCY_MS (20), FARDISK_NBD_SIZE (512M),
#      FARDISK_NBD_SETUPS ("nolog log mirror"; also "log-ahead": one log device with the pool
#      property log_write_ahead=on, plain writes' records written before the FLUSH), FARDISK_NBD_LOG_DIR (where the log files go;
#      default the scratch dir. The log block's size follows the physical sector of the device
#      under it: e.g. ext4 on a loop device, 512-byte sectors, vs this VM's disk, 4 KiB),
#      FARDISK_BIN (a fardisk binary to measure instead of a fresh release build),
#      FARDISK_BIN2 and FARDISK_BIN2_LABEL: a setup named with "@2" (e.g. "log@2") runs with
#      that second binary, its label suffixed with FARDISK_BIN2_LABEL: a before/after pair in
#      one run.
set -euo pipefail
FD_NAME=nbd-latency
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cd "$FARDISK_ROOT"

SECS="$FARDISK_BENCH_SECONDS"
LATENCY_MS="${FARDISK_NBD_LATENCY_MS:-20}"
SIZE="${FARDISK_NBD_SIZE:-512M}"
SETUPS="${FARDISK_NBD_SETUPS:-nolog log mirror}"
LOG_DIR="${FARDISK_NBD_LOG_DIR:-$FARDISK_RUN_DIR/bench/nbd-latency}"
VOL_SIZE=2G
WORK="$FARDISK_RUN_DIR/bench/nbd-latency"
RESULTS="$FARDISK_BENCH_RESULTS"
STAMP="$(date -u +%Y%m%dT%H%M%S)"
export FARDISK_BENCH_STARTED_AT="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

BIN="$(fd_fardisk_bin)"

rm -rf "$WORK"
mkdir -p "$WORK"
export FARDISK_HOME="$WORK/home" FARDISK_CONFIG="$WORK/none.conf"
: > "$FARDISK_CONFIG"
POOL=""
cleanup() {
    set +e
    [ -n "$POOL" ] && "$BIN" export "$POOL" >/dev/null 2>&1 && "$BIN" destroy "$POOL" >/dev/null 2>&1
    "$FARDISK_ROOT/scripts/toxiproxy.sh" stop >/dev/null 2>&1
    "$FARDISK_ROOT/scripts/minio.sh" stop >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT

"$FARDISK_ROOT/scripts/minio.sh" start
"$FARDISK_ROOT/scripts/toxiproxy.sh" start
eval "$("$FARDISK_ROOT/scripts/toxiproxy.sh" env)"
"$FARDISK_ROOT/scripts/toxiproxy.sh" latency "$LATENCY_MS" >/dev/null
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

# jobs NAME POOL TARGET...: both fio jobs; TARGET is fio's arguments naming the device. With a
# POOL, its log counters are kept from before and after the sync-write job.
jobs() {
    local name="$1" pool="$2"; shift 2
    [ -n "$pool" ] && log_json "$pool" "$WORK/counters-$name-before.json"
    fd_log "$name: 4 KiB write + flush, qd 1, ${SECS} s"
    fio --name=syncw "$@" --rw=randwrite --bs=4k --size="$SIZE" --fsync=1 --iodepth=1 \
        --randseed="${FARDISK_SEED:-1}" --runtime="$SECS" --time_based --output-format=json \
        >"$WORK/$name-syncw.json" || fd_die "fio syncw on $name failed"
    [ -n "$pool" ] && log_json "$pool" "$WORK/counters-$name-after.json"
    fd_log "$name: 4k randrw 75/25, iodepth 64, ${SECS} s"
    fio --name=randrw "$@" --rw=randrw --rwmixread=75 --bs=4k --iodepth=64 --size="$SIZE" \
        --randrepeat=1 --gtod_reduce=1 --runtime="$SECS" --time_based --output-format=json \
        >"$WORK/$name-randrw.json" || fd_die "fio randrw on $name failed"
}

log_json() { # log_json POOL OUT: the pool's log counters
    "$BIN" status "$1" --json | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["pools"][0].get("log")))' >"$2"
}

# The limit: a local file written in full first (no extent allocation in the timed runs).
fd_log "local: preparing a $SIZE file"
fio --name=prep --filename="$WORK/local.dat" --rw=write --bs=1M --size="$SIZE" --direct=1 \
    --output-format=terse >/dev/null || fd_die "fio prep failed"
jobs local "" --filename="$WORK/local.dat" --ioengine=libaio --direct=1

MAIN_BIN="$BIN"
for setup in $SETUPS; do
    BIN="$MAIN_BIN"
    base="${setup%@2}"
    if [ "$base" != "$setup" ]; then
        BIN="${FARDISK_BIN2:-}"
        [ -x "$BIN" ] || fd_die "setup $setup needs FARDISK_BIN2, a second fardisk binary"
    fi
    POOL="nbd${setup//[-@]/}"
    case "$base" in
        nolog) args=() ;;
        log) args=(log "$LOG_DIR/log-$setup") ;;
        mirror) args=(log mirror "$LOG_DIR/log-$setup-a" "$LOG_DIR/log-$setup-b") ;;
        log-ahead) args=(log "$LOG_DIR/log-$setup" -o log_write_ahead=on) ;;
        *) fd_die "unknown setup $setup (nolog, log, mirror, log-ahead)" ;;
    esac
    "$BIN" create "$POOL" "s3://${FARDISK_BUCKET:-fardisk}/bench-$STAMP-$POOL" ${args[@]+"${args[@]}"} >/dev/null
    "$BIN" import "$POOL" --nbd "unix:$WORK/$POOL.sock" >/dev/null
    "$BIN" volume create "$POOL/v" "$VOL_SIZE" >/dev/null
    # The volume written once, so reads and writes meet allocated blocks as on the local file.
    # end_fsync: the prep's records are committed (or given to a txg) before the timed jobs.
    fio --name=prep --ioengine=nbd --uri="nbd+unix:///v?socket=$WORK/$POOL.sock" --rw=write --bs=1M \
        --size="$SIZE" --end_fsync=1 --output-format=terse >/dev/null || fd_die "fio prep on $POOL failed"
    jobs "$setup" "$POOL" --ioengine=nbd --uri="nbd+unix:///v?socket=$WORK/$POOL.sock"
    "$BIN" export "$POOL" >/dev/null
    # Its objects go too: a day of runs left 35 GB of pools in MinIO's data directory.
    "$BIN" destroy "$POOL" >/dev/null
    POOL=""
    rm -f "$LOG_DIR/log-$setup"*
done
BIN="$MAIN_BIN"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

FARDISK_BENCH_MAIN_BIN="$BIN" python3 - "$WORK" "$RESULTS" "$FARDISK_ROOT/bench/lib/result.py" "$SECS" "$SIZE" "$LATENCY_MS" \
    "store: MinIO on loopback behind toxiproxy; log files in $LOG_DIR ($(df --output=source "$LOG_DIR" | tail -n 1)); load average $load_before at the start, $load_after at the end; shared 2-core machine" \
    local $SETUPS <<'PY'
import json, os, subprocess, sys
work, results, result_py, secs, size, latency, note = sys.argv[1:8]
labels = {"local": ("local file, libaio + O_DIRECT (the limit)", 0),
          "nolog": ("fardisk NBD, no log", 1),
          "log": ("fardisk NBD, one log device", 2),
          "mirror": ("fardisk NBD, mirrored log", 3),
          "log-ahead": ("fardisk NBD, one log device, log_write_ahead=on", 4)}
def job(name, kind):
    # fio's nbd engine prints libnbd's notes before the JSON on stdout: skip to the JSON.
    text = open(os.path.join(work, f"{name}-{kind}.json")).read()
    start = text.find("{")
    if start > 0:
        print(f"nbd-latency: {name} {kind}: fio said: {text[:start].strip()}", file=sys.stderr)
    return json.loads(text[start:])["jobs"][0]
def pct(lat, p):
    return round(lat.get("percentile", {}).get(p, 0) / 1000, 1)
base = None
for name in sys.argv[8:]:
    sw, rw = job(name, "syncw"), job(name, "randrw")
    m = {
        "syncw_per_s": round(sw["write"]["iops"], 1),
        "write_p50_us": pct(sw["write"]["clat_ns"], "50.000000"),
        "write_p99_us": pct(sw["write"]["clat_ns"], "99.000000"),
        "flush_p50_us": pct(sw["sync"]["lat_ns"], "50.000000"),
        "flush_p99_us": pct(sw["sync"]["lat_ns"], "99.000000"),
        "randrw_read_iops": round(rw["read"]["iops"], 1),
        "randrw_write_iops": round(rw["write"]["iops"], 1),
    }
    if name == "local":
        base = m
    else:
        m["randrw_read_to_local_pct"] = round(100 * m["randrw_read_iops"] / max(base["randrw_read_iops"], 1e-9), 1)
        m["randrw_write_to_local_pct"] = round(100 * m["randrw_write_iops"] / max(base["randrw_write_iops"], 1e-9), 1)
    before = os.path.join(work, f"counters-{name}-before.json")
    if os.path.exists(before):
        # The log during the sync-write job only: what one 4 KiB write + FLUSH costs it.
        a, b = json.load(open(before)), json.load(open(os.path.join(work, f"counters-{name}-after.json")))
        if a and b:
            writes = b["device_writes"] - a["device_writes"]
            m["log_bytes_per_sync_write"] = round((b["bytes_logged"] - a["bytes_logged"]) / max(writes, 1), 1)
            commits = b["commits"] - a["commits"]
            m["log_commit_mean_us"] = round((b["commit_latency_us_total"] - a["commit_latency_us_total"]) / max(commits, 1), 1)
            # p50/p99 as the upper bound of the histogram bucket they fall in.
            counts = [(y["le_us"], y["count"] - x["count"]) for x, y in zip(a["commit_latency_us"], b["commit_latency_us"])]
            total = sum(c for _, c in counts)
            for p in (50, 99):
                seen = 0
                for le, c in counts:
                    seen += c
                    if total and seen >= total * p / 100:
                        m[f"log_commit_p{p}_le_us"] = le if le is not None else -1
                        break
    label, order = labels[name.split("@")[0]]
    if name.endswith("@2"):
        label, order = f"{label}, {os.environ.get('FARDISK_BIN2_LABEL', 'second binary')}", order + 10
    args = [sys.executable, result_py, "--out-dir", results, "--scenario", "nbd-latency", "--setup", label,
            "--order", str(order), "--durable", "yes", "--duration-s", str(2 * int(secs)), "--notes", note,
            f"--param=seconds={secs}", f"--param=size={size}", f"--param=store_latency_ms_one_way={latency}",
            "--param=syncw=4k randwrite + flush qd1", "--param=randrw=4k 75/25 iodepth 64"]
    args += [f"--metric={k}={v}" for k, v in m.items()]
    # A fardisk row names the commit of the binary it ran with (FARDISK_BIN2 may be an older one).
    env = dict(os.environ)
    env.pop("FARDISK_BENCH_BINARY", None)
    if name != "local":
        env["FARDISK_BENCH_BINARY"] = os.environ["FARDISK_BIN2"] if name.endswith("@2") else os.environ["FARDISK_BENCH_MAIN_BIN"]
    subprocess.run(args, check=True, env=env)
PY
fd_log "done: results in $RESULTS"
