#!/usr/bin/python3
"""The Python client (package ps) against real jobs on 127.0.0.1.

    python_client_test.py --bin-dir build/bin --python-dir build/python

- Exact sums: a scheduler, 2 servers and 2 Python worker processes push
  integer gradients (SGD, lr 1) to a dense tensor and to table rows (ids
  repeated within a step) for 8 steps, sync, async and ssp:1; in sync every
  pulled value, in ssp:1 none is staler than the bound allows, and in every
  mode the sums at the end, must be exact.
- Zero copy: a pull into a torch tensor lands in that tensor (same data_ptr).
- Bad buffers: each gets its TypeError / ValueError naming the tensor; a
  server's refusal is a ps.Error with its code; a pushed temporary stays
  alive until its ticket completes.
- `cmake --install BUILD --prefix TMP` puts a package python3 imports.

Every process started is stopped by its pid (process group) at the end,
also when a check fails. unittest runs the tests (each check a subTest);
exit 0 when every check passed.
"""

import argparse
import datetime
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

STEPS = 8
N = 1000          # elements of the dense tensor
DIM = 4           # row dimension of the table
IDS = 50          # distinct ids the table sees
PER_STEP = 16     # ids each worker pushes per step (with repeats)
DEADLINE_S = 60


def table_id(i):
    return (i * 0x9E3779B97F4A7C15 + 12345) % (1 << 64)


def row_index(w, s, k):
    return (w * 7 + s * 3 + k * k) % IDS


def model(mode):
    return {"tensors": [{"name": "w", "shape": [N]}],
            "tables": [{"name": "rows", "dim": DIM}],
            "optimizer": {"kind": "sgd", "lr": 1.0}, "consistency": mode}


def dense_of(np, w, steps):
    """What worker w's first `steps` steps add to the dense tensor."""
    i = np.arange(N)
    return sum((1 + (w + s + i) % 5 for s in range(steps)), np.zeros(N, np.float64))


def expected(np, workers, steps):
    """The dense tensor and every row after `steps` steps of every worker."""
    dense = sum((dense_of(np, w, steps) for w in range(workers)), np.zeros(N, np.float64))
    rows = np.zeros((IDS, DIM), np.float64)
    for s in range(steps):
        for w in range(workers):
            for k in range(PER_STEP):
                rows[row_index(w, s, k)] += [1 + (w + 2 * s + k + j) % 3 for j in range(DIM)]
    return dense, rows


def run_worker(args):
    """One worker of the exact-sum job: prints one JSON line."""
    import numpy as np
    import ps
    c = ps.connect(args.scheduler, register_timeout=30, request_timeout=30, shm=args.shm == "on")
    c.register_model(model(args.mode))
    wn, me = c.num_workers, c.rank
    mult = wn if args.mode == "sync" else 1  # sync applies the mean
    w = np.zeros(N, np.float32)
    all_ids = np.array([table_id(i) for i in range(IDS)], np.uint64)
    rows = np.zeros((IDS, DIM), np.float32)
    i = np.arange(N)
    for s in range(STEPS):
        grad = (-mult * (1 + (me + s + i) % 5)).astype(np.float32)
        ids = np.array([table_id(row_index(me, s, k)) for k in range(PER_STEP)], np.uint64)
        rg = np.array([[-mult * (1 + (me + 2 * s + k + j) % 3) for j in range(DIM)] for k in range(PER_STEP)],
                      np.float32)
        c.exchange(push={"w": grad}, push_rows=[("rows", ids, rg)], step=s,
                   pull={"w": w}, pull_rows=[("rows", all_ids, rows)], pull_step=s + 1).wait()
        if args.mode == "sync":
            dense, table = expected(np, wn, s + 1)
            if not (np.array_equal(w, dense) and np.array_equal(rows, table)):
                print(json.dumps({"ok": False, "why": f"step {s + 1}: pulled values are not exact"}), flush=True)
                return 1
        if args.mode == "ssp:1":
            # Pulled for clock s + 1 with staleness 1: every worker's steps
            # before s are in (gradients are all of one sign, so "in" is >=).
            floor = dense_of(np, me, s + 1) + sum(dense_of(np, o, s) for o in range(wn) if o != me)
            if not np.all(w >= floor):
                print(json.dumps({"ok": False, "why": f"ssp:1 step {s}: a pull missed a push older than the bound"}),
                      flush=True)
                return 1
    c.barrier("done")
    c.pull({"w": w}, STEPS).wait()
    c.pull_rows([("rows", all_ids, rows)], STEPS).wait()
    dense, table = expected(np, wn, STEPS)
    ok = bool(np.array_equal(w, dense) and np.array_equal(rows, table))
    print(json.dumps({"ok": ok, "rank": me, "dense_sum": float(w.sum()), "expected": float(dense.sum()),
                      "rows_sum": float(rows.sum()), "expected_rows": float(table.sum()),
                      "shm_servers": c.stats()["shm_servers"]}), flush=True)
    c.finish()
    return 0 if ok else 1


class Job:
    """A scheduler and servers as processes, each in its own process group."""

    def __init__(self, bin_dir, servers, workers, server_flags=()):
        self.procs, self.tmp = [], tempfile.mkdtemp(prefix="python_client_test.")
        endpoint_file = os.path.join(self.tmp, "endpoint")
        self.start([os.path.join(bin_dir, "ps_scheduler"), f"--num_servers={servers}", f"--num_workers={workers}",
                    f"--endpoint_file={endpoint_file}", "--register_timeout=30s"], "scheduler")
        deadline = time.monotonic() + DEADLINE_S
        while not (os.path.exists(endpoint_file) and os.path.getsize(endpoint_file) > 0):
            if time.monotonic() > deadline or self.procs[0].poll() is not None:
                raise RuntimeError("the scheduler wrote no endpoint")
            time.sleep(0.01)  # polls a file the scheduler writes; the deadline bounds it
        self.endpoint = open(endpoint_file).read().strip()
        for r in range(servers):
            self.start([os.path.join(bin_dir, "ps_server"), f"--scheduler={self.endpoint}", *server_flags],
                       f"server-{r}")

    def start(self, cmd, name, **kw):
        log = open(os.path.join(self.tmp, name + ".log"), "w")
        p = subprocess.Popen(cmd, stdout=kw.pop("stdout", log), stderr=log, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


class Checks:
    """For a unittest.TestCase: each check a subTest, so that every one runs
    and reports (ok or FAIL, as it goes) and a failed one fails the test."""

    def check(self, cond, what):
        print(("  ok: " if cond else "  FAIL: ") + what, flush=True)
        with self.subTest(what):
            self.assertTrue(cond, what)


class PythonClientTest(Checks, unittest.TestCase):
    """The client against real jobs (see the module's documentation)."""

    def test_exact_sums(self):
        for mode, shm in (("sync", "on"), ("async", "on"), ("ssp:1", "on"), ("sync", "off")):
            print(f"exact sums, 2 servers, 2 Python workers, {mode}, shared memory {shm}", flush=True)
            self.exact_sums(mode, shm)

    def exact_sums(self, mode, shm):
        job = Job(ARGS.bin_dir, 2, 2)
        try:
            env = dict(os.environ, PYTHONPATH=ARGS.python_dir)
            workers = [job.start([sys.executable, __file__, "--worker", "--scheduler", job.endpoint, "--mode", mode,
                                  "--shm", shm], f"worker-{w}", stdout=subprocess.PIPE, env=env, text=True)
                       for w in range(2)]
            results = []
            for p in workers:
                out, _ = p.communicate(timeout=DEADLINE_S)
                results.append(json.loads(out.strip().splitlines()[-1]) if out.strip() else {"ok": False, "why": "no output"})
                results[-1]["rc"] = p.returncode
            for r in results:
                self.check(r.get("ok") and r["rc"] == 0, f"{mode}: worker {r.get('rank')} exact ({r})")
                # connect(shm=...) decides: both servers share this host.
                self.check(r.get("shm_servers") == (2 if shm == "on" else 0),
                      f"{mode}: shm={shm}: worker {r.get('rank')} on shared memory with {r.get('shm_servers')} servers")
            self.check(job.procs[0].wait(timeout=DEADLINE_S) == 0, f"{mode}: the scheduler ended the job in order")
        finally:
            job.stop()


    def check_metrics(self, c):
        """connect(metrics_port=0) serves the worker's Prometheus metrics (in a
        process that loaded torch); the push+pull just made is counted there."""
        import urllib.request
        url = c.stats()["metrics_url"]
        self.check(url.startswith("http://127.0.0.1:"), f"metrics at {url}")
        want = 'ps_worker_requests_total{role="worker",rank="0",op="pushpull"} 1'
        deadline, body = time.monotonic() + 10, ""
        while want not in body and time.monotonic() < deadline:
            body = urllib.request.urlopen(url, timeout=5).read().decode()
            time.sleep(0.1)  # pacing: the client publishes its counters once a second
        self.check(want in body, f"the push+pull is counted in the metrics ({want})")


    def test_zero_copy_and_bad_buffers(self):
        import numpy as np
        import torch
        import ps
        job = Job(ARGS.bin_dir, 1, 1)
        try:
            c = ps.connect(job.endpoint, request_timeout=3, metrics_port=0)
            try:
                c.push({"w": np.ones(N, np.float32)}, 0)
                self.check(False, "a push before register_model: no error")
            except ps.Error as e:
                self.check(e.code == "FAILED_PRECONDITION" and "register_model" in e.message,
                      f"before register_model: ps.Error {e.code}: {e.message}")
            bad = dict(model("sync"), tables=[{"name": "rows", "dim": DIM, "consistency": "eventually"}])
            try:
                c.register_model(bad)
                self.check(False, "a table's unknown consistency mode: no error")
            except ValueError as e:
                self.check("table 'rows'" in str(e) and "eventually" in str(e), f"ValueError: {e}")
            c.register_model(model("sync"))
            w = torch.zeros(N)
            before = w.data_ptr()
            c.pull({"w": w}, 0).wait()
            c.push_pull({"w": torch.full((N,), -2.0)}, {"w": w}, 0).wait()
            self.check(w.data_ptr() == before and bool((w == 2.0).all()), "a pull lands in the caller's own tensor")
            self.check_metrics(c)
            cases = [
                ({"w": np.zeros(N, np.float64)}, TypeError, "tensor 'w': expected float32"),
                ({"w": np.zeros(N + 1, np.float32)}, ValueError, "expected 1000 elements, the buffer has 1001"),
                ({"w": np.zeros(2 * N, np.float32)[::2]}, ValueError, "not contiguous"),
                ({"w": torch.zeros(2 * N)[::2]}, ValueError, "not contiguous"),
                ({"w": [0.0] * N}, TypeError, "expected a float32 array"),
            ]
            for grads, error, text in cases:
                try:
                    c.push(grads, 1)
                    self.check(False, f"{text}: no error")
                except error as e:
                    self.check(text in str(e), f"{error.__name__}: {e}")
            try:
                c.pull_rows([("rows", np.zeros(3, np.float32), np.zeros(3 * DIM, np.float32))], 1)
                self.check(False, "float ids: no error")
            except TypeError as e:
                self.check("ids: expected int64 or uint64" in str(e), f"TypeError: {e}")
            try:
                c.pull({"nope": w}, 1)
                self.check(False, "an unknown tensor name: no error")
            except KeyError as e:
                self.check("no tensor named 'nope'" in str(e), f"KeyError: {e}")
            ticket = c.pull({"w": w}, 5)  # sync: step 4 will never be applied; the server holds it 3 s
            self.check(not ticket.done(), "a held pull is not done")
            try:
                ticket.wait(timeout=0.05)
                self.check(False, "wait(timeout) on a held pull: no TimeoutError")
            except TimeoutError as e:
                self.check(c.pending >= 1, f"TimeoutError ({e}); the ticket keeps its buffers")
            try:
                ticket.wait()
                self.check(False, "a pull for a step nobody pushed: no error")
            except ps.Error as e:
                self.check(e.code == "DEADLINE_EXCEEDED" and "step" in e.message, f"ps.Error {e.code}: {e.message}")
            ticket = c.push({"w": np.ones(N, np.float32)}, 1)  # a temporary: only the client holds it
            gc.collect()
            held = c.pending
            ticket.wait()
            self.check(held == 1 and c.pending == 0, "a pushed temporary is held until its ticket completes")
            c.finish()
        finally:
            job.stop()


    def test_compression_in_the_model_dict(self):
        """A tensor's "compression" reaches the wire: an fp16 push of 1/3 is
        applied as fp16 rounds it, and the pull comes back in 16 bits (two
        compression threads); bad compressions are refused naming the tensor
        or table."""
        import numpy as np
        import ps
        job = Job(ARGS.bin_dir, 1, 1)
        try:
            c = ps.connect(job.endpoint, request_timeout=10, compress_threads=2)
            for bad, text in [(dict(model("sync"), tensors=[{"name": "w", "shape": [N], "compression": "gzip"}]),
                               "tensor 'w': compression 'gzip'"),
                              (dict(model("sync"), tables=[{"name": "rows", "dim": DIM, "compression": "topk:0.1"}]),
                               "table rows travel as float32, fp16 or bf16 only")]:
                try:
                    c.register_model(bad)
                    self.check(False, f"{text}: no error")
                except ValueError as e:
                    self.check(text in str(e), f"ValueError: {e}")
            c.register_model(dict(model("sync"), tensors=[{"name": "w", "shape": [N], "compression": "fp16"}],
                                  compress_min_bytes=0))
            w = np.zeros(N, np.float32)
            c.push_pull({"w": np.full(N, 1 / 3, np.float32)}, {"w": w}, 0).wait()
            want = -np.float32(np.float16(1 / 3))  # SGD, lr 1: minus the gradient as fp16 has it
            self.check(bool((w == want).all()) and want != -np.float32(1 / 3), f"w is {w[:2]}, want {want}")
            c.finish()
        finally:
            job.stop()


    def test_replay_budget_bounds_a_stalled_checkpoint(self):
        """A server whose checkpoints fail (its temporary file's path is a
        directory) never lets go of the pushes its worker keeps to re-send:
        past max_replay_bytes the next push waits for a checkpoint and, none
        coming, fails after its request timeout naming the budget, unsent;
        the copies stay within the budget and what was applied stays."""
        import numpy as np
        import ps
        ckpt = tempfile.mkdtemp(prefix="python_client_ckpt.")
        os.makedirs(os.path.join(ckpt, "server-0.ckpt.tmp"))  # every checkpoint of rank 0 fails
        job = Job(ARGS.bin_dir, 1, 1, server_flags=(f"--checkpoint_dir={ckpt}", "--checkpoint_every=1h"))
        try:
            budget = 1 << 20
            c = ps.connect(job.endpoint, request_timeout=2, max_replay_bytes=budget)
            c.register_model({"tensors": [{"name": "w", "shape": [65536], "init": {"kind": "zeros"}}],
                              "optimizer": {"kind": "sgd", "lr": 1.0}, "consistency": "async"})
            grad = np.full(65536, -1.0, np.float32)  # 256 KiB a push
            applied, error = 0, None
            for step in range(8):
                try:
                    c.push({"w": grad}, step).wait()
                    applied += 1
                except ps.Error as e:
                    error = e
                    break
            kept = c.stats()["replay_bytes"]
            self.check(error is not None and error.code == "DEADLINE_EXCEEDED" and "max_replay_bytes" in error.message,
                       f"after {applied} pushes: {error}")
            self.check(applied == budget // grad.nbytes and kept <= budget,
                       f"{applied} pushes applied, {kept} bytes kept (budget {budget})")
            w = np.zeros(65536, np.float32)
            c.pull({"w": w}, 0).wait()
            self.check(np.all(w == applied), f"the servers hold the {applied} applied pushes: w = {w[0]}")
        finally:
            job.stop()

    def test_connect_options(self):
        """ps.connect's keyword arguments are exactly the C++ client's options
        (CLIENT_OPTION_DEFAULTS, read from KVClientOptions); a wrong one is refused
        by name before anything connects."""
        import inspect
        import ps
        named = set(inspect.signature(ps.connect).parameters)
        self.check(named == set(ps.CLIENT_OPTION_DEFAULTS), f"connect's arguments == the client's options: "
              f"{sorted(named ^ set(ps.CLIENT_OPTION_DEFAULTS))} differ")
        self.check(ps.CLIENT_OPTION_DEFAULTS["request_timeout"] == datetime.timedelta(seconds=60) and ps.CLIENT_OPTION_DEFAULTS["caller_io"] is True,
              f"defaults from KVClientOptions: {ps.CLIENT_OPTION_DEFAULTS}")
        for kwargs, error, text in [({"no_such_option": 1}, TypeError, "no_such_option"),
                                    ({"request_timeout": "soon"}, TypeError, "request_timeout"),
                                    ({"caller_spin": -1}, ValueError, "caller_spin"),
                                    ({"caller_spin": datetime.timedelta(microseconds=-1)}, ValueError, "caller_spin"),
                                    ({"compress_threads": -1}, ValueError, "compress_threads: -1")]:
            try:
                ps.connect("127.0.0.1:1", **kwargs)
                self.check(False, f"{kwargs}: no error")
            except error as e:
                self.check(text in str(e), f"{kwargs}: {error.__name__}: {e}")


    def test_cmake_install(self):
        """`cmake --install` puts a package Debian's python3 imports."""
        with tempfile.TemporaryDirectory(prefix="python_client_install.") as prefix:
            build = os.path.dirname(os.path.abspath(ARGS.python_dir))
            r = subprocess.run(["cmake", "--install", build, "--prefix", prefix], capture_output=True, text=True,
                               timeout=DEADLINE_S)
            site = os.path.join(prefix, f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/dist-packages")
            probe = subprocess.run([sys.executable, "-c", "import ps, ps.torch; print(ps.__file__)"], capture_output=True,
                                   text=True, env=dict(os.environ, PYTHONPATH=site), timeout=DEADLINE_S)
            self.check(r.returncode == 0 and probe.returncode == 0 and probe.stdout.startswith(site),
                  f"cmake --install puts ps where python3 imports it ({probe.stdout.strip() or probe.stderr.strip()})")


ARGS = None  # --bin-dir and --python-dir


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir")
    p.add_argument("--python-dir")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--scheduler", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="sync", help=argparse.SUPPRESS)
    p.add_argument("--shm", default="on", choices=("on", "off"), help=argparse.SUPPRESS)
    ARGS, rest = p.parse_known_args()
    if ARGS.worker:
        return run_worker(ARGS)
    sys.path.insert(0, ARGS.python_dir)
    result = unittest.main(argv=[sys.argv[0], "-v", *rest], exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
