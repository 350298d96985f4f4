#!/usr/bin/env bash
# Point-in-time import (issue: snapshots, clones and point-in-time recovery): a pool created with
# root_retention_s keeps every root of that window and what they reference. While the writer keeps
# serving, `import --txg N --as NAME` and `import --at TIME --as NAME` open the pool read-only as it
# was then, beside the writer: the volume reads the old bytes over FUSE and NBD, writes are refused,
# status says READ-ONLY, nothing is written to the store; and the errors a user meets are one line.
E2E_NAME=53_point_in_time
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$E2E_ROOT" || exit 1

W="$FARDISK_RUN_DIR"
export FARDISK_HOME="$W/home"
STORE="file://$W/store"

require "the debug build of fardisk" build_fardisk
B="$E2E_ROOT/target/debug/fardisk"
on_exit 'timeout 60 "$B" export old >/dev/null 2>&1; timeout 60 "$B" export old2 >/dev/null 2>&1; timeout 120 "$B" export pit >/dev/null 2>&1'

require "create with root_retention_s=3600" "$B" create pit "$STORE" -o root_retention_s=3600 -o roots_kept=2
require "import --mount" "$B" import pit "$STORE" --mount "$W/mnt"
require "volume create 64M" "$B" volume create pit/v 64M
head -c $((8 << 20)) /dev/urandom >"$W/a.bin"
head -c $((8 << 20)) /dev/urandom >"$W/b.bin"
require "write A" dd if="$W/a.bin" of="$W/mnt/v" bs=1M conv=notrunc,fsync status=none
txg_a="$("$B" sync pit | sed -n 's/.* at txg \([0-9]*\)$/\1/p')"
# Whole seconds: wait past the second A's root was published in, and past the one we name.
sleep 1.2
time_a="$(date -u '+%Y-%m-%d %H:%M:%S')"
check "txg of A known ($txg_a)" test -n "$txg_a"
sleep 1.2
require "overwrite with B" dd if="$W/b.bin" of="$W/mnt/v" bs=1M conv=notrunc,fsync status=none
for i in 1 2 3 4 5 6; do
    dd if=/dev/urandom of="$W/mnt/v" bs=4k count=1 seek=$((4096 + i)) conv=notrunc,fsync status=none
    "$B" sync pit >/dev/null
done
roots="$(ls "$W/store/roots" | wc -l)"
check "roots beyond roots_kept=2 are retained ($roots in the store)" test "$roots" -gt 4

require "import --txg A --as old, beside the writer" "$B" import pit "$STORE" --txg "$txg_a" --as old --mount "$W/mnt-old" --nbd "unix:$W/old.nbd"
check "the old volume reads A over FUSE" cmp -n $((8 << 20)) "$W/a.bin" "$W/mnt-old/v"
check "the old volume reads A over NBD" bash -c 'nbdcopy "nbd+unix:///v?socket=$1" - | head -c $((8 << 20)) | cmp - "$2"' _ "$W/old.nbd" "$W/a.bin"
check "the writer still reads B" cmp -n $((8 << 20)) "$W/b.bin" "$W/mnt/v"
check "a write to the read-only import is refused" bash -c '! dd if=/dev/zero of="$1" bs=4k count=1 conv=notrunc status=none 2>/dev/null' _ "$W/mnt-old/v"
st="$("$B" status old)"
check "status says READ-ONLY at txg $txg_a" grep -q "imported READ-ONLY" <<<"$st"
check "status --json matches its schema" bash -c '"$1" status old --json | python3 "$2" "$3"' _ "$B" "$E2E_ROOT/tests/e2e/lib/json_schema.py" "$E2E_ROOT/docs/json/status.schema.json"
check "status --json: read_only_txg = $txg_a" bash -c '[ "$("$1" status old --json | python3 -c "import json,sys; print(json.load(sys.stdin)[\"pools\"][0][\"read_only_txg\"])")" = "$2" ]' _ "$B" "$txg_a"
expect_error "volume create on the read-only import" "read-only" "$B" volume create old/w 1M
expect_error "snapshot on the read-only import" "read-only" "$B" snapshot old/v@x
roots_before="$(ls "$W/store/roots" | md5sum)"
require "export the read-only import" "$B" export old
check "it wrote no root" test "$(ls "$W/store/roots" | md5sum)" = "$roots_before"

require "import --at \"$time_a\" --as old2" "$B" import pit "$STORE" --at "$time_a" --as old2 --mount "$W/mnt-old2"
check "--at opens the newest root at or before that time: A" cmp -n $((8 << 20)) "$W/a.bin" "$W/mnt-old2/v"
require "export old2" "$B" export old2
check "the writer is untouched: still ONLINE" bash -c '"$1" status pit | grep -q "state: ONLINE"' _ "$B"

expect_error "a txg that is not retained" "not retained" "$B" import pit "$STORE" --txg 999999 --as old3
expect_error "--as without read-only" "read-only import" "$B" import pit "$STORE" --as old3
expect_error "a bad time" "is not a time" "$B" import pit "$STORE" --at yesterday --as old3
expect_error "read-only under the writer's own name" "--as NAME" "$B" import pit "$STORE" --read-only
e2e_finish
