"""ps: the parameter server's client for Python.

    import ps, numpy as np
    client = ps.connect("127.0.0.1:9000")                   # waits for the cluster
    client.register_model({
        "tensors": [{"name": "w", "shape": [784, 10], "init": {"kind": "normal", "b": 0.01, "seed": 1}}],
        "tables": [{"name": "tokens", "dim": 32, "init": {"kind": "uniform", "a": -0.1, "b": 0.1}}],
        "optimizer": {"kind": "adam", "lr": 1e-3},
        "consistency": "sync",     # or "async", "ssp:2"; left out: PS_CONSISTENCY, else sync
        "compression": "none",  # or "bf16", "topk:0.01", ... (also per tensor and table; docs/compression.md)
    })
    w = np.zeros((784, 10), np.float32)
    client.pull({"w": w}, step=0).wait()                   # lands in w itself
    client.push_pull({"w": grad}, {"w": w}, step=step).wait()
    client.exchange(push_rows=[("tokens", ids, g)], pull_rows=[("tokens", next_ids, rows)],
                    step=step, pull_step=step + 1).wait()
    client.finish()

Every data call (exchange, push, pull, push_pull, push_rows, pull_rows)
returns a Ticket at once; ticket.wait() blocks until it is complete (never
longer than the request's own deadline, request_timeout) and raises its
error; ticket.done(timeout) tells whether it has completed.

Buffers are numpy arrays or CPU torch tensors (float32; ids int64 or
uint64), used in place, never copied: a pull writes into the caller's own
array, a push reads from it. A buffer of the wrong dtype raises TypeError, of
the wrong size or not contiguous ValueError, naming the tensor. Pushed and
pulled buffers stay borrowed (and alive: the client holds a reference) until
the ticket's wait() returns; do not change a pushed buffer before then.

Errors from the servers and the scheduler raise ps.Error, a RuntimeError
with .code (the status code's name, e.g. "DEADLINE_EXCEEDED") and .message.
Calls that wait release the GIL.

Importable with PYTHONPATH=build/python after a build, or installed with
`cmake --install build`.
"""

from . import _ps
from ._ps import Error

__all__ = ["CLIENT_OPTION_DEFAULTS", "Error", "Client", "Ticket", "connect", "job_consistency"]


def job_consistency(consistency=None):
    """The model's consistency: `consistency` when given, else the job's as
    the launchers hand it over (PS_CONSISTENCY: scripts/ps_run, local_cluster,
    the Slurm and Kubernetes launchers), else "sync". The scheduler refuses a
    model whose mode differs from the one its job was started with."""
    if consistency is not None:
        return consistency
    import os
    return os.environ.get("PS_CONSISTENCY") or "sync"


def _buffer(x, what):
    """`x` as an object with the buffer protocol, sharing its memory."""
    if type(x).__module__.startswith("torch"):
        if x.device.type != "cpu":
            raise ValueError(f"{what}: a {x.device.type} tensor; the client reads and writes CPU memory")
        if not x.is_contiguous():
            raise ValueError(f"{what}: the buffer is not contiguous")
        return x.detach().numpy()
    return x


def _error(code, message):
    """A ps.Error as the client raises them: .code and .message."""
    e = Error(f"{code}: {message}")
    e.code, e.message = code, message
    return e


class Ticket:
    """A request in flight; its buffers stay lent until wait() returns."""

    def __init__(self, client, ticket):
        self._client, self._ticket = client, ticket

    def done(self, timeout=0.0):
        """Whether the request has completed, waiting at most `timeout`
        seconds for it; wait() then returns at once."""
        return self._client.ready(self._ticket, float(timeout))

    def wait(self, timeout=None):
        """Waits for the request and raises its error (ps.Error). With a
        `timeout` (seconds) it raises TimeoutError when the request is still
        running then; the ticket stays valid (its buffers still lent)."""
        if timeout is not None and not self.done(timeout):
            raise TimeoutError(f"ticket {self._ticket} still running after {timeout} s")
        self._client.wait(self._ticket)


class Client:
    """A worker's connection to the job (see the module's documentation)."""

    def __init__(self, impl):
        self._c = impl
        self._tensors = self._tables = None  # names -> indices, once register_model() has run

    rank = property(lambda self: self._c.rank)
    num_workers = property(lambda self: self._c.num_workers)
    num_servers = property(lambda self: self._c.num_servers)

    def register_model(self, spec, values=None, rows=None):
        """Registers the model (every worker the same one, each calling this
        once; a spec without "consistency" takes job_consistency()); returns once the servers hold it and, in a new job, hold the
        starting values: rank 0's `values` ({name: array}, any of the
        tensors; the others start from their "init") and `rows` ([(table,
        ids, rows)], pretrained rows), exactly, before any worker's first
        pull. The other workers' values are not used (they need not match);
        every worker waits at a barrier for rank 0's to be in place. A
        worker that resumes (resume_step() > 0: a restarted worker, or a job
        restarted from its checkpoints) finds the trained values there and
        neither sends nor waits."""
        if "consistency" not in spec:
            spec = dict(spec, consistency=job_consistency())
        self._c.register_model(spec)
        self._tensors, self._tables = {}, {}
        for t in spec.get("tensors", []):
            self._tensors[t["name"]] = self._c.tensor_index(t["name"])
        for t in spec.get("tables", []):
            self._tables[t["name"]] = self._c.table_index(t["name"])
        if self.resume_step() > 0:
            return
        if self.rank == 0:
            if values:
                self.assign(values).wait()
            for table, ids, r in rows or []:
                self.load_rows(table, ids, r)
        self.barrier("ps.register_model")

    def assign(self, values=None, rows=None):
        """Sets parameters instead of updating them: tensors {name: array}
        to the arrays, and [(table, ids, rows)] rows of distinct ids, their
        optimizer state reset; not a step (see register_model, which uses
        it). Returns a Ticket. At most 131072 ids per table and server in
        one call: load_rows splits larger tables."""
        return Ticket(self._c, self._c.exchange(self._dense(values), self._rows(rows), 0, {}, [], 0, True))

    def load_rows(self, table, ids, rows, batch=65536):
        """Sets the rows of `table` for distinct `ids` (an int64 or uint64
        array) to `rows` (len(ids) x dim float32), `batch` ids per request,
        and waits (pretrained embeddings, a model file's table)."""
        for start in range(0, len(ids), batch):
            self.assign(rows=[(table, ids[start:start + batch], rows[start:start + batch])]).wait()

    def _index(self, names, key, kind):
        if names is None:
            raise _error("FAILED_PRECONDITION", f"{kind} {key!r}: call register_model() before pushing or pulling")
        if isinstance(key, int):
            return key
        if key not in names:
            raise KeyError(f"no {kind} named {key!r} in the registered model")
        return names[key]

    def _dense(self, buffers):
        return {self._index(self._tensors, k, "tensor"): _buffer(v, f"tensor {k!r}")
                for k, v in (buffers or {}).items()}

    def _rows(self, rows):
        return [(self._index(self._tables, t, "table"), _buffer(ids, f"table {t!r} ids"), _buffer(r, f"table {t!r} rows"))
                for t, ids, r in (rows or [])]

    def exchange(self, push=None, push_rows=None, step=0, pull=None, pull_rows=None, pull_step=None):
        """Pushes dense gradients {name: array} and row gradients [(table, ids,
        rows)] computed at `step`, and pulls parameters {name: array} and rows
        [(table, ids, out)] of `pull_step` (default step + 1), one round trip
        per server. Returns a Ticket."""
        t = self._c.exchange(self._dense(push), self._rows(push_rows), step, self._dense(pull),
                             self._rows(pull_rows), step + 1 if pull_step is None else pull_step)
        return Ticket(self._c, t)

    def push(self, grads, step):
        return self.exchange(push=grads, step=step)

    def pull(self, params, step):
        return self.exchange(pull=params, pull_step=step)

    def push_pull(self, grads, params, step, pull_step=None):
        return self.exchange(push=grads, step=step, pull=params, pull_step=pull_step)

    def push_rows(self, row_grads, step):
        return self.exchange(push_rows=row_grads, step=step)

    def pull_rows(self, rows, step):
        return self.exchange(pull_rows=rows, pull_step=step)

    def barrier(self, name, timeout=120.0):
        self._c.barrier(name, float(timeout))

    def server_stats(self, rank):
        """Server `rank`'s counters (a dict), or None where it died in a job
        with --replicas and backups lead its slices now."""
        return self._c.server_stats(rank)

    def resume_step(self):
        """The step this worker resumes at: 0 in a new job; after a restart,
        the step after the last one the servers hold (see the C++ client's
        ResumeStep)."""
        return self._c.resume_step()

    def finish(self):
        self._c.finish()

    def stats(self):
        """The client's own counters: pushes_resent, requests_held,
        replay_bytes, servers_recovered, requests_resent_off_shm (requests in
        flight on a shared-memory channel that closed, sent again through the
        socket), requests_rerouted (refused by a server a slice had left, sent
        again where it went), requests_fenced (held behind an earlier request
        for their slices that a move sends elsewhere), servers_unreachable
        (servers its requests waited on that answered nothing for the
        heartbeat timeout), requests_resent_after_cut (sent again on a new
        connection to such a server), caller_requests_sent,
        caller_messages_read, shm_servers (servers reached through shared
        memory) and metrics_url (where its Prometheus metrics are served,
        "" without metrics_port)."""
        return self._c.stats()

    @property
    def pending(self):
        """Tickets not waited for yet (their buffers are still held)."""
        return self._c.pending


def parse_duration(text):
    """A duration as the C++ flags write it ("90s", "1.5s", "500ms",
    "100us", "1h30m", "-5us"; "0" alone needs no unit), read by the same
    parser (absl::ParseDuration), as a datetime.timedelta; ValueError
    naming the text otherwise."""
    import datetime
    return datetime.timedelta(microseconds=_ps.parse_duration_us(text))


# {option: default} of every option connect() takes, from the C++ client
# itself (KVClientOptions), so that neither can drift from the other.
CLIENT_OPTION_DEFAULTS = _ps.client_option_defaults()


def connect(scheduler=None, *, rank=None, register_timeout=None, request_timeout=None, max_request_bytes=None,
            heartbeat_interval=None, heartbeat_timeout=None, scheduler_recovery_timeout=None,
            server_recovery_timeout=None, max_replay_bytes=None, shm=None, shm_spin=None, caller_io=None,
            caller_spin=None, compress_threads=None, metrics_port=None, metrics_host=None, metrics_linger=None,
            advertise=None, secret_key_file=None, scheduler_public_key=None, insecure=None):
    """Registers as a worker with the scheduler at `scheduler` ("HOST:PORT")
    and waits for the cluster. With no `scheduler` the job comes from the
    environment, as scripts/ps_run sets it (torch.distributed's env://):
    PS_SCHEDULER, and unless given as arguments, rank from PS_RANK and
    secret_key_file / scheduler_public_key from PS_SECRET_KEY_FILE /
    PS_SCHEDULER_PUBLIC_KEY, and insecure from PS_INSECURE ("1" or "true");
    ValueError when PS_SCHEDULER is not set either.
    Every option is that of the C++ client
    (worker/client/kv_client.h, KVClientOptions) and of the worker binaries'
    flag of the same name; None takes its default (CLIENT_OPTION_DEFAULTS):

    rank: take this worker rank (a restarted worker rejoining; -1: any).
    register_timeout, request_timeout: how long forming the cluster and
        any one request may take. Every duration is a number of seconds or
        a datetime.timedelta (the defaults are timedeltas).
    max_request_bytes: payload per request to one server.
    heartbeat_interval, heartbeat_timeout, scheduler_recovery_timeout,
        server_recovery_timeout: liveness of the scheduler and the servers.
    max_replay_bytes: pushes kept to re-send to a restarted server.
    shm, shm_spin: shared memory with servers on this host (False:
        sockets only), and how long to look at it before sleeping.
    caller_io, caller_spin: over sockets, callers do their own I/O, and
        spin this long before sleeping.
    compress_threads: threads that compress a push, one slice each (0:
        half the cores, at most 4).
    metrics_port, metrics_host, metrics_linger: serve Prometheus metrics
        (port 0: any free one, see Client.stats()).
    advertise: an endpoint other workers reach this one at.
    secret_key_file, scheduler_public_key, insecure: CurveZMQ keys, or
        plaintext off loopback."""
    options = {k: v for k, v in locals().items() if v is not None}
    if scheduler is None:
        import os
        env = {"scheduler": "PS_SCHEDULER", "rank": "PS_RANK", "secret_key_file": "PS_SECRET_KEY_FILE",
               "scheduler_public_key": "PS_SCHEDULER_PUBLIC_KEY", "insecure": "PS_INSECURE"}
        for key, var in env.items():
            if key not in options and os.environ.get(var):
                options[key] = os.environ[var]
        if isinstance(options.get("insecure"), str):
            options["insecure"] = options["insecure"].lower() in ("1", "true", "yes")
        if "scheduler" not in options:
            raise ValueError("ps.connect(): no scheduler address: pass one (\"HOST:PORT\") or set PS_SCHEDULER "
                             "(and PS_RANK), as scripts/ps_run does")
        if isinstance(options.get("rank"), str):
            if not options["rank"].lstrip("-").isdigit():
                raise ValueError(f"ps.connect(): PS_RANK={options['rank']!r} is not an integer")
            options["rank"] = int(options["rank"])
    return Client(_ps.connect(options))
