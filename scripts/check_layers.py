#!/usr/bin/env python3
"""Checks that every #include follows the layering of docs/contributing.md's Layout
section: common/ includes no role; scheduler/, server/ and worker/ include
common/ and schemas/ but not each other; inside server/ and worker/, each
folder only the folders below it. Prints each include that breaks it and exits 1. tests/,
benchmarks/ and the unit tests beside the code (*_test.cc, *_testing.h: not
part of any library; their link lines say what they use) may include
anything.

    check_layers.py [SOURCE_ROOT]
"""
import pathlib
import re
import sys

# common/ by concern, each folder over the ones before it (common/CMakeLists.txt).
COMMON = ("common/base", "common/compress", "common/model", "common/placement", "common/wire", "common/net")
BASE = {"common", "schemas", *COMMON}
# folder -> the project folders its files may include (besides its own)
ALLOWED = {
    "schemas": set(),
    "common": {"schemas", *COMMON},
    **{c: {"schemas", *COMMON[:i]} for i, c in enumerate(COMMON)},
    "scheduler": BASE,
    # server/ by concern, each folder over the ones before it (server/CMakeLists.txt).
    "server/optim": BASE,
    "server/disk": BASE,
    "server/store": BASE | {"server/optim", "server/disk"},
    "server/membership": BASE,
    "server/replication": BASE | {"server/optim", "server/disk", "server/store", "server/membership"},
    "server/export": BASE | {"server/optim", "server/disk", "server/store"},
    "server/feed": BASE | {"server/optim", "server/disk", "server/store"},
    "server/serving": BASE | {"server/optim", "server/disk", "server/store", "server/export"},
    "server": BASE | {"server/optim", "server/disk", "server/store", "server/membership", "server/replication",
               "server/feed"},
    "worker/client": BASE,
    "worker/compute": BASE,
    "worker/data": BASE,
    "worker/models": BASE | {"worker/compute", "worker/data"},
    "worker/train": BASE | {"worker/client", "worker/compute", "worker/data", "worker/models"},
    "worker/exact_sum": BASE | {"worker/client"},
    "worker/python": BASE | {"worker/client"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer(path):
    """The most specific folder of ALLOWED that holds `path` (relative), or None."""
    parts = path.parts
    for n in (2, 1):
        key = "/".join(parts[:n])
        if len(parts) > n and key in ALLOWED:
            return key
    return None


def main(root):
    root = pathlib.Path(root)
    broken = []
    files = [p for p in root.rglob("*") if p.suffix in (".h", ".cc", ".cu") and "build" not in p.parts]
    for path in sorted(files):
        rel = path.relative_to(root)
        own = layer(rel)
        if own is None or rel.stem.endswith(("_test", "_testing")):
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m or not (root / m.group(1)).exists():
                continue  # a system or generated header
            target = layer(pathlib.Path(m.group(1)))
            if target is not None and target != own and target not in ALLOWED[own]:
                broken.append(f"{rel}:{n}: {own} includes {m.group(1)} ({target} is not below it)")
    for b in broken:
        print(b)
    print(f"check_layers: {len(files)} files, {len(broken)} includes against the layering")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent))
