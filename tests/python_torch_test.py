#!/usr/bin/python3
"""ps.torch against a real job on 127.0.0.1 (1 scheduler, 2 servers, this
process as the one worker):

- ServerEmbeddingBag.load puts pretrained rows in the table exactly, and
  refuses rows of the wrong shape and repeated ids.
- ServerEmbeddingBag computes what torch.nn.EmbeddingBag computes on the same
  rows, and its gradients reach the servers: after one step with SGD lr 1 the
  rows are their initial values minus the local EmbeddingBag's gradient.
- DistributedModule trains a small MLP with an embedding table on a
  separable synthetic task: the loss falls and the accuracy rises.
- DistributedModule's step semantics, exactly (integer gradients, SGD lr 1):
  each forward sees the parameters of its step (sync) or of the step before
  (pipeline=True, async); a parameter backward gives no gradient is pushed a
  zero one (a sync step does not wait for it); one with requires_grad=False
  is not registered; pipeline=True with sync is refused.
- The same semantics, exactly, with every parameter staged through host
  buffers (staging=True: the path a module on a GPU takes, run here on the
  CPU); a module on the 'meta' device or of float64 is refused naming the
  parameter; on a machine with CUDA, a module on the GPU trains to the
  values the CPU module reaches (skipped, saying so, where torch has no CUDA).

    python_torch_test.py --bin-dir build/bin --python-dir build/python

Every process started is stopped by its pid at the end. unittest runs the
tests (each check a subTest); exit 0 when every check passed.
"""

import argparse
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_client_test import Checks, Job  # noqa: E402  (the shared harness)


def embedding_bag_matches(ps, torch, endpoint, t):
    import ps.torch as pst
    client = ps.connect(endpoint, request_timeout=30)
    bag = pst.ServerEmbeddingBag("emb", dim=3, mode="mean", init={"kind": "uniform", "a": -1, "b": 1, "seed": 4},
                                 optimizer={"kind": "sgd", "lr": 1.0})
    dist = pst.DistributedModule(client, torch.nn.Module(), tables=[bag], consistency="sync")
    ids = torch.tensor([7, 2 ** 40, 7, 12345, 2 ** 40, 99], dtype=torch.int64)
    offsets = torch.tensor([0, 2, 5])
    dist.begin_step(0)
    out = bag(ids, offsets)
    # The same rows in a local EmbeddingBag, pulled once more (step 0 is still open).
    unique, inverse = torch.unique(ids, return_inverse=True)
    rows = torch.empty(len(unique), 3)
    client.pull_rows([("emb", unique.numpy(), rows)], 0).wait()
    local = torch.nn.EmbeddingBag.from_pretrained(rows.clone(), freeze=False, mode="mean")
    local_out = local(inverse, offsets)
    t.check(torch.equal(out, local_out), "ServerEmbeddingBag's output is EmbeddingBag's on the same rows")
    weights = torch.arange(out.numel(), dtype=torch.float32).view_as(out)
    (out * weights).sum().backward()
    (local_out * weights).sum().backward()
    dist.end_step()
    after = torch.empty(len(unique), 3)
    client.pull_rows([("emb", unique.numpy(), after)], 1).wait()
    expected = rows - local.weight.grad
    t.check(torch.allclose(after, expected, atol=1e-6),
          f"after one step the rows are the initial rows minus EmbeddingBag's gradient "
          f"(max diff {float((after - expected).abs().max()):.2e})")
    client.finish()


def pretrained_rows(ps, torch, endpoint, t):
    import ps.torch as pst
    client = ps.connect(endpoint, request_timeout=30)
    bag = pst.ServerEmbeddingBag("emb", dim=3, mode="sum", init={"kind": "uniform", "a": -1, "b": 1, "seed": 4})
    pst.DistributedModule(client, torch.nn.Module(), tables=[bag], consistency="sync")
    ids = torch.tensor([5, 2 ** 40, 9], dtype=torch.int64)
    rows = torch.arange(9, dtype=torch.float32).view(3, 3) / 4
    bag.load(ids, rows)
    out = bag(torch.tensor([5, 9, 2 ** 40, 5]), torch.tensor([0, 2]))
    t.check(torch.equal(out, torch.stack([rows[0] + rows[2], rows[1] + rows[0]])),
            f"the loaded rows are what forward sums: {out.tolist()}")
    for ids_, rows_, error, text in [(ids, rows[:2], ValueError, "rows of shape (2, 3)"),
                                     (torch.tensor([7, 7]), rows[:2], ps.Error, "each id once")]:
        try:
            bag.load(ids_, rows_)
            t.check(False, f"{text}: no error")
        except error as e:
            t.check(text in str(e), f"refused: {e}")
    client.finish()


def prefetched_rows(ps, torch, endpoint, t):
    """Two tables trained on the same batches, one with prefetch: the same
    outputs every step (sync: the prefetched rows are those after the step
    before), and the prefetching one asks for no pull after step 0."""
    import ps.torch as pst
    client = ps.connect(endpoint, request_timeout=30)
    init, sgd = {"kind": "constant", "a": 0.25}, {"kind": "sgd", "lr": 0.5}  # the same rows in both tables
    plain = pst.ServerEmbeddingBag("plain", dim=3, mode="sum", init=init, optimizer=sgd)
    ahead = pst.ServerEmbeddingBag("ahead", dim=3, mode="sum", init=init, optimizer=sgd)
    dist = pst.DistributedModule(client, torch.nn.Module(), tables=[plain, ahead], consistency="sync")
    pulls = []
    pull_rows = client.pull_rows
    client.pull_rows = lambda rows, step: pulls.append((rows[0][0], step)) or pull_rows(rows, step)
    gen = torch.Generator().manual_seed(3)
    batches = [torch.randint(0, 20, (6,), generator=gen) for _ in range(8)]
    same = []
    for step, ids in enumerate(batches):
        dist.begin_step(step)
        a, b = plain(ids, torch.tensor([0, 3])), ahead(ids, torch.tensor([0, 3]))
        if step + 1 < len(batches):
            ahead.prefetch(batches[step + 1])
        (a * torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])).sum().backward()
        (b * torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])).sum().backward()
        dist.end_step()
        same.append(torch.equal(a, b))
    t.check(all(same), f"prefetched rows give the outputs pulled rows give, every step: {same}")
    ahead_pulls = [s for table, s in pulls if table == "ahead"]
    t.check(ahead_pulls == [0] and len([1 for table, _ in pulls if table == "plain"]) == len(batches),
            f"the prefetching table pulled at step 0 only (pull_rows calls: {pulls})")
    client.finish()


class Net(torch.nn.Module):
    def __init__(self, bag):
        super().__init__()
        self.bag = bag
        self.fc1 = torch.nn.Linear(8 + 4, 16)
        self.fc2 = torch.nn.Linear(16, 2)

    def forward(self, ids, offsets, x):
        h = torch.cat([self.bag(ids, offsets), x], dim=1)
        return self.fc2(torch.relu(self.fc1(h)))


def training_smoke(ps, torch, endpoint, t):
    import ps.torch as pst
    torch.manual_seed(0)
    client = ps.connect(endpoint, request_timeout=30)
    bag = pst.ServerEmbeddingBag("tok", dim=8, init={"kind": "uniform", "a": -0.1, "b": 0.1, "seed": 1},
                                 optimizer={"kind": "adagrad", "lr": 0.1})
    net = Net(bag)
    dist = pst.DistributedModule(client, net, tables=[bag], optimizer={"kind": "adam", "lr": 0.01})
    # Label: whether most of a message's 3 ids are odd (x is noise): only
    # the embedding rows can learn it.
    gen = torch.Generator().manual_seed(1)
    losses, accs = [], []
    for step in range(60):
        ids = torch.randint(0, 1000, (64 * 3,), generator=gen)
        offsets = torch.arange(0, 64 * 3, 3)
        x = torch.randn(64, 4, generator=gen)
        y = ((ids.view(64, 3) % 2).sum(1) > 1).long()
        dist.begin_step(step)
        logits = net(ids, offsets, x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        dist.end_step()
        losses.append(float(loss))
        accs.append(float((logits.argmax(1) == y).float().mean()))
    try:
        dist.begin_step(7)
        t.check(False, "begin_step(7) at step 60: no error")
    except ValueError as e:
        t.check("at step 60" in str(e), f"the module keeps its own step count: {e}")
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    t.check(last < 0.8 * first, f"the loss falls: {first:.3f} over the first 10 steps, {last:.3f} over the last")
    t.check(sum(accs[-10:]) / 10 > sum(accs[:10]) / 10,
          f"the accuracy rises: {sum(accs[:10]) / 10:.3f} -> {sum(accs[-10:]) / 10:.3f}")
    stats = client.server_stats(0)
    t.check(stats["tables"] and stats["tables"][0]["rows"] > 0, f"the table holds rows on server 0: {stats['tables']}")
    client.finish()


class Probe(torch.nn.Module):
    """loss = sum(used * c): used's gradient is c every step; `unused` gets
    none; `frozen` is not trained. Records what each forward saw."""

    def __init__(self):
        super().__init__()
        self.used = torch.nn.Parameter(torch.zeros(4))
        self.unused = torch.nn.Parameter(torch.zeros(3))
        self.frozen = torch.nn.Parameter(torch.full((2,), 7.0), requires_grad=False)
        self.c = torch.tensor([1.0, 2.0, 3.0, 4.0])
        self.seen = []

    def forward(self):
        self.seen.append(self.used.detach().clone())
        return (self.used * self.c).sum()


def record_buffers(client):
    """Wraps client.pull and client.push_pull: the data pointers of every
    tensor they were handed, in a set returned."""
    handed = set()
    pull, push_pull = client.pull, client.push_pull

    def note(*dicts):
        handed.update(t.data_ptr() for d in dicts for t in d.values())
    client.pull = lambda out, step: note(out) or pull(out, step)
    client.push_pull = lambda grads, out, step, pull_step: note(grads, out) or push_pull(grads, out, step, pull_step)
    return handed


def steps_seen(ps, pst, endpoint, consistency, pipeline, steps=5, staging=None):
    client = ps.connect(endpoint, request_timeout=20)
    client.handed = record_buffers(client)
    net = Probe()
    dist = pst.DistributedModule(client, net, optimizer={"kind": "sgd", "lr": 1.0}, consistency=consistency,
                                 pipeline=pipeline, staging=staging)
    for step in range(steps):
        dist.begin_step(step)
        net().backward()
        dist.end_step()
    dist.wait_params()
    return client, net, dist


def check_staged(t, client, net, staging):
    """Staged: the client never had the parameters' own memory."""
    if staging:
        own = {net.used.data_ptr(), net.unused.data_ptr()}
        t.check(client.handed and not (client.handed & own),
                f"staged: the client was handed {len(client.handed)} host buffers, none of them a parameter")


def step_semantics(ps, torch, endpoint, t, staging=None):
    import ps.torch as pst
    client, net, dist = steps_seen(ps, pst, endpoint, "sync", False, staging=staging)
    check_staged(t, client, net, staging)
    want = [-t * net.c for t in range(5)]
    t.check(all(torch.equal(a, b) for a, b in zip(net.seen, want)),
          f"sync: step t's forward sees the parameters after t steps ({[x.tolist() for x in net.seen]})")
    t.check(torch.equal(net.used.data, -5 * net.c), f"sync: after 5 steps used = -5c ({net.used.data.tolist()})")
    t.check(torch.equal(net.unused.data, torch.zeros(3)) and torch.equal(net.frozen.data, torch.full((2,), 7.0)),
          "sync: the parameter without a gradient is unchanged (pushed zeros; no step waited for it) and the "
          "frozen one is untouched")
    try:
        client.pull({"frozen": torch.zeros(2)}, 5)
        t.check(False, "requires_grad=False: 'frozen' is not registered")
    except KeyError as e:
        t.check("frozen" in str(e), f"requires_grad=False: 'frozen' is not registered ({e})")
    try:
        pst.DistributedModule(client, Probe(), consistency="sync", pipeline=True)
        t.check(False, "pipeline=True with sync is refused")
    except ValueError as e:
        t.check("pipeline" in str(e) and "sync" in str(e), f"pipeline=True with sync is refused: {e}")
    client.finish()


def pipelined_semantics(ps, torch, endpoint, t, staging=None):
    import ps.torch as pst
    client, net, dist = steps_seen(ps, pst, endpoint, "async", True, staging=staging)
    check_staged(t, client, net, staging)
    # Step 0 sees the initial values, step 1 those after step 0 (its own
    # pull), step t >= 2 those after step t - 2 (pulled by step t - 2's push).
    want = [0 * net.c, -1 * net.c, -1 * net.c, -2 * net.c, -3 * net.c]
    t.check(all(torch.equal(a, b) for a, b in zip(net.seen, want)),
          f"pipelined async: the forwards see 0, -c, -c, -2c, -3c ({[x.tolist() for x in net.seen]})")
    t.check(torch.equal(net.used.data, -4 * net.c), f"pipelined async: wait_params after 5 steps puts step 5's "
          f"parameters in place, those after step 3 ({net.used.data.tolist()})")
    latest = torch.zeros(4)
    client.pull({"used": latest}, 5).wait()  # sent after every push, on the same connection
    t.check(torch.equal(latest, -5 * net.c), f"pipelined async: no push lost, the server holds -5c ({latest.tolist()})")
    client.finish()


def unstageable_modules_refused(ps, torch, endpoint, t):
    import ps.torch as pst
    client = ps.connect(endpoint, request_timeout=20)
    for module, name, text in [(torch.nn.Linear(3, 2, device="meta"), "weight", "'meta' device"),
                               (torch.nn.Linear(3, 2).double(), "weight", "torch.float64")]:
        try:
            pst.DistributedModule(client, module, consistency="sync")
            t.check(False, f"{text}: no error")
        except ValueError as e:
            t.check(repr(name) in str(e) and text in str(e), f"refused, naming the parameter: {e}")
    client.finish()


def trained_on(ps, pst, endpoint, device, steps=6, staging=None):
    """A small MLP with BatchNorm on `device`, sync, SGD: its parameters and
    buffers after `steps` steps on fixed data, on the CPU."""
    client = ps.connect(endpoint, request_timeout=30)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                              torch.nn.Linear(16, 3)).to(device)
    dist = pst.DistributedModule(client, net, optimizer={"kind": "sgd", "lr": 0.1}, consistency="sync",
                                 staging=staging)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 8, generator=gen), torch.randint(0, 3, (32,), generator=gen)
    for step in range(steps):
        dist.begin_step(step)
        torch.nn.functional.cross_entropy(net(x.to(device)), y.to(device)).backward()
        dist.end_step()
    state = {k: v.detach().cpu().clone() for k, v in dist.state_dict().items()}
    client.finish()
    return state


ARGS = None  # --bin-dir and --python-dir


class TorchTest(Checks, unittest.TestCase):
    """Each test runs on a job of its own; each check is a subTest."""

    def run_on_job(self, body):
        import ps
        job = Job(ARGS.bin_dir, 2, 1)
        try:
            body(ps, torch, job.endpoint, self)
        finally:
            job.stop()

    def test_server_embedding_bag_is_torch_embedding_bag(self):
        self.run_on_job(embedding_bag_matches)

    def test_server_embedding_bag_loads_pretrained_rows(self):
        self.run_on_job(pretrained_rows)

    def test_server_embedding_bag_prefetch(self):
        self.run_on_job(prefetched_rows)

    def test_distributed_module_trains(self):
        self.run_on_job(training_smoke)

    def test_step_semantics_sync(self):
        self.run_on_job(step_semantics)

    def test_step_semantics_pipelined_async(self):
        self.run_on_job(pipelined_semantics)

    def test_step_semantics_sync_staged(self):
        self.run_on_job(lambda *a: step_semantics(*a, staging=True))

    def test_step_semantics_pipelined_async_staged(self):
        self.run_on_job(lambda *a: pipelined_semantics(*a, staging=True))

    def test_unstageable_modules_are_refused(self):
        self.run_on_job(unstageable_modules_refused)

    def trained_both_ways(self, runs):
        """{key: state} of trained_on(*args) for each key, each on a job of its own."""
        import ps
        import ps.torch as pst
        states = {}
        for key, (device, staging) in runs.items():
            job = Job(ARGS.bin_dir, 2, 1)
            try:
                states[key] = trained_on(ps, pst, job.endpoint, device, staging=staging)
            finally:
                job.stop()
        return states

    def test_staged_module_with_batch_norm_trains_as_the_plain_one(self):
        states = self.trained_both_ways({"plain": ("cpu", None), "staged": ("cpu", True)})
        for name, value in states["plain"].items():
            self.check(torch.equal(value, states["staged"][name]),
                       f"{name} ({value.dtype}): staged through host buffers, the same values bit for bit")

    def test_gpu_module_trains_as_the_cpu_one(self):
        if not torch.cuda.is_available():
            print("SKIP test_gpu_module_trains_as_the_cpu_one: this torch has no CUDA device (Debian's "
                  "python3-torch is CPU only); the staging a GPU module takes is checked on the CPU by the "
                  "*_staged tests", flush=True)
            self.skipTest("torch has no CUDA device")
        states = self.trained_both_ways({"cpu": ("cpu", None), "cuda": ("cuda", None)})
        for name, value in states["cpu"].items():
            other = states["cuda"][name]
            self.check(torch.allclose(value.float(), other.float(), atol=1e-5),
                       f"{name}: the GPU module's value is the CPU module's (max diff "
                       f"{float((value.float() - other.float()).abs().max()):.2e})")


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--python-dir", required=True)
    ARGS, rest = p.parse_known_args()
    sys.path.insert(0, ARGS.python_dir)
    torch.set_num_threads(1)
    result = unittest.main(argv=[sys.argv[0], "-v", *rest], exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
