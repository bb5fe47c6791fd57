#!/usr/bin/python3
"""Plots pushpull_bench's JSON lines: push+pull goodput and pull p50 latency
against the tensor size, one curve per transport (one server, one worker,
plaintext), with raw ZeroMQ and memcpy for reference.

  scripts/plot_pushpull.py IN.jsonl OUT.png

Needs gnuplot (scripts/install_deps.sh installs it). Exit codes: 0 written,
1 gnuplot missing or failed, 2 bad arguments or no pushpull lines in IN."""
import json
import os
import sys
import tempfile

import gnuplot_run


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def series(lines):
    """{name: [(bytes, gbps, p50_us)]} for every curve to draw."""
    out = {}
    for d in lines:
        single = d.get("servers", 1) == 1 and d.get("workers", 1) == 1 and not d.get("secure", False)
        if d["bench"] == "pushpull" and single:
            out.setdefault(d["transport"], {})[d["bytes"]] = [d["push_pull_gbps"], None]
        elif d["bench"] == "raw_zmq" and d["transport"] != "shm":  # shm's reference is tcp's again
            out.setdefault(f"raw ZeroMQ {d['transport']}", {})[d["bytes"]] = [d["gbps"], d["p50_us"]]
        elif d["bench"] == "memcpy":
            out.setdefault("memcpy", {})[d["bytes"]] = [d["gbps"], None]
    for d in lines:
        single = d.get("servers", 1) == 1 and not d.get("secure", False)
        if d["bench"] == "pull" and single and d["bytes"] in out.get(d["transport"], {}):
            out[d["transport"]][d["bytes"]][1] = d["p50_us"]
    return {name: sorted((b, g, p) for b, (g, p) in pts.items()) for name, pts in out.items()}


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    curves = series(load(argv[1]))
    if not any(name in curves for name in ("tcp", "ipc", "shm")):
        print(f"plot_pushpull: no pushpull lines (one server, one worker) in {argv[1]}", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="plot-pushpull-")
    data = os.path.join(tmp, "curves.dat")
    names = sorted(curves)
    with open(data, "w") as f:
        for name in names:
            f.write(f"# {name}\n" + "".join(f"{b} {g} {p if p is not None else 'NaN'}\n"
                                             for b, g, p in curves[name]) + "\n\n")
    plots_gbps = ", ".join(f"'{data}' index {i} using 1:2 with linespoints lw 2 pt 7 title '{n}'"
                           for i, n in enumerate(names))
    plots_p50 = ", ".join(f"'{data}' index {i} using 1:3 with linespoints lw 2 pt 7 title '{n}'"
                          for i, n in enumerate(names) if n != "memcpy")
    script = "\n".join([
        "set terminal pngcairo size 1200,480", f"set output '{argv[2]}'", "set multiplot layout 1,2",
        "set logscale x 2", "set format x '%.0b %BB'", "set grid", "set key top left", "set xlabel 'tensor bytes'",
        "set title 'push+pull goodput (1 server, 1 worker)'", "set ylabel 'GB/s'", "set logscale y",
        f"plot {plots_gbps}",
        "set title 'round trip p50: pull (raw ZeroMQ: echo)'", "set ylabel 'microseconds'", "set logscale y",
        f"plot {plots_p50}",
        "unset multiplot", ""])
    return gnuplot_run.run(script, tmp, "plot_pushpull", argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
