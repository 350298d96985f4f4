#!/usr/bin/env bash
# Client-side encryption as a user runs it: `create --key-file` writes a new key (0600), the
# store then holds no byte of the data written (a marker found in a plain pool's store is absent
# from the encrypted one's), the key never appears in the store, the registry, status or the
# daemon's log; importing without the key or with another key is refused with one line; with
# the key every byte reads back.
E2E_NAME=44_encryption
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
umask 022
cd "$E2E_ROOT"
require "the debug build of fardisk" build_fardisk
B="$E2E_ROOT/target/debug/fardisk"
W="$(mktemp -d /tmp/fardisk-e2e44.XXXXXX)"
export FARDISK_HOME="$W/home" FARDISK_RUN_DIR="$W/run"
SOCK="$W/nbd.sock"
on_exit '"$B" export secret >/dev/null 2>&1; "$B" export plain >/dev/null 2>&1; rm -rf "$W"'
# 4 MiB of random bytes with a text marker every 64 KiB (compression off: the marker would be
# found verbatim in a plain pool's segments).
MARK="fardisk-e2e44-marker-$RANDOM$RANDOM"
python3 - "$W/data" "$MARK" <<'PY'
import os, sys
path, mark = sys.argv[1], sys.argv[2].encode()
with open(path, "wb") as f:
    for _ in range(64):
        f.write(mark + os.urandom(65536 - len(mark)))
PY
# write_volume POOL: the data file onto volume v at offset 0 through NBD, then a flush.
write_volume() { nbdcopy --flush "$W/data" "nbd+unix:///v?socket=$SOCK"; }
read_matches() { rm -f "$W/back"; nbdcopy "nbd+unix:///v?socket=$SOCK" "$W/back" && cmp -n 4194304 "$W/back" "$W/data"; }

# The control: a plain pool's store does show the marker.
require "create a plain pool" "$B" create plain "file://$W/plainstore" -o compression=off
require "import it" "$B" import plain --nbd "unix:$SOCK"
require "volume create" "$B" volume create plain/v 8M
require "write the data" write_volume
require "export" "$B" export plain
check "the plain store holds the marker (the check below can fail)" grep -rqa "$MARK" "$W/plainstore"

out="$("$B" create secret "file://$W/store" -o compression=off --key-file "$W/secret.key" 2>&1)"; rc=$?
require "create an encrypted pool with a new key file" test "$rc" -eq 0
check "create says it wrote a new key" grep -q "wrote a new encryption key" <<<"$out"
check "the key file is owner-only" test "$(stat -c %a "$W/secret.key")" = 600
KEYHEX="$(tr -d '\n' <"$W/secret.key")"
require "import it" "$B" import secret --nbd "unix:$SOCK"
require "volume create" "$B" volume create secret/v 8M
require "write the data" write_volume
check "reads back through the daemon" read_matches
check "status names the key by fingerprint only" bash -c "'$B' status secret | grep -q encrypted && ! '$B' status secret -v | grep -q '$KEYHEX'"
require "export" "$B" export secret
check "the encrypted store holds no marker" bash -c "! grep -rqa '$MARK' '$W/store'"
check "the key is in neither the store, the registry nor the daemon log" bash -c "! grep -rqa '$KEYHEX' '$W/store' '$W/home'"

# A new host (empty registry) with no key, then with another key.
expect_error "import without the key is refused" "is encrypted" env FARDISK_HOME="$W/home2" "$B" import secret "file://$W/store" --nbd "unix:$SOCK"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$W/other.key"
expect_error "import with another key is refused" "another key" env FARDISK_HOME="$W/home2" "$B" import secret "file://$W/store" --key-file "$W/other.key" --nbd "unix:$SOCK"
expect_error "a malformed key file is refused" "64 hex digits" "$B" import secret --key-file "$W/data" --nbd "unix:$SOCK"
require "import on the new host with the key" env FARDISK_HOME="$W/home2" "$B" import secret "file://$W/store" --key-file "$W/secret.key" --nbd "unix:$SOCK"
check "every byte reads back after export and import" read_matches
require "export" env FARDISK_HOME="$W/home2" "$B" export secret
e2e_finish
