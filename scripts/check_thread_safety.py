#!/usr/bin/env python3
"""Runs clang's thread-safety analysis (-Wthread-safety, as errors) over the
project's library and binary sources, with the flags of the build's
compile_commands.json: every ABSL_GUARDED_BY field touched without its lock
and every ABSL_EXCLUSIVE_LOCKS_REQUIRED function called without it is an
error naming the file and line. Syntax only (no code is generated), in
parallel; prints each error and exits 1 if any (77, saying why, without clang).

    check_thread_safety.py BUILD_DIR [--clang clang++] [--jobs N]
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

# The folders whose sources are analysed: the roles and what they share
# (tests and benchmarks hold no locks of their own worth checking); of them,
# the sources that lock or include a project header that does.
FOLDERS = ("common/", "scheduler/", "server/", "worker/")
LOCKING = re.compile(r"absl::Mutex|ABSL_GUARDED_BY|ABSL_EXCLUSIVE_LOCKS_REQUIRED|ABSL_LOCKS_EXCLUDED")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# g++ options clang does not take.
DROP = {"-fno-trapping-math"}


def command(entry, clang):
    """clang's syntax-only command for one compile_commands.json entry."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out = [clang, "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety", "-Wno-unknown-warning-option"]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c"):
            skip = a == "-o"
            continue
        if a in DROP or a == entry["file"]:
            continue
        out.append(a)
    return out + [entry["file"]]


def locks(path, root, seen=None):
    """Whether `path` or a project header it includes (at any depth) locks."""
    seen = set() if seen is None else seen
    if path in seen or not os.path.exists(path):
        return False
    seen.add(path)
    text = open(path, errors="replace").read()
    if LOCKING.search(text):
        return True
    return any(locks(os.path.join(root, h), root, seen) for h in INCLUDE.findall(text))


def analyse(entry, clang):
    cmd = command(entry, clang)
    p = subprocess.run(cmd, cwd=entry["directory"], capture_output=True, text=True)
    return entry["file"], p.returncode, p.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build_dir")
    ap.add_argument("--clang", default="clang++")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    if shutil.which(a.clang) is None:
        print(f"check_thread_safety: SKIP: no {a.clang} (scripts/install_deps.sh installs clang)")
        return 77
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(a.build_dir, "compile_commands.json")) as f:
        entries = json.load(f)
    chosen = []
    for e in entries:
        rel = os.path.relpath(e["file"], root)
        if rel.startswith(FOLDERS) and rel.endswith(".cc") and not rel.endswith("_test.cc") and locks(e["file"], root):
            chosen.append(e)
    if not chosen:
        sys.exit(f"check_thread_safety: no sources of {FOLDERS} in {a.build_dir}/compile_commands.json")
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for path, rc, err in pool.map(lambda e: analyse(e, a.clang), chosen):
            if rc != 0:
                failed += 1
                print(f"--- {os.path.relpath(path, root)}\n{err}", end="")
    print(f"check_thread_safety: {len(chosen)} sources, {failed} with errors")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
