#!/usr/bin/env bash
# Credentials are never printed, logged or written into the store. MinIO on loopback runs with a
# distinctive access key and secret key; fardisk creates a plain and an encrypted pool there,
# with daemons logging at trace level, and runs everything that prints configuration or state
# (status, status -v/--json, list, get all, history, iostat, arcstat, snapshot list, the metrics
# endpoint, --help of the commands that take credentials) and the errors an operator meets (wrong
# secret, unknown access key, an unreachable store, a missing bucket, credentials in the URL, a
# world-readable or malformed config file, a wrong or missing encryption key). Then neither the
# secret key nor the encryption key (hex, upper-case hex, base64, base64url, raw bytes) may appear
# in any output captured, the daemons' logs, the metrics, any object of the bucket (MinIO's files
# on disk, and every object listed and fetched through the S3 API), or any file fardisk keeps
# locally (registry, state, run dir, log and cache devices). The access key ID is not a secret
# (it travels in every request's Authorization header); where it shows up is reported.
E2E_NAME=57_credentials_never_leak
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
umask 022
cd "$E2E_ROOT"
require "the debug build of fardisk" build_fardisk
B="$E2E_ROOT/target/debug/fardisk"
W="$(mktemp -d /tmp/fardisk-e2e57.XXXXXX)"
mkdir -p "$W/out" "$W/dl"
export FARDISK_HOME="$W/home" FARDISK_RUN_DIR="$W/run" FARDISK_CONFIG="$W/none.conf"
: >"$W/none.conf"
# Daemons log everything: FARDISK_LOG is fardisk's filter (RUST_LOG set too, in case a library
# reads it).
export FARDISK_LOG=trace RUST_LOG=trace
SOCK="$W/nbd.sock"
rand_hex() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }
ACCESS_KEY="E2E57AK$(rand_hex 6 | tr a-f A-F)"
SECRET_KEY="e2e57-Secret-$(rand_hex 16)"
WRONG_SECRET="e2e57-Wrong-$(rand_hex 16)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT="$(free_port)"
on_exit 'for p in plain enc; do "$B" export $p >/dev/null 2>&1; fardisk_kill $p; done; FARDISK_RUN_DIR="$W/run" "$SCRIPTS/minio.sh" stop >/dev/null 2>&1; rm -rf "$W"'
truncate -s 64M "$W/log0" "$W/cache0" "$W/log1"

# exported POOL: `export` answers before the daemon has let go of its control socket; wait (10 s
# at most) until it has, so the next import does not find the pool still imported.
exported() {
    for _ in $(seq 100); do [ -S "$FARDISK_RUN_DIR/$1.sock" ] || return 0; sleep 0.1; done
    return 1
}
# run NAME CMD...: runs CMD with stdout and stderr captured in out/NAME (scanned at the end);
# returns CMD's status.
n=0
run() {
    local name="$1"; shift
    n=$((n + 1))
    "$@" >"$W/out/$(printf %03d $n)-$name.txt" 2>&1
}
# must NAME CMD...: run, and fail the test (without stopping it) unless CMD succeeds.
must() { run "$@" || fail "$1 (exit $?): $(tail -n 1 "$W/out/$(printf %03d $n)-$1.txt" | cut -c1-300)"; }
# The same, for a command that must fail with its last line (the error; the lines before it are
# the CLI's own trace logging) matching PATTERN.
run_fails() {
    local name="$1" pattern="$2"; shift 2
    run "$name" "$@"
    local rc=$? f="$W/out/$(printf %03d $n)-$name.txt"
    if [ "$rc" -ne 0 ] && tail -n 1 "$f" | grep -q -- "$pattern"; then
        pass "$name fails clearly: $(tail -n 1 "$f" | cut -c1-300)"
    else
        fail "$name (exit $rc): $(tail -n 1 "$f" | cut -c1-300)"
    fi
}

# --- MinIO with distinctive credentials ---------------------------------------------------------
export FARDISK_MINIO_USER="$ACCESS_KEY" FARDISK_MINIO_PASSWORD="$SECRET_KEY"
require "minio.sh start (loopback, credentials of this run)" "$SCRIPTS/minio.sh" start
eval "$("$SCRIPTS/minio.sh" env)"
MINIO_DATA="$FARDISK_RUN_DIR/minio/data"
BUCKET="$AWS_BUCKET"
ENDPOINT="$AWS_ENDPOINT_URL"

# --- help and errors before any pool ------------------------------------------------------------
for c in "" create import destroy export status get history iostat arcstat; do
    must "help-${c:-main}" "$B" $c --help
done
must "version" "$B" --version
run_fails "wrong-secret" "refused the credentials" env AWS_SECRET_ACCESS_KEY="$WRONG_SECRET" "$B" create plain "s3://$BUCKET/plain"
run_fails "unknown-access-key" "refused the credentials" env AWS_ACCESS_KEY_ID="E2E57NOSUCHKEY" "$B" create plain "s3://$BUCKET/plain"
run_fails "unreachable-store" "cannot reach the store" env AWS_ENDPOINT_URL="http://127.0.0.1:$(free_port)" "$B" create plain "s3://$BUCKET/plain"
run_fails "missing-bucket" "bucket does not exist" "$B" create plain "s3://no-such-bucket-e2e57/plain"
run_fails "credentials-in-the-url" "credentials do not belong in the URL" "$B" create plain "s3://$ACCESS_KEY:$SECRET_KEY@$BUCKET/plain"
printf 'aws_access_key_id = %s\naws_secret_access_key = %s\n' "$ACCESS_KEY" "$SECRET_KEY" >"$W/open.conf"
chmod 644 "$W/open.conf"
run_fails "world-readable-config" "chmod 600" env FARDISK_CONFIG="$W/open.conf" "$B" list
printf 'aws_access_key_id = %s\naws_secret_access_key: %s\n' "$ACCESS_KEY" "$SECRET_KEY" >"$W/colon.conf"
chmod 600 "$W/colon.conf"
run_fails "malformed-config-line" "line 2: expected 'key = value'" env FARDISK_CONFIG="$W/colon.conf" "$B" list
printf '%s\n' "$SECRET_KEY" >"$W/pasted.conf"
chmod 600 "$W/pasted.conf"
run_fails "a-secret-pasted-alone-in-the-config" "line 1" env FARDISK_CONFIG="$W/pasted.conf" "$B" list

# --- a plain pool: the daemon gets its credentials from the environment -----------------------
require "create plain (S3, with a log device)" run create-plain "$B" create plain "s3://$BUCKET/plain" log "$W/log0" -o compression=off
require "import plain with NBD and metrics (daemon logging at trace)" run import-plain "$B" import plain --nbd "unix:$SOCK" --metrics "127.0.0.1:$PORT"
require "volume create" run volume-plain "$B" volume create plain/v 16M
head -c 4M /dev/urandom >"$W/data"
require "write 4 MiB through NBD and flush" run nbdcopy-plain nbdcopy --flush "$W/data" "nbd+unix:///v?socket=$SOCK"
must snapshot-plain "$B" snapshot plain/v@s1
must set-plain "$B" set txg_timeout=3 plain
must sync-plain "$B" sync plain
# exercise POOL: every command that prints the pool's configuration or state.
exercise() {
    local p="$1"
    must "status-$p" "$B" status "$p"
    must "status-v-$p" "$B" status "$p" -v
    must "status-json-$p" "$B" status "$p" --json
    must "status-all" "$B" status -v
    must "list" "$B" list
    must "list-json" "$B" list --json
    must "get-all-$p" "$B" get all "$p"
    must "get-all-json-$p" "$B" get all "$p" --json
    must "history-$p" "$B" history "$p"
    must "history-json-$p" "$B" history "$p" --json
    must "iostat-$p" "$B" iostat -v "$p" 1 2
    must "iostat-json-$p" "$B" iostat "$p" 1 1 --json
    must "arcstat-$p" "$B" arcstat "$p"
    must "arcstat-json-$p" "$B" arcstat "$p" --json
    must "snapshot-list-$p" "$B" snapshot list "$p" --json
    must "volume-list-$p" "$B" volume list "$p"
    must "metrics-$p" curl -sf "http://127.0.0.1:$PORT/metrics"
}
exercise plain
check "status -v names the store by its URL" grep -q "s3://$BUCKET/plain" "$W/out/"*-status-v-plain.txt
check "the metrics endpoint answered" grep -q '^fardisk_pool_state' "$W/out/"*-metrics-plain.txt
run_fails "second-import-is-refused" "already imported" "$B" import plain --nbd "unix:$W/other.sock"
require "export plain" run export-plain "$B" export plain
check "the plain daemon let go of its socket" exported plain
must history-exported "$B" history plain
must status-exported "$B" status plain -v
run_fails "import-with-the-wrong-secret" "refused the credentials" env AWS_SECRET_ACCESS_KEY="$WRONG_SECRET" "$B" import plain --nbd "unix:$SOCK"
run_fails "import-from-an-unreachable-store" "cannot reach the store" env AWS_ENDPOINT_URL="http://127.0.0.1:$(free_port)" "$B" import plain --nbd "unix:$SOCK"

# --- the same daemon with its credentials from an owner-only config file ---------------------
printf 'aws_access_key_id = %s\naws_secret_access_key = %s\naws_endpoint_url = %s\naws_region = us-east-1\nmetrics = 127.0.0.1:%s\n' \
    "$ACCESS_KEY" "$SECRET_KEY" "$ENDPOINT" "$PORT" >"$W/fardisk.conf"
chmod 600 "$W/fardisk.conf"
require "import plain with credentials from the config file only" \
    run import-config env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_ENDPOINT_URL -u AWS_ENDPOINT FARDISK_CONFIG="$W/fardisk.conf" \
    "$B" import plain --nbd "unix:$SOCK"
exercise plain
DPID="$(fardisk_daemon_pid plain)"
check "the daemon's command line holds no secret" bash -c "! tr '\\0' ' ' </proc/$DPID/cmdline | grep -qF -- '$SECRET_KEY'"
require "export plain" run export-plain-2 "$B" export plain
check "the plain daemon let go of its socket" exported plain

# --- an encrypted pool --------------------------------------------------------------------------
require "create enc with a new key file" run create-enc "$B" create enc "s3://$BUCKET/enc" log "$W/log1" cache "$W/cache0" --key-file "$W/enc.key" -o compression=off
KEYHEX="$(tr -d ' \n' <"$W/enc.key")"
check "the key file holds 64 hex digits" bash -c "[[ '$KEYHEX' =~ ^[0-9a-f]{64}$ ]]"
require "import enc (key file recorded at create)" run import-enc "$B" import enc --nbd "unix:$SOCK" --metrics "127.0.0.1:$PORT"
require "volume create" run volume-enc "$B" volume create enc/v 16M
require "write 4 MiB through NBD and flush" run nbdcopy-enc nbdcopy --flush "$W/data" "nbd+unix:///v?socket=$SOCK"
must sync-enc "$B" sync enc
exercise enc
require "export enc" run export-enc "$B" export enc
check "the enc daemon let go of its socket" exported enc
# The key from FARDISK_KEY (an environment variable: the daemon inherits it).
require "import enc with FARDISK_KEY" run import-enc-env env FARDISK_KEY="$KEYHEX" "$B" import enc --nbd "unix:$SOCK" --metrics "127.0.0.1:$PORT"
exercise enc
require "export enc" run export-enc-2 "$B" export enc
check "the enc daemon let go of its socket" exported enc
rand_hex 32 >"$W/other.key"
run_fails "import-with-another-key" "another key" env FARDISK_HOME="$W/home2" "$B" import enc "s3://$BUCKET/enc" --key-file "$W/other.key"
run_fails "import-without-the-key" "is encrypted" env FARDISK_HOME="$W/home2" "$B" import enc "s3://$BUCKET/enc"
run_fails "a-malformed-FARDISK_KEY" "64 hex digits" env FARDISK_KEY="${KEYHEX:0:60}zz" "$B" import enc --nbd "unix:$SOCK"
run_fails "a-key-of-the-wrong-length" "64 hex digits" env FARDISK_KEY="${KEYHEX}00" "$B" import enc --nbd "unix:$SOCK"

# --- every object of the bucket, through the S3 API --------------------------------------------
python3 "$SCRIPTS/s3.py" ls "$BUCKET" >"$W/objects.txt"
require "list the bucket ($(wc -l <"$W/objects.txt") objects)" test -s "$W/objects.txt"
nobj=0
while read -r _ key; do
    nobj=$((nobj + 1))
    python3 "$SCRIPTS/s3.py" get "$BUCKET" "$key" "$W/dl/$(printf %05d $nobj)" || fail "GET $key"
done <"$W/objects.txt"
check "both pools' objects listed and fetched ($nobj)" bash -c "[ $nobj -ge 10 ] && grep -q ' plain/' '$W/objects.txt' && grep -q ' enc/' '$W/objects.txt'"
check "the plain pool's data is in the bucket (the scan below can find what is there)" \
    python3 -c 'import sys, glob; d = open(sys.argv[1], "rb").read(4096); sys.exit(0 if any(d in open(f, "rb").read() for f in glob.glob(sys.argv[2] + "/*")) else 1)' "$W/data" "$W/dl"

run_fails "destroy-with-the-wrong-secret" "refused the credentials" env AWS_SECRET_ACCESS_KEY="$WRONG_SECRET" "$B" destroy enc
# destroy removes the pool's record and daemon log: scan them as they were too.
cp -a "$FARDISK_HOME" "$W/home.before-destroy"
# --key-file: the import with FARDISK_KEY left this host's record of the key file empty.
require "destroy enc (its objects were fetched above)" run destroy-enc "$B" destroy enc --key-file "$W/enc.key"

# --- the scan -------------------------------------------------------------------------------------
cp "$FARDISK_RUN_DIR/minio/minio.log" "$W/out/minio.log" 2>/dev/null
scan="$(python3 - "$W" "$MINIO_DATA" "$BUCKET" "$SECRET_KEY" "$WRONG_SECRET" "$KEYHEX" "$ACCESS_KEY" <<'PY'
import base64, os, sys
w, minio_data, bucket, secret, wrong, keyhex, access = sys.argv[1:8]
raw = bytes.fromhex(keyhex)
needles = {
    "secret key": [secret.encode()],
    "the wrong secret tried": [wrong.encode()],
    "encryption key": [keyhex.encode(), keyhex.upper().encode(), base64.b64encode(raw), base64.b64encode(raw).rstrip(b"="),
                       base64.urlsafe_b64encode(raw).rstrip(b"="), raw],
}
# What fardisk printed, logged or wrote; the key file and the config files hold the secrets by
# design and are left out.
places = {
    "command output": [os.path.join(w, "out")],
    "daemon logs": [os.path.join(w, "home", "log"), os.path.join(w, "home.before-destroy", "log")],
    "fardisk's local state": [os.path.join(w, d) for d in ("home", "home.before-destroy", "home2", "run")],
    "log and cache devices": [os.path.join(w, f) for f in ("log0", "log1", "cache0")],
    "objects fetched through S3": [os.path.join(w, "dl")],
    "MinIO's files of the bucket": [os.path.join(minio_data, bucket)],
}
skip = {os.path.join(w, "run", "minio")}  # MinIO's own state, scanned as the bucket's files above
def files(p):
    if os.path.isfile(p):
        yield p
        return
    for root, dirs, names in os.walk(p):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in skip]
        for n in names:
            f = os.path.join(root, n)
            if os.path.isfile(f) and not os.path.islink(f):
                yield f
# The scanner finds what is there: the config file holds the secret, the key file the key.
control = open(os.path.join(w, "fardisk.conf"), "rb").read(), open(os.path.join(w, "enc.key"), "rb").read()
print("CONTROL " + ("ok" if any(x in control[0] for x in needles["secret key"]) and any(x in control[1] for x in needles["encryption key"]) else "missed"))
leaks, counts, access_hits = [], {}, set()
for place, roots in places.items():
    seen = 0
    for r in roots:
        for f in files(r):
            try:
                data = open(f, "rb").read()
            except OSError:
                continue
            seen += 1
            for what, forms in needles.items():
                if any(x in data for x in forms):
                    leaks.append(f"{what} in {place}: {os.path.relpath(f, w)}")
            if access.encode() in data:
                access_hits.add(place)
    counts[place] = seen
print("FILES " + "; ".join(f"{k} {v}" for k, v in counts.items()))
print("ACCESS " + ("; ".join(sorted(access_hits)) or "nowhere"))
for l in leaks:
    print("LEAK " + l)
PY
)"
echo "$scan" | grep '^FILES' | sed "s/^FILES /$E2E_NAME: files scanned: /"
check "every place was scanned" bash -c "! grep '^FILES' <<<\"\$1\" | grep -qE '(^|; )[^;]* 0(;|$)'" _ "$scan"
check "the scanner finds the secret in the config file and the key in the key file" grep -q '^CONTROL ok' <<<"$scan"
leaks="$(grep '^LEAK ' <<<"$scan" | sed 's/^LEAK //')"
check "no secret key, wrong secret or encryption key anywhere${leaks:+: $(tr '\n' '|' <<<"$leaks")}" test -z "$leaks"
echo "$E2E_NAME: the access key ID (not a secret) appears in: $(grep '^ACCESS ' <<<"$scan" | sed 's/^ACCESS //')"
check "the daemon logs were at trace level (the scan covered debug output)" bash -c "grep -q ' TRACE ' '$FARDISK_HOME'/log/*.log"
e2e_finish
