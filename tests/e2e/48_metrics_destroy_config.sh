#!/usr/bin/env bash
# The operator's plumbing as a user meets it: the Prometheus endpoint (off by default, loopback
# only unless --metrics-public) scraped with curl while data flows, agreeing with `status --json`
# and carrying every series the Grafana dashboard in contrib/ queries; the config file (settings,
# owner-only credentials, clear errors); `destroy` refusing while imported or for a wrong name,
# then deleting only the pool's objects and freeing its log and cache devices for reuse.
E2E_NAME=48_metrics_destroy_config
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
umask 022
cd "$E2E_ROOT"
require "the debug build of fardisk" build_fardisk
B="$E2E_ROOT/target/debug/fardisk"
W="$(mktemp -d /tmp/fardisk-e2e48.XXXXXX)"
export FARDISK_HOME="$W/home" FARDISK_RUN_DIR="$W/run" FARDISK_CONFIG="$W/none.conf"
SOCK="$W/nbd.sock"
URI="nbd+unix:///v?socket=$SOCK"
on_exit '"$B" export tank >/dev/null 2>&1; fardisk_kill tank; rm -rf "$W"'
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT="$(free_port)"
truncate -s 256M "$W/log0" "$W/log1" "$W/cache0"
echo "not ours" > "$W/readme.txt"

# --- the config file -------------------------------------------------------------------
expect_error "a missing FARDISK_CONFIG file is named" "none.conf" "$B" list
printf 'aws_region = us-east-1\nregion = x\n' > "$W/bad.conf"
FARDISK_CONFIG="$W/bad.conf" expect_error "an unknown setting names its line" "bad.conf line 2: unknown setting 'region'" "$B" list
printf 'aws_access_key_id = AKIAE2E\naws_secret_access_key = e2e-secret-value\n' > "$W/open.conf"
chmod 644 "$W/open.conf"
FARDISK_CONFIG="$W/open.conf" expect_error "credentials readable by others are refused" "chmod 600" "$B" list
out="$(FARDISK_CONFIG="$W/open.conf" "$B" list 2>&1)"
check "the refusal does not print the secret" bash -c '! grep -q e2e-secret-value <<<"$1"' _ "$out"
chmod 600 "$W/open.conf"
check "an owner-only config file is accepted" env FARDISK_CONFIG="$W/open.conf" "$B" list
printf 'metrics = 127.0.0.1:%s\n' "$PORT" > "$W/fardisk.conf"
export FARDISK_CONFIG="$W/fardisk.conf"

# --- metrics ---------------------------------------------------------------------------
require "create with a mirrored log and a cache" "$B" create tank "file://$W/store" log mirror "$W/log0" "$W/log1" cache "$W/cache0"
cp "$W/readme.txt" "$W/store/readme.txt"
expect_error "a non-loopback metrics address is refused" "not a loopback address" "$B" import tank --metrics 0.0.0.0:9 --nbd "unix:$SOCK"
check "the refused import left nothing running" test -z "$(fardisk_daemon_pid tank)"
require "import (metrics address from the config file)" "$B" import tank --nbd "unix:$SOCK"
require "volume create" "$B" volume create tank/v 64M
head -c 4M /dev/urandom > "$W/data.bin"
require "write 4 MiB (with a flush: a sync request through the log)" nbdcopy --flush "$W/data.bin" "$URI"
require "sync" "$B" sync tank
check "read it back" bash -c "nbdcopy '$URI' - | head -c 4M | cmp - '$W/data.bin'"
M="$W/metrics.txt"
require "scrape /metrics with curl" curl -sf -o "$M" "http://127.0.0.1:$PORT/metrics"
check "OpenMetrics text that ends with # EOF" bash -c "tail -n 1 '$M' | grep -qx '# EOF'"
check "pool state ONLINE" grep -q '^fardisk_pool_state{pool="tank",state="ONLINE"} 1' "$M"
check "store requests by kind" bash -c "grep -q '^fardisk_store_requests_total{pool=\"tank\",op=\"put\"}' '$M' && grep -q '^fardisk_store_requests_total{pool=\"tank\",op=\"get\"}' '$M'"
check "store latency histogram" grep -q '^fardisk_store_request_latency_seconds_bucket{le="+Inf",pool="tank",op="put"}' "$M"
check "log commit latency histogram with the sync requests" bash -c "awk '/^fardisk_log_commit_latency_seconds_count/ {exit !(\$2 > 0)}' '$M'"
check "both log legs online" bash -c "[ \$(grep -c '^fardisk_log_device_online{.*} 1' '$M') -eq 2 ]"
check "the cache device online" grep -q "^fardisk_l2arc_device_online{pool=\"tank\",device=\"$W/cache0\"} 1" "$M"
check "an estimated request cost" grep -q '^fardisk_store_request_cost_usd_estimate_total{pool="tank",op="put"}' "$M"
check "the volume" grep -q '^fardisk_volume_size_bytes{pool="tank",volume="v"} 67108864' "$M"
# The same snapshot as status --json: nothing changes between the two reads on an idle pool
# once the sync is done, so the published txg and the PUT count agree.
st="$("$B" status tank --json)"
curl -sf -o "$M" "http://127.0.0.1:$PORT/metrics"
txg_json="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["pools"][0]["published_txg"])' "$st")"
txg_metric="$(awk '/^fardisk_txg_published\{/ {print int($2)}' "$M")"
check "txg_published agrees with status --json ($txg_metric vs $txg_json)" bash -c "[ '$txg_metric' -ge '$txg_json' ] && [ '$txg_metric' -le \$(( $txg_json + 1 )) ]"
metric_names="$(sed -n 's/^\(fardisk_[a-z0-9_]*\).*/\1/p' "$M" | sort -u)"
missing="$(python3 - contrib/grafana/fardisk.json "$metric_names" <<'PY'
import json, re, sys
dash = json.load(open(sys.argv[1]))
have = set(sys.argv[2].split())
want = set()
for p in dash["panels"]:
    for t in p.get("targets", []):
        want |= set(re.findall(r"fardisk_[a-z0-9_]+", t["expr"]))
print(" ".join(sorted(want - have)))
PY
)"
check "every series the Grafana dashboard queries is exported (missing: ${missing:-none})" test -z "$missing"
check "anything but /metrics is 404" bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$PORT/nope) = 404 ]"
# --- JSON output against the documented schemas (docs/json/) -----------------------------
V="$E2E_ROOT/tests/e2e/lib/json_schema.py"
S="$E2E_ROOT/docs/json"
check "status --json matches docs/json/status.schema.json" bash -c "'$B' status tank --json | python3 '$V' '$S/status.schema.json'"
check "status --json (all pools) matches too" bash -c "'$B' status --json | python3 '$V' '$S/status.schema.json'"
check "list --json matches its schema" bash -c "'$B' list --json | python3 '$V' '$S/list.schema.json'"
check "iostat -v 1 2 --json (JSON lines) matches its schema" bash -c "'$B' iostat -v tank 1 2 --json | python3 '$V' '$S/iostat.schema.json'"
check "arcstat --json matches its schema" bash -c "'$B' arcstat tank --json | python3 '$V' '$S/arcstat.schema.json'"
check "get all --json matches its schema" bash -c "'$B' get all tank --json | python3 '$V' '$S/get.schema.json'"
check "the checker rejects output that breaks the schema" bash -c "! echo '{\"pools\": [{\"name\": 3}]}' | python3 '$V' '$S/list.schema.json' 2>/dev/null"
require "export" "$B" export tank
check "status --json of the exported pool matches its schema" bash -c "'$B' status tank --json | python3 '$V' '$S/status.schema.json'"
check "history of the exported pool comes from the store" bash -c "'$B' history tank | grep -q 'export (fardisk export)'"
check "the endpoint closes with the daemon" bash -c "! curl -sf -m 2 http://127.0.0.1:$PORT/metrics >/dev/null"
FARDISK_CONFIG="$W/none-set.conf"; unset FARDISK_CONFIG
require "import without --metrics" "$B" import tank --nbd "unix:$SOCK"
check "no endpoint unless asked for" bash -c "! curl -sf -m 2 http://127.0.0.1:$PORT/metrics >/dev/null"

# --- destroy ---------------------------------------------------------------------------
expect_error "destroy refuses an imported pool" "export it first" "$B" destroy tank
require "export" "$B" export tank
expect_error "destroy of the wrong name deletes nothing" "holds pool 'tank', not 'other'" "$B" destroy other "file://$W/store"
check "the pool still imports after the refusals" bash -c "'$B' import tank --nbd 'unix:$SOCK' >/dev/null && '$B' export tank >/dev/null"
out="$("$B" destroy tank 2>&1)"; rc=$?
check "destroy ($rc): $out" bash -c '[ "$1" -eq 0 ] && grep -q "destroyed pool .tank.: .* objects deleted" <<<"$2" && grep -q "labels cleared on" <<<"$2"' _ "$rc" "$out"
check "no pool objects remain" bash -c "[ -z \"\$(find '$W/store' -type f ! -name readme.txt)\" ]"
check "objects fardisk did not write are kept" cmp "$W/store/readme.txt" "$W/readme.txt"
expect_error "destroy again: no pool" "no fardisk pool" "$B" destroy tank "file://$W/store"
expect_error "import of the destroyed pool fails clearly" "no fardisk pool" "$B" import tank "file://$W/store"
check "the freed log and cache devices make a new pool without -f" "$B" create tank2 "file://$W/store2" log mirror "$W/log0" "$W/log1" cache "$W/cache0"
e2e_finish
