#!/usr/bin/env bash
# The store capability check against a real S3 server that ignores If-None-Match (an s3proxy
# release before conditional writes; its create-only PUTs overwrite): `fardisk create` is refused
# with one line naming what is missing and leaves nothing in the bucket; a pool copied there from
# a directory is refused at import, unclaimed, its objects unchanged. The control: the same
# commands on MinIO, Versity and Azurite pass the check.
E2E_NAME=31_store_capability
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$E2E_ROOT"
require "the debug build of fardisk" build_fardisk
B="$E2E_ROOT/target/debug/fardisk"
W="$FARDISK_RUN_DIR"
export FARDISK_HOME="$W/home"

require "s3proxy.sh start" "$SCRIPTS/s3proxy.sh" start
on_exit '"$SCRIPTS/s3proxy.sh" stop'
listing() { ( eval "$("$SCRIPTS/s3proxy.sh" env)"; python3 "$SCRIPTS/s3.py" ls "$FARDISK_BUCKET" "$1" ); }

# The server really does overwrite on a create-only PUT (what the check must catch).
overwrites() {
    eval "$("$SCRIPTS/s3proxy.sh" env)"
    echo first >"$W/one" && echo second >"$W/two"
    local a b
    a="$(python3 "$SCRIPTS/s3.py" put-create-only "$FARDISK_BUCKET" control/k "$W/one")"
    b="$(python3 "$SCRIPTS/s3.py" put-create-only "$FARDISK_BUCKET" control/k "$W/two")"
    echo "$E2E_NAME: two create-only PUTs of one key answered $a and $b; it now holds '$(python3 "$SCRIPTS/s3.py" get "$FARDISK_BUCKET" control/k)'"
    [ "$a" = 200 ] && [ "$b" = 200 ] && [ "$(python3 "$SCRIPTS/s3.py" get "$FARDISK_BUCKET" control/k)" = second ]
}
check "s3proxy ignores If-None-Match: the second create-only PUT of a key overwrites it" overwrites

(
    eval "$("$SCRIPTS/s3proxy.sh" env)"
    expect_error "create on the server that ignores If-None-Match is refused, naming it" \
        "cannot hold a fardisk pool: create-only PUTs (If-None-Match: \*) overwrite an existing object.*no pool was created" \
        "$B" create tank "s3://$FARDISK_BUCKET/tank"
    [ "$e2e_failed" -eq 0 ]
) && pass "create refused" || fail "create refused"
check "nothing of the refused create is in the bucket" test -z "$(listing tank/)"
check "no pool 'tank' was registered" bash -c "! '$B' status tank >/dev/null 2>&1"

# A pool made in a directory, copied object by object into the bucket: import must not claim it.
require "create pool 'copied' in a directory" "$B" create copied "file://$W/dirstore"
copy_up() {
    local f
    ( eval "$("$SCRIPTS/s3proxy.sh" env)"
      cd "$W/dirstore" && find . -type f | sed 's#^\./##' | while read -r f; do
          python3 "$SCRIPTS/s3.py" put "$FARDISK_BUCKET" "copied/$f" "$f" >/dev/null || exit 1
      done )
}
require "copy its objects into the s3proxy bucket" copy_up
before="$(listing copied/)"
info_keys="$(wc -l <<<"$before")"
echo "$E2E_NAME: $info_keys objects copied"
(
    eval "$("$SCRIPTS/s3proxy.sh" env)"
    rm -rf "$FARDISK_HOME"   # a host that never saw the pool
    expect_error "import from the server that ignores If-None-Match is refused, naming it" \
        "cannot hold a fardisk pool: create-only PUTs (If-None-Match: \*) overwrite an existing object.*the pool was not claimed" \
        "$B" import copied "s3://$FARDISK_BUCKET/copied"
    [ "$e2e_failed" -eq 0 ]
) && pass "import refused" || fail "import refused"
check "the pool's objects are exactly as before the refused import" test "$(listing copied/)" = "$before"

# Control: the servers the tests run on pass the same check (create, then destroy).
for server in minio versity azurite; do
    (
        "$SCRIPTS/$server.sh" start >/dev/null || exit 1
        trap '"$SCRIPTS/$server.sh" stop >/dev/null' EXIT
        eval "$("$SCRIPTS/$server.sh" env)"
        scheme=s3; [ "$server" = azurite ] && scheme=az
        FARDISK_HOME="$W/home-$server" "$B" create "ok$server" "$scheme://$FARDISK_BUCKET/ok" >/dev/null \
            && FARDISK_HOME="$W/home-$server" "$B" destroy "ok$server" -f >/dev/null
    ) && pass "$server passes the capability check (create, destroy)" || fail "$server passes the capability check"
done
e2e_finish
