#!/usr/bin/python3
"""Model parallelism across workers: one worker holding a large MLP
against groups of K pipeline stages holding its layers, through the real job
(scripts/launch_job.py: scheduler, servers, ps_worker processes, sync).

    benchmarks/pipeline_bench.py [--layers 784,4096,4096,4096,10] [--stages 2]
        [--micro-batches 1,2,4,8] [--steps 20] [--batch 64] [--servers 1]
        [--bin-dir DIR] [--out DIR]

Runs the 1-stage reference (one worker, the whole model), then one group of
--stages stages for each micro-batch count, each for --steps steps of --batch
rows (one epoch of steps x batch training images). Prints one JSON line per
run and stage, then a summary line per micro-batch count:

  samples_per_s              the group's (the reference's) training rate
  ratio_samples_per_s        against the 1-stage reference of the same run
  bubble                     per stage: time waiting for its neighbours over
                             its compute plus that wait (link_wait / busy)
  peak_rss_bytes             per stage: VmHWM of the training (the data set's
                             loading not counted: the trainer resets the peak first)
  ratio_peak_rss             per stage, against the 1-stage worker's
  link_bytes_per_step        activations and gradients a stage sends per step
  ideal_bubble               (K - 1) / (M + K - 1), GPipe's and 1F1B's bound

and with --out writes OUT/pipeline.jsonl and OUT/pipeline.png (bubble against
M, and peak memory per stage against the 1-stage worker) beside each job's
directory. Exit 1 when a run fails.
Standard library and gnuplot (for the plot) only.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gnuplot_run  # noqa: E402  (from scripts/, the one gnuplot runner)
from launch import preflight  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(prog="pipeline_bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", default="784,4096,4096,4096,10")
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--micro-batches", default="1,2,4,8")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--servers", type=int, default=1)
    p.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--out")
    a = p.parse_args(argv)
    try:
        a.micro = [int(m) for m in a.micro_batches.split(",")]
    except ValueError:
        p.exit(2, f"pipeline_bench: --micro-batches must be integers separated by commas, got '{a.micro_batches}'\n")
    if a.stages < 2 or a.steps < 1 or a.batch < 1 or any(m < 1 or m > a.batch for m in a.micro):
        p.exit(2, "pipeline_bench: need --stages >= 2, --steps >= 1, and micro-batches in [1, --batch]\n")
    return a


def run_job(a, out, stages, micro):
    """One job; returns (summary, done events by rank)."""
    cmd = ["/usr/bin/python3", os.path.join(ROOT, "scripts", "launch_job.py"), "--out", out, "--bin-dir", a.bin_dir,
           "--workers", str(stages), "--servers", str(a.servers), "--epochs", "1", "--stages", str(stages),
           "--micro-batches", str(micro), "--", f"--layers={a.layers}", f"--batch_size={a.batch}",
           f"--train_limit={a.steps * a.batch}", "--test_limit=1000", "--request_timeout=300s"]
    with open(out + ".out", "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    if rc != 0:
        with open(out + ".out") as f:
            sys.stderr.write(f.read()[-3000:])
        raise SystemExit(f"pipeline_bench: the job with {stages} stages, {micro} micro-batches failed (exit {rc})")
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    done = {}
    with open(os.path.join(out, "events.jsonl")) as f:
        for line in f:
            ev = json.loads(line)
            if ev.get("event") == "done":
                done[ev["rank"]] = ev
    return summary, done


def emit(lines, record):
    line = json.dumps(record)
    print(line, flush=True)
    lines.append(line)


def plot(out_dir, a, rows, ref_rss):
    data = os.path.join(out_dir, "pipeline.dat")
    with open(data, "w") as f:
        for r in rows:
            f.write(f"{r['micro_batches']} {r['bubble_mean']:.4f} {r['ideal_bubble']:.4f} "
                    + " ".join(f"{x / ref_rss:.4f}" for x in r["peak_rss_bytes"]) + "\n")
    stage_plots = ", ".join(f"'{data}' using 1:{4 + k} axes x1y2 with linespoints title 'stage {k} peak RSS / 1-stage'"
                            for k in range(a.stages))
    png = os.path.join(out_dir, "pipeline.png")
    script = "\n".join(gnuplot_run.png_terminal(900, 540) + [
        f"set output {gnuplot_run.quote(png)}",
        f"set title 'MLP {a.layers}: {a.stages} pipeline stages against one worker'",
        "set xlabel 'micro-batches per step (M)'", "set logscale x 2", "set ylabel 'bubble (share of stage time idle)'",
        "set y2label 'peak resident memory / 1-stage worker'", "set yrange [0:1]", "set y2range [0:1.2]",
        "set ytics nomirror", "set y2tics", "set key bottom left", "set grid",
        f"plot '{data}' using 1:2 with linespoints lw 2 title 'bubble (mean of stages)', "
        f"'{data}' using 1:3 with lines dt 2 title '(K-1)/(M+K-1)', {stage_plots}"])
    try:
        gnuplot_run.plot(script, png)
    except gnuplot_run.PlotError as e:
        print(f"pipeline_bench: {e}; no plot", file=sys.stderr)


def main(argv):
    a = parse_args(argv)
    a.bin_dir = os.path.abspath(a.bin_dir)
    preflight.require("pipeline_bench", a.bin_dir, ("ps_scheduler", "ps_server", "ps_worker", "ps_export"))
    out_dir = a.out or tempfile.mkdtemp(prefix="pipeline_bench.")
    os.makedirs(out_dir, exist_ok=True)
    lines, rows, t0 = [], [], time.monotonic()
    total = 1 + len(a.micro)

    def progress(i, what):
        elapsed = time.monotonic() - t0
        eta = elapsed / i * (total - i) if i else 0
        print(f"pipeline_bench: run {i + 1}/{total}: {what} ({elapsed:.0f} s so far, eta {eta:.0f} s)",
              file=sys.stderr, flush=True)

    progress(0, "1 stage (reference)")
    ref, ref_done = run_job(a, os.path.join(out_dir, "stages1"), 1, 1)
    ref_rss = ref_done[0]["peak_rss_bytes"]
    emit(lines, {"bench": "pipeline", "stages": 1, "micro_batches": 1, "layers": a.layers,
                 "samples_per_s": ref["samples_per_s"], "peak_rss_bytes": ref_rss, "test_accuracy": ref["test_accuracy"]})
    for i, m in enumerate(a.micro, start=1):
        progress(i, f"{a.stages} stages, {m} micro-batches")
        summary, done = run_job(a, os.path.join(out_dir, f"stages{a.stages}-m{m}"), a.stages, m)
        for k in range(a.stages):
            d = done[k]
            emit(lines, {"bench": "pipeline_stage", "stages": a.stages, "micro_batches": m, "stage": k,
                         "bubble": d["bubble"], "compute_s": d["compute_s"], "link_wait_s": d["link_wait_s"],
                         "server_wait_s": d["wait_s"], "link_bytes_per_step": d["link_bytes_per_step"],
                         "peak_rss_bytes": d["peak_rss_bytes"], "ratio_peak_rss": round(d["peak_rss_bytes"] / ref_rss, 3)})
        row = {"bench": "pipeline", "stages": a.stages, "micro_batches": m, "layers": a.layers,
               "samples_per_s": summary["samples_per_s"],
               "ratio_samples_per_s": round(summary["samples_per_s"] / ref["samples_per_s"], 3),
               "bubble": [done[k]["bubble"] for k in range(a.stages)],
               "bubble_mean": sum(done[k]["bubble"] for k in range(a.stages)) / a.stages,
               "ideal_bubble": round((a.stages - 1) / (m + a.stages - 1), 4),
               "peak_rss_bytes": [done[k]["peak_rss_bytes"] for k in range(a.stages)],
               "ratio_peak_rss": [round(done[k]["peak_rss_bytes"] / ref_rss, 3) for k in range(a.stages)],
               "link_bytes_per_step": sum(done[k]["link_bytes_per_step"] for k in range(a.stages)),
               "test_accuracy": summary["test_accuracy"]}
        emit(lines, row)
        rows.append(row)
    with open(os.path.join(out_dir, "pipeline.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    plot(out_dir, a, rows, ref_rss)
    if a.out:
        print(f"pipeline_bench: results in {out_dir}", file=sys.stderr)
    else:
        shutil.rmtree(out_dir)  # nothing asked to keep them
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
