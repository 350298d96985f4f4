#!/usr/bin/env bash
# about: the limit: PostgreSQL 15 on a local dir, pgbench -i -s 1 then TPC-B -c4 -j2
# The reference row for "≥ 0.8x the local disk's TPC-B" (docs/design/0000-rules.md, "The bar"). The TPC-B invariant
# is checked after the run; a broken invariant fails the scenario and writes nothing.
set -euo pipefail
FD_NAME=local-pgbench
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

SCALE="${FARDISK_PGBENCH_SCALE:-1}"
CLIENTS=4
JOBS=2
PG="$FARDISK_ROOT/scripts/postgres.sh"
WORK="$FARDISK_RUN_DIR/bench/local-pgbench"
DATA="$WORK/pgdata"

cleanup() {
    "$PG" stop "$DATA" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
"$PG" stop "$DATA" >/dev/null 2>&1 || true
rm -rf "$WORK"
mkdir -p "$WORK"
chmod 755 "$FARDISK_RUN_DIR" "$FARDISK_RUN_DIR/bench" "$WORK"
trap cleanup EXIT

fs_type="$(df --output=fstype "$WORK" | tail -n 1 | tr -d ' ')"
"$PG" init "$DATA"
"$PG" start "$DATA"
out="$("$PG" tpcb "$DATA" "$SCALE" "$FARDISK_BENCH_SECONDS" "$CLIENTS" "$JOBS")" || fd_die "TPC-B run or invariant check failed"
printf '%s\n' "$out"
mapfile -t metric_args < <(grep -E '^(init_s|tps|latency_avg_ms|transactions)=' <<<"$out" | sed 's/^/--metric=/')
python3 "$FARDISK_ROOT/bench/lib/result.py" --out-dir "$FARDISK_BENCH_RESULTS" \
    --scenario pgbench-tpcb --setup "local dir ($fs_type)" --order 0 --durable yes \
    --duration-s "$FARDISK_BENCH_SECONDS" --param scale="$SCALE" --param clients="$CLIENTS" \
    --param jobs="$JOBS" --param seconds="$FARDISK_BENCH_SECONDS" "${metric_args[@]}"
