"""Plots the control plane against the job's size, before (whole views sent
to every node on every change), with changes sent as changes (workers see
the servers only), and with the listen backlog raised too: formation time,
and the cluster-view bytes each node receives for one worker's death.
control_plane.png beside this file.

    /usr/bin/python3 benchmarks/results/2026-11-27-control-plane/plot_control_plane.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scripts"))
import gnuplot_run  # noqa: E402


def rows(name):
    return {r["workers"]: r for r in map(json.loads, open(os.path.join(HERE, name))) if r.get("bench") == "control_plane"}


def main():
    before, deltas, after = rows("whole-views.jsonl"), rows("deltas-backlog-100.jsonl"), rows("deltas.jsonl")
    data = os.path.join(HERE, "control_plane.dat")
    with open(data, "w") as out:
        for n in sorted(after):
            b, d, a = before.get(n, {}), deltas.get(n, {}), after[n]
            out.write(f"{n} {b.get('formation_s', 'NaN')} {d.get('formation_s', 'NaN')} {a['formation_s']} "
                      f"{b.get('death_bytes_per_node', 'NaN')} {a['death_bytes_per_node']}\n")
    png = os.path.join(HERE, "control_plane.png")
    q = gnuplot_run.quote
    script = "\n".join(gnuplot_run.png_terminal(1100, 460) + [
        f"set output {q(png)}", "set multiplot layout 1,2 title 'ps\\_scheduler with 64 simulated servers "
        "(2 cores)'", "set logscale x 2", "set xlabel 'simulated workers'", "set key top left Left reverse", "set grid",
        "set title 'formation: first registration to the last node holding its view'", "set ylabel 'seconds'",
        "set arrow 1 from graph 0, first 10 to graph 1, first 10 nohead dt 2", "set yrange [0:14]",
        "set label 1 'goal: 10 s at 4096' at graph 0.6, first 10.4",
        f"plot {q(data)} using 1:2 with linespoints lw 2 pt 7 title 'whole views', "
        "'' using 1:3 with linespoints lw 2 pt 7 title 'changes as changes', "
        "'' using 1:4 with linespoints lw 2 pt 7 title '... and a listen backlog of somaxconn'",
        "unset arrow 1", "unset label 1", "set yrange [*:*]", "set logscale y 10",
        "set title 'one worker dies: view bytes each node receives'", "set ylabel 'bytes per node'",
        f"plot {q(data)} using 1:5 with linespoints lw 2 pt 7 title 'whole views', "
        "'' using 1:6 with linespoints lw 2 pt 7 title 'changes as changes'",
        "unset multiplot",
    ])
    gnuplot_run.plot(script, png)
    os.remove(data)
    print(png)


if __name__ == "__main__":
    main()
