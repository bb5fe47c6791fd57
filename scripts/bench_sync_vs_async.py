#!/usr/bin/python3
"""Trains Fashion-MNIST once per update mode and compares them.

    bench_sync_vs_async.sh [--workers N] [--servers S] [--epochs E]
                           [--straggler RANK:FACTOR] [--network loopback|emulated]
                           [--modes sync,async,ssp:1,ssp:4] [--replicas 1,2]
                           [--compressions none,bf16,topk:0.01] [--rates 100mbit,1gbit,10gbit]
                           [--out DIR] ...

Every mode trains the same model on the same data with the same seed, batch
size and number of epochs (scripts/launch_job.py, one job after the other).
For each mode it reports: the time to reach 0.80 and 0.85 test accuracy (rank
0 evaluates about --evals times during the run), the final accuracy, samples/s
(the sum of every worker's own pace, and the whole job's samples over its
training time), the share of time workers were blocked waiting on the network
(the sync barrier, the ssp bound, or the transfer itself), and the staleness
of the updates the servers applied (mean, p99, max).

With --replicas 1,2 each mode runs once per K (ps_scheduler --replicas=K:
every slice on K servers, each update applied on every copy before the
worker hears of it); the lines of K > 1 carry ratio_vs_1_replica, their
samples/s over the same mode's with one copy.

With --compressions (ps_worker --compression: none, fp16, bf16, topk:R,
randomk:R, onebit) each run is made once per compressor, and with --rates
(--network emulated) once per link rate; the lines of a compressor other
than none carry ratio_vs_uncompressed and accuracy_delta_vs_uncompressed
(against none at the same mode, copies and rate), and DIR/compression.png
plots samples/s and final accuracy per compressor against the link rate.

Output: one JSON line per run on stdout; DIR/results.json, DIR/summary.md (a
table) and DIR/accuracy_vs_time.png (one curve per mode); each job's own
files under DIR/runs/<mode>/. Progress goes to stderr.

Standard library only (Debian's /usr/bin/python3).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

import gnuplot_run
from launch import preflight

HERE = os.path.dirname(os.path.abspath(__file__))
MARKS = ("0.80", "0.85")   # launch_job.py's time_to_accuracy_s keys
TRAIN_IMAGES = 60000


def positive_int(text):
    if not re.fullmatch(r"[1-9][0-9]*", text):
        raise argparse.ArgumentTypeError(f"must be a positive integer, got '{text}'")
    return int(text)


def modes(text):
    out = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in out if not re.fullmatch(r"sync|async|ssp:[0-9]+", m)]
    if not out or bad:
        raise argparse.ArgumentTypeError(f"modes must be a comma list of sync, async, ssp:K; got '{text}'")
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"a mode is listed twice in '{text}'")
    return out


def replica_counts(text):
    out = [t.strip() for t in text.split(",") if t.strip()]
    if not out or any(not re.fullmatch(r"[1-9][0-9]*", t) for t in out):
        raise argparse.ArgumentTypeError(f"replicas must be a comma list of positive integers, got '{text}'")
    return [int(t) for t in out]


COMPRESSION = (r"(none|fp16|bf16|(topk|randomk):(0?\.[0-9]+|1(\.0*)?)|onebit)"
               r"(,(pull=(none|fp16|bf16|delta)|warmup=[0-9]+))*")  # ps_worker refuses what repeats


def compressions(text):
    out = [c.strip() for c in re.split(r",(?!pull=|warmup=)", text) if c.strip()]
    bad = [c for c in out if not re.fullmatch(COMPRESSION, c)]
    if not out or bad:
        raise argparse.ArgumentTypeError(f"compressions must be a comma list of none, fp16, bf16, topk:R, randomk:R, "
                                         f"onebit (0 < R <= 1), each maybe with ,pull=none|fp16|bf16|delta and ,warmup=N; got '{text}'")
    return out


def rates(text):
    out = [r.strip() for r in text.split(",") if r.strip()]
    if not out or any(rate_bps(r) is None for r in out):
        raise argparse.ArgumentTypeError(f"rates must be a comma list like 100mbit,1gbit; got '{text}'")
    return out


def rate_bps(rate):
    """tc's rate ("100mbit", "1gbit", "500kbit") in bits per second; None when not one."""
    m = re.fullmatch(r"([0-9]+(\.[0-9]*)?)([kmg]?)bit", rate)
    return None if not m else float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(3)]


def straggler(text):
    m = re.fullmatch(r"([0-9]+):([0-9]+(\.[0-9]*)?)", text)
    if not m or not 1 <= float(m.group(2)) <= 1000:
        raise argparse.ArgumentTypeError(f"must be RANK:FACTOR with FACTOR in [1, 1000], e.g. 1:3; got '{text}'")
    return text


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench_sync_vs_async.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=positive_int, default=2)
    p.add_argument("--servers", type=positive_int, default=2)
    p.add_argument("--epochs", type=positive_int, default=3)
    p.add_argument("--modes", type=modes, default=modes("sync,async,ssp:1,ssp:4"))
    p.add_argument("--replicas", type=replica_counts, default=[1],
                   help="copies of every slice, a comma list: one run per mode and count (at most --servers)")
    p.add_argument("--straggler", type=straggler, default=None,
                   help="RANK:FACTOR: worker RANK computes FACTOR times slower (all modes)")
    p.add_argument("--network", choices=("loopback", "emulated"), default="loopback")
    p.add_argument("--rate", default="1gbit", help="emulated network: link rate")
    p.add_argument("--rates", type=rates, default=None,
                   help="emulated network: one run per link rate, a comma list (instead of --rate)")
    p.add_argument("--compressions", type=compressions, default=["none"],
                   help="one run per compressor (ps_worker --compression), a comma list")
    p.add_argument("--compress-min-bytes", type=int, default=None,
                   help="ps_worker --compress_min_bytes (tensors under it go uncompressed)")
    p.add_argument("--delay-ms", type=float, default=0.2, help="emulated network: link delay")
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--seed", type=positive_int, default=1)
    p.add_argument("--evals", type=positive_int, default=15, help="evaluations by rank 0 during each run")
    p.add_argument("--train-limit", type=positive_int, default=None, help="train on the first N images (smoke runs)")
    p.add_argument("--test-limit", type=positive_int, default=None, help="evaluate on the first N test images")
    p.add_argument("--out", default=None, help="results directory (default out/sync-vs-async-DATE-TIME)")
    p.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build", "bin"))
    a = p.parse_args(argv)
    if a.straggler and int(a.straggler.split(":")[0]) >= a.workers:
        p.error(f"--straggler rank {a.straggler.split(':')[0]} does not exist with {a.workers} workers")
    if rate_bps(a.rate) is None:
        p.error(f"--rate: '{a.rate}' is not like 100mbit or 1gbit")
    if a.rates is not None and a.network != "emulated":
        p.error("--rates needs --network emulated")
    a.rates = a.rates or [a.rate]
    if max(a.replicas) > a.servers:
        p.error(f"--replicas {max(a.replicas)}: more copies than the {a.servers} servers")
    if a.out is None:
        a.out = os.path.join(HERE, "..", "out", time.strftime("sync-vs-async-%Y%m%d-%H%M%S"))
    a.out = os.path.abspath(a.out)
    preflight.require("bench_sync_vs_async", a.bin_dir, ("ps_scheduler", "ps_server", "ps_worker", "ps_export"))
    return a


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def label(a, mode, replicas, compression="none", rate=None):
    out = mode if replicas == 1 else f"{mode} K={replicas}"
    if len(a.compressions) > 1 or compression != "none":
        out += f" {compression}"
    return out + (f" @{rate}" if len(a.rates) > 1 else "")


def run_mode(a, mode, replicas, compression="none", rate=None):
    """Runs one training job; returns (summary dict, metrics path, wall seconds)."""
    rate = rate or a.rate
    name = mode.replace(":", "-") + ("" if replicas == 1 else f"-k{replicas}")
    if len(a.compressions) > 1 or compression != "none":
        name += "-" + re.sub(r"[^A-Za-z0-9.]+", "", compression.replace(",pull=", "-"))
    name += f"-{rate}" if len(a.rates) > 1 else ""
    out = os.path.join(a.out, "runs", name)
    images = a.train_limit or TRAIN_IMAGES
    steps = a.epochs * -(-(images // a.workers) // a.batch_size)
    worker_flags = [f"--batch_size={a.batch_size}", f"--seed={a.seed}",
                    f"--eval_every={max(1, steps // a.evals)}", "--progress_every=2s"]
    if a.straggler:
        worker_flags.append(f"--straggler={a.straggler}")
    if a.train_limit:
        worker_flags.append(f"--train_limit={a.train_limit}")
    if a.test_limit:
        worker_flags.append(f"--test_limit={a.test_limit}")
    if compression != "none":
        worker_flags.append(f"--compression={compression}")
    if a.compress_min_bytes is not None:
        worker_flags.append(f"--compress_min_bytes={a.compress_min_bytes}")
    cmd = [sys.executable, os.path.join(HERE, "launch_job.py"), "--out", out, "--bin-dir", a.bin_dir,
           "--workers", str(a.workers), "--servers", str(a.servers), "--consistency", mode,
           "--epochs", str(a.epochs), "--network", a.network, "--rate", rate, "--delay-ms", str(a.delay_ms),
           f"--scheduler-flag=--replicas={replicas}", "--", *worker_flags]
    t0 = time.monotonic()
    # launch_job's progress (live bars on a terminal) goes to our stderr: stdout is for results.
    rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=sys.stderr).returncode
    wall = time.monotonic() - t0
    if rc != 0:
        raise RuntimeError(f"mode {mode}: launch_job.py exited with {rc}; logs in {out}")
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f), os.path.join(out, "metrics.csv"), wall


def result_line(a, mode, replicas, s, compression="none", rate=None):
    rates = s["worker_samples_per_s"]
    walls, waits = s["worker_wall_s"], s["worker_wait_s"]
    slow = int(a.straggler.split(":")[0]) if a.straggler else None
    others = [r for i, r in enumerate(rates) if i != slow] if slow is not None else rates
    st = s.get("server_stats") or {}
    return {
        "bench": "sync_vs_async",
        "mode": mode,
        "replicas": replicas,
        "compression": compression,
        "rate": rate if a.network == "emulated" else None,
        "workers": a.workers,
        "servers": a.servers,
        "epochs": a.epochs,
        "batch_size": a.batch_size,
        "straggler": a.straggler,
        "network": s.get("network", {"kind": a.network}),
        "final_accuracy": s["test_accuracy"],
        "time_to_0.80_s": s["time_to_accuracy_s"].get(MARKS[0]),
        "time_to_0.85_s": s["time_to_accuracy_s"].get(MARKS[1]),
        "samples_per_s": s["sum_worker_samples_per_s"],
        "job_samples_per_s": s["samples_per_s"],
        "worker_samples_per_s": rates,
        "non_straggler_samples_per_s": round(sum(others) / len(others), 1) if others else None,
        "train_wall_s": s["train_wall_s"],
        "wait_s_mean": round(sum(waits) / len(waits), 3),
        "wait_share": round(sum(w / t for w, t in zip(waits, walls) if t > 0) / len(walls), 4),
        "staleness_mean": st.get("staleness_mean"),
        "staleness_p99": st.get("staleness_p99"),
        "staleness_max": st.get("staleness_max"),
        "eval_s": s.get("eval_s"),
    }


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def write_summary(a, lines, path):
    rows = ["| run | final acc | t→0.80 s | t→0.85 s | samples/s (sum of workers) | per worker | "
            "wait share | staleness mean / p99 / max |",
            "|---|---|---|---|---|---|---|---|"]
    for r in lines:
        rows.append(f"| {label(a, r['mode'], r['replicas'], r['compression'], r['rate'])} | {r['final_accuracy']:.4f} | {fmt(r['time_to_0.80_s'], '.1f')} | "
                    f"{fmt(r['time_to_0.85_s'], '.1f')} | {r['samples_per_s']:.0f} | "
                    f"{' / '.join(f'{x:.0f}' for x in r['worker_samples_per_s'])} | {r['wait_share'] * 100:.1f}% | "
                    f"{fmt(r['staleness_mean'], '.2f')} / {fmt(r['staleness_p99'], 'd')} / {fmt(r['staleness_max'], 'd')} |")
    net = lines[0]["network"] if lines else {"kind": a.network}
    head = [f"# sync vs async vs ssp ({time.strftime('%Y-%m-%d')})", "",
            f"{a.workers} workers, {a.servers} servers, {a.epochs} epochs, batch {a.batch_size}, seed {a.seed}, "
            f"straggler {a.straggler or 'none'}, network {json.dumps(net)}.", "",
            "Times are rank 0's wall time (its evaluations included); samples/s is the sum of each worker's "
            "samples over its own training time; wait share is the mean fraction of a worker's training time "
            "spent blocked on the network.", ""]
    with open(path, "w") as f:
        f.write("\n".join(head + rows) + "\n")


def plot(a, runs, png):
    q = gnuplot_run.quote
    curves = ", ".join(f"{q(csv)} every ::1 using 1:5 with linespoints lw 2 pt 7 ps 0.8 title {q(mode)}"
                       for mode, csv in runs)
    title = (f"Fashion-MNIST: {a.workers} workers, {a.servers} servers, {a.epochs} epochs, "
             f"straggler {a.straggler or 'none'}, {a.network}")
    script = "\n".join(gnuplot_run.png_terminal(960, 600) + [
        f"set output {q(png)}", 'set datafile separator ","', f"set title {q(title)}",
        "set xlabel 'wall time of rank 0 (s)'", "set ylabel 'test accuracy'", "set grid", "set key bottom right",
        "set xrange [0:*]", f"plot {curves}", ""])
    try:
        gnuplot_run.plot(script, png)
    except gnuplot_run.PlotError as e:
        raise RuntimeError(str(e)) from None


def plot_compression(a, lines, png):
    """Samples/s and final accuracy per compressor against the link rate."""
    q = gnuplot_run.quote
    dat = os.path.splitext(png)[0] + ".dat"
    with open(dat, "w") as f:  # one block per compressor: rate_bps samples/s accuracy
        for c in a.compressions:
            f.write(f"# {c}\n")
            for r in lines:
                if r["compression"] == c:
                    f.write(f"{rate_bps(r['rate'] or a.rate):.0f} {r['samples_per_s']:.1f} {r['final_accuracy']:.4f}\n")
            f.write("\n\n")
    logx = ["set logscale x 10", "set format x '%.0s%cbit/s'"] if len(a.rates) > 1 else []
    panel = [f"{q(dat)} index {i} using 1:COL with linespoints lw 2 pt 7 title {q(c)}"
             for i, c in enumerate(a.compressions)]
    script = "\n".join(gnuplot_run.png_terminal(960, 900) + [
        f"set output {q(png)}", "set multiplot layout 2,1", "set grid", "set key outside right", *logx,
        "set xlabel 'link rate (emulated)'",
        f"set title {q(f'Fashion-MNIST MLP, {a.workers} workers, {a.servers} servers, {a.epochs} epochs: samples/s')}",
        "set ylabel 'samples/s (sum of workers)'", "set yrange [0:*]",
        "plot " + ", ".join(x.replace("COL", "2") for x in panel),
        "set title 'final test accuracy'", "set ylabel 'test accuracy'", "set yrange [*:*]",
        "plot " + ", ".join(x.replace("COL", "3") for x in panel), "unset multiplot", ""])
    try:
        gnuplot_run.plot(script, png)
    except gnuplot_run.PlotError as e:
        raise RuntimeError(str(e)) from None


def main(argv):
    a = parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    lines, runs, took = [], [], []
    start = time.monotonic()
    plan = [(mode, k, c, rate) for rate in a.rates for mode in a.modes for k in a.replicas for c in a.compressions]
    one_copy = {}  # (mode, compression, rate) -> samples/s with one copy of each slice
    plain = {}  # (mode, replicas, rate) -> the uncompressed line
    for i, (mode, k, c, rate) in enumerate(plan):
        name = label(a, mode, k, c, rate)
        log(f"run {i + 1}/{len(plan)}: {name}")
        try:
            summary, csv, wall = run_mode(a, mode, k, c, rate)
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            log(f"failed: {e}")
            return 1
        took.append(wall)
        line = result_line(a, mode, k, summary, c, rate)
        if k == 1:
            one_copy[(mode, c, rate)] = line["samples_per_s"]
        elif one_copy.get((mode, c, rate)):
            line["ratio_vs_1_replica"] = round(line["samples_per_s"] / one_copy[(mode, c, rate)], 3)
        if c == "none":
            plain[(mode, k, rate)] = line
        elif (mode, k, rate) in plain:
            base = plain[(mode, k, rate)]
            line["ratio_vs_uncompressed"] = round(line["samples_per_s"] / base["samples_per_s"], 3)
            line["accuracy_delta_vs_uncompressed"] = round(line["final_accuracy"] - base["final_accuracy"], 4)
        lines.append(line)
        runs.append((name, csv))
        print(json.dumps(line), flush=True)
        left = len(plan) - i - 1
        eta = sum(took) / len(took) * left
        log(f"run {i + 1}/{len(plan)} {name} done in {wall:.1f} s: accuracy {line['final_accuracy']:.4f}, "
            f"{line['samples_per_s']:.0f} samples/s; {left} left, eta {eta:.0f} s")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "args": {k: v for k, v in vars(a).items() if k != "bin_dir"},
                   "modes": lines}, f, indent=2)
        f.write("\n")
    write_summary(a, lines, os.path.join(a.out, "summary.md"))
    try:
        plot(a, runs, os.path.join(a.out, "accuracy_vs_time.png"))
        if len(a.compressions) > 1:
            plot_compression(a, lines, os.path.join(a.out, "compression.png"))
    except (RuntimeError, OSError) as e:
        log(str(e))
        return 1
    log(f"all {len(plan)} runs in {time.monotonic() - start:.0f} s; results in {a.out} "
        "(results.json, summary.md, accuracy_vs_time.png" + (", compression.png)" if len(a.compressions) > 1 else ")"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
