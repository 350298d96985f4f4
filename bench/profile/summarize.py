#!/usr/bin/env python3
"""Summarises a bench/profile/fuse-path.sh run: per fio fsync, how many FUSE requests (by
opcode), loop-device flushes, host-disk flushes, intent log sync requests, log commits and
log-device writes, and how many microseconds each layer takes on average."""
import json
import os
import re
import sys
from collections import Counter, defaultdict

out, loop_dev = sys.argv[1], sys.argv[2]


def fio(name):
    job = json.load(open(os.path.join(out, name)))["jobs"][0]
    w = job["write"]
    sync = job.get("sync", {})
    return {
        "iops": w["iops"],
        "writes": w["total_ios"],
        "write_lat_us": w["lat_ns"]["mean"] / 1000,
        "fsyncs": sync.get("total_ios", 0),
        "fsync_lat_us": sync.get("lat_ns", {}).get("mean", 0) / 1000,
        "fsync_p99_us": sync.get("lat_ns", {}).get("percentile", {}).get("99.000000", 0) / 1000,
    }


local = fio("local-syncw.json")
fuse = fio("fuse-syncw.json")
cpu_run = fio("fuse-cpu-syncw.json")
before = json.load(open(os.path.join(out, "log-before.json")))
after = json.load(open(os.path.join(out, "log-after.json")))
delta = {k: (after[k] or 0) - (before[k] or 0) for k in before}

loop_majmin = None
try:
    with open(f"/sys/block/{loop_dev}/dev") as f:
        loop_majmin = f.read().strip().replace(":", ",")
except OSError:
    pass

sent = {}
ops = Counter()
lat_by_op = defaultdict(list)
loop_flushes = 0
disk_flushes = Counter()
send_re = re.compile(r"req (\d+) opcode \d+ \((\w+)\)")
end_re = re.compile(r"req (\d+) len")
rq_re = re.compile(r"^\s*(\d+),(\d+) (\S+)")
with open(os.path.join(out, "trace.txt")) as f:
    for line in f:
        parts = line.split(None, 2)
        if len(parts) < 3:
            continue
        t = float(parts[0].rstrip(":"))
        event, rest = parts[1].rstrip(":"), parts[2]
        if event == "fuse:fuse_request_send":
            m = send_re.search(rest)
            if m:
                ops[m.group(2)] += 1
                sent[m.group(1)] = (t, m.group(2))
        elif event == "fuse:fuse_request_end":
            m = end_re.search(rest)
            if m and m.group(1) in sent:
                t0, op = sent.pop(m.group(1))
                lat_by_op[op].append((t - t0) * 1e6)
        elif event == "block:block_rq_issue":
            m = rq_re.match(rest)
            if m and "F" in m.group(3):
                dev = f"{m.group(1)},{m.group(2)}"
                if dev == loop_majmin:
                    loop_flushes += 1
                else:
                    disk_flushes[dev] += 1

n = max(fuse["fsyncs"], 1)
print(f"fio 4 KiB randwrite fsync=1 psync qd1, {fuse['fsyncs']} fsyncs traced")
print(f"  local ext4 on a loop file: {local['iops']:.0f} IOPS, write {local['write_lat_us']:.1f} us, fsync mean {local['fsync_lat_us']:.1f} us, p99 {local['fsync_p99_us']:.1f} us")
print(f"  fardisk FUSE image:        {fuse['iops']:.0f} IOPS, write {fuse['write_lat_us']:.1f} us, fsync mean {fuse['fsync_lat_us']:.1f} us, p99 {fuse['fsync_p99_us']:.1f} us (traced run)")
print(f"  fardisk FUSE image:        {cpu_run['iops']:.0f} IOPS, fsync mean {cpu_run['fsync_lat_us']:.1f} us (CPU-profiled run)")
print("per fio fsync (each preceded by one 4 KiB write):")
for op, count in ops.most_common():
    lats = sorted(lat_by_op.get(op, []))
    mean = sum(lats) / len(lats) if lats else 0
    p50 = lats[len(lats) // 2] if lats else 0
    print(f"  FUSE {op:<18} {count / n:6.2f}  kernel send->end mean {mean:8.1f} us  p50 {p50:8.1f} us")
print(f"  FUSE requests, all      {sum(ops.values()) / n:6.2f}")
print(f"  loop-device flushes     {loop_flushes / n:6.2f}")
for dev, count in disk_flushes.items():
    print(f"  flushes on block dev {dev}: {count / n:6.2f} (the host disk: log fdatasync, ext4 of the host)")
sync = delta.get("sync_requests") or 0
commits = delta.get("commits") or 0
print(f"  engine sync requests    {sync / n:6.2f}")
print(f"  log commits             {commits / n:6.2f}")
print(f"  log-device writes       {(delta.get('device_writes') or 0) / n:6.2f}")
if commits:
    print(f"  log commit latency mean {(delta.get('commit_latency_us_total') or 0) / commits:8.1f} us")
    print(f"  log bytes per commit    {(delta.get('bytes_logged') or 0) / commits:8.0f}")
