"""The one gnuplot runner of every script that plots (launch_job, the
plot_*.py scripts, bench_sync_vs_async, bench_vs_ddp, pipeline_bench): the
terminal, quoting, finding gnuplot, its errors and a deadline, in one place.

    script = "\\n".join(gnuplot_run.png_terminal(900, 560) + [f"set output {gnuplot_run.quote(png)}", ...])
    gnuplot_run.plot(script, png)          # raises PlotError saying what went wrong
"""
import os
import shutil
import subprocess
import sys

DEADLINE_S = 60


class PlotError(Exception):
    """gnuplot is missing, failed, ran out of time or wrote no image."""


def quote(text):
    """`text` as a gnuplot single-quoted string."""
    return "'" + str(text).replace("'", "''") + "'"


def png_terminal(width, height, font=",11"):
    """The lines selecting a PNG terminal: pngcairo where this gnuplot has it
    (anti-aliased), plain png otherwise."""
    return ['if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {',
            f'  set terminal pngcairo size {width},{height} noenhanced font "{font}"',
            "} else {",
            f"  set terminal png size {width},{height} noenhanced",
            "}"]


def plot(script, out):
    """Runs gnuplot on `script` (which writes `out`); raises PlotError."""
    try:
        r = subprocess.run(["gnuplot"], input=script, capture_output=True, text=True, timeout=DEADLINE_S)
    except FileNotFoundError:
        raise PlotError("gnuplot is not installed (scripts/install_deps.sh installs it)") from None
    except subprocess.TimeoutExpired:
        raise PlotError(f"gnuplot took over {DEADLINE_S} s") from None
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()[-5:]
        raise PlotError(f"gnuplot failed (exit {r.returncode}): " + " / ".join(lines))
    if not os.path.isfile(out) or os.path.getsize(out) == 0:
        raise PlotError(f"gnuplot wrote no image at {out}")


def run(script, tmp, prog, out):
    """plot(), for a command-line script named `prog`: removes the data folder
    `tmp` (if any), says what happened, returns the exit code (0 written, 1
    gnuplot missing or failed)."""
    try:
        plot(script, out)
    except PlotError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{prog}: wrote {out}")
    return 0
