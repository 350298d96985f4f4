#!/usr/bin/env bash
# The fardisk CLI as a user runs it: create with log and cache devices, import with FUSE and NBD,
# ext4 on a loop device over the image (e2fsck clean), real NBD clients (nbdinfo, qemu-img,
# qemu-io, nbdcopy) agreeing with the FUSE view, SIGKILL of the daemon with every synced write
# replayed from the log, clear one-line errors for bad input, a missing log refused with its
# recovery point and imported with --missing-log, export/import.
E2E_NAME=40_cli_fuse_nbd
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
umask 022
cd "$E2E_ROOT"
# The FUSE transport under test: off = /dev/fuse (the default here; 41 covers io_uring), or
# E2E_FUSE_URING=on|auto to run these checks over io_uring.
FUSE_URING="${E2E_FUSE_URING:-off}"
# The debug build `cargo test --workspace` already made (deps are optimised in dev: Cargo.toml).
require "the debug build of fardisk" build_fardisk
B="$E2E_ROOT/target/debug/fardisk"
W="$(mktemp -d /tmp/fardisk-e2e40.XXXXXX)"
export FARDISK_HOME="$W/home" FARDISK_RUN_DIR="$W/run"
SOCK="$W/nbd.sock"
URI="nbd+unix:///raw?socket=$SOCK"
LOOP=""
daemon_pid() { "$B" status tank --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["pools"][0].get("pid",""))'; }
# detach_loop DEV: a lazily unmounted ext4 can hold its loop device for a moment, and a single
# `losetup -d` then fails and leaves the device attached after the test (bounded: 5 s).
detach_loop() {
    local i
    for i in $(seq 50); do
        losetup -d "$1" 2>/dev/null
        losetup "$1" >/dev/null 2>&1 || return 0
        sleep 0.1
    done
    echo "WARN $E2E_NAME: $1 still attached after 5 s" >&2
}
teardown_mounts() {
    mountpoint -q "$W/fs" && umount -l "$W/fs"
    [ -n "$LOOP" ] && detach_loop "$LOOP"
    LOOP=""
    if grep -q " $W/mnt " /proc/mounts; then fusermount3 -u "$W/mnt" 2>/dev/null || umount -l "$W/mnt"; fi
    return 0
}
on_exit 'teardown_mounts; "$B" export tank >/dev/null 2>&1; pid=$(daemon_pid); [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$W"'

require "create with a log and a cache device" "$B" create tank "file://$W/store" log "$W/log0" cache "$W/cache0" --simulate latency=10
require "import with FUSE and NBD" "$B" import tank --mount "$W/mnt" --fuse-uring "$FUSE_URING" --nbd "unix:$SOCK"
require "volume create 1G" "$B" volume create tank/v 1G
require "volume create 64M (raw I/O)" "$B" volume create tank/raw 64M
[ "$FUSE_URING" = off ] && check "status says the mount is served over /dev/fuse" bash -c "'$B' status tank | grep -q 'mount: .*(FUSE over /dev/fuse)'"
check "the image file has the volume's size" test "$(stat -c %s "$W/mnt/v")" -eq $((1 << 30))
LOOP="$(losetup --direct-io=on -f --show "$W/mnt/v")"
require "mkfs.ext4 on a loop device over the image" mkfs.ext4 -q "$LOOP"
mkdir -p "$W/fs"
require "mount ext4" mount "$LOOP" "$W/fs"
head -c 20M /dev/urandom >"$W/payload"
cp "$W/payload" "$W/fs/payload" && sync
check "file written through ext4 reads back" cmp "$W/payload" "$W/fs/payload"
umount "$W/fs"
check "e2fsck -fn clean" e2fsck -fn "$LOOP"
losetup -d "$LOOP"; LOOP=""

check "nbdinfo --list names both volumes" bash -c "nbdinfo --list 'nbd+unix:///?socket=$SOCK' | grep -q raw"
check "qemu-img info sees 64 MiB" bash -c "qemu-img info --output=json '$URI' | grep -q '\"virtual-size\": 67108864'"
check "qemu-io writes a pattern over NBD" qemu-io -f raw -c 'write -P 0x5a 32M 1M' "$URI"
check "the FUSE image sees the NBD write" bash -c "cmp <(dd if='$W/mnt/raw' bs=1M skip=32 count=1 status=none) <(head -c 1M /dev/zero | tr '\\0' '\\132')"
check "nbdcopy of the volume equals the FUSE image" bash -c "nbdcopy '$URI' '$W/copy.img' && cmp '$W/copy.img' '$W/mnt/raw'"
rm -f "$W/copy.img"
check "block status shows holes (sparse)" bash -c "nbdinfo --map '$URI' | grep -q hole"

# Synced writes survive a SIGKILL through the log: raw O_DSYNC writes to the image, and a file
# fsynced inside ext4 (the loop device turns the flush into an fsync of the image).
head -c 8M /dev/urandom >"$W/synced"
require "dd with oflag=dsync onto the raw image" dd if="$W/synced" of="$W/mnt/raw" bs=64k seek=256 oflag=dsync conv=notrunc status=none
LOOP="$(losetup --direct-io=on -f --show "$W/mnt/v")"
require "mount ext4 again" mount "$LOOP" "$W/fs"
require "dd conv=fsync of a file inside ext4" dd if="$W/synced" of="$W/fs/synced" bs=1M conv=fsync status=none
pid="$(daemon_pid)"
check "daemon pid known" test -n "$pid"
kill -9 "$pid"
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
umount -l "$W/fs"; detach_loop "$LOOP"; LOOP=""
# The dead daemon's FUSE mount is left as a user would find it: import must cope with it.
require "import after SIGKILL needs no --force" "$B" import tank --mount "$W/mnt" --fuse-uring "$FUSE_URING" --nbd "unix:$SOCK"
check "an NBD client reconnecting after the restart reads the same data" qemu-io -f raw -c 'read -P 0x5a 32M 1M' "$URI"
check "arcstat answers" bash -c "'$B' arcstat tank | grep -q hits"
check "every synced raw write is there" bash -c "cmp <(dd if='$W/mnt/raw' bs=64k skip=256 count=128 status=none) '$W/synced'"
check "the log was replayed" grep -q "intent log replayed" "$FARDISK_HOME/log/tank.log"
LOOP="$(losetup --direct-io=on -f --show "$W/mnt/v")"
require "mount ext4 after the crash (journal replay)" mount "$LOOP" "$W/fs"
check "the fsynced file inside ext4 is intact" cmp "$W/synced" "$W/fs/synced"
umount "$W/fs"
check "e2fsck -fn clean after the crash" e2fsck -fn "$LOOP"
losetup -d "$LOOP"; LOOP=""

# Bad input: one line, non-zero exit, nothing changed.
expect_error "bad size" "unknown unit" "$B" volume create tank/w 12Q
expect_error "existing volume" "already exists" "$B" volume create tank/v 1G
expect_error "second import" "already imported" "$B" import tank --mount "$W/mnt2"
expect_error "unknown pool" "not imported" "$B" volume list nosuch
# It says where it looked: an import made with another FARDISK_RUN_DIR is not found from here.
expect_error "export of an unknown pool names the run directory" "no engine answers in the run directory" "$B" export nosuch
expect_error "bad store URL" "store URL" "$B" create t2 "ftp://x"
expect_error "bad property" "unknown property" "$B" set colour=blue tank
expect_error "bad simulate spec" "simulate" "$B" create t3 "file://$W/s3" --simulate latency=fast
check "nothing was created by the failed commands" test ! -e "$W/s3"

# A missing log is refused with its recovery point; --missing-log imports there.
pid="$(daemon_pid)"
kill -9 "$pid"
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
teardown_mounts
mv "$W/log0" "$W/log0.away"
expect_error "import without its log is refused" "recovery point" "$B" import tank --mount "$W/mnt"
require "import --missing-log" "$B" import tank --mount "$W/mnt" --fuse-uring "$FUSE_URING" --missing-log
LOOP="$(losetup -f --show "$W/mnt/v")"
check "e2fsck -fn clean at the recovery point" e2fsck -fn "$LOOP"
losetup -d "$LOOP"; LOOP=""
require "export" "$B" export tank
check "status shows EXPORTED" bash -c "'$B' status tank | grep -q EXPORTED"
e2e_finish
