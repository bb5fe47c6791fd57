#!/usr/bin/python3
"""A network cut between the workers and one server, while the scheduler
still hears that server, on hosts of scripts/netns.py (one namespace each:
the scheduler, two servers, two workers of ps_exact_sum, sync). The cut is
a blackhole route on both sides (`ip -n NS route add blackhole IP/32`),
which drops packets without a reset, as a partition does.

  (a) --replicas=2: each worker says so in its log and events within the
      heartbeat timeout (1 s) + 0.5 s, the scheduler fences the server (it
      is declared dead, "unreachable" in why) and its slices fail over: the
      longest step stays within the heartbeat timeout + 1 s, sums exact.
  (b) --replicas=1: nowhere to fail over; the workers wait, warning about
      the server by name, the scheduler's events say the job waits for it
      (fenced false), it is not declared dead; after the heal each worker
      hears it again within 1 s, and the sums are exact.

    tests/partition_test.py BIN_DIR [--cut-s SECONDS]

Where namespaces cannot be made (not root, no iproute2), prints the reason
and exits 77 (ctest: skipped). Every process is stopped by its own pid, and
the network is taken down, however the test ends.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import netns  # noqa: E402

HEARTBEAT_TIMEOUT_S = 1.0
TIMING = ["--heartbeat_interval=200ms", f"--heartbeat_timeout={HEARTBEAT_TIMEOUT_S:g}s"]
failures = []


def check(ok, what):
    print(f"  {'ok' if ok else 'FAIL'}: {what}", flush=True)
    if not ok:
        failures.append(what)
    return ok


def events(path, kind=None):
    try:
        with open(path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
    return [e for e in lines if kind is None or e["event"] == kind]


def wait_for(what, deadline_s, predicate):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    check(False, f"{what} within {deadline_s:g} s")
    return None


class Job:
    """The job's processes, each in its namespace; stopped by pid."""

    def __init__(self, bin_dir, out, hosts, replicas):
        self.bin, self.out, self.hosts, self.procs = bin_dir, out, hosts, {}
        ip = [h["ip"] for h in hosts]
        sched_port, server_port = 29400, 29410
        self.spawn("scheduler", 0, ["ps_scheduler", f"--host={ip[0]}", f"--port={sched_port}", "--num_servers=2",
                                    "--num_workers=2", f"--replicas={replicas}", "--insecure",
                                    f"--heartbeat_timeout={HEARTBEAT_TIMEOUT_S:g}s"])
        sched = f"{ip[0]}:{sched_port}"
        for r in range(2):
            self.spawn(f"server-{r}", 1 + r, ["ps_server", f"--scheduler={sched}", f"--host={ip[1 + r]}",
                                              f"--port={server_port}", f"--rank={r}", "--insecure", "--shm=false",
                                              "--num_threads=1", *TIMING])
        for w in range(2):
            self.spawn(f"worker-{w}", 3 + w, ["ps_exact_sum", f"--scheduler={sched}", f"--rank={w}", "--insecure",
                                              "--shm=false", "--consistency=sync", "--steps=1500", "--step_ms=5",
                                              "--dense_elements=20000", "--slice_bytes=16384", "--table_ids=50",
                                              "--progress_every=50", *TIMING])

    def spawn(self, name, host, cmd):
        cmd = [os.path.join(self.bin, cmd[0]), *cmd[1:], f"--events={self.path(name, 'events')}"]
        log = open(self.path(name, "log"), "wb")
        self.procs[name] = netns.popen_in(self.hosts[host]["ns"], cmd, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)

    def path(self, name, ext):
        return os.path.join(self.out, f"{name}.{ext}")

    def log(self, name):
        with open(self.path(name, "log"), errors="replace") as f:
            return f.read()

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def cut(hosts, server, workers, add):
    verb = "add" if add else "del"
    for w in workers:
        for a, b in ((w, server), (server, w)):
            subprocess.run(["ip", "-n", hosts[a]["ns"], "route", verb, "blackhole", f"{hosts[b]['ip']}/32"],
                           check=True)


def cut_when_running(job, hosts):
    """Cuts server 1 (host 2) off from both workers (hosts 3, 4) once they
    are at step 100; the time of the cut, or None when they never got there."""
    if not wait_for("workers at step 100", 60, lambda: progressed(job, 100)):
        return None
    t_cut = time.time()
    cut(hosts, 2, (3, 4), add=True)
    return t_cut


def heal_at(hosts, when):
    """Ends the cut at `when` (unix seconds, or at once when past); the time it healed."""
    time.sleep(max(0.0, when - time.time()))
    t_heal = time.time()
    cut(hosts, 2, (3, 4), add=False)
    return t_heal


def progressed(job, steps):
    return all(f"exact_sum steps={steps}" in job.log(f"worker-{w}") for w in range(2))


def finish(job, what):
    done = wait_for(f"{what}: both workers finished", 90,
                    lambda: all(job.procs[f"worker-{w}"].poll() is not None for w in range(2)))
    results = []
    for w in range(2):
        log = job.log(f"worker-{w}")
        line = next((l for l in log.splitlines() if l.startswith("exact_sum OK")), "")
        ok = done and job.procs[f"worker-{w}"].returncode == 0 and line
        check(bool(ok), f"{what}: worker {w} exit 0 with exact sums ({line[:120] or log[-400:]})")
        fields = dict(f.split("=", 1) for f in line.split()[2:] if "=" in f)
        results.append(fields)
    return results


def replicated_case(bin_dir, out, hosts, cut_s):
    print(f"(a) --replicas=2: server 1 cut off from both workers for {cut_s:g} s")
    job = Job(bin_dir, out, hosts, replicas=2)
    try:
        t_cut = cut_when_running(job, hosts)
        if t_cut is None:
            return
        # The first worker to time out gets the server fenced; the other may
        # get the failover's view before its own timeout.
        said = wait_for("a worker's server_unreachable event", 10, lambda: [
            e for w in range(2) for e in events(job.path(f"worker-{w}", "events"), "server_unreachable")])
        if said:
            first = min(said, key=lambda e: e["time"])
            check(first["server"] == 1 and first["time"] - t_cut <= HEARTBEAT_TIMEOUT_S + 0.5,
                  f"a worker named server {first['server']} {first['time'] - t_cut:.2f} s after the cut")
        dead = wait_for("the scheduler's node_dead for server 1", 10, lambda: [
            e for e in events(job.path("scheduler", "events"), "node_dead") if e["role"] == "server"])
        if dead:
            check(dead[0]["rank"] == 1 and "unreachable" in dead[0]["why"], f"fenced: {dead[0]['why']}")
        for w in range(2):
            check("server 1 (" in job.log(f"worker-{w}"), f"worker {w}'s log names server 1")
        heal_at(hosts, t_cut + cut_s)
        for w, fields in enumerate(finish(job, "replicas=2")):
            longest = float(fields.get("longest_step_ms", "inf"))
            check(longest <= (HEARTBEAT_TIMEOUT_S + 1) * 1000,
                  f"worker {w}: longest step {longest:.0f} ms <= heartbeat timeout + 1 s")
    finally:
        job.stop()


def one_copy_case(bin_dir, out, hosts, cut_s):
    print(f"(b) --replicas=1: server 1 cut off from both workers for {cut_s:g} s")
    job = Job(bin_dir, out, hosts, replicas=1)
    try:
        t_cut = cut_when_running(job, hosts)
        if t_cut is None:
            return
        for w in range(2):
            wait_for(f"worker {w}'s server_unreachable event", 10,
                     lambda: events(job.path(f"worker-{w}", "events"), "server_unreachable"))
        said = wait_for("the scheduler's server_unreachable events", 10, lambda: len(
            events(job.path("scheduler", "events"), "server_unreachable")) >= 2 and events(
                job.path("scheduler", "events"), "server_unreachable"))
        if said:
            check(all(e["rank"] == 1 and not e["fenced"] for e in said), "the scheduler: server 1, not fenced")
        time.sleep(max(0.0, t_cut + cut_s - time.time()))  # the cut lasts its time
        for w in range(2):
            check("server 1 (" in job.log(f"worker-{w}") and "one copy of its slices: waiting for it"
                  in job.log(f"worker-{w}"), f"worker {w} warns that it waits for server 1")
        t_heal = heal_at(hosts, time.time())
        for w in range(2):
            back = wait_for(f"worker {w} hears server 1 again", 10,
                            lambda: events(job.path(f"worker-{w}", "events"), "server_reachable"))
            if back:
                check(back[0]["time"] - t_heal <= 1.0,
                      f"worker {w} heard server 1 again {back[0]['time'] - t_heal:.2f} s after the heal")
        finish(job, "replicas=1")
        check(not events(job.path("scheduler", "events"), "node_dead"), "no node declared dead")
        check(job.procs["server-1"].poll() is None or job.procs["server-1"].returncode == 0, "server 1 served on")
    finally:
        job.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bin_dir")
    p.add_argument("--cut-s", type=float, default=8.0,
                   help="how long each cut lasts (default 8: past the sockets' 5 s TCP user timeout)")
    a = p.parse_args()
    reason = netns.check()
    if reason:
        print(f"partition_test: skipped: {reason}")
        return 77
    out = tempfile.mkdtemp(prefix="partition_test.")
    prefix = f"pt{os.getpid() % 10000}x"
    with netns.Network(prefix, 5, rate="10gbit", delay_ms=0, measure_network=False) as hosts:
        for case, sub in ((replicated_case, "replicas2"), (one_copy_case, "replicas1")):
            os.makedirs(os.path.join(out, sub))
            case(a.bin_dir, os.path.join(out, sub), hosts, a.cut_s)
    print(f"partition_test: logs in {out}")
    print("partition_test: all checks passed" if not failures else f"partition_test: FAILED: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
