"""ps_torch_spam: the SpamAssassin spam/ham classifier of ps_spam_worker,
written in PyTorch and trained through the parameter servers: the token
embeddings in a ps.torch.ServerEmbeddingBag (the servers' table "tokens"),
the dense layers in a torch.nn.Module wrapped in ps.torch.DistributedModule.

    build/bin/ps_torch_spam_worker --scheduler=HOST:PORT [--rank=R] [--consistency=sync|async|ssp:K]
        [--epochs=3] [--batch_size=32] [--dim=32] [--hidden=16] [--row_lr=0.2] [--dense_lr=0.02]
        [--data_dir=DIR] [--train_limit=N] [--test_limit=N] [--threads=1]

Data, as worker/data/spam_corpus.h: DIR/GROUP/NNNNN.MD5.txt of the groups
easy-ham-1, easy-ham-2, hard-ham-1 (ham), spam-1, spam-2 (spam), in that
order and file-name order within a group; each message's MD5 is checked
against its name (one pinned exception) and the corpus must hold the real
6,046 messages (1,896 spam). A message is a test message when its MD5, read
as a 128-bit integer, is 0 mod 5 (the C++ split: the same messages on the
same side); each side is ordered by (md5, group, name). Worker r of W trains
on every W-th training message from position r; every worker trains on
floor(training messages / W) of them per epoch, in an order reshuffled each
epoch (so that every worker runs the same steps, as sync needs).
--train_limit / --test_limit keep the first N of each side (small tests).

Tokens, as worker/data/text_tokens.h: the whole message (headers included) as
bytes, lower-cased (ASCII only); a token is a maximal run of [a-z0-9], of '$'
or of '!'; the first --max_tokens tokens count; a message's ids are, in text
order, each token's id and (after the first) the id of the bigram it ends.

Ids need not equal the C++ ones (no table is shared with ps_spam_worker). A
token's id is its BLAKE2b digest (8 bytes, person "unigram1") read as a
little-endian int64, cached per distinct token. A bigram (a, b)'s id is the
splitmix64 finaliser of id(a) * 0x100000001b3 ^ id(b) (uint64 arithmetic),
computed for a whole message at once in numpy: a function of the bigram's
two strings, as stable as the digests, without hashing some 800,000 bigram
strings one by one in Python. Never Python's hash(), which is salted per
process: every worker and every run gets the same ids. Each message keeps
its ids up to its max_distinct-th distinct one (ps_spam_worker's rule: a
batch's rows then fit in one request), and the evaluation pulls the test
messages' rows in chunks of at most that many ids.

Model: the mean of a message's rows (ServerEmbeddingBag, mode "mean", rows
uniform in +-init_scale), a ReLU layer of --hidden units (0: none), one
logit; the logistic loss. The servers apply Adagrad: to the rows with
--row_lr, to the dense layers with --dense_lr. Rank 0 evaluates on the test
split after each epoch (accuracy, logistic loss, ROC AUC).

Prints ps_spam_worker's JSON-line events (start, progress, eval with
test_auc, done, then rank 0's server_stats with the table's rows), which
scripts/launch_job.py shows and summarises; scripts/train_torch_spam.sh
runs a whole job. Exit 0 when done, 1 on an error of the job (named on
stderr), 2 for bad flags or a missing, short or corrupt corpus.
"""

import argparse
import glob
import hashlib
import os
import re
import sys
import time
from collections import namedtuple

import ps_worker_events as events

events.set_blas_threads(sys.argv[1:])  # before torch loads OpenBLAS

import numpy as np  # noqa: E402  (after OPENBLAS_NUM_THREADS)
import torch  # noqa: E402

import ps  # noqa: E402
import ps.torch as pst  # noqa: E402
from ps_worker_events import binary_metrics, emit, splitmix64  # noqa: E402

PROG = "ps_torch_spam_worker"
SPAM_DIR = "/usr/local/share/datasets/spam-assassin"  # ps::kDefaultSpamDir
GROUPS = ("easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2")
CORPUS_MESSAGES, CORPUS_SPAM = 6046, 1896
# The one message the package ships with content whose MD5 is not its name's.
KNOWN_EXCEPTION = ("hard-ham-1", "00230.244a63cd74c81123ef26129453e32c95", "30e1fcfccb8a25b8550c292233698b67")
STEM = re.compile(r"[0-9]{5}\.[0-9a-f]{32}")
TOKEN = re.compile(rb"[a-z0-9]+|\$+|!+")
TABLE = "tokens"
# A request's limits (ps_spam_worker's): distinct ids per server shard
# (SliceStore::kMaxRowsPerRequest) and bytes per frame (the default
# max_frame_bytes), each pushed row taking its id and dim floats.
MAX_IDS_PER_REQUEST = 1 << 17
MAX_FRAME_BYTES = 64 << 20

Message = namedtuple("Message", "group stem md5 label text")


class CorpusError(Exception):
    """The corpus is missing, short or corrupt (exit 2)."""


class JobError(Exception):
    """The job cannot go on (exit 1), as a ps.Error."""


# -- the corpus -----------------------------------------------------------------


def read_message(path, group):
    """The message in `path` (GROUP/NNNNN.MD5.txt), its MD5 checked."""
    stem = os.path.basename(path)[:-len(".txt")]
    if not STEM.fullmatch(stem):
        raise CorpusError(f"{path}: not NNNNN.<md5>.txt")
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as e:
        raise CorpusError(f"{path}: cannot read: {e.strerror}") from None
    md5 = hashlib.md5(text).hexdigest()
    expected = KNOWN_EXCEPTION[2] if (group, stem) == KNOWN_EXCEPTION[:2] else stem[6:]
    if md5 != expected:
        raise CorpusError(f"{path}: MD5 {md5}, expected {expected}")
    return Message(group, stem, md5, int(group.startswith("spam")), text)


def read_corpus(data_dir):
    """Every message of `data_dir`, groups in GROUPS order, files in name order."""
    hint = "(scripts/fetch_spam_assassin.sh installs the corpus)"
    if not os.path.isdir(data_dir):
        raise CorpusError(f"{data_dir}: no such directory {hint}")
    corpus = []
    for group in GROUPS:
        path = os.path.join(data_dir, group)
        if not os.path.isdir(path):
            raise CorpusError(f"{data_dir}: no group directory {group} {hint}")
        corpus += [read_message(p, group) for p in sorted(glob.glob(os.path.join(glob.escape(path), "*.txt")))]
    spam = sum(m.label for m in corpus)
    if (len(corpus), spam) != (CORPUS_MESSAGES, CORPUS_SPAM):
        raise CorpusError(f"{data_dir}: {len(corpus)} messages ({spam} spam), expected {CORPUS_MESSAGES} "
                          f"({CORPUS_SPAM} spam): a short or altered corpus {hint}")
    return corpus


def is_test(md5):
    """spam_corpus.h's IsTestMessage: the MD5 as a 128-bit integer is 0 mod 5."""
    return int(md5, 16) % 5 == 0


def split(corpus, train_limit=0, test_limit=0):
    """(training, test) messages, each ordered by (md5, group, stem), cut to the limits (0: all)."""
    key = lambda m: (m.md5, m.group, m.stem)  # noqa: E731
    test = sorted((m for m in corpus if is_test(m.md5)), key=key)
    train = sorted((m for m in corpus if not is_test(m.md5)), key=key)
    return train[:train_limit or None], test[:test_limit or None]


# -- token ids ------------------------------------------------------------------

_PRIME = np.uint64(0x100000001b3)


def keep_distinct_prefix(ids, max_distinct):
    """The longest prefix of `ids` with at most `max_distinct` distinct values."""
    _, first = np.unique(ids, return_index=True)
    if len(first) <= max_distinct:
        return ids
    return ids[:np.sort(first)[max_distinct]]


class TokenIds:
    """A message's text -> its ids (int64, text order), with a cache of the
    tokens' digests. Not thread-safe."""

    def __init__(self, max_tokens=20000, bigrams=True, max_distinct=None):
        self.max_tokens, self.bigrams, self.max_distinct = max_tokens, bigrams, max_distinct
        self.digests = {}

    def _digest(self, token):
        d = self.digests[token] = hashlib.blake2b(token, digest_size=8, person=b"unigram1").digest()
        return d

    def __call__(self, text):
        tokens = TOKEN.findall(text.lower())[:self.max_tokens]
        get = self.digests.get
        uni = np.frombuffer(b"".join([get(t) or self._digest(t) for t in tokens]), dtype="<i8")
        if not self.bigrams or len(uni) < 2:
            ids = uni.astype(np.int64)
        else:
            u = uni.view("<u8")
            ids = np.empty(2 * len(uni) - 1, np.int64)
            ids[0], ids[1::2] = uni[0], uni[1:]
            ids[2::2] = splitmix64(u[:-1] * _PRIME ^ u[1:]).view(np.int64)
        return ids if self.max_distinct is None else keep_distinct_prefix(ids, self.max_distinct)


class Examples:
    """Messages as id arrays and labels; batches in EmbeddingBag's form."""

    def __init__(self, messages, token_ids):
        self.ids = [token_ids(m.text) for m in messages]
        self.labels = np.array([m.label for m in messages], np.float32)

    def __len__(self):
        return len(self.ids)

    def batch(self, idx):
        """(ids, offsets, labels) tensors of the messages `idx`."""
        parts = [self.ids[i] for i in idx]
        offsets = np.zeros(len(parts), np.int64)
        np.cumsum([len(p) for p in parts[:-1]], out=offsets[1:])
        return (torch.from_numpy(np.concatenate(parts)), torch.from_numpy(offsets),
                torch.from_numpy(self.labels[np.asarray(idx)]))

    def chunks(self, max_ids):
        """Consecutive ranges of messages whose distinct ids number at most
        `max_ids` (a message alone over it gets a range of its own)."""
        out, begin, n = [], 0, 0
        for i, ids in enumerate(self.ids):
            k = len(np.unique(ids))
            if i > begin and n + k > max_ids:
                out.append((begin, i))
                begin, n = i, 0
            n += k
        if begin < len(self.ids):
            out.append((begin, len(self.ids)))
        return out


# -- the model and its measures ---------------------------------------------------


class SpamNet(torch.nn.Module):
    """Mean of the token rows -> [Linear, ReLU] -> Linear -> one logit per message."""

    def __init__(self, a):
        super().__init__()
        init = {"kind": "uniform", "a": -a.init_scale, "b": a.init_scale, "seed": a.seed}
        self.tokens = pst.ServerEmbeddingBag(TABLE, a.dim, mode="mean", init=init,
                                             optimizer={"kind": "adagrad", "lr": a.row_lr, "epsilon": a.eps},
                                             consistency=a.table_consistency or None)
        layers = [torch.nn.Linear(a.dim, a.hidden), torch.nn.ReLU(), torch.nn.Linear(a.hidden, 1)] if a.hidden \
            else [torch.nn.Linear(a.dim, 1)]
        self.head = torch.nn.Sequential(*layers)

    def forward(self, ids, offsets):
        return self.head(self.tokens(ids, offsets)).squeeze(1)


# -- a worker's run -------------------------------------------------------------------


class Run:
    """One worker's model, data, training loop and events."""

    def __init__(self, a, client, train, test):
        self.a, self.client = a, client
        self.r, self.w = client.rank, client.num_workers
        self.per_epoch = len(train) // self.w  # messages each worker trains on per epoch
        self.steps = -(-self.per_epoch // a.batch_size)
        per_request = min(MAX_IDS_PER_REQUEST, MAX_FRAME_BYTES // (8 + 4 * a.dim))
        self.max_distinct = max(1, per_request // a.batch_size)
        token_ids = TokenIds(a.max_tokens, bool(a.bigrams), self.max_distinct)
        self.shard = Examples(train[self.r::self.w], token_ids)
        self.test = Examples(test, token_ids) if self.r == 0 else None
        self.eval_chunks = self.test.chunks(per_request) if self.test is not None else []
        self.test_messages = len(test)
        self.net = SpamNet(a)
        self.dist = pst.DistributedModule(client, self.net, tables=[self.net.tokens], consistency=a.consistency,
                                          optimizer={"kind": "adagrad", "lr": a.dense_lr, "epsilon": a.eps},
                                          compression=a.compression)
        self.meter = events.Meter(self.r, a.epochs, self.steps * a.epochs, a.progress_every.total_seconds())

    def start_event(self):
        a = self.a
        emit("start", rank=self.r, workers=self.w, servers=self.client.num_servers,
             parameters=sum(p.numel() for p in self.net.parameters()), table=TABLE, dim=a.dim, hidden=a.hidden,
             shard=len(self.shard), messages_per_epoch=self.per_epoch, test_messages=self.test_messages,
             max_ids_per_message=self.max_distinct, steps_per_epoch=self.steps, epochs=a.epochs,
             total_steps=self.steps * a.epochs, start_step=0, consistency=a.consistency, device="cpu",
             placement="auto (ps.torch)")

    def epoch(self, e, step):
        """Trains epoch `e` (from 1) from global step `step`; returns the next step."""
        a = self.a
        order = np.random.default_rng([a.seed, e, self.r]).permutation(len(self.shard))[:self.per_epoch]
        self.meter.start_epoch()
        batch = lambda b: self.shard.batch(order[b * a.batch_size:(b + 1) * a.batch_size])
        upcoming = batch(0)
        for b in range(self.steps):
            ids, offsets, y = upcoming
            self.dist.begin_step(step)
            logits = self.net(ids, offsets)
            if b + 1 < self.steps:
                upcoming = batch(b + 1)
                if a.prefetch:  # the next batch's rows come back with this step's push
                    self.net.tokens.prefetch(upcoming[0])
            step = events.binary_step(self, logits, y, e, step, JobError)
        return step

    def evaluate(self, e, step, final):
        """Rank 0: the parameters of step `step` on the test split; emits the eval event."""
        t = time.monotonic()
        self.dist.wait_params()
        logits = []
        with torch.no_grad():
            for begin, end in self.eval_chunks:
                ids, offsets, _ = self.test.batch(range(begin, end))
                logits.append(self.net(ids, offsets))
        scores = torch.cat(logits).double().numpy() if logits else np.zeros(0)
        metrics = binary_metrics(scores, self.test.labels)
        self.meter.evaluated(t, e, step, final, **metrics)
        return metrics


# -- the program ----------------------------------------------------------------------


# (flag, whether a value is valid, what it must be)
FLAG_RANGES = (("epochs", lambda v: v >= 1, ">= 1"), ("batch_size", lambda v: 1 <= v <= 65536, "in [1, 65536]"),
               ("dim", lambda v: 1 <= v <= 4096, "in [1, 4096]"), ("hidden", lambda v: 0 <= v <= 4096, "in [0, 4096]"),
               ("max_tokens", lambda v: v >= 1, ">= 1"), ("threads", lambda v: v >= 1, ">= 1"),
               ("train_limit", lambda v: v >= 0, ">= 0"), ("test_limit", lambda v: v >= 0, ">= 0"),
               ("progress_every", lambda v: v.total_seconds() > 0, "> 0"), ("seed", lambda v: v >= 0, ">= 0"),
               ("row_lr", *events.POSITIVE), ("dense_lr", *events.POSITIVE), ("eps", *events.POSITIVE), ("init_scale", *events.POSITIVE))


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    events.add_job_flags(p)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=32, help="messages per step and worker")
    p.add_argument("--dim", type=int, default=32, help="embedding width (the table's rows)")
    p.add_argument("--hidden", type=int, default=16, help="width of the ReLU layer; 0: a linear head")
    p.add_argument("--row_lr", type=float, default=0.2, help="Adagrad learning rate of the rows")
    p.add_argument("--dense_lr", type=float, default=0.02, help="Adagrad learning rate of the dense layers")
    p.add_argument("--eps", type=float, default=1e-8, help="Adagrad epsilon")
    p.add_argument("--init_scale", type=float, default=0.1, help="rows start uniform in [-init_scale, init_scale)")
    p.add_argument("--max_tokens", type=int, default=20000, help="tokens read per message")
    p.add_argument("--bigrams", type=int, choices=(0, 1), default=1, help="1: bigrams as well as unigrams")
    p.add_argument("--data_dir", default=SPAM_DIR)
    p.add_argument("--prefetch", type=events.flag_bool, default=True,
                   help="ask for the next batch's rows with this step's push (ServerEmbeddingBag.prefetch)")
    p.add_argument("--table_consistency", default="", metavar="MODE",
                   help="the table's own mode (e.g. async under a sync model: PERSIA's hybrid); default: --consistency")
    p.add_argument("--save", default="", metavar="PATH",
                   help="rank 0 writes the module's state_dict here at the end (the table's rows are in the "
                        "servers' export, model.npz)")
    p.add_argument("--train_limit", type=int, default=0, help="the first N training messages only (0: all)")
    p.add_argument("--test_limit", type=int, default=0, help="the first N test messages only (0: all)")
    p.add_argument("--device", default="cpu", help="cpu only")
    p.add_argument("--placement", default="auto", help="auto only")
    a = p.parse_args(argv)
    if not a.scheduler:
        p.error("--scheduler=HOST:PORT is required")
    if not re.fullmatch(r"sync|async|ssp:[0-9]+", a.consistency):
        p.error(f"--consistency must be sync, async or ssp:K, got '{a.consistency}'")
    if a.device != "cpu" or a.placement != "auto":
        p.error("--device=cpu and --placement=auto only")
    events.check_flag_ranges(p, a, FLAG_RANGES)
    return a


def join(a, train):
    """Connects and checks that this is a fresh job with work for every worker."""
    client = ps.connect(a.scheduler, **events.client_options(a))
    if len(train) < client.num_workers:
        raise JobError(f"{len(train)} training messages, fewer than the job's {client.num_workers} workers")
    return client


def train(a, client, train_set, test_set):
    """Trains, evaluates on rank 0, and ends the run (done, server_stats)."""
    run = Run(a, client, train_set, test_set)
    if client.resume_step() != 0:
        raise JobError(f"worker {run.r} would resume a running job: {PROG} cannot rejoin one "
                       f"(its data order and evaluation are not restored)")
    run.start_event()
    step, final = events.train_epochs(run, a.epochs)
    if a.save:
        state = run.dist.state_dict()  # every worker: the buffers are made the same everywhere
        if run.r == 0:
            torch.save(state, a.save)
    client.barrier("torch-spam-done")  # every worker's last push is in
    run.meter.done(step, run.dist.wait_s, **final)
    if run.r == 0:
        events.emit_server_stats(client)
    client.finish()


def main(argv):
    a = parse_args(argv)
    try:
        corpus = read_corpus(a.data_dir)  # before connecting: a missing corpus fails before the job forms
    except CorpusError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train_set, test_set = split(corpus, a.train_limit, a.test_limit)
    train(a, join(a, train_set), train_set, test_set)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (ps.Error, JobError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        sys.exit(1)
