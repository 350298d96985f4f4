#!/usr/bin/env bash
# `fardisk scrub` and `fardisk history` as a user runs them, on a file:// store damaged on
# purpose: a byte flipped in a segment file while the ARC still holds the block is found and
# repaired (exit 0, status says so); the same damage after a fresh import (nothing cached) is
# found, listed under "errors:" with its volume offset, `scrub -w` exits 3, and reading that
# block fails instead of returning wrong bytes. Pause, resume and stop; their errors; the
# history lists create, import, set, scrub and export.
E2E_NAME=47_scrub_history
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
umask 022
cd "$E2E_ROOT"
require "the debug build of fardisk" build_fardisk
B="$E2E_ROOT/target/debug/fardisk"
W="$(mktemp -d /tmp/fardisk-e2e47.XXXXXX)"
export FARDISK_HOME="$W/home" FARDISK_RUN_DIR="$W/run"
SOCK="$W/nbd.sock"
URI="nbd+unix:///v?socket=$SOCK"
on_exit '"$B" export tank >/dev/null 2>&1; fardisk_kill tank; rm -rf "$W"'
scrub_json() { "$B" status tank --json | python3 -c "import json,sys; print(json.load(sys.stdin)['pools'][0]['scrub']['$1'])"; }
export -f scrub_json; export B
# flip_in_largest_segment OFFSET: flips one byte of the biggest segment file (the data).
flip_in_largest_segment() {
    local seg
    seg="$(ls -S "$W/store/segments/" | head -n 1)"
    python3 - "$W/store/segments/$seg" "$1" <<'PY'
import sys
path, at = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x40]))
PY
}

require "create" "$B" create tank "file://$W/store"
require "import with NBD" "$B" import tank --nbd "unix:$SOCK"
require "volume create 64M" "$B" volume create tank/v 64M
head -c 8M /dev/urandom > "$W/data.bin"
require "write 8 MiB of random data" nbdcopy "$W/data.bin" "$URI"
require "sync" "$B" sync tank
check "status before any scrub says none requested" bash -c "'$B' status tank | grep -q 'scan: none requested'"
out="$("$B" scrub tank -w)"; rc=$?
check "a clean pool scrubs clean (exit $rc)" bash -c "[ $rc -eq 0 ] && grep -q 'with 0 errors' <<<\"\$1\"" _ "$out"
check "examined every written block" bash -c "[ \"\$(scrub_json examined_blocks)\" -ge 2048 ]"

# Damage while the ARC holds the block (the txg sync cached what it wrote): repaired.
require "flip a byte in the data segment" flip_in_largest_segment $((4 << 20))
out="$("$B" scrub tank -w)"; rc=$?
check "scrub repairs from the ARC and exits 0 ($rc): $out" bash -c "[ $rc -eq 0 ] && [ \"\$(scrub_json repaired_blocks)\" = 1 ] && [ \"\$(scrub_json checksum_errors)\" = 1 ]"
check "status lists the repaired block" bash -c "'$B' status tank | grep -q 'block at .* repaired'"
require "the repair reaches the store" "$B" sync tank
out="$("$B" scrub tank -w)"; rc=$?
check "the next scrub is clean ($rc)" bash -c "[ $rc -eq 0 ] && [ \"\$(scrub_json checksum_errors)\" = 0 ]"
require "export" "$B" export tank
rm -f "$W/back.bin"
require "import again (empty ARC)" "$B" import tank --nbd "unix:$SOCK"
require "read the volume back" nbdcopy "$URI" "$W/back.bin"
check "the repaired volume reads back exactly" cmp -n $((8 << 20)) "$W/data.bin" "$W/back.bin"

# Damage with nothing cached: found, not repaired, reads fail.
require "export" "$B" export tank
require "flip a byte in the data segment again" flip_in_largest_segment $((2 << 20))
require "import (nothing cached)" "$B" import tank --nbd "unix:$SOCK"
out="$("$B" scrub tank -w 2>&1)"; rc=$?
check "scrub -w exits 3 on an unrepaired error ($rc)" test "$rc" -eq 3
check "status shows the error with its volume offset" bash -c "'$B' status tank | grep -A2 '^errors:' | grep -q 'v: block at'"
check "status shows the scrub line" bash -c "'$B' status tank | grep -q 'scan: scrub repaired 0B .* with 1 errors'"
check "reading the damaged volume fails rather than returning wrong bytes" bash -c "! nbdcopy '$URI' '$W/back2.bin' 2>/dev/null"

# Pause, resume, stop.
expect_error "pause with no scrub running" "no scrub is running" "$B" scrub tank --pause
expect_error "stop with no scrub running" "no scrub is in progress" "$B" scrub tank --stop
expect_error "a bad scrub_rate_max" "whole number" "$B" set scrub_rate_max=fast tank
require "throttle scrubs to 4 KiB/s" "$B" set scrub_rate_max=4096 tank
require "start a slow scrub" "$B" scrub tank
expect_error "a second scrub while one runs" "already in progress" "$B" scrub tank
require "pause it" "$B" scrub tank --pause
check "status says paused" bash -c "'$B' status tank | grep -q 'scrub paused since'"
check "wait reports a paused scrub as running" bash -c "timeout 2 '$B' wait tank; [ \$? -eq 124 ]"
require "resume it" "$B" scrub tank
check "status says in progress" bash -c "'$B' status tank | grep -q 'scrub in progress since'"
require "stop it" "$B" scrub tank --stop
sleep 1.5
check "status says canceled" bash -c "'$B' status tank | grep -q 'scrub canceled'"
check "wait returns when nothing runs" bash -c "timeout 20 '$B' wait tank | grep -q 'no background work'"

# History: in the store, so it survives export/import.
require "export" "$B" export tank
require "import" "$B" import tank --nbd "unix:$SOCK"
hist="$("$B" history tank)"
printf '%s\n' "$hist" | sed 's/^/    /'
check "history has the create" grep -q "fardisk create tank file://" <<<"$hist"
check "history has the imports" bash -c "[ \"\$(grep -c 'fardisk import tank' <<<\"\$1\")\" -ge 3 ]" _ "$hist"
check "history has the set and the volume create" bash -c "grep -q 'fardisk set scrub_rate_max=4096 tank' <<<\"\$1\" && grep -q 'fardisk volume create tank/v 64M' <<<\"\$1\"" _ "$hist"
check "history has scrub results" grep -q "scrub finished: examined .* 1 errors, 1 repaired" <<<"$hist"
check "history has exports" grep -q "export (fardisk export)" <<<"$hist"
check "failed commands are not in the history" bash -c "! grep -q 'scrub_rate_max=fast' <<<\"\$1\"" _ "$hist"
check "history --json is an event list" bash -c "'$B' history tank -n 3 --json | python3 -c 'import json,sys; e=json.load(sys.stdin)[\"events\"]; assert len(e)==3 and all(\"time_ms\" in x and \"event\" in x for x in e)'"
e2e_finish
