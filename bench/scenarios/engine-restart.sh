#!/usr/bin/env bash
# about: issue #20: the pause a TPC-B client sees per engine SIGKILL and per `fardisk upgrade` under `import --holder` (p50, max), with the log replay's share
# PostgreSQL 15 on ext4 on a loop device over the FUSE image of a pool imported with --holder
# (store: a file:// directory, intent log on a local file). pgbench TPC-B (-c4 -j2, per-transaction
# log) runs while the engine is SIGKILLed FARDISK_RESTART_KILLS times and upgraded
# FARDISK_RESTART_UPGRADES times, 3 s apart. For each event:
#   client pause: the longest transaction in flight at that moment (from pgbench's -l log: its
#     start and end bracket the event);
#   engine back: from the event until the new engine answers `fardisk status`;
#   replay share: for a kill, from the holder seeing the engine go until the new engine's log says
#     "intent log replayed", as a fraction of the time until it serves the connection again.
# One result file: setup "holder".
#
# Env: FARDISK_RESTART_KILLS (10), FARDISK_RESTART_UPGRADES (5), FARDISK_BIN (a fardisk binary
#      to use instead of building the release one: only to try the scenario, not for the record).
set -euo pipefail
FD_NAME=engine-restart
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cd "$FARDISK_ROOT"
umask 022

KILLS="${FARDISK_RESTART_KILLS:-10}"
UPGRADES="${FARDISK_RESTART_UPGRADES:-5}"
GAP_S=3
PG="$FARDISK_ROOT/scripts/postgres.sh"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
WORK="$FARDISK_RUN_DIR/bench/engine-restart"
export FARDISK_BENCH_STARTED_AT="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
if [ -n "${FARDISK_BIN:-}" ]; then
    BIN="$FARDISK_BIN"
    BUILD=given
else
    fd_log "building fardisk (release)"
    cargo build --release -q -p fardisk || fd_die "cargo build failed"
    BIN="${CARGO_TARGET_DIR:-$FARDISK_ROOT/target}/release/fardisk"
    BUILD=release
fi

rm -rf "$WORK"
mkdir -p "$WORK/fs"
chmod 755 "$FARDISK_RUN_DIR" "$FARDISK_RUN_DIR/bench" "$WORK"
export FARDISK_HOME="$WORK/home" FARDISK_CONFIG="$WORK/none.conf" FARDISK_RUN_DIR="$WORK/run"
: >"$FARDISK_CONFIG"
POOL=restartbench
LOOP=""
PGBENCH_PID=""
cleanup() {
    set +e
    [ -n "$PGBENCH_PID" ] && kill "$PGBENCH_PID" 2>/dev/null
    [ -d "$WORK/fs/data" ] && "$PG" stop "$WORK/fs/data" >/dev/null 2>&1
    mountpoint -q "$WORK/fs" && umount "$WORK/fs"
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    "$BIN" export "$POOL" >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT

engine_pid() { "$BIN" status "$POOL" --json 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["pools"][0].get("pid", ""))' 2>/dev/null || true; }
# wait_engine_other_than PID: until an engine with another pid answers (bounded: 120 s).
wait_engine_other_than() {
    local i pid
    for ((i = 0; i < 1200; i++)); do
        pid="$(engine_pid)"
        if [ -n "$pid" ] && [ "$pid" != "$1" ]; then echo "$pid"; return 0; fi
        sleep 0.1
    done
    return 1
}
now() { date +%s.%N; }

truncate -s 1G "$WORK/log0"
"$BIN" create "$POOL" "file://$WORK/store" log "$WORK/log0" >/dev/null
"$BIN" import "$POOL" --mount "$WORK/mnt" --holder --restart-max 1000 >/dev/null
"$BIN" volume create "$POOL/pg" 4G >/dev/null
LOOP="$(losetup --direct-io=on -f --show "$WORK/mnt/pg")"
mkfs.ext4 -q "$LOOP"
mount "$LOOP" "$WORK/fs"
chmod 755 "$WORK/fs"
PG_INITDB_NOSYNC=1 "$PG" init "$WORK/fs/data" >/dev/null
"$PG" start "$WORK/fs/data" >/dev/null
eval "$("$PG" env "$WORK/fs/data")"
"$PG" pgbench "$WORK/fs/data" -i -q -s 1 postgres >/dev/null 2>&1
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

LOAD_S=$(((KILLS + UPGRADES) * (GAP_S + 3) + 20))
(cd "$WORK" && exec "$PG_BIN/pgbench" -n -c 4 -j 2 -T "$LOAD_S" -l --log-prefix="$WORK/tx" postgres) >"$WORK/pgbench.out" 2>&1 &
PGBENCH_PID=$!
sleep 5
: >"$WORK/events"
engine="$(engine_pid)"
for ((k = 1; k <= KILLS + UPGRADES; k++)); do
    sleep "$GAP_S"
    t0="$(now)"
    if [ "$k" -le "$KILLS" ]; then
        kind=kill
        kill -KILL "$engine"
    else
        kind=upgrade
        "$BIN" upgrade "$POOL" >/dev/null
    fi
    engine="$(wait_engine_other_than "$engine")" || fd_die "$kind $k: no new engine within 120 s"
    echo "$kind $t0 $(python3 -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 3))' "$t0")" >>"$WORK/events"
done
wait "$PGBENCH_PID" || fd_die "pgbench failed: $(grep -m1 -iE 'error|abort' "$WORK/pgbench.out")"
PGBENCH_PID=""
"$PG" check "$WORK/fs/data" postgres >/dev/null || fd_die "TPC-B invariant broken"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

metrics="$(python3 - "$WORK" <<'EOF'
import glob, re, statistics, sys
work = sys.argv[1]
events = [l.split() for l in open(f"{work}/events")]
tx = []  # (start, end, latency_s)
for path in glob.glob(f"{work}/tx.*"):
    for line in open(path):
        f = line.split()
        if len(f) >= 6 and f[2].isdigit():
            end = int(f[4]) + int(f[5]) / 1e6
            lat = int(f[2]) / 1e6
            tx.append((end - lat, end, lat))
def pause_at(t):
    inflight = [lat for start, end, lat in tx if start <= t <= end]
    return max(inflight) if inflight else 0.0
def ts(line):
    m = re.match(r"(\d+)-(\d+)-(\d+)T(\d+):(\d+):([\d.]+)Z", line)
    if not m:
        return None
    import calendar
    y, mo, d, h, mi, s = m.groups()
    return calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), 0)) + float(s)
log = [re.sub(r"\x1b\[[0-9;]*m", "", l) for l in open(f"{work}/home/log/restartbench.log")]
shares = []
went = None
replayed = None
for line in log:
    if "holder: the engine went" in line:
        went, replayed = ts(line), None
    elif went is not None and "intent log replayed" in line:
        replayed = ts(line)
    elif went is not None and "serving the holder's connection" in line:
        served = ts(line)
        if replayed is not None and served > went:
            shares.append((replayed - went) / (served - went))
        went = None
out = []
for kind in ("kill", "upgrade"):
    client = [pause_at(float(t)) for k, t, _ in events if k == kind]
    back = [float(b) for k, _, b in events if k == kind]
    if not client:
        continue
    out += [f"{kind}_count={len(client)}",
            f"{kind}_client_pause_p50_s={statistics.median(client):.3f}",
            f"{kind}_client_pause_max_s={max(client):.3f}",
            f"{kind}_engine_back_p50_s={statistics.median(back):.3f}",
            f"{kind}_engine_back_max_s={max(back):.3f}"]
if shares:
    out.append(f"kill_until_log_replayed_share_p50={statistics.median(shares):.3f}")
print(" ".join(out))
EOF
)"
tps="$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$WORK/pgbench.out")"
args=()
for m in $metrics; do args+=(--metric "$m"); done
python3 "$FARDISK_ROOT/bench/lib/result.py" --out-dir "$FARDISK_BENCH_RESULTS" --scenario engine-restart \
    --setup holder --order 1 --durable yes --duration-s "$LOAD_S" \
    --param kills="$KILLS" --param upgrades="$UPGRADES" --param gap_s="$GAP_S" --param clients=4 \
    --param build="$BUILD" --param store=file --metric tps="$tps" "${args[@]}" \
    --notes "loadavg before $load_before, after $load_after"
fd_log "engine-restart: $metrics tps=$tps"
