"""What launch_job keeps of a job and leaves behind: the workers' events as
they come (events.jsonl, rank 0's evaluations in metrics.csv, the messages
shown), then summary.json and accuracy.png. Not thread-safe (the job's one
loop uses it)."""
import csv
import json
import os

import gnuplot_run
from launch.common import ACCURACY_MARKS, EVENTS, METRICS, PLOT, SUMMARY, TABLE_STATS, fmt_duration, plural


class Record:
    def __init__(self, args, out, view):
        self.args, self.out, self.view = args, out, view
        self.evals = []           # rank 0's eval events, in order
        self.final_eval = None
        self.server_stats = None  # rank 0's "server_stats" event
        self.events_file = open(os.path.join(out, EVENTS), "w")
        self.metrics_file = open(os.path.join(out, METRICS), "w", newline="")
        self.metrics = csv.writer(self.metrics_file)
        self.metrics.writerow(("wall_s", "epoch", "step", "train_loss", "test_accuracy") + args.extra_metrics)
        self.metrics_file.flush()

    def say(self, msg, err=False):
        self.view.say(msg, err)

    def close(self):
        for f in (self.events_file, self.metrics_file):
            if not f.closed:
                f.close()

    # -- the workers' lines -----------------------------------------------------

    def handle_line(self, w, raw):
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if not text.strip():
            return
        try:
            ev = json.loads(text)
        except ValueError:
            ev = None
        if not isinstance(ev, dict) or "event" not in ev:
            self.say(f"{w.name}: {text}")
            return
        self.events_file.write(text + "\n")
        self.events_file.flush()
        try:
            self.handle_event(w, ev)
        except (KeyError, TypeError, ValueError) as e:  # a field missing or of another type
            self.say(f"{w.name}: {text}  (launch_job: cannot show this event: {type(e).__name__} {e})")

    def handle_event(self, w, ev):
        kind = ev["event"]
        if kind == "start":
            w.start = ev
            self.say(f"{w.name}: rank {ev.get('rank')} of {plural(ev.get('workers'), 'worker')}, {plural(ev.get('servers'), 'server')}; "
                     f"{ev.get('shard')} samples/shard, {ev.get('steps_per_epoch')} steps/epoch, "
                     f"{ev.get('consistency')}, device {ev.get('device')}"
                     + (f"; group {ev['group']} stage {ev['stage']} of {ev['stages']} (layers {ev['layers']}, "
                        f"{ev.get('stage_parameters')} parameters, {ev.get('micro_batches')} micro-batches)" if "stage" in ev else ""))
            if ev.get("rank") == 0:
                table = f" and table {ev['table']} (rows of {ev.get('dim')})" if "table" in ev else ""
                self.say(f"model: {ev.get('parameters')} parameters{table}; placement: {ev.get('placement')}")
        elif kind == "progress":
            w.progress = ev
            if not self.view.tty:
                self.say(f"{w.name}: epoch {ev['epoch']}/{ev['epochs']} step {ev['step']}/{ev['total_steps']} "
                         f"loss {ev['loss']:.3f} acc {ev['train_accuracy']:.3f} {ev['samples_per_s']:.0f} samples/s "
                         f"eta {fmt_duration(ev['eta_s'])}")
        elif kind == "eval":
            if ev.get("rank") == 0:
                self.evals.append(ev)
                extra = ["" if ev.get(k) is None else ev[k] for k in self.args.extra_metrics]
                self.metrics.writerow([ev["elapsed_s"], ev["epoch"], ev["step"], ev["train_loss"],
                                       ev["test_accuracy"], *extra])
                self.metrics_file.flush()
                if ev.get("final"):
                    self.final_eval = ev
                auc = f" test_auc {ev['test_auc']:.5f}" if ev.get("test_auc") is not None else ""
                self.say(f"eval: epoch {ev['epoch']} step {ev['step']} test_accuracy {ev['test_accuracy']:.4f}{auc} "
                         f"test_loss {ev['test_loss']:.4f} at {ev['elapsed_s']:.1f}s"
                         + (" (final)" if ev.get("final") else ""))
        elif kind == "done":
            w.done = ev
        elif kind == "server_stats":
            self.server_stats = ev

    # -- the end ------------------------------------------------------------------

    def report(self, workers, wall_s, network):
        """summary.json and accuracy.png once every worker is done (`wall_s`:
        launch to the last worker done; `network`: what netns.setup reported,
        None on loopback); the exit code."""
        a, ws = self.args, workers
        self.close()
        rank0 = next((w for w in ws if w.done and w.done.get("rank") == 0), None)
        final = self.final_eval or (rank0.done if rank0 else None)
        if final is None:
            self.say("launch_job: no worker reported rank 0's final evaluation", err=True)
            return 1
        summary = self.summarize(sorted(ws, key=lambda w: w.done.get("rank", 0)), final, rank0, wall_s, network)
        with open(os.path.join(self.out, SUMMARY), "w") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
        plot_ok = self.plot(summary)
        self.say(f"test accuracy {summary['test_accuracy']:.4f} (rank 0, final evaluation)")
        if "test_auc" in summary:
            self.say(f"test AUC {summary['test_auc']:.5f}")
        self.say(f"wall time {summary['wall_s']:.1f} s (launch to every worker done)")
        self.say(f"throughput {summary['samples_per_s']:.0f} samples/s "
                 f"({summary['samples']} samples over {summary['train_wall_s']:.1f} s of training, "
                 f"{plural(a.workers, 'worker')})")
        if "table_rows" in summary:
            self.say(f"table rows {summary['table_rows']} (summed over {plural(a.servers, 'server')})")
        self.say(f"summary: {os.path.join(self.out, SUMMARY)}")
        if not plot_ok:
            return 1
        self.say(f"plot: {os.path.join(self.out, PLOT)}")
        return 0

    def summarize(self, ws, final, rank0, wall_s, network):
        """summary.json's contents; `ws`: the workers by rank."""
        a = self.args
        samples = sum(w.done["samples"] for w in ws if w.done.get("stage", 0) == 0)  # a group's, once
        train_wall = max(w.done["wall_s"] for w in ws)
        first = next((w.start for w in ws if w.start), {})
        epochs = next((w.progress["epochs"] for w in ws if w.progress), a.epochs)
        st = self.server_stats or {}
        summary = {
            "test_accuracy": final["test_accuracy"],
            "test_loss": final.get("test_loss"),
            **({"test_auc": final["test_auc"]} if final.get("test_auc") is not None else {}),
            "epochs": epochs,
            "wall_s": round(wall_s, 3),
            "train_wall_s": train_wall,
            "samples": samples,
            "samples_per_s": round(samples / train_wall, 1) if train_wall > 0 else 0.0,
            "workers": a.workers,
            "servers": a.servers,
            "consistency": first.get("consistency", a.consistency),
            "device": first.get("device", a.device),
            "placement": a.placement, "stages": a.stages, "micro_batches": a.micro_batches,
            "steps": max(w.done["steps"] for w in ws),
            "evals": len(self.evals),
            # Each worker's own pace (samples over its own training time), and
            # their sum: what the job trains per second while all are at work.
            "worker_samples_per_s": [round(w.done["samples"] / w.done["wall_s"], 1) if w.done["wall_s"] > 0 else 0.0
                                     for w in ws],
            "sum_worker_samples_per_s": round(sum(w.done["samples"] / w.done["wall_s"] for w in ws
                                                  if w.done["wall_s"] > 0 and w.done.get("stage", 0) == 0), 1),
            "worker_wait_s": [w.done.get("wait_s") for w in ws],
            "worker_wall_s": [w.done.get("wall_s") for w in ws],
            "worker_straggle_s": [w.done.get("straggle_s") for w in ws], "worker_bubble": [w.done.get("bubble") for w in ws],
            "eval_s": rank0.done.get("eval_s") if rank0 else None,
            "time_to_accuracy_s": {f"{t:.2f}": next((e["elapsed_s"] for e in self.evals if e["test_accuracy"] >= t), None)
                                   for t in ACCURACY_MARKS},
            "network": network or {"kind": "loopback"},
            # Summed over the servers' shards (rows the evaluation pulled included).
            **({"table_rows": st["table_rows"]} if "table_rows" in st else {}),
            # Of them, on the servers' disk tiers only (--table-disk-dir).
            **({"table_disk_rows": st["table_disk_rows"]} if "table_disk_rows" in st else {}),
        }
        if self.server_stats is not None:
            summary["server_stats"] = {k: st.get(k) for k in (
                "pushes_applied", "updates_applied", "slice_updates", "staleness_mean", "staleness_p99",
                "staleness_max", "staleness_histogram", "pulls_waited_s") + tuple(k for k in TABLE_STATS if k in st)}
        return summary

    def plot(self, summary):
        q = gnuplot_run.quote
        png, csv_path = os.path.join(self.out, PLOT), os.path.join(self.out, METRICS)
        title = (f"{self.args.title}: {plural(summary['workers'], 'worker')}, {plural(summary['servers'], 'server')}, "
                 f"{summary['consistency']}, {plural(summary['epochs'], 'epoch')} - final test accuracy "
                 f"{summary['test_accuracy']:.4f}" + (f", AUC {summary['test_auc']:.4f}" if "test_auc" in summary else ""))
        # The worker's extra metrics (test_auc) as further lines, columns 6 on.
        extra = "".join(f", {q(csv_path)} every ::1 using 1:{6 + i} with linespoints lw 2 pt {9 + i} ps 1.2 "
                        f"title '{name} (rank 0)'" for i, name in enumerate(self.args.extra_metrics))
        script = "\n".join(gnuplot_run.png_terminal(900, 560) + [
            f"set output {q(png)}",
            'set datafile separator ","',
            f"set title {q(title)}",
            "set xlabel 'wall time of rank 0 (s)'",
            f"set ylabel {q('test accuracy' + ''.join(f', {n}' for n in self.args.extra_metrics))}",
            "set grid",
            "set key bottom right",
            "set xrange [0:*]",
            "set offsets 0, graph 0.02, graph 0.05, graph 0.05",
            f"plot {q(csv_path)} every ::1 using 1:5 with linespoints lw 2 pt 7 ps 1.2 lc rgb '#1f77b4' "
            f"title 'test accuracy (rank 0)'{extra}",
            "",
        ])
        try:
            gnuplot_run.plot(script, png)
        except gnuplot_run.PlotError as e:
            self.say(f"launch_job: {e}; no plot", err=True)
            return False
        return True
