#!/usr/bin/python3
"""Writes docs/reference.md: every flag of every program and script, as
their own --help prints it (the binaries' flags grouped by the file that
defines them: the client's, security, metrics, shared memory, the binary's
own; a script of subcommands, each subcommand's --help too), so that the
page cannot say other than the code. tests/docs_commands_test.py fails on a
program of the tree that README.md or docs/ runs and this page lacks.

    scripts/gen_reference.py [--bin-dir build/bin] [--out docs/reference.md]
    scripts/gen_reference.py --check     exit 1 (saying how to refresh it) when the page is stale

ctest's docs_reference runs --check. Needs the programs built (cmake --build build).
"""
import argparse
import difflib
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from launch import preflight  # noqa: E402

# (section, command relative to the repository root or BIN/NAME, what it is)
BINARIES = [
    ("ps_scheduler", "the job's scheduler: membership, placement, barriers, failure detection"),
    ("ps_server", "a parameter server: the slices placed on it and their optimizer state"),
    ("ps_worker", "the Fashion-MNIST MLP trainer (C++; cpu, cuda, or null: no arithmetic)"),
    ("ps_spam_worker", "the SpamAssassin text classifier trained through the servers"),
    ("spam_local", "the same classifier trained in one process, without servers"),
    ("ps_exact_sum", "a worker that checks every pulled value exactly (tests, deployments)"),
    ("ps_export", "the trained model out of a job's checkpoints (.npz, .safetensors)"),
    ("ps_serve", "a read-only serving replica of a trained model: table lookups and dense reads"),
    ("ps_keygen", "a CurveZMQ key pair for one node"),
    ("ps_torch_worker", "the PyTorch Fashion-MNIST worker (worker/python/examples/ps_torch_worker.py)"),
    ("ps_torch_spam_worker", "the PyTorch SpamAssassin worker with a server embedding table"),
    ("ps_torch_ctr_worker", "the PyTorch click-through worker (scripts/train_ctr.sh)"),
    ("pushpull_bench", "push+pull goodput and latency against raw ZeroMQ"),
    ("update_bench", "the servers' update rules against memcpy"),
    ("train_bench", "training through the servers against training locally"),
    ("table_bench", "embedding-table rows per second through the servers"),
    ("table_disk_bench", "a table beyond its server's memory, on the disk tier"),
    ("control_plane_bench", "the scheduler at thousands of nodes"),
    ("compress_bench", "what each compressor costs, against memcpy"),
    ("serving_bench", "lookups from a serving replica against the same lookups in process"),
]
SCRIPTS = [
    ("scripts/quickstart.sh", "installs, builds every program, trains the MLP (its arguments go to train_fashion_mnist.sh)"),
    ("scripts/test.sh", "installs, builds every program and test, runs ctest"),
    ("scripts/train_fashion_mnist.sh", "a whole training job on this machine"),
    ("scripts/train_torch.sh", "the PyTorch CNN through the servers"),
    ("scripts/train_spam.sh", "the spam classifier through the servers"),
    ("scripts/train_torch_spam.sh", "the spam classifier in PyTorch through the servers"),
    ("scripts/train_ctr.sh", "the click-through benchmark"),
    ("scripts/ps_run", "your own script as the workers of a job, as torchrun does"),
    ("scripts/local_cluster.sh", "a job of any worker binary on this machine"),
    ("scripts/launch_job.py", "what the training scripts run: one job, supervised"),
    ("scripts/bench_sync_vs_async.sh", "sync, async and ssp compared on real training"),
    ("scripts/bench_vs_ddp.sh", "a PyTorch model through the servers against PyTorch DDP"),
    ("scripts/slurm/train.sbatch", "a job on a Slurm cluster"),
    ("scripts/slurm/make_keys.sh", "CurveZMQ keys for a Slurm job"),
    ("scripts/k8s/make_secrets.sh", "CurveZMQ keys as Kubernetes secrets"),
    ("scripts/k8s/validate_manifests.py", "the Kubernetes manifests checked offline, before kubectl apply"),
    ("scripts/k8s/build_rootfs.sh", "the container image built from Debian's archive alone"),
    ("scripts/netns.py", "an emulated cluster network on one machine (network namespaces, tc)"),
    ("scripts/plot_pushpull.py", "pushpull_bench's JSON lines as a plot"),
    ("scripts/plot_train_bench.py", "train_bench's JSON lines as a plot"),
    ("scripts/plot_timeline.py", "a worker's timeline from train_bench --trace_out"),
    ("benchmarks/pipeline_bench.py", "pipeline stages against one worker"),
    ("benchmarks/metrics_overhead.sh", "what Prometheus metrics cost a job"),
    ("benchmarks/model_io_bench.py", "the user's model in and out"),
    ("benchmarks/disk_iops.py", "the disk's random-read rate (the disk tier's bound)"),
    ("benchmarks/headline.sh", "every headline figure beside its reference, in one run"),
    ("benchmarks/gpu/run.sh", "the GPU figures, on a GPU machine"),
]
# Text that differs from run to run: a default made of the launcher's pid.
VOLATILE = [(re.compile(r"psj[0-9]+x"), "psjPIDx")]


def help_text(cmd):
    """CMD --help; for a program of subcommands (argparse's usage names them
    as {a,b,...}), each subcommand's --help after it."""
    text = one_help(cmd)
    m = re.match(r"usage: \S+ (?:\[-h\] )?\{([\w,-]+)\}", text)
    for sub in m.group(1).split(",") if m else []:
        text += "\n" + one_help(cmd + [sub])
    return text


def one_help(cmd):
    if cmd[0].endswith(".py"):
        cmd = ["/usr/bin/python3", *cmd]
    # argparse wraps to the terminal's width: the same width everywhere.
    env = {**os.environ, "COLUMNS": "100"}
    r = subprocess.run(cmd + ["--help"], cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=120, env=env)
    text = (r.stdout + r.stderr).replace(ROOT + "/", "").replace(ROOT, ".")
    for pattern, fixed in VOLATILE:
        text = pattern.sub(fixed, text)
    if not text.strip():
        raise SystemExit(f"gen_reference: {' '.join(cmd)} --help printed nothing (exit {r.returncode})")
    if "SetProgramUsageMessage() never called" in text:
        # Without ps::InitMain, Abseil names flag files by the absolute path of
        # the build's checkout: the page would differ on every machine.
        raise SystemExit(f"gen_reference: {' '.join(cmd)} does not start with ps::InitMain (no usage message)")
    return text.rstrip() + "\n"


def page(bin_dir):
    out = ["# Reference: every program's and script's flags", "",
           "Generated by `scripts/gen_reference.py` from each program's own `--help` (ctest `docs_reference`",
           "fails when this page is stale). The binaries take `--name=value` flags and list them grouped by",
           "the file that defines them: `worker/client/client_flags.cc` (the client, in every worker),",
           "`common/net/security_flags.cc` (CurveZMQ), `common/base/metrics_flags.cc` (Prometheus),",
           "`common/net/shm_flags.cc` (shared memory), and the program's own. Durations take a unit",
           "(`90s`, `500ms`, `1h30m`). A bad value is refused at start, naming the flag, with exit code 2.", "",
           "## Programs (build/bin)", ""]
    out += [f"- [`{name}`](#{name}): {what}" for name, what in BINARIES]
    out += ["", "## Scripts", ""]
    out += [f"- [`{path}`](#{anchor(path)}): {what}" for path, what in SCRIPTS]
    out.append("")
    for name, what in BINARIES:
        out += [f"### {name}", "", what + ".", "", "```text", help_text([os.path.join(bin_dir, name)]).rstrip(),
                "```", ""]
    for path, what in SCRIPTS:
        out += [f"### {path}", "", what + ".", "", "```text", help_text([os.path.join(ROOT, path)]).rstrip(),
                "```", ""]
    return "\n".join(out)


def anchor(title):
    return re.sub(r"[^a-z0-9_ -]", "", title.lower()).replace(" ", "-")


def main(argv):
    p = argparse.ArgumentParser(prog="gen_reference.py", description="Writes docs/reference.md from every --help.")
    p.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "reference.md"))
    p.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    a = p.parse_args(argv)
    a.bin_dir = os.path.abspath(a.bin_dir)
    preflight.require("gen_reference", a.bin_dir, [name for name, _ in BINARIES])
    text = page(a.bin_dir)
    if a.check:
        try:
            old = open(a.out).read()
        except OSError as e:
            print(f"gen_reference: cannot read {a.out}: {e.strerror}", file=sys.stderr)
            return 1
        if old != text:
            print(f"gen_reference: {a.out} is stale: a flag or a help text changed; refresh it with "
                  f"scripts/gen_reference.py", file=sys.stderr)
            diff = difflib.unified_diff(old.splitlines(), text.splitlines(), a.out, "--help", lineterm="")
            for line in list(diff)[:40]:
                print(line, file=sys.stderr)
            return 1
        print(f"gen_reference: {a.out} matches every --help")
        return 0
    with open(a.out, "w") as f:
        f.write(text)
    print(f"gen_reference: wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
