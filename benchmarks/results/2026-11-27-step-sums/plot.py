"""Plots the MLP's samples/s with two copies of each slice over one, per
network and build (benchmarks/results/2026-11-27-step-sums/mlp.jsonl):
ratios.png beside this file. Run from the repository root with Debian's
python3:

    /usr/bin/python3 benchmarks/results/2026-11-27-step-sums/plot.py
"""
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scripts"))
import gnuplot_run  # noqa: E402

CASES = [(None, "loopback, 2 workers"), ("1gbit", "1 Gbit/s emulated, 4 workers"),
         ("100mbit", "100 Mbit/s emulated, 4 workers")]


def ratios(lines, rate, build):
    """The pairs' ratios of samples/s with two copies over one."""
    return [o["ratio_vs_1_replica"] for o in lines
            if o.get("rate") == rate and o["build"] == build and "ratio_vs_1_replica" in o]


def main():
    lines = [json.loads(l) for l in open(os.path.join(HERE, "mlp.jsonl"))]
    dat = os.path.join(HERE, "ratios.dat")
    with open(dat, "w") as f:
        for rate, label in CASES:  # a data file's strings in double quotes
            pushes, sums = ratios(lines, rate, "pushes"), ratios(lines, rate, "sums")
            f.write(f"\"{label}\" {statistics.median(pushes):.3f} {statistics.median(sums):.3f}\n")
    png = os.path.join(HERE, "ratios.png")
    script = "\n".join(gnuplot_run.png_terminal(1000, 520) + [
        f"set output {gnuplot_run.quote(png)}",
        "set title 'MLP, 2 servers, sync: samples/s with 2 copies over 1 (median of 2 pairs)'",
        "set ylabel 'ratio to one copy'", "set style data histograms", "set style histogram clustered gap 1",
        "set style fill solid 0.8 border -1", "set yrange [0:1.2]", "set key top right", "set grid ytics",
        "set xtics font ',9'",
        "set arrow from graph 0, first 0.75 to graph 1, first 0.75 nohead dashtype 2",
        f"plot {gnuplot_run.quote(dat)} using 2:xtic(1) title 'each push forwarded (ca8d9de)', "
        "'' using 3 title 'each step forwarded once, as its sum'"])
    gnuplot_run.plot(script, png)
    print(png)


if __name__ == "__main__":
    main()
