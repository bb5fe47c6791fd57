"""ps_run's supervision of a job (scripts/ps_run): the scheduler, S servers
and W copies of the user's command, each in its own process group. One
event loop, a selector over the children's pidfds, the workers' stdout and
stderr pipes, the scheduler's output and a signal wake-up pipe, prints each
worker line prefixed with its rank, decides when the job has failed, and
stops every process (launch/procs.py: a signal to each group, then
SIGKILL after TERM_GRACE_S). Every wait is a select() with a deadline; nothing sleeps.
Not thread-safe: one thread runs it; a signal only wakes the loop."""
import collections
import os
import selectors
import signal
import subprocess
import sys
import time

from launch import procs
from launch.common import (ENDPOINT_DEADLINE_S, EXIT_DEADLINE_S, add_key, describe_exit, key_flags, make_keys, plural,
                           table_disk_flags, tail, write_pids)
from launch.procs import TERM_GRACE_S

TAIL_LINES = 20
# What ps_run reads in the scheduler's output: scheduler_main.cc prints the
# first; scheduler.cc logs the others, once every node has registered and
# when the job ends without workers that died (went silent).
LISTENING = b"ps_scheduler listening on "
FORMED = b"scheduler: cluster formed"
DEAD_WORKERS = b"scheduler: ending the job without the dead workers"
# A worker that exits 0 before the job formed never connected: ps.connect()
# returns only once the cluster view has come, and the scheduler logs
# "cluster formed" just after sending it. SETTLE_S allows for that line to
# reach us after the worker's exit before ps_run calls the job broken.
SETTLE_S = 1.0
# The variables ps_run sets; inherited ones are removed first, so that a
# nested or stale setting never reaches a worker.
JOB_ENV = ("PS_SCHEDULER", "PS_RANK", "PS_NUM_WORKERS", "PS_NUM_SERVERS", "PS_CONSISTENCY",
           "PS_SECRET_KEY_FILE", "PS_SCHEDULER_PUBLIC_KEY", "PS_INSECURE")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# --elastic or --replicas >= 2: SIGUSR1 adds a server to the running job, SIGUSR2 drains the newest.
SCALE_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
class Child:
    """One process of the job: scheduler, server-I or worker-I (rank I)."""

    def __init__(self, name, kind, index, popen, log_path):
        self.name, self.kind, self.index = name, kind, index
        self.popen = popen
        self.log_path = log_path    # servers and scheduler; None for workers
        self.pidfd = os.pidfd_open(popen.pid)
        self.rc = None              # set once reaped
        self.pipes = {}             # fd -> [stream name, partial line], while open
        self.tail = collections.deque(maxlen=TAIL_LINES)  # workers: last lines, both streams
        self.leaving = False        # a server told to drain (SIGUSR2)

    @property
    def pid(self):
        return self.popen.pid

    @property
    def label(self):
        return {"worker": f"rank {self.index}", "server": f"server {self.index}"}.get(self.kind, "the scheduler")


class RunJob:
    def __init__(self, args):
        self.args = args
        self.out = args.out
        self.children = []
        self.sel = selectors.DefaultSelector()
        self.endpoint = None      # HOST:PORT once the scheduler listens
        self.formed = False       # the scheduler said "cluster formed"
        self.code = None          # ps_run's exit code, once the end is decided
        self.keys = None          # --secure: the directory of the job's keys
        self.sched_log = None
        self.deadlines = {}       # endpoint, settle, exit, kill -> time.monotonic() deadline
        self.signals = 0
        self.wake_fd = None

    # -- the loop -------------------------------------------------------------

    def run(self):
        """Runs the job to its end; returns ps_run's exit code."""
        self.install_signals()
        if self.args.secure:
            self.keys = self.make_keys()
        self.start_scheduler()
        while self.live():
            self.step()
        for w in self.workers():  # lines without their newline, of pipes still open
            self.drain(w)
            for stream, partial in w.pipes.values():
                self.emit(w, stream, [partial] if partial else [])
        if self.code is None:
            self.code = 0
        else:
            self.say(f"ps_run: every process of the job has exited; logs in {self.out}")
        return self.code

    def step(self):
        timeout = None
        if self.deadlines:
            timeout = max(0.0, min(self.deadlines.values()) - time.monotonic())
        for key, _ in self.sel.select(timeout):
            key.data()
        now = time.monotonic()
        for what, t in sorted(self.deadlines.items(), key=lambda d: d[1]):
            if t <= now and self.deadlines.get(what) == t:
                del self.deadlines[what]
                getattr(self, f"{what}_expired")()

    def live(self):
        return [c for c in self.children if c.rc is None]

    def workers(self):
        return [c for c in self.children if c.kind == "worker"]

    def say(self, text):
        try:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except OSError:  # our stderr is gone; the job goes on
            pass

    # -- signals --------------------------------------------------------------

    def install_signals(self):
        """SIGINT, SIGTERM and SIGHUP only write their number to a pipe the
        loop selects on (signal.set_wakeup_fd); on_signal acts on them."""
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        for s in STOP_SIGNALS + SCALE_SIGNALS:
            signal.signal(s, lambda *_: None)
        self.wake_fd = r
        self.sel.register(r, selectors.EVENT_READ, self.on_signal)

    def on_signal(self):
        try:
            data = os.read(self.wake_fd, 64)
        except BlockingIOError:
            return
        for signum in data:
            if signum in SCALE_SIGNALS:
                self.scale(signum == signal.SIGUSR1)
                continue
            if signum not in STOP_SIGNALS:
                continue
            self.signals += 1
            name = signal.Signals(signum).name
            if self.signals > 1:
                self.say(f"ps_run: {name} again: SIGKILL to every process of the job")
                self.signal_all(signal.SIGKILL)
                continue
            if self.code is None:
                self.code = 128 + signum
            self.say(f"ps_run: {name}: passing it to every process of the job "
                     f"(SIGKILL after {TERM_GRACE_S:.0f} s)")
            self.stop(signal.SIGTERM if signum == signal.SIGHUP else signum)

    # -- servers joining and leaving ------------------------------------------

    def servers(self):
        return [c for c in self.children if c.kind == "server"]

    def scale(self, grow):
        """SIGUSR1: a new server joins the running job (ps_server --join);
        SIGUSR2: the newest live server leaves it (SIGTERM to a server
        started with --drain: its slices move to the others first)."""
        a = self.args
        why = ("the job does not track where its slices are (start ps_run with --elastic or --replicas 2)"
               if a.replicas < 2 and not a.elastic else
               "the job has not formed yet" if not self.formed else
               "the job is ending" if self.code is not None else None)
        if why is None and not grow and len([c for c in self.servers() if c.rc is None]) <= a.replicas:
            why = f"{plural(a.replicas, 'server')} must stay for {a.replicas} copies of each slice"
        if why is not None:
            self.say(f"ps_run: {'SIGUSR1: no server added' if grow else 'SIGUSR2: no server drained'}: {why}")
            return
        if grow:
            index = len(self.servers())
            if self.keys is not None:  # its key pair first: the others admit it from the directory
                add_key("ps_run", a.bin_dir, self.keys, f"server-{index}")
            self.spawn(f"server-{index}", "server", index, self.server_cmd(index, ["--join"]))
            self.say(f"ps_run: SIGUSR1: server-{index} joins the job (its log: {self.out}/server-{index}.log)")
            return
        newest = [c for c in self.servers() if c.rc is None][-1]
        newest.leaving = True
        procs.signal_group(newest.pid, signal.SIGTERM)
        self.say(f"ps_run: SIGUSR2: {newest.name} (pid {newest.pid}) leaves the job once its slices moved")

    def server_cmd(self, index, extra=()):
        a = self.args
        drain = ["--drain"] if a.replicas >= 2 or a.elastic else []
        return [os.path.join(a.bin_dir, "ps_server"), f"--scheduler={self.endpoint}",
                f"--events={os.path.join(self.out, f'server-{index}.events')}", *self.key_flags(f"server-{index}"), *table_disk_flags(a.table_disk_dir, index), *drain, *extra]

    # -- stopping -------------------------------------------------------------

    def signal_all(self, sig):
        for c in self.live():
            procs.signal_group(c.pid, sig)

    def stop(self, sig):
        """Sends `sig` to every process group; SIGKILL after TERM_GRACE_S."""
        for what in ("endpoint", "settle", "exit"):
            self.deadlines.pop(what, None)
        self.signal_all(sig)
        self.deadlines.setdefault("kill", time.monotonic() + TERM_GRACE_S)

    def kill_expired(self):
        left = self.live()
        if left:
            self.say(f"ps_run: SIGKILL to {', '.join(f'{c.label} (pid {c.pid})' for c in left)}, "
                     f"still running {TERM_GRACE_S:.0f} s after the signal")
            self.signal_all(signal.SIGKILL)

    def kill_all(self):
        """Whatever happened (an exception of ours included): SIGKILL to
        every process still running, and reaps it. Idempotent."""
        self.signal_all(signal.SIGKILL)
        for c in self.children:
            if c.rc is None:
                c.rc = c.popen.wait()

    def fail(self, message, code=1, child=None):
        """The first failure decides the exit code and stops the job; later
        ones (the processes it stops) are not reported."""
        if self.code is not None:
            return
        self.code = code
        self.say(f"ps_run: {message}; stopping the job")
        if child is not None:
            lines = list(child.tail) if child.kind == "worker" else tail(child.log_path, TAIL_LINES)
            where = f"{child.label}'s output" if child.kind == "worker" else child.log_path
            self.say(f"ps_run: last {plural(len(lines), 'line')} of {where}:")
            for line in lines:
                self.say(f"    {line}")
        self.stop(signal.SIGTERM)

    # -- starting -------------------------------------------------------------

    def make_keys(self):
        return make_keys("ps_run", self.args.bin_dir, self.out, self.args.servers, self.args.workers)

    def key_flags(self, name):
        """A server's or the scheduler's CurveZMQ flags (none without --secure)."""
        if self.keys is None:
            return []
        return key_flags(self.keys, "scheduler" if name == "scheduler" else "server", name)

    def spawn(self, name, kind, index, cmd, env=None):
        """Starts one process in its own process group and watches it."""
        log_path = None if kind == "worker" else os.path.join(self.out, f"{name}.log")
        if kind == "server":
            with open(log_path, "wb") as log:
                popen = self.popen(cmd, env, log, log)
        else:
            popen = self.popen(cmd, env, subprocess.PIPE,
                               subprocess.PIPE if kind == "worker" else subprocess.STDOUT)
        c = Child(name, kind, index, popen, log_path)
        self.children.append(c)
        self.sel.register(c.pidfd, selectors.EVENT_READ, lambda: self.on_exit(c))
        for stream, pipe in (("stdout", popen.stdout), ("stderr", popen.stderr)):
            if pipe is not None:
                fd = pipe.fileno()
                os.set_blocking(fd, False)
                c.pipes[fd] = [stream, b""]
                self.sel.register(fd, selectors.EVENT_READ, lambda fd=fd: self.read_pipe(c, fd))
        write_pids(self.out, self.children)
        return c

    def popen(self, cmd, env, stdout, stderr):
        return procs.spawn(cmd, stdout=stdout, stderr=stderr, env=env)

    def start_scheduler(self):
        a = self.args
        self.sched_log = open(os.path.join(self.out, "scheduler.log"), "wb", buffering=0)
        self.spawn("scheduler", "scheduler", 0,
                   [os.path.join(a.bin_dir, "ps_scheduler"), "--port=0",
                    f"--endpoint_file={os.path.join(self.out, 'scheduler.endpoint')}",
                    f"--events={os.path.join(self.out, 'scheduler.events')}",
                    f"--num_servers={a.servers}", f"--num_workers={a.workers}", f"--replicas={a.replicas}", f"--elastic={str(a.elastic).lower()}",
                    f"--register_timeout={a.register_timeout}", *self.key_flags("scheduler"),
                    # The scheduler refuses a script's model in another mode, naming both.
                    *([f"--consistency={a.consistency}"] if a.consistency is not None else [])])
        self.deadlines["endpoint"] = time.monotonic() + ENDPOINT_DEADLINE_S

    def start_job(self):
        """Once the scheduler listens: the servers, then the workers."""
        a = self.args
        self.say(f"ps_run: scheduler at {self.endpoint}; {plural(a.servers, 'server')}, "
                 f"{plural(a.workers, 'worker')}{'' if self.keys is None else ', CurveZMQ'}")
        for i in range(a.servers):
            self.spawn(f"server-{i}", "server", i, self.server_cmd(i))
        for rank in range(a.workers):
            try:
                self.spawn(f"worker-{rank}", "worker", rank, a.command, self.worker_env(rank))
            except OSError as e:
                self.fail(f"cannot start {a.command[0]}: {e.strerror}", code=127)
                return

    def worker_env(self, rank):
        a = self.args
        env = {k: v for k, v in os.environ.items() if k not in JOB_ENV}
        env.update(PS_SCHEDULER=self.endpoint, PS_RANK=str(rank), PS_NUM_WORKERS=str(a.workers),
                   PS_NUM_SERVERS=str(a.servers))
        if a.consistency is not None:
            env["PS_CONSISTENCY"] = a.consistency
        if self.keys is not None:
            env["PS_SECRET_KEY_FILE"] = os.path.join(self.keys, f"worker-{rank}.key")
            env["PS_SCHEDULER_PUBLIC_KEY"] = os.path.join(self.keys, "scheduler.pub")
        python_dir = os.path.normpath(os.path.join(a.bin_dir, "..", "python"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (python_dir, env.get("PYTHONPATH")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")  # each line as it is printed, not when a buffer fills
        return env

    def endpoint_expired(self):
        self.fail(f"the scheduler (pid {self.children[0].pid}) printed no endpoint within "
                  f"{ENDPOINT_DEADLINE_S:.0f} s", child=self.children[0])

    # -- output ---------------------------------------------------------------

    def read_pipe(self, c, fd):
        """Reads what one pipe has; returns whether it read anything."""
        if fd not in c.pipes:  # closed earlier in this round of events
            return False
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return False
        entry = c.pipes[fd]
        if not data:
            self.sel.unregister(fd)
            os.close(fd)
            del c.pipes[fd]
            lines = [entry[1]] if entry[1] else []
        else:
            if c.kind == "scheduler":
                self.sched_log.write(data)
            *lines, entry[1] = (entry[1] + data).split(b"\n")
        if c.kind == "worker":
            self.emit(c, entry[0], lines)
        else:
            for line in lines:
                self.on_scheduler_line(line)
        return bool(data)

    def drain(self, c):
        """Reads everything a process has written so far (it may have left
        its pipes to a child of its own: no read waits for EOF)."""
        for fd in list(c.pipes):
            while self.read_pipe(c, fd):
                pass

    def emit(self, c, stream, lines):
        if not lines:
            return
        prefix = f"[rank{c.index}]: ".encode()
        c.tail.extend(line.decode("utf-8", "replace") for line in lines)
        out = sys.stdout.buffer if stream == "stdout" else sys.stderr.buffer
        try:
            out.write(b"".join(prefix + line + b"\n" for line in lines))
            out.flush()
        except OSError:  # our stdout is gone; the job goes on
            pass

    def on_scheduler_line(self, line):
        if self.endpoint is None and line.startswith(LISTENING):
            endpoint = line[len(LISTENING):].decode("utf-8", "replace").strip()
            self.endpoint = endpoint.removeprefix("tcp://")  # HOST:PORT, as ps.connect and --scheduler take it
            self.deadlines.pop("endpoint", None)
            if self.code is None:
                self.start_job()
        elif DEAD_WORKERS in line:
            self.say(f"ps_run: warning: {line.decode('utf-8', 'replace').partition('scheduler: ')[2]} "
                     f"(ranks that exited 0 without client.finish()?)")
        elif not self.formed and FORMED in line:
            self.formed = True
            self.deadlines.pop("settle", None)
            self.check_workers_done()

    # -- exits ----------------------------------------------------------------

    def on_exit(self, c):
        if c.rc is not None:
            return
        # What is left of its process group; the unreaped leader keeps the group id ours.
        procs.signal_group(c.pid, signal.SIGKILL)
        c.rc = c.popen.wait()
        self.sel.unregister(c.pidfd)
        os.close(c.pidfd)
        self.drain(c)
        if self.code is not None:  # stopping: every exit is expected now
            return
        if c.kind == "server" and c.leaving and c.rc == 0:
            self.say(f"ps_run: {c.name} drained and left the job")
            return
        if c.rc != 0:
            self.process_failed(c)
        elif c.kind == "worker":
            self.drain(self.children[0])  # the scheduler's "cluster formed", if it is there
            self.check_workers_done()
        elif c.kind == "scheduler" and self.endpoint is None:
            self.fail(f"the scheduler (pid {c.pid}) exited with code 0 without listening", child=c)

    def process_failed(self, c):
        if c.kind == "worker":
            code = c.rc if c.rc > 0 else 128 - c.rc
            self.fail(f"{c.label} (pid {c.pid}) {describe_exit(c.rc)}", code=code, child=c)
            return
        # A server fails mostly because the scheduler ended the job: the
        # hints are the scheduler's reasons, whichever of them ends first.
        hint = ""
        if not self.formed and self.endpoint is not None:
            hint = (f" before the job formed (did all {plural(self.args.workers, 'worker')} call ps.connect() "
                    f"within --register-timeout {self.args.register_timeout}?)")
        elif self.workers() and all(w.rc == 0 for w in self.workers()):
            hint = " after every worker exited 0 (did each call client.finish()?)"
        self.fail(f"{c.label} (pid {c.pid}) {describe_exit(c.rc)}{hint}", child=c)

    def check_workers_done(self):
        """A worker exited 0. Before the job formed it cannot have
        connected: the job can never form (settle_expired). Once every
        worker exited 0 in a formed job, the scheduler and the servers have
        EXIT_DEADLINE_S to end."""
        workers = self.workers()
        if not workers or not any(w.rc == 0 for w in workers):
            return
        if not self.formed:
            self.deadlines.setdefault("settle", time.monotonic() + SETTLE_S)
        elif all(w.rc == 0 for w in workers) and "exit" not in self.deadlines:
            self.deadlines["exit"] = time.monotonic() + EXIT_DEADLINE_S

    def settle_expired(self):
        done = [w for w in self.workers() if w.rc == 0]
        if len(done) == self.args.workers:
            what = "every worker exited with code 0 without the job forming"
        else:
            what = f"{', '.join(f'{w.label} (pid {w.pid})' for w in done)} exited with code 0 before the job formed"
        self.fail(f"{what}: the scheduler waits for all {plural(self.args.workers, 'worker')} to register, and a "
                  f"worker that ends first never did (does the script call ps.connect()?)")

    def exit_expired(self):
        left = ", ".join(f"{c.label} (pid {c.pid})" for c in self.live())
        self.fail(f"every worker exited 0, but {left} still running {EXIT_DEADLINE_S:.0f} s later: the workers "
                  f"ended without the job finishing (did each call client.finish()?)")
