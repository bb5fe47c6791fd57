#!/usr/bin/python3
"""The user's model in and out of a real job (1 scheduler, 2 servers with
checkpoints, 2 Python workers on 127.0.0.1):

- DistributedModule starts the servers from rank 0's module, bit for bit:
  a hand-set first layer, LayerNorm's gain of 1 and bias of 0, and the rest
  of rank 0's initialisation; rank 1's module was different and its step-0
  parameters are rank 0's all the same.
- BatchNorm's running statistics live on the servers: after training, with
  sync_buffers(), both workers hold the same buffers, the servers' ones.
- Out: state_dict() saved by rank 0 loads with strict=True into a fresh
  module and evaluates to the job's own final accuracy and loss; ps_export of
  the servers' final checkpoints holds every parameter and buffer exactly as
  the state_dict does (.npz and .safetensors), and a fresh module loaded from
  the .npz evaluates the same.
- Bad input: a model file whose names or shapes do not fit, and one cut short
  or with a flipped byte, are refused naming the problem; values that do not
  fit the declared shapes are refused before anything is sent.

    python_model_io_test.py --bin-dir build/bin --python-dir build/python

Every process started is stopped by its pid at the end. unittest runs the
tests (each check a subTest); exit 0 when every check passed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_client_test import DEADLINE_S, Checks, Job  # noqa: E402  (the shared harness)

STEPS = 24
BATCH = 32


def make_net(torch):
    """The model every worker builds: torch's own initialisation with seed
    0, then the first layer hand-set to values a random init never gives."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.BatchNorm1d(16),
                              torch.nn.ReLU(), torch.nn.Linear(16, 2))
    with torch.no_grad():
        net[0].weight.copy_(torch.arange(128, dtype=torch.float32).view(16, 8) / 64 - 1)
        net[0].bias.fill_(0.5)
    return net


def data(torch, seed, n):
    """A separable task: the label is whether the first four features sum above the last four."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=gen)
    return x, (x[:, :4].sum(1) > x[:, 4:].sum(1)).long()


def evaluate(torch, net):
    x, y = data(torch, 1000, 512)
    net.eval()
    with torch.no_grad():
        logits = net(x)
    net.train()
    return float((logits.argmax(1) == y).float().mean()), float(torch.nn.functional.cross_entropy(logits, y))


def run_worker(args):
    """One worker: prints one JSON line of what it saw."""
    import torch
    import ps
    import ps.torch as pst
    torch.set_num_threads(1)
    client = ps.connect(args.scheduler, request_timeout=30)
    net = make_net(torch)
    want = {n: p.detach().clone() for n, p in net.named_parameters()}
    if client.rank != 0:  # another worker's module need not match: this one does not
        with torch.no_grad():
            for p in net.parameters():
                p.add_(torch.randn(p.shape))
    dist = pst.DistributedModule(client, net, optimizer={"kind": "sgd", "lr": 0.05}, consistency="sync")
    dist.begin_step(0)
    dist.wait_params()
    at_start = all(torch.equal(p.detach(), want[n]) for n, p in net.named_parameters())
    x, y = data(torch, 1 + client.rank, STEPS * BATCH)
    for step in range(STEPS):
        if step > 0:
            dist.begin_step(step)
        xb, yb = x[step * BATCH:(step + 1) * BATCH], y[step * BATCH:(step + 1) * BATCH]
        torch.nn.functional.cross_entropy(net(xb), yb).backward()
        dist.end_step()
    state = dist.state_dict()
    acc, loss = evaluate(torch, net)
    servers = {n: torch.empty(b.numel()) for n, b in dist.buffers.items()}
    client.pull(servers, 0).wait()
    if client.rank == 0:
        torch.save(state, args.out)
    print(json.dumps({"rank": client.rank, "at_start": at_start, "acc": acc, "loss": loss,
                      "buffers": {n: b.reshape(-1).tolist() for n, b in net.named_buffers()},
                      "servers_buffers": {n: v.tolist() for n, v in servers.items()}}), flush=True)
    client.finish()
    return 0


ARGS = None


class ModelIoTest(Checks, unittest.TestCase):
    """One job trains; the checks read what came out of it."""

    @classmethod
    def setUpClass(cls):
        import torch
        cls.tmp = tempfile.mkdtemp(prefix="python_model_io_test.")
        ckpt = os.path.join(cls.tmp, "ckpt")
        cls.model_pt = os.path.join(cls.tmp, "model.pt")
        job = Job(ARGS.bin_dir, 2, 2, server_flags=[f"--checkpoint_dir={ckpt}"])
        try:
            env = dict(os.environ, PYTHONPATH=ARGS.python_dir)
            workers = [job.start([sys.executable, __file__, "--worker", "--scheduler", job.endpoint,
                                  "--out", cls.model_pt], f"worker-{w}", stdout=subprocess.PIPE, env=env, text=True)
                       for w in range(2)]
            cls.results = []
            for p in workers:
                out, _ = p.communicate(timeout=DEADLINE_S * 2)
                lines = out.strip().splitlines()
                cls.results.append(json.loads(lines[-1]) if lines else {"rank": -1, "rc": p.returncode})
            # The servers write their final checkpoints as the job ends.
            cls.server_codes = [p.wait(timeout=DEADLINE_S) for p in job.procs[1:3]]
        finally:
            job.stop()
        cls.results.sort(key=lambda r: r["rank"])
        cls.exports = {}
        for ext in ("npz", "safetensors"):
            out = os.path.join(cls.tmp, f"model.{ext}")
            run = subprocess.run([os.path.join(ARGS.bin_dir, "ps_export"), f"--checkpoint_dir={ckpt}", f"--out={out}"],
                                 capture_output=True, text=True, timeout=DEADLINE_S)
            cls.exports[ext] = (out, run)
        cls.torch = torch

    def test_the_job_ran(self):
        self.check([r["rank"] for r in self.results] == [0, 1], f"both workers reported: {self.results}")
        self.check(self.server_codes == [0, 0], f"both servers ended on their own, exit 0: {self.server_codes}")

    def test_every_worker_starts_from_rank_0s_values_exactly(self):
        for r in self.results:
            self.check(r.get("at_start") is True, f"rank {r['rank']}: step 0's parameters are rank 0's, bit for bit "
                       "(hand-set first layer, LayerNorm gain 1 and bias 0, torch's init of the rest)")

    def test_buffers_are_the_servers_on_every_worker(self):
        a, b = self.results
        self.check(a["buffers"] == b["buffers"], "both workers hold the same BatchNorm buffers after sync_buffers()")
        for r in self.results:
            mine = {n: v for n, v in r["buffers"].items() if n in r["servers_buffers"]}
            self.check(mine == {n: v for n, v in r["servers_buffers"].items()},
                       f"rank {r['rank']}: its buffers are the servers'")
        nbt = a["buffers"]["2.num_batches_tracked"]
        self.check(nbt == [24], f"num_batches_tracked counts rank 0's steps: {nbt}")

    def test_state_dict_loads_strictly_and_evaluates_as_the_job_did(self):
        torch = self.torch
        net = make_net(torch)
        net.load_state_dict(torch.load(self.model_pt), strict=True)
        acc, loss = evaluate(torch, net)
        job = self.results[0]
        self.check(abs(acc - job["acc"]) <= 1e-4 and abs(loss - job["loss"]) <= 1e-4,
                   f"model.pt evaluates as rank 0 did: acc {acc} vs {job['acc']}, loss {loss:.6f} vs {job['loss']:.6f}")
        self.check(acc > 0.8, f"the model learnt the task: test accuracy {acc}")

    def test_export_holds_the_state_dict_exactly(self):
        import numpy as np
        torch = self.torch
        state = torch.load(self.model_pt)
        out, run = self.exports["npz"]
        self.check(run.returncode == 0, f"ps_export .npz: exit {run.returncode} {run.stderr[-500:]}")
        arrays = np.load(out)
        self.check(sorted(arrays.files) == sorted(state), f"the export's names are the state_dict's: {arrays.files}")
        for name, value in state.items():
            got = arrays[name] if name in arrays.files else None
            ok = got is not None and np.array_equal(got.reshape(value.shape), value.numpy().astype(got.dtype))
            self.check(ok, f"{name}: exported exactly")
        net = make_net(torch)
        net.load_state_dict({n: torch.from_numpy(arrays[n].reshape(v.shape)).to(v.dtype) for n, v in state.items()})
        acc, _ = evaluate(torch, net)
        self.check(abs(acc - self.results[0]["acc"]) <= 1e-4, f"a module loaded from the .npz evaluates the same: {acc}")
        st_out, st_run = self.exports["safetensors"]
        self.check(st_run.returncode == 0 and json.loads(st_run.stdout)["tensors"] == len(state),
                   f"ps_export .safetensors: {st_run.stdout.strip()} {st_run.stderr[-300:]}")

    def test_bad_model_files_and_values_are_refused(self):
        import numpy as np
        bad_dir = os.path.join(self.tmp, "bad")
        os.makedirs(bad_dir, exist_ok=True)
        good = os.path.join(bad_dir, "good.npz")  # fits ps_worker --layers=784,10
        np.savez(good, **{"fc0.weight": np.ones((784, 10), np.float32), "fc0.bias": np.ones(10, np.float32)})
        data_bytes = open(good, "rb").read()
        middle = len(data_bytes) // 2  # inside fc0.weight's data
        for name, content, text in [("short.npz", data_bytes[:middle], "DATA_LOSS"),
                                    ("flipped.npz", data_bytes[:middle] + bytes([data_bytes[middle] ^ 1]) +
                                     data_bytes[middle + 1:], "CRC-32 mismatch")]:
            path = os.path.join(bad_dir, name)
            open(path, "wb").write(content)
            run = subprocess.run([os.path.join(ARGS.bin_dir, "ps_worker"), "--scheduler=127.0.0.1:1",
                                  f"--init_from={path}", "--layers=784,10"], capture_output=True, text=True,
                                 timeout=DEADLINE_S)
            self.check(run.returncode != 0 and text in run.stderr and name in run.stderr,
                       f"{name}: refused before joining, naming the file and the problem: {run.stderr[-300:]}")
        wrong = os.path.join(bad_dir, "wrong.npz")
        np.savez(wrong, **{"fc0.weight": np.zeros((3, 3), np.float32)})
        run = subprocess.run([os.path.join(ARGS.bin_dir, "ps_worker"), "--scheduler=127.0.0.1:1", f"--init_from={wrong}",
                              "--layers=784,10"], capture_output=True, text=True, timeout=DEADLINE_S)
        self.check(run.returncode != 0 and "fc0.weight' has shape (3, 3)" in run.stderr and
                   "tensor 'fc0.bias' is missing" in run.stderr,
                   f"names and shapes that do not fit are named: {run.stderr[-400:]}")

    def test_values_that_do_not_fit_change_nothing(self):
        import numpy as np
        import ps
        job = Job(ARGS.bin_dir, 2, 1)
        try:
            client = ps.connect(job.endpoint, request_timeout=20)
            spec = {"tensors": [{"name": "w", "shape": [4, 5], "init": {"kind": "constant", "a": 3.0}}],
                    "tables": [{"name": "emb", "dim": 4}], "optimizer": {"kind": "sgd", "lr": 1.0}}
            for values, rows, text in [({"w": np.zeros(19, np.float32)}, None, "'w'"),
                                       (None, [("emb", np.arange(3, dtype=np.uint64), np.zeros((3, 5), np.float32))],
                                        "'emb'"),
                                       (None, [("emb", np.array([7, 7], np.uint64), np.zeros((2, 4), np.float32))],
                                        "each id once")]:
                try:
                    client.register_model(spec, values=values, rows=rows)
                    self.check(False, f"{text}: no error")
                except (ValueError, ps.Error) as e:
                    self.check(text in str(e), f"refused naming the problem: {e}")
            w = np.zeros(20, np.float32)
            client.pull({"w": w}, 0).wait()
            emb = np.zeros((3, 4), np.float32)
            client.pull_rows([("emb", np.arange(3, dtype=np.uint64), emb)], 0).wait()
            assigned = sum(client.server_stats(r)["assigns_applied"] for r in range(2))
            self.check(np.all(w == 3.0) and np.all(emb == 0.0) and assigned == 0,
                       f"the servers hold the initial values; {assigned} assigns applied")
            client.load_rows("emb", np.arange(3, dtype=np.uint64), np.full((3, 4), 2.5, np.float32))
            client.pull_rows([("emb", np.arange(3, dtype=np.uint64), emb)], 0).wait()
            self.check(np.all(emb == 2.5), f"load_rows sets pretrained rows exactly: {emb.tolist()}")
            client.finish()
        finally:
            job.stop()


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir")
    p.add_argument("--python-dir")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--scheduler", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    ARGS, rest = p.parse_known_args()
    if ARGS.worker:
        return run_worker(ARGS)
    sys.path.insert(0, ARGS.python_dir)
    result = unittest.main(argv=[sys.argv[0], "-v", *rest], exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
