#!/usr/bin/python3
"""Checks the job's Kubernetes manifests offline, before `kubectl apply`.

    validate_manifests.py [--bin-dir DIR] [--secrets FILE] [--expect-insecure true|false] PATH...

PATH is a kustomization directory (scripts/k8s/base, scripts/k8s/insecure:
rendered as kubectl kustomize would, for the kustomize fields they use) or a
YAML file. Every object is checked against the Kubernetes API schema
(k8s_schema.py: Debian's python3-kubernetes, the Kubernetes 1.22 API) and the
API server's own rules, then the job as a whole against what the binaries
and scripts/k8s/ps-entrypoint.sh need:

  * every container starts `ps-entrypoint BINARY` and every arg is a flag
    that `BINARY --helpfull` in DIR lists (and so are the flags the
    entrypoint adds); none the entrypoint owns (--restore, --restore_dir,
    --insecure);
  * the scheduler and the servers listen on 0.0.0.0 and advertise the pod IP
    (downward API); --port is the container port named after the role, and the
    readiness probe's port is one of the container's ports; --metrics_port is
    the port named metrics (9100), announced by the prometheus.io annotations;
  * every Service selects pods whose ports its targetPorts name; the
    StatefulSet's serviceName is a headless Service that selects its pods;
    --scheduler=HOST:PORT is the scheduler's Service and the port that leads
    to its --port;
  * --num_servers is the StatefulSet's replicas, --num_workers the Indexed
    Job's completions and parallelism, the worker's --rank is
    $(JOB_COMPLETION_INDEX); --checkpoint_dir is the StatefulSet's claim and
    --state_file lies on a PersistentVolumeClaim of the manifests;
  * non-root pods whose fsGroup lets them read the Secret volumes, read-only
    root filesystems;
  * resources (cpu and memory requests and limits) everywhere; the server's
    --max_memory_mb below its memory limit, --num_threads within its CPU limit;
  * security on: every role has its key flags, the key files are in Secret
    volumes no other user may read, and with --secrets (make_secrets.sh's
    output) every key file a pod names is in its Secret, each public key in
    ps-public-keys belonging to its key pair.

Prints each problem, then one summary line; exit code 0 when there is none,
1 otherwise, 2 on a bad command line or input it cannot read. Without
--bin-dir the flags are not checked against the binaries (said so).
"""

import argparse
import base64
import math
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
try:
    import k8s_schema as ks  # imports yaml and kubernetes
except ImportError as e:
    sys.exit("validate_manifests: %s (Debian packages python3-kubernetes and python3-yaml)" % e)

ENTRYPOINT = "/usr/local/bin/ps-entrypoint"
BINARIES = {"ps_scheduler": "scheduler", "ps_server": "server", "ps_worker": "worker", "ps_exact_sum": "worker"}
ADDED_BY_ENTRYPOINT = {"ps_scheduler": {"restore", "insecure", "secret_key_file"},
                       "ps_server": {"restore_dir", "rank", "insecure", "secret_key_file"},
                       "ps_worker": {"insecure", "secret_key_file"}, "ps_exact_sum": {"insecure", "secret_key_file"}}
OWNED_BY_ENTRYPOINT = {"restore", "restore_dir", "insecure"}
KEY_FLAGS = {"scheduler": ("secret_key_file", "authorized_keys"),
             "server": ("secret_key_file", "authorized_keys", "scheduler_public_key"),
             "worker": ("secret_key_file", "scheduler_public_key")}
METRICS_PORT = 9100
HELP_FLAG = re.compile(r"^    --([A-Za-z0-9_]+) \(", re.M)


class Container:
    """A ps container of a workload, with its flags parsed."""

    def __init__(self, doc, labels, pod, c):
        self.doc, self.labels, self.pod, self.c = doc, labels, pod, c
        cmd = c.get("command") or []
        self.binary = cmd[1] if len(cmd) == 2 and cmd[0] == ENTRYPOINT else None
        self.role = BINARIES.get(self.binary)
        self.flags, self.bad_args = {}, []
        for a in c.get("args") or []:
            m = re.fullmatch(r"--([A-Za-z0-9_]+)(?:=(.*))?", str(a), re.S)
            if not m:
                self.bad_args.append("%r is not a --flag or --flag=value" % a)
            elif m.group(1) in self.flags:
                self.bad_args.append("--%s given twice" % m.group(1))
            else:
                self.flags[m.group(1)] = m.group(2)
        self.ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
        self.env = {e.get("name"): e for e in c.get("env") or []}
        self.mounts = {m.get("mountPath"): m.get("name") for m in c.get("volumeMounts") or []}

    def where(self):
        return "%s: container %s (%s)" % (self.doc.where(), self.c.get("name"), self.binary)

    def resolve_port(self, port):
        """A port by name or number -> its number in this container, or None."""
        if isinstance(port, str):
            return self.ports.get(port)
        return port if port in self.ports.values() else None

    def volume(self, name):
        return next((v for v in self.pod.get("volumes") or [] if v.get("name") == name), None)

    def mounted_volume(self, path):
        """(mountPath, volume) of the mount that holds path, or (None, None)."""
        best = max((m for m in self.mounts if path == m or path.startswith(m.rstrip("/") + "/")), key=len, default=None)
        return best, (self.volume(self.mounts[best]) if best else None)


class Job:
    """Every object of the manifests, and their ps containers."""

    def __init__(self, docs):
        self.docs = docs
        self.containers = []
        for d in docs:
            tmpl = ks.pod_template(d.obj)
            if tmpl is not None:
                labels, pod = tmpl
                self.containers += [Container(d, labels, pod, c) for c in pod.get("containers") or []]

    def of_kind(self, kind):
        return [d for d in self.docs if d.kind == kind]

    def role(self, role):
        return [c for c in self.containers if c.role == role]

    def selected_by(self, selector):
        return [c for c in self.containers if selector and all(c.labels.get(k) == v for k, v in selector.items())]


# ----------------------------------------------------------------------------
# Flags


def help_flags(bin_dir, binary, cache={}):
    """The flags `BINARY --helpfull` lists (abseil exits 1 after help)."""
    if binary not in cache:
        path = os.path.join(bin_dir, binary)
        if not os.access(path, os.X_OK):
            cache[binary] = None
        else:
            r = subprocess.run([path, "--helpfull"], capture_output=True, text=True, timeout=60)
            cache[binary] = set(HELP_FLAG.findall(r.stdout + r.stderr))
    return cache[binary]


def check_flags(job, bin_dir):
    errors = []
    for c in job.containers:
        if c.role is None:
            errors.append("%s: does not start as [%s, BINARY] with BINARY one of %s" % (
                c.where(), ENTRYPOINT, ", ".join(sorted(BINARIES))))
            continue
        errors += ["%s: %s" % (c.where(), e) for e in c.bad_args]
        errors += ["%s: --%s is set by ps-entrypoint; remove it" % (c.where(), f) for f in OWNED_BY_ENTRYPOINT & set(c.flags)]
        if bin_dir is None:
            continue
        known = help_flags(bin_dir, c.binary)
        if known is None:
            errors.append("%s: %s/%s not found (--bin-dir)" % (c.where(), bin_dir, c.binary))
            continue
        errors += ["%s: --%s: %s does not accept it" % (c.where(), f, c.binary) for f in sorted(set(c.flags) - known)]
        errors += ["%s: ps-entrypoint adds --%s, which %s does not accept" % (c.where(), f, c.binary)
                   for f in sorted(ADDED_BY_ENTRYPOINT[c.binary] - known)]
    return errors


# ----------------------------------------------------------------------------
# Addresses, ports, probes, metrics


def check_listening(c):
    """Scheduler and server: bind 0.0.0.0, advertise the pod IP, --port is the port named after the role."""
    errors = []
    if c.flags.get("host") != "0.0.0.0":
        errors.append("--host=%s: a pod must listen on 0.0.0.0" % c.flags.get("host"))
    ip = ((c.env.get("POD_IP") or {}).get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
    if c.flags.get("advertise_host") != "$(POD_IP)" or ip != "status.podIP":
        errors.append("--advertise_host must be $(POD_IP), with env POD_IP from fieldRef status.podIP")
    port = c.flags.get("port")
    if port is None or not port.isdigit() or int(port) != c.ports.get(c.role):
        errors.append("--port=%s is not the container port named %r (%s)" % (port, c.role, c.ports.get(c.role)))
    return errors


def check_probe_and_metrics(c):
    errors = []
    probe = (c.c.get("readinessProbe") or {}).get("tcpSocket")
    if probe is None or c.resolve_port(probe.get("port")) is None:
        errors.append("needs a tcpSocket readinessProbe on one of its ports %s" % c.ports)
    if c.flags.get("metrics_port") != str(METRICS_PORT) or c.ports.get("metrics") != METRICS_PORT:
        errors.append("--metrics_port=%s and the container port named metrics (%s) must both be %d" % (
            c.flags.get("metrics_port"), c.ports.get("metrics"), METRICS_PORT))
    if c.flags.get("metrics_host") != "0.0.0.0":
        errors.append("--metrics_host must be 0.0.0.0 for Prometheus to reach it")
    notes = ((c.doc.obj["spec"].get("template") or {}).get("metadata") or {}).get("annotations") or {}
    if notes.get("prometheus.io/scrape") != "true" or notes.get("prometheus.io/port") != str(METRICS_PORT):
        errors.append("pod annotations prometheus.io/scrape \"true\" and prometheus.io/port \"%d\" needed" % METRICS_PORT)
    return errors


def check_resources(c):
    res = c.c.get("resources") or {}
    return ["resources.%s.%s missing" % (kind, r) for kind in ("requests", "limits") for r in ("cpu", "memory")
            if r not in (res.get(kind) or {})]


def check_pod_security(c):
    """Non-root, and able to read the Secret volumes: through the pod's fsGroup."""
    pod, own = c.pod.get("securityContext") or {}, c.c.get("securityContext") or {}
    errors = []
    if pod.get("runAsNonRoot") is not True or pod.get("fsGroup") is None or pod.get("fsGroup") != pod.get("runAsGroup"):
        errors.append("pod securityContext: runAsNonRoot true, and fsGroup = runAsGroup (to read the Secret volumes)")
    if own.get("allowPrivilegeEscalation") is not False or own.get("readOnlyRootFilesystem") is not True:
        errors.append("securityContext: allowPrivilegeEscalation false, readOnlyRootFilesystem true")
    return errors


def check_containers(job):
    errors = []
    for c in job.containers:
        if c.role is None:
            continue
        found = check_probe_and_metrics(c) + check_resources(c) + check_pod_security(c)
        if c.role in ("scheduler", "server"):
            found += check_listening(c)
        errors += ["%s: %s" % (c.where(), e) for e in found]
    return errors


def check_services(job):
    errors = []
    for svc in job.of_kind("Service"):
        spec = svc.obj.get("spec") or {}
        pods = job.selected_by(spec.get("selector") or {})
        if not pods:
            errors.append("%s: its selector %s selects no pod of the manifests" % (svc.where(), spec.get("selector")))
        for p in spec.get("ports") or []:
            target = p.get("targetPort", p.get("port"))
            errors += ["%s: port %s: targetPort %r is no port of %s" % (svc.where(), p.get("name"), target, c.where())
                       for c in pods if c.resolve_port(target) is None]
    return errors


def scheduler_endpoint(job):
    """{(service name, service port)} that reach the scheduler's --port."""
    out = set()
    for sched in job.role("scheduler"):
        for svc in job.of_kind("Service"):
            if sched not in job.selected_by((svc.obj.get("spec") or {}).get("selector") or {}):
                continue
            for p in svc.obj["spec"].get("ports") or []:
                if str(sched.resolve_port(p.get("targetPort", p.get("port")))) == sched.flags.get("port"):
                    out.add((svc.name, str(p.get("port"))))
    return out


def check_scheduler_address(job):
    reachable, errors = scheduler_endpoint(job), []
    for c in job.role("server") + job.role("worker"):
        host, _, port = (c.flags.get("scheduler") or "").rpartition(":")
        if (host.split(".")[0], port) not in reachable:
            errors.append("%s: --scheduler=%s is not the scheduler's Service and port (%s)" % (
                c.where(), c.flags.get("scheduler"), ", ".join("%s:%s" % e for e in sorted(reachable)) or "none"))
    return errors


def check_consistency(job):
    """The workers' --consistency or PS_CONSISTENCY is the scheduler's --consistency (which refuses another)."""
    errors, sched = [], job.role("scheduler")
    mode = sched[0].flags.get("consistency") if len(sched) == 1 else None
    for c in job.role("worker"):
        theirs = c.flags.get("consistency") or (c.env.get("PS_CONSISTENCY") or {}).get("value")
        if theirs is not None and mode is not None and theirs != mode:
            errors.append("%s: consistency %s but the scheduler's --consistency=%s (the scheduler refuses the model)" % (
                c.where(), theirs, mode))
    return errors


# ----------------------------------------------------------------------------
# The job's shape: counts, identities, volumes


def check_counts(job):
    errors, sched = [], job.role("scheduler")
    sts = [d for d in job.of_kind("StatefulSet") if any(c.doc is d for c in job.role("server"))]
    jobs = [d for d in job.of_kind("Job") if any(c.doc is d for c in job.role("worker"))]
    if len(sched) != 1 or len(sts) != 1 or len(jobs) != 1:
        return ["expected one scheduler container, one StatefulSet of servers and one Job of workers; got %d, %d, %d" % (
            len(sched), len(sts), len(jobs))]
    flags, s_spec, j_spec = sched[0].flags, sts[0].obj["spec"], jobs[0].obj["spec"]
    if flags.get("num_servers") != str(s_spec.get("replicas", 1)):
        errors.append("%s: --num_servers=%s but %s has %s replicas" % (sched[0].where(), flags.get("num_servers"),
                                                                        sts[0].where(), s_spec.get("replicas", 1)))
    for c in job.role("server"):
        elastic = (c.env.get("PS_ELASTIC") or {}).get("value")
        formed = (c.env.get("PS_FORMED_SERVERS") or {}).get("value")
        if elastic == "true" and formed != flags.get("num_servers"):
            errors.append("%s: PS_FORMED_SERVERS=%s but the scheduler's --num_servers=%s" % (
                c.where(), formed, flags.get("num_servers")))
        if elastic == "true" and "elastic" not in flags and int(flags.get("replicas", "1")) < 2:
            errors.append("%s: PS_ELASTIC=true but the scheduler runs without --elastic (or --replicas >= 2)" %
                          sched[0].where())
    n = {str(j_spec.get("completions")), str(j_spec.get("parallelism"))}
    if n != {flags.get("num_workers")}:
        errors.append("%s: --num_workers=%s but %s has completions %s, parallelism %s" % (
            sched[0].where(), flags.get("num_workers"), jobs[0].where(), j_spec.get("completions"), j_spec.get("parallelism")))
    if j_spec.get("completionMode") != "Indexed":
        errors.append("%s: completionMode must be Indexed (the index is the worker's rank)" % jobs[0].where())
    return errors


def check_worker_identity(job):
    errors = []
    for c in job.role("worker"):
        ref = ((c.env.get("JOB_COMPLETION_INDEX") or {}).get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
        if c.flags.get("rank") != "$(JOB_COMPLETION_INDEX)" or "job-completion-index" not in str(ref):
            errors.append("%s: --rank=$(JOB_COMPLETION_INDEX) with env JOB_COMPLETION_INDEX from the "
                          "batch.kubernetes.io/job-completion-index annotation" % c.where())
    return errors


def check_server_volumes(job):
    errors = []
    for c in job.role("server"):
        spec = c.doc.obj["spec"]
        svc = [s for s in job.of_kind("Service") if s.name == spec.get("serviceName")]
        if not svc or (svc[0].obj.get("spec") or {}).get("clusterIP") != "None" \
                or c not in job.selected_by(svc[0].obj["spec"].get("selector") or {}):
            errors.append("%s: serviceName %r must be a headless Service (clusterIP: None) that selects its pods" % (
                c.doc.where(), spec.get("serviceName")))
        claims = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates") or []}
        if c.mounts.get(c.flags.get("checkpoint_dir")) not in claims:
            errors.append("%s: --checkpoint_dir=%s must be the mountPath of a volumeClaimTemplate (%s)" % (
                c.where(), c.flags.get("checkpoint_dir"), ", ".join(sorted(claims))))
        if ((c.env.get("POD_NAME") or {}).get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") != "metadata.name":
            errors.append("%s: env POD_NAME from fieldRef metadata.name (ps-entrypoint reads the ordinal)" % c.where())
    return errors


def check_scheduler_state(job):
    errors, pvcs = [], {d.name for d in job.of_kind("PersistentVolumeClaim")}
    for c in job.role("scheduler"):
        state = c.flags.get("state_file") or ""
        _, vol = c.mounted_volume(state)
        if not state or (vol or {}).get("persistentVolumeClaim", {}).get("claimName") not in pvcs:
            errors.append("%s: --state_file=%s must lie on a PersistentVolumeClaim of the manifests" % (c.where(), state))
        spec = c.doc.obj["spec"]
        if c.doc.kind == "Deployment" and (spec.get("replicas", 1) != 1 or (spec.get("strategy") or {}).get("type") != "Recreate"):
            errors.append("%s: one scheduler at a time: replicas 1, strategy Recreate" % c.doc.where())
    return errors


def check_server_budget(job):
    errors = []
    for c in job.role("server"):
        limits = (c.c.get("resources") or {}).get("limits") or {}
        mem, cpu = ks.quantity(limits.get("memory", "")), ks.quantity(limits.get("cpu", ""))
        budget, threads = c.flags.get("max_memory_mb", "0"), c.flags.get("num_threads", "0")
        if mem is None or not budget.isdigit() or not 0 < int(budget) * 2 ** 20 < mem:
            errors.append("%s: --max_memory_mb=%s must be set below the memory limit %s (0: half of the node's)" % (
                c.where(), budget, limits.get("memory")))
        if cpu is None or not threads.isdigit() or not 0 < int(threads) <= math.ceil(cpu):
            errors.append("%s: --num_threads=%s must be set within the CPU limit %s (0: one per core of the node)" % (
                c.where(), threads, limits.get("cpu")))
    return errors


# ----------------------------------------------------------------------------
# Security


def expand(path, c):
    """The paths the pods of c's workload use: $(POD_NAME) over the
    StatefulSet's pods, $(JOB_COMPLETION_INDEX) over the Job's indices."""
    spec = c.doc.obj["spec"]
    if "$(POD_NAME)" in path:
        return [path.replace("$(POD_NAME)", "%s-%d" % (c.doc.name, i)) for i in range(spec.get("replicas", 1))]
    if "$(JOB_COMPLETION_INDEX)" in path:
        return [path.replace("$(JOB_COMPLETION_INDEX)", str(i)) for i in range(spec.get("completions") or 1)]
    return [path]


def check_in_secret(c, flag, path, secrets):
    """path (a file, or the mount itself for a directory of keys) in a Secret volume, and in the Secret."""
    mount, vol = c.mounted_volume(path)
    secret = (vol or {}).get("secret")
    if secret is None:
        return ["--%s=%s is not in a Secret volume" % (flag, path)]
    errors = []
    if flag == "secret_key_file" and secret.get("defaultMode", 0o644) & 0o007:
        errors.append("volume %s: defaultMode %o lets other users read the secret keys" % (vol["name"], secret.get("defaultMode", 0o644)))
    if secrets is None:
        return errors
    data = secrets.get(secret.get("secretName"))
    if data is None:
        return errors + ["--%s: Secret %s is not among the Secrets given" % (flag, secret.get("secretName"))]
    shown = {i["path"]: i["key"] for i in secret.get("items") or []} or {k: k for k in data}
    name = os.path.relpath(path, mount)
    if name == "." and not any(k.endswith(".pub") for k in shown.values()):
        errors.append("--%s=%s: Secret %s shows no *.pub there" % (flag, path, secret["secretName"]))
    elif name != "." and shown.get(name) not in data:
        errors.append("--%s=%s: Secret %s has no %s" % (flag, path, secret["secretName"], name))
    return errors


def check_keys(job, secrets):
    errors = []
    for c in job.containers:
        for flag in KEY_FLAGS.get(c.role, ()):
            if not c.flags.get(flag):
                errors.append("%s: --%s missing: security is on by default (insecure: ConfigMap ps-security)" % (c.where(), flag))
                continue
            for path in expand(c.flags[flag], c):
                errors += ["%s: %s" % (c.where(), e) for e in check_in_secret(c, flag, path, secrets)]
    return errors


def check_key_pairs(secrets):
    """Each NAME.key's public key is the one in ps-public-keys' NAME.pub."""
    errors, pubs = [], secrets.get("ps-public-keys") or {}
    for secret, data in sorted(secrets.items()):
        for key, value in sorted(data.items()):
            if not key.endswith(".key"):
                continue
            text = base64.b64decode(value).decode("utf-8", "replace")
            m = re.search(r"^public-key = (\S+)$", text, re.M)
            pub = base64.b64decode(pubs.get(key[:-4] + ".pub", "")).decode("utf-8", "replace").split()
            if not m or not pub or pub[0] != m.group(1):
                errors.append("Secret %s: %s: its public key is not ps-public-keys' %s.pub" % (secret, key, key[:-4]))
    return errors


def check_security_mode(job, expect):
    """Every role reads PS_INSECURE from the same ConfigMap key; returns (errors, its value)."""
    refs = set()
    for c in job.containers:
        ref = ((c.env.get("PS_INSECURE") or {}).get("valueFrom") or {}).get("configMapKeyRef")
        refs.add((ref or {}).get("name", "(none)") + "/" + (ref or {}).get("key", "(none)"))
    if len(refs) != 1:
        return ["every container needs env PS_INSECURE from one ConfigMap key, got %s" % sorted(refs)], None
    cm_name, key = refs.pop().split("/")
    cm = [d for d in job.of_kind("ConfigMap") if d.name == cm_name]
    value = ((cm[0].obj.get("data") or {}).get(key)) if cm else None
    errors = [] if value in ("true", "false") else ["ConfigMap %s: %s must be \"true\" or \"false\", got %r" % (cm_name, key, value)]
    if expect is not None and value != expect:
        errors.append("ConfigMap %s: %s is %r, expected %r" % (cm_name, key, value, expect))
    return errors, value


# ----------------------------------------------------------------------------
# Command line


def load(paths):
    docs = []
    for p in paths:
        docs += ks.load_kustomization(p) if os.path.isdir(p) else ks.load_file(p)
    return docs


def project_errors(job, args, secrets):
    errors = check_flags(job, args.bin_dir)
    for check in (check_containers, check_services, check_scheduler_address, check_consistency, check_counts,
                  check_worker_identity, check_server_volumes, check_scheduler_state, check_server_budget):
        errors += check(job)
    errors += check_keys(job, secrets)
    if secrets is not None:
        errors += check_key_pairs(secrets)
    mode_errors, mode = check_security_mode(job, args.expect_insecure)
    return errors + mode_errors, mode


def main(argv):
    p = argparse.ArgumentParser(prog="validate_manifests.py", description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", metavar="PATH", help="kustomization directory or YAML file")
    p.add_argument("--bin-dir", help="where ps_scheduler, ps_server, ps_worker are (their --helpfull)")
    p.add_argument("--secrets", help="the Secrets from make_secrets.sh, checked with the manifests")
    p.add_argument("--expect-insecure", choices=("true", "false"), help="ConfigMap ps-security's value")
    args = p.parse_args(argv)
    try:
        docs = load(args.paths)
        secret_docs = ks.load_file(args.secrets) if args.secrets else []
    except (OSError, ValueError, ks.yaml.YAMLError) as e:
        print("validate_manifests: %s" % e, file=sys.stderr)
        return 2
    errors = []
    for d in docs + secret_docs:
        schema = ks.check_schema(d)
        errors += schema or ks.check_api_rules(d)
    mode = None
    if not errors:  # the job's checks rely on well-typed objects
        secrets = {d.name: d.obj.get("data") or {} for d in secret_docs if d.kind == "Secret"} if args.secrets else None
        more, mode = project_errors(Job(docs), args, secrets)
        errors += more
    for e in errors:
        print(e)
    print("validate_manifests: %d objects%s, %d problems; schema: %s; flags: %s; security: insecure=%s" % (
        len(docs), " + %d Secrets" % len(secret_docs) if secret_docs else "", len(errors), ks.SCHEMA_SOURCE,
        "checked against %s" % args.bin_dir if args.bin_dir else "NOT checked (no --bin-dir)", mode))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
