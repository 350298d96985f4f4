#!/usr/bin/env python3
"""What a GiB of fresh anonymous memory costs this machine, in 4 KiB pages and in huge pages
(bench/notes/engine-store.md, "The ARC's first fill").

A cold read with an empty ARC puts every block it reads into a 4 KiB buffer of its own until the
ARC reaches `arc_max` (1 GiB by default): the reader takes that much new memory from the kernel
once, on top of what the raw reader (which keeps nothing) needs. On a VM whose balloon device
reports free pages to the host (virtio-balloon's VIRTIO_BALLOON_F_REPORTING, feature bit 5 in
/sys/bus/virtio/devices/*/features), the host has discarded free guest memory, so each first
touch is a fault on the host too. This probe maps 1 GiB three times in a row and writes one
byte per 4 KiB page, either by touching (a page fault each) or with MADV_POPULATE_WRITE per
2 MiB; the first round gets whatever the kernel has free, the next ones mostly the pages the
round before just gave back.

    bench/profile/fresh-memory.py [touch|populate] [small|huge]    (default: touch small)
"""
import mmap
import sys
import time

GIB = 1 << 30
CHUNK = 2 << 20
MADV_POPULATE_WRITE = 23  # Linux 5.14+
ROUNDS = 3


def main():
    how = sys.argv[1] if len(sys.argv) > 1 else "touch"
    pages = sys.argv[2] if len(sys.argv) > 2 else "small"
    if how not in ("touch", "populate") or pages not in ("small", "huge"):
        sys.exit("usage: fresh-memory.py [touch|populate] [small|huge]")
    for rnd in range(ROUNDS):  # bounded: three mappings of 1 GiB
        m = mmap.mmap(-1, GIB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        m.madvise(mmap.MADV_HUGEPAGE if pages == "huge" else mmap.MADV_NOHUGEPAGE)
        t = time.perf_counter()
        if how == "touch":
            for off in range(0, GIB, 4096):
                m[off] = 1
        else:
            for off in range(0, GIB, CHUNK):
                m.madvise(MADV_POPULATE_WRITE, off, CHUNK)
        print(f"{how} {pages} pages, round {rnd + 1}: {time.perf_counter() - t:.3f} s per GiB")
        m.close()


if __name__ == "__main__":
    main()
