"""Plots push+pull with two copies over one (K = 2 / K = 1) before and after
the backups were reached through shared memory: ratios.png beside this file.

    /usr/bin/python3 benchmarks/results/2026-11-26-replicas-shm/plot_ratios.py
"""
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scripts"))
import gnuplot_run  # noqa: E402


def ratios(path):
    """(transport, bytes) -> median K = 2 / K = 1 over the runs in `path`."""
    by = {}
    for line in open(path):
        row = json.loads(line)
        if row.get("bench") == "pushpull" and row.get("replicas") == 2:
            by.setdefault((row["transport"], row["bytes"]), []).append(row["ratio_vs_1_replica"])
    return {k: statistics.median(v) for k, v in by.items()}


def main():
    before = ratios(os.path.join(HERE, "..", "2026-11-26-replicas", "pushpull.jsonl"))
    after = ratios(os.path.join(HERE, "pushpull.jsonl"))
    data = os.path.join(HERE, "ratios.dat")
    with open(data, "w") as out:
        for transport, size, label in [("tcp", 4194304, "tcp 4 MiB"), ("shm", 4194304, "shm 4 MiB"),
                                       ("tcp", 4096, "tcp 4 KiB"), ("shm", 4096, "shm 4 KiB")]:
            out.write(f'"{label}" {before[(transport, size)]:.3f} {after[(transport, size)]:.3f}\n')
    png = os.path.join(HERE, "ratios.png")
    script = "\n".join(gnuplot_run.png_terminal(800, 480) + [
        f"set output {gnuplot_run.quote(png)}",
        "set title 'push+pull, two copies over one (1 worker, 2 servers; before: one run, after: median of three)'",
        "set ylabel 'K = 2 / K = 1'", "set yrange [0:1]", "set style data histograms",
        "set style histogram clustered gap 1", "set style fill solid 0.8 border -1", "set key top left",
        "set arrow from graph 0, first 0.6 to graph 1, first 0.6 nohead dt 2 lw 2",
        "set label 'goal 0.6' at graph 0.86, first 0.63",
        f"plot {gnuplot_run.quote(data)} using 2:xtic(1) title 'forwards over TCP loopback', "
        "'' using 3 title 'forwards through shared memory'",
    ])
    gnuplot_run.plot(script, png)
    os.remove(data)
    print(png)


if __name__ == "__main__":
    main()
