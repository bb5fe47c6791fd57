"""What the Python workers (ps_torch_worker.py, ps_torch_spam.py) share:

- set_blas_threads(argv): OPENBLAS_NUM_THREADS from --threads, to be called
  before numpy or torch is imported. Debian's torch computes with the system
  OpenBLAS, whose thread count torch.set_num_threads does not set (left
  alone, its threads spin in sched_yield on every core).
- add_job_flags(parser) and client_options(args): the flags every worker of
  a job takes (every option of ps.connect, named as the C++ workers' flags,
  and --consistency, --threads, ...) and the options of ps.connect they give.
- emit(event, **fields): one JSON-line event on stdout, as ps_worker prints
  them (start, progress, eval, done, server_stats), which launch_job.py shows
  and summarises.
- Meter: a worker's counters (samples, the epoch's mean loss and accuracy,
  time evaluating) and the progress, eval and done events made from them.
- emit_server_stats(client): rank 0's "server_stats" event (the servers'
  updates and the table rows summed over servers), as ps_spam_worker's.
- check_flag_ranges(parser, args, ranges) and POSITIVE: the workers' flag
  checks; splitmix64(z): their id hash over numpy uint64 arrays.
- roc_auc(scores, labels) and binary_metrics(logits, labels): a binary
  classifier's test figures; binary_step and train_epochs: its step after
  the forward pass, and its epochs with rank 0's evaluations
  (ps_torch_spam.py, ps_torch_ctr.py).

Importing it loads neither numpy nor torch (add_job_flags imports ps; the
metrics and splitmix64 import numpy when called).
"""

import datetime
import json
import math
import os
import time


def blas_threads(argv):
    """The value of --threads in `argv` (as text), "1" without one."""
    for i, arg in enumerate(argv):
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
        if arg == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
    return "1"


def set_blas_threads(argv):
    """Sets OPENBLAS_NUM_THREADS from --threads (unless the environment
    already sets it); has an effect only before numpy or torch is loaded."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", blas_threads(argv))


def flag_bool(text):
    """A boolean flag's value as the C++ binaries take it (--shm=false)."""
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def add_job_flags(parser):
    """The flags a worker of a job takes: every option of ps.connect under
    the name the C++ workers' flag has (--scheduler, --rank,
    --request_timeout, --shm=false, --insecure, ...; their defaults those
    of the client, ps.CLIENT_OPTION_DEFAULTS), and --consistency, --threads,
    --seed and --progress_every."""
    import ps  # the client's own list of its options; loads neither numpy nor torch
    for name, default in ps.CLIENT_OPTION_DEFAULTS.items():
        if isinstance(default, bool):
            parser.add_argument(f"--{name}", type=flag_bool, nargs="?", const=True, default=default,
                                help=f"ps.connect's {name} (default {default})")
        elif isinstance(default, datetime.timedelta):
            parser.add_argument(f"--{name}", type=ps.parse_duration, default=default,
                                help=f"ps.connect's {name}, e.g. 30s (default {default.total_seconds()}s)")
        else:
            parser.add_argument(f"--{name}", type=type(default), default=default,
                                help=f"ps.connect's {name} (default {default!r})")
    parser.add_argument("--consistency", default=ps.job_consistency(),
                        help="sync, async or ssp:K (every worker the same; default: $PS_CONSISTENCY, else sync)")
    parser.add_argument("--compression", default="none",
                        help="none, fp16, bf16, topk:R, randomk:R or onebit [,pull=none|fp16|bf16|delta] "
                             "[,warmup=N after topk and randomk] (every worker the same)")
    parser.add_argument("--threads", type=int, default=1, help="torch and OpenBLAS threads")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--progress_every", type=ps.parse_duration, default=datetime.timedelta(seconds=1))


def client_options(args):
    """ps.connect's keyword options for the flags of add_job_flags (all but
    the scheduler, connect's first argument)."""
    import ps
    return {name: getattr(args, name) for name in ps.CLIENT_OPTION_DEFAULTS if name != "scheduler"}


def emit(event, **fields):
    """Prints one event as a JSON line ({"event": EVENT, ...fields}) and flushes."""
    print(json.dumps(dict({"event": event}, **fields)), flush=True)


class Meter:
    """One worker's counters and the events made from them: progress (at most
    every `every_s` seconds unless forced), eval and done. Times count from
    the Meter's creation. Not thread-safe."""

    def __init__(self, rank, epochs, total_steps, every_s=1.0):
        self.rank, self.epochs, self.total_steps, self.every_s = rank, epochs, total_steps, every_s
        self.t0 = self.last = time.monotonic()
        self.samples, self.eval_s = 0, 0.0
        self.loss_sum, self.correct, self.seen = 0.0, 0, 0

    def elapsed(self):
        return time.monotonic() - self.t0

    def start_epoch(self):
        """The progress lines and eval events report the epoch from here on."""
        self.loss_sum, self.correct, self.seen = 0.0, 0, 0

    def add(self, n, loss, correct):
        """Counts a step of `n` samples with mean loss `loss`, `correct` of them right."""
        self.samples += n
        self.loss_sum += loss * n
        self.correct += correct
        self.seen += n

    def train_loss(self):
        return self.loss_sum / max(self.seen, 1)

    def progress(self, epoch, step, wait_s, force=False):
        """A progress event after `step` steps of total_steps, when every_s has passed (or forced)."""
        now = time.monotonic()
        if not force and now - self.last < self.every_s:
            return
        self.last = now
        elapsed = now - self.t0
        emit("progress", rank=self.rank, epoch=epoch, epochs=self.epochs, step=step, total_steps=self.total_steps,
             loss=self.train_loss(), train_accuracy=self.correct / max(self.seen, 1),
             samples_per_s=self.samples / elapsed if elapsed > 0 else 0.0, elapsed_s=elapsed,
             eta_s=elapsed * (self.total_steps - step) / step if step > 0 else 0.0,
             wait_s=wait_s, straggle_s=0.0)

    def evaluated(self, since, epoch, step, final, **metrics):
        """An eval event with `metrics` (test_accuracy, test_loss, ...) of an
        evaluation that began at time.monotonic() == `since`."""
        self.eval_s += time.monotonic() - since
        emit("eval", rank=self.rank, epoch=epoch, step=step, elapsed_s=self.elapsed(),
             train_loss=self.train_loss(), **metrics, final=final)

    def done(self, steps, wait_s, **final):
        """The done event; `final` holds rank 0's last evaluation (None elsewhere)."""
        wall = self.elapsed()
        emit("done", rank=self.rank, **final, samples=self.samples, steps=steps, wall_s=wall,
             samples_per_s=self.samples / wall if wall > 0 else 0.0, wait_s=wait_s, straggle_s=0.0,
             eval_s=self.eval_s)


def emit_server_stats(client):
    """Rank 0's "server_stats" event: every server's statistics summed (its
    tables' rows, bytes, evictions and admissions when it holds tables)."""
    answers = [client.server_stats(s) for s in range(client.num_servers)]
    stats = [s for s in answers if s is not None]  # None: died, its backups count for it (--replicas)
    fields = {"rank": client.rank, "servers": len(stats),
              "pushes_applied": sum(s["pushes_applied"] for s in stats),
              "updates_applied": sum(s["updates_applied"] for s in stats),
              "staleness_max": max((s["staleness_max"] for s in stats), default=0)}
    tables = [t for s in stats for t in s["tables"]]
    if tables:
        for key in ("rows", "bytes", "evictions", "admissions"):
            fields["table_" + key] = sum(t[key] for t in tables)
        disk = sum(t["disk_rows"] for t in tables)  # rows only on the servers' disk tiers
        fields["table_rows"] += disk
        if disk:
            fields["table_disk_rows"] = disk
    if len(stats) < len(answers):
        fields["servers_failed_over"] = len(answers) - len(stats)
    emit("server_stats", **fields)


def roc_auc(scores, labels):
    """The exact ROC AUC (Mann-Whitney U over tie-averaged ranks: a tie
    between a positive and a negative counts one half); None without both
    classes."""
    import numpy as np
    pos = labels >= 0.5
    n_pos = int(pos.sum())
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    order = np.argsort(scores, kind="stable")
    _, first, counts = np.unique(scores[order], return_index=True, return_counts=True)
    ranks = np.empty(len(scores))
    ranks[order] = np.repeat(first + (counts + 1) / 2.0, counts)  # 1-based, ties averaged
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def binary_metrics(logits, labels):
    """test_accuracy, test_loss (mean logistic loss) and test_auc of float64 logits."""
    import numpy as np
    y = labels.astype(np.float64)
    loss = np.logaddexp(0.0, logits) - y * logits
    return {"test_accuracy": float(np.mean((logits > 0) == (y >= 0.5))) if len(y) else None,
            "test_loss": float(loss.mean()) if len(y) else 0.0, "test_auc": roc_auc(logits, y)}


def binary_step(run, logits, y, epoch, step, error):
    """The rest of a binary classifier's step after its forward pass: the
    logistic loss (raising `error` when it is not finite), backward, the
    step's end and its counters. `run` has dist, meter and r. Returns the
    next step."""
    import torch
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
    if not math.isfinite(float(loss)):
        raise error(f"step {step} worker {run.r}: loss is {float(loss)}; stopping instead of pushing garbage "
                    f"(lower --row_lr, --dense_lr)")
    loss.backward()
    run.dist.end_step()
    run.meter.add(len(y), float(loss), int(((logits > 0) == (y >= 0.5)).sum()))
    run.meter.progress(epoch, step + 1, run.dist.wait_s)
    return step + 1


def train_epochs(run, epochs):
    """Every epoch of `run` (its epoch(e, step) and evaluate(e, step, final)),
    rank 0 evaluating after each; returns (steps, rank 0's last figures)."""
    step, final = 0, {}
    for e in range(1, epochs + 1):
        step = run.epoch(e, step)
        run.meter.progress(e, step, run.dist.wait_s, force=True)
        if run.r == 0:
            final = run.evaluate(e, step, final=e == epochs)
    return step, final


# A check of check_flag_ranges: positive and finite.
POSITIVE = (lambda v: math.isfinite(v) and v > 0, "positive and finite")


def check_flag_ranges(parser, args, ranges):
    """parser.error (exit 2) for the first flag of `ranges`, (name, whether
    a value is valid, what it must be), whose value in `args` is not."""
    for name, ok, want in ranges:
        if not ok(getattr(args, name)):
            parser.error(f"--{name}={getattr(args, name)}: must be {want}")


def splitmix64(z):
    """The splitmix64 finaliser of each element of a uint64 numpy array (wrapping)."""
    import numpy as np
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
    return z ^ (z >> np.uint64(31))
