#!/usr/bin/python3
"""Plots train_bench's JSON lines: each run's samples/s through the server as
a share of local training in the same run (ratio_vs_local), one column per
configuration, with the goal of 0.9 drawn across.

  scripts/plot_train_bench.py IN.jsonl OUT.png

Needs gnuplot (scripts/install_deps.sh installs it). Exit codes: 0 written,
1 gnuplot missing or failed, 2 bad arguments or no "ps" lines in IN."""
import json
import os
import sys
import tempfile

import gnuplot_run


def label(d):
    """A configuration's name: what differs between the runs of a results file."""
    parts = [d["consistency"] + (" pipelined" if d.get("pipeline") else ""), d["data_plane"]]
    if d.get("batch", 64) != 64:
        parts.append(f"batch {d['batch']}")
    parts.append(f"pieces {d['pieces']}" if d.get("pieces") else "whole layers")
    if d.get("warmup_steps", 0) == 0:
        parts.append("warm-up timed")
    return ", ".join(parts)


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        runs = [json.loads(l) for l in f if l.strip().startswith("{")]
    # A run with --skip_local has no local reference, so no ratio to plot.
    runs = [d for d in runs if d.get("bench") == "train" and d.get("mode") == "ps" and "ratio_vs_local" in d]
    if not runs:
        print(f"plot_train_bench: no \"ps\" lines in {argv[1]}", file=sys.stderr)
        return 2
    names = []
    for d in runs:
        if label(d) not in names:
            names.append(label(d))
    tmp = tempfile.mkdtemp(prefix="plot-train-bench-")
    data = os.path.join(tmp, "runs.dat")
    with open(data, "w") as f:
        f.writelines(f"{names.index(label(d))} {d['ratio_vs_local']}\n" for d in runs)
    tics = ", ".join(f'"{n}" {i}' for i, n in enumerate(names))
    script = "\n".join([
        "set terminal pngcairo size 1100,560", f"set output '{argv[2]}'", "set grid ytics",
        "set title 'train\\_bench: samples/s through one server / local training, same run (1 worker, batch 64)'",
        "set ylabel 'ratio vs local'", f"set xrange [-0.5:{len(names) - 0.5}]", "set yrange [0:1.1]",
        f"set xtics ({tics}) rotate by 20 right font ',9'", "set bmargin 9", "set lmargin 22", "set key bottom right",
        f"plot '{data}' using 1:2 with points pt 7 ps 1.5 title 'one run', 0.9 with lines dt 2 lw 2 title 'goal 0.9'",
        ""])
    return gnuplot_run.run(script, tmp, "plot_train_bench", argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
