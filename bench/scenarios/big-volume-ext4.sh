#!/usr/bin/env bash
# about: a 256 GiB thin volume under ext4 on the FUSE image, data in every GiB: whole-device discard (mkfs.ext4) under a snapshot, fstrim, snapshot destroy, rollback; the daemon's RSS peak and another volume's fsync latency during each (#21)
# One pool on a local-directory store, no log (a sync is a txg, which is what a long free would
# hold up), the daemon's defaults otherwise. Steps, each timed from its command until the pool's
# `freeing` is empty (status --json), with the daemon's VmRSS sampled every 100 ms and a probe
# (4 KiB pwrite + fdatasync in a loop on a second volume's image) running throughout:
#   1. raw data in every GiB of the volume (1 MiB at each GiB), snapshot s1;
#   2. mkfs.ext4 (whole-device discard of the 256 GiB, which s1 holds, then lazy init);
#   3. a sparse file with 1 MiB written at every GiB of its offsets (ext4 places it across the
#      device), snapshot s2, the file deleted, fstrim;
#   4. snapshot destroy s1 (its 256 GiB of raw data and map pages, walked a slice per txg);
#   5. unmount, rollback to s2 (the fstrim's frees go with the former map);
#   6. snapshot destroy s2.
# Env: FARDISK_BIG_GIB (256), FARDISK_BIN (a fardisk binary instead of a fresh release build).
# Prints one line per step; the note in bench/notes/engine-store.md carries the figures.
set -euo pipefail
FD_NAME=big-volume-ext4
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

GIB="${FARDISK_BIG_GIB:-256}"
WORK="$FARDISK_RUN_DIR/bench/big-volume-ext4"
export FARDISK_HOME="$WORK/home" FARDISK_RUN_DIR="$WORK/run"
B="$(fd_fardisk_bin)"
LOOP="" PROBE_PID="" SAMPLER_PID=""

cleanup() {
    [ -n "$PROBE_PID" ] && kill "$PROBE_PID" 2>/dev/null
    [ -n "$SAMPLER_PID" ] && kill "$SAMPLER_PID" 2>/dev/null
    mountpoint -q "$WORK/fs" && umount "$WORK/fs"
    [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
    "$B" export bigpool >/dev/null 2>&1
    rm -rf "$WORK/store"
    return 0
}
mkdir -p "$WORK"
cleanup || true
rm -rf "$WORK"
mkdir -p "$WORK/fs" "$WORK/mnt"
trap "cleanup || true" EXIT

status_json() { "$B" status bigpool --json; }
freeing() { # prints "TREES SUBTREES"
    status_json | python3 -c 'import json,sys; f=json.load(sys.stdin)["pools"][0]["freeing"]; print(f["trees_being_destroyed"], f["queued_subtrees"])'
}

"$B" create bigpool "file://$WORK/store" >/dev/null
"$B" import bigpool --mount "$WORK/mnt" >/dev/null
"$B" volume create "bigpool/big" "${GIB}G" >/dev/null
"$B" volume create "bigpool/probe" 64M >/dev/null
PID="$(status_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["pools"][0]["pid"])')"
fd_log "daemon pid $PID, ${GIB} GiB volume"

# The probe: 4 KiB pwrite + fdatasync on the probe volume's image, latencies in microseconds.
python3 - "$WORK/mnt/probe" "$WORK/probe.us" "$WORK/probe.stop" <<'EOF' &
import os, sys, time
path, out, stop = sys.argv[1:4]
fd = os.open(path, os.O_WRONLY)
buf = os.urandom(4096)
with open(out, "w") as f:
    for i in range(10_000_000):  # bounded: stops long before, when the stop file appears
        if i % 64 == 0 and os.path.exists(stop):
            break
        t = time.perf_counter()
        os.pwrite(fd, buf, (i % 4096) * 4096)
        os.fdatasync(fd)
        f.write("%d %d\n" % (int(time.time() * 1000), int((time.perf_counter() - t) * 1e6)))
        f.flush()
EOF
PROBE_PID=$!

# VmRSS of the daemon every 100 ms: "ms kib" lines.
(for _ in $(seq 1 3000000); do
    rss="$(awk '/^VmRSS:/ { print $2 }' "/proc/$PID/status" 2>/dev/null)" || break
    [ -n "$rss" ] || break
    echo "$(date +%s%3N) $rss"
    sleep 0.1
done) >"$WORK/rss.kib" &
SAMPLER_PID=$!

# step NAME COMMAND...: runs it, waits until nothing is being freed, prints the step's figures.
step() {
    local name="$1" t0 t1 rss0 trees subtrees; shift
    rss0="$(awk '/^VmRSS:/ { print $2 }' "/proc/$PID/status")"
    t0="$(date +%s%3N)"
    "$@" >"$WORK/step.out" 2>&1 || { cat "$WORK/step.out"; fd_die "$name failed"; }
    for _ in $(seq 1 36000); do
        read -r trees subtrees < <(freeing)
        [ "$trees" = 0 ] && [ "$subtrees" = 0 ] && break
        sleep 0.1
    done
    t1="$(date +%s%3N)"
    python3 - "$name" "$t0" "$t1" "$rss0" "$WORK/rss.kib" "$WORK/probe.us" <<'EOF'
import sys
name, t0, t1, rss0 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rss = [int(l.split()[1]) for l in open(sys.argv[5]) if l.strip() and t0 <= int(l.split()[0]) <= t1]
lat = sorted(int(l.split()[1]) for l in open(sys.argv[6]) if l.strip() and t0 <= int(l.split()[0]) <= t1)
pct = lambda p: lat[min(len(lat) - 1, int(round((len(lat) - 1) * p)))] / 1000 if lat else float("nan")
print("BIG_EXT4 %s: %.1f s; daemon RSS %d MiB before, peak %d MiB; probe fdatasync (%d) p50 %.1f ms, p99 %.1f ms, max %.1f ms"
      % (name, (t1 - t0) / 1000, rss0 // 1024, max(rss + [rss0]) // 1024, len(lat), pct(0.5), pct(0.99), pct(1.0)))
EOF
}

write_every_gib() { # write_every_gib TARGET: 1 MiB at each GiB offset
    local g
    for g in $(seq 0 $((GIB - 1))); do
        dd if=/dev/urandom of="$1" bs=1M count=1 seek=$((g * 1024)) conv=notrunc,fsync status=none
    done
}

LOOP="$(losetup --direct-io=on -f --show "$WORK/mnt/big")"
step "raw 1 MiB in each of ${GIB} GiB" write_every_gib "$LOOP"
step "snapshot s1" "$B" snapshot bigpool/big@s1
step "mkfs.ext4 (whole-device discard under s1)" mkfs.ext4 -q "$LOOP"
mount "$LOOP" "$WORK/fs"
truncate -s "$((GIB - 8))G" "$WORK/fs/sparse"
step "1 MiB at every GiB of a sparse file in ext4" write_every_gib "$WORK/fs/sparse"
sync
step "snapshot s2" "$B" snapshot bigpool/big@s2
rm "$WORK/fs/sparse"
step "fstrim after deleting it" fstrim "$WORK/fs"
step "snapshot destroy s1" "$B" snapshot destroy bigpool/big@s1
umount "$WORK/fs"
losetup -d "$LOOP"; LOOP=""
step "rollback to s2" "$B" rollback bigpool/big@s2
step "snapshot destroy s2" "$B" snapshot destroy bigpool/big@s2
touch "$WORK/probe.stop"
wait "$PROBE_PID" || true; PROBE_PID=""
fd_log "done; the daemon's RSS over the whole run peaked at $(awk '$2 > m { m = $2 } END { print int(m / 1024) }' "$WORK/rss.kib") MiB"
