"""launch_job's supervision of a job: starting the scheduler, the servers
and the workers (each in its own process group, its log in OUT/<name>.log),
reading the workers' event lines, watching every process and stopping them
all (launch/procs.py: SIGTERM to each group, SIGKILL 3 s later) when one fails, when
the job is interrupted, or at the end. Not thread-safe: one loop runs it;
the signal handler only records the signal."""
import os
import selectors
import subprocess
import time

from launch import procs
from launch.common import (CHECKPOINTS, ENDPOINT_DEADLINE_S, EXIT_DEADLINE_S, LOG_TAIL_LINES, METRICS, EVENTS,
                           MODEL_NPZ, MODEL_PT, PIDS, PLOT, SUMMARY, TICK_S, Interrupted, JobFailed, Proc,
                           describe_exit, key_flags, make_keys, plural, table_disk_flags, tail, write_pids)
from launch.live import LiveView
from launch.report import Record


class Job:
    def __init__(self, args):
        self.args = args
        self.out = os.path.abspath(args.out)
        self.procs = []
        self.sel = selectors.DefaultSelector()
        self.view = LiveView()
        self.record = None        # once run() has begun
        self.signal = None        # set by the handler; acted on in the loop
        self.t0 = None
        self.t_workers_done = None
        self.endpoint = None
        self.hosts = None         # emulated network: [{"ns", "ip"}] per process
        self.network = None       # what netns.setup reported

    def say(self, msg, err=False):
        self.view.say(msg, err)

    # -- processes ------------------------------------------------------------

    def workers(self):
        return [p for p in self.procs if p.kind == "worker"]

    def spawn(self, name, kind, cmd):
        log_path = os.path.join(self.out, f"{name}.log")
        with open(log_path, "wb") as log:
            stdout = subprocess.PIPE if kind == "worker" else log
            popen = procs.spawn(cmd, stdout=stdout, stderr=log)
        proc = Proc(name, kind, popen, log_path)
        self.procs.append(proc)
        if kind == "worker":
            os.set_blocking(popen.stdout.fileno(), False)
            self.sel.register(popen.stdout, selectors.EVENT_READ, proc)
        write_pids(self.out, self.procs)
        return proc

    def stop_all(self):
        """Stops every process still running (procs.stop).
        Idempotent; returns the processes that needed SIGKILL."""
        self.view.frozen = True
        killed = procs.stop([p.popen for p in self.procs])
        stubborn = [p for p in self.procs if p.popen in killed]
        for p in self.procs:
            if p.rc is None:
                p.rc = p.popen.returncode
            if p.popen.stdout is not None and not p.popen.stdout.closed:
                if p.open_pipe:
                    self.sel.unregister(p.popen.stdout)
                    p.open_pipe = False
                p.popen.stdout.close()
        return stubborn

    def on_signal(self, signum, _frame):
        if self.signal is None:
            self.signal = signum

    def check_signal(self):
        if self.signal is not None and not self.view.frozen:
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
                    self.record.handle_line(w, w.buf)
                    w.buf = b""
                return
            w.buf += data
            *lines, w.buf = w.buf.split(b"\n")
            for line in lines:
                self.record.handle_line(w, line)
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

    # -- the run --------------------------------------------------------------

    def run(self):
        a = self.args
        os.makedirs(self.out, exist_ok=True)
        for name in (SUMMARY, METRICS, EVENTS, PLOT, PIDS, MODEL_NPZ, MODEL_PT, "scheduler.endpoint", "accuracy.gp"):
            try:
                os.remove(os.path.join(self.out, name))
            except FileNotFoundError:
                pass
        self.record = Record(a, self.out, self.view)

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
                                     f"--consistency={a.consistency}",
                                     *self.key_flags(keys, "scheduler", "scheduler"), *a.scheduler_flag]))
        self.endpoint = self.wait_endpoint(sched, endpoint_file)
        self.say(f"launch_job: scheduler at {self.endpoint}; {plural(a.servers, 'server')}, "
                 f"{plural(a.workers, 'worker')}"
                 + (f" in {plural(a.workers // a.stages, 'group')} of {a.stages} pipeline stages" if a.stages > 1 else "")
                 + f", {a.consistency}, {plural(a.epochs, 'epoch')}, device {a.device}, placement {a.placement}; "
                 f"logs in {self.out}")
        # The servers' final checkpoints (written as they stop) are what
        # model.npz is exported from: in OUT/checkpoints, or where the caller
        # keeps them (--server-flag=--checkpoint_dir=DIR).
        given = [f.split("=", 1)[1] for f in a.server_flag if f.startswith("--checkpoint_dir=")]
        ckpt_dir = given[-1] if given else os.path.join(self.out, CHECKPOINTS)
        ckpt = [] if given else [f"--checkpoint_dir={ckpt_dir}"]
        for i in range(a.servers):
            self.spawn(f"server-{i}", "server",
                       in_ns(1 + i, [bin_("ps_server"), f"--scheduler={self.endpoint}", "--num_threads=1",
                                     *host(1 + i), *self.key_flags(keys, "server", f"server-{i}"), *ckpt,
                                     *table_disk_flags(a.table_disk_dir, i), *a.server_flag]))
        # Python workers write the module's state_dict too (rank 0, at the end).
        save = [f"--save={os.path.join(self.out, MODEL_PT)}"] if a.worker_binary.startswith("ps_torch") else []
        # worker-I asks for rank I (the scheduler gives it at formation), so
        # that its name, its log and its rank agree.
        for i in range(a.workers):
            self.spawn(f"worker-{i}", "worker",
                       in_ns(1 + a.servers + i,
                             [bin_(a.worker_binary), f"--scheduler={self.endpoint}", f"--rank={i}",
                              f"--consistency={a.consistency}",
                              f"--epochs={a.epochs}", f"--device={a.device}", f"--placement={a.placement}",
                              *self.key_flags(keys, "worker", f"worker-{i}"), *save, *a.worker_flags]))
        self.monitor()
        self.view.finish(self.workers())
        code = self.record.report(self.workers(), self.t_workers_done - self.t0, self.network)
        return self.export(ckpt_dir) if code == 0 else code

    def export(self, ckpt_dir):
        """The trained model out of the final checkpoints: OUT/model.npz (ps_export); 0, or 1 naming why not."""
        out = os.path.join(self.out, MODEL_NPZ)
        r = subprocess.run([os.path.join(self.args.bin_dir, "ps_export"), f"--checkpoint_dir={ckpt_dir}",
                            f"--out={out}"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=EXIT_DEADLINE_S * 10)
        if r.returncode != 0:
            self.say(f"launch_job: ps_export failed (exit {r.returncode}): {r.stderr.strip()[-500:]}", err=True)
            return 1
        self.say(f"launch_job: the trained model is in {out}" +
                 (f" and {os.path.join(self.out, MODEL_PT)}" if os.path.exists(os.path.join(self.out, MODEL_PT)) else ""))
        return 0

    def make_keys(self):
        keys = make_keys("launch_job.py", self.args.bin_dir, self.out, self.args.servers, self.args.workers)
        self.say(f"launch_job: CurveZMQ on; throwaway keys in {keys}")
        return keys

    def key_flags(self, keys, kind, name):
        """The security flags of one process: its keys with --secure, --insecure on an emulated network."""
        if keys is None:
            return ["--insecure"] if self.hosts is not None else []
        return key_flags(keys, kind, name)

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
            self.view.draw(self.workers())

    def report_failures(self, failures):
        self.view.finish(self.workers())
        for p, reason in failures:
            rank = f", rank {p.start['rank']}" if p.start else ""
            self.say(f"launch_job: {p.name} (pid {p.pid}{rank}) {reason}; stopping the others", err=True)
            self.say(f"--- last {LOG_TAIL_LINES} lines of {p.log_path}:", err=True)
            for line in tail(p.log_path, LOG_TAIL_LINES):
                self.say(line, err=True)
