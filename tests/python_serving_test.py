#!/usr/bin/python3
"""ps.serving against real ps_serve processes on 127.0.0.1, serving a model
file numpy wrote (tensor "w" 3 x 2, table "emb" of dim 4 with ids 5, 9, 12):

- lookup gives float32 (len(ids), dim) rows exactly, an id the table does
  not hold reads as zeros (a file holds no initializers) with the mask
  saying so; dense gives the tensor in its shape; version names what is
  served;
- an unknown table or tensor is ps.Error NOT_FOUND naming it, float ids a
  TypeError, negative ids a ValueError, more ids than --max_lookup_ids
  INVALID_ARGUMENT, and the replica serves on;
- behind two replicas, one SIGKILLed, every lookup is still answered, by
  the other;
- the HTTP/JSON endpoint (--http_port) gives the same rows, tensor and
  version as JSON, 404 for an unknown table, 400 for a bad id, 405 for a
  write;
- ps_serve --scheduler follows a running job (ps_scheduler, ps_server and a
  ps_exact_sum worker): once the job ends it serves the final model, the
  dense tensor summing to exactly what every push adds up to, at the job's
  last step, exact.

    python_serving_test.py --bin-dir build/bin --python-dir build/python

Every process started is stopped by its pid at the end.
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_client_test import DEADLINE_S, Checks  # noqa: E402  (the shared harness)

ARGS = None


def read(path):
    with open(path) as f:
        return f.read()


class Replicas:
    """ps_serve processes, each in its own process group."""

    def __init__(self):
        self.procs, self.tmp = [], tempfile.mkdtemp(prefix="python_serving_test.")

    def start(self, model, *flags, binary="ps_serve"):
        """Starts BINARY (--from=MODEL unless MODEL is None) with an endpoint
        file, and returns (process, endpoint, log) once it is written."""
        endpoint_file = os.path.join(self.tmp, f"endpoint{len(self.procs)}")
        log = os.path.join(self.tmp, f"{binary}{len(self.procs)}.log")
        source = [f"--from={model}"] if model is not None else []
        with open(log, "w") as out:  # the child keeps its own descriptor
            p = subprocess.Popen([os.path.join(ARGS.bin_dir, binary), *source,
                                  f"--endpoint_file={endpoint_file}", *flags],
                                 stdout=out, stderr=out, start_new_session=True)
        self.procs.append(p)
        deadline = time.monotonic() + DEADLINE_S
        while not (os.path.exists(endpoint_file) and os.path.getsize(endpoint_file) > 0):
            if time.monotonic() > deadline or p.poll() is not None:
                raise RuntimeError(f"{binary} wrote no endpoint; its log:\n{read(log)}")
            time.sleep(0.01)  # polls a file ps_serve writes; the deadline bounds it
        return p, read(endpoint_file).strip(), log

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


class PythonServingTest(Checks, unittest.TestCase):
    def setUp(self):
        import numpy as np
        self.np = np
        self.replicas = Replicas()
        self.addCleanup(self.replicas.stop)
        self.model = os.path.join(self.replicas.tmp, "model.npz")
        self.w = np.arange(6, dtype=np.float32).reshape(3, 2) / 4
        self.ids = np.array([5, 9, 12], dtype=np.uint64)
        self.rows = (np.arange(12, dtype=np.float32).reshape(3, 4) + 0.5)
        np.savez(self.model, **{"w": self.w, "emb.ids": self.ids, "emb.rows": self.rows})

    def test_lookups_dense_and_version(self):
        import ps
        import ps.serving
        np = self.np
        _, endpoint, _ = self.replicas.start(self.model, "--max_lookup_ids=8")
        r = ps.serving.connect(endpoint)
        rows, found = r.lookup("emb", [12, 7, 5], return_mask=True)
        self.check(rows.dtype == np.float32 and rows.shape == (3, 4), f"rows float32 (3, 4): {rows.dtype} {rows.shape}")
        self.check(np.array_equal(rows[0], self.rows[2]) and np.array_equal(rows[2], self.rows[0]),
                   "the rows of ids 12 and 5 exactly")
        self.check(np.array_equal(rows[1], np.zeros(4, np.float32)), "an id the file does not hold reads as zeros")
        self.check(found.tolist() == [True, False, True], f"the mask says which ids were found: {found.tolist()}")
        self.check(np.array_equal(r.lookup("emb", np.array([9], dtype=np.int64)), self.rows[1:2]), "int64 ids")
        w = r.dense("w")
        self.check(w.shape == (3, 2) and np.array_equal(w, self.w), "dense gives the tensor in its shape")
        v = r.version()
        self.check(v["tables"] == {"emb": 4} and v["tensors"] == ["w"] and v["source"] == self.model,
                   f"version names what is served: {v}")
        self.check(r.last_version["replica"] == v["replica"] and v["synced_at"] > 0, "the answer names its replica")
        for call, code, words in ((lambda: r.lookup("users", [1]), "NOT_FOUND", "no table 'users'"),
                                  (lambda: r.dense("fc9"), "NOT_FOUND", "no tensor 'fc9'"),
                                  (lambda: r.lookup("emb", list(range(9))), "INVALID_ARGUMENT", "at most 8")):
            try:
                call()
                self.check(False, f"{words}: refused")
            except ps.Error as e:
                self.check(e.code == code and words in e.message, f"{code} naming it: {e.message}")
        for ids, kind in (([1.5], TypeError), ([-1], ValueError)):
            try:
                r.lookup("emb", ids)
                self.check(False, f"{ids} refused")
            except kind:
                self.check(True, f"{ids}: {kind.__name__}")
        self.check(np.array_equal(r.lookup("emb", [9]), self.rows[1:2]), "the replica serves on after the refusals")

    def test_failover(self):
        import ps.serving
        np = self.np
        first, a, _ = self.replicas.start(self.model)
        _, b, _ = self.replicas.start(self.model)
        r = ps.serving.connect([a, b], timeout=0.5)
        answered = set()
        for _ in range(4):
            r.lookup("emb", [5])
            answered.add(r.last_version["replica"])
        self.check(answered == {a, b}, f"requests spread over both replicas: {sorted(answered)}")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        for i in range(4):
            rows = r.lookup("emb", [5])
            self.check(np.array_equal(rows, self.rows[0:1]) and r.last_version["replica"] == b,
                       f"lookup {i} after a replica was killed: answered by the other")

    def test_http(self):
        import json
        import urllib.error
        import urllib.request
        np = self.np
        _, _, log = self.replicas.start(self.model, "--http_port=0", "--max_lookup_ids=8")
        lines = [l for l in read(log).splitlines() if l.startswith("ps_serve http on ")]
        self.check(len(lines) == 1, f"ps_serve names its HTTP address: {lines}")
        url = lines[0].split()[-1]

        def get(path, method="GET"):
            req = urllib.request.Request(url + path, method=method)
            try:
                with urllib.request.urlopen(req, timeout=DEADLINE_S) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        status, rows = get("/v1/tables/emb/rows?ids=12,7,5")
        got = np.array(rows["rows"], dtype=np.float32)
        self.check(status == 200 and got.shape == (3, 4) and np.array_equal(got[0], self.rows[2])
                   and np.array_equal(got[2], self.rows[0]) and rows["found"] == [True, False, True]
                   and rows["dim"] == 4, f"rows as JSON, float32 exactly: {rows}")
        status, w = get("/v1/dense/w")
        self.check(status == 200 and w["shape"] == [3, 2]
                   and np.array_equal(np.array(w["values"], dtype=np.float32).reshape(3, 2), self.w),
                   f"a tensor as JSON: {w}")
        status, v = get("/v1/version")
        self.check(status == 200 and v["tables"] == {"emb": 4} and v["tensors"] == ["w"], f"the version: {v}")
        for path, method, code, words in (("/v1/tables/users/rows?ids=1", "GET", 404, "no table 'users'"),
                                          ("/v1/dense/fc9", "GET", 404, "no tensor 'fc9'"),
                                          ("/v1/tables/emb/rows?ids=1,x", "GET", 400, "'x' is not an unsigned"),
                                          ("/v1/tables/emb/rows?ids=" + ",".join(map(str, range(9))), "GET", 400,
                                           "at most 8"),
                                          ("/v1/tables/emb/rows", "POST", 405, "read-only"),
                                          ("/v2/anything", "GET", 404, "no such endpoint")):
            status, body = get(path, method)
            self.check(status == code and words in body.get("error", ""), f"{method} {path}: {status} {body}")


class FollowTest(Checks, unittest.TestCase):
    STEPS, DENSE, WORKERS = 30, 5000, 1

    def setUp(self):
        self.procs = Replicas()
        self.addCleanup(self.procs.stop)

    def test_follows_a_job_and_serves_its_final_model(self):
        import ps.serving
        _, scheduler, _ = self.procs.start(None, "--num_servers=1", f"--num_workers={self.WORKERS}",
                                           binary="ps_scheduler")
        scheduler = scheduler.removeprefix("tcp://")
        server_log = open(os.path.join(self.procs.tmp, "server.log"), "w")
        self.addCleanup(server_log.close)
        self.procs.procs.append(subprocess.Popen([os.path.join(ARGS.bin_dir, "ps_server"), f"--scheduler={scheduler}"],
                                                 stdout=server_log, stderr=server_log, start_new_session=True))
        _, endpoint, log = self.procs.start(None, f"--scheduler={scheduler}", "--sync_interval=100ms")
        worker = subprocess.run([os.path.join(ARGS.bin_dir, "ps_exact_sum"), f"--scheduler={scheduler}",
                                 f"--steps={self.STEPS}", f"--dense_elements={self.DENSE}", "--step_ms=10"],
                                capture_output=True, text=True, timeout=120)
        self.assertEqual(worker.returncode, 0, worker.stderr[-2000:])
        replica = ps.serving.connect(endpoint)
        # The job's end reaches the replica as the servers' last rounds:
        # polled, bounded by the deadline.
        deadline = time.monotonic() + DEADLINE_S
        while replica.version()["step"] != self.STEPS and time.monotonic() < deadline:
            time.sleep(0.05)
        version = replica.version()
        self.assertEqual(version["step"], self.STEPS, read(log)[-2000:])
        self.assertTrue(version["exact"])
        expected = sum(1 + (w + s + i) % 5 for s in range(self.STEPS) for w in range(self.WORKERS)
                       for i in range(self.DENSE))
        self.assertEqual(float(replica.dense("dense").astype("float64").sum()), float(expected))


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--python-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    sys.path.insert(0, ARGS.python_dir)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
