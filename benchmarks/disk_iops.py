#!/usr/bin/python3
"""The disk's own random-read rate past the page cache, the reference for
table_disk_bench's disk_direct mode (JSON lines on stdout, one per depth):
4 KiB reads with O_DIRECT at random 4 KiB-aligned offsets of a file of
--mb MiB, from 1, 8 and 32 threads at once (--depths). A row read from the
tables' disk tier with --table_disk_direct_io is one such read.

    benchmarks/disk_iops.py [--dir /tmp] [--mb 512] [--seconds 3] [--depths 1,8,32]

The file is written first (random bytes, so that no layer can skip it) and
removed at the end, also on an error.
"""

import argparse
import json
import mmap
import os
import random
import sys
import tempfile
import threading
import time

BLOCK = 4096


def read_rate(fd, blocks, depth, seconds):
    counts = [0] * depth
    stop = time.monotonic() + seconds

    def reader(k):
        buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT needs
        rng = random.Random(k)
        n = 0
        while time.monotonic() < stop:
            os.preadv(fd, [buf], rng.randrange(blocks) * BLOCK)
            n += 1
        counts[k] = n

    start = time.monotonic()
    threads = [threading.Thread(target=reader, args=(k,)) for k in range(depth)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - start)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default="/tmp")
    p.add_argument("--mb", type=int, default=512)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--depths", default="1,8,32")
    a = p.parse_args()
    try:
        depths = [int(d) for d in a.depths.split(",")]
    except ValueError:
        p.error(f"--depths: {a.depths!r} is not a comma list of thread counts")
    if a.mb < 1 or a.seconds <= 0 or any(d < 1 or d > 256 for d in depths):
        p.error("--mb >= 1, --seconds > 0 and --depths in [1, 256] please")
    fd_file, path = tempfile.mkstemp(prefix="ps-disk-iops-", dir=a.dir)
    try:
        with os.fdopen(fd_file, "wb") as f:
            for _ in range(a.mb):
                f.write(os.urandom(1 << 20))
            f.flush()
            os.fsync(f.fileno())
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            for depth in depths:
                rate = read_rate(fd, a.mb * (1 << 20) // BLOCK, depth, a.seconds)
                print(json.dumps({"bench": "disk_iops", "dir": a.dir, "file_mb": a.mb, "threads": depth,
                                  "reads_per_s": round(rate), "read_bytes": BLOCK}), flush=True)
                print(f"disk_iops: {depth} threads: {rate:.0f} reads/s", file=sys.stderr)
        finally:
            os.close(fd)
    except OSError as e:
        sys.exit(f"disk_iops: {e}")
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
