"""What the parts of launch_job share: its constants, small helpers, and a
process of the job (Proc) with the two ways a job ends early."""
import os
import signal
import shutil
import subprocess

ENDPOINT_DEADLINE_S, EXIT_DEADLINE_S = 30.0, 30.0  # scheduler start -> endpoint file; all done -> all exited
TICK_S = 0.25  # process polling and live redraw (~4 Hz)
LOG_TAIL_LINES = 5

ACCURACY_MARKS = (0.80, 0.85)   # summary.json: time to reach these test accuracies
SUMMARY, METRICS, EVENTS, PLOT, PIDS = "summary.json", "metrics.csv", "events.jsonl", "accuracy.png", "pids.txt"
# The servers' checkpoints (unless --server-flag names a --checkpoint_dir),
# the model ps_export writes from their final ones, and a Python worker's
# state_dict.
CHECKPOINTS, MODEL_NPZ, MODEL_PT = "checkpoints", "model.npz", "model.pt"
# Per worker binary: the job's name in the plot's title (default: the binary's
# name), and the eval fields metrics.csv carries after test_accuracy.
TITLES = {"ps_worker": "Fashion-MNIST MLP", "ps_spam_worker": "SpamAssassin text classifier",
          "ps_torch_worker": "Fashion-MNIST CNN (PyTorch)", "ps_torch_spam_worker": "SpamAssassin classifier (PyTorch)"}
EXTRA_METRICS = {"ps_spam_worker": ("test_auc",), "ps_torch_spam_worker": ("test_auc",)}
TABLE_STATS = ("table_rows", "table_bytes", "table_evictions", "table_admissions", "table_disk_rows")


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


def make_keys(prog, bin_dir, out, servers, workers):
    """--secure: a throwaway CurveZMQ key pair per process of the job in
    OUT/keys (ps_keygen), an earlier run's removed first; returns the
    directory. SystemExit naming `prog` when ps_keygen fails."""
    keys = os.path.join(out, "keys")
    os.makedirs(keys, mode=0o700, exist_ok=True)
    for f in os.listdir(keys):
        if f.endswith((".key", ".pub")):
            os.remove(os.path.join(keys, f))
    names = ["scheduler"] + [f"server-{i}" for i in range(servers)] + [f"worker-{i}" for i in range(workers)]
    for name in names:
        r = subprocess.run([os.path.join(bin_dir, "ps_keygen"), f"--out_dir={keys}", f"--name={name}"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{prog}: ps_keygen failed for {name}: {r.stderr.strip()}")
    return keys


def add_key(prog, bin_dir, keys, name):
    """--secure, a process joining a running job: its key pair made beside
    make_keys' directory and renamed into it, the .pub last, so that the
    scheduler and servers, which read the directory again when a key they
    do not know knocks, never see a half-written one. SystemExit naming
    `prog` when ps_keygen fails."""
    new = os.path.join(os.path.dirname(keys), f"keys-{name}.new")
    shutil.rmtree(new, ignore_errors=True)
    os.makedirs(new, mode=0o700)
    r = subprocess.run([os.path.join(bin_dir, "ps_keygen"), f"--out_dir={new}", f"--name={name}"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{prog}: ps_keygen failed for {name}: {r.stderr.strip()}")
    for ext in (".key", ".pub"):
        os.replace(os.path.join(new, name + ext), os.path.join(keys, name + ext))
    os.rmdir(new)


def key_flags(keys, kind, name):
    """One process's CurveZMQ flags from make_keys' directory: its secret
    key; the public keys it accepts (scheduler, servers); the scheduler's
    public key (servers, workers)."""
    flags = [f"--secret_key_file={os.path.join(keys, name + '.key')}"]
    if kind != "worker":
        flags.append(f"--authorized_keys={keys}")
    if kind != "scheduler":
        flags.append(f"--scheduler_public_key={os.path.join(keys, 'scheduler.pub')}")
    return flags


def table_disk_flags(table_disk_dir, i):
    """Server i's table disk tier: a directory of its own under the job's
    (ps_server refuses one that another server holds)."""
    if not table_disk_dir:
        return []
    return [f"--table_disk_dir={os.path.join(os.path.abspath(table_disk_dir), f'server-{i}')}"]


def write_pids(out, procs):
    """OUT/pids.txt, "name pid" per process (anything with .name and .pid),
    replaced atomically: what tests and cleanups read to stop a job's processes."""
    path = os.path.join(out, PIDS)
    with open(path + ".tmp", "w") as f:
        f.writelines(f"{p.name} {p.pid}\n" for p in procs)
    os.replace(path + ".tmp", path)
