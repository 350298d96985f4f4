#!/usr/bin/env bash
# systemd readiness and the holder's watchdog (#20), against a real notify socket (a Python
# SOCK_DGRAM listener standing in for systemd): `import --holder` with NOTIFY_SOCKET and
# WATCHDOG_USEC set must tell it READY=1 once the pool serves and WATCHDOG=1 keepalives; an
# engine that hangs (SIGSTOP) must be killed by the holder after WATCHDOG_USEC and replaced, the
# FUSE mount kept (an image reads through it before and after), with `status` saying why; the
# export says STOPPING=1. No PostgreSQL here: e2e 62 covers the database across restarts.
#
# Env: FARDISK_BIN=PATH uses that binary instead of building target/debug/fardisk.
E2E_NAME=63_holder_watchdog
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$E2E_ROOT" || exit 1

POOL=wdog
W="$FARDISK_RUN_DIR"
export FARDISK_HOME="$W/home"
MNT="$W/mnt"
FS="$W/fs"
NOTIFY="$W/notify.sock"
NOTES="$W/notify.log"
WATCHDOG_MS=3000
WAIT_TRIES=300 # x 0.1 s: bound on every wait below
. "$(dirname "${BASH_SOURCE[0]}")/lib/postgres.sh"

use_fardisk_bin
LISTENER_PID=""
stop_listener() { [ -n "$LISTENER_PID" ] && kill "$LISTENER_PID" 2>/dev/null; wait "$LISTENER_PID" 2>/dev/null; return 0; }
on_exit stop_listener
on_exit cleanup_all
mkdir -p "$MNT" "$FS"

# The stand-in for systemd: one line per datagram, for at most 300 s.
python3 - "$NOTIFY" "$NOTES" <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1]); s.settimeout(0.5)
end = time.time() + 300
with open(sys.argv[2], "a") as out:
    while time.time() < end:
        try:
            d = s.recv(4096)
        except socket.timeout:
            continue
        out.write(d.decode(errors="replace").replace("\n", " | ") + "\n"); out.flush()
PY
LISTENER_PID=$!
for ((i = 0; i < WAIT_TRIES; i++)); do [ -S "$NOTIFY" ] && break; sleep 0.1; done

# wait_for_note PATTERN [SKIP]: waits (bounded) until a datagram after the first SKIP lines matches.
wait_for_note() {
    local i
    for ((i = 0; i < WAIT_TRIES; i++)); do
        tail -n +"$((${2:-0} + 1))" "$NOTES" 2>/dev/null | grep -q -- "$1" && return 0
        sleep 0.1
    done
    return 1
}
reads_through_mount() { dd if="$MNT/v" of=/dev/null bs=1M count=1 iflag=direct status=none; }

require "create on file://" "$B" create "$POOL" "file://$W/store"
export NOTIFY_SOCKET="$NOTIFY" WATCHDOG_USEC=$((WATCHDOG_MS * 1000))
require "import --holder under a notify socket" import_pool --holder
unset NOTIFY_SOCKET WATCHDOG_USEC
HOLDER_PID="$(holder_field pid)"
DAEMON_PIDS+=("$HOLDER_PID")
check "READY=1 with a status line once the pool serves" wait_for_note "READY=1 | STATUS=pool $POOL serving"
check "WATCHDOG=1 keepalives" wait_for_note "^WATCHDOG=1$"
require "volume create 16M" "$B" volume create "$POOL/v" 16M
check "the image reads through the mount" reads_through_mount

engine="$(daemon_pid)"
seen="$(wc -l < "$NOTES")"
started=$(date +%s.%N)
kill -STOP "$engine"
check "the hung engine (SIGSTOP) is killed by the holder" wait_gone "$WAIT_TRIES" "$engine"
python3 -c 'import sys, time; e = time.time() - float(sys.argv[1]); print(f"INFO 63: engine killed {e:.1f} s after SIGSTOP (watchdog {int(sys.argv[2]) / 1000} s)"); sys.exit(0 if e >= int(sys.argv[2]) / 1000 * 0.45 else 1)' "$started" "$WATCHDOG_MS"
check "not before half the watchdog timeout (its keepalive interval)" test $? -eq 0
check "a new engine serves" wait_new_engine "$engine"
check "READY=1 again from the new engine" wait_for_note "READY=1 | STATUS=pool $POOL serving at txg [0-9]* (engine generation 2)" "$seen"
check "the holder is the same process" test "$(holder_field pid)" = "$HOLDER_PID"
check "status says the engine hung" bash -c "'$B' status '$POOL' | grep -q 'hung: no keepalive for'"
check "the image still reads through the same mount" reads_through_mount
require "export" "$B" export "$POOL"
check "STOPPING=1 on export" wait_for_note "STOPPING=1 | STATUS=pool $POOL: exporting"
check "the holder is gone after the export" wait_gone "$WAIT_TRIES" "$HOLDER_PID"
check "the FUSE mount is gone" bash -c "! grep -q ' $MNT ' /proc/mounts"
e2e_finish
