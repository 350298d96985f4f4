#!/usr/bin/env bash
# about: store requests per idle hour of an imported pool (MinIO, the daemon's own counters)
# A pool on MinIO is imported by the daemon (NBD), 64 MiB are written, read back twice (a hot set
# to save) and synced; then nothing touches it for FARDISK_IDLE_S seconds (default 3600) and the
# store requests it made in that window are read from `fardisk status --json` (the pool's own
# counters, since import) before and after; the hot set is saved once before the window. The pool's loops run at fixed periods (the txg syncer
# every 5 s, the daemon's hot-set save every 300 s, the orphan pass every 3600 s), so a window of
# at least 300 s covers every loop but the hourly orphan pass, whose one LIST (per 1,000 segments)
# is added per hour. Prints one line and writes one result file (bench/lib/result.py).
#
# Env: FARDISK_IDLE_S (default 3600), FARDISK_IDLE_MULTIHOST=on|off (default off), FARDISK_BIN
#      (a fardisk binary to use instead of building the release one; the request counts do not
#      depend on the build).
set -euo pipefail
FD_NAME=idle-requests
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

IDLE_S="${FARDISK_IDLE_S:-3600}"
MULTIHOST="${FARDISK_IDLE_MULTIHOST:-off}"
WORK="$FARDISK_RUN_DIR/bench/idle-requests"
RESULTS="$FARDISK_BENCH_RESULTS"
rm -rf "$WORK"
mkdir -p "$WORK"
export FARDISK_HOME="$WORK/home"
SOCK="$WORK/nbd.sock"

if [ -n "${FARDISK_BIN:-}" ]; then
    B="$FARDISK_BIN"
else
    (cd "$FARDISK_ROOT" && cargo build --release -q -p fardisk) || fd_die "cargo build failed"
    B="${CARGO_TARGET_DIR:-$FARDISK_ROOT/target}/release/fardisk"
fi
"$FARDISK_ROOT/scripts/minio.sh" start >/dev/null
trap '"$B" export idle >/dev/null 2>&1 && "$B" destroy idle >/dev/null 2>&1; "$FARDISK_ROOT/scripts/minio.sh" stop >/dev/null' EXIT
eval "$("$FARDISK_ROOT/scripts/minio.sh" env)"

"$B" create idle "s3://$FARDISK_BUCKET/idle-$$" -o "multihost=$MULTIHOST" >/dev/null
"$B" import idle --nbd "unix:$SOCK" >/dev/null
"$B" volume create idle/v 64M >/dev/null
head -c $((64 << 20)) /dev/urandom >"$WORK/data"
nbdcopy --flush "$WORK/data" "nbd+unix:///v?socket=$SOCK"
for _ in 1 2; do nbdcopy "nbd+unix:///v?socket=$SOCK" "$WORK/back"; done
"$B" sync idle
# The hot set saved now, as the daemon's first periodic save would: the window then shows what an
# idle pool asks hour after hour (before the fix for #22, the same list again every 5 minutes).
"$B" hotset idle >/dev/null
sleep 10 # the import's background work and the last txg settle

counts() { # PUT GET HEAD DELETE LIST since import
    "$B" status idle --json | python3 -c 'import json, sys
r = json.load(sys.stdin)["pools"][0]["store_requests"]
print(" ".join(str(r[k]["requests"]) for k in ("put", "get", "head", "delete", "list")))'
}
before=($(counts))
fd_log "idle for $IDLE_S s (multihost=$MULTIHOST) from $(date -u +%H:%M:%S)"
sleep "$IDLE_S"
after=($(counts))
names=(put get head delete list)
window=0
declare -A d
for i in 0 1 2 3 4; do d[${names[$i]}]=$((after[i] - before[i])); window=$((window + after[i] - before[i])); done
# Per hour: the window's requests scaled to an hour; when the window is shorter than an hour the
# orphan pass (one LIST) is not in it and is added once.
per_hour="$(python3 -c "import sys; w, s = int(sys.argv[1]), int(sys.argv[2]); print(round(w * 3600 / s + (0 if s >= 3600 else 1), 1))" "$window" "$IDLE_S")"
echo "idle-requests: $IDLE_S s idle, multihost=$MULTIHOST: PUT ${d[put]} GET ${d[get]} HEAD ${d[head]} DELETE ${d[delete]} LIST ${d[list]} = $window requests; per idle hour: $per_hour"
python3 "$FARDISK_ROOT/bench/lib/result.py" --out-dir "$RESULTS" --scenario idle-requests \
    --setup "fardisk daemon on MinIO, idle (multihost=$MULTIHOST)" --duration-s "$IDLE_S" \
    --param "idle_s=$IDLE_S" --param "multihost=$MULTIHOST" \
    --metric "requests_in_window=$window" --metric "requests_per_idle_hour=$per_hour" \
    --metric "put=${d[put]}" --metric "get=${d[get]}" --metric "list=${d[list]}" --metric "delete=${d[delete]}" \
    --notes "the pool's own counters (fardisk status --json); the hourly orphan pass adds one LIST per 1,000 segments when the window is shorter than an hour" >/dev/null
