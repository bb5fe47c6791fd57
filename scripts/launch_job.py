#!/usr/bin/python3
"""Runs one training job on this machine and reports on it.

    launch_job.py --out DIR [--bin-dir DIR] [--workers N] [--servers S]
                  [--consistency sync|async|ssp:K] [--epochs E]
                  [--device cpu|cuda] [--placement auto|layer|FILE]
                  [--stages K [--micro-batches M]] [--worker-binary NAME] [--title TEXT]
                  [--network loopback|emulated [--rate R] [--delay-ms D]] [--secure]
                  [--scheduler-flag=F]... [--server-flag=F]... [-- WORKER_FLAGS...]

The workers are ps_worker (Fashion-MNIST, the default) or --worker-binary,
any worker that takes ps_worker's job flags and prints its JSON-line events
(ps_spam_worker: the SpamAssassin text classifier). Starts one ps_scheduler,
S ps_server and W worker processes on 127.0.0.1, each in its own process
group, with its log (stderr) in DIR/<name>.log (worker-I is started with
--rank=I: its name is its rank everywhere; with --stages K it is stage I % K
of group I / K), and shows the workers' progress: one live line per worker on
a terminal, one plain line per progress event otherwise. At the end it writes

    DIR/summary.json   final test accuracy, wall time, throughput, the setup; and
                       test_auc, table_rows when the workers and servers report them
    DIR/metrics.csv    wall_s,epoch,step,train_loss,test_accuracy (rank 0's evaluations),
                       then the worker's EXTRA_METRICS (the spam workers: test_auc)
    DIR/events.jsonl   every JSON line the workers printed
    DIR/accuracy.png   test accuracy against wall time (gnuplot)

and DIR/pids.txt ("name pid" lines) as soon as each process is started.

With --network emulated every process runs in its own network namespace on a
bridge, each link shaped to --rate (scripts/netns.py); the namespaces are
removed when the job ends, however it ends. Those addresses are not loopback,
so without --secure the processes run with --insecure there (the bridge is
private to this machine).

With --secure every process gets a throwaway CurveZMQ key pair made by
ps_keygen in DIR/keys (replaced on each run) and the flags to use it: every
socket is authenticated and encrypted, and only the job's keys are admitted.

If a process fails (non-zero exit, a worker that exits without its "done"
event, a scheduler or server that ends before every worker is done) every
other process is stopped (SIGTERM to its process group, SIGKILL 3 s later),
the failed process is named with its exit code or signal and the end of its
log, and the exit code is 1. SIGINT/SIGTERM/SIGHUP stop the job the same way
and give 130. No process of the job outlives this program.

Standard library only; takes no settings from the environment.
"""

import argparse
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time

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


# ----------------------------------------------------------------------------
# Command line


def positive_int(text):
    if not re.fullmatch(r"[1-9][0-9]*", text):
        raise argparse.ArgumentTypeError(f"must be a positive integer, got '{text}'")
    return int(text)


def consistency(text):
    if not re.fullmatch(r"sync|async|ssp:[0-9]+", text):
        raise argparse.ArgumentTypeError(f"must be sync, async or ssp:K (K >= 0), got '{text}'")
    return text


def placement(text):
    if text in ("auto", "layer"):
        return text
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"must be auto, layer or an existing file, got '{text}'")
    return os.path.abspath(text)


def parse_args(argv):
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    else:
        extra = []
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(
        prog="launch_job.py",
        description="Runs a training job (1 scheduler, S servers, W workers) on this machine.",
        epilog="Everything after '--' is passed to every worker.")
    p.add_argument("--out", required=True, help="directory for logs, summary.json, metrics.csv, events.jsonl, accuracy.png")
    p.add_argument("--bin-dir", default=os.path.join(here, "..", "build", "bin"),
                   help="where ps_scheduler, ps_server and the worker are (default: build/bin)")
    p.add_argument("--worker-binary", default="ps_worker", metavar="NAME",
                   help="the workers' program in --bin-dir (default ps_worker: Fashion-MNIST; ps_spam_worker)")
    p.add_argument("--title", help="the job's name in the plot's title (default: from --worker-binary)")
    p.add_argument("--workers", type=positive_int, default=2)
    p.add_argument("--servers", type=positive_int, default=2)
    p.add_argument("--consistency", type=consistency, default="sync")
    p.add_argument("--epochs", type=positive_int, default=10)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--placement", type=placement, default="auto")
    p.add_argument("--stages", type=positive_int, default=1,
                   help="model parallelism: groups of this many pipeline stages (worker w: stage w %% K of group w / K)")
    p.add_argument("--micro-batches", type=positive_int, default=4, help="with --stages > 1: micro-batches per step")
    p.add_argument("--network", choices=("loopback", "emulated"), default="loopback",
                   help="emulated: one network namespace per process, links shaped with tc (needs root)")
    p.add_argument("--rate", default="1gbit", help="emulated network: link rate (tc syntax, default 1gbit)")
    p.add_argument("--delay-ms", type=float, default=0.2, help="emulated network: one-way link delay (default 0.2)")
    p.add_argument("--netns-prefix", default=f"psj{os.getpid() % 100000}x",
                   help="emulated network: namespace name prefix (default psjPIDx)")
    p.add_argument("--secure", action="store_true",
                   help="CurveZMQ on every socket, with throwaway keys made by ps_keygen in OUT/keys")
    p.add_argument("--scheduler-flag", action="append", default=[], metavar="F",
                   help="extra ps_scheduler flag (repeatable; write --scheduler-flag=--x=1)")
    p.add_argument("--server-flag", action="append", default=[], metavar="F",
                   help="extra ps_server flag (repeatable; write --server-flag=--x=1)")
    args = p.parse_args(argv)
    args.worker_flags = extra
    if args.workers % args.stages:
        p.exit(2, f"launch_job.py: --workers {args.workers} is not a multiple of --stages {args.stages}\n")
    if args.stages > 1:
        args.worker_flags = [f"--stages={args.stages}", f"--micro_batches={args.micro_batches}", *extra]
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        p.exit(2, f"launch_job.py: --out: cannot create {args.out}: {e.strerror}\n")
    args.bin_dir = os.path.abspath(args.bin_dir)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.worker_binary):
        p.exit(2, f"launch_job.py: --worker-binary must be a program name in --bin-dir, got '{args.worker_binary}'\n")
    if args.title is None:
        args.title = TITLES.get(args.worker_binary, args.worker_binary)
    args.extra_metrics = EXTRA_METRICS.get(args.worker_binary, ())
    for name in ("ps_scheduler", "ps_server", args.worker_binary) + (("ps_keygen",) if args.secure else ()):
        path = os.path.join(args.bin_dir, name)
        if not os.access(path, os.X_OK):
            p.exit(2, f"launch_job.py: {path} not built (run scripts/test.sh or cmake --build build)\n")
    return args


# ----------------------------------------------------------------------------
# Small helpers


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


# ----------------------------------------------------------------------------
# The job


class Job:
    def __init__(self, args):
        self.args = args
        self.out = os.path.abspath(args.out)
        self.procs = []
        self.sel = selectors.DefaultSelector()
        self.tty = sys.stdout.isatty()
        self.drawn = 0            # live lines currently on the terminal
        self.last_draw = 0.0
        self.last_lines = []
        self.signal = None        # set by the handler; acted on in the loop
        self.stopping = False
        self.t0 = None
        self.t_workers_done = None
        self.evals = []           # rank 0's eval events, in order
        self.final_eval = None
        self.events_file = None
        self.metrics_file = None
        self.endpoint = None
        self.server_stats = None  # rank 0's "server_stats" event
        self.hosts = None         # emulated network: [{"ns", "ip"}] per process
        self.network = None       # what netns.setup reported

    # -- output ---------------------------------------------------------------

    def say(self, msg, err=False):
        self.clear_live()
        stream = sys.stderr if err else sys.stdout
        print(msg, file=stream, flush=True)

    def clear_live(self):
        if self.tty and self.drawn:
            sys.stdout.write(f"\x1b[{self.drawn}F\x1b[J")
            sys.stdout.flush()
            self.drawn = 0

    def live_text(self, w):
        """A worker's state after its bar: epoch, step, loss, samples/s, ETA; and its progress."""
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

    def live_lines(self, cols):
        """One line per worker; the bars take what the terminal has left (8 to 30 cells)."""
        states = [(w.name, *self.live_text(w)) for w in self.workers()]
        longest = max(len(name) + len(text) for name, _, text in states)
        width = max(8, min(30, cols - longest - 9))
        lines = []
        for name, frac, text in states:
            filled = int(round(frac * width))
            lines.append(f"{name} [{'#' * filled}{'-' * (width - filled)}] {frac * 100:3.0f}% {text}"[:cols])
        return lines

    def draw_live(self, force=False):
        if not self.tty or self.stopping:
            return
        now = time.monotonic()
        if not force and now - self.last_draw < TICK_S:
            return
        self.last_draw = now
        cols = max(40, shutil.get_terminal_size((100, 24)).columns - 1)
        lines = self.live_lines(cols)
        if lines == self.last_lines and self.drawn == len(lines) and not force:
            return
        self.last_lines = lines
        up = f"\x1b[{self.drawn}F" if self.drawn else ""
        sys.stdout.write(up + "\x1b[J" + "".join(line + "\n" for line in lines))
        sys.stdout.flush()
        self.drawn = len(lines)

    def finish_live(self):
        """Leaves the last state of the live lines on the terminal."""
        if self.tty and self.workers():
            self.draw_live(force=True)
            self.drawn = 0

    # -- processes ------------------------------------------------------------

    def workers(self):
        return [p for p in self.procs if p.kind == "worker"]

    def spawn(self, name, kind, cmd):
        log_path = os.path.join(self.out, f"{name}.log")
        with open(log_path, "wb") as log:
            stdout = subprocess.PIPE if kind == "worker" else log
            popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=log,
                                     process_group=0, close_fds=True, bufsize=0)
        proc = Proc(name, kind, popen, log_path)
        self.procs.append(proc)
        if kind == "worker":
            os.set_blocking(popen.stdout.fileno(), False)
            self.sel.register(popen.stdout, selectors.EVENT_READ, proc)
        self.write_pids()
        return proc

    def write_pids(self):
        path = os.path.join(self.out, PIDS)
        with open(path + ".tmp", "w") as f:
            f.writelines(f"{p.name} {p.pid}\n" for p in self.procs)
        os.replace(path + ".tmp", path)

    def stop_all(self):
        """Stops every process still running; SIGKILL after TERM_GRACE_S. Idempotent."""
        self.stopping = True
        live = [p for p in self.procs if p.popen.poll() is None]
        for p in live:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + TERM_GRACE_S
        while live and time.monotonic() < deadline:
            live = [p for p in live if p.popen.poll() is None]
            if live:
                time.sleep(0.05)
        for p in live:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.procs:
            p.popen.wait()
            if p.rc is None:
                p.rc = p.popen.returncode
            if p.popen.stdout is not None and not p.popen.stdout.closed:
                if p.open_pipe:
                    self.sel.unregister(p.popen.stdout)
                    p.open_pipe = False
                p.popen.stdout.close()
        return live

    def on_signal(self, signum, _frame):
        if self.signal is None:
            self.signal = signum

    def check_signal(self):
        if self.signal is not None and not self.stopping:
            raise Interrupted()

    # -- worker output --------------------------------------------------------

    def read_pipe(self, w, block=False):
        """Reads what w's stdout has (all of it up to EOF when block)."""
        fd = w.popen.stdout.fileno()
        if block:
            os.set_blocking(fd, True)
        while w.open_pipe:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return
            if not data:
                self.sel.unregister(w.popen.stdout)
                w.open_pipe = False
                if w.buf:
                    self.handle_line(w, w.buf)
                    w.buf = b""
                return
            w.buf += data
            *lines, w.buf = w.buf.split(b"\n")
            for line in lines:
                self.handle_line(w, line)
            if not block:
                return

    def drain_ready(self):
        """Reads everything the workers have written so far."""
        while True:
            ready = self.sel.select(0)
            if not ready:
                return
            for key, _ in ready:
                self.read_pipe(key.data)

    def handle_line(self, w, raw):
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if not text.strip():
            return
        try:
            ev = json.loads(text)
        except ValueError:
            ev = None
        if not isinstance(ev, dict) or "event" not in ev:
            self.say(f"{w.name}: {text}")
            return
        self.events_file.write(text + "\n")
        self.events_file.flush()
        try:
            self.handle_event(w, ev)
        except (KeyError, TypeError, ValueError) as e:  # a field missing or of another type
            self.say(f"{w.name}: {text}  (launch_job: cannot show this event: {type(e).__name__} {e})")

    def handle_event(self, w, ev):
        kind = ev["event"]
        if kind == "start":
            w.start = ev
            self.say(f"{w.name}: rank {ev.get('rank')} of {plural(ev.get('workers'), 'worker')}, {plural(ev.get('servers'), 'server')}; "
                     f"{ev.get('shard')} samples/shard, {ev.get('steps_per_epoch')} steps/epoch, "
                     f"{ev.get('consistency')}, device {ev.get('device')}"
                     + (f"; group {ev['group']} stage {ev['stage']} of {ev['stages']} (layers {ev['layers']}, "
                        f"{ev.get('stage_parameters')} parameters, {ev.get('micro_batches')} micro-batches)" if "stage" in ev else ""))
            if ev.get("rank") == 0:
                table = f" and table {ev['table']} (rows of {ev.get('dim')})" if "table" in ev else ""
                self.say(f"model: {ev.get('parameters')} parameters{table}; placement: {ev.get('placement')}")
        elif kind == "progress":
            w.progress = ev
            if not self.tty:
                self.say(f"{w.name}: epoch {ev['epoch']}/{ev['epochs']} step {ev['step']}/{ev['total_steps']} "
                         f"loss {ev['loss']:.3f} acc {ev['train_accuracy']:.3f} {ev['samples_per_s']:.0f} samples/s "
                         f"eta {fmt_duration(ev['eta_s'])}")
        elif kind == "eval":
            if ev.get("rank") == 0:
                self.evals.append(ev)
                extra = "".join(f",{'' if ev.get(k) is None else ev[k]}" for k in self.args.extra_metrics)
                self.metrics_file.write(f"{ev['elapsed_s']},{ev['epoch']},{ev['step']},"
                                        f"{ev['train_loss']},{ev['test_accuracy']}{extra}\n")
                self.metrics_file.flush()
                if ev.get("final"):
                    self.final_eval = ev
                auc = f" test_auc {ev['test_auc']:.5f}" if ev.get("test_auc") is not None else ""
                self.say(f"eval: epoch {ev['epoch']} step {ev['step']} test_accuracy {ev['test_accuracy']:.4f}{auc} "
                         f"test_loss {ev['test_loss']:.4f} at {ev['elapsed_s']:.1f}s"
                         + (" (final)" if ev.get("final") else ""))
        elif kind == "done":
            w.done = ev
        elif kind == "server_stats":
            self.server_stats = ev

    # -- the run --------------------------------------------------------------

    def run(self):
        a = self.args
        os.makedirs(self.out, exist_ok=True)
        for name in (SUMMARY, METRICS, EVENTS, PLOT, PIDS, "scheduler.endpoint", "accuracy.gp"):
            try:
                os.remove(os.path.join(self.out, name))
            except FileNotFoundError:
                pass
        self.events_file = open(os.path.join(self.out, EVENTS), "w")
        self.metrics_file = open(os.path.join(self.out, METRICS), "w")
        self.metrics_file.write(",".join(("wall_s", "epoch", "step", "train_loss", "test_accuracy")
                                         + a.extra_metrics) + "\n")
        self.metrics_file.flush()

        self.t0 = time.monotonic()
        bin_ = lambda name: os.path.join(a.bin_dir, name)
        endpoint_file = os.path.join(self.out, "scheduler.endpoint")
        # Process i of the job (scheduler, servers, workers) runs in namespace i.
        in_ns = lambda i, cmd: cmd if self.hosts is None else ["ip", "netns", "exec", self.hosts[i]["ns"], *cmd]
        host = lambda i: [] if self.hosts is None else [f"--host={self.hosts[i]['ip']}",
                                                        f"--advertise_host={self.hosts[i]['ip']}"]
        keys = self.make_keys() if a.secure else None
        sched = self.spawn("scheduler", "scheduler",
                           in_ns(0, [bin_("ps_scheduler"), "--port=0", f"--endpoint_file={endpoint_file}", *host(0),
                                     f"--num_servers={a.servers}", f"--num_workers={a.workers}",
                                     *self.key_flags(keys, "scheduler", "scheduler"), *a.scheduler_flag]))
        self.endpoint = self.wait_endpoint(sched, endpoint_file)
        self.say(f"launch_job: scheduler at {self.endpoint}; {plural(a.servers, 'server')}, "
                 f"{plural(a.workers, 'worker')}"
                 + (f" in {plural(a.workers // a.stages, 'group')} of {a.stages} pipeline stages" if a.stages > 1 else "")
                 + f", {a.consistency}, {plural(a.epochs, 'epoch')}, device {a.device}, placement {a.placement}; "
                 f"logs in {self.out}")
        for i in range(a.servers):
            self.spawn(f"server-{i}", "server",
                       in_ns(1 + i, [bin_("ps_server"), f"--scheduler={self.endpoint}", "--num_threads=1",
                                     *host(1 + i), *self.key_flags(keys, "server", f"server-{i}"), *a.server_flag]))
        # worker-I asks for rank I (the scheduler gives it at formation), so
        # that its name, its log and its rank agree.
        for i in range(a.workers):
            self.spawn(f"worker-{i}", "worker",
                       in_ns(1 + a.servers + i,
                             [bin_(a.worker_binary), f"--scheduler={self.endpoint}", f"--rank={i}",
                              f"--consistency={a.consistency}",
                              f"--epochs={a.epochs}", f"--device={a.device}", f"--placement={a.placement}",
                              *self.key_flags(keys, "worker", f"worker-{i}"), *a.worker_flags]))
        self.monitor()
        self.finish_live()
        return self.report()

    def make_keys(self):
        """--secure: one throwaway key pair per process in OUT/keys (ps_keygen); returns the directory."""
        a, keys = self.args, os.path.join(self.out, "keys")
        os.makedirs(keys, mode=0o700, exist_ok=True)
        for f in os.listdir(keys):  # keys of an earlier run in this directory
            if f.endswith((".key", ".pub")):
                os.remove(os.path.join(keys, f))
        names = ["scheduler"] + [f"server-{i}" for i in range(a.servers)] + [f"worker-{i}" for i in range(a.workers)]
        for name in names:
            r = subprocess.run([os.path.join(a.bin_dir, "ps_keygen"), f"--out_dir={keys}", f"--name={name}"],
                               stdin=subprocess.DEVNULL, capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"launch_job.py: ps_keygen failed for {name}: {r.stderr.strip()}")
        self.say(f"launch_job: CurveZMQ on; throwaway keys in {keys}")
        return keys

    def key_flags(self, keys, kind, name):
        """The security flags of one process: its keys with --secure, --insecure on an emulated network."""
        if keys is None:
            return ["--insecure"] if self.hosts is not None else []
        flags = [f"--secret_key_file={os.path.join(keys, name + '.key')}"]
        if kind != "worker":
            flags.append(f"--authorized_keys={keys}")
        if kind != "scheduler":
            flags.append(f"--scheduler_public_key={os.path.join(keys, 'scheduler.pub')}")
        return flags

    def wait_endpoint(self, sched, path):
        deadline = time.monotonic() + ENDPOINT_DEADLINE_S
        while True:
            self.check_signal()
            try:
                with open(path) as f:
                    text = f.read().strip()
                if text:
                    return text
            except FileNotFoundError:
                pass
            rc = sched.popen.poll()
            if rc is not None:
                sched.rc = rc
                raise JobFailed([(sched, f"{describe_exit(rc)} before writing {path}")])
            if time.monotonic() > deadline:
                raise JobFailed([(sched, f"wrote no endpoint to {path} within {ENDPOINT_DEADLINE_S:.0f} s")])
            time.sleep(0.05)

    def monitor(self):
        """Returns once every process exited well; raises JobFailed or Interrupted."""
        exit_deadline = None
        while True:
            self.check_signal()
            for key, _ in self.sel.select(TICK_S):
                self.read_pipe(key.data)
            self.check_signal()
            failures = []
            for p in self.procs:
                if p.rc is not None:
                    continue
                rc = p.popen.poll()
                if rc is None:
                    continue
                p.rc = rc
                if p.kind == "worker":
                    self.read_pipe(p, block=True)   # it is dead: its pipe ends soon
                    if rc != 0:
                        failures.append((p, describe_exit(rc)))
                    elif p.done is None:
                        failures.append((p, "exited with code 0 without a \"done\" event"))
                elif rc != 0:
                    failures.append((p, describe_exit(rc)))
                else:
                    # The scheduler and servers end only after every worker's
                    # "done" (printed before the worker tells the scheduler it is
                    # finished), so those lines are in the pipes by now.
                    self.drain_ready()
                    missing = [w.name for w in self.workers() if w.done is None]
                    if missing:
                        failures.append((p, f"exited with code 0 before {', '.join(missing)} "
                                            f"{'was' if len(missing) == 1 else 'were'} done"))
            if failures:
                raise JobFailed(failures)
            if self.t_workers_done is None and all(w.rc is not None for w in self.workers()):
                self.t_workers_done = time.monotonic()
                exit_deadline = self.t_workers_done + EXIT_DEADLINE_S
            if all(p.rc is not None for p in self.procs):
                return
            if exit_deadline is not None and time.monotonic() > exit_deadline:
                left = [p for p in self.procs if p.rc is None]
                raise JobFailed([(p, f"still running {EXIT_DEADLINE_S:.0f} s after every worker was done")
                                 for p in left])
            self.draw_live()

    # -- results --------------------------------------------------------------

    def report(self):
        a, ws = self.args, self.workers()
        self.events_file.close()
        self.metrics_file.close()
        rank0 = next((w for w in ws if w.done and w.done.get("rank") == 0), None)
        final = self.final_eval or (rank0.done if rank0 else None)
        if final is None:
            self.say("launch_job: no worker reported rank 0's final evaluation", err=True)
            return 1
        ws = sorted(ws, key=lambda w: w.done.get("rank", 0))  # per-worker lists below are by rank
        samples = sum(w.done["samples"] for w in ws if w.done.get("stage", 0) == 0)  # a group's, once
        train_wall = max(w.done["wall_s"] for w in ws)
        first = next((w.start for w in ws if w.start), {})
        epochs = next((w.progress["epochs"] for w in ws if w.progress), a.epochs)
        st = self.server_stats or {}
        summary = {
            "test_accuracy": final["test_accuracy"],
            "test_loss": final.get("test_loss"),
            **({"test_auc": final["test_auc"]} if final.get("test_auc") is not None else {}),
            "epochs": epochs,
            "wall_s": round(self.t_workers_done - self.t0, 3),
            "train_wall_s": train_wall,
            "samples": samples,
            "samples_per_s": round(samples / train_wall, 1) if train_wall > 0 else 0.0,
            "workers": a.workers,
            "servers": a.servers,
            "consistency": first.get("consistency", a.consistency),
            "device": first.get("device", a.device),
            "placement": a.placement, "stages": a.stages, "micro_batches": a.micro_batches,
            "steps": max(w.done["steps"] for w in ws),
            "evals": len(self.evals),
            # Each worker's own pace (samples over its own training time), and
            # their sum: what the job trains per second while all are at work.
            "worker_samples_per_s": [round(w.done["samples"] / w.done["wall_s"], 1) if w.done["wall_s"] > 0 else 0.0
                                     for w in ws],
            "sum_worker_samples_per_s": round(sum(w.done["samples"] / w.done["wall_s"] for w in ws
                                                  if w.done["wall_s"] > 0 and w.done.get("stage", 0) == 0), 1),
            "worker_wait_s": [w.done.get("wait_s") for w in ws],
            "worker_wall_s": [w.done.get("wall_s") for w in ws],
            "worker_straggle_s": [w.done.get("straggle_s") for w in ws], "worker_bubble": [w.done.get("bubble") for w in ws],
            "eval_s": rank0.done.get("eval_s") if rank0 else None,
            "time_to_accuracy_s": {f"{t:.2f}": next((e["elapsed_s"] for e in self.evals if e["test_accuracy"] >= t), None)
                                   for t in ACCURACY_MARKS},
            "network": self.network or {"kind": "loopback"},
            # Summed over the servers' shards (rows the evaluation pulled included).
            **({"table_rows": st["table_rows"]} if "table_rows" in st else {}),
        }
        if self.server_stats is not None:
            summary["server_stats"] = {k: st.get(k) for k in (
                "pushes_applied", "updates_applied", "slice_updates", "staleness_mean", "staleness_p99",
                "staleness_max", "staleness_histogram", "pulls_waited_s") + tuple(k for k in TABLE_STATS if k in st)}
        with open(os.path.join(self.out, SUMMARY), "w") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
        plot_ok = self.plot(summary)
        self.say(f"test accuracy {summary['test_accuracy']:.4f} (rank 0, final evaluation)")
        if "test_auc" in summary:
            self.say(f"test AUC {summary['test_auc']:.5f}")
        self.say(f"wall time {summary['wall_s']:.1f} s (launch to every worker done)")
        self.say(f"throughput {summary['samples_per_s']:.0f} samples/s "
                 f"({samples} samples over {train_wall:.1f} s of training, {plural(a.workers, 'worker')})")
        if "table_rows" in summary:
            self.say(f"table rows {summary['table_rows']} (summed over {plural(a.servers, 'server')})")
        self.say(f"summary: {os.path.join(self.out, SUMMARY)}")
        if not plot_ok:
            return 1
        self.say(f"plot: {os.path.join(self.out, PLOT)}")
        return 0

    def plot(self, summary):
        def q(path):  # a gnuplot single-quoted string
            return "'" + path.replace("'", "''") + "'"
        png, csv_path = os.path.join(self.out, PLOT), os.path.join(self.out, METRICS)
        title = (f"{self.args.title}: {plural(summary['workers'], 'worker')}, {plural(summary['servers'], 'server')}, "
                 f"{summary['consistency']}, {plural(summary['epochs'], 'epoch')} - final test accuracy "
                 f"{summary['test_accuracy']:.4f}" + (f", AUC {summary['test_auc']:.4f}" if "test_auc" in summary else ""))
        # The worker's extra metrics (test_auc) as further lines, columns 6 on.
        extra = "".join(f", {q(csv_path)} every ::1 using 1:{6 + i} with linespoints lw 2 pt {9 + i} ps 1.2 "
                        f"title '{name} (rank 0)'" for i, name in enumerate(self.args.extra_metrics))
        script = "\n".join([
            'if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {',
            '  set terminal pngcairo size 900,560 noenhanced font ",11"',
            "} else {",
            "  set terminal png size 900,560 noenhanced",
            "}",
            f"set output {q(png)}",
            'set datafile separator ","',
            f"set title {q(title)}",
            "set xlabel 'wall time of rank 0 (s)'",
            f"set ylabel {q('test accuracy' + ''.join(f', {n}' for n in self.args.extra_metrics))}",
            "set grid",
            "set key bottom right",
            "set xrange [0:*]",
            "set offsets 0, graph 0.02, graph 0.05, graph 0.05",
            f"plot {q(csv_path)} every ::1 using 1:5 with linespoints lw 2 pt 7 ps 1.2 lc rgb '#1f77b4' "
            f"title 'test accuracy (rank 0)'{extra}",
            "",
        ])
        gp = os.path.join(self.out, "accuracy.gp")
        with open(gp, "w") as f:
            f.write(script)
        try:
            r = subprocess.run(["gnuplot", gp], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        except FileNotFoundError:
            self.say("launch_job: gnuplot is not installed (scripts/install_deps.sh installs it); no plot", err=True)
            return False
        except subprocess.TimeoutExpired:
            self.say("launch_job: gnuplot took over 60 s; no plot", err=True)
            return False
        if r.returncode != 0 or not os.path.isfile(png) or os.path.getsize(png) == 0:
            self.say(f"launch_job: gnuplot failed ({describe_exit(r.returncode)}); script {gp}", err=True)
            for line in r.stderr.strip().splitlines()[-LOG_TAIL_LINES:]:
                self.say(f"  {line}", err=True)
            return False
        return True

    def report_failures(self, failures):
        self.finish_live()
        for p, reason in failures:
            rank = f", rank {p.start['rank']}" if p.start else ""
            self.say(f"launch_job: {p.name} (pid {p.pid}{rank}) {reason}; stopping the others", err=True)
            self.say(f"--- last {LOG_TAIL_LINES} lines of {p.log_path}:", err=True)
            for line in tail(p.log_path, LOG_TAIL_LINES):
                self.say(line, err=True)


def setup_network(job, args):
    """--network emulated: a namespace per process; returns False (said why) when that cannot be done."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import netns
    n = 1 + args.servers + args.workers
    try:
        job.hosts = netns.setup(args.netns_prefix, n, rate=args.rate, delay_ms=args.delay_ms)
    except Exception as e:  # netns names the failing command
        job.say(f"launch_job: cannot set up the emulated network: {e}", err=True)
        return False
    info = getattr(job.hosts, "info", {})
    job.network = {"kind": "emulated", "hosts": n,
                   **{k: info.get(k) for k in ("rate", "rate_bps", "delay_ms", "delay_applied", "delay_error",
                                               "shaping", "rtt_p50_us", "loopback_rtt_p50_us", "bandwidth_mbit") if k in info}}
    job.say(f"launch_job: emulated network: {n} namespaces {args.netns_prefix}0..{n - 1}, links {args.rate}, "
            f"delay {args.delay_ms} ms")
    return True


def teardown_network(job, args):
    if job.hosts is None:
        return
    import netns
    try:
        netns.teardown(args.netns_prefix)
    except Exception as e:
        job.say(f"launch_job: removing the namespaces {args.netns_prefix}*: {e}", err=True)


def main(argv):
    args = parse_args(argv)
    job = Job(args)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, job.on_signal)
    code = 1
    try:
        if args.network == "emulated" and not setup_network(job, args):
            return 1
        code = job.run()
    except JobFailed as e:
        job.report_failures(e.failures)
        code = 1
    except Interrupted:
        job.finish_live()
        name = signal.Signals(job.signal).name
        job.say(f"launch_job: interrupted ({name}); stopping every process", err=True)
        code = 130
    finally:
        killed = job.stop_all()
        if code != 0 and job.procs:
            hard = f", {len(killed)} needed SIGKILL" if killed else ""
            job.say(f"launch_job: every process of the job has exited{hard}; logs in {job.out}", err=True)
        teardown_network(job, args)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
