#!/usr/bin/env bash
# A partitioned writer and a forced import elsewhere, on MinIO through toxiproxy (#17 claim 6,
# shared/design/CLARIFICATIONS.md). Two "hosts" on this machine: host A (its own FARDISK_HOME,
# run dir and log device) reaches MinIO through toxiproxy; host B reaches it directly and cannot
# see A's log device (a private mount namespace hides it). The pool has multihost=on with a 10 s
# lease. An NBD sync-write client writes and flushes through A; the proxy is cut; B imports
# with --force. Checked:
#   - A stops acknowledging within the stated window (lease - 2 s after its last renewal);
#   - B waits the lease out before claiming, and says where it starts;
#   - every write in a txg A published is on B (the volume is a prefix of A's history);
#   - A acknowledges nothing after B's claim, also once its network is back (FENCED);
#   - --force says what it risks.
E2E_NAME=58_multihost_partition
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
umask 022
cd "$E2E_ROOT" || exit 1
require "the debug build of fardisk" build_fardisk
B="$E2E_ROOT/target/debug/fardisk"
SW="$E2E_ROOT/tests/e2e/lib/syncwriter.py"
SCRIPTS="$E2E_ROOT/scripts"
W="$(mktemp -d /tmp/fardisk-e2e58.XXXXXX)"
LEASE_MS=10000
WINDOW_S=8          # lease - 2 s margin
SLACK_S=2           # scheduling and the writer's own pace
OPS_MAX=200000      # a writer stops by itself after this many writes
WRITER_WAIT_TRIES=600 # x 0.1 s: bound on waiting for a writer to stop after its flushes fail
POOL=mh
URL="s3://fardisk/$POOL"
mkdir -p "$W/hostA" "$W/a/home" "$W/a/run" "$W/b/home" "$W/b/run"
chmod 700 "$W/a/run" "$W/b/run"
A_ENV=(env FARDISK_HOME="$W/a/home" FARDISK_RUN_DIR="$W/a/run")
B_ENV=(env FARDISK_HOME="$W/b/home" FARDISK_RUN_DIR="$W/b/run")
WRITER_PID=""
stop_writer() {
    [ -n "$WRITER_PID" ] || return 0
    for _ in $(seq "$WRITER_WAIT_TRIES"); do kill -0 "$WRITER_PID" 2>/dev/null || break; sleep 0.1; done
    kill "$WRITER_PID" 2>/dev/null
    wait "$WRITER_PID" 2>/dev/null
    WRITER_PID=""
}
kill_host() { # kill_host ENV...: SIGKILL that host's daemon (by the pid its status names)
    local pid
    pid="$("$@" "$B" status "$POOL" --json 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["pools"][0].get("pid", ""))' 2>/dev/null)"
    [ -n "$pid" ] && is_ours "$pid" fardisk && kill -9 "$pid"
    return 0
}
on_exit 'stop_writer; kill_host "${A_ENV[@]}"; kill_host "${B_ENV[@]}"; if [ "$e2e_failed" -eq 0 ]; then rm -rf "$W"; else echo "$E2E_NAME: kept $W"; fi'

require "minio.sh start" "$SCRIPTS/minio.sh" start
on_exit '"$SCRIPTS/minio.sh" stop'
require "toxiproxy.sh start" "$SCRIPTS/toxiproxy.sh" start
on_exit '"$SCRIPTS/toxiproxy.sh" stop'
DIRECT_ENV="$("$SCRIPTS/minio.sh" env)"
PROXY_ENV="$("$SCRIPTS/toxiproxy.sh" env)"

# Host A: create and import through the proxy.
(
    eval "$PROXY_ENV"
    "${A_ENV[@]}" "$B" create "$POOL" "$URL" log "$W/hostA/log0" -o multihost=on -o multihost_lease_ms=$LEASE_MS >/dev/null &&
        "${A_ENV[@]}" "$B" import "$POOL" "$URL" --nbd "unix:$W/a.sock" >/dev/null &&
        "${A_ENV[@]}" "$B" volume create "$POOL/v" 64M >/dev/null
) || { fail "host A: create, import and volume create"; e2e_finish; exit 1; }
pass "host A imported $POOL with multihost=on (lease ${LEASE_MS} ms) through the proxy"

# The client writes and flushes through A; A publishes a txg; then the network between A and the
# store goes.
/usr/bin/python3 "$SW" write "$W/a.sock" v 58 1000000 "$OPS_MAX" "$W/issued" "$W/acked" 2>>"$W/writer.log" &
WRITER_PID=$!
sleep 2
require "host A publishes a txg (fardisk sync)" "${A_ENV[@]}" "$B" sync "$POOL"
sleep 1
require "the client's flushes were acknowledged before the cut" test -s "$W/acked"
require "toxiproxy: the store is cut off from host A" "$SCRIPTS/toxiproxy.sh" outage on
cut_s=$(date +%s.%N)
stop_writer # it stops by itself at the first flush A refuses
last_ack_s=$(stat -c %.9Y "$W/acked")
after_cut=$(awk -v a="$last_ack_s" -v c="$cut_s" 'BEGIN { printf "%.1f", a - c }')
check "A stopped acknowledging ${after_cut} s after the cut (window ${WINDOW_S} s + ${SLACK_S} s slack)" \
    awk -v a="$last_ack_s" -v c="$cut_s" -v w="$((WINDOW_S + SLACK_S))" 'BEGIN { exit !(a - c <= w) }'
check "A's refusal names the lost lease" grep -q "lease lost" "$W/a/home/log/$POOL.log"

# Host B imports with --force, directly, without A's log device.
t0=$(date +%s.%N)
out="$(
    eval "$DIRECT_ENV"
    "${B_ENV[@]}" unshare -m --propagation private sh -c 'mount -t tmpfs tmpfs "$1" && shift && exec "$@"' _ "$W/hostA" \
        "$B" import "$POOL" "$URL" --force --missing-log --nbd "unix:$W/b.sock" 2>&1
)"
rc=$?
t1=$(date +%s.%N)
require "host B imported with --force (exit $rc): $(tail -n 1 <<<"$out")" test "$rc" -eq 0
waited=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
check "B waited ${waited} s, at least the lease (${LEASE_MS} ms)" awk -v d="$waited" -v l="$LEASE_MS" 'BEGIN { exit !(d * 1000 >= l) }'
check "--force says what it risks" grep -qi "with multihost=off, a writer that is still running keeps acknowledging" <<<"$out"
check "B's log says how long it waits and why" grep -q "multihost=on: waiting .* for the lease of host" "$W/b/home/log/$POOL.log"
check "B's log says where it starts and what it cannot have" grep -q "writes the previous writer acknowledged from its own intent log after that txg are not in the store" "$W/b/home/log/$POOL.log"
check "every write in a txg A published is on B (a prefix of A's history)" \
    /usr/bin/python3 "$SW" verify "$W/b.sock" v "$W/issued" "$W/acked" --prefix

# A, still cut off, then with its network back: it acknowledges nothing.
/usr/bin/python3 "$SW" write "$W/a.sock" v 59 2000000 50 "$W/issued2" "$W/acked2" 2>>"$W/writer.log" &
WRITER_PID=$!
stop_writer
check "A acknowledged nothing after B's claim (cut off)" test ! -s "$W/acked2"
require "toxiproxy: host A's network is back" "$SCRIPTS/toxiproxy.sh" outage off
sleep $((LEASE_MS / 1000 / 2))
/usr/bin/python3 "$SW" write "$W/a.sock" v 60 3000000 50 "$W/issued3" "$W/acked3" 2>>"$W/writer.log" &
WRITER_PID=$!
stop_writer
check "A acknowledged nothing after B's claim (network back)" test ! -s "$W/acked3"
state="$("${A_ENV[@]}" "$B" status "$POOL" --json 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["pools"][0]["health"]["state"].upper())' 2>/dev/null)"
check "A says FENCED once it sees B's lease (status: $state)" test "$state" = "FENCED"
# Counting and writing what A held takes seconds for a big log (170 MB of records took 2.8 s on a
# loaded CI run): status names it from the moment it says FENCED, as being written, then written.
held_json() {
    "${A_ENV[@]}" "$B" status "$POOL" --json 2>/dev/null | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["pools"][0].get("held")))' 2>/dev/null
}
check "A's status says what it held as soon as it says FENCED (held: $(held_json))" \
    python3 -c 'import json, sys; h = json.loads(sys.argv[1]); sys.exit(not isinstance(h, dict))' "$(held_json)"
for _ in $(seq 1 120); do
    python3 -c 'import json, sys; h = json.loads(sys.argv[1]); sys.exit(not (isinstance(h, dict) and not h.get("writing")))' "$(held_json)" && break
    sleep 0.5
done
check "A's held records are written within 60 s (held: $(held_json))" \
    python3 -c 'import json, sys; h = json.loads(sys.argv[1]); sys.exit(not (h.get("path") and not h.get("writing")))' "$(held_json)"
a_pid="$("${A_ENV[@]}" "$B" status "$POOL" --json 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["pools"][0].get("pid", ""))' 2>/dev/null)"
echo "INFO $E2E_NAME: A's engine after writing what it held ($(python3 -c 'import json, sys; h = json.loads(sys.argv[1]); print(h.get("records"), "records,", h.get("data_bytes"), "bytes")' "$(held_json)" 2>/dev/null)): peak resident memory $(awk '/^VmHWM:/ {print $2, $3}' "/proc/${a_pid:-0}/status" 2>/dev/null), now $(awk '/^VmRSS:/ {print $2, $3}' "/proc/${a_pid:-0}/status" 2>/dev/null)"
check "A's log names what it held" grep -q "are not in the store: the log keeps them unreleased" "$W/a/home/log/$POOL.log"
# What A held stays readable until an operator discards it (CLARIFICATIONS #17.6, point 4).
held="$("${A_ENV[@]}" "$B" status "$POOL" --json 2>/dev/null | python3 -c 'import json, sys; h = json.load(sys.stdin)["pools"][0].get("held") or {}; print(h.get("path") or "", h.get("records", 0))' 2>/dev/null)"
held_file="${held% *}"
held_records="${held##* }"
check "A's status names a held records file ($held_records records: $held_file)" test -s "$held_file" -a "${held_records:-0}" -gt 0
check "fardisk held list shows it" grep -qF "$held_file" <<<"$("${A_ENV[@]}" "$B" held list 2>&1)"
shown="$("${A_ENV[@]}" "$B" held show "$held_file" --json 2>/dev/null | python3 -c 'import json, sys; d = json.load(sys.stdin); print(len(d["records"]), d["published_txg"], min(r["txg"] for r in d["records"]))' 2>/dev/null)"
read -r shown_records shown_published shown_first <<<"$shown"
check "fardisk held show lists ${shown_records:-0} records, all after A's last published txg ${shown_published:-?}" \
    test "${shown_records:-0}" = "$held_records" -a "${shown_first:-0}" -gt "${shown_published:-0}"
check "fardisk held discard removes the file" "${A_ENV[@]}" "$B" held discard "$held_file"
check "and nothing is left to list" test ! -e "$held_file"
expect_error "held show of a file that is not one is one clear line" "not a held records file" "${A_ENV[@]}" "$B" held show "$W/a/home/log/$POOL.log"
acked=$(wc -l <"$W/acked" | tr -d ' ')
echo "$E2E_NAME: $acked flushes acknowledged by A before the cut or within ${after_cut} s after it; B waited ${waited} s; A acknowledged 0 after B's claim"
"${B_ENV[@]}" "$B" export "$POOL" >/dev/null 2>&1
e2e_finish
