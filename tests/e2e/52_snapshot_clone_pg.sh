#!/usr/bin/env bash
# Snapshots and clones under a running database (issue: snapshots and clones of volumes):
#   PostgreSQL 15 on ext4 on a fardisk volume (file:// store 10 ms away, a log file) runs pgbench
#   TPC-B; in the middle of the run `fardisk snapshot` takes pg@mid and `fardisk clone` makes
#   pg2 from it. The clone's ext4 replays its journal and is clean (e2fsck -fn), a second
#   PostgreSQL starts on it, runs crash recovery, and the TPC-B invariant holds there, while the
#   first server keeps committing. The snapshot is read-only over NBD (qemu-io write refused) and
#   its bytes there equal those of VOLUME@NAME in the FUSE mount; the origin snapshot cannot be
#   destroyed while the clone needs it; after promote it can go the other way round; rollback is
#   refused while the volume is open; `snapshot list` accounts the space the snapshot holds.
E2E_NAME=52_snapshot_clone_pg
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
umask 022 # PostgreSQL runs as postgres and must reach what is made here
cd "$E2E_ROOT" || exit 1

POOL=snaptank
W="$FARDISK_RUN_DIR"
export FARDISK_HOME="$W/home"
MNT="$W/mnt"
FS1="$W/fs1"
FS2="$W/fs2"
PG="$SCRIPTS/postgres.sh"
NBD_SOCK="$W/nbd.sock"
RUN_S=20          # the first server's TPC-B run
SNAP_AFTER_S=6    # when, into that run, the snapshot is taken
LOOP1=""
LOOP2=""
BENCH_PID=""

cleanup() {
    [ -n "$BENCH_PID" ] && kill -0 "$BENCH_PID" 2>/dev/null && kill "$BENCH_PID" 2>/dev/null
    [ -f "$FS2/data/postmaster.pid" ] && "$PG" stop "$FS2/data" >/dev/null 2>&1
    [ -f "$FS1/data/postmaster.pid" ] && "$PG" stop "$FS1/data" >/dev/null 2>&1
    mountpoint -q "$FS2" && umount "$FS2"
    mountpoint -q "$FS1" && umount "$FS1"
    [ -n "$LOOP2" ] && losetup -d "$LOOP2" 2>/dev/null
    [ -n "$LOOP1" ] && losetup -d "$LOOP1" 2>/dev/null
    timeout 120 "$B" export "$POOL" >/dev/null 2>&1
    return 0
}

require "the debug build of fardisk" build_fardisk
B="$E2E_ROOT/target/debug/fardisk"
on_exit cleanup
mkdir -p "$FS1" "$FS2"

require "create (file:// store 10 ms away, a log file)" \
    "$B" create "$POOL" "file://$W/store" log "$W/log0" --simulate latency=10
require "import --mount --nbd" "$B" import "$POOL" "file://$W/store" --mount "$MNT" --nbd "unix:$NBD_SOCK" --simulate latency=10
require "volume create 1G" "$B" volume create "$POOL/pg" 1G
LOOP1="$(losetup --direct-io=on -f --show "$MNT/pg")"
require "mkfs.ext4 + mount" bash -c 'mkfs.ext4 -q "$1" && mount "$1" "$2"' _ "$LOOP1" "$FS1"
require "initdb" env PG_INITDB_NOSYNC=1 "$PG" init "$FS1/data"
require "start PostgreSQL 1" "$PG" start "$FS1/data"
require "pgbench -i -s 1" "$PG" pgbench "$FS1/data" -i -q -s 1 postgres

"$PG" pgbench "$FS1/data" -c4 -j2 -T "$RUN_S" postgres >"$W/tpcb1.out" 2>&1 &
BENCH_PID=$!
sleep "$SNAP_AFTER_S"
out="$("$B" snapshot "$POOL/pg@mid" 2>&1)"
check "snapshot taken mid-run: $out" grep -q "^snapshot $POOL/pg@mid taken" <<<"$out"
out="$("$B" clone "$POOL/pg@mid" "$POOL/pg2" 2>&1)"
check "clone made from it: $out" grep -q "^cloned $POOL/pg@mid as $POOL/pg2" <<<"$out"
check "pgbench 1 still running after snapshot and clone" kill -0 "$BENCH_PID"

# The clone: a crash-consistent copy of a mounted ext4 and a running server.
LOOP2="$(losetup --direct-io=on -f --show "$MNT/pg2")"
check "clone's ext4: journal replays on mount" mount "$LOOP2" "$FS2"
umount "$FS2"
fsck_out="$(e2fsck -fn "$LOOP2" 2>&1)"; fsck_rc=$?
check "clone's ext4: e2fsck -fn clean (exit $fsck_rc)" test "$fsck_rc" -eq 0
require "clone's ext4 mounted" mount "$LOOP2" "$FS2"
# The copied lock file names the first server's pid, which is alive: a clone must drop it.
rm -f "$FS2/data/postmaster.pid"
require "start PostgreSQL 2 on the clone (crash recovery)" "$PG" start "$FS2/data"
check "clone: TPC-B invariant holds" "$PG" check "$FS2/data" postgres
clone_rows="$("$PG" psql "$FS2/data" -X -At -c 'SELECT count(*) FROM pgbench_history')"
check "clone: recovered $clone_rows history rows from mid-run" test "${clone_rows:-0}" -gt 0
check "pgbench 1 still running while the clone serves" kill -0 "$BENCH_PID"
"$PG" pgbench "$FS2/data" -n -c2 -j1 -T 3 postgres >"$W/tpcb2.out" 2>&1
check "clone takes its own writes: TPC-B on server 2" grep -q "^number of transactions actually processed" "$W/tpcb2.out"

wait "$BENCH_PID"; bench_rc=$?; BENCH_PID=""
tx1="$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$W/tpcb1.out")"
check "pgbench 1 finished its ${RUN_S} s run (exit $bench_rc, $tx1 transactions)" test "$bench_rc" -eq 0
check "origin: TPC-B invariant holds" "$PG" check "$FS1/data" postgres
rows1="$("$PG" psql "$FS1/data" -X -At -c 'SELECT count(*) FROM pgbench_history')"
check "origin: history rows ($rows1) = transactions processed ($tx1), more than the clone saw ($clone_rows)" \
    bash -c '[ "$1" = "$2" ] && [ "$1" -gt "$3" ]' _ "$rows1" "$tx1" "$clone_rows"
check "clone still holds its own state after the origin moved on" "$PG" check "$FS2/data" postgres

# The snapshot itself: read-only everywhere, the same bytes over FUSE and NBD.
check "NBD lists the snapshot" bash -c 'nbdinfo --list "nbd+unix:///?socket=$1" | grep -q "pg@mid"' _ "$NBD_SOCK"
if qemu-io -f raw -c 'write 0 4k' "nbd+unix:///pg@mid?socket=$NBD_SOCK" >"$W/qemu-io.out" 2>&1 && ! grep -qi "error\|read-only\|denied" "$W/qemu-io.out"; then
    fail "a write to the snapshot over NBD must fail: $(cat "$W/qemu-io.out")"
else
    pass "a write to the snapshot over NBD is refused: $(grep -im1 "error\|read-only\|denied" "$W/qemu-io.out")"
fi
check "snapshot file is read-only over FUSE" bash -c '! dd if=/dev/zero of="$1" bs=4k count=1 conv=notrunc status=none 2>/dev/null' _ "$MNT/pg@mid"
require "nbdcopy of the snapshot" nbdcopy "nbd+unix:///pg@mid?socket=$NBD_SOCK" "$W/mid.img"
check "NBD and FUSE give the snapshot's same bytes" cmp "$W/mid.img" "$MNT/pg@mid"
rm -f "$W/mid.img"

list="$("$B" snapshot list "$POOL" --json)"
used="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["snapshots"][0]["used_bytes"])' <<<"$list")"
check "snapshot list: pg@mid alone holds $used bytes the origin overwrote since" test "${used:-0}" -gt 0
"$B" snapshot list "$POOL"
check "snapshot list --json matches docs/json/snapshot-list.schema.json" \
    bash -c 'python3 "$1" "$2" <<<"$3"' _ "$E2E_ROOT/tests/e2e/lib/json_schema.py" "$E2E_ROOT/docs/json/snapshot-list.schema.json" "$list"

expect_error "origin snapshot with a clone cannot be destroyed" "dependent clones" "$B" snapshot destroy "$POOL/pg@mid"
expect_error "rollback of a volume in use is refused" "in use" "$B" rollback "$POOL/pg2@mid"
expect_error "bad snapshot name" "POOL/VOLUME@SNAPSHOT" "$B" snapshot "$POOL/pg"
expect_error "missing snapshot" "has no snapshot" "$B" clone "$POOL/pg@nope" "$POOL/x"

# Promote: the clone owns pg@mid now, and the former origin depends on it.
"$PG" stop "$FS1/data" >/dev/null; umount "$FS1"; losetup -d "$LOOP1"; LOOP1=""
require "promote the clone" "$B" promote "$POOL/pg2"
check "after promote the snapshot belongs to pg2" bash -c '"$1" snapshot list "$2" | grep -q "^$2/pg2@mid .* pg$"' _ "$B" "$POOL"
require "the former origin can now be destroyed" "$B" volume destroy "$POOL/pg"
check "the promoted clone's database still checks out" "$PG" check "$FS2/data" postgres

# Export and import: snapshots and clones are in the root.
"$PG" stop "$FS2/data" >/dev/null; umount "$FS2"; losetup -d "$LOOP2"; LOOP2=""
require "export" "$B" export "$POOL"
require "import again" "$B" import "$POOL" "file://$W/store" --mount "$MNT" --simulate latency=10
check "after re-import pg2@mid is still there" bash -c '"$1" snapshot list "$2" | grep -q "pg2@mid"' _ "$B" "$POOL"
require "rollback pg2 to pg2@mid" "$B" rollback "$POOL/pg2@mid"
LOOP2="$(losetup --direct-io=on -f --show "$MNT/pg2")"
require "mount the rolled-back volume" mount "$LOOP2" "$FS2"
rm -f "$FS2/data/postmaster.pid"
require "start PostgreSQL on the rolled-back volume" "$PG" start "$FS2/data"
rows_rb="$("$PG" psql "$FS2/data" -X -At -c 'SELECT count(*) FROM pgbench_history')"
check "rolled back to the mid-run state ($rows_rb history rows, as the clone first saw: $clone_rows)" test "$rows_rb" = "$clone_rows"
check "rolled-back database: TPC-B invariant holds" "$PG" check "$FS2/data" postgres
e2e_finish
