"""Runs a gnuplot script for the plot_*.py scripts: one place for finding
gnuplot, its errors and the clean-up of the data folder."""
import shutil
import subprocess
import sys


def run(script, tmp, prog, out):
    """Runs `script`, removes folder `tmp`, reports as `prog`; returns the
    exit code (0 written, 1 gnuplot missing or failed)."""
    try:
        r = subprocess.run(["gnuplot"], input=script, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        print(f"{prog}: gnuplot is not installed (scripts/install_deps.sh installs it)", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if r.returncode != 0:
        print(f"{prog}: gnuplot failed: {r.stderr.strip()}", file=sys.stderr)
        return 1
    print(f"{prog}: wrote {out}")
    return 0
