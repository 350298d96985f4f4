#!/usr/bin/env bash
# Log and cache devices changed while the pool serves (`fardisk add/remove/replace`), as
# `zpool add/remove/replace` do: a log added to a pool that had none takes sync writes at once
# and is replayed after a SIGKILL; a mirror leg lost, then replaced, is resilvered with the
# records only the surviving leg held (proved by importing from the new leg alone); removing the
# last log vdev drains it first; bad input gets one line and a non-zero exit.
E2E_NAME=42_vdev_admin
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
umask 022
cd "$E2E_ROOT"
require "the debug build of fardisk" build_fardisk
B="$E2E_ROOT/target/debug/fardisk"
W="$(mktemp -d /tmp/fardisk-e2e42.XXXXXX)"
export FARDISK_HOME="$W/home" FARDISK_RUN_DIR="$W/run"
SOCK="$W/nbd.sock"
URI="nbd+unix:///v?socket=$SOCK"
kill_daemon() { fardisk_kill tank; }
on_exit '"$B" export tank >/dev/null 2>&1; kill_daemon; rm -rf "$W"'
# pattern OFFSET_MIB BYTE: qemu-io writes 1 MiB of BYTE at OFFSET and flushes (a sync request).
write_synced() { qemu-io -f raw -c "write -P $2 $(($1))M 1M" -c flush "$URI" >/dev/null; }
read_is() { qemu-io -f raw -c "read -P $2 $(($1))M 1M" "$URI" | grep -q "read 1048576/1048576"; }
log_legs() { "$B" status tank --json | python3 -c '
import json, sys
p = json.load(sys.stdin)["pools"][0]
log = p.get("log") or {}
print(" ".join(l["path"] + "=" + l["state"] for v in log.get("vdevs", []) for l in v["legs"]))'; }

export B URI
export -f log_legs read_is

# A long txg timeout keeps synced writes in the log only (not yet in a published txg), so the
# checks below can tell a replay from the log apart from data that reached the store.
require "create a pool without a log" "$B" create tank "file://$W/store" -o txg_timeout=300 --simulate latency=10
require "import with NBD" "$B" import tank --nbd "unix:$SOCK"
require "volume create 64M" "$B" volume create tank/v 64M
expect_error "remove with no such device" "not a log or cache device" "$B" remove tank "$W/nothing"
expect_error "add a relative path" "absolute path" "$B" add tank log relative/log0
expect_error "add to a pool that is not imported" "not imported" "$B" add nosuch log "$W/x"
expect_error "replace a device the pool does not have" "not a log device" "$B" replace tank "$W/nothing" "$W/y"

require "add a log mirror to the running pool" "$B" add tank log mirror "$W/log0" "$W/log1"
check "status lists both legs ONLINE" bash -c "[ \"\$(log_legs)\" = '$W/log0=ONLINE $W/log1=ONLINE' ]"
expect_error "adding a device twice" "already a log device" "$B" add tank log "$W/log0"
check "status -v shows the mirror" bash -c "'$B' status tank -v | grep -q mirror"
require "sync write 1 (covers writes from before the log existed)" write_synced 0 0x11
require "sync write 2 (through the new log)" write_synced 1 0x22
require "SIGKILL the daemon" kill_daemon
require "import after SIGKILL" "$B" import tank --nbd "unix:$SOCK"
check "the new log was replayed" grep -q "intent log replayed" "$FARDISK_HOME/log/tank.log"
check "sync write 1 is there" read_is 0 0x11
check "sync write 2 is there" read_is 1 0x22

# Lose a leg: the pool goes DEGRADED and keeps taking sync writes on the other one.
rm -f "$W/log1"
require "sync write 3 with one leg gone" write_synced 2 0x33
check "status says DEGRADED" bash -c "'$B' status tank | grep -q DEGRADED"
require "replace the lost leg with a new device" "$B" replace tank "$W/log1" "$W/log2"
check "both legs ONLINE again" bash -c "[ \"\$(log_legs)\" = '$W/log0=ONLINE $W/log2=ONLINE' ]"
check "pool ONLINE again" bash -c "'$B' status tank | grep -q 'state: ONLINE'"
require "SIGKILL the daemon" kill_daemon
# Only the new leg is left: write 3 reached it by the resilver alone.
mv "$W/log0" "$W/log0.away"
require "import from the resilvered leg alone" "$B" import tank --nbd "unix:$SOCK"
check "sync write 3 came back from the resilvered leg" read_is 2 0x33
check "sync writes 1 and 2 are there" bash -c "read_is 0 0x11 && read_is 1 0x22"
require "bring the old leg back and resilver it in place" bash -c "mv '$W/log0.away' '$W/log0' && '$B' replace tank '$W/log0'"
check "both legs ONLINE" bash -c "[ \"\$(log_legs)\" = '$W/log0=ONLINE $W/log2=ONLINE' ]"

# Removing the last log vdev drains it into the store first.
require "sync write 4" write_synced 3 0x44
require "remove the log mirror" "$B" remove tank "$W/log2"
check "status shows no log" bash -c "[ -z \"\$(log_legs)\" ]"
require "sync write 5 without a log (waits for the txg)" write_synced 4 0x55
require "SIGKILL the daemon" kill_daemon
mv "$W/log0" "$W/log0.gone"; mv "$W/log2" "$W/log2.gone"
require "import needs no log devices any more" "$B" import tank --nbd "unix:$SOCK"
check "every synced write is there" bash -c "read_is 0 0x11 && read_is 1 0x22 && read_is 2 0x33 && read_is 3 0x44 && read_is 4 0x55"

require "add a single log device again" "$B" add tank log "$W/log3"
require "sync write 6" write_synced 5 0x66
require "add a cache device" "$B" add tank cache "$W/cache0"
check "arcstat shows the cache device" bash -c "'$B' arcstat tank --json | grep -q cache0"
require "remove the cache device" "$B" remove tank "$W/cache0"
check "arcstat no longer lists it" bash -c "! '$B' arcstat tank --json | grep -q cache0"
require "export" "$B" export tank
require "import after export" "$B" import tank --nbd "unix:$SOCK"
check "sync write 6 is there after export/import" read_is 5 0x66
check "the log device is still part of the pool" bash -c "[ \"\$(log_legs)\" = '$W/log3=ONLINE' ]"
require "export" "$B" export tank
e2e_finish
