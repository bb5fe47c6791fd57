#!/usr/bin/python3
"""benchmarks/model_io_bench.py run small (a 200,000-element model, a table
of 20,000 rows of dim 8): exit 0, one "assign" and one "export" JSON line
with positive times and ratios, the values pulled back and the table
exported exactly, and an exporter whose peak memory is a few MiB, not the
table. unittest; each check a subTest.

    model_io_bench_smoke_test.py --bin-dir build/bin --python-dir build/python
"""
import argparse
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_client_test import Checks  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = None


class ModelIoBenchSmoke(Checks, unittest.TestCase):
    def test_small_run(self):
        run = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "benchmarks", "model_io_bench.py"),
                              "--bin-dir", ARGS.bin_dir, "--python-dir", ARGS.python_dir, "--elements", "200000",
                              "--rows", "20000", "--dim", "8", "--reps", "1"],
                             capture_output=True, text=True, timeout=300)
        self.check(run.returncode == 0, f"exit code {run.returncode}: {run.stderr[-800:]}")
        lines = {l["bench"]: l for l in map(json.loads, run.stdout.splitlines())}
        assign, export = lines.get("assign", {}), lines.get("export", {})
        self.check(assign.get("values_pulled_back_exactly") is True and assign.get("ratio_vs_push", 0) > 0,
                   f"assign: {assign}")
        self.check(export.get("exported_exactly") is True and export.get("export_rows_per_s", 0) > 0
                   and export.get("ratio_vs_copy", 0) > 0, f"export: {export}")
        self.check(0 < export.get("exporter_peak_rss_bytes", 0) < 64 << 20,
                   f"the exporter's peak memory is bounded: {export.get('exporter_peak_rss_bytes')} bytes")


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--python-dir", required=True)
    ARGS, rest = p.parse_known_args()
    result = unittest.main(argv=[sys.argv[0], "-v", *rest], exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
