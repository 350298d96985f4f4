#!/usr/bin/env bash
# A write the engine acknowledged survives the engine's death under the holder (#17, #20).
# The kernel never sends an answered request again: a write (or a punched hole) acknowledged from
# memory and lost with a SIGKILLed engine is gone for good, while the next fsync, answered by the
# successor, succeeds. That lost an acknowledged PostgreSQL commit in e2e 54 (CI of f2a5e39, seed
# 305945502: the WAL page written just before an engine kill, so recovery stopped there).
# For a pool with a mirrored log and one without: txg_timeout 60 s, so no timed txg covers the
# writes; through the held FUSE mount an O_DIRECT write of a pattern and a punched hole over
# fsynced data, no fsync after them; SIGKILL the engine; once the holder's new engine serves,
# fsync and read back (O_DIRECT): the pattern and the hole are there; again after export and a
# plain import. Without a log, import says each write waits for a txg. The pool with the log also
# serves NBD: a client (nbdsh) writes without a flush and keeps its connection open across the
# kill; a new connection to the successor flushes and reads the write back (a client that
# reconnects by itself, qemu's `reconnect-delay`, retries only what was never answered). No
# PostgreSQL here: e2e 54 and 62 cover the database across kills.
#
# Env: FARDISK_BIN=PATH uses that binary instead of building target/debug/fardisk.
E2E_NAME=66_holder_acked_writes
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$E2E_ROOT" || exit 1

W="$FARDISK_RUN_DIR"
export FARDISK_HOME="$W/home"
MNT="$W/mnt"
FS="$W/fs"
WAIT_TRIES=300 # x 0.1 s: bound on every wait below
IMPORT_WAIT_S=60
. "$(dirname "${BASH_SOURCE[0]}")/lib/postgres.sh"

use_fardisk_bin
on_exit cleanup_all
mkdir -p "$MNT" "$FS"

# io.py IMAGE OP: `prepare` writes 0x5a over [4 MiB, 5 MiB) and fsyncs; `unsynced` writes 0xab
# over [8 MiB, 9 MiB) and punches a hole over [4 MiB, 4.5 MiB), no fsync; `fsync`; `verify`
# reads both back with O_DIRECT and exits 1 (saying what it found) unless they hold.
IO="$W/io.py"
cat >"$IO" <<'PY'
import mmap, os, sys
MIB = 1 << 20
path, op = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR | os.O_DIRECT)
buf = mmap.mmap(-1, MIB)
def write(byte, at):
    buf.seek(0); buf.write(bytes([byte]) * MIB); os.pwrite(fd, buf, at)
def read(at):
    os.preadv(fd, [buf], at); return bytes(buf[:])
if op == "prepare":
    write(0x5A, 4 * MIB); os.fsync(fd)
elif op == "unsynced":
    write(0xAB, 8 * MIB)
    import ctypes  # fallocate(2) with PUNCH_HOLE|KEEP_SIZE
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.fallocate(fd, 0x02 | 0x01, ctypes.c_long(4 * MIB), ctypes.c_long(MIB // 2)) != 0:
        sys.exit(f"fallocate: {os.strerror(ctypes.get_errno())}")
elif op == "fsync":
    os.fsync(fd)
elif op == "verify":
    written, punched = read(8 * MIB), read(4 * MIB)
    bad = []
    if written != b"\xab" * MIB:
        bad.append(f"the unsynced write reads {written[:4].hex()}.. ({written.count(0xAB)} of {MIB} bytes 0xab)")
    if punched != b"\x00" * (MIB // 2) + b"\x5a" * (MIB // 2):
        bad.append(f"the punched range reads {punched[:4].hex()}.. / {punched[MIB // 2:MIB // 2 + 4].hex()}..")
    if bad:
        sys.exit("; ".join(bad))
PY
io() { python3 "$IO" "$MNT/v" "$1"; }

NBD_SOCK="$W/nbd.sock"
NBD_URI="nbd+unix:///v?socket=$NBD_SOCK"
NBD_WRITER_PID=""
# /usr/bin first: nbdsh needs the system python3, which has the libnbd bindings (python3-libnbd).
CLIENT_PATH="/usr/bin:/bin:$PATH"
stop_nbd_writer() { [ -n "$NBD_WRITER_PID" ] && is_ours "$NBD_WRITER_PID" nbdsh && kill "$NBD_WRITER_PID"; return 0; }
on_exit stop_nbd_writer
# nbd_write_unflushed: 0xcd over [12 MiB, 13 MiB) through NBD, no flush; the client stays connected
# (at most 60 s) so that nothing but the server could have made the write durable.
nbd_write_unflushed() {
    env PATH="$CLIENT_PATH" nbdsh -u "$NBD_URI" -c 'h.pwrite(b"\xcd" * (1 << 20), 12 << 20)' \
        -c 'print("written", flush=True)' -c 'import time; time.sleep(60)' >"$W/nbd-writer.out" 2>&1 &
    NBD_WRITER_PID=$!
    local i
    for ((i = 0; i < WAIT_TRIES; i++)); do
        grep -q written "$W/nbd-writer.out" && return 0
        sleep 0.1
    done
    cat "$W/nbd-writer.out"
    return 1
}
nbd_flush_and_verify() {
    env PATH="$CLIENT_PATH" nbdsh -u "$NBD_URI" -c 'h.flush()' \
        -c 'b = h.pread(1 << 20, 12 << 20); n = b.count(0xCD); print(f"the NBD write reads {b[:4].hex()}.. ({n} of {1 << 20} bytes 0xcd)"); assert n == 1 << 20'
}

one_case() { # NAME CREATE_ARGS...
    local name="$1" engine import_args=(--holder) with_log=0
    shift
    POOL="$name"
    # The pool with a log also serves NBD (one socket path for the test).
    [ "$#" -gt 0 ] && with_log=1 && import_args+=(--nbd "unix:$NBD_SOCK")
    require "$name: create (${*:-no log}) -o txg_timeout=60" "$B" create "$POOL" "file://$W/store-$name" "$@" -o txg_timeout=60
    require "$name: import ${import_args[*]}" import_pool "${import_args[@]}" >"$W/import-$name.out"
    cat "$W/import-$name.out"
    if [ "$with_log" -eq 0 ]; then
        check "$name: import says each write waits for a txg without a log" grep -q "has no log device: under --holder each write waits for a txg" "$W/import-$name.out"
    else
        check "$name: no such note with a log" bash -c "! grep -q 'has no log device' '$W/import-$name.out'"
    fi
    HOLDER_PID="$(holder_field pid)"
    DAEMON_PIDS+=("$HOLDER_PID")
    require "$name: volume create v 16M" "$B" volume create "$POOL/v" 16M
    require "$name: a fsynced pattern" io prepare
    require "$name: an O_DIRECT write and a punched hole, not fsynced" io unsynced
    if [ "$with_log" -eq 1 ]; then
        require "$name: an NBD write, not flushed, the client still connected" nbd_write_unflushed
    fi
    engine="$(daemon_pid)"
    require "$name: SIGKILL the engine ($engine)" kill_daemon
    check "$name: the holder starts a new engine that serves" wait_new_engine "$engine"
    check "$name: fsync through the successor" io fsync
    check "$name: the write and the hole acknowledged before the kill read back" io verify
    if [ "$with_log" -eq 1 ]; then
        stop_nbd_writer
        check "$name: through NBD to the successor, a flush and the unflushed write read back" nbd_flush_and_verify
    fi
    require "$name: export" "$B" export "$POOL"
    check "$name: the holder is gone after the export" wait_gone "$WAIT_TRIES" "$HOLDER_PID"
    require "$name: import (no holder)" import_pool
    check "$name: they read back after export and import" io verify
    require "$name: export again" "$B" export "$POOL"
}

truncate -s 64M "$W/log0" "$W/log1"
one_case logged log mirror "$W/log0" "$W/log1"
one_case nolog
e2e_finish
