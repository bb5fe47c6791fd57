"""launch_job's command line: parse_args and the checks of its values."""
import argparse
import os
import re

from launch import preflight
from launch.common import EXTRA_METRICS, TITLES


def positive_int(text):
    if not re.fullmatch(r"[1-9][0-9]*", text):
        raise argparse.ArgumentTypeError(f"must be a positive integer, got '{text}'")
    return int(text)


def consistency(text):
    if not re.fullmatch(r"sync|async|ssp:[0-9]+", text):
        raise argparse.ArgumentTypeError(f"must be sync, async or ssp:K (K >= 0), got '{text}'")
    return text


def placement(text):
    if text in ("auto", "layer"):
        return text
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"must be auto, layer or an existing file, got '{text}'")
    return os.path.abspath(text)


def parse_args(argv):
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    else:
        extra = []
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # scripts/
    p = argparse.ArgumentParser(
        prog="launch_job.py",
        description="Runs a training job (1 scheduler, S servers, W workers) on this machine.",
        epilog="Everything after '--' is passed to every worker.")
    p.add_argument("--out", required=True, help="directory for logs, summary.json, metrics.csv, events.jsonl, accuracy.png")
    p.add_argument("--bin-dir", default=os.path.join(here, "..", "build", "bin"),
                   help="where ps_scheduler, ps_server and the worker are (default: build/bin)")
    p.add_argument("--worker-binary", default="ps_worker", metavar="NAME",
                   help="the workers' program in --bin-dir (default ps_worker: Fashion-MNIST; ps_spam_worker)")
    p.add_argument("--title", help="the job's name in the plot's title (default: from --worker-binary)")
    p.add_argument("--workers", type=positive_int, default=2)
    p.add_argument("--servers", type=positive_int, default=2)
    p.add_argument("--consistency", type=consistency, default="sync")
    p.add_argument("--epochs", type=positive_int, default=10)
    p.add_argument("--device", choices=("cpu", "cuda", "null"), default="cpu",
                   help="null: no arithmetic, the rate the servers alone allow (a ceiling; the model does not learn)")
    p.add_argument("--placement", type=placement, default="auto")
    p.add_argument("--stages", type=positive_int, default=1,
                   help="model parallelism: groups of this many pipeline stages (worker w: stage w %% K of group w / K)")
    p.add_argument("--micro-batches", type=positive_int, default=4, help="with --stages > 1: micro-batches per step")
    p.add_argument("--network", choices=("loopback", "emulated"), default="loopback",
                   help="emulated: one network namespace per process, links shaped with tc (needs root)")
    p.add_argument("--rate", default="1gbit", help="emulated network: link rate (tc syntax, default 1gbit)")
    p.add_argument("--delay-ms", type=float, default=0.2, help="emulated network: one-way link delay (default 0.2)")
    p.add_argument("--netns-prefix", default=f"psj{os.getpid() % 100000}x",
                   help="emulated network: namespace name prefix (default psjPIDx)")
    p.add_argument("--secure", action="store_true",
                   help="CurveZMQ on every socket, with throwaway keys made by ps_keygen in OUT/keys")
    p.add_argument("--scheduler-flag", action="append", default=[], metavar="F",
                   help="extra ps_scheduler flag (repeatable; write --scheduler-flag=--x=1)")
    p.add_argument("--server-flag", action="append", default=[], metavar="F",
                   help="extra ps_server flag (repeatable; write --server-flag=--x=1)")
    p.add_argument("--table-disk-dir", metavar="DIR",
                   help="the servers' table disk tier: server I keeps rows beyond its memory in DIR/server-I")
    args = p.parse_args(argv)
    args.worker_flags = extra
    if args.workers % args.stages:
        p.exit(2, f"launch_job.py: --workers {args.workers} is not a multiple of --stages {args.stages}\n")
    if args.stages > 1:
        args.worker_flags = [f"--stages={args.stages}", f"--micro_batches={args.micro_batches}", *extra]
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        p.exit(2, f"launch_job.py: --out: cannot create {args.out}: {e.strerror}\n")
    args.bin_dir = os.path.abspath(args.bin_dir)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.worker_binary):
        p.exit(2, f"launch_job.py: --worker-binary must be a program name in --bin-dir, got '{args.worker_binary}'\n")
    if args.title is None:
        args.title = TITLES.get(args.worker_binary, args.worker_binary)
    args.extra_metrics = EXTRA_METRICS.get(args.worker_binary, ())
    # Every program the job runs, ps_export (the model at the end) among them.
    preflight.require("launch_job.py", args.bin_dir,
                      ("ps_scheduler", "ps_server", args.worker_binary, "ps_export")
                      + (("ps_keygen",) if args.secure else ()))
    return args
