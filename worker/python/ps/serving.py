"""Read a trained model from serving replicas (ps_serve).

    import ps.serving
    replicas = ps.serving.connect("127.0.0.1:7000")       # or a list of them
    rows = replicas.lookup("emb", [3, 17, 42])            # float32 (3, dim)
    rows, found = replicas.lookup("emb", ids, return_mask=True)
    w = replicas.dense("fc1.weight")                      # the tensor's shape
    replicas.version()   # {"step": ..., "synced_at": unix seconds, "exact": ..., ...}

Ids a table has never seen come back as the table's initial row (zeros for
a replica serving an exported file, which holds no initializers); the mask
says which ids the table holds. Behind several replicas the requests go to
each in turn, and one that does not answer within `timeout` seconds is
skipped for a while: an error comes only when none answers. Errors are
ps.Error with .code ("NOT_FOUND" for an unknown table or tensor,
"INVALID_ARGUMENT" for too many ids, "UNAVAILABLE" when no replica answers).
"""

import numpy as np

from . import _ps

__all__ = ["Replicas", "connect"]


class Replicas:
    """A client of one or more serving replicas of the same model."""

    def __init__(self, endpoints, timeout=2.0):
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        self._client = _ps.ServingClient(list(endpoints), float(timeout))
        self.last_version = None

    def lookup(self, table, ids, return_mask=False):
        """Rows of `table` for `ids`: float32 numpy (len(ids), dim)."""
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"ids: integers, not {ids.dtype}")
        if ids.dtype.kind == "i" and ids.size and ids.min() < 0:
            raise ValueError("ids: a table's ids are >= 0")
        rows, found, self.last_version = self._client.lookup(table, ids.astype(np.uint64, copy=False).ravel())
        return (rows, found) if return_mask else rows

    def dense(self, name):
        """Tensor `name`: float32 numpy of its shape."""
        values, self.last_version = self._client.dense(name)
        return values

    def version(self):
        """What is served: step, synced_at (unix seconds), exact, source,
        replica, tensors (names) and tables ({name: dim})."""
        return self._client.version()


def connect(endpoints, timeout=2.0):
    """Replicas at `endpoints` ("HOST:PORT", or a list of them)."""
    return Replicas(endpoints, timeout)
