#!/usr/bin/env python3
"""Write one benchmark result file in the "fardisk-bench/1" schema (bench/README.md).

    result.py --out-dir DIR --scenario NAME --setup TEXT [--order N]
              [--durable yes|no] [--duration-s X] [--param K=V ...] [--metric K=V ...]
              [--series NAME=FILE ...] [--notes TEXT]

A series FILE holds two whitespace-separated numbers per line (x y) and may start
with a "# x_label, y_label" line. started_at is now (UTC) unless
FARDISK_BENCH_STARTED_AT gives it, so tests can pin it. Prints the path written.
"""

import argparse
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from report import SCHEMA, SERIES_POINTS_MAX, validate  # noqa: E402  (one schema, one checker)


def parse_value(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def pairs(items, what):
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"result.py: --{what} needs KEY=VALUE, got {item!r}")
        out[key] = parse_value(value)
    return out


def read_series(spec):
    name, sep, path = spec.partition("=")
    if not sep:
        raise SystemExit(f"result.py: --series needs NAME=FILE, got {spec!r}")
    series = {"x": [], "y": []}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                labels = [s.strip() for s in line[1:].split(",")]
                if len(labels) == 2:
                    series["x_label"], series["y_label"] = labels
                continue
            if line.strip() and len(series["x"]) < SERIES_POINTS_MAX:
                x, y = line.split()[:2]
                series["x"].append(float(x))
                series["y"].append(float(y))
    return name, series


# What a run leaves changed in the tree by itself (results, the report, notes written after it):
# not a change to what was measured.
BENCH_OUTPUTS = [":!bench/results", ":!bench/plots", ":!bench/notes", ":!BENCHMARKS.md"]


def binary_rev(binary):
    """The commit a fardisk binary was built from, as its `--version` says ("fardisk 0.1.0
    (abc1234)"); None when it does not say (a binary from before 2026-11-29 or not fardisk)."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"\(([0-9a-f]{7,40}(?:-dirty)?|unknown)\)\s*$", out.strip())
    return found.group(1) if found else None


def git_rev(root):
    """The commit measured, with "-dirty" when tracked files other than the bench's own outputs
    differ from it: a build of uncommitted code must not pass for the commit (a published
    engine-store run of 2026-11-27 did). When the scenario names the binary a row ran with
    (FARDISK_BENCH_BINARY: a FARDISK_BIN or FARDISK_BIN2 built elsewhere), the commit is the one
    that binary says it was built from; "binary of unknown commit" if it does not say."""
    binary = os.environ.get("FARDISK_BENCH_BINARY")
    if binary:
        return binary_rev(binary) or "binary of unknown commit"
    try:
        rev = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", root, "diff", "--quiet", "HEAD", "--", "."] + BENCH_OUTPUTS,
                                 capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + "-dirty" if changed.returncode == 1 else rev


def build(args, root):
    started = os.environ.get("FARDISK_BENCH_STARTED_AT") or \
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc = {"schema": SCHEMA, "scenario": args.scenario, "setup": args.setup, "started_at": started,
           "git_rev": git_rev(root), "host": {"cpus": os.cpu_count(), "kernel": os.uname().release},
           "params": pairs(args.param, "param"), "metrics": pairs(args.metric, "metric")}
    if args.order is not None:
        doc["order"] = args.order
    if args.durable is not None:
        doc["durable_at_fsync"] = args.durable == "yes"
    if args.duration_s is not None:
        doc["duration_s"] = args.duration_s
    if args.series:
        doc["series"] = dict(read_series(s) for s in args.series)
    if args.notes:
        doc["notes"] = args.notes
    return doc


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--out-dir", required=True)
    p.add_argument("--scenario", required=True)
    p.add_argument("--setup", required=True)
    p.add_argument("--order", type=int)
    p.add_argument("--durable", choices=["yes", "no"])
    p.add_argument("--duration-s", type=float)
    p.add_argument("--param", action="append", default=[])
    p.add_argument("--metric", action="append", default=[])
    p.add_argument("--series", action="append", default=[])
    p.add_argument("--notes")
    args = p.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    doc = build(args, root)
    slug = re.sub(r"[^a-z0-9]+", "-", args.setup.lower()).strip("-")
    if len(slug) > 40:
        # Two long labels sharing their first 40 characters must not share a file.
        slug = slug[:40].strip("-") + "-" + hashlib.sha1(args.setup.encode()).hexdigest()[:6]
    stamp = re.sub(r"[^0-9T]", "", doc["started_at"])[:15]
    path = os.path.join(args.out_dir, f"{args.scenario}-{slug}-{stamp}.json")
    validate(path, doc)  # never write a file the report would reject
    os.makedirs(args.out_dir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
