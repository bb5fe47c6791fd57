#!/usr/bin/python3
"""The same PyTorch model trained through the parameter servers and with
torch.nn.parallel.DistributedDataParallel, side by side, in one run.

    scripts/bench_vs_ddp.sh --out DIR [--epochs 5] [--reps 2] [--workers 2] [--servers 2]
        [--model mlp|cnn] [--batch_size 64] [--lr 2e-3] [--threads 1] [--train_limit N]
        [--bin-dir build/bin]

Both sides run build/bin/ps_torch_worker: the same model (by default the MLP
784-512-256-10), the same data shards, batch per worker, Adam with the same
learning-rate schedule and one thread per process. Through the servers: W
workers and S servers (scripts/train_fashion_mnist.sh, sync), Adam applied by
the servers. DDP: W processes (--ddp, gloo over 127.0.0.1, meeting through a
file in DIR), Adam applied by each process. Runs alternate (DDP first in even
repetitions, the servers first in odd ones); samples/s is the same figure for
both: all workers' samples over the longest worker's wall time from its first
step to its last (launch_job's summary.json). The figures are medians over
the repetitions.

DIR gets results.json (ps_samples_per_s, ddp_samples_per_s, ratio, the test
accuracies, every run), results.png (test accuracy against wall time, and
samples/s of every run), one directory per run with its logs. Exit 0 when both
sides ran (the goal is reported, not enforced), 1 when a run failed, 2 for
bad options.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import gnuplot_run
from launch import preflight

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUN_DEADLINE_S = 1800.0  # one run of either side, start to exit
GOAL_RATIO = 1.2


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench_vs_ddp.sh", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--train_limit", type=int, default=0)
    p.add_argument("--bin-dir", dest="bin_dir", default=os.path.join(ROOT, "build", "bin"))
    a = p.parse_args(argv)
    if min(a.epochs, a.reps, a.workers, a.servers, a.batch_size, a.threads) < 1 or a.lr <= 0 or a.train_limit < 0:
        p.error("--epochs, --reps, --workers, --servers, --batch_size and --threads must be positive, --lr > 0")
    preflight.require("bench_vs_ddp", a.bin_dir, ("ps_scheduler", "ps_server", "ps_torch_worker", "ps_export"))
    return a


def worker_flags(a):
    flags = [f"--model={a.model}", f"--epochs={a.epochs}", f"--batch_size={a.batch_size}", f"--lr={a.lr}",
             f"--threads={a.threads}"]
    return flags + ([f"--train_limit={a.train_limit}"] if a.train_limit else [])


def say(text):
    print(text, flush=True)


def run_ps(a, out):
    """One job through the servers; its summary.json and accuracy curve."""
    cmd = [os.path.join(HERE, "train_fashion_mnist.sh"), "--worker-binary", "ps_torch_worker",
           f"--workers={a.workers}", f"--servers={a.servers}", "--consistency=sync", f"--epochs={a.epochs}",
           f"--bin-dir={a.bin_dir}", f"--out={out}", "--"] + worker_flags(a)
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, timeout=RUN_DEADLINE_S)
    summary_path = os.path.join(out, "summary.json")
    if not os.path.isfile(summary_path):  # exit 1 for a missing plot alone still leaves a summary
        raise RuntimeError(f"the run through the servers failed (exit {r.returncode}); logs in {out}")
    with open(summary_path) as f:
        s = json.load(f)
    curve = []
    with open(os.path.join(out, "metrics.csv")) as f:
        for line in f.read().splitlines()[1:]:
            wall, _epoch, _step, _loss, acc = line.split(",")[:5]
            curve.append((float(wall), float(acc)))
    return {"samples_per_s": s["samples_per_s"], "test_accuracy": s["test_accuracy"],
            "train_wall_s": s["train_wall_s"], "curve": curve}


def stop(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    end = time.monotonic() + 10
    for p in procs:
        try:
            p.wait(max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_ddp(a, out):
    """W DistributedDataParallel processes; the same figures from their events."""
    os.makedirs(out, exist_ok=True)
    store = os.path.abspath(os.path.join(out, "ddp-store"))  # file:// takes an absolute path
    if os.path.exists(store):
        os.remove(store)
    logs = [open(os.path.join(out, f"worker-{r}.log"), "w") for r in range(a.workers)]
    cmd = [os.path.join(a.bin_dir, "ps_torch_worker"), f"--ddp=file://{store}", f"--world_size={a.workers}"]
    # Rank 0's events are read as they come; the others' go to their logs.
    procs = [subprocess.Popen(cmd + [f"--rank={r}"] + worker_flags(a), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE if r == 0 else logs[r], stderr=subprocess.STDOUT if r else logs[r],
                              text=True) for r in range(a.workers)]
    done, curve, t0 = {}, [], time.monotonic()
    try:
        for line in procs[0].stdout:  # rank 0 reports progress and evaluations
            logs[0].write(line)
            ev = json.loads(line) if line.startswith("{") else {}
            if ev.get("event") == "progress":
                say(f"ddp: epoch {ev['epoch']}/{ev['epochs']} step {ev['step']}/{ev['total_steps']} "
                    f"loss {ev['loss']:.3f} {ev['samples_per_s']:.0f} samples/s (rank 0) eta {ev['eta_s']:.0f}s")
            elif ev.get("event") == "eval":
                curve.append((ev["elapsed_s"], ev["test_accuracy"]))
            elif ev.get("event") == "done":
                done[0] = ev
            if time.monotonic() - t0 > RUN_DEADLINE_S:
                raise RuntimeError(f"DDP did not finish in {RUN_DEADLINE_S:.0f} s")
        for p in procs:
            p.wait(timeout=max(1.0, RUN_DEADLINE_S - (time.monotonic() - t0)))
    finally:
        stop(procs)
        for f in logs:
            f.close()
    for r in range(1, a.workers):
        with open(os.path.join(out, f"worker-{r}.log")) as f:
            done.update({r: json.loads(x) for x in f if x.startswith('{"event": "done"')})
    failed = [r for r, p in enumerate(procs) if p.returncode != 0 or r not in done]
    if failed:
        raise RuntimeError(f"DDP rank(s) {failed} failed (exit {[procs[r].returncode for r in failed]}); logs in {out}")
    wall = max(d["wall_s"] for d in done.values())
    return {"samples_per_s": round(sum(d["samples"] for d in done.values()) / wall, 1),
            "test_accuracy": done[0]["test_accuracy"], "train_wall_s": wall, "curve": curve}


def plot(out, results):
    """results.png: accuracy against wall time (first repetition of each) and
    samples/s of every run (gnuplot, as launch_job's plots)."""
    data = os.path.join(out, "curves.dat")
    with open(data, "w") as f:
        for side in ("ps", "ddp"):
            f.write(f"# {side}\n" + "".join(f"{w} {acc}\n" for w, acc in results["runs"][side][0]["curve"]) + "\n\n")
    bars = os.path.join(out, "runs.dat")
    with open(bars, "w") as f:
        for i, (ps, ddp) in enumerate(zip(results["runs"]["ps"], results["runs"]["ddp"])):
            f.write(f"{i} {ps['samples_per_s']} {ddp['samples_per_s']}\n")
    png = os.path.join(out, "results.png")
    title = f"{results['config']['model']}, {results['config']['workers']} workers, batch {results['config']['batch_size']}"
    q = gnuplot_run.quote
    script = "\n".join(gnuplot_run.png_terminal(1200, 480) + [
        f"set output {q(png)}", "set multiplot layout 1,2",
        f"set title {q(f'test accuracy ({title})')}", "set xlabel 'wall time of rank 0 (s)'", "set ylabel 'test accuracy'",
        "set grid", "set key bottom right",
        f"plot {q(data)} index 0 using 1:2 with linespoints lw 2 pt 7 title 'through the servers (sync)', "
        f"'' index 1 using 1:2 with linespoints lw 2 pt 7 title 'PyTorch DDP (gloo)'",
        f"set title 'samples/s per repetition (ratio {results['ratio']:.2f})'", "set xlabel 'repetition'",
        "set ylabel 'samples/s'", "set style data histogram", "set style histogram cluster gap 1",
        "set style fill solid 0.8", "set yrange [0:*]", "set key below",
        f"plot {q(bars)} using 2:xtic(1) title 'through the servers', '' using 3 title 'PyTorch DDP'",
        "unset multiplot", ""])
    try:
        gnuplot_run.plot(script, png)
    except gnuplot_run.PlotError as e:
        say(f"bench_vs_ddp: {e}; no plot")
        return False
    return True


def main(argv):
    a = parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    runs = {"ps": [], "ddp": []}
    for rep in range(a.reps):
        for side in (("ddp", "ps") if rep % 2 == 0 else ("ps", "ddp")):
            out = os.path.join(a.out, f"{side}-{rep}")
            say(f"bench_vs_ddp: repetition {rep + 1}/{a.reps}: "
                f"{'through the servers' if side == 'ps' else 'PyTorch DDP'} -> {out}")
            try:
                r = run_ps(a, out) if side == "ps" else run_ddp(a, out)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                say(f"bench_vs_ddp: {e}")
                return 1
            say(f"bench_vs_ddp: {side}: {r['samples_per_s']:.0f} samples/s, test accuracy {r['test_accuracy']:.4f}")
            runs[side].append(r)
    med = {side: statistics.median(r["samples_per_s"] for r in runs[side]) for side in runs}
    acc = {side: statistics.median(r["test_accuracy"] for r in runs[side]) for side in runs}
    results = {
        "ps_samples_per_s": med["ps"], "ddp_samples_per_s": med["ddp"], "ratio": round(med["ps"] / med["ddp"], 3),
        "ratios_per_repetition": [round(p["samples_per_s"] / d["samples_per_s"], 3)
                                  for p, d in zip(runs["ps"], runs["ddp"])],
        "ps_test_accuracy": acc["ps"], "ddp_test_accuracy": acc["ddp"],
        "accuracy_difference_points": round(100 * (acc["ps"] - acc["ddp"]), 2),
        "goal": {"ratio_at_least": GOAL_RATIO, "accuracy_within_points": 0.5},
        "config": {"model": a.model, "workers": a.workers, "servers": a.servers, "epochs": a.epochs,
                   "batch_size": a.batch_size, "lr": a.lr, "optimizer": "adam (cosine to 5%)",
                   "threads_per_process": a.threads, "train_limit": a.train_limit, "reps": a.reps},
        "runs": runs,
    }
    results["goal"]["met"] = (results["ratio"] >= GOAL_RATIO and abs(results["accuracy_difference_points"]) <= 0.5)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    plot(a.out, results)
    say(f"bench_vs_ddp: through the servers {med['ps']:.0f} samples/s, DDP {med['ddp']:.0f}: "
        f"ratio {results['ratio']:.2f} (goal >= {GOAL_RATIO}); test accuracy {acc['ps']:.4f} vs {acc['ddp']:.4f}")
    say(f"bench_vs_ddp: {os.path.join(a.out, 'results.json')}, {os.path.join(a.out, 'results.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
