#!/usr/bin/python3
"""A sync-write workload over NBD that records what it was told is durable, and its verifier.

  syncwriter.py write SOCKET EXPORT SEED SEQ_BASE OPS_MAX ISSUED ACKED
      4 KiB writes at seeded pseudo-random blocks, a FLUSH after every 1-4 writes; each write's
      "seq block" line goes to ISSUED before it is sent, and the seqs a FLUSH covered go to
      ACKED only after the FLUSH returned. Stops after OPS_MAX writes or when the server goes
      away (that is how a SIGKILL ends it). Seqs start at SEQ_BASE so rounds never collide.
  syncwriter.py verify SOCKET EXPORT ISSUED ACKED [--prefix]
      Reads the whole volume and checks every block: it is zero or an intact record of a write
      that was issued to that block (nothing never written appears), and it is the newest
      acknowledged write to that block or a later issued one (nothing acknowledged is lost).
      --prefix (import without the log): the volume must equal the history cut at one point;
      acknowledged writes after that point are lost by design, so they are not checked.
      Prints one summary line; exits 1 on the first violations (up to 5 are listed).

Each block: magic "FDSW", u64 seq, u64 block, 4068 bytes derived from seq, crc32 of the rest.
"""
import os
import random
import struct
import sys
import zlib

import nbd

BLOCK = 4096
MAGIC = b"FDSW"
# Seqs of round r are r * ROUND_SEQS + 1, ... (the e2e script passes SEQ_BASE = round * 1000000).
ROUND_SEQS = 1_000_000


def record(seq, block):
    body = MAGIC + struct.pack("<QQ", seq, block)
    filler = random.Random(seq).randbytes(BLOCK - len(body) - 4)
    data = body + filler
    return data + struct.pack("<I", zlib.crc32(data))


def decode(buf):
    """(seq, block) of an intact record, 0 for a zero block, None for anything else."""
    if buf.count(0) == BLOCK:
        return 0
    if buf[:4] != MAGIC or struct.unpack("<I", buf[-4:])[0] != zlib.crc32(buf[:-4]):
        return None
    return struct.unpack("<QQ", buf[4:20])


def connect(sock, export):
    h = nbd.NBD()
    h.set_export_name(export)
    h.connect_unix(sock)
    return h


def write(sock, export, seed, seq_base, ops_max, issued_path, acked_path):
    rng = random.Random(seed)
    h = connect(sock, export)
    blocks = h.get_size() // BLOCK
    # A small hot range as well as the whole volume: overwrites of one block are common.
    hot = max(1, blocks // 16)
    issued = open(issued_path, "a", buffering=1)
    acked = open(acked_path, "a", buffering=1)
    pending = []
    seq = seq_base
    try:
        for _ in range(ops_max):
            seq += 1
            block = rng.randrange(hot) if rng.random() < 0.5 else rng.randrange(blocks)
            issued.write(f"{seq} {block}\n")
            h.pwrite(record(seq, block), block * BLOCK)
            pending.append(seq)
            if len(pending) >= rng.randint(1, 4):
                h.flush()
                acked.write("".join(f"{s}\n" for s in pending))
                pending = []
    except nbd.Error as e:
        print(f"syncwriter: server went away after seq {seq}: {e}", file=sys.stderr)
        return 0
    print(f"syncwriter: finished {ops_max} writes (last seq {seq})", file=sys.stderr)
    return 0


def load(issued_path, acked_path):
    issued = {}
    for line in open(issued_path):
        s, b = line.split()
        issued[int(s)] = int(b)
    acked = {int(line) for line in open(acked_path) if line.strip()}
    return issued, acked


def verify(sock, export, issued_path, acked_path, prefix):
    issued, acked = load(issued_path, acked_path)
    h = connect(sock, export)
    size = h.get_size()
    found = {}
    bad = []
    chunk = 1 << 20
    for off in range(0, size, chunk):
        buf = h.pread(min(chunk, size - off), off)
        for i in range(0, len(buf), BLOCK):
            block = (off + i) // BLOCK
            d = decode(buf[i:i + BLOCK])
            if d is None:
                bad.append(f"block {block}: bytes that no write put there")
            elif d != 0:
                seq, b = d
                if b != block or issued.get(seq) != block:
                    bad.append(f"block {block}: record of seq {seq} for block {b}, never issued here")
                else:
                    found[block] = seq
    last_acked = {}
    for s in acked:
        b = issued[s]
        last_acked[b] = max(last_acked.get(b, 0), s)
    if not prefix:
        for b, s in last_acked.items():
            if found.get(b, 0) < s:
                bad.append(f"block {b}: acknowledged seq {s} lost (found {found.get(b, 0)})")
    cut = max(found.values(), default=0)
    if prefix:
        # A write of an earlier round issued after that round's last FLUSH may have died with
        # the daemon (it was never acknowledged): such a write leaves the block either with it
        # or with what was there before. Every other write up to the cut must be there.
        cut_round = cut // ROUND_SEQS
        possible = {}
        for s in sorted(issued):
            if s > cut:
                break
            b = issued[s]
            uncertain = s not in acked and s // ROUND_SEQS < cut_round
            possible[b] = (possible.get(b, {0}) | {s}) if uncertain else {s}
        for b in set(possible) | set(found):
            if found.get(b, 0) not in possible.get(b, {0}):
                bad.append(f"block {b}: seq {found.get(b, 0)} but the history cut at seq {cut} allows {sorted(possible.get(b, {0}))}")
    mode = "prefix" if prefix else "acked"
    print(f"verify ({mode}): {len(issued)} writes issued, {len(acked)} acknowledged, "
          f"{len(found)} blocks hold records, newest seq {cut}, {len(bad)} violations")
    for line in bad[:5]:
        print("  " + line)
    return 1 if bad else 0


def main(argv):
    if len(argv) >= 8 and argv[1] == "write":
        return write(argv[2], argv[3], int(argv[4]), int(argv[5]), int(argv[6]), argv[7], argv[8])
    if len(argv) >= 6 and argv[1] == "verify":
        return verify(argv[2], argv[3], argv[4], argv[5], "--prefix" in argv[6:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
