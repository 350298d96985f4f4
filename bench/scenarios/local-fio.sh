#!/usr/bin/env bash
# about: the limit: fio 4 KiB randwrite, fsync after every write, on a local file
# One job, queue depth 1 (psync): every write waits for its fsync, so
# sync_lat_avg_us is the local device's own flush cost, the floor for a sync
# write through fardisk's intent log (rule 7 of docs/design/0000-rules.md).
set -euo pipefail
FD_NAME=local-fio
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

SIZE="${FARDISK_FIO_SIZE:-64M}"
WORK="$FARDISK_RUN_DIR/bench/local-fio"
rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT

fs_type="$(df --output=fstype "$WORK" | tail -n 1 | tr -d ' ')"
fd_log "fio randwrite 4k fsync=1 on $WORK ($fs_type), $SIZE, ${FARDISK_BENCH_SECONDS} s"
fio --name=randwrite --filename="$WORK/fio.dat" --rw=randwrite --bs=4k --size="$SIZE" \
    --fsync=1 --ioengine=psync --iodepth=1 --runtime="$FARDISK_BENCH_SECONDS" --time_based \
    --randseed="${FARDISK_SEED:-1}" --output-format=json \
    --write_iops_log="$WORK/fio" --log_avg_msec=1000 >"$WORK/fio.json" \
    || fd_die "fio failed"

# fio's JSON: write.iops, write.clat_ns (time in write()), sync.lat_ns (time in fsync()).
metrics="$(python3 - "$WORK/fio.json" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]
print(f"iops={job['write']['iops']:.1f}")
print(f"write_lat_avg_us={job['write']['clat_ns']['mean'] / 1000:.1f}")
print(f"sync_lat_avg_us={job['sync']['lat_ns']['mean'] / 1000:.1f}")
print(f"fsync_count={job['sync']['total_ios']}")
PY
)"
# fio's iops log: "msec, iops, dir, bs, offset" per second -> "s iops".
{
    echo "# time (s), IOPS"
    awk -F', *' '{ printf "%.0f %s\n", $1 / 1000, $2 }' "$WORK"/fio_iops.*.log
} >"$WORK/iops.series"

mapfile -t metric_args < <(sed 's/^/--metric=/' <<<"$metrics")
python3 "$FARDISK_ROOT/bench/lib/result.py" --out-dir "$FARDISK_BENCH_RESULTS" \
    --scenario fio-randwrite-fsync --setup "local file ($fs_type)" --order 0 --durable yes \
    --duration-s "$FARDISK_BENCH_SECONDS" --param bs=4k --param fsync=1 --param iodepth=1 \
    --param size="$SIZE" "${metric_args[@]}" --series "iops_per_s=$WORK/iops.series"
fd_log "$(tr '\n' ' ' <<<"$metrics")"
