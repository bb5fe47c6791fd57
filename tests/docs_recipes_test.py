#!/usr/bin/python3
"""The recipes of docs/ that take several blocks, run as the page writes
them, in order, small, on 127.0.0.1:

  (1) docs/security.md: every block that runs ps_keygen, one after the
      other in one directory, as a reader following the page does: each
      exits 0 and makes the key pairs it names;
  (2) docs/deployment.md, "On several machines": the job of four ps_worker
      processes (one epoch on 2,000 images), then the "trained model" block
      (scp and ps_export): model.npz holds the MLP's six arrays;
  (3) the same job with README's train.py (its ```python block) as the
      workers, started as "your own script as the workers" shows (the
      environment, no ps_run), then the same export: model.npz holds the
      module's state_dict names.

Each machine of a recipe is a directory of its own, which is also its HOME,
with build/bin and build/python linking to the build. Only what makes one
machine stand for several changes in the commands: the 10.0.0.N addresses
become 127.0.0.1 (the scheduler's port a free one, the servers' --port=0),
scp copies between those directories, ps_worker gets a small data set, and
the command of "each worker machine" runs once per worker (worker 0's rank
and names made each one's own). Every process started is killed by its
process group at the end; exit 1 naming each failed check.

    tests/docs_recipes_test.py [--bin-dir build/bin]
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"
DEADLINE_S = 180
SMALL_WORKER = ["--epochs=1", "--train_limit=2000", "--test_limit=500"]
# scp between the machines' directories: HOST:PATH is PATH under HOST's HOME (globs expanded there).
SCP = r'''scp() {
  local a out=()
  for a in "$@"; do
    case "$a" in
      10.0.0.*:*) out+=($MACHINES/${a%%:*}/${a#*:}) ;;
      *) out+=("$a") ;;
    esac
  done
  cp "${out[@]}"
}
'''


def sh_blocks(path, heading=None):
    """The ```sh blocks of a page, or of one section of it (its subsections included)."""
    lines = open(path).read().split("\n")
    blocks, inside, level, i = [], heading is None, 0, 0
    while i < len(lines):
        m = re.match(r"^(#+)\s+(.*?)\s*$", lines[i])
        if m and heading is not None:
            if m.group(2) == heading:
                inside, level = True, len(m.group(1))
            elif inside and len(m.group(1)) <= level:
                break
        if re.match(r"^\s*```(sh|bash)\s*$", lines[i]):
            j = i + 1
            while not re.match(r"^\s*```\s*$", lines[j]):
                j += 1
            if inside:
                blocks.append("\n".join(lines[i + 1:j]))
            i = j
        i += 1
    return blocks


def commands(block):
    """(the '# on ...' comment above it, the command) for each command of a block."""
    out, where = [], ""
    for line in re.sub(r"\\\n\s*", "", block).split("\n"):
        if line.startswith("#"):
            where = line
        elif line.strip():
            out.append((where, line.strip()))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Recipes:
    def __init__(self, bin_dir, work):
        self.bin, self.work = bin_dir, work
        self.failures, self.procs = [], []

    def check(self, ok, what):
        print(f"  {'ok' if ok else 'FAIL'}: {what}", flush=True)
        if not ok:
            self.failures.append(what)
        return ok

    def machine(self, name):
        d = os.path.join(self.work, name)
        if not os.path.isdir(d):
            os.makedirs(os.path.join(d, "build"))
            os.symlink(self.bin, os.path.join(d, "build", "bin"))
            os.symlink(os.path.join(os.path.dirname(self.bin), "python"), os.path.join(d, "build", "python"))
        return d

    def start(self, name, cmd):
        """CMD with bash on machine NAME (its directory and HOME), in the background."""
        d = self.machine(name)
        log = open(os.path.join(d, f"{name}.{len(self.procs)}.log"), "w")
        env = {**os.environ, "HOME": d, "MACHINES": self.work}
        for var in [v for v in env if v.startswith("PS_")]:
            del env[var]
        p = subprocess.Popen(["bash", "-c", SCP + cmd], cwd=d, env=env, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, cmd, p, log.name))
        return p

    def wait_all(self):
        """Every process started: exit 0 within DEADLINE_S."""
        ok = True
        for name, cmd, p, log in self.procs:
            try:
                code = p.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                code = "still running"
            if code != 0:
                ok = False
                tail = open(log).read().splitlines()[-8:]
                self.check(False, f"on {name}: `{cmd}` exited {code}:\n      " + "\n      ".join(tail))
        self.stop()
        return ok

    def run(self, name, cmd):
        """CMD on machine NAME in the foreground: whether it exited 0."""
        self.start(name, cmd)
        return self.wait_all()

    def stop(self):
        for _, _, p, _ in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        self.procs = []

    # (1) ---------------------------------------------------------------------------------------------
    def security_keys(self):
        print("(1) docs/security.md: every block of ps_keygen, in order, in one directory")
        blocks = [b for b in sh_blocks(os.path.join(ROOT, "docs", "security.md")) if "build/bin/ps_keygen" in b]
        self.check(len(blocks) >= 2, f"{len(blocks)} blocks run ps_keygen")
        d = self.machine("keys-machine")
        for n, block in enumerate(blocks, 1):
            if not self.run("keys-machine", "set -e\n" + block):
                continue
            made = re.findall(r"ps_keygen --out_dir=(\S+) --name=([\w.-]+)(?:\s|$)", block)
            missing = [f"{o}/{k}.key" for o, k in made if not os.path.isfile(os.path.join(d, o, k + ".key"))]
            self.check(not missing, f"block {n}: exit 0; its key pairs made ({len(made)} named, missing: {missing})")

    # (2), (3) ----------------------------------------------------------------------------------------
    def deployment(self, train_py):
        page = os.path.join(ROOT, "docs", "deployment.md")
        blocks = sh_blocks(page, "On several machines")
        job = next((b for b in blocks if "ps_scheduler" in b), None)
        export = next((b for b in blocks if "ps_export" in b), None)
        own = next((b for b in blocks if "PS_SCHEDULER=" in b), None)
        if not self.check(job and export and own, "deployment.md's several machines: the job, the export and "
                                                   "your own script's blocks"):
            return
        port = free_port()

        def local(cmd):
            cmd = cmd.replace("10.0.0.1:9000", f"127.0.0.1:{port}").replace("--port=9000", f"--port={port}")
            cmd = cmd.replace("--port=9100", "--port=0")
            return re.sub(r"--advertise_host=10\.0\.0\.\d+", "--advertise_host=127.0.0.1", cmd)

        job_cmds = commands(job)
        sched = [c for _, c in job_cmds if "ps_scheduler" in c]
        workers = int(re.search(r"--num_workers=(\d+)", sched[0]).group(1)) if sched else 0

        def start_job(worker_cmd, small):
            for where, cmd in job_cmds:
                host = re.search(r"--advertise_host=(10\.0\.0\.\d+)", cmd)
                if "worker machine" in where:
                    continue
                if not host:
                    self.check(False, f"`{cmd}` names no machine (--advertise_host)")
                    return
                self.start(host.group(1), local(cmd))
            for i in range(workers):
                cmd = re.sub(r"\bPS_RANK=0\b", f"PS_RANK={i}", local(worker_cmd))
                self.start(f"worker-{i}", cmd + small)

        def exported(want):
            for _, cmd in commands(export):
                if not self.run("any-machine", local(cmd)):
                    return
            model = os.path.join(self.work, "any-machine", "model.npz")
            r = subprocess.run([PY, "-c", "import sys, numpy as np; m = np.load(sys.argv[1]); "
                                "print(' '.join(f'{k}:{m[k].shape}' for k in sorted(m.files)))", model],
                               capture_output=True, text=True)
            got = r.stdout.strip().replace(" ", "").replace(",)", ")")
            self.check(got == want.replace(" ", ""), f"model.npz: {got or r.stderr.strip()}")

        print("(2) docs/deployment.md, on several machines: scheduler, 2 servers, "
              f"{workers} ps_worker, then the export")
        worker = [c for w, c in job_cmds if "worker machine" in w]
        if self.check(len(worker) == 1 and workers == 4, f"one worker command, for {workers} workers"):
            start_job(worker[0], " " + " ".join(SMALL_WORKER))
            if self.wait_all():
                self.check(True, "every process exited 0")
                exported("fc0.bias:(512) fc0.weight:(784,512) fc1.bias:(256) fc1.weight:(512,256) "
                         "fc2.bias:(10) fc2.weight:(256,10)")

        print(f"(3) docs/deployment.md, your own script as the workers: README's train.py, {workers} copies")
        own_cmds = [c for w, c in commands(own) if "worker machine" in w]
        if self.check(len(own_cmds) == 1, "one command for the worker machines"):
            for i in range(workers):
                shutil.copy(train_py, os.path.join(self.machine(f"worker-{i}"), "train.py"))
            start_job(own_cmds[0], "")
            if self.wait_all():
                self.check(True, "every process exited 0")
                exported("0.bias:(128) 0.weight:(128,784) 2.bias:(10) 2.weight:(10,128)")


def main(argv):
    p = argparse.ArgumentParser(description="Runs docs/' multi-block recipes on 127.0.0.1.")
    p.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    a = p.parse_args(argv)
    bin_dir = os.path.abspath(a.bin_dir)
    work = tempfile.mkdtemp(prefix="docs_recipes_test.")
    r = Recipes(bin_dir, work)
    try:
        r.security_keys()
        readme = open(os.path.join(ROOT, "README.md")).read()
        train_py = os.path.join(work, "train.py")
        with open(train_py, "w") as f:
            f.write(re.findall(r"```python\n(.*?)```", readme, re.S)[0])
        r.deployment(train_py)
    finally:
        r.stop()
    if r.failures:
        print(f"docs_recipes: {len(r.failures)} failed; outputs kept in {work}")
        return 1
    shutil.rmtree(work)
    print("docs_recipes: every recipe ran as written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
