"""Plots table_bench's rows/s with table ids sent raw and delta coded, per
case (benchmarks/results/2026-11-27-table-ids/*.jsonl): ids.png beside
this file. Run from the repository root with Debian's python3:

    /usr/bin/python3 benchmarks/results/2026-11-27-table-ids/plot.py
"""
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scripts"))
import gnuplot_run  # noqa: E402

CASES = [("dim8-ranks-100mbit", "ranks, dim 8, 100M"), ("dim8-ranks", "ranks, dim 8, 1G"),
         ("dim64-ranks", "ranks, dim 64, 1G"), ("dim8-hashed", "hashed, dim 8, 1G")]


def medians(name):
    """Median rows/s (millions) of the raw-id and delta-coded bf16 runs, and the bytes-in ratio."""
    lines = [json.loads(l) for l in open(os.path.join(HERE, name + ".jsonl"))]
    table = [o for o in lines if o["bench"] == "table" and o["rows_on_wire"] == "bf16"]
    raw = [o["rows_per_s"] / 1e6 for o in table if o["ids_on_wire"] == "raw"]
    coded = [o for o in table if o["ids_on_wire"] != "raw"]
    ratio = statistics.median(o["bytes_in_vs_raw_ids"] for o in coded if "bytes_in_vs_raw_ids" in o)
    return statistics.median(raw), statistics.median(o["rows_per_s"] / 1e6 for o in coded), ratio


def main():
    dat = os.path.join(HERE, "ids.dat")
    with open(dat, "w") as f:
        for name, label in CASES:  # a data file's strings in double quotes
            raw, coded, ratio = medians(name)
            f.write(f"\"{label} (bytes x{ratio:.2f})\" {raw:.3f} {coded:.3f}\n")
    png = os.path.join(HERE, "ids.png")
    script = "\n".join(gnuplot_run.png_terminal(1100, 560) + [
        f"set output {gnuplot_run.quote(png)}",
        "set title 'table_bench, 2 servers x 4 workers, bf16 rows: table ids raw or delta coded (median of 3)'",
        "set ylabel 'million rows/s'", "set style data histograms", "set style histogram clustered gap 1",
        "set style fill solid 0.8 border -1", "set yrange [0:*]", "set key top right", "set grid ytics",
        "set xtics font ',9' rotate by -10",
        f"plot {gnuplot_run.quote(dat)} using 2:xtic(1) title 'ids raw (:rawids)', '' using 3 title 'ids delta coded'"])
    gnuplot_run.plot(script, png)
    print(png)


if __name__ == "__main__":
    main()
