#!/usr/bin/python3
"""The click-through benchmark: a DLRM-style model (build/bin/ps_torch_ctr_worker,
26 embedding tables over a 10^9 id space, 13 numeric features, a dense MLP,
synthetic clicks from a fixed hidden model) trained three ways in one run.

    scripts/train_ctr.sh [--workers 2] [--servers 2] [--epochs 1] [--train-samples 400000]
        [--test-samples 50000] [--budget-mb 64] [--runs sync,hybrid,torch] [--out DIR]
        [--bin-dir build/bin] [-- EXTRA_WORKER_FLAGS...]

- sync: through the parameter servers (scripts/train_fashion_mnist.sh with
  --worker-binary ps_torch_ctr_worker), everything in sync; each server has
  --budget-mb of memory and keeps the rows beyond it on its disk tier
  (--table-disk-dir DIR/sync/tables).
- hybrid: the same with the tables async under the sync dense layers
  (--table_consistency=async: PERSIA's hybrid).
- torch: PyTorch alone: DistributedDataParallel (gloo) over the same workers,
  each feature's ids hashed into as many nn.EmbeddingBag rows as the servers'
  budgets hold (rows and Adagrad state: servers x budget / (26 x dim x 8)).

Every run trains on the same samples (--train-samples per epoch over all
workers, --batch_size 256 per worker) and is evaluated by rank 0 on the same
--test-samples. DIR gets summary.json (the sync run's test_auc, table_rows
and samples_per_s, the other runs' beside them, their ratios and AUC
differences, rows_over_budget), metrics.csv (one row per run and epoch) and
auc.png (test AUC and samples/s per run), one directory per run with its
logs. Exit 0 when every run finished (the goals are reported, not
enforced), 1 when one failed, 2 for bad options, 130 interrupted.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import gnuplot_run
from launch import preflight, procs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TABLES = 26
RUN_DEADLINE_S = 3600.0


def say(text):
    print(text, flush=True)


def parse_args(argv):
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(prog="train_ctr.sh", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    positive = lambda v: int(v) if int(v) >= 1 else p.error(f"{v}: must be >= 1")  # noqa: E731
    p.add_argument("--workers", type=positive, default=2)
    p.add_argument("--servers", type=positive, default=2)
    p.add_argument("--epochs", type=positive, default=1)
    p.add_argument("--train-samples", type=positive, default=400000)
    p.add_argument("--test-samples", type=positive, default=50000)
    p.add_argument("--budget-mb", type=positive, default=64, help="each server's memory (--max_memory_mb)")
    p.add_argument("--dim", type=positive, default=16, help="row width of every table")
    p.add_argument("--runs", default="sync,hybrid,torch", help="comma list of sync, hybrid, torch")
    p.add_argument("--out", default="", help="default: out/ctr-<date> in the repository")
    p.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    a = p.parse_args(argv)
    a.runs = [r for r in a.runs.split(",") if r]
    if not a.runs or any(r not in ("sync", "hybrid", "torch") for r in a.runs):
        p.error(f"--runs: '{','.join(a.runs)}' is not a list of sync, hybrid, torch")
    if a.budget_mb < 8:
        p.error(f"--budget-mb {a.budget_mb}: at least 8 (the disk tier's store takes 4 of it)")
    preflight.require("train_ctr.sh", a.bin_dir, ("ps_scheduler", "ps_server", "ps_torch_ctr_worker", "ps_export"))
    a.out = os.path.abspath(a.out or os.path.join(ROOT, "out", time.strftime("ctr-%Y%m%d-%H%M%S")))
    a.extra = extra
    return a


def worker_flags(a):
    return [f"--train_samples={a.train_samples}", f"--test_samples={a.test_samples}", f"--dim={a.dim}",
            "--progress_every=5s"] + a.extra


def buckets(a):
    """Rows per hashed table that the servers' budgets hold: a row and its Adagrad state."""
    return max(1, a.servers * (a.budget_mb << 20) // (TABLES * a.dim * 4 * 2))


def run_servers(a, name):
    """A job through the servers; its launch_job summary."""
    out = os.path.join(a.out, name)
    cmd = [os.path.join(HERE, "train_fashion_mnist.sh"), "--worker-binary", "ps_torch_ctr_worker",
           "--bin-dir", a.bin_dir, "--workers", str(a.workers), "--servers", str(a.servers),
           "--epochs", str(a.epochs), "--consistency", "sync", "--out", out,
           "--table-disk-dir", os.path.join(out, "tables"), f"--server-flag=--max_memory_mb={a.budget_mb}",
           "--server-flag=--table_disk_cache_mb=4", "--"] + worker_flags(a)
    if name == "hybrid":
        cmd.append("--table_consistency=async")
    say(f"train_ctr: {name}: {' '.join(cmd)}")
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, timeout=RUN_DEADLINE_S)
    if r.returncode != 0:
        raise RuntimeError(f"{name}: the job exited {r.returncode}; logs in {out}")
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    with open(os.path.join(out, "events.jsonl")) as f:
        evals = [e for e in map(json.loads, f) if e.get("event") == "eval"]
    return {"test_auc": s["test_auc"], "test_accuracy": s["test_accuracy"], "samples_per_s": s["samples_per_s"],
            "train_wall_s": s["train_wall_s"], "table_rows": s.get("table_rows", 0),
            "table_disk_rows": s.get("table_disk_rows", 0), "evals": evals, "dir": out}


def run_torch(a):
    """W DistributedDataParallel processes; the same figures from their events."""
    out = os.path.join(a.out, "torch")
    os.makedirs(out, exist_ok=True)
    store = os.path.join(out, "ddp-store")
    if os.path.exists(store):
        os.remove(store)
    cmd = [os.path.join(a.bin_dir, "ps_torch_ctr_worker"), f"--ddp=file://{store}", f"--world_size={a.workers}",
           f"--buckets={buckets(a)}"] + worker_flags(a)
    say(f"train_ctr: torch: {' '.join(cmd)} --rank=R")
    logs = [open(os.path.join(out, f"worker-{r}.log"), "w") for r in range(a.workers)]
    workers = [procs.spawn(cmd + [f"--rank={r}"], stdout=logs[r], stderr=subprocess.STDOUT) for r in range(a.workers)]
    try:
        deadline = time.monotonic() + RUN_DEADLINE_S
        for p in workers:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        procs.stop(workers, signal.SIGKILL, grace=0)
        for f in logs:
            f.close()
    done, evals = {}, []
    for r in range(a.workers):
        with open(os.path.join(out, f"worker-{r}.log")) as f:
            for ev in (json.loads(x) for x in f if x.startswith("{")):
                if ev.get("event") == "done":
                    done[r] = ev
                elif ev.get("event") == "eval":
                    evals.append(ev)
    failed = [r for r, p in enumerate(workers) if p.returncode != 0 or r not in done]
    if failed:
        raise RuntimeError(f"torch: rank(s) {failed} failed (exit {[workers[r].returncode for r in failed]}); "
                           f"logs in {out}")
    wall = max(d["wall_s"] for d in done.values())
    return {"test_auc": done[0]["test_auc"], "test_accuracy": done[0]["test_accuracy"],
            "samples_per_s": round(sum(d["samples"] for d in done.values()) / wall, 1), "train_wall_s": wall,
            "buckets": buckets(a), "evals": evals, "dir": out}


def write_metrics(a, runs):
    with open(os.path.join(a.out, "metrics.csv"), "w") as f:
        f.write("run,epoch,step,wall_s,test_auc,test_accuracy,test_loss\n")
        for name, r in runs.items():
            for e in r["evals"]:
                f.write(f"{name},{e['epoch']},{e['step']},{e['elapsed_s']:.3f},{e['test_auc']:.6f},"
                        f"{e['test_accuracy']:.6f},{e['test_loss']:.6f}\n")


def plot(a, runs):
    """auc.png: test AUC and samples/s per run, side by side."""
    data = os.path.join(a.out, "runs.dat")
    with open(data, "w") as f:
        for name, r in runs.items():
            f.write(f"{name} {r['test_auc']} {r['samples_per_s']}\n")
    png = os.path.join(a.out, "auc.png")
    q = gnuplot_run.quote
    title = f"{a.workers} workers, {a.servers} servers of {a.budget_mb} MiB, {a.train_samples} samples x {a.epochs}"
    script = "\n".join(gnuplot_run.png_terminal(1100, 460) + [
        f"set output {q(png)}", "set multiplot layout 1,2", "set style data histogram",
        "set style histogram cluster gap 1", "set style fill solid 0.8", "set grid ytics", "unset key",
        f"set title {q('test AUC (' + title + ')')}", "set yrange [0.5:1]",
        f"plot {q(data)} using 2:xtic(1)",
        "set title 'samples/s'", "set yrange [0:*]", f"plot {q(data)} using 3:xtic(1)", "unset multiplot", ""])
    try:
        gnuplot_run.plot(script, png)
        return png
    except gnuplot_run.PlotError as e:
        say(f"train_ctr: {e}; no plot")
        return None


def summarize(a, runs):
    dim_bytes = a.dim * 4 * 2 + 62  # a row, its Adagrad state, and its bookkeeping (TableShard::RowBytes)
    s = {"workers": a.workers, "servers": a.servers, "epochs": a.epochs, "train_samples": a.train_samples,
         "test_samples": a.test_samples, "budget_mb": a.budget_mb, "dim": a.dim, "tables": TABLES,
         "runs": {n: {k: v for k, v in r.items() if k != "evals"} for n, r in runs.items()}}
    main = runs.get("sync") or runs.get("hybrid")
    if main is not None:
        s.update(test_auc=main["test_auc"], table_rows=main["table_rows"], samples_per_s=main["samples_per_s"],
                 rows_over_budget=round(main["table_rows"] * dim_bytes / (a.servers * (a.budget_mb << 20)), 2))
    if main is not None and "torch" in runs:
        t = runs["torch"]
        s.update(torch_test_auc=t["test_auc"], torch_samples_per_s=t["samples_per_s"], torch_buckets=t["buckets"],
                 auc_minus_torch=round(main["test_auc"] - t["test_auc"], 4),
                 samples_per_s_vs_torch=round(main["samples_per_s"] / t["samples_per_s"], 3))
    if "sync" in runs and "hybrid" in runs:
        h, y = runs["hybrid"], runs["sync"]
        s.update(hybrid_test_auc=h["test_auc"], hybrid_samples_per_s=h["samples_per_s"],
                 hybrid_vs_sync_samples_per_s=round(h["samples_per_s"] / y["samples_per_s"], 3),
                 hybrid_auc_minus_sync=round(h["test_auc"] - y["test_auc"], 4))
    return s


def main(argv):
    a = parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    runs = {}
    try:
        for name in a.runs:
            runs[name] = run_torch(a) if name == "torch" else run_servers(a, name)
            r = runs[name]
            say(f"train_ctr: {name}: test AUC {r['test_auc']:.4f}, {r['samples_per_s']:.0f} samples/s")
    except (RuntimeError, subprocess.TimeoutExpired, OSError, KeyError, ValueError) as e:
        say(f"train_ctr: {e}")
        return 1
    except KeyboardInterrupt:
        return 130
    write_metrics(a, runs)
    summary = summarize(a, runs)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    png = plot(a, runs)
    for k in ("test_auc", "torch_test_auc", "auc_minus_torch", "samples_per_s_vs_torch", "hybrid_vs_sync_samples_per_s",
              "hybrid_auc_minus_sync", "table_rows", "rows_over_budget"):
        if k in summary:
            say(f"train_ctr: {k} {summary[k]}")
    say(f"train_ctr: summary {os.path.join(a.out, 'summary.json')}" + (f", plot {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
