#!/usr/bin/env bash
# The failures an operator meets, each with one line saying what is wrong and what to do, a
# non-zero exit, and nothing in the pool changed or lost: a device labelled for another pool, an
# unreachable store, wrong credentials and a missing bucket (real MinIO), a pool held by another
# importer, and a full disk under the store — where the pool goes SUSPENDED, `sync` says why
# instead of hanging, and everything comes back by itself once there is space.
E2E_NAME=49_clear_errors
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
umask 022
cd "$E2E_ROOT"
require "the debug build of fardisk" build_fardisk
B="$E2E_ROOT/target/debug/fardisk"
W="$(mktemp -d /tmp/fardisk-e2e49.XXXXXX)"
export FARDISK_HOME="$W/home" FARDISK_RUN_DIR="$W/run" FARDISK_CONFIG="$W/none.conf"
: > "$W/none.conf"
SOCK="$W/nbd.sock"
on_exit 'for p in tank full; do "$B" export $p >/dev/null 2>&1; fardisk_kill $p; done; umount "$W/small" 2>/dev/null; rm -rf "$W"'
truncate -s 64M "$W/log0" "$W/log1"

# --- a device that belongs to another pool ------------------------------------------------
require "create tank with a log" "$B" create tank "file://$W/tank" log "$W/log0"
expect_error "another pool's log device is refused" "is in use: it carries log device of pool 'tank'.*add -f" \
    "$B" create other "file://$W/other" log "$W/log0"
check "the refused create left no pool behind" test ! -e "$W/other/head"
check "tank still imports with its log" "$B" import tank
require "export" "$B" export tank

# --- a pool held by another importer ------------------------------------------------------
require "import tank" "$B" import tank
expect_error "a second importer (other run dir, as another host would be) is refused" "is imported by host .* export it there, or use --force" \
    env FARDISK_RUN_DIR="$W/run2" FARDISK_HOME="$W/home2" "$B" import tank "file://$W/tank" --missing-log
check "the first importer still serves" bash -c "'$B' status tank | grep -q 'state: ONLINE'"
require "export" "$B" export tank

# --- an unreachable store and bad S3 settings (real MinIO) -------------------------------
closed_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
expect_error "an unreachable S3 endpoint" "cannot reach the store: check AWS_ENDPOINT_URL" \
    env AWS_ENDPOINT_URL="http://127.0.0.1:$closed_port" AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=y "$B" create s3pool s3://fardisk/e2e49
if "$SCRIPTS/minio.sh" start >/dev/null 2>&1; then
    on_exit '"$SCRIPTS/minio.sh" stop >/dev/null 2>&1'
    eval "$("$SCRIPTS/minio.sh" env)"
    expect_error "wrong credentials" "the store refused the credentials: check AWS_ACCESS_KEY_ID" \
        env AWS_SECRET_ACCESS_KEY=not-the-secret "$B" create s3pool s3://fardisk/e2e49
    expect_error "a bucket that does not exist" "the bucket does not exist" "$B" create s3pool s3://no-such-bucket-e2e49/p
    check "MinIO with the right credentials works" "$B" create s3pool s3://fardisk/e2e49
    check "and the pool is destroyed again" "$B" destroy s3pool
    unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_ENDPOINT AWS_ENDPOINT_URL AWS_REGION
else
    fail "minio.sh start (scripts/install-deps.sh builds MinIO)"
fi

# --- a full disk under the store -----------------------------------------------------------
mkdir -p "$W/small"
require "a 3 MiB tmpfs for the store" mount -t tmpfs -o size=3M tmpfs "$W/small"
require "create full (store on it, log elsewhere)" "$B" create full "file://$W/small/store" log "$W/log1"
require "import with NBD" "$B" import full --nbd "unix:$SOCK"
require "volume create" "$B" volume create full/v 32M
head -c 8M /dev/urandom > "$W/data.bin"
require "8 MiB written and flushed: acknowledged by the log" nbdcopy --flush "$W/data.bin" "nbd+unix:///v?socket=$SOCK"
start=$SECONDS
expect_error "sync on a full store says why instead of hanging" "pool is SUSPENDED (.*the store's disk is full" "$B" sync full
check "within 30 s ($((SECONDS - start)) s)" test $((SECONDS - start)) -le 30
check "status says SUSPENDED and why" bash -c "'$B' status full | grep -q \"state: SUSPENDED.*disk is full\""
check "reads still return the acknowledged data" bash -c "nbdcopy 'nbd+unix:///v?socket=$SOCK' - | head -c 8M | cmp - '$W/data.bin'"
require "free space: grow the tmpfs to 64 MiB" mount -o remount,size=64M "$W/small"
for _ in $(seq 120); do "$B" status full | grep -q 'state: ONLINE' && break; sleep 0.5; done
check "the pool comes back ONLINE by itself" bash -c "'$B' status full | grep -q 'state: ONLINE'"
check "sync works again" "$B" sync full
require "export" "$B" export full
require "import again (from the store alone: the log is clean)" "$B" import full --nbd "unix:$SOCK"
check "every acknowledged byte is there" bash -c "nbdcopy 'nbd+unix:///v?socket=$SOCK' - | head -c 8M | cmp - '$W/data.bin'"
require "export" "$B" export full
e2e_finish
