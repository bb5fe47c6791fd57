#!/usr/bin/python3
"""The user's model in and out, measured (JSON lines on stdout):

- "bench":"assign": a model of N float32 parameters (default 100M, 400 MB)
  set from the worker's own values (Client.assign, what register_model and
  ps_worker --init_from do) against pushing the same bytes once as a
  gradient, alternately, on a job of 1 worker and 2 servers on this machine;
  ratio_vs_push = assign time / push time. The values are then pulled back
  and compared bit for bit.
- "bench":"export": a table of R rows of dim D (default 10^7 x 64) loaded
  with Client.load_rows, written to the servers' final checkpoints, then
  exported by ps_export to .npz: rows/s, and the exporter's peak resident
  memory against the table's size; the reference is copying the same
  checkpoint files (cp) in the same run: ratio_vs_copy = export time / copy
  time. The export's ids and rows are checked against what was loaded.

    benchmarks/model_io_bench.py --bin-dir build/bin --python-dir build/python [--elements N]
        [--rows R] [--dim D] [--reps K] [--tmp DIR]

Every process started is stopped by its pid at the end; progress goes to stderr.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from python_client_test import Job  # noqa: E402  (the tests' job harness: processes by pid)


def say(msg):
    print(f"model_io_bench: {msg}", file=sys.stderr, flush=True)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_assign(a, np, ps):
    job = Job(a.bin_dir, 2, 1)
    try:
        client = ps.connect(job.endpoint, request_timeout=600)
        client.register_model({"tensors": [{"name": "w", "shape": [a.elements]}],
                               "optimizer": {"kind": "sgd", "lr": 1e-9}, "consistency": "async"})
        values = np.random.default_rng(1).standard_normal(a.elements, dtype=np.float32)
        grads = np.ones(a.elements, np.float32)
        assign_s, push_s = [], []
        for rep in range(a.reps):
            assign_s.append(timed(lambda: client.assign({"w": values}).wait()))
            push_s.append(timed(lambda: client.push({"w": grads}, rep).wait()))
            say(f"assign rep {rep + 1}/{a.reps}: {assign_s[-1]:.3f} s, push {push_s[-1]:.3f} s")
        client.assign({"w": values}).wait()
        back = np.zeros(a.elements, np.float32)
        client.pull({"w": back}, 0).wait()
        exact = bool(np.array_equal(back, values))
        client.finish()
    finally:
        job.stop()
    best_a, best_p = min(assign_s), min(push_s)
    print(json.dumps({"bench": "assign", "elements": a.elements, "bytes": a.elements * 4, "servers": 2,
                      "assign_s": round(best_a, 4), "push_s": round(best_p, 4),
                      "assign_gb_per_s": round(a.elements * 4 / best_a / 1e9, 3),
                      "ratio_vs_push": round(best_a / best_p, 3), "reps": a.reps,
                      "values_pulled_back_exactly": exact}), flush=True)
    return exact


def load_table(a, np, ps, ckpt):
    """A job whose servers end with the table loaded; returns the ids, rows and the load time."""
    job = Job(a.bin_dir, 2, 1, server_flags=[f"--checkpoint_dir={ckpt}", "--checkpoint_every=0s"])
    try:
        client = ps.connect(job.endpoint, request_timeout=600)
        client.register_model({"tables": [{"name": "emb", "dim": a.dim}], "optimizer": {"kind": "sgd", "lr": 0.1}})
        ids = np.arange(1, a.rows + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        rows = np.random.default_rng(2).standard_normal((a.rows, a.dim), dtype=np.float32)
        load_s = timed(lambda: client.load_rows("emb", ids, rows))
        say(f"loaded {a.rows} rows of dim {a.dim} in {load_s:.1f} s")
        client.finish()
        for p in job.procs[1:]:
            p.wait(timeout=600)  # the servers write their final checkpoints as they stop
    finally:
        job.stop()
    return ids, rows, load_s


def peak_rss_of(cmd):
    """Runs `cmd` from a fresh Python process whose only child it is: (seconds, peak RSS in bytes, output)."""
    probe = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
             "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, r.returncode); "
             "print(r.stdout + r.stderr)")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True, check=True).stdout
    head, _, rest = out.partition("\n")
    seconds, rss, rc = head.split()
    if rc != "0":
        raise SystemExit(f"model_io_bench: {' '.join(cmd)} failed: {rest[-500:]}")
    return float(seconds), int(rss), rest


def bench_export(a, np, ps):
    tmp = tempfile.mkdtemp(prefix="model_io_bench.", dir=a.tmp)
    try:
        ckpt = os.path.join(tmp, "ckpt")
        ids, rows, load_s = load_table(a, np, ps, ckpt)
        ckpt_bytes = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt))
        out = os.path.join(tmp, "table.npz")
        export_s, rss, line = peak_rss_of([os.path.join(a.bin_dir, "ps_export"), f"--checkpoint_dir={ckpt}",
                                           f"--out={out}"])
        say(f"exported in {export_s:.1f} s, peak RSS {rss >> 20} MiB: {line.strip()}")
        copy_s = timed(lambda: shutil.copytree(ckpt, os.path.join(tmp, "copy")))
        m = np.load(out, mmap_mode=None)
        got_ids, got_rows = m["emb.ids"], m["emb.rows"]
        order = np.argsort(got_ids)
        want = np.argsort(ids)
        exact = bool(np.array_equal(got_ids[order], ids[want]) and np.array_equal(got_rows[order], rows[want]))
        table_bytes = a.rows * a.dim * 4
        print(json.dumps({"bench": "export", "rows": a.rows, "dim": a.dim, "servers": 2,
                          "table_bytes": table_bytes, "checkpoint_bytes": ckpt_bytes,
                          "load_rows_s": round(load_s, 2), "load_rows_per_s": round(a.rows / load_s),
                          "export_s": round(export_s, 2), "export_rows_per_s": round(a.rows / export_s),
                          "exporter_peak_rss_bytes": rss, "rss_vs_table": round(rss / table_bytes, 4),
                          "copy_checkpoints_s": round(copy_s, 2), "ratio_vs_copy": round(export_s / copy_s, 3),
                          "exported_exactly": exact}), flush=True)
        return exact
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--python-dir", default=os.path.join(ROOT, "build", "python"))
    p.add_argument("--elements", type=int, default=100_000_000)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--tmp", default=None, help="where the checkpoints and the export go (default: the system's)")
    a = p.parse_args()
    if min(a.elements, a.rows, a.dim, a.reps) < 1:
        p.error("--elements, --rows, --dim and --reps must be positive")
    sys.path.insert(0, a.python_dir)
    import numpy as np
    import ps
    ok = bench_assign(a, np, ps)
    ok = bench_export(a, np, ps) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
