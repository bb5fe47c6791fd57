#!/usr/bin/python3
"""Runs one training job on this machine and reports on it.

    launch_job.py --out DIR [--bin-dir DIR] [--workers N] [--servers S]
                  [--consistency sync|async|ssp:K] [--epochs E]
                  [--device cpu|cuda] [--placement auto|layer|FILE]
                  [--stages K [--micro-batches M]] [--worker-binary NAME] [--title TEXT]
                  [--network loopback|emulated [--rate R] [--delay-ms D]] [--secure]
                  [--scheduler-flag=F]... [--server-flag=F]... [-- WORKER_FLAGS...]

The workers are ps_worker (Fashion-MNIST, the default) or --worker-binary,
any worker that takes ps_worker's job flags and prints its JSON-line events
(ps_spam_worker: the SpamAssassin text classifier). Starts one ps_scheduler,
S ps_server and W worker processes on 127.0.0.1, each in its own process
group, with its log (stderr) in DIR/<name>.log (worker-I is started with
--rank=I: its name is its rank everywhere; with --stages K it is stage I % K
of group I / K), and shows the workers' progress: one live line per worker on
a terminal, one plain line per progress event otherwise. At the end it writes

    DIR/summary.json   final test accuracy, wall time, throughput, the setup; and
                       test_auc, table_rows when the workers and servers report them
    DIR/metrics.csv    wall_s,epoch,step,train_loss,test_accuracy (rank 0's evaluations),
                       then the worker's EXTRA_METRICS (the spam workers: test_auc)
    DIR/events.jsonl   every JSON line the workers printed
    DIR/accuracy.png   test accuracy against wall time (gnuplot)

and DIR/pids.txt ("name pid" lines) as soon as each process is started.

With --network emulated every process runs in its own network namespace on a
bridge, each link shaped to --rate (scripts/netns.py); the namespaces are
removed when the job ends, however it ends. Those addresses are not loopback,
so without --secure the processes run with --insecure there (the bridge is
private to this machine).

With --secure every process gets a throwaway CurveZMQ key pair made by
ps_keygen in DIR/keys (replaced on each run) and the flags to use it: every
socket is authenticated and encrypted, and only the job's keys are admitted.

If a process fails (non-zero exit, a worker that exits without its "done"
event, a scheduler or server that ends before every worker is done) every
other process is stopped (SIGTERM to its process group, SIGKILL 3 s later),
the failed process is named with its exit code or signal and the end of its
log, and the exit code is 1. SIGINT/SIGTERM/SIGHUP stop the job the same way
and give 130. No process of the job outlives this program.

Standard library only; takes no settings from the environment. The parts
live in launch/: options (the command line), supervise (the processes),
live (the terminal), report (events, metrics.csv, summary.json, the plot).
"""
import os
import signal
import sys

from launch.common import Interrupted, JobFailed
from launch.options import parse_args
from launch.supervise import Job


def setup_network(job, args):
    """--network emulated: a namespace per process; returns False (said why) when that cannot be done."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import netns
    n = 1 + args.servers + args.workers
    try:
        job.hosts = netns.setup(args.netns_prefix, n, rate=args.rate, delay_ms=args.delay_ms)
    except Exception as e:  # netns names the failing command
        job.say(f"launch_job: cannot set up the emulated network: {e}", err=True)
        return False
    info = getattr(job.hosts, "info", {})
    job.network = {"kind": "emulated", "hosts": n,
                   **{k: info.get(k) for k in ("rate", "rate_bps", "delay_ms", "delay_applied", "delay_error",
                                               "shaping", "rtt_p50_us", "loopback_rtt_p50_us", "bandwidth_mbit") if k in info}}
    job.say(f"launch_job: emulated network: {n} namespaces {args.netns_prefix}0..{n - 1}, links {args.rate}, "
            f"delay {args.delay_ms} ms")
    return True


def teardown_network(job, args):
    if job.hosts is None:
        return
    import netns
    try:
        netns.teardown(args.netns_prefix)
    except Exception as e:
        job.say(f"launch_job: removing the namespaces {args.netns_prefix}*: {e}", err=True)


def main(argv):
    args = parse_args(argv)
    job = Job(args)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, job.on_signal)
    code = 1
    try:
        if args.network == "emulated" and not setup_network(job, args):
            return 1
        code = job.run()
    except JobFailed as e:
        job.report_failures(e.failures)
        code = 1
    except Interrupted:
        job.finish_live()
        name = signal.Signals(job.signal).name
        job.say(f"launch_job: interrupted ({name}); stopping every process", err=True)
        code = 130
    finally:
        killed = job.stop_all()
        if code != 0 and job.procs:
            hard = f", {len(killed)} needed SIGKILL" if killed else ""
            job.say(f"launch_job: every process of the job has exited{hard}; logs in {job.out}", err=True)
        teardown_network(job, args)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
