#!/usr/bin/env python3
"""What fetching a log file's times costs each commit on the host file system (docs/design/0004).

A log commit is an O_DIRECT write and an fdatasync. Since Linux 6.13 (multigrain timestamps) a
fetched change time (an fstat) makes the file's next write take a fine-grained time, so the
write changes the inode; on a file system where fdatasync writes a changed inode (ext4 without a
journal) that is one more disk request per commit. fardisk's log legs checked their link count
with fstat after each flush until they asked statx for the link count alone
(crates/slog/src/device/file.rs `link_count`). This probe runs the two loops, alternated, on a
scratch file and counts the disk's requests (/sys/block/DEV/stat) per commit.

    bench/profile/inode-per-commit.py [DIR] [DEVICE]    (default: /tmp and vda; root not needed)
"""
import mmap
import os
import sys
import time

COMMITS = 2000
ROUNDS = 2


def disk_counts(device):
    """Writes and flushes the device completed (a flush also counts as an empty write)."""
    fields = open(f"/sys/block/{device}/stat").read().split()
    return int(fields[4]), int(fields[15]) if len(fields) > 15 else 0


def run(path, device, fetch_times):
    buf = mmap.mmap(-1, 4096)
    buf.write(b"x" * 4096)
    fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    try:
        writes0, flushes0 = disk_counts(device)
        t0 = time.perf_counter()
        for i in range(COMMITS):
            os.pwritev(fd, [buf], (i % 256) * 4096)
            os.fdatasync(fd)
            if fetch_times:
                os.fstat(fd)
        elapsed_s = time.perf_counter() - t0
        writes1, flushes1 = disk_counts(device)
    finally:
        os.close(fd)
    flushes = (flushes1 - flushes0) / COMMITS
    label = "fstat after each commit" if fetch_times else "no time fetched        "
    print(
        f"{label}: {COMMITS / elapsed_s:7.0f} commits/s; per commit, disk writes "
        f"{(writes1 - writes0) / COMMITS - flushes:.2f} (flushes not counted), flushes {flushes:.2f}"
    )


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
    device = sys.argv[2] if len(sys.argv) > 2 else "vda"
    path = os.path.join(directory, f"fardisk-inode-probe-{os.getpid()}")
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.write(fd, b"\0" * (1 << 20))  # written once: no allocation at commit time
        os.fsync(fd)
        os.close(fd)
        print(f"{path} on /dev/{device}, {COMMITS} commits of 4 KiB per loop, {ROUNDS} rounds")
        for _ in range(ROUNDS):
            run(path, device, True)
            run(path, device, False)
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
