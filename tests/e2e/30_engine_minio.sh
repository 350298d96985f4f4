#!/usr/bin/env bash
# The pool engine against a real MinIO through toxiproxy: round trip across export/import,
# fencing of a second writer by MinIO's conditional PUTs, and an outage window in the middle of
# a write stream (the pool suspends, then resumes by itself; nothing is lost).
E2E_NAME=30_engine_minio
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

require "minio.sh start" "$SCRIPTS/minio.sh" start
on_exit '"$SCRIPTS/minio.sh" stop'
require "toxiproxy.sh start" "$SCRIPTS/toxiproxy.sh" start
on_exit '"$SCRIPTS/toxiproxy.sh" stop'
eval "$("$SCRIPTS/toxiproxy.sh" env)"
export FARDISK_TOXIPROXY="$SCRIPTS/toxiproxy.sh"
cd "$E2E_ROOT"
check "engine tests against MinIO (cargo test --test s3_minio -- --ignored)" \
    cargo test -q --workspace --test s3_minio -- --ignored --test-threads=1
e2e_finish
