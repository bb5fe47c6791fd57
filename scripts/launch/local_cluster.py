"""Runs a whole job on this machine as separate processes: one scheduler, S
servers and W workers, all on 127.0.0.1 with ephemeral ports.

  scripts/local_cluster.sh [--servers S] [--workers W] [--out DIR] [--secure]
                           [--consistency sync|async|ssp:K]
                           [--scheduler-flag F]... [--server-flag F]...
                           -- WORKER_BINARY [WORKER_FLAGS...]

Every option with a value takes it as the next argument or after '='
(--scheduler-flag --replicas=2 or --scheduler-flag=--replicas=2); each
--scheduler-flag and --server-flag hands one flag to the scheduler or to
every server.

--consistency is the job's mode: the scheduler's --consistency (a model
registered in another is refused, naming both) and every worker's
PS_CONSISTENCY (ps_worker and ps_exact_sum take it when WORKER_FLAGS give
no --consistency).

Worker I gets --scheduler=ADDRESS and --rank=I (ps_worker and ps_exact_sum
take both) before WORKER_FLAGS, so that "worker I" and its logs name its rank. With --secure,
every process gets a throwaway CurveZMQ key pair made by ps_keygen in
DIR/keys (replaced on each run) and the flags to use it: every socket is
authenticated and encrypted, and only the job's own keys are admitted
(docs/security.md). Logs go to DIR
(default: a fresh directory under /tmp). Worker output is streamed with a
"[worker N]" prefix. If any process fails, the others are stopped (each
process group: SIGTERM, SIGKILL 3 s later), the script says which one died
and how, and exits non-zero. Nothing is left running when it returns, also
when interrupted.
"""
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # scripts/, for `launch`
from launch import preflight, procs  # noqa: E402
from launch.common import describe_exit, key_flags, make_keys, tail  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENDPOINT_DEADLINE_S = 10.0


def usage_error(message):
    print(f"local_cluster: {message}", file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    a = {"servers": "2", "workers": "2", "out": None, "secure": False, "consistency": None, "scheduler_flags": [],
         "server_flags": []}
    i = 0
    while i < len(argv) and argv[i] != "--":
        opt = argv[i]
        if opt in ("-h", "--help"):
            print(__doc__.strip())
            sys.exit(0)
        if opt == "--secure":
            a["secure"], i = True, i + 1
            continue
        keys = {"--servers": "servers", "--workers": "workers", "--out": "out", "--consistency": "consistency",
                "--scheduler-flag": "scheduler_flags", "--server-flag": "server_flags"}
        # --opt VALUE or --opt=VALUE (--scheduler-flag=--replicas=2: the value is all after the first '=').
        opt, eq, value = opt.partition("=")
        if opt not in keys or (not eq and i + 1 >= len(argv)):
            usage_error(f"unknown option '{opt}'" if opt not in keys else f"{opt} needs a value")
        if not eq:
            value, i = argv[i + 1], i + 1
        i += 1
        key = keys[opt]
        if isinstance(a[key], list):
            a[key].append(value)
        else:
            a[key] = value
    if i + 1 >= len(argv):
        usage_error("missing '-- WORKER_BINARY [flags]'")
    for key in ("servers", "workers"):
        if not a[key].isdigit() or int(a[key]) < 1:
            usage_error(f"--{key} must be a positive integer, got '{a[key]}'")
        a[key] = int(a[key])
    if a["consistency"] is not None and not re.fullmatch(r"sync|async|ssp:[0-9]+", a["consistency"]):
        usage_error(f"--consistency must be sync, async or ssp:K (K >= 0), got '{a['consistency']}'")
    a["worker"], a["worker_flags"] = argv[i + 1], argv[i + 2:]
    return a


class Cluster:
    """The job's processes, in the order started, and how they end."""

    def __init__(self, a, bin_dir):
        self.a, self.bin = a, bin_dir
        self.procs = []  # (name, popen, log path)
        self.sel = selectors.DefaultSelector()
        self.keys = make_keys("local_cluster", bin_dir, a["out"], a["servers"], a["workers"]) if a["secure"] else None

    def flags(self, kind, name):
        return key_flags(self.keys, kind, name) if self.keys else []

    def start(self, name, cmd, log, stdout=None, env=None):
        with open(log, "wb") as f:
            popen = procs.spawn(cmd, stdout=stdout or f, stderr=f, env=env)
        self.procs.append((name, popen, log))
        self.sel.register(os.pidfd_open(popen.pid), selectors.EVENT_READ, ("exit", name, popen, log))
        return popen

    def start_worker(self, i, endpoint):
        out = self.a["out"]
        cmd = [self.a["worker"], f"--scheduler={endpoint}", f"--rank={i}", *self.flags("worker", f"worker-{i}"),
               *self.a["worker_flags"]]
        env = None if self.a["consistency"] is None else dict(os.environ, PS_CONSISTENCY=self.a["consistency"])
        popen = self.start(f"worker {i}", cmd, os.path.join(out, f"worker-{i}.log"), stdout=subprocess.PIPE, env=env)
        copy = open(os.path.join(out, f"worker-{i}.out"), "wb")
        self.sel.register(popen.stdout, selectors.EVENT_READ, ("output", i, copy, [b""]))

    def scheduler_endpoint(self, sched, path):
        """The endpoint the scheduler wrote, or None once it exited or ENDPOINT_DEADLINE_S passed."""
        deadline = time.monotonic() + ENDPOINT_DEADLINE_S
        while time.monotonic() < deadline and sched.poll() is None:
            if os.path.exists(path) and os.path.getsize(path) > 0:
                with open(path) as f:
                    return f.read().strip()
            try:
                sched.wait(timeout=0.1)  # the file appears while the scheduler runs
            except subprocess.TimeoutExpired:
                pass
        return None

    def output(self, i, copy, partial, pipe):
        data = os.read(pipe.fileno(), 65536)
        copy.write(data)
        if not data:  # the end: a last line without its newline is shown too
            self.sel.unregister(pipe)
            copy.close()
            data = b"\n" if partial[0] else b""
        lines = (partial[0] + data).split(b"\n")
        partial[0] = lines.pop()
        for line in lines:
            sys.stdout.write(f"[worker {i}] {line.decode('utf-8', 'replace')}\n")
        sys.stdout.flush()

    def watch(self):
        """Until every process exited 0 (0) or one failed (1)."""
        running = len(self.procs)
        while running:
            for key, _ in self.sel.select():
                what = key.data
                if what[0] == "output":
                    self.output(*what[1:], key.fileobj)
                    continue
                _, name, popen, log = what
                self.sel.unregister(key.fileobj)
                os.close(key.fileobj)
                running -= 1
                if popen.wait() != 0:
                    print(f"local_cluster: {name} (pid {popen.pid}) {describe_exit(popen.returncode)}; "
                          "stopping the others", file=sys.stderr)
                    print(f"--- last lines of {log}:", *tail(log, 5), sep="\n", file=sys.stderr)
                    return 1
        for key in list(self.sel.get_map().values()):  # what the workers wrote last
            if key.data[0] == "output":
                while key.fileobj in self.sel.get_map():
                    self.output(*key.data[1:], key.fileobj)
        return 0

    def run(self):
        a, out = self.a, self.a["out"]
        endpoint_file = os.path.join(out, "scheduler.endpoint")
        if os.path.exists(endpoint_file):
            os.remove(endpoint_file)
        sched = self.start("scheduler", [os.path.join(self.bin, "ps_scheduler"), "--port=0",
                                         f"--num_servers={a['servers']}", f"--num_workers={a['workers']}",
                                         f"--endpoint_file={endpoint_file}", *self.flags("scheduler", "scheduler"),
                                         *([f"--consistency={a['consistency']}"] if a["consistency"] else []),
                                         *a["scheduler_flags"]], os.path.join(out, "scheduler.log"))
        endpoint = self.scheduler_endpoint(sched, endpoint_file)
        if endpoint is None:
            print("local_cluster: scheduler did not start; its log:", *tail(os.path.join(out, "scheduler.log"), 5),
                  sep="\n", file=sys.stderr)
            return 1
        print(f"local_cluster: scheduler at {endpoint}; {a['servers']} servers, {a['workers']} workers; logs in {out}",
              flush=True)
        for i in range(a["servers"]):
            self.start(f"server {i}", [os.path.join(self.bin, "ps_server"), f"--scheduler={endpoint}",
                                       *self.flags("server", f"server-{i}"), *a["server_flags"]],
                       os.path.join(out, f"server-{i}.log"))
        for i in range(a["workers"]):
            self.start_worker(i, endpoint)
        code = self.watch()
        if code == 0:
            print("local_cluster: job finished; every process exited 0")
        return code

    def stop(self):
        procs.stop([popen for _, popen, _ in self.procs])


def interrupted(_signum, _frame):
    print("local_cluster: interrupted; stopping every process", file=sys.stderr)
    raise KeyboardInterrupt


def main(argv):
    a = parse_args(argv)
    bin_dir = os.environ.get("PS_BIN_DIR", os.path.join(ROOT, "build", "bin"))
    preflight.require("local_cluster", bin_dir, ("ps_scheduler", "ps_server") + (("ps_keygen",) if a["secure"] else ()))
    if "/" not in a["worker"]:
        a["worker"] = os.path.join(bin_dir, a["worker"])
    if not os.access(a["worker"], os.X_OK):
        usage_error(f"{a['worker']} is not built: run `cmake --build build`")
    a["out"] = a["out"] or tempfile.mkdtemp(prefix="ps_job_", dir="/tmp")
    os.makedirs(a["out"], exist_ok=True)
    if a["secure"]:
        print(f"local_cluster: CurveZMQ on; throwaway keys in {os.path.join(a['out'], 'keys')}")
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, interrupted)
    cluster = Cluster(a, bin_dir)
    try:
        return cluster.run()
    except KeyboardInterrupt:
        return 130
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
