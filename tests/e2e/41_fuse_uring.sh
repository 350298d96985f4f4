#!/usr/bin/env bash
# The FUSE image over io_uring (`import --fuse-uring on`), as a user runs it: status says the mount
# is served over io_uring and requests really arrive through the rings; ext4 on a loop device
# (--direct-io=on) over the image, a file written and read back, e2fsck -fn clean; PostgreSQL 15
# on it, pgbench -i and a TPC-B run with the invariant checked; an O_DSYNC write and an fsync'd
# file inside ext4 survive a SIGKILL of the daemon (log replay); `--fuse-uring off` on the same
# pool serves over /dev/fuse. Skips (exit 0, with the reason) on a kernel without FUSE over
# io_uring. `--fuse-uring on` turns /sys/module/fuse/parameters/enable_uring on: this test
# leaves it as it found it.
E2E_NAME=41_fuse_uring
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
umask 022 # PostgreSQL runs as postgres and must reach what is made here
cd "$E2E_ROOT" || exit 1
SWITCH=/sys/module/fuse/parameters/enable_uring
if [ ! -e "$SWITCH" ]; then
    echo "SKIP $E2E_NAME: this kernel has no FUSE over io_uring ($SWITCH is missing; Linux 6.14+ with CONFIG_FUSE_IO_URING)"
    e2e_finish
fi
switch_before="$(cat "$SWITCH")"
on_exit 'echo "$switch_before" >"$SWITCH"'
require "the debug build of fardisk" build_fardisk
B="$E2E_ROOT/target/debug/fardisk"
W="$FARDISK_RUN_DIR"
export FARDISK_HOME="$W/home"
PG="$SCRIPTS/postgres.sh"
LOOP=""
DATA="$W/fs/data"
status_json() { "$B" status tank --json | python3 -c 'import json,sys; f=json.load(sys.stdin)["pools"][0].get("fuse") or {}; print(f.get(sys.argv[1], ""))' "$1"; }
teardown() {
    [ -d "$DATA" ] && "$PG" stop "$DATA" >/dev/null 2>&1
    mountpoint -q "$W/fs" && umount -l "$W/fs"
    [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
    LOOP=""
    "$B" export tank >/dev/null 2>&1
    pid="$(fardisk_daemon_pid tank 2>/dev/null)"
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
    if grep -q " $W/mnt " /proc/mounts; then umount -l "$W/mnt"; fi
    return 0
}
on_exit teardown
mkdir -p "$W/fs"

require "create with a log and a cache file" "$B" create tank "file://$W/store" log "$W/log0" cache "$W/cache0" --simulate latency=10
require "import --fuse-uring on" "$B" import tank --mount "$W/mnt" --fuse-uring on
check "the module switch is on" test "$(cat "$SWITCH")" = Y
check "status --json: transport io_uring ($(status_json transport_reason))" test "$(status_json transport)" = io_uring
check "status text: mount served over io_uring, with its rings' memory" bash -c "'$B' status tank | grep -q 'mount: .*(FUSE over io_uring, [0-9]* queue(s), .* of ring buffers)'"
queues="$(status_json uring_queues)"
ring_bytes="$(status_json uring_buffer_bytes)"
# Each entry holds a payload buffer of max_write (1 MiB) and a 288 B header.
check "status --json: $queues queue(s) hold $ring_bytes bytes of ring buffers (32 entries of 1 MiB + 288 B each)" \
    test "${ring_bytes:-0}" -eq $((${queues:-0} * 32 * (1048576 + 288)))
require "volume create 2G" "$B" volume create tank/pg 2G
LOOP="$(losetup --direct-io=on -f --show "$W/mnt/pg")"
require "mkfs.ext4 on a loop device over the image" mkfs.ext4 -q "$LOOP"
require "mount ext4" mount "$LOOP" "$W/fs"
head -c 16M /dev/urandom >"$W/payload"
cp "$W/payload" "$W/fs/payload" && sync
check "a file written through ext4 reads back" cmp "$W/payload" "$W/fs/payload"
uring_requests="$(status_json requests_uring)"
check "requests arrived through io_uring ($uring_requests; /dev/fuse: $(status_json requests_device))" test "${uring_requests:-0}" -gt 50
chmod 755 "$W/fs"
require "initdb" env PG_INITDB_NOSYNC=1 "$PG" init "$DATA"
require "start PostgreSQL" "$PG" start "$DATA"
require "pgbench -i -s 1" "$PG" pgbench "$DATA" -i -q -s 1 postgres
out="$("$PG" pgbench "$DATA" -c4 -j2 -T 10 postgres 2>&1)"
echo "INFO $E2E_NAME: TPC-B over io_uring: $(grep -E '^(tps|latency average)' <<<"$out" | tr '\n' ' ')"
check "TPC-B committed transactions" grep -q "number of failed transactions: 0" <<<"$out"
check "TPC-B invariant" "$PG" check "$DATA" postgres
require "stop PostgreSQL" "$PG" stop "$DATA"
umount "$W/fs"
check "e2fsck -fn clean" e2fsck -fn "$LOOP"

# Synced writes survive a SIGKILL: an O_DSYNC write to the raw image (FUA) and a file fsync'd in ext4.
require "mount ext4 again" mount "$LOOP" "$W/fs"
head -c 4M /dev/urandom >"$W/synced"
require "dd conv=fsync of a file inside ext4" dd if="$W/synced" of="$W/fs/synced" bs=1M conv=fsync status=none
pid="$(fardisk_daemon_pid tank)"
check "daemon pid known" test -n "$pid"
kill -9 "$pid"
wait_gone 50 "$pid"
umount -l "$W/fs"; losetup -d "$LOOP" 2>/dev/null; LOOP=""
require "import after SIGKILL, now --fuse-uring off" "$B" import tank --mount "$W/mnt" --fuse-uring off
check "status --json: transport /dev/fuse" test "$(status_json transport)" = /dev/fuse
check "no request went through io_uring" test "$(status_json requests_uring)" = 0
LOOP="$(losetup --direct-io=on -f --show "$W/mnt/pg")"
require "mount ext4 after the crash (journal replay)" mount "$LOOP" "$W/fs"
check "the fsync'd file is intact" cmp "$W/synced" "$W/fs/synced"
check "the file written before is intact" cmp "$W/payload" "$W/fs/payload"
umount "$W/fs"
check "e2fsck -fn clean after the crash" e2fsck -fn "$LOOP"
losetup -d "$LOOP"; LOOP=""
require "export" "$B" export tank
e2e_finish
