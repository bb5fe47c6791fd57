"""ps_torch_worker: a PyTorch model of the user's kind trained through the
parameter servers (ps.torch.DistributedModule): a small CNN on Fashion-MNIST,
which the C++ trainer cannot express.

    build/bin/ps_torch_worker --scheduler=HOST:PORT [--rank=R] [--consistency=sync|async|ssp:K]
        [--epochs=5] [--batch_size=64] [--lr=1e-3] [--model=cnn|mlp] [--train_limit=N] [--test_limit=N]

Prints the JSON-line events of ps_worker (start, progress, eval, done) that
scripts/launch_job.py shows and summarises; scripts/train_torch.sh runs a
whole job. Each worker trains a disjoint shard (a seeded permutation, cut by
rank, reshuffled each epoch), every worker the same number of steps; rank 0
evaluates on the test images after each epoch. The servers apply Adam (lr
--lr, by default decayed along a cosine to 5% over the run); one thread of
torch per worker (--threads). Exit 0 when done, 1 on
an error of the job (named on stderr), 2 for bad flags or data.
"""

import argparse
import gzip
import json
import os
import struct
import sys
import time

import numpy as np
import torch

import ps
import ps.torch as pst

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def emit(event, **fields):
    print(json.dumps(dict({"event": event}, **fields)), flush=True)


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
    # Batch norm's running statistics are buffers, not parameters: each
    # worker keeps its own (rank 0's serve its evaluations).
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32 * 7 * 7, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="ps_torch_worker", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scheduler", required=True)
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--consistency", default="sync")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--lr_schedule", choices=("constant", "cosine"), default="cosine",
                   help="cosine: from --lr down to 5%% of it over the run (applied by the servers)")
    p.add_argument("--model", choices=("cnn", "mlp"), default="cnn")
    p.add_argument("--train_limit", type=int, default=0)
    p.add_argument("--test_limit", type=int, default=0)
    p.add_argument("--data_dir", default=FASHION_MNIST)
    p.add_argument("--progress_every_s", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu only")
    p.add_argument("--placement", default="auto", help="auto only")
    p.add_argument("--secret_key_file", default="")
    p.add_argument("--scheduler_public_key", default="")
    p.add_argument("--insecure", action="store_true")
    a = p.parse_args(argv)
    if a.device != "cpu" or a.placement != "auto":
        p.error("--device=cpu and --placement=auto only")
    if a.epochs < 1 or a.batch_size < 1 or a.lr <= 0 or a.threads < 1:
        p.error("--epochs, --batch_size and --threads must be positive, --lr > 0")
    return a


def evaluate(net, x, y):
    net.eval()
    with torch.no_grad():
        logits = torch.cat([net(x[i:i + 1000]) for i in range(0, len(x), 1000)])
    net.train()
    loss = float(torch.nn.functional.cross_entropy(logits, y))
    return float((logits.argmax(1) == y).float().mean()), loss


class Run:
    """One worker's training loop and its events."""

    def __init__(self, a, client, train, test):
        self.a, self.client, (self.x, self.y), (self.tx, self.ty) = a, client, train, test
        self.net = make_model(a.model)
        self.w, self.r = client.num_workers, client.rank
        self.shard = len(self.x) // self.w
        self.steps = self.shard // a.batch_size
        optimizer = {"kind": "adam", "lr": a.lr}
        if a.lr_schedule == "cosine":
            optimizer.update(lr_schedule="cosine", decay_steps=max(1, self.steps * a.epochs), min_lr_ratio=0.05)
        self.dist = pst.DistributedModule(client, self.net, optimizer=optimizer, consistency=a.consistency)
        self.t0 = time.monotonic()
        self.samples, self.loss_sum, self.correct, self.seen, self.eval_s = 0, 0.0, 0, 0, 0.0

    def epoch(self, e, step):
        a = self.a
        g = torch.Generator().manual_seed(a.seed * 1000 + e)
        mine = torch.randperm(len(self.x), generator=g)[self.r::self.w][:self.shard]
        last = time.monotonic()
        self.loss_sum, self.correct, self.seen = 0.0, 0, 0  # the progress lines report this epoch
        for b in range(self.steps):
            idx = mine[b * a.batch_size:(b + 1) * a.batch_size]
            self.dist.begin_step(step)
            logits = self.net(self.x[idx])
            loss = torch.nn.functional.cross_entropy(logits, self.y[idx])
            loss.backward()
            self.dist.end_step()
            step += 1
            self.samples += len(idx)
            self.loss_sum += float(loss) * len(idx)
            self.correct += int((logits.argmax(1) == self.y[idx]).sum())
            self.seen += len(idx)
            if time.monotonic() - last >= a.progress_every_s:
                last = time.monotonic()
                self.progress(e, step)
        return step

    def progress(self, e, step):
        elapsed = time.monotonic() - self.t0
        total = self.steps * self.a.epochs
        rate = self.samples / elapsed if elapsed > 0 else 0.0
        emit("progress", rank=self.r, epoch=e, epochs=self.a.epochs, step=step, total_steps=total,
             loss=self.loss_sum / max(self.seen, 1), train_accuracy=self.correct / max(self.seen, 1),
             samples_per_s=rate, elapsed_s=elapsed,
             eta_s=(total - step) * self.a.batch_size / rate if rate > 0 else 0.0,
             wait_s=self.dist.wait_s, straggle_s=0.0)

    def eval(self, e, step, final):
        t = time.monotonic()
        self.dist.wait_params()
        acc, loss = evaluate(self.net, self.tx, self.ty)
        self.eval_s += time.monotonic() - t
        emit("eval", rank=self.r, epoch=e, step=step, elapsed_s=time.monotonic() - self.t0,
             train_loss=self.loss_sum / max(self.seen, 1), test_accuracy=acc, test_loss=loss, final=final)
        return acc, loss


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train, test = load(a.data_dir, "train", a.train_limit), load(a.data_dir, "t10k", a.test_limit)
    options = {"rank": a.rank, "insecure": a.insecure}
    if a.secret_key_file:
        options.update(secret_key_file=a.secret_key_file, scheduler_public_key=a.scheduler_public_key)
    client = ps.connect(a.scheduler, **options)
    run = Run(a, client, train, test)
    params = sum(p.numel() for p in run.net.parameters())
    emit("start", rank=run.r, workers=run.w, servers=client.num_servers, parameters=params, shard=run.shard,
         steps_per_epoch=run.steps, epochs=a.epochs, total_steps=run.steps * a.epochs, start_step=0,
         consistency=a.consistency, device="cpu", pipeline=False, placement="auto (ps.torch)")
    step, acc, loss = 0, None, None
    for e in range(1, a.epochs + 1):
        step = run.epoch(e, step)
        run.progress(e, step)
        if run.r == 0:
            acc, loss = run.eval(e, step, final=e == a.epochs)
    client.barrier("torch-done")
    wall = time.monotonic() - run.t0
    emit("done", rank=run.r, test_accuracy=acc, test_loss=loss, samples=run.samples, steps=step, wall_s=wall,
         samples_per_s=run.samples / wall, wait_s=run.dist.wait_s, straggle_s=0.0, eval_s=run.eval_s)
    client.finish()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ps.Error as e:
        print(f"ps_torch_worker: {e}", file=sys.stderr)
        sys.exit(1)
