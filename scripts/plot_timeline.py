#!/usr/bin/python3
"""Plots a worker's timeline, as `train_bench --overlap --trace_out=FILE`
writes it (the trainer's "span" events): per traced step, when the worker
computed (one bar per step), waited for a layer's parameters (a bar per layer
on the row below) and sent a layer's push (a tick on the row per layer).

  scripts/plot_timeline.py TRACE.jsonl OUT.png

Needs gnuplot (scripts/install_deps.sh installs it). Exit codes: 0 written,
1 gnuplot missing or failed, 2 bad arguments or no span in TRACE."""
import json
import os
import sys
import tempfile

import gnuplot_run


def read_spans(path):
    spans = []
    with open(path) as f:
        for line in f:
            if line.strip().startswith("{"):
                d = json.loads(line)
                if d.get("event") == "span":
                    spans.append(d)
    return spans


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    spans = read_spans(argv[1])
    if not spans:
        print(f"plot_timeline: no span events in {argv[1]}", file=sys.stderr)
        return 2
    t0 = min(s["start_us"] for s in spans)
    layers = 1 + max(s["layer"] for s in spans)
    tmp = tempfile.mkdtemp(prefix="plot-timeline-")
    # Rows, top to bottom: compute, then per layer its waits and its pushes.
    rows = {"compute": layers + 1}
    files = {}
    for kind in ("compute", "wait", "push"):
        files[kind] = os.path.join(tmp, f"{kind}.dat")
        with open(files[kind], "w") as f:
            for s in spans:
                if s["what"] != kind:
                    continue
                y = rows["compute"] if kind == "compute" else layers - s["layer"]
                a, b = (s["start_us"] - t0) / 1e3, (s["end_us"] - t0) / 1e3
                f.write(f"{a} {b} {y} {s['step']}\n")
    tics = [f'"compute" {layers + 1}'] + [f'"layer {l}" {layers - l}' for l in range(layers)]
    script = "\n".join(gnuplot_run.png_terminal(1100, 420) + [
        f"set output {gnuplot_run.quote(argv[2])}",
        "set title 'One worker, traced steps: compute (TrainStep), waits for each layer''s parameters, pushes sent'",
        "set xlabel 'ms since the first traced event'", f"set yrange [0.3:{layers + 1.7}]",
        f"set ytics ({', '.join(tics)})", "set grid xtics", "set key outside bottom center horizontal",
        f"plot {gnuplot_run.quote(files['compute'])} using 1:3:1:2:($3-0.3):($3+0.3) with boxxyerror "
        "fs solid 0.5 lc rgb '#4477aa' title 'compute',"
        f" {gnuplot_run.quote(files['wait'])} using 1:3:1:2:($3-0.15):($3+0.15) with boxxyerror "
        "fs solid 0.8 lc rgb '#ee6677' title 'waiting for parameters',"
        f" {gnuplot_run.quote(files['push'])} using 1:3 with points pt 9 ps 1.5 lc rgb '#228833' title 'push sent'",
        ""])
    return gnuplot_run.run(script, tmp, "plot_timeline", argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
