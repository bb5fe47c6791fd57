#!/usr/bin/python3
"""What a launcher checks before it starts a job: every program it will run
and every Python module its workers import. A missing one is one line that
names it and the command that provides it, and exit code 2, before any
process starts (never a traceback after the training).

As a library:   require(prog, bin_dir, binaries=(...), python_package=..., modules=(...))
From a shell:   preflight.py PROG --bin-dir DIR [--bin NAME]... [--python-package] [--module NAME]...

Standard library only.
"""
import argparse
import importlib.util
import os
import subprocess
import sys

BUILD = "cmake --build build"
# What a new machine runs once: installs the packages, builds every program, trains.
QUICKSTART = "./scripts/quickstart.sh"
# Debian packages of the modules the Python workers import (scripts/install_deps.sh installs them).
DEBIAN_PACKAGES = {"torch": "python3-torch", "numpy": "python3-numpy", "yaml": "python3-yaml",
                   "kubernetes": "python3-kubernetes"}
SYSTEM_PYTHON = "/usr/bin/python3"

# The Python workers are wrappers in bin/ that run a script of the package
# (worker/python/CMakeLists.txt): they need the package and PyTorch.
PYTHON_WORKERS = ("ps_torch_worker", "ps_torch_spam_worker", "ps_torch_ctr_worker")


def python_dir(bin_dir):
    """The package ps of the build whose programs are in bin_dir."""
    return os.path.normpath(os.path.join(bin_dir, "..", "python"))


def missing_binary(bin_dir, name):
    path = os.path.join(bin_dir, name)
    if os.access(path, os.X_OK):
        return None
    return f"{path} is not built: run `{BUILD}` ({QUICKSTART} installs and builds everything on a new machine)"


def missing_package(bin_dir):
    pkg = os.path.join(python_dir(bin_dir), "ps")
    if os.path.isfile(os.path.join(pkg, "__init__.py")) and any(
            f.startswith("_ps") and f.endswith(".so") for f in os.listdir(pkg)):
        return None
    return f"the Python package ps is not built in {pkg}: run `{BUILD}`"


def missing_module(name):
    """None when Debian's python3 can import `name`; asked of that interpreter
    (the python3 first on PATH may be another build without Debian's packages)."""
    if os.path.realpath(sys.executable) == os.path.realpath(SYSTEM_PYTHON):
        found = importlib.util.find_spec(name) is not None
    else:
        found = subprocess.run([SYSTEM_PYTHON, "-c", f"import importlib.util, sys; "
                                f"sys.exit(importlib.util.find_spec({name!r}) is None)"],
                               stdin=subprocess.DEVNULL, capture_output=True).returncode == 0
    if found:
        return None
    package = DEBIAN_PACKAGES.get(name, f"python3-{name}")
    return f"{SYSTEM_PYTHON} cannot import {name} (Debian package {package}): run ./scripts/install_deps.sh"


def problems(bin_dir, binaries=(), python_package=False, modules=()):
    """Every missing thing, as one-line reasons; [] when all is there."""
    if not os.path.isdir(bin_dir):
        return [f"--bin-dir {bin_dir} is not a directory: run `{BUILD}` "
                f"({QUICKSTART} on a new machine), or name the directory that holds the programs"]
    found = [m for m in (missing_binary(bin_dir, b) for b in binaries) if m]
    if python_package or any(b in PYTHON_WORKERS for b in binaries):
        found.append(missing_package(bin_dir))
    if any(b in PYTHON_WORKERS for b in binaries):
        modules = (*modules, "torch", "numpy")
    found += [missing_module(m) for m in dict.fromkeys(modules)]
    return [m for m in found if m]


def require(prog, bin_dir, binaries=(), python_package=False, modules=()):
    """Exits 2 with the first problem, one line on stderr naming `prog`."""
    found = problems(os.path.abspath(bin_dir), binaries, python_package, modules)
    if found:
        print(f"{prog}: {found[0]}", file=sys.stderr, flush=True)
        sys.exit(2)


def main(argv):
    p = argparse.ArgumentParser(prog="preflight.py", description=__doc__.split("\n\n")[0])
    p.add_argument("prog", help="the launcher's name, the prefix of the message")
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--bin", action="append", default=[], metavar="NAME", help="a program that must be in --bin-dir")
    p.add_argument("--python-package", action="store_true", help="the package ps must be built beside --bin-dir")
    p.add_argument("--module", action="append", default=[], metavar="NAME",
                   help="a module Debian's python3 must import")
    a = p.parse_args(argv)
    require(a.prog, a.bin_dir, a.bin, a.python_package, a.module)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
