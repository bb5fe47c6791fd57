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
optimizer step) and the tables' rows. Before a submodule's forward runs, it
waits for that submodule's parameters only; during backward, a hook on each
parameter pushes its gradient as soon as it is produced (last layer first),
while backward goes on. In sync mode the servers average the workers'
gradients; ssp:K and async as the servers define them.

ServerEmbeddingBag is torch.nn.EmbeddingBag (modes "sum" and "mean", 1-D ids
with offsets) whose rows live in a server table: forward pulls the rows of
the batch's distinct ids, backward pushes their gradients.
"""

import time

import torch

__all__ = ["ServerEmbeddingBag", "DistributedModule"]


class ServerEmbeddingBag(torch.nn.Module):
    """An EmbeddingBag backed by the server table `name` (rows of `dim`)."""

    def __init__(self, name, dim, mode="mean", init=None, optimizer=None, admit_after=0):
        super().__init__()
        if mode not in ("sum", "mean"):
            raise ValueError(f"ServerEmbeddingBag {name!r}: mode {mode!r}; use 'sum' or 'mean'")
        self.name, self.dim, self.mode = name, int(dim), mode
        self.spec = {"name": name, "dim": self.dim, "init": init or {"kind": "zeros"}, "admit_after": admit_after}
        if optimizer is not None:
            self.spec["optimizer"] = optimizer
        self._dist = None

    def forward(self, ids, offsets):
        if self._dist is None:
            raise RuntimeError(f"ServerEmbeddingBag {self.name!r}: not attached to a DistributedModule")
        ids = torch.as_tensor(ids, dtype=torch.int64)
        unique, inverse = torch.unique(ids, return_inverse=True)
        rows = torch.empty(len(unique), self.dim)
        self._dist._pull_rows(self.name, unique, rows)
        rows.requires_grad_(True)
        rows.register_hook(lambda grad: self._dist._push_rows(self.name, unique, grad))
        return torch.nn.functional.embedding_bag(inverse, rows, torch.as_tensor(offsets, dtype=torch.int64),
                                                 mode=self.mode)


def _init_like(name, p):
    """The servers' initializer for parameter `p`: uniform within the largest
    magnitude of the module's own initial values (for PyTorch's default layer
    initialisations, their bound), seeded by the name; zeros for zeros."""
    bound = float(p.detach().abs().max()) if p.numel() else 0.0
    if bound == 0.0:
        return {"kind": "zeros"}
    return {"kind": "uniform", "a": -bound, "b": bound, "seed": sum(name.encode()) + 1}


class DistributedModule:
    """Trains `module`'s parameters (and `tables`) on the servers."""

    def __init__(self, client, module, tables=(), optimizer=None, consistency="sync"):
        self.client, self.module, self.tables = client, module, list(tables)
        self.params = dict(module.named_parameters())
        spec = {"tensors": [{"name": n, "shape": list(p.shape) or [1], "init": _init_like(n, p)}
                            for n, p in self.params.items()],
                "tables": [t.spec for t in self.tables],
                "optimizer": optimizer or {"kind": "sgd", "lr": 0.01}, "consistency": consistency}
        client.register_model(spec)
        for t in self.tables:
            t._dist = self
        self.step, self._pulls, self._pushes, self._row_grads = 0, {}, [], {}
        self.wait_s = 0.0  # time spent blocked on the servers (pulls a layer needed, pushes at end_step)
        self._pushed_tables = set()
        for name, p in self.params.items():
            p.register_hook(self._grad_hook(name))
        for sub in module.modules():
            own = [n for n, p in self.params.items() if any(p is q for q in sub.parameters(recurse=False))]
            if own:
                sub.register_forward_pre_hook(self._wait_hook(own))

    # -- a step ---------------------------------------------------------------

    def begin_step(self, step):
        """Starts step `step`: asks for every parameter of that step (waited
        for layer by layer in forward)."""
        self.step = step
        if not self._pulls:
            for name, p in self.params.items():
                self._pulls[name] = self.client.pull({name: p.data.view(-1)}, step)

    def end_step(self):
        """Waits for this step's pushes (every table is pushed, empty when it
        had no rows, as sync mode needs), then asks for step + 1."""
        for t in self.tables:
            if t.name not in self._pushed_tables:
                self._push_rows(t.name, torch.empty(0, dtype=torch.int64), torch.empty(0, t.dim))
        t0 = time.monotonic()
        for ticket in self._pushes:
            ticket.wait()
        self.wait_s += time.monotonic() - t0
        self.wait_params()  # parameters no forward used this step
        self._pushes, self._pushed_tables = [], set()
        for p in self.params.values():
            p.grad = None
        self.step += 1
        for name, p in self.params.items():
            self._pulls[name] = self.client.pull({name: p.data.view(-1)}, self.step)

    def wait_params(self, names=None):
        """Waits until the parameters (all, or `names`) of the current step
        are in the module, e.g. before an evaluation."""
        t0 = time.monotonic()
        for n in list(self._pulls) if names is None else names:
            ticket = self._pulls.pop(n, None)
            if ticket is not None:
                ticket.wait()
        self.wait_s += time.monotonic() - t0

    # -- hooks -----------------------------------------------------------------

    def _wait_hook(self, names):
        def hook(_module, _inputs):
            self.wait_params(names)
        return hook

    def _grad_hook(self, name):
        def hook(grad):
            g = grad.detach().contiguous().view(-1).clone()  # backward may reuse its buffer
            self._pushes.append(self.client.push({name: g}, self.step))
            return grad
        return hook

    def _pull_rows(self, table, ids, rows):
        self.client.pull_rows([(table, ids.numpy(), rows)], self.step).wait()

    def _push_rows(self, table, ids, grad):
        g = grad.detach().contiguous().clone()
        self._pushes.append(self.client.push_rows([(table, ids.numpy(), g)], self.step))
        self._pushed_tables.add(table)
        return None
