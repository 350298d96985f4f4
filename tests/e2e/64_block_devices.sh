#!/usr/bin/env bash
# Volumes as block devices with stable names (#20, `import --block-devices`): each volume's FUSE
# image on a loop device with direct I/O, and /dev/fardisk/POOL/VOLUME pointing at it.
#   With --holder: the path appears for a volume and for one created later; ext4 made and mounted
#   through it; an engine SIGKILL and a `fardisk upgrade` keep the same path on the same loop
#   device (recognised, not attached again), data intact, writes go on; `export` while ext4 is
#   mounted is refused with one line and changes nothing; after umount, export leaves no path and
#   no loop device; an import brings them back with the data.
#   Without a holder: the same paths; `volume destroy` of a mounted volume is refused, of an unused
#   one detaches it; a daemon SIGKILLed (its mount dies) leaves stale devices that the next import
#   cleans up (one not in use is detached; one still mounted is named and detaches itself once
#   unmounted).
# Every loop device and mount made here is undone at exit, whatever happens.
#
# Env: FARDISK_BIN=PATH uses that binary instead of building target/debug/fardisk.
E2E_NAME=64_block_devices
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$E2E_ROOT" || exit 1

POOL="bdev64-$$"
W="$FARDISK_RUN_DIR"
export FARDISK_HOME="$W/home"
MNT="$W/mnt"
FS="$W/fs"
DEV="/dev/fardisk/$POOL"
WAIT_TRIES=600 # x 0.1 s: bound on every wait below
. "$(dirname "${BASH_SOURCE[0]}")/lib/postgres.sh"

use_fardisk_bin
# The "installed" binary: an upgrade starts whatever file is at this path.
mkdir -p "$W/bin" "$FS"
require "install the binary under test as $W/bin/fardisk" cp "$B" "$W/bin/fardisk"
B="$W/bin/fardisk"

# loops_over_mount: the loop devices (numbers) whose backing file is an image of $MNT.
loops_over_mount() {
    local f n
    for f in /sys/block/loop*/loop/backing_file; do
        [ -e "$f" ] || continue
        n="${f#/sys/block/loop}"; n="${n%%/*}"
        case "$(cat "$f" 2>/dev/null)" in "$MNT"/*) echo "$n" ;; esac
    done
}
# Devices that may outlive our mount (after the crash without a holder, sysfs shows their image
# as "/VOLUME" once the dead mount is detached): "N VOLUME" lines, detached at exit if still so.
STALE_WATCH=()
cleanup_64() {
    local n p v
    mountpoint -q "$FS" && umount -l "$FS"
    [ -n "${B:-}" ] && timeout 120 "$B" export "$POOL" >/dev/null 2>&1
    for p in "${DAEMON_PIDS[@]}"; do is_ours "$p" fardisk && kill -KILL "$p" 2>/dev/null; done
    for n in $(loops_over_mount); do losetup -d "/dev/loop$n" 2>/dev/null; done
    for p in "${STALE_WATCH[@]}"; do
        n="${p% *}"; v="${p#* }"
        [ "$(cat "/sys/block/loop$n/loop/backing_file" 2>/dev/null)" = "/$v" ] && losetup -d "/dev/loop$n" 2>/dev/null
    done
    rm -f "$DEV"/* 2>/dev/null; rmdir "$DEV" /dev/fardisk 2>/dev/null
    if grep -q " $MNT " /proc/mounts; then umount -l "$MNT"; fi
    return 0
}
on_exit cleanup_64

status_json() { timeout 30 "$B" status "$POOL" --json 2>/dev/null; }
# dev_field VOLUME KEY: one field of the volume's block_device in status --json.
dev_field() {
    status_json | python3 -c '
import json, sys
p = json.load(sys.stdin)["pools"][0]
v = [v for v in p["volumes"] if v["name"] == sys.argv[1]]
print((v[0].get("block_device") or {}).get(sys.argv[2], "") if v else "")' "$1" "$2" 2>/dev/null
}
# loop_of VOLUME: the N of /dev/loopN the stable path points at.
loop_of() { local t; t="$(readlink "$DEV/$1")" || return 1; echo "${t#/dev/loop}"; }
# device_ok VOLUME: the path is a symlink to /dev/loopN, bound to the volume's image with dio=1.
device_ok() {
    local n
    [ -L "$DEV/$1" ] || { echo "$DEV/$1 is not a symlink" >&2; return 1; }
    n="$(loop_of "$1")" || return 1
    [ -b "/dev/loop$n" ] || { echo "/dev/loop$n is not a block device" >&2; return 1; }
    [ "$(cat "/sys/block/loop$n/loop/backing_file" 2>/dev/null)" = "$MNT/$1" ] || { echo "loop$n backing: $(cat "/sys/block/loop$n/loop/backing_file" 2>&1)" >&2; return 1; }
    [ "$(cat "/sys/block/loop$n/loop/dio")" = 1 ] || { echo "loop$n dio=$(cat "/sys/block/loop$n/loop/dio")" >&2; return 1; }
}
# wait_engine_other_than PID: a new engine answers (bounded); prints its pid.
wait_engine_other_than() {
    local i pid
    for ((i = 0; i < WAIT_TRIES; i++)); do
        pid="$(daemon_pid)"
        if [ -n "$pid" ] && [ "$pid" != "$1" ]; then echo "$pid"; return 0; fi
        sleep 0.1
    done
    return 1
}
sums_ok() { (cd "$FS" && sha256sum --quiet -c "$W/sums"); }
remount() { umount "$FS" && mount "$DEV/pg" "$FS"; }
write_more() { dd if=/dev/urandom of="$FS/$1" bs=1M count=4 conv=fsync status=none && (cd "$FS" && sha256sum "$1") >>"$W/sums"; }
count_loops() { loops_over_mount | wc -l; }
schema_ok() { status_json | python3 "$E2E_ROOT/tests/e2e/lib/json_schema.py" "$E2E_ROOT/docs/json/status.schema.json"; }

# ---- with a holder ---------------------------------------------------------------------------

require "create on file:// with a log file" "$B" create "$POOL" "file://$W/store" log "$W/log0"
require "import --holder --block-devices" import_pool --holder --block-devices
HOLDER_PID="$(holder_field pid)"
require "status names the holder (pid ${HOLDER_PID:-none})" is_ours "$HOLDER_PID" fardisk
DAEMON_PIDS+=("$HOLDER_PID")
require "volume create pg 64M" "$B" volume create "$POOL/pg" 64M
require "$DEV/pg -> /dev/loopN bound to $MNT/pg with dio=1" device_ok pg
LOOP_PG="$(loop_of pg)"
check "status --json: block_device of pg is $DEV/pg on /dev/loop$LOOP_PG, direct I/O" \
    test "$(dev_field pg path) $(dev_field pg device) $(dev_field pg direct_io)" = "$DEV/pg /dev/loop$LOOP_PG True"
check "status shows the device beside the volume" bash -c "'$B' status '$POOL' | grep -q 'pg .*$DEV/pg -> /dev/loop$LOOP_PG$'"
check "status --json matches docs/json/status.schema.json" schema_ok
require "mkfs.ext4 through $DEV/pg" mkfs.ext4 -q "$DEV/pg"
require "mount ext4 through $DEV/pg" mount "$DEV/pg" "$FS"
: >"$W/sums"
require "write 4M with fsync, checksum kept" write_more before

engine="$(daemon_pid)"
require "SIGKILL the engine (pid $engine, not the holder)" kill -KILL "$engine"
check "a write with fsync during the restart succeeds" write_more during_kill
next="$(wait_engine_other_than "$engine")"
require "a new engine answers (pid ${next:-none})" test -n "$next"
check "the holder is the same process" is_ours "$HOLDER_PID" fardisk
check "after the kill: same path on the same /dev/loop$LOOP_PG, dio=1" bash -c "$(declare -f device_ok loop_of); DEV='$DEV' MNT='$MNT'; device_ok pg && [ \"\$(loop_of pg)\" = '$LOOP_PG' ]"
check "after the kill: no second loop device over the image" test "$(count_loops)" -eq 1
check "the new engine recognised the device (log)" grep -q "block device of a previous engine recognised" "$FARDISK_HOME/log/$POOL.log"
check "writes go on after the kill" write_more after_kill
check "data intact after the kill (remount, sha256)" bash -c "$(declare -f remount sums_ok); FS='$FS' DEV='$DEV' W='$W'; remount && sums_ok"

# A new release installed over the running one (a new file at the same path).
cp "$B" "$W/bin/fardisk.new" && mv -f "$W/bin/fardisk.new" "$B"
engine="$(daemon_pid)"
check "fardisk upgrade" timeout 300 "$B" upgrade "$POOL" --wait 240
check "after the upgrade: a new engine (pid $(daemon_pid), was $engine)" test "$(daemon_pid)" != "$engine"
check "after the upgrade: same path on the same /dev/loop$LOOP_PG, dio=1" bash -c "$(declare -f device_ok loop_of); DEV='$DEV' MNT='$MNT'; device_ok pg && [ \"\$(loop_of pg)\" = '$LOOP_PG' ]"
check "after the upgrade: no second loop device over the image" test "$(count_loops)" -eq 1
check "writes go on after the upgrade" write_more after_upgrade
check "data intact after the upgrade (remount, sha256)" bash -c "$(declare -f remount sums_ok); FS='$FS' DEV='$DEV' W='$W'; remount && sums_ok"

require "volume create second 32M while imported" "$B" volume create "$POOL/second" 32M
check "$DEV/second appears at once, on its own loop device with dio=1" device_ok second
check "second's device is not pg's" test "$(loop_of second)" != "$LOOP_PG"

engine="$(daemon_pid)"
expect_error "export while ext4 is mounted is refused" "in use as $DEV/pg (/dev/loop$LOOP_PG.*unmount it first" "$B" export "$POOL"
check "after the refusal: the same engine still serves" test "$(daemon_pid)" = "$engine"
check "after the refusal: both paths and devices as before" bash -c "$(declare -f device_ok loop_of); DEV='$DEV' MNT='$MNT'; device_ok pg && device_ok second && [ \"\$(loop_of pg)\" = '$LOOP_PG' ]"
check "after the refusal: ext4 still mounted and writable" write_more after_refusal

require "umount ext4" umount "$FS"
require "export" timeout 120 "$B" export "$POOL"
check "after the export: no $DEV" test ! -e "$DEV"
check "after the export: no loop device over the images" test "$(count_loops)" -eq 0
check "after the export: the holder is gone" wait_gone "$WAIT_TRIES" "$HOLDER_PID"
check "after the export: the FUSE mount is gone" bash -c "! grep -q ' $MNT ' /proc/mounts"

require "import --holder --block-devices again" import_pool --holder --block-devices
HOLDER_PID="$(holder_field pid)"
DAEMON_PIDS+=("$HOLDER_PID")
check "both paths are back with dio=1" bash -c "$(declare -f device_ok loop_of); DEV='$DEV' MNT='$MNT'; device_ok pg && device_ok second"
check "mount ext4 through $DEV/pg again" mount "$DEV/pg" "$FS"
check "data intact after export and import (sha256)" sums_ok
umount "$FS"
require "export" timeout 120 "$B" export "$POOL"
check "no loop device left after that export" test "$(count_loops)" -eq 0
# `export` answers once the engine exported; its holder is gone a moment later (until then an
# import is refused as a second holder).
check "the holder is gone" wait_gone "$WAIT_TRIES" "$HOLDER_PID"

# ---- without a holder ------------------------------------------------------------------------

require "import --block-devices (no holder)" import_pool --block-devices
check "without a holder: both paths with dio=1" bash -c "$(declare -f device_ok loop_of); DEV='$DEV' MNT='$MNT'; device_ok pg && device_ok second"
require "mount ext4 through $DEV/pg" mount "$DEV/pg" "$FS"
check "data intact without a holder (sha256)" sums_ok
LOOP_PG="$(loop_of pg)"
expect_error "volume destroy of the mounted volume is refused" "volume 'pg' .* is in use as $DEV/pg" "$B" volume destroy "$POOL/pg"
check "after the refusal: pg is still there with its device" bash -c "$(declare -f device_ok loop_of); DEV='$DEV' MNT='$MNT'; device_ok pg && [ \"\$(loop_of pg)\" = '$LOOP_PG' ] && '$B' volume list '$POOL' | grep -q '^$POOL/pg '"
LOOP_SECOND="$(loop_of second)"
check "volume destroy of the unused volume" "$B" volume destroy "$POOL/second"
check "its path is gone" test ! -e "$DEV/second"
check "its loop device is detached" test ! -e "/sys/block/loop$LOOP_SECOND/loop/backing_file" -o "$(cat "/sys/block/loop$LOOP_SECOND/loop/backing_file" 2>/dev/null)" != "$MNT/second"
require "volume create third 32M" "$B" volume create "$POOL/third" 32M
check "$DEV/third appears" device_ok third
LOOP_THIRD="$(loop_of third)"

# The daemon dies with ext4 mounted on pg (third unused): its mount dies, both devices go stale.
STALE_WATCH+=("$LOOP_PG pg" "$LOOP_THIRD third")
require "SIGKILL the daemon (no holder)" kill_daemon
IMPORT_OUT="$W/import-after-crash.out"
import_pool --block-devices 2>"$IMPORT_OUT"
check "import after the crash" test $? -eq 0
cat "$IMPORT_OUT"
check "the import names the stale device still mounted (/dev/loop$LOOP_PG)" grep -q "stale /dev/loop$LOOP_PG .*still in use: unmount" "$IMPORT_OUT"
check "the import says it detached the unused stale device (/dev/loop$LOOP_THIRD)" grep -q "^fardisk: detached stale /dev/loop$LOOP_THIRD " "$IMPORT_OUT"
check "the import printed one line per stale device, nothing else" test "$(wc -l <"$IMPORT_OUT")" -eq 2
# Detached and (usually) bound again at once as the fresh device of the same volume: either way
# it no longer reads the dead image, and the stale one still mounted is the only extra device.
check "the stale unused device (/dev/loop$LOOP_THIRD) was detached" test "$(cat "/sys/block/loop$LOOP_THIRD/loop/backing_file" 2>/dev/null)" != /third
check "fresh devices for pg and third, dio=1" bash -c "$(declare -f device_ok loop_of); DEV='$DEV' MNT='$MNT'; device_ok pg && device_ok third && [ \"\$(loop_of pg)\" != '$LOOP_PG' ]"
check "the stale pg device is still bound (in use), reading the dead image" test "$(cat "/sys/block/loop$LOOP_PG/loop/backing_file" 2>/dev/null)" = /pg
check "exactly two devices over the live images" test "$(count_loops)" -eq 2
umount -l "$FS"
gone_by_itself() {
    local i
    for ((i = 0; i < WAIT_TRIES; i++)); do
        [ "$(cat "/sys/block/loop$LOOP_PG/loop/backing_file" 2>/dev/null)" = /pg ] || return 0
        sleep 0.1
    done
    return 1
}
check "once unmounted, the stale /dev/loop$LOOP_PG detaches itself" gone_by_itself
check "mount ext4 through the fresh $DEV/pg" mount "$DEV/pg" "$FS"
check "data intact after the crash without a holder (sha256)" sums_ok
umount "$FS"
require "volume resize third 48M" "$B" volume resize "$POOL/third" 48M
check "its device took the new size (blockdev --getsize64)" test "$(blockdev --getsize64 "$DEV/third")" = $((48 << 20))
require "snapshot third@s" "$B" snapshot "$POOL/third@s"
require "clone third@s as thirdclone" "$B" clone "$POOL/third@s" "$POOL/thirdclone"
check "the clone's path appears, dio=1" device_ok thirdclone
check "the snapshot gets no device" test ! -e "$DEV/third@s"
require "export" timeout 120 "$B" export "$POOL"
check "no $DEV and no loop device left" bash -c "[ ! -e '$DEV' ] && [ -z \"\$($(declare -f loops_over_mount); MNT='$MNT'; loops_over_mount)\" ]"
e2e_finish
