#!/usr/bin/env bash
# about: pool engine seq write into MinIO vs raw 16 MiB PUTs of the same bytes; PUTs/GETs per GiB
# Builds crates/bench in release mode, starts MinIO on loopback (scripts/minio.sh) unless this
# run dir already has one, and runs `fardisk-bench engine-store`: rounds of (raw PUT + GET,
# engine write + cold read) on the same seeded pseudo-random bytes, then one engine run on
# compressible data. Every configuration becomes one result file (bench/lib/result.py).
#
#   bench/run.sh engine-store            full size: 4 GiB per run (#21's cold-read goal), 3 rounds
#   bench/run.sh engine-store --quick    256 MiB, 2 rounds; results go to the scratch dir only,
#                                        so a smoke run never replaces a published row
# Env: FARDISK_ENGINE_STORE_MIB, FARDISK_ENGINE_STORE_ROUNDS, FARDISK_ENGINE_STORE_WRITERS,
#      FARDISK_SEED (data and engine seed),
#      FARDISK_ENGINE_STORE_LATENCY_MS: put the store this far away each way (toxiproxy, both
#      the raw and the engine runs); the rows' setups then end in "(store N ms one-way)",
#      FARDISK_ENGINE_STORE_LABEL: appended to every row's setup, e.g. "(restore, 10 GiB)",
#      FARDISK_ENGINE_STORE_COMPRESSIBLE_PCT: zero share of the compressible-data run (0 skips it).
set -euo pipefail
FD_NAME=engine-store
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

WORK="$FARDISK_RUN_DIR/bench/engine-store"
MIB="${FARDISK_ENGINE_STORE_MIB:-4096}"
ROUNDS="${FARDISK_ENGINE_STORE_ROUNDS:-3}"
WRITERS="${FARDISK_ENGINE_STORE_WRITERS:-4}"
LATENCY_MS="${FARDISK_ENGINE_STORE_LATENCY_MS:-0}"
case "$LATENCY_MS" in ''|*[!0-9]*) fd_die "FARDISK_ENGINE_STORE_LATENCY_MS must be a whole number of ms, not '$LATENCY_MS'" ;; esac
RESULTS="$FARDISK_BENCH_RESULTS"
if [ "${1:-}" = --quick ]; then
    MIB="${FARDISK_ENGINE_STORE_MIB:-256}"
    ROUNDS="${FARDISK_ENGINE_STORE_ROUNDS:-2}"
    RESULTS="$WORK/quick-results"
elif [ -n "${1:-}" ]; then
    fd_die "unknown argument '$1' (only --quick)"
fi
MINIO="$FARDISK_ROOT/scripts/minio.sh"

rm -rf "$WORK/rows.json" "$WORK/series"
mkdir -p "$WORK/series"

fd_log "building fardisk-bench (release)"
(cd "$FARDISK_ROOT" && cargo build --release -q -p fardisk-bench) || fd_die "cargo build failed"
BIN="${CARGO_TARGET_DIR:-$FARDISK_ROOT/target}/release/fardisk-bench"
[ -x "$BIN" ] || fd_die "no binary at $BIN"

# A MinIO this run dir already runs belongs to someone else: use it, leave it running.
if "$MINIO" status >/dev/null 2>&1; then
    fd_log "using the MinIO already running in $FARDISK_RUN_DIR"
else
    "$MINIO" start
    STARTED_MINIO=1
fi
TOXI="$FARDISK_ROOT/scripts/toxiproxy.sh"
stop_servers() {
    if [ -n "${STARTED_TOXI:-}" ]; then "$TOXI" stop || true; fi
    if [ -n "${STARTED_MINIO:-}" ]; then "$MINIO" stop || true; fi
}
trap stop_servers EXIT
eval "$("$MINIO" env)"
SETUP_SUFFIX=""
if [ "$LATENCY_MS" -gt 0 ]; then
    "$TOXI" start
    STARTED_TOXI=1
    eval "$("$TOXI" env)"
    "$TOXI" latency "$LATENCY_MS" >/dev/null
    SETUP_SUFFIX=" (store $LATENCY_MS ms one-way)"
    STORE_NOTE=", behind toxiproxy adding $LATENCY_MS ms each way"
fi

started_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
fs_type="$(df --output=fstype "$FARDISK_RUN_DIR" | tail -n 1 | tr -d ' ')"
note="Shared 2-core machine (other engineers' cargo builds may run): load average $load_before at the start"
fd_log "engine-store: $MIB MiB per run, $ROUNDS rounds, $WRITERS writers, results in $RESULTS"
if ! "$BIN" engine-store --bucket "$FARDISK_BUCKET" --prefix "bench-$$" --total-mib "$MIB" \
    --rounds "$ROUNDS" --writers "$WRITERS" --seed "${FARDISK_SEED:-1}" --out "$WORK/rows.json" \
    --note "$note" --setup-suffix "$SETUP_SUFFIX${FARDISK_ENGINE_STORE_LABEL:+ $FARDISK_ENGINE_STORE_LABEL}" \
    --compressible-zero-percent "${FARDISK_ENGINE_STORE_COMPRESSIBLE_PCT:-50}" 2>&1 | tee "$WORK/bench.log"; then
    fd_die "fardisk-bench failed (log: $WORK/bench.log)"
fi
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

# One result file per row; every row shares the run's start time.
FARDISK_BENCH_STARTED_AT="$started_at" python3 "$FARDISK_ROOT/bench/lib/rows_to_results.py" "$WORK/rows.json" "$WORK/series" "$RESULTS" engine-store \
    "load average $load_after at the end; MinIO single drive on loopback ($fs_type), same host${STORE_NOTE:-}; reads hit MinIO's warm page cache."
fd_log "done: $(ls "$RESULTS"/engine-store-* 2>/dev/null | wc -l) engine-store result files in $RESULTS"
