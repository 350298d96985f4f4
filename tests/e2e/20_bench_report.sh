#!/usr/bin/env bash
# bench/report.py turns the sample results into the expected tables and real PNG
# plots, keeps only the newest run per setup, rejects a result that breaks the
# schema, and bench/run.sh local-fio produces a result the report accepts.
E2E_NAME=20_bench_report
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

BENCH="$E2E_ROOT/bench"
OUT="$FARDISK_RUN_DIR/report"
mkdir -p "$OUT"

require "report.py on bench/sample" "$BENCH/run.sh" report --results "$BENCH/sample" \
    --out "$OUT/BENCHMARKS.md" --plots "$OUT/plots"
md="$OUT/BENCHMARKS.md"
check "a section per scenario" grep -q '^## pgbench-tpcb$' "$md"
check "fio section" grep -q '^## fio-randwrite-fsync$' "$md"
check "newest run shown, 2 runs counted" \
    grep -qF '| ext4 on a loop file (local disk) | yes | 0.3 | 2,321 | 113 | 2 |' "$md"
check "older run not shown" bash -c "! grep -qF '1,111' '$md'"
check "non-durable setup marked" grep -qF '| ext4 on s3backer (64 KiB, write-back) | no |' "$md"

is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && [ "$(stat -c %s "$1")" -gt 5000 ]; }
for png in pgbench-tpcb.png fio-randwrite-fsync.png fio-randwrite-fsync-iops_per_s.png; do
    check "plot $png is a PNG" is_png "$OUT/plots/$png"
    check "markdown links $png" grep -qF "](plots/$png)" "$md"
done

bad="$FARDISK_RUN_DIR/bad"
mkdir -p "$bad"
cp "$BENCH"/sample/*.json "$bad/"
python3 - "$bad/zz-bad.json" <<'PY'
import json, sys
json.dump({"schema": "fardisk-bench/1", "scenario": "x", "setup": "y",
           "started_at": "2026-11-22T00:00:00Z", "metrics": {"tps": "fast"}}, open(sys.argv[1], "w"))
PY
err="$(python3 "$BENCH/report.py" --no-plots --results "$bad" --out "$OUT/bad.md" 2>&1)"
rc=$?
check "schema violation rejected (exit $rc, no output file): $err" test "$rc" -eq 1 -a ! -e "$OUT/bad.md"
check "error names the file and field" grep -q "zz-bad.json: metric 'tps'" <<<"$err"

res="$FARDISK_RUN_DIR/results"
check "bench/run.sh local-fio (2 s)" env FARDISK_BENCH_SECONDS=2 FARDISK_FIO_SIZE=8M \
    FARDISK_BENCH_RESULTS="$res" "$BENCH/run.sh" local-fio
check "tables-only report of the fresh result" python3 "$BENCH/report.py" --no-plots \
    --results "$res" --out "$OUT/fresh.md"
check "fresh result has a positive IOPS" python3 -c '
import glob, json, sys
[path] = glob.glob(sys.argv[1] + "/fio-randwrite-fsync-*.json")
doc = json.load(open(path))
assert doc["metrics"]["iops"] > 0 and doc["metrics"]["sync_lat_avg_us"] > 0, doc["metrics"]
assert len(doc["series"]["iops_per_s"]["x"]) >= 1
' "$res"
# The measured commit is marked "-dirty" when code differs from it, not when only the bench's own
# outputs (results, plots, notes, BENCHMARKS.md) do.
repo="$FARDISK_RUN_DIR/rev"
mkdir -p "$repo/bench/results" "$repo/crates"
rev_of() { python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import result; print(result.git_rev(sys.argv[2]))' "$BENCH/lib" "$repo"; }
echo a >"$repo/crates/code.rs"
echo r >"$repo/bench/results/r.json"
git -C "$repo" init -q && git -C "$repo" add -A && git -C "$repo" -c user.name=t -c user.email=t@t commit -q -m t
clean="$(rev_of)"
echo changed >"$repo/bench/results/r.json"
check "a changed result file leaves the rev clean ($clean, $(rev_of))" test "$(rev_of)" = "$clean" -a "${clean%-dirty}" = "$clean"
echo b >"$repo/crates/code.rs"
check "changed code marks it ($(rev_of))" test "$(rev_of)" = "$clean-dirty"
# A row measured with a binary built elsewhere (FARDISK_BIN2) names that binary's commit, from its
# --version, not the tree's; a binary that does not say is not passed off as the tree's commit.
printf '#!/bin/sh\necho "fardisk 0.1.0 (1234abc-dirty)"\n' >"$repo/bin-new"
printf '#!/bin/sh\necho "fardisk 0.1.0"\n' >"$repo/bin-old"
chmod +x "$repo/bin-new" "$repo/bin-old"
check "a named binary's commit ($(FARDISK_BENCH_BINARY="$repo/bin-new" rev_of))" \
    test "$(FARDISK_BENCH_BINARY="$repo/bin-new" rev_of)" = "1234abc-dirty"
check "a binary that does not say ($(FARDISK_BENCH_BINARY="$repo/bin-old" rev_of))" \
    test "$(FARDISK_BENCH_BINARY="$repo/bin-old" rev_of)" = "binary of unknown commit"

e2e_finish
