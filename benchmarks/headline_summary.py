#!/usr/bin/python3
"""The summary of a benchmarks/headline.sh run: reads the step files in DIR
and writes DIR/summary.json, DIR/summary.md (figure, ours, reference measured
in the same run, ratio), DIR/ratios.png and DIR/README.md.

    benchmarks/headline_summary.py DIR [--wall-s SECONDS]

A figure whose step was skipped or failed is listed with that status and why.
Standard library only (Debian's /usr/bin/python3); the plot needs gnuplot.
Exit 0 when written, 1 when a step file does not parse, 2 for bad arguments.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import gnuplot_run  # noqa: E402

# The steps no command here can run, and what the docs say about them.
NOT_RUN = [
    {"figure": "GPU workers (MLP at batch 64 against the ceiling, 51 M parameters against local training on the GPU, "
               "a PyTorch module on cuda)",
     "why": "needs a GPU: benchmarks/gpu/run.sh on a GPU machine"},
    {"figure": "push+pull against ps-lite",
     "why": "ps-lite is not built here; the figure of 2026-11-22 (docs/architecture.md) is not re-measured"},
]


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip().startswith("{")]


def load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def num(v, digits=0):
    return "-" if v is None else f"{v:,.{digits}f}"


def between(values, digits=0, scale=1.0):
    """'min-max' of a list of numbers ('x' when they are all x)."""
    lo, hi = min(values) / scale, max(values) / scale
    return num(lo, digits) if num(lo, digits) == num(hi, digits) else f"{num(lo, digits)}-{num(hi, digits)}"


def plural(n, word):
    return f"{n} {word}{'' if n == 1 else 's'}"


def span(values, digits=3):
    """'median (min-max)' of a list of numbers, or the one number."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


class Figures:
    """The rows of the summary, each tied to its step."""

    def __init__(self, steps):
        self.rows = []
        self.steps = steps

    def add(self, step, figure, ours, reference, ratio, ratio_value=None, file=None, **values):
        self.rows.append({"step": step, "figure": figure, "ours": ours, "reference": reference, "ratio": ratio,
                          "ratio_value": ratio_value, "file": file, "values": values,
                          "status": self.steps.get(step, {}).get("status", "not run")})

    def missing(self, step, figure):
        s = self.steps.get(step)
        why = "not selected (--steps)" if s is None else (s.get("reason") or s["status"])
        status = "not run" if s is None else s["status"]
        self.rows.append({"step": step, "figure": figure, "ours": f"{status}: {why}", "reference": "", "ratio": "",
                          "ratio_value": None, "file": None, "values": {}, "status": status})


def pushpull(d, f):
    ls = lines(os.path.join(d, "pushpull.jsonl"))
    pp = [x for x in ls if x["bench"] == "pushpull"]
    raw = {(x["transport"], x["bytes"]): x for x in ls if x["bench"] == "raw_zmq"}
    if not pp:
        f.missing("pushpull", "push+pull through 2 servers against raw ZeroMQ")
        return
    big = max(x["bytes"] for x in pp)
    small = min(x["bytes"] for x in pp)
    for t in ("tcp", "shm"):
        one = {x["bytes"]: x for x in pp if x["transport"] == t and x["replicas"] == 1}
        if big in one:
            x = one[big]
            f.add("pushpull", f"push+pull of a {size(big)} tensor over {'tcp loopback' if t == 'tcp' else 'shared memory'}, "
                  f"1 worker, 2 servers", f"{x['push_pull_gbps']:.2f} GB/s",
                  f"raw ZeroMQ over tcp, one process pair: {x['raw_zmq_gbps']:.2f} GB/s", f"{x['ratio_vs_raw']:.2f}",
                  x["ratio_vs_raw"], "pushpull.jsonl", ours_gbps=x["push_pull_gbps"], reference_gbps=x["raw_zmq_gbps"])
        if small in one and (t, small) in raw:
            x, r = one[small], raw[(t, small)]
            f.add("pushpull", f"push+pull latency of a {size(small)} tensor over {t}, p50", f"{x['p50_us']:.1f} µs",
                  f"raw ZeroMQ tcp round trip p50: {r['p50_us']:.1f} µs", f"{x['ratio_p50_vs_raw']:.2f}",
                  x["ratio_p50_vs_raw"], "pushpull.jsonl", ours_us=x["p50_us"], reference_us=r["p50_us"])
    for t in ("tcp", "shm"):
        two = [x for x in pp if x["transport"] == t and x["replicas"] == 2 and x["bytes"] == big]
        one = [x for x in pp if x["transport"] == t and x["replicas"] == 1 and x["bytes"] == big]
        if two and one and two[0].get("ratio_vs_1_replica"):
            f.add("pushpull", f"replicas: push+pull of {size(big)} with two copies of every slice (K = 2), {t}",
                  f"{two[0]['push_pull_gbps']:.2f} GB/s", f"one copy (K = 1): {one[0]['push_pull_gbps']:.2f} GB/s",
                  f"{two[0]['ratio_vs_1_replica']:.2f}", two[0]["ratio_vs_1_replica"], "pushpull.jsonl")


def update(d, f):
    ls = [x for x in lines(os.path.join(d, "update_bench.jsonl")) if x["bench"] == "update" and x["threads"] == 1]
    if not ls:
        f.missing("update", "the servers' update rules against memcpy")
        return
    sizes = sorted({x["bytes"] for x in ls})
    b = 64 << 20 if (64 << 20) in sizes else sizes[-1]
    for opt in ("sgd", "adam"):
        x = next((x for x in ls if x["optimizer"] == opt and x["bytes"] == b), None)
        if x:
            f.add("update", f"the servers' {opt.upper() if opt == 'sgd' else 'Adam'} update of a {size(b)} tensor, 1 thread",
                  f"{x['gbps']:.2f} GB/s of parameters", f"memcpy of the same bytes: {x['memcpy_gbps']:.2f} GB/s",
                  f"{x['ratio_vs_memcpy']:.2f}", x["ratio_vs_memcpy"], "update_bench.jsonl")


def train(d, f):
    ls = lines(os.path.join(d, "train_bench.jsonl"))
    ps = [x for x in ls if x.get("mode") == "ps"]
    local = [x for x in ls if x.get("mode") == "local"]
    if not ps or not local:
        f.missing("train", "training the MLP through 1 server against locally")
        return
    runs = f"{len(ps)} run{'s' if len(ps) > 1 else ''}"
    ratios = [x["ratio_vs_local"] for x in ps]
    f.add("train", f"training the MLP through 1 server (train_bench: sync, batch 64, shared memory), {runs}",
          f"{num(statistics.median(x['samples_per_s'] for x in ps))} samples/s (median)",
          f"the same training locally, no server: {between([x['samples_per_s'] for x in local])} samples/s", span(ratios, 2), statistics.median(ratios),
          "train_bench.jsonl")
    ck = [x["ratio_ckpt_on_vs_off"] for x in ps]
    f.add("train", "checkpoints on (the launchers' default) against off, the MLP through 1 server",
          f"{between([x['samples_per_s_ckpt_on'] for x in ps])} samples/s",
          f"checkpoints off: {between([x['samples_per_s'] for x in ps])}",
          span(ck, 2), statistics.median(ck), "train_bench.jsonl")


def ceiling(d, f):
    ls = [x for x in lines(os.path.join(d, "ceiling.jsonl")) if x.get("bench") == "train_ceiling"]
    if not ls:
        f.missing("ceiling", "the ceiling: the trainer computing nothing against the data plane's bound")
        return
    for x in ls:
        model = "the MLP" if x["params"] < 10_000_000 else f"the MLP of {x['params'] / 1e6:.0f} M parameters"
        f.add("ceiling", f"the ceiling (`--device=null`): {model}, {x['workers']} x {x['servers']} "
              f"(workers x servers), {x['transport']}", f"{num(x['steps_per_s'], 1)} steps/s",
              f"the same model pushed and pulled whole each step, no trainer: {num(x['bound_steps_per_s'], 1)} steps/s",
              f"{x['ratio_vs_bound']:.2f}", x["ratio_vs_bound"], "ceiling.jsonl")


def ddp(d, f):
    r = load(os.path.join(d, "torch_vs_ddp.json"))
    if not r:
        f.missing("ddp", "a PyTorch MLP through the servers against PyTorch DDP")
        return
    c = r["config"]
    f.add("ddp", f"a PyTorch MLP through {c['servers']} servers, {c['workers']} workers, {plural(c['epochs'], 'epoch')}, "
          f"median of {plural(c['reps'], 'run')} each", f"{num(r['ps_samples_per_s'])} samples/s, accuracy {r['ps_test_accuracy']:.4f}",
          f"PyTorch DDP (gloo), {c['workers']} processes: {num(r['ddp_samples_per_s'])} samples/s, accuracy "
          f"{r['ddp_test_accuracy']:.4f}", f"{r['ratio']:.2f} ({', '.join(f'{x:.2f}' for x in r['ratios_per_repetition'])})",
          r["ratio"], "torch_vs_ddp.json")


def modes(d, name):
    r = load(os.path.join(d, f"{name}.json"))
    return (r or {}).get("modes") or []


def train_limit(d, name):
    """bench_sync_vs_async's --train-limit of a run (None: all 60,000 images)."""
    return ((load(os.path.join(d, f"{name}.json")) or {}).get("args") or {}).get("train_limit")


def t85(x):
    v = x.get("time_to_0.85_s")
    return "0.85 not reached" if v is None else f"0.85 in {v:.1f} s"


def sync_vs_async(d, f, name, what):
    ms = modes(d, name)
    base = next((m for m in ms if m["mode"] == "sync"), None)
    if not base:
        done = lines(os.path.join(d, f"{name}.jsonl"))  # the runs that finished before the step stopped
        f.missing(name, what)
        if done:
            row = f.rows[-1]
            row["ours"] = "; ".join(f"{m['mode']} {m['final_accuracy']:.4f}, {num(m['samples_per_s'])} samples/s, "
                                    f"{t85(m)}" for m in done) + f" (then the step stopped: {row['ours']})"
            row["file"] = f"{name}.jsonl"
        return
    others = [m for m in ms if m["mode"] != "sync"]
    ours = "; ".join(f"{m['mode']} {m['final_accuracy']:.4f}, {num(m['samples_per_s'])} samples/s, {t85(m)}"
                     for m in others)
    ratio = ", ".join(f"{m['mode']} {m['samples_per_s'] / base['samples_per_s']:.2f}" for m in others)
    first = others[0] if others else base
    f.add(name, f"{what}, {base['workers']} workers, {base['servers']} servers, {plural(base['epochs'], 'epoch')}: "
          "final accuracy, samples/s, time to 0.85 test accuracy", ours,
          f"sync: {base['final_accuracy']:.4f}, {num(base['samples_per_s'])} samples/s, {t85(base)}",
          f"samples/s of sync: {ratio}", first["samples_per_s"] / base["samples_per_s"], f"{name}.json")


def replicas(d, f):
    ms = modes(d, "replicas")
    two = [m for m in ms if m["replicas"] == 2 and m.get("ratio_vs_1_replica")]
    if not two:
        f.missing("replicas", "the MLP with two copies of every slice against one")
        return
    one = {m["mode"]: m for m in ms if m["replicas"] == 1}
    f.add("replicas", f"replicas: the MLP, {two[0]['workers']} workers, {two[0]['servers']} servers, "
          f"{plural(two[0]['epochs'], 'epoch')}, K = 2", "; ".join(f"{m['mode']} {num(m['samples_per_s'])} samples/s, accuracy {m['final_accuracy']:.4f}"
                                     for m in two),
          "K = 1: " + "; ".join(f"{m['mode']} {num(one[m['mode']]['samples_per_s'])}, accuracy "
                                f"{one[m['mode']]['final_accuracy']:.4f}" for m in two if m["mode"] in one),
          ", ".join(f"{m['mode']} {m['ratio_vs_1_replica']:.2f}" for m in two), two[0]["ratio_vs_1_replica"],
          "replicas.json")


def compression(d, f):
    ms = modes(d, "compression")
    if not ms:
        f.missing("compression", "compression over emulated links")
        return
    for rate in sorted({m["rate"] for m in ms}, key=lambda r: float(r[:-4].rstrip("mg")) * (1e3 if "g" in r else 1)):
        at = [m for m in ms if m["rate"] == rate]
        none = next((m for m in at if m["compression"] == "none"), None)
        comp = [m for m in at if m["compression"] != "none" and m.get("ratio_vs_uncompressed")]
        if not none or not comp:
            continue
        m0, limit = at[0], train_limit(d, "compression")
        f.add("compression", f"compression at {rate}: {m0['workers']} workers, {m0['servers']} servers, sync, "
              f"{plural(m0['epochs'], 'epoch')}"
              + (f" of {limit:,} images" if limit else ""),
              "; ".join(f"{m['compression']} {num(m['samples_per_s'])} samples/s (accuracy "
                        f"{m['accuracy_delta_vs_uncompressed'] * 100:+.2f} points)" for m in comp),
              f"uncompressed: {num(none['samples_per_s'])} samples/s, accuracy {none['final_accuracy']:.4f}",
              ", ".join(f"{m['compression']} {m['ratio_vs_uncompressed']:.2f}x" for m in comp),
              comp[-1]["ratio_vs_uncompressed"], "compression.json")


def ctr(d, f):
    s = load(os.path.join(d, "ctr.json"))
    if not s or "torch_samples_per_s" not in s:
        f.missing("ctr", "the click-through job against PyTorch with hashed tables")
        return
    hybrid = (f"; hybrid (tables async) AUC {s['hybrid_test_auc']:.4f}, {num(s['hybrid_samples_per_s'])} samples/s"
              if "hybrid_test_auc" in s else "")
    f.add("ctr", f"click-through job, {s['workers']} workers, {s['servers']} servers of {s['budget_mb']} MiB, "
          f"{s['train_samples']:,} samples: tables {s['rows_over_budget']:.2f}x the servers' memory",
          f"sync: AUC {s['test_auc']:.4f}, {num(s['samples_per_s'])} samples/s{hybrid}",
          f"PyTorch DDP with hashed tables in the same memory: AUC {s['torch_test_auc']:.4f}, "
          f"{num(s['torch_samples_per_s'])} samples/s",
          f"AUC {s['auc_minus_torch']:+.3f}, {s['samples_per_s_vs_torch']:.2f}x samples/s", s["samples_per_s_vs_torch"],
          "ctr.json")


def table(d, f):
    ls = lines(os.path.join(d, "table_bench.jsonl"))
    t = [x for x in ls if x["bench"] == "table"]
    local = [x for x in ls if x["bench"] == "table_local"]
    if not t or not local:
        f.missing("table", "embedding-table rows through the servers against one process")
        return
    cfg = f"{t[0]['servers']} servers and {t[0]['workers']} workers"
    f.add("table", f"embedding-table rows through {cfg}, loopback, {plural(len(t), 'run')}",
          f"{between([x['rows_per_s'] for x in t], 2, 1e6)} M rows/s",
          f"the same work in one process on one table: {between([x['rows_per_s'] for x in local], 2, 1e6)} M rows/s", span([x["ratio_vs_local"] for x in t], 2),
          statistics.median(x["ratio_vs_local"] for x in t), "table_bench.jsonl")


def table_disk(d, f):
    ls = {x["mode"]: x for x in lines(os.path.join(d, "table_disk_bench.jsonl")) if x.get("bench") == "table_disk"}
    if "memory" not in ls or "disk" not in ls:
        f.missing("table_disk", "a table beyond its server's memory on the disk tier")
        return
    disk, direct = ls["disk"], ls.get("disk_direct")
    f.add("table_disk", f"a table {disk['rows_over_budget']:.2f}x its server's memory, rows on the disk tier "
          f"({disk['rows_wrong']} of {disk['rows_checked']:,} rows read back wrong)",
          f"{num(disk['rows_per_s'])} rows/s (reads from the page cache)"
          + (f"; {num(direct['rows_per_s'])} (O_DIRECT)" if direct else ""),
          f"the same table all in memory: {num(ls['memory']['rows_per_s'])} rows/s",
          f"{disk['ratio_vs_memory']:.2f}" + (f" / {direct['ratio_vs_memory']:.2f}" if direct else ""),
          disk["ratio_vs_memory"], "table_disk_bench.jsonl")


def control_plane(d, f):
    ls = lines(os.path.join(d, "control_plane.jsonl"))
    if not ls:
        f.missing("control_plane", "the control plane at thousands of simulated workers")
        return
    x = max(ls, key=lambda x: x["workers"])
    f.add("control_plane", f"the control plane at {x['workers']:,} workers and {x['servers']} servers (simulated)",
          f"formation {x['formation_s']:.2f} s; heartbeats {x['heartbeat_cpu_fraction'] * 100:.1f} % of a core; a "
          f"worker's death costs each node {x['death_bytes_per_node']:.0f} bytes of views; a rejoin reaches every node "
          f"in {x['rejoin_to_view_s']:.3f} s", "(absolute figures)", "", None, "control_plane.jsonl")


def elastic(d, f):
    grown = [x for x in lines(os.path.join(d, "elastic_table.jsonl")) if x.get("bench") == "table_grown"]
    if grown:
        x = grown[0]
        f.add("elastic_table", f"servers joining: a table job grown from {x['servers_first']} to {x['servers']} servers, "
              f"{x['workers']} workers, emulated 1 Gbit/s",
              f"{num(x['rows_per_s'])} rows/s after the growth ({num(x['rows_per_s_before'])} before)",
              "a job started with all its servers", f"{x['ratio_vs_started_with_all']:.2f}",
              x["ratio_vs_started_with_all"], "elastic_table.jsonl")
    else:
        f.missing("elastic_table", "servers joining a table job over emulated 1 Gbit/s")
    tr = lines(os.path.join(d, "elastic_training.jsonl"))
    if tr:
        f.add("elastic_training", "servers joining and draining while training: 1 server, 2 join, then the first "
              "drains (replication_test, one copy)", "longest step: " + ", ".join(
                  f"{x['mode']} {x['longest_step_s']:.2f} s" for x in tr), "a step: 10 ms", "", None,
              "elastic_training.jsonl")
    else:
        f.missing("elastic_training", "servers joining and draining while training")


def summarize(d):
    steps = {s["step"]: s for s in lines(os.path.join(d, "steps.jsonl"))}
    f = Figures(steps)
    pushpull(d, f)
    update(d, f)
    train(d, f)
    ceiling(d, f)
    ddp(d, f)
    sync_vs_async(d, f, "sync_vs_async", "sync vs async vs ssp on one machine (shared memory)")
    sync_vs_async(d, f, "straggler", "the same with worker 1 three times slower")
    sync_vs_async(d, f, "sync_vs_async_1gbit", "sync vs async vs ssp over emulated 1 Gbit/s links")
    replicas(d, f)
    compression(d, f)
    ctr(d, f)
    table(d, f)
    table_disk(d, f)
    control_plane(d, f)
    elastic(d, f)
    return steps, f.rows


def step_command(step):
    """A step's measuring commands (not its plots), each once, for the table."""
    cmds = [c for c in (step or {}).get("commands", []) if "scripts/plot_" not in c]
    seen = []
    for c in cmds:
        if c not in seen:
            seen.append(c)
    return "; ".join(f"`{c}`" + (f" ({cmds.count(c)} times)" if cmds.count(c) > 1 else "") for c in seen)


def md_table(rows, date, steps):
    out = ["| what | ours | reference (measured in the same run) | ratio | date | command | file |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"**{r['ratio']}**" if r["ratio"] else ""
        file = f"[{r['file']}]({r['file']})" if r["file"] else ""
        out.append(f"| {r['figure']} | {r['ours']} | {r['reference']} | {ratio} | {date} | "
                   f"{step_command(steps.get(r['step'])) if r['file'] else ''} | {file} |")
    return out


def plot(d, rows):
    """ratios.png: every figure with a ratio, one bar each."""
    bars = [r for r in rows if r["ratio_value"] is not None]
    if not bars:
        return None
    dat = os.path.join(d, ".ratios.dat")
    with open(dat, "w") as out:
        for i, r in enumerate(bars):
            label = r["figure"].replace(" (`--device=null`)", "").replace(" (workers x servers)", "")
            label = label.replace("`", "").replace('"', "'")
            label = label if len(label) <= 72 else label[:70] + "..."
            out.write(f'{len(bars) - 1 - i} {r["ratio_value"]:.4f} "{label}"\n')
    png = os.path.join(d, "ratios.png")
    q = gnuplot_run.quote
    script = "\n".join(gnuplot_run.png_terminal(1300, 160 + 26 * len(bars), font=",9") + [
        f"set output {q(png)}", "set title 'ours / the reference measured in the same run (1: the same; for the latencies, below 1 is faster)'",
        "set style fill solid 0.7", "set grid xtics", f"set yrange [-0.6:{len(bars) - 0.4}]",
        "set xrange [0:*]", "set lmargin 75", "set key off", "set arrow from 1, graph 0 to 1, graph 1 nohead dt 2 lw 2",
        f"plot {q(dat)} using (0.5*$2):1:(0.5*$2):(0.35):yticlabels(3) with boxxyerror", ""])
    try:
        gnuplot_run.plot(script, png)
    except gnuplot_run.PlotError as e:
        print(f"headline_summary: {e}; no ratios.png", file=sys.stderr)
        return None
    finally:
        os.remove(dat)
    return png


def readme(d, machine, steps, rows, wall_s, png, warning=None):
    date = machine["date"]
    quick = machine.get("quick")
    changed = machine.get("tracked_files_changed", 0)
    tree = f"commit {machine['commit']}" + (f", with {changed} tracked files changed in the working tree"
                                            if changed else "")
    out = [f"# Headline figures, {date}" + (" (quick: a smoke run, the figures mean nothing)" if quick else ""), "",
           "Every figure of README.md's \"When to choose it\" table and docs/benchmarks.md's headline table, each "
           "next to its reference measured in the same run, by one command:", "", f"    {machine['command']}", "",
           f"Machine: {machine['nproc']} cores ({machine['cpu']}), {machine['memory_gib']} GiB, Linux "
           f"{machine['kernel']}; {tree}; the programs of `{machine['bin_dir']}` as they were at the start"
           + (f" (the newest built {machine['programs_built']})" if machine.get("programs_built") else "") + f". Started {machine['started']}"
           + (f" (load average at the start: {machine['load_average_at_start']}"
              + (f", at the end: {machine['load_average_at_end']}" if machine.get("load_average_at_end") else "") + ")"
              if machine.get("load_average_at_start") else "")
           + (f", {wall_s // 60} min {wall_s % 60} s in all." if wall_s is not None else "."), "",
           *([f"**Caveat: {warning}.**", ""] if warning else []),
           "## Figures", ""] + md_table(rows, date, steps) + [""]
    out += ["Not measured by this command:", ""] + [f"- {n['figure']}: {n['why']}." for n in NOT_RUN] + [""]
    if png:
        out += ["`ratios.png` draws every ratio of the table.", ""]
    out += ["## Steps and their commands", "",
            "In the commands, OUT is this directory and WORK a scratch directory (removed at the end: it held the "
            "jobs' logs).", ""]
    for s in steps.values():
        why = f": {s['reason']}" if s.get("reason") else ""
        out.append(f"- **{s['step']}**, {s['status']}{why}, {s['seconds']} s")
        for c in s["commands"]:
            out.append(f"  - `{c}`")
    files = sorted(x for x in os.listdir(d) if not x.startswith(".") and x != "README.md")
    out += ["", "## Files", "", "`steps.jsonl` (each step's status, time and commands), `machine.json`, "
            "`summary.json` and `summary.md` (the table above), and the steps' own output: "
            + ", ".join(f"`{x}`" for x in files if x not in ("steps.jsonl", "machine.json", "summary.json",
                                                             "summary.md")) + ".", ""]
    with open(os.path.join(d, "README.md"), "w") as f:
        f.write("\n".join(out))


def main(argv):
    p = argparse.ArgumentParser(prog="headline_summary.py", description=__doc__.split("\n\n")[0])
    p.add_argument("dir")
    p.add_argument("--wall-s", type=int, default=None)
    p.add_argument("--warning", default=None, help="a caveat of the whole run, said first in the README")
    a = p.parse_args(argv)
    machine = load(os.path.join(a.dir, "machine.json"))
    if machine is None:
        print(f"headline_summary: no machine.json in {a.dir}", file=sys.stderr)
        return 2
    if a.wall_s is not None and "load_average_at_end" not in machine:  # called by headline.sh as it ends
        with open("/proc/loadavg") as f:
            machine["load_average_at_end"] = " ".join(f.read().split()[:3])
        with open(os.path.join(a.dir, "machine.json"), "w") as f:
            json.dump(machine, f, indent=2)
            f.write("\n")
    try:
        steps, rows = summarize(a.dir)
    except (ValueError, KeyError, TypeError) as e:
        print(f"headline_summary: a step's file does not parse: {e!r}", file=sys.stderr)
        return 1
    with open(os.path.join(a.dir, "summary.json"), "w") as f:
        json.dump({"date": machine["date"], "command": machine["command"], "wall_s": a.wall_s, "warning": a.warning,
                   "machine": machine,
                   "figures": rows, "not_run": NOT_RUN,
                   "steps": {k: {"status": v["status"], "seconds": v["seconds"], "reason": v.get("reason")}
                             for k, v in steps.items()}}, f, indent=1)
        f.write("\n")
    with open(os.path.join(a.dir, "summary.md"), "w") as f:
        f.write("\n".join(md_table(rows, machine["date"], steps)) + "\n")
    png = plot(a.dir, rows)
    readme(a.dir, machine, steps, rows, a.wall_s, png, a.warning)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
