"""launch_job's terminal: messages, and on a terminal one live line per
worker (a bar, epoch, step, loss, samples/s, ETA) redrawn in place. Not
thread-safe (the job's one loop uses it)."""
import shutil
import sys
import time

from launch.common import TICK_S, describe_exit, fmt_duration


def worker_state(w):
    """A worker's fraction done and the text after its bar."""
    p = w.progress
    if w.done is not None:
        frac = 1.0
    elif p is not None and p.get("total_steps"):
        frac = min(1.0, p["step"] / p["total_steps"])
    else:
        frac = 0.0
    if p is None:
        text = "waiting for the cluster" if w.start is None else f"rank {w.start['rank']}, first steps"
    else:
        text = (f"epoch {p['epoch']}/{p['epochs']} step {p['step']}/{p['total_steps']} "
                f"loss {p['loss']:.3f} {p['samples_per_s']:.0f} samples/s")
        if w.done is not None:
            text += f" done in {w.done['wall_s']:.1f}s"
        elif w.rc is not None:
            text += f" ({describe_exit(w.rc)})"
        else:
            text += f" eta {fmt_duration(p['eta_s'])}"
    return frac, text


def worker_lines(workers, cols):
    """One line per worker; the bars take what the terminal has left (8 to 30 cells)."""
    states = [(w.name, *worker_state(w)) for w in workers]
    longest = max(len(name) + len(text) for name, _, text in states)
    width = max(8, min(30, cols - longest - 9))
    lines = []
    for name, frac, text in states:
        filled = int(round(frac * width))
        lines.append(f"{name} [{'#' * filled}{'-' * (width - filled)}] {frac * 100:3.0f}% {text}"[:cols])
    return lines


class LiveView:
    def __init__(self, tty=None):
        self.tty = sys.stdout.isatty() if tty is None else tty
        self.drawn = 0            # live lines currently on the terminal
        self.last_draw = 0.0
        self.last_lines = []
        self.frozen = False       # the job is stopping: draw no more

    def say(self, msg, err=False):
        """A message line (the live lines are redrawn under it later)."""
        self.clear()
        print(msg, file=sys.stderr if err else sys.stdout, flush=True)

    def clear(self):
        if self.tty and self.drawn:
            sys.stdout.write(f"\x1b[{self.drawn}F\x1b[J")
            sys.stdout.flush()
            self.drawn = 0

    def draw(self, workers, force=False):
        """Redraws the workers' lines, at most every TICK_S unless forced."""
        if not self.tty or self.frozen or not workers:
            return
        now = time.monotonic()
        if not force and now - self.last_draw < TICK_S:
            return
        self.last_draw = now
        cols = max(40, shutil.get_terminal_size((100, 24)).columns - 1)
        lines = worker_lines(workers, cols)
        if lines == self.last_lines and self.drawn == len(lines) and not force:
            return
        self.last_lines = lines
        up = f"\x1b[{self.drawn}F" if self.drawn else ""
        sys.stdout.write(up + "\x1b[J" + "".join(line + "\n" for line in lines))
        sys.stdout.flush()
        self.drawn = len(lines)

    def finish(self, workers):
        """Leaves the last state of the live lines on the terminal."""
        if self.tty and workers:
            self.draw(workers, force=True)
            self.drawn = 0
