"""ps_torch_worker: a PyTorch model of the user's kind trained through the
parameter servers (ps.torch.DistributedModule): a small CNN on Fashion-MNIST,
which the C++ trainer cannot express.

    build/bin/ps_torch_worker --scheduler=HOST:PORT [--rank=R] [--consistency=sync|async|ssp:K]
        [--epochs=5] [--batch_size=64] [--lr=2e-3] [--model=cnn|mlp] [--train_limit=N] [--test_limit=N]
    build/bin/ps_torch_worker --ddp=tcp://HOST:PORT|file:///PATH --world_size=W --rank=R [training flags]

Prints the JSON-line events of ps_worker (start, progress, eval, done) that
scripts/launch_job.py shows and summarises; scripts/train_torch.sh runs a
whole job. Each worker trains a disjoint shard (a seeded permutation, cut by
rank, reshuffled each epoch), every worker the same number of steps; rank 0
evaluates on the test images after each epoch. The servers apply Adam (lr
--lr, by default decayed along a cosine to 5% over the run); one thread of
torch per worker (--threads). Exit 0 when done, 1 on
an error of the job (named on stderr), 2 for bad flags or data.

With --ddp the same training runs without servers, as the reference that
scripts/bench_vs_ddp.sh compares with: W processes (meeting through
torch.distributed's init method: rank 0 listening on tcp://HOST:PORT, or a
file all of them reach) average their gradients with torch.nn.parallel.
DistributedDataParallel over gloo and each applies the same Adam and
schedule locally (torch.optim.Adam).
"""

import argparse
import datetime
import gzip
import math
import os
import struct
import sys
import time

import ps_worker_events as events

events.set_blas_threads(sys.argv[1:])  # before torch loads OpenBLAS

import numpy as np  # noqa: E402  (after OPENBLAS_NUM_THREADS)
import torch  # noqa: E402

import ps  # noqa: E402
import ps.torch as pst  # noqa: E402
from ps_worker_events import emit  # noqa: E402

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An IDX file (gzip-compressed or not) as a numpy array."""
    for p in (path + ".gz", path):
        if os.path.exists(p):
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rb") as f:
                data = f.read()
            magic, = struct.unpack(">I", data[:4])
            dims = magic & 0xFF
            shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
            body = np.frombuffer(data, np.uint8, offset=4 + 4 * dims)
            if body.size != int(np.prod(shape)):
                raise SystemExit(f"ps_torch_worker: {p}: {body.size} bytes of data for shape {shape}")
            return body.reshape(shape)
    raise SystemExit(f"ps_torch_worker: no {path}[.gz] (scripts/install_deps.sh installs dataset-fashion-mnist)")


def load(data_dir, split, limit):
    x = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte"))
    y = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte"))
    if limit:
        x, y = x[:limit], y[:limit]
    return torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1), torch.from_numpy(y.astype(np.int64))


def make_model(kind):
    if kind == "mlp":
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                   torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    # Batch norm's running statistics are buffers, not parameters: they live
    # on the servers as rank 0's (DistributedModule, as DDP's broadcast_buffers).
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32 * 7 * 7, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="ps_torch_worker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    events.add_job_flags(p)
    p.add_argument("--ddp", default="", metavar="INIT_METHOD",
                   help="train with DistributedDataParallel (gloo) instead of the servers, meeting at "
                        "tcp://HOST:PORT (rank 0 listens) or file:///PATH")
    p.add_argument("--world_size", type=int, default=0, help="--ddp: number of processes")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--lr_schedule", choices=("constant", "cosine"), default="cosine",
                   help="cosine: from --lr down to 5%% of it over the run (applied by the servers)")
    p.add_argument("--model", choices=("cnn", "mlp"), default="cnn")
    p.add_argument("--train_limit", type=int, default=0)
    p.add_argument("--test_limit", type=int, default=0)
    p.add_argument("--data_dir", default=FASHION_MNIST)
    p.add_argument("--save", default="", metavar="PATH",
                   help="rank 0 writes the trained module's state_dict here (torch.save) at the end")
    p.add_argument("--device", default="cpu", help="cpu only")
    p.add_argument("--placement", default="auto", help="auto only")
    p.add_argument("--slice_bytes", type=int, default=0, help="slice size of the partition map (0: the default)")
    a = p.parse_args(argv)
    if a.device != "cpu" or a.placement != "auto":
        p.error("--device=cpu and --placement=auto only")
    if a.epochs < 1 or a.batch_size < 1 or a.lr <= 0 or a.threads < 1:
        p.error("--epochs, --batch_size and --threads must be positive, --lr > 0")
    if bool(a.scheduler) == bool(a.ddp):
        p.error("give --scheduler=HOST:PORT (train through the servers) or --ddp=INIT_METHOD, not both")
    if a.ddp and not a.ddp.startswith(("tcp://", "file://")):
        p.error(f"--ddp={a.ddp}: give tcp://HOST:PORT or file:///PATH")
    if a.ddp and not (a.world_size >= 1 and 0 <= a.rank < a.world_size and a.consistency == "sync"):
        p.error("--ddp needs --world_size >= 1, 0 <= --rank < --world_size, and sync consistency")
    return a


def evaluate(net, x, y):
    net.eval()
    with torch.no_grad():
        logits = torch.cat([net(x[i:i + 1000]) for i in range(0, len(x), 1000)])
    net.train()
    loss = float(torch.nn.functional.cross_entropy(logits, y))
    return float((logits.argmax(1) == y).float().mean()), loss


MIN_LR_RATIO = 0.05  # the cosine schedule's floor, as a share of --lr


class DdpTrainer:
    """The reference: DistributedDataParallel (gloo) averages the gradients,
    then each process applies torch.optim.Adam with the servers' schedule.
    Has DistributedModule's begin_step / end_step / wait_params / wait_s."""

    def __init__(self, net, lr, decay_steps):
        self.forward = torch.nn.parallel.DistributedDataParallel(net)
        self.opt = torch.optim.Adam(net.parameters(), lr=lr)
        cosine = lambda t: MIN_LR_RATIO + (1 - MIN_LR_RATIO) * 0.5 * (1 + math.cos(math.pi * min(t, decay_steps) / decay_steps))
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, cosine) if decay_steps else None
        self.wait_s = 0.0  # gloo's all-reduce runs inside backward; not separated here

    def begin_step(self, step):
        self.opt.zero_grad(set_to_none=True)

    def end_step(self):
        self.opt.step()
        if self.sched is not None:
            self.sched.step()

    def wait_params(self):
        pass


class Run:
    """One worker's training loop and its events."""

    def __init__(self, a, rank, workers, train, test, client=None):
        self.a, (self.x, self.y), (self.tx, self.ty) = a, train, test
        self.net = make_model(a.model)
        self.w, self.r = workers, rank
        self.shard = len(self.x) // self.w
        self.steps = self.shard // a.batch_size
        decay_steps = max(1, self.steps * a.epochs) if a.lr_schedule == "cosine" else 0
        if client is None:
            self.dist = DdpTrainer(self.net, a.lr, decay_steps)
            self.forward = self.dist.forward
        else:
            optimizer = {"kind": "adam", "lr": a.lr}
            if decay_steps:
                optimizer.update(lr_schedule="cosine", decay_steps=decay_steps, min_lr_ratio=MIN_LR_RATIO)
            placement = {"rule": "auto", "slice_bytes": a.slice_bytes} if a.slice_bytes else None
            self.dist = pst.DistributedModule(client, self.net, optimizer=optimizer, consistency=a.consistency,
                                              placement=placement, compression=a.compression)
            self.forward = self.net
        self.meter = events.Meter(rank, a.epochs, self.steps * a.epochs, a.progress_every.total_seconds())

    def epoch(self, e, step):
        a = self.a
        g = torch.Generator().manual_seed(a.seed * 1000 + e)
        mine = torch.randperm(len(self.x), generator=g)[self.r::self.w][:self.shard]
        self.meter.start_epoch()
        for b in range(self.steps):
            idx = mine[b * a.batch_size:(b + 1) * a.batch_size]
            self.dist.begin_step(step)
            logits = self.forward(self.x[idx])
            loss = torch.nn.functional.cross_entropy(logits, self.y[idx])
            loss.backward()
            self.dist.end_step()
            step += 1
            self.meter.add(len(idx), float(loss), int((logits.argmax(1) == self.y[idx]).sum()))
            self.meter.progress(e, step, self.dist.wait_s)
        return step

    def eval(self, e, step, final):
        t = time.monotonic()
        self.dist.wait_params()
        acc, loss = evaluate(self.net, self.tx, self.ty)
        self.meter.evaluated(t, e, step, final, test_accuracy=acc, test_loss=loss)
        return acc, loss


def connect(a):
    """The servers' client (None with --ddp, which joins the gloo group)."""
    if a.ddp:
        torch.distributed.init_process_group("gloo", init_method=a.ddp, world_size=a.world_size,
                                             rank=a.rank, timeout=datetime.timedelta(seconds=120))
        return None
    return ps.connect(a.scheduler, **events.client_options(a))


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train, test = load(a.data_dir, "train", a.train_limit), load(a.data_dir, "t10k", a.test_limit)
    client = connect(a)
    if client is None:
        run = Run(a, a.rank, a.world_size, train, test)
    else:
        run = Run(a, client.rank, client.num_workers, train, test, client)
    params = sum(p.numel() for p in run.net.parameters())
    emit("start", rank=run.r, workers=run.w, servers=client.num_servers if client else 0, parameters=params,
         shard=run.shard, steps_per_epoch=run.steps, epochs=a.epochs, total_steps=run.steps * a.epochs,
         start_step=0, consistency=a.consistency, device="cpu", pipeline=False,
         placement="ddp (gloo)" if client is None else "auto (ps.torch)")
    step, acc, loss = 0, None, None
    for e in range(1, a.epochs + 1):
        step = run.epoch(e, step)
        run.meter.progress(e, step, run.dist.wait_s, force=True)
        if run.r == 0:
            acc, loss = run.eval(e, step, final=e == a.epochs)
    if a.save and client is not None:
        state = run.dist.state_dict()  # every worker: the buffers are made the same everywhere
        if run.r == 0:
            torch.save(state, a.save)
    if client is None:
        torch.distributed.barrier()
    else:
        client.barrier("torch-done")
    run.meter.done(step, run.dist.wait_s, test_accuracy=acc, test_loss=loss)
    if client is None:
        torch.distributed.destroy_process_group()
    else:
        client.finish()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ps.Error as e:
        print(f"ps_torch_worker: {e}", file=sys.stderr)
        sys.exit(1)
