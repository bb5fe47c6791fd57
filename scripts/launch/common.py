"""What the parts of launch_job share: its constants, small helpers, and a
process of the job (Proc) with the two ways a job ends early."""
import os
import signal

ENDPOINT_DEADLINE_S, EXIT_DEADLINE_S = 30.0, 30.0  # scheduler start -> endpoint file; all done -> all exited
TERM_GRACE_S, TICK_S = 3.0, 0.25  # SIGTERM -> SIGKILL; process polling and live redraw (~4 Hz)
LOG_TAIL_LINES = 5

ACCURACY_MARKS = (0.80, 0.85)   # summary.json: time to reach these test accuracies
SUMMARY, METRICS, EVENTS, PLOT, PIDS = "summary.json", "metrics.csv", "events.jsonl", "accuracy.png", "pids.txt"
# Per worker binary: the job's name in the plot's title (default: the binary's
# name), and the eval fields metrics.csv carries after test_accuracy.
TITLES = {"ps_worker": "Fashion-MNIST MLP", "ps_spam_worker": "SpamAssassin text classifier",
          "ps_torch_worker": "Fashion-MNIST CNN (PyTorch)", "ps_torch_spam_worker": "SpamAssassin classifier (PyTorch)"}
EXTRA_METRICS = {"ps_spam_worker": ("test_auc",), "ps_torch_spam_worker": ("test_auc",)}
TABLE_STATS = ("table_rows", "table_bytes", "table_evictions", "table_admissions")


def plural(n, word):
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def fmt_duration(seconds):
    s = max(0, int(round(seconds)))
    return f"{s}s" if s < 60 else f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def describe_exit(rc):
    if rc >= 0:
        return f"exited with code {rc}"
    try:
        name = signal.Signals(-rc).name
    except ValueError:
        name = "unknown signal"
    return f"was killed by signal {-rc} ({name})"


def tail(path, n):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError as e:
        return [f"(cannot read {path}: {e.strerror})"]
    return lines[-n:] if lines else ["(empty)"]


class JobFailed(Exception):
    """One or more processes failed; carries (Proc, reason) pairs."""

    def __init__(self, failures):
        super().__init__("job failed")
        self.failures = failures


class Interrupted(Exception):
    pass


class Proc:
    def __init__(self, name, kind, popen, log_path):
        self.name = name          # scheduler, server-I, worker-I (worker rank I)
        self.kind = kind          # scheduler, server, worker
        self.popen = popen
        self.log_path = log_path
        self.rc = None            # set once reaped
        self.buf = b""            # worker stdout not yet split into lines
        self.open_pipe = kind == "worker"
        self.start = None         # the worker's events
        self.progress = None
        self.done = None

    @property
    def pid(self):
        return self.popen.pid
