"""PyTorch on the parameter servers: a module's parameters, and embedding
tables larger than the worker's memory.

    import ps, ps.torch
    client = ps.connect("127.0.0.1:9000")
    model = MyNet()                                  # any torch.nn.Module
    tokens = ps.torch.ServerEmbeddingBag("tokens", dim=32, mode="mean")
    dist = ps.torch.DistributedModule(client, model, tables=[tokens],
                                      optimizer={"kind": "adam", "lr": 1e-3}, consistency="sync")
    for step, (ids, offsets, x, y) in enumerate(batches):
        dist.begin_step(step)                        # parameters of this step arrive as layers need them
        loss = loss_fn(model(tokens(ids, offsets), x), y)
        loss.backward()                              # each gradient is pushed as backward produces it
        dist.end_step()                              # waits for the pushes; pulls step + 1
    client.finish()

DistributedModule registers the module's parameters under their
named_parameters() names (with the servers' optimizer: there is no local
optimizer step), its buffers under their named_buffers() names, and the
tables' rows. The servers start from the module's own values on rank 0, bit
for bit (a pretrained or hand-set model stays what it is; the other workers'
modules need not match, their first pull brings rank 0's). Buffers
(BatchNorm's running statistics) are rank 0's, as DDP's broadcast_buffers:
rank 0 sends its buffers at every end_step and the others take them at their
next begin_step; sync_buffers() (every worker) makes them equal everywhere,
and state_dict() returns the module with the servers' parameters and
buffers. Before a submodule's forward runs, it
waits for that submodule's parameters only; during backward, a hook on each
parameter pushes its gradient as soon as it is produced (last layer first),
while backward goes on. In sync mode the servers average the workers'
gradients; ssp:K and async as the servers define them.

ServerEmbeddingBag is torch.nn.EmbeddingBag (modes "sum" and "mean", 1-D ids
with offsets) whose rows live in a server table: forward pulls the rows of
the batch's distinct ids, backward pushes their gradients.

A module on a GPU (or any device but the CPU) trains the same way: the
client reads and writes host memory, so each parameter not on the CPU is
staged through host buffers of its own (pinned on CUDA). Pulls land there
and are copied to the device with copy_(non_blocking=True) before the
layer's forward; each gradient is copied to the host as backward produces
it and pushed once its layer's copies are done, while backward goes on.
Buffers and ServerEmbeddingBag's rows go to and from the module's device
the same way. A parameter or buffer on a device that holds no data
("meta"), or a parameter not of float32, is refused with ValueError naming it.
"""

import itertools
import time

import torch

from . import job_consistency

__all__ = ["ServerEmbeddingBag", "DistributedModule"]


class ServerEmbeddingBag(torch.nn.Module):
    """An EmbeddingBag backed by the server table `name` (rows of `dim`)."""

    def __init__(self, name, dim, mode="mean", init=None, optimizer=None, admit_after=0, consistency=None,
                 expire_after_steps=0):
        super().__init__()
        if mode not in ("sum", "mean"):
            raise ValueError(f"ServerEmbeddingBag {name!r}: mode {mode!r}; use 'sum' or 'mean'")
        self.name, self.dim, self.mode = name, int(dim), mode
        self.spec = {"name": name, "dim": self.dim, "init": init or {"kind": "zeros"}, "admit_after": admit_after,
                     "expire_after_steps": expire_after_steps}  # rows untouched this many updates are dropped
        if optimizer is not None:
            self.spec["optimizer"] = optimizer
        if consistency is not None:  # its own mode ("async" under a sync model: PERSIA's hybrid)
            self.spec["consistency"] = consistency
        self._dist = None

    def _attached(self):
        if self._dist is None:
            raise RuntimeError(f"ServerEmbeddingBag {self.name!r}: not attached to a DistributedModule")
        return self._dist

    def load(self, ids, rows):
        """Sets the rows of `ids` (distinct; int64 or uint64) to `rows`
        (len(ids) x dim float32): pretrained embeddings, a model file's
        table. Call it on one worker (rank 0) after the DistributedModule
        exists and before training; client.load_rows does the work."""
        dist = self._attached()
        ids = torch.as_tensor(ids).cpu().contiguous()
        rows = torch.as_tensor(rows, dtype=torch.float32).cpu().contiguous()
        if rows.shape != (len(ids), self.dim):
            raise ValueError(f"ServerEmbeddingBag {self.name!r}: rows of shape {tuple(rows.shape)} for "
                             f"{len(ids)} ids of dim {self.dim}")
        dist.client.load_rows(self.name, ids.numpy(), rows.numpy())

    def prefetch(self, ids):
        """Asks now for the rows of the next step's `ids`: they come back with
        this step's push of the table's gradients (one round trip per step
        instead of two), and the next step's forward on the same ids uses
        them without waiting for a pull. Call it during a step, before
        backward. Sync: they are the rows after this step, as a pull at the
        next step would bring."""
        self._attached()._prefetch(self.name, torch.unique(torch.as_tensor(ids, dtype=torch.int64).cpu()), self.dim)

    def forward(self, ids, offsets):
        """The bags of `ids` (split at `offsets`), on the device `ids` are on:
        the rows come from the servers to it, their gradients go back."""
        dist = self._attached()
        ids = torch.as_tensor(ids, dtype=torch.int64)
        device = ids.device
        unique, inverse = torch.unique(ids.cpu(), return_inverse=True)
        rows = dist._pull_rows(self.name, unique, self.dim).to(device, non_blocking=True)
        rows.requires_grad_(True)
        rows.register_hook(lambda grad: dist._push_rows(self.name, unique, grad.cpu()))
        return torch.nn.functional.embedding_bag(inverse.to(device), rows,
                                                 torch.as_tensor(offsets, dtype=torch.int64, device=device),
                                                 mode=self.mode)


def _host_buffer(numel, pinned):
    """float32 host memory for a client's request: pinned where a device copy
    can then run asynchronously (CUDA)."""
    return torch.empty(numel, dtype=torch.float32, pin_memory=pinned)


def _check_stageable(name, tensor, parameter):
    """A parameter must hold float32 values; a buffer any values (it travels
    as float32 copies)."""
    if tensor.device.type == "meta":
        raise ValueError(f"DistributedModule: {name!r} is on the 'meta' device, which holds no values to train "
                         "(materialize the module, e.g. module.to_empty(device=...), first)")
    if parameter and tensor.dtype != torch.float32:
        raise ValueError(f"DistributedModule: {name!r} is {tensor.dtype}; the servers hold float32 "
                         "(module.float() first)")


class _Group:
    """The parameters one submodule owns: pushed together once backward has
    produced all their gradients, their next values pulled by the same
    request.

    Staged (parameters not on the CPU, or staging=True): the client reads
    and writes host buffers. A pull lands in shadows[step % 2] and is copied
    to the parameters when its step begins; a gradient is copied into
    host_grads[step % 2] as backward produces it and pushed once the copies
    are done. Two of each: the request of step t may still hold its buffers
    while step t + 1 fills the others (pipelined, the pull for step t + 2)."""

    def __init__(self, names, params, staged):
        self.names = names
        self.params = [params[n] for n in names]
        self.staged = staged
        self.pinned = staged and any(p.device.type == "cuda" for p in self.params)
        self.grads = {}
        self.exchanged = -1  # the last step whose gradients were pushed
        self.pending = {}  # pull clock -> (ticket, shadow buffers or None)
        self.shadows = [None, None]  # pipelined or staged: the pull for a step lands in shadows[step % 2]
        self.host_grads = [None, None]  # staged: step t's gradients in host_grads[t % 2]
        self.copied = [None, None]  # staged, CUDA: the event after the copies out of shadows[i]

    def shadow(self, step):
        i = step % 2
        if self.shadows[i] is None:
            self.shadows[i] = [_host_buffer(p.numel(), self.pinned) for p in self.params]
        elif self.copied[i] is not None:
            self.copied[i].synchronize()  # the device copies out of it are done before a pull overwrites it
            self.copied[i] = None
        return self.shadows[i]

    def land(self, step, shadow):
        """Puts the pulled values of `step` (in `shadow`) into the parameters."""
        with torch.no_grad():
            for p, s in zip(self.params, shadow):
                p.data.view(-1).copy_(s, non_blocking=self.pinned)
        if self.pinned:
            self.copied[step % 2] = torch.cuda.Event()
            self.copied[step % 2].record()

    def host_grad(self, step, name, grad):
        """Staged: `grad` copied into this step's host buffer of `name`."""
        i = step % 2
        if self.host_grads[i] is None:
            self.host_grads[i] = {n: _host_buffer(p.numel(), self.pinned) for n, p in zip(self.names, self.params)}
        out = self.host_grads[i][name]
        out.copy_(grad.detach().reshape(-1), non_blocking=self.pinned)
        return out


class DistributedModule:
    """Trains `module`'s parameters (and `tables`) on the servers.

    With pipeline=True (async and ssp:K only, as ps_worker --pipeline), step
    t pushes its gradients and asks for the parameters of step t + 2, so
    step t + 1 computes while the servers apply step t.

    consistency ("sync", "async" or "ssp:K"; None: the job's, which the
    launchers hand over as PS_CONSISTENCY, else "sync") is the model's mode;
    a mode other than the one the job was started with is refused by the
    scheduler, naming both.

    The module counts the steps itself (`step`): it starts at `start_step`
    (a resumed worker's client.resume_step()) and end_step() advances it.

    compression ("fp16", "bf16", "topk:0.01", "randomk:R", "onebit", each
    optionally ",pull=none|fp16|bf16"; None: float32) is how gradients and
    parameters travel, for every tensor of 64 KiB or more (the model spec's
    "compression"; docs/compression.md says what each does).

    staging (None: the parameters not on the CPU; True: every parameter, as
    a module on a GPU runs, also on the CPU) stages parameters and gradients
    through host buffers (see the module's comment)."""

    def __init__(self, client, module, tables=(), optimizer=None, consistency=None, pipeline=False,
                 placement=None, start_step=0, compression=None, staging=None):
        consistency = job_consistency(consistency)
        if pipeline and consistency == "sync":
            raise ValueError("DistributedModule: pipeline=True needs consistency 'async' or 'ssp:K' "
                             "(a pipelined sync step would wait for itself)")
        self.client, self.module, self.tables, self.pipeline = client, module, list(tables), pipeline
        # Parameters with requires_grad=False stay the worker's own.
        self.params = {n: p for n, p in module.named_parameters() if p.requires_grad}
        for n, t in self.params.items():
            _check_stageable(n, t, parameter=True)
        for n, t in module.named_buffers():
            _check_stageable(n, t, parameter=False)
        # Buffers travel as float32 (an integer count such as BatchNorm's
        # num_batches_tracked is exact below 2^24) through these copies.
        self.buffers = {n: b for n, b in module.named_buffers() if b.numel() > 0}
        self._staged = {n: torch.empty(b.numel(), dtype=torch.float32) for n, b in self.buffers.items()}
        zeros = {"kind": "zeros"}  # every tensor then takes rank 0's values (register_model)
        spec = {"tensors": [{"name": n, "shape": list(p.shape) or [1], "init": zeros} for n, p in self.params.items()]
                + [{"name": n, "shape": list(b.shape) or [1], "init": zeros, "buffer": True}
                   for n, b in self.buffers.items()],
                "tables": [t.spec for t in self.tables],
                "optimizer": optimizer or {"kind": "sgd", "lr": 0.01}, "consistency": consistency}
        if placement is not None:  # {"rule": "auto"|"layer", "slice_bytes": N, "explicit": {name: server}}
            spec["placement"] = placement
        if compression is not None:  # "bf16", "topk:0.01", ... (tensors under 64 KiB go as float32)
            spec["compression"] = compression
        values = {n: p.detach().to("cpu").contiguous().view(-1) for n, p in self.params.items()}
        client.register_model(spec, values=dict(values, **self._stage_buffers()))
        for t in self.tables:
            t._dist = self
        self._buffer_ticket, self._barriers = None, itertools.count()
        if self.buffers and client.rank != 0:  # rank 0's, taken at the first begin_step
            self._buffer_ticket = client.pull(self._staged, 0)
        self.step, self._row_pushes, self._pushed_tables = start_step, [], set()
        # Rows asked for ahead (ServerEmbeddingBag.prefetch): table -> (ids,
        # rows) for the next step; once sent, table -> (step, ids, rows, ticket).
        self._prefetch_asked, self._prefetched = {}, {}
        self.wait_s = 0.0  # time spent blocked on the servers (pulls a layer needed, pushes at end_step)
        self._groups, self._accumulators = [], []
        for sub in module.modules():
            own = [n for n, p in self.params.items() if any(p is q for q in sub.parameters(recurse=False))
                   and not any(n in g.names for g in self._groups)]
            if own:
                staged = staging is True or any(self.params[n].device.type != "cpu" for n in own)
                group = _Group(own, self.params, staged)
                self._groups.append(group)
                sub.register_forward_pre_hook(self._wait_hook(group))
                for n in own:
                    # A hook on the parameter's AccumulateGrad node runs once
                    # p.grad holds the gradient (taken over from backward, not
                    # copied); the node must be kept alive for its hook to stay.
                    acc = self.params[n].expand_as(self.params[n]).grad_fn.next_functions[0][0]
                    acc.register_hook(self._grad_hook(group, n))
                    self._accumulators.append(acc)

    # -- a step ---------------------------------------------------------------

    def begin_step(self, step=None):
        """Starts the module's next step (`step`, when given, must be it:
        ValueError otherwise): asks for the parameters of that step that no
        earlier step asked for (the first step's, all of them); forward waits
        for them layer by layer."""
        if step is not None and step != self.step:
            raise ValueError(f"begin_step({step}): this module is at step {self.step} "
                             "(end_step() advances it; start_step= sets where it begins)")
        step = self.step
        self._take_buffers()
        for g in self._groups:
            if step not in g.pending:
                self._wait(g, step)  # an older pull into the same buffers
                shadow = g.shadow(step) if g.staged else None
                out = shadow if shadow is not None else [p.data.view(-1) for p in g.params]
                g.pending[step] = (self.client.pull(dict(zip(g.names, out)), step), shadow)

    def end_step(self):
        """Ends the step: pushes what backward did not (a zero gradient for
        each parameter it gave none, an empty push for each table it gave no
        rows: a sync step completes when every worker pushed every slice) and
        waits for the tables' pushes. The parameters of the next step are on
        their way; forward waits for them."""
        for g in self._groups:
            if g.exchanged != self.step:
                for n, p in zip(g.names, g.params):
                    g.grads.setdefault(n, torch.zeros(p.numel()))
                self._exchange(g)
        for t in self.tables:
            if t.name not in self._pushed_tables:
                self._push_rows(t.name, torch.empty(0, dtype=torch.int64), torch.empty(0, t.dim))
        t0 = time.monotonic()
        for ticket in self._row_pushes:
            ticket.wait()
        for table in [t for t, (step, *_) in self._prefetched.items() if step <= self.step]:
            self._prefetched.pop(table)[3].wait()  # prefetched rows this step's forward did not use
        self.wait_s += time.monotonic() - t0
        self._row_pushes, self._pushed_tables = [], set()
        for p in self.params.values():
            p.grad = None
        self._send_buffers()
        self.step += 1

    # -- buffers and the trained module ------------------------------------------

    def _stage_buffers(self):
        """The module's buffers, copied into their float32 staging tensors."""
        for n, b in self.buffers.items():
            self._staged[n].copy_(b.detach().reshape(-1))
        return self._staged

    def _send_buffers(self):
        """Rank 0: its buffers to the servers (the previous send done first);
        the others: ask for rank 0's, put in place by _take_buffers."""
        if not self.buffers:
            return
        if self._buffer_ticket is not None:
            self._buffer_ticket.wait()
        if self.client.rank == 0:
            self._buffer_ticket = self.client.assign(self._stage_buffers())
        else:
            self._buffer_ticket = self.client.pull(self._staged, 0)

    def _take_buffers(self):
        """Waits for the buffers asked for at end_step and puts them in place (not rank 0)."""
        if self._buffer_ticket is None or self.client.rank == 0:
            return
        self._buffer_ticket.wait()
        self._buffer_ticket = None
        self._unstage_buffers()

    def _unstage_buffers(self):
        """The staging tensors' values into the module's buffers."""
        with torch.no_grad():
            for n, b in self.buffers.items():
                b.copy_(self._staged[n].view(b.shape))

    def sync_buffers(self):
        """Every worker calls it: the servers' buffers become rank 0's current
        ones, and every worker's module takes them."""
        if not self.buffers:
            return
        if self._buffer_ticket is not None:
            self._buffer_ticket.wait()
            self._buffer_ticket = None
        if self.client.rank == 0:
            self.client.assign(self._stage_buffers()).wait()
        self.client.barrier(f"ps.sync_buffers.{next(self._barriers)}")
        self.client.pull(self._staged, 0).wait()
        self._unstage_buffers()

    def state_dict(self):
        """The module's state_dict with the servers' parameters of the current
        step and their buffers (with buffers, every worker calls it: see
        sync_buffers). What torch.save writes and load_state_dict takes back
        into the same module."""
        self.wait_params()
        self.sync_buffers()
        return self.module.state_dict()

    def wait_params(self):
        """Waits until every parameter of the current step is in the module,
        e.g. before an evaluation (forward otherwise waits layer by layer).
        Pipelined, the current step's parameters are those after the step
        before the previous one, as that step's forward would see them."""
        for g in self._groups:
            self._wait(g, self.step)

    # -- hooks -----------------------------------------------------------------

    def _wait(self, g, step):
        """Waits for the pulls of `g` up to `step`; the one for `step` is put in place."""
        t0 = time.monotonic()
        for clock in sorted(c for c in g.pending if c <= step):
            ticket, shadow = g.pending.pop(clock)
            ticket.wait()
            if shadow is not None and clock == step:
                g.land(step, shadow)
        self.wait_s += time.monotonic() - t0

    def _wait_hook(self, g):
        def hook(_module, _inputs):
            self._wait(g, self.step)
        return hook

    def _grad_hook(self, g, name):
        p = self.params[name]

        def hook(_grad_inputs, _grad_outputs):
            # p.grad is pushed as it is: it stays the client's until the push
            # is done (the next forward of its layer waits for that). Staged,
            # its copy in host memory is pushed instead.
            if g.staged:
                g.grads[name] = g.host_grad(self.step, name, p.grad)
            else:
                g.grads[name] = p.grad.detach().contiguous().view(-1)
            if len(g.grads) == len(g.names):
                self._exchange(g)
        return hook

    def _exchange(self, g):
        """Pushes `g`'s gradients of this step; the same request pulls its
        parameters for the next step (pipelined: the one after) into the
        module (pipelined: into a shadow copy put in place when that step
        starts). Backward needs no parameter once its gradient is out."""
        step = self.step
        grads = [g.grads[n] for n in g.names]
        g.grads, g.exchanged = {}, step
        pull_step = step + (2 if self.pipeline else 1)
        self._wait(g, step)  # every earlier request into the same buffers is done
        if g.pinned:
            torch.cuda.current_stream().synchronize()  # the gradients' copies to the host are done
        shadow = g.shadow(pull_step) if self.pipeline or g.staged else None
        out = shadow if shadow is not None else [p.data.view(-1) for p in g.params]
        ticket = self.client.push_pull(dict(zip(g.names, grads)), dict(zip(g.names, out)), step, pull_step)
        g.pending[pull_step] = (ticket, shadow)

    def _prefetch(self, table, ids, dim):
        self._prefetch_asked[table] = (ids, torch.empty(len(ids), dim))

    def _pull_rows(self, table, ids, dim):
        """The rows of distinct `ids` at this step: prefetched, or pulled now."""
        t0 = time.monotonic()
        step, fetched, rows, ticket = self._prefetched.pop(table, (None, None, None, None))
        if ticket is not None:
            ticket.wait()  # the push it rode on, and the rows
        if step != self.step or not torch.equal(fetched, ids):
            rows = torch.empty(len(ids), dim)
            self.client.pull_rows([(table, ids.numpy(), rows)], self.step).wait()
        self.wait_s += time.monotonic() - t0
        return rows

    def _push_rows(self, table, ids, grad):
        """Pushes a table's row gradients of this step, with its prefetch for the next step riding on it."""
        g = grad.detach().contiguous()
        ahead = self._prefetch_asked.pop(table, None)
        if ahead is None:
            self._row_pushes.append(self.client.push_rows([(table, ids.numpy(), g)], self.step))
        else:
            # Waited for by the next step's forward (end_step would wait for
            # the next step's rows: in sync, for every worker's push).
            ticket = self.client.exchange(push_rows=[(table, ids.numpy(), g)], step=self.step,
                                          pull_rows=[(table, ahead[0].numpy(), ahead[1])], pull_step=self.step + 1)
            self._prefetched[table] = (self.step + 1, ahead[0], ahead[1], ticket)
        self._pushed_tables.add(table)
        return None
