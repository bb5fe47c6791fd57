"""ps_torch_ctr: a DLRM-style click-through model in PyTorch, trained through
the parameter servers (a ps.torch.ServerEmbeddingBag per categorical
feature) or, with --ddp, by PyTorch alone (DistributedDataParallel over gloo,
each feature's ids hashed into --buckets rows of an nn.EmbeddingBag: how a
table is fitted into memory without a parameter server).

    build/bin/ps_torch_ctr_worker --scheduler=HOST:PORT [--rank=R] [--consistency=sync|async|ssp:K]
        [--table_consistency=MODE] [--epochs=1] [--train_samples=N] [--test_samples=N] [--batch_size=256]
        [--dim=16] [--hidden=64] [--row_lr=0.05] [--dense_lr=0.01] [--zipf_s=1.05] [--seed=1]
    build/bin/ps_torch_ctr_worker --ddp=file:///PATH --world_size=W --rank=R --buckets=K [the same flags]

Data: synthetic clicks from a fixed hidden model, generated here, the same
for every worker count and either side. Sample i has 26 categorical
features, each a Zipf(--zipf_s) rank over 10^9 ids mapped to a 64-bit id
(splitmix64 of rank x 26 + feature), and 13 numeric features N(0, 1). Its
label is 1 with probability sigmoid(bias + sum over features of the hidden
effect of its id + w . numeric), where an id's effect is uniform in
[-0.9, 0.9] by a hash of the id (a fixed function: popular ids can be
learnt, rare ones are noise) and w is fixed by the seed. Samples come in
batches: batch g of a split holds samples [g B, (g+1) B), drawn from a
generator seeded by (seed, split, g); worker r of W trains batches r, r+W,
... of the training split, the same ones every epoch. Rank 0 evaluates on
--test_samples test samples after each epoch (ROC AUC, accuracy, loss).

Model: per feature the sum of its rows (dim --dim: one id per sample and
feature), concatenated with the numeric features, then Linear(--hidden),
ReLU, Linear(--hidden / 2), ReLU, Linear(1); the logistic loss. Through the
servers: the rows on the servers' tables "c00".."c25", Adagrad applied by
the servers (--row_lr to rows, --dense_lr to the dense layers); a table's
consistency may differ from the dense layers' (--table_consistency=async
under --consistency=sync: PERSIA's hybrid). With --ddp: the same model, the
same Adagrad applied by each process (sparse for the hashed tables).

Prints JSON-line events as the other PyTorch workers (start, progress,
eval with test_auc, done; through the servers rank 0's server_stats with
the tables' rows): scripts/train_ctr.sh runs the jobs and compares them.
Exit 0 when done, 1 on an error of the job, 2 for bad flags.
"""

import argparse
import re
import sys
import time

import ps_worker_events as events

events.set_blas_threads(sys.argv[1:])  # before torch loads OpenBLAS

import numpy as np  # noqa: E402  (after OPENBLAS_NUM_THREADS)
import torch  # noqa: E402

import ps  # noqa: E402
import ps.torch as pst  # noqa: E402
from ps_worker_events import binary_metrics, emit, splitmix64  # noqa: E402

PROG = "ps_torch_ctr_worker"
CATEGORICAL, NUMERIC = 26, 13
ID_SPACE = 10 ** 9
EFFECT = 0.9  # an id's hidden effect is uniform in [-EFFECT, EFFECT]
TRAIN, TEST = 0, 1  # the splits' seeds



class Clicks:
    """The synthetic click data: batches of (ids, numeric, labels) as numpy
    arrays, a pure function of (seed, split, batch index)."""

    def __init__(self, seed, zipf_s, batch_size):
        self.seed, self.zipf_s, self.batch = seed, zipf_s, batch_size
        hidden = np.random.default_rng([seed, 999])
        self.w = (hidden.standard_normal(NUMERIC) * 0.3).astype(np.float64)
        self.bias = -1.0  # about a quarter of the samples click

    def batch_at(self, split, g, n=None):
        """Batch `g` of `split` (n samples, default the batch size)."""
        rng = np.random.default_rng([self.seed, split, g])
        n = n or self.batch
        with np.errstate(over="ignore"):
            ranks = (rng.zipf(self.zipf_s, size=(n, CATEGORICAL)).astype(np.uint64) - np.uint64(1)) % np.uint64(ID_SPACE)
            keys = ranks * np.uint64(CATEGORICAL) + np.arange(CATEGORICAL, dtype=np.uint64)
            ids = splitmix64(keys)
            effect = (splitmix64(ids ^ np.uint64(0x5DEECE66D)) >> np.uint64(11)).astype(np.float64) / 2.0 ** 53
        x = rng.standard_normal((n, NUMERIC)).astype(np.float32)
        logit = self.bias + ((2 * effect - 1) * EFFECT).sum(1) + x.astype(np.float64) @ self.w
        y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        return ids.view(np.int64), x, y


class HashedBag(torch.nn.Module):
    """PyTorch alone: a feature's ids hashed into `buckets` rows."""

    def __init__(self, buckets, dim, scale):
        super().__init__()
        self.buckets = buckets
        self.bag = torch.nn.EmbeddingBag(buckets, dim, mode="sum", sparse=True)
        torch.nn.init.uniform_(self.bag.weight, -scale, scale)

    def forward(self, ids, offsets):
        return self.bag(torch.remainder(ids, self.buckets), offsets)


class CtrNet(torch.nn.Module):
    """Per feature its rows' sum, with the numeric features -> MLP -> one logit."""

    def __init__(self, a, tables):
        super().__init__()
        self.tables = torch.nn.ModuleList(tables)
        h = a.hidden
        self.mlp = torch.nn.Sequential(torch.nn.Linear(CATEGORICAL * a.dim + NUMERIC, h), torch.nn.ReLU(),
                                       torch.nn.Linear(h, max(1, h // 2)), torch.nn.ReLU(),
                                       torch.nn.Linear(max(1, h // 2), 1))

    def forward(self, ids, x):
        offsets = torch.arange(ids.shape[0], dtype=torch.int64)
        rows = [t(ids[:, f].contiguous(), offsets) for f, t in enumerate(self.tables)]
        return self.mlp(torch.cat(rows + [x], 1)).squeeze(1)


def server_tables(a):
    init = {"kind": "uniform", "a": -a.init_scale, "b": a.init_scale, "seed": a.seed}
    opt = {"kind": "adagrad", "lr": a.row_lr, "epsilon": 1e-8}
    return [pst.ServerEmbeddingBag(f"c{f:02d}", a.dim, mode="sum", init=init, optimizer=opt,
                                   consistency=a.table_consistency or None) for f in range(CATEGORICAL)]


class DdpTrainer:
    """PyTorch alone: DistributedDataParallel (gloo) averages the gradients
    (sparse for the tables), then each process applies Adagrad. Has
    DistributedModule's begin_step / end_step / wait_params / wait_s."""

    def __init__(self, net, a):
        self.forward = torch.nn.parallel.DistributedDataParallel(net)
        tables = [p for t in net.tables for p in t.parameters()]
        self.opts = [torch.optim.Adagrad(tables, lr=a.row_lr), torch.optim.Adagrad(net.mlp.parameters(), lr=a.dense_lr)]
        self.wait_s = 0.0

    def begin_step(self, step):
        for o in self.opts:
            o.zero_grad(set_to_none=True)

    def end_step(self):
        for o in self.opts:
            o.step()

    def wait_params(self):
        pass


class Run:
    """One worker's model, batches, training loop and events."""

    def __init__(self, a, rank, workers, client=None):
        self.a, self.r, self.w, self.client = a, rank, workers, client
        self.data = Clicks(a.seed, a.zipf_s, a.batch_size)
        self.steps = a.train_samples // (a.batch_size * workers)  # per epoch, the same on every worker
        tables = server_tables(a) if client is not None else \
            [HashedBag(a.buckets, a.dim, a.init_scale) for _ in range(CATEGORICAL)]
        self.net = CtrNet(a, tables)
        if client is None:
            self.dist = DdpTrainer(self.net, a)
            self.forward = self.dist.forward
        else:
            self.dist = pst.DistributedModule(client, self.net, tables=tables, consistency=a.consistency,
                                              optimizer={"kind": "adagrad", "lr": a.dense_lr, "epsilon": 1e-8},
                                              compression=a.compression)
            self.forward = self.net
        self.meter = events.Meter(rank, a.epochs, self.steps * a.epochs, a.progress_every.total_seconds())

    def start_event(self):
        a = self.a
        emit("start", rank=self.r, workers=self.w, servers=self.client.num_servers if self.client else 0,
             parameters=sum(p.numel() for p in self.net.mlp.parameters()), tables=CATEGORICAL, dim=a.dim,
             buckets=a.buckets if self.client is None else None, steps_per_epoch=self.steps, epochs=a.epochs,
             total_steps=self.steps * a.epochs, start_step=0, consistency=a.consistency,
             table_consistency=a.table_consistency or a.consistency, device="cpu",
             placement="ddp (gloo)" if self.client is None else "auto (ps.torch)")

    def batch(self, b):
        ids, x, y = self.data.batch_at(TRAIN, b * self.w + self.r)
        return torch.from_numpy(ids), torch.from_numpy(x), torch.from_numpy(y)

    def epoch(self, e, step):
        """Trains epoch `e` (from 1) from global step `step`; returns the next step."""
        self.meter.start_epoch()
        upcoming = self.batch(0)
        for b in range(self.steps):
            ids, x, y = upcoming
            self.dist.begin_step(step)
            logits = self.forward(ids, x)
            if b + 1 < self.steps:
                upcoming = self.batch(b + 1)
                if self.client is not None:  # the next batch's rows come back with this step's push
                    for f, t in enumerate(self.net.tables):
                        t.prefetch(upcoming[0][:, f].contiguous())
            step = events.binary_step(self, logits, y, e, step, RuntimeError)
        return step

    def evaluate(self, e, step, final):
        """Rank 0: the test split's figures with the parameters of step `step`; the eval event."""
        t = time.monotonic()
        self.dist.wait_params()
        scores, labels = [], []
        with torch.no_grad():
            for g in range(-(-self.a.test_samples // self.a.batch_size)):
                n = min(self.a.batch_size, self.a.test_samples - g * self.a.batch_size)
                ids, x, y = self.data.batch_at(TEST, g, n)
                scores.append(self.net(torch.from_numpy(ids), torch.from_numpy(x)).double().numpy())
                labels.append(y)
        metrics = binary_metrics(np.concatenate(scores), np.concatenate(labels))
        self.meter.evaluated(t, e, step, final, **metrics)
        return metrics


def train(a, rank, workers, client=None):
    run = Run(a, rank, workers, client)
    if client is not None and client.resume_step() != 0:
        raise RuntimeError(f"worker {rank} would resume a running job: {PROG} cannot rejoin one")
    run.start_event()
    step, final = events.train_epochs(run, a.epochs)
    if a.save and client is not None:
        state = run.dist.state_dict()  # every worker: the buffers are made the same everywhere
        if rank == 0:
            torch.save(state, a.save)
    elif a.save and rank == 0:
        torch.save(run.net.state_dict(), a.save)
    if client is None:
        torch.distributed.barrier()
    else:
        client.barrier("torch-ctr-done")  # every worker's last push is in
    run.meter.done(step, run.dist.wait_s, **final)
    if client is not None:
        if rank == 0:
            events.emit_server_stats(client)
        client.finish()


FLAG_RANGES = (("epochs", lambda v: v >= 1, ">= 1"), ("batch_size", lambda v: 1 <= v <= 4096, "in [1, 4096]"),
               ("dim", lambda v: 1 <= v <= 256, "in [1, 256]"), ("hidden", lambda v: 2 <= v <= 4096, "in [2, 4096]"),
               ("train_samples", lambda v: v >= 1, ">= 1"), ("test_samples", lambda v: v >= 1, ">= 1"),
               ("threads", lambda v: v >= 1, ">= 1"), ("buckets", lambda v: v >= 1, ">= 1"),
               ("zipf_s", lambda v: 1 < v <= 10, "in (1, 10]"), ("seed", lambda v: v >= 0, ">= 0"),
               ("progress_every", lambda v: v.total_seconds() > 0, "> 0"),
               ("row_lr", *events.POSITIVE), ("dense_lr", *events.POSITIVE), ("init_scale", *events.POSITIVE))


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    events.add_job_flags(p)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--train_samples", type=int, default=400000, help="training samples per epoch, all workers")
    p.add_argument("--test_samples", type=int, default=50000)
    p.add_argument("--batch_size", type=int, default=256, help="samples per step and worker")
    p.add_argument("--dim", type=int, default=16, help="row width of every table")
    p.add_argument("--hidden", type=int, default=64, help="width of the first dense layer (the second: half)")
    p.add_argument("--row_lr", type=float, default=0.05, help="Adagrad learning rate of the rows")
    p.add_argument("--dense_lr", type=float, default=0.01, help="Adagrad learning rate of the dense layers")
    p.add_argument("--init_scale", type=float, default=0.01, help="rows start uniform in [-init_scale, init_scale)")
    p.add_argument("--zipf_s", type=float, default=1.05, help="Zipf exponent of the id ranks")
    p.add_argument("--table_consistency", default="", metavar="MODE",
                   help="the tables' own mode (async under a sync model: PERSIA's hybrid); default: --consistency")
    p.add_argument("--ddp", default="", metavar="INIT_METHOD",
                   help="PyTorch alone: DistributedDataParallel (gloo) meeting at tcp://HOST:PORT or file:///PATH")
    p.add_argument("--world_size", type=int, default=0, help="--ddp: number of processes")
    p.add_argument("--buckets", type=int, default=100000, help="--ddp: rows per hashed table")
    p.add_argument("--save", default="", metavar="PATH",
                   help="rank 0 writes the module's state_dict here at the end (through the servers, the tables' "
                        "rows are in the servers' export, model.npz)")
    p.add_argument("--device", default="cpu", help="cpu only")
    p.add_argument("--placement", default="auto", help="auto only")
    a = p.parse_args(argv)
    if bool(a.scheduler) == bool(a.ddp):
        p.error("give --scheduler=HOST:PORT (train through the servers) or --ddp=INIT_METHOD, not both")
    if a.ddp and not (a.ddp.startswith(("tcp://", "file://")) and a.world_size >= 1 and 0 <= a.rank < a.world_size):
        p.error("--ddp needs tcp://HOST:PORT or file:///PATH, --world_size >= 1 and 0 <= --rank < --world_size")
    for flag in ("consistency", "table_consistency"):
        v = getattr(a, flag)
        if v and not re.fullmatch(r"sync|async|ssp:[0-9]+", v):
            p.error(f"--{flag} must be sync, async or ssp:K, got '{v}'")
    if a.device != "cpu" or a.placement != "auto":
        p.error("--device=cpu and --placement=auto only")
    events.check_flag_ranges(p, a, FLAG_RANGES)
    return a


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if a.ddp:
        torch.distributed.init_process_group("gloo", init_method=a.ddp, world_size=a.world_size, rank=a.rank)
        train(a, a.rank, a.world_size)
        torch.distributed.destroy_process_group()
    else:
        client = ps.connect(a.scheduler, **events.client_options(a))
        if a.train_samples < a.batch_size * client.num_workers:
            raise RuntimeError(f"--train_samples={a.train_samples}: less than a batch for each of the "
                               f"{client.num_workers} workers")
        train(a, client.rank, client.num_workers, client)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (ps.Error, RuntimeError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        sys.exit(1)
