#!/usr/bin/env bash
# The pool engine against a real store server through toxiproxy (MinIO by default; FARDISK_E2E_STORE
# =versity|azurite picks another, tests/e2e/lib/stores.sh): round trip across export/import,
# fencing of a second writer by the server's conditional PUTs, an outage window in the middle of a
# write stream (the pool suspends, then resumes by itself; nothing is lost), and the capability
# check with races of create-only PUTs that must have exactly one winner.
E2E_NAME=30_engine_minio
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
. "$(dirname "${BASH_SOURCE[0]}")/lib/stores.sh"
E2E_NAME="30_engine_$E2E_STORE"

require "$E2E_STORE start" store_start
require "toxiproxy.sh start" "$SCRIPTS/toxiproxy.sh" start
on_exit '"$SCRIPTS/toxiproxy.sh" stop'
eval "$("$SCRIPTS/toxiproxy.sh" env)"
export FARDISK_TOXIPROXY="$SCRIPTS/toxiproxy.sh"
FARDISK_STORE_URL_BASE="$(store_url "")"
export FARDISK_STORE_URL_BASE="${FARDISK_STORE_URL_BASE%/}"
cd "$E2E_ROOT"
# --workspace: the features `cargo test --workspace` built with (scripts/test.sh), so no rebuild.
check "engine tests against $E2E_STORE (cargo test --test engine store_server:: -- --ignored)" \
    cargo test -q --workspace --test engine store_server:: -- --ignored --test-threads=1
e2e_finish
