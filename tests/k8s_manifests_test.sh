#!/usr/bin/env bash
# The Kubernetes manifests of scripts/k8s (docs/deployment.md):
#   (a) scripts/k8s/base and the overlay scripts/k8s/insecure, with the Secrets
#       of make_secrets.sh, pass scripts/k8s/validate_manifests.py: the
#       Kubernetes API schema (Debian's python3-kubernetes), the API server's
#       rules, and the job's own invariants, flags checked against BIN_DIR's
#       binaries; make_secrets.sh leaves no key on disk;
#   (b) broken copies fail it, each for its own reason: an unknown field, a
#       wrong type, an unknown apiVersion, a flag no binary accepts, a
#       StatefulSet without its headless Service, a --port that is not the
#       container's, a --num_workers that is not the Job's, a role without
#       its keys, a Service port leading nowhere, Secrets of another job size;
#   (c) scripts/k8s/ps-entrypoint.sh, with a stand-in binary that prints its
#       arguments: the key copied private, first start vs restart of a server
#       (its own checkpoint, another rank's, two), the scheduler's --restore,
#       PS_INSECURE, a missing key; every flag it hands on is one the real
#       binary accepts;
#   (d) the manifests' own args, moved onto 127.0.0.1 (ports, paths and the
#       Service name replaced, a small training), run the real binaries through
#       the entrypoint with make_secrets.sh's keys laid out as the Secret
#       volumes would be: the job forms with CurveZMQ, trains and ends, the
#       servers' checkpoints are where the entrypoint will look after a restart.
# Prints SKIP and exits 77 without python3-kubernetes / python3-yaml.
#
#   tests/k8s_manifests_test.sh [BIN_DIR]      (default build/bin)
#
# Takes about 20 s (2 cores).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
k8s="$root/scripts/k8s"
bin="$(cd "${1:-$root/build/bin}" && pwd)"
py=/usr/bin/python3
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
pids=()
# shellcheck disable=SC2317  # called by end_test
extra_cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
begin_test k8s_manifests_test

if ! reason="$("$py" -c 'import yaml, kubernetes.client' 2>&1)"; then
  echo "SKIP: the schema check needs Debian's python3-kubernetes and python3-yaml: ${reason##*$'\n'}"
  exit 77
fi
for b in ps_scheduler ps_server ps_worker ps_keygen; do
  [[ -x "$bin/$b" ]] || { echo "FAIL: $bin/$b not built"; exit 1; }
done

validate() { "$py" "$k8s/validate_manifests.py" --bin-dir "$bin" "$@"; }

# ---------------------------------------------------------------------------
# (a) the manifests as they are

check_valid() {
  echo "(a) scripts/k8s/base and scripts/k8s/insecure validate"
  mkdir -p "$tmp/keytmp"
  TMPDIR="$tmp/keytmp" "$k8s/make_secrets.sh" --bin-dir "$bin" >"$tmp/secrets.yaml"
  if [[ -z "$(ls -A "$tmp/keytmp")" ]]; then pass "make_secrets.sh left no key on disk"; else
    fail "make_secrets.sh left $(ls -A "$tmp/keytmp")"; fi
  if validate --secrets "$tmp/secrets.yaml" --expect-insecure false "$k8s/base" >"$tmp/base.out" 2>&1; then
    pass "base: $(tail -1 "$tmp/base.out")"
  else
    fail "base does not validate:"; cat "$tmp/base.out"
  fi
  if validate --expect-insecure true "$k8s/insecure" >"$tmp/insecure.out" 2>&1; then
    pass "insecure overlay: $(tail -1 "$tmp/insecure.out")"
  else
    fail "insecure overlay does not validate:"; cat "$tmp/insecure.out"
  fi
  check_kustomize
}

# validate_manifests.py renders the kustomizations itself; where a kubectl
# is installed (none in Debian 12 that does not conflict), its own rendering
# must validate the same way.
check_kustomize() {
  local d mode
  if ! kubectl kustomize "$k8s/base" >"$tmp/kustomize-base.yaml" 2>"$tmp/kustomize.err"; then
    echo "  (kubectl kustomize not run: $(head -c 200 "$tmp/kustomize.err" 2>/dev/null || echo 'no kubectl'))"
    return 0
  fi
  for d in base:false insecure:true; do
    mode="${d#*:}"; d="${d%%:*}"
    if kubectl kustomize "$k8s/$d" >"$tmp/kustomize-$d.yaml" 2>"$tmp/kustomize.err" &&
       validate --expect-insecure "$mode" "$tmp/kustomize-$d.yaml" >"$tmp/kustomize-$d.out" 2>&1; then
      pass "kubectl kustomize $d: $(tail -1 "$tmp/kustomize-$d.out")"
    else
      fail "kubectl kustomize $d:"; cat "$tmp/kustomize.err" "$tmp/kustomize-$d.out" 2>/dev/null
    fi
  done
}

# ---------------------------------------------------------------------------
# (b) broken copies must fail, each with its own message

# broken NAME FILE SED_EXPR EXPECTED [SECRETS]: a copy of base with FILE
# edited by SED_EXPR must fail validation with EXPECTED in the output.
broken() {
  local name="$1" file="$2" expr="$3" expected="$4" secrets="${5:-$tmp/secrets.yaml}" dir="$tmp/broken-$1"
  cp -r "$k8s/base" "$dir"
  sed -i -e "$expr" "$dir/$file"
  if cmp -s "$k8s/base/$file" "$dir/$file"; then
    fail "$name: '$expr' changed nothing in $file (the test is stale)"; return
  fi
  if validate --secrets "$secrets" "$dir" >"$dir.out" 2>&1; then
    fail "$name: a broken $file validated"; return
  fi
  if grep -qF -- "$expected" "$dir.out"; then pass "$name: refused ($expected)"; else
    fail "$name: refused, but not with '$expected':"; cat "$dir.out"; fi
}

check_broken() {
  echo "(b) broken copies are refused"
  broken unknown-field server.yaml 's/^  serviceName:/  serviceNam:/' "unknown field 'serviceNam'"
  broken wrong-type server.yaml 's/containerPort: 9200/containerPort: "9200"/' "expected int, got a string"
  broken api-version worker.yaml 's#^apiVersion: batch/v1#apiVersion: batch/v2#' "is not served by the Kubernetes API"
  broken unknown-flag worker.yaml 's/--shm=false/--shm_off=true/' "--shm_off: ps_worker does not accept it"
  broken headless server.yaml 's/^  serviceName: ps-server/  serviceName: ps-servers/' "must be a headless Service"
  broken port server.yaml 's/--port=9200/--port=9300/' "--port=9300 is not the container port named 'server'"
  broken counts scheduler.yaml 's/--num_workers=2/--num_workers=3/' "--num_workers=3 but"
  broken no-keys server.yaml '/--authorized_keys=/d' "--authorized_keys missing"
  broken formed server.yaml '/name: PS_FORMED_SERVERS/{n;s/value: "2"/value: "3"/}' \
    "PS_FORMED_SERVERS=3 but the scheduler's --num_servers=2"
  broken not-elastic scheduler.yaml '/^            - --elastic$/d' "PS_ELASTIC=true but the scheduler runs without --elastic"
  broken service-port scheduler.yaml 's/targetPort: scheduler/targetPort: sched/' "targetPort 'sched' is no port of"
  broken consistency scheduler.yaml 's/--consistency=sync/--consistency=async/' "consistency sync but the scheduler's --consistency=async"
  # Here the manifests are right (an edit that changes nothing the checks
  # look at) and the Secrets are for one worker instead of two.
  TMPDIR="$tmp/keytmp" "$k8s/make_secrets.sh" --bin-dir "$bin" --workers 1 >"$tmp/secrets-1.yaml"
  broken secrets worker.yaml 's/backoffLimit: 6/backoffLimit: 5/' "Secret ps-worker-keys has no ps-worker-1.key" \
    "$tmp/secrets-1.yaml"
}

# ---------------------------------------------------------------------------
# (c) the entrypoint, with a stand-in binary

# entry OUT [ENV...] -- BINARY ARGS...: runs ps-entrypoint with the stand-ins;
# OUT.args gets the arguments the binary was given, OUT.err its messages.
entry() {
  local out="$1" envs=()
  shift
  while [[ "$1" != -- ]]; do envs+=("$1"); shift; done
  shift
  env PS_BIN_DIR="$tmp/stub" "${envs[@]}" "$k8s/ps-entrypoint.sh" "$@" >"$out.args" 2>"$out.err"
}

# has OUT ARG / lacks OUT PATTERN: an exact argument, or none matching.
has() { grep -qxF -- "$2" "$1.args"; }
lacks() { ! grep -q -- "$2" "$1.args"; }

# help_file BINARY: a file with the real BINARY's --helpfull (made once).
help_file() {
  local f="$tmp/help.$1"
  [[ -f "$f" ]] || "$bin/$1" --helpfull >"$f" 2>&1 || true  # abseil exits 1 after help
  printf '%s' "$f"
}

# accepted OUT BINARY: every flag handed on is in the real BINARY's --helpfull.
accepted() {
  local flag bad="" help
  help="$(help_file "$2")"
  for flag in $(sed -n 's/^--\([A-Za-z0-9_]*\).*/\1/p' "$1.args"); do
    grep -qE "^    --$flag \(" "$help" || bad+=" --$flag"
  done
  [[ -z "$bad" ]] || { fail "$2 does not accept$bad (handed on by ps-entrypoint)"; return 1; }
}

make_stubs() {
  mkdir -p "$tmp/stub" "$tmp/c/keys" "$tmp/c/ckpt" "$tmp/c/two"
  local b
  for b in ps_scheduler ps_server ps_worker; do
    printf '#!/bin/sh\nprintf "%%s\\n" "$@"\n' >"$tmp/stub/$b"
    chmod +x "$tmp/stub/$b"
  done
  echo "secret" >"$tmp/c/keys/ps-server-1.key"
  chmod 440 "$tmp/c/keys/ps-server-1.key"  # as a Secret volume with an fsGroup shows it
  touch "$tmp/c/two/server-0.ckpt" "$tmp/c/two/server-2.ckpt"
}

check_entry_server() {
  local o="$tmp/c/s" key="--secret_key_file=$tmp/c/keys/ps-server-1.key" ck="--checkpoint_dir=$tmp/c/ckpt"
  entry "$o-first" POD_NAME=ps-server-1 PS_RUN_DIR="$tmp/c/run1" -- ps_server "$ck" "$key" --port=9200
  local copy="$tmp/c/run1/ps-server-1.key"
  if has "$o-first" "--secret_key_file=$copy" && has "$o-first" --port=9200 && lacks "$o-first" restore_dir &&
     has "$o-first" --rank=1 &&
     [[ $(( 8#$(stat -c %a "$copy") & 8#077 )) -eq 0 ]] && cmp -s "$copy" "$tmp/c/keys/ps-server-1.key"; then
    pass "server, first start: --rank=1 (the ordinal), no --restore_dir; the key copied, mode $(stat -c %a "$copy")"
  else fail "server, first start:"; cat "$o-first.args" "$o-first.err"; fi
  accepted "$o-first" ps_server || true
  touch "$tmp/c/ckpt/server-1.ckpt"
  entry "$o-again" POD_NAME=ps-server-1 PS_RUN_DIR="$tmp/c/run1" PS_SAME_ADDRESS_WAIT_S=0 -- ps_server "$ck" "$key"
  if has "$o-again" "--restore_dir=$tmp/c/ckpt" && has "$o-again" --rank=1 && grep -q "same pod" "$o-again.err"; then
    pass "server, restart in the same pod: --restore_dir --rank=1, after the same-address wait"
  else fail "server, restart:"; cat "$o-again.args" "$o-again.err"; fi
  accepted "$o-again" ps_server || true
  mv "$tmp/c/ckpt/server-1.ckpt" "$tmp/c/ckpt/server-0.ckpt"
  if ! entry "$o-other" POD_NAME=ps-server-1 PS_RUN_DIR="$tmp/c/run2" -- ps_server "$ck" "$key" &&
     grep -q "none of rank 1" "$o-other.err"; then pass "server whose volume holds only rank 0's checkpoint: refused"
  else fail "server with another rank's checkpoint started:"; cat "$o-other.args" "$o-other.err"; fi
  if ! entry "$o-two" POD_NAME=ps-server-1 PS_RUN_DIR="$tmp/c/run3" -- ps_server "--checkpoint_dir=$tmp/c/two" "$key" &&
     grep -q "ranks 0 2" "$o-two.err"; then pass "server with two foreign checkpoints: refused"
  else fail "server with two checkpoints started:"; cat "$o-two.args" "$o-two.err"; fi
}

# PS_ELASTIC=true, a job formed with 2 servers: pods 0 and 1 take their
# ordinals and drain on SIGTERM; pod 3, added by scaling up, joins, or takes
# its own checkpoint's rank back after a restart.
check_entry_elastic() {
  local o="$tmp/c/e" key="--secret_key_file=$tmp/c/keys/ps-server-1.key" ck="--checkpoint_dir=$tmp/c/el"
  local el=(PS_ELASTIC=true PS_FORMED_SERVERS=2)
  mkdir -p "$tmp/c/el"
  entry "$o-one" "${el[@]}" POD_NAME=ps-server-1 PS_RUN_DIR="$tmp/c/erun1" -- ps_server "$ck" "$key"
  if has "$o-one" --rank=1 && has "$o-one" --drain && lacks "$o-one" join; then
    pass "elastic, pod 1 of 2: --rank=1 and --drain (a scale-down moves its slices away first)"
  else fail "elastic pod 1:"; cat "$o-one.args" "$o-one.err"; fi
  entry "$o-new" "${el[@]}" POD_NAME=ps-server-3 PS_RUN_DIR="$tmp/c/erun2" -- ps_server "$ck" "$key"
  if has "$o-new" --join && has "$o-new" --drain && lacks "$o-new" rank && lacks "$o-new" restore_dir; then
    pass "elastic, pod 3 of a job formed with 2 (scaled up): --join --drain, no --rank"
  else fail "elastic pod 3:"; cat "$o-new.args" "$o-new.err"; fi
  accepted "$o-new" ps_server || true
  touch "$tmp/c/el/server-5.ckpt"
  entry "$o-back" "${el[@]}" POD_NAME=ps-server-3 PS_RUN_DIR="$tmp/c/erun3" -- ps_server "$ck" "$key"
  if has "$o-back" "--restore_dir=$tmp/c/el" && lacks "$o-back" rank && lacks "$o-back" join; then
    pass "elastic, pod 3 restarted with rank 5's checkpoint: --restore_dir alone (the rank from the file)"
  else fail "elastic pod 3 restarted:"; cat "$o-back.args" "$o-back.err"; fi
  if ! entry "$o-bad" PS_ELASTIC=true POD_NAME=ps-server-3 PS_RUN_DIR="$tmp/c/erun4" -- ps_server "$ck" "$key" &&
     grep -q "needs PS_FORMED_SERVERS" "$o-bad.err"; then pass "PS_ELASTIC=true without PS_FORMED_SERVERS: refused"
  else fail "PS_ELASTIC without PS_FORMED_SERVERS:"; cat "$o-bad.args" "$o-bad.err"; fi
}

check_entry_others() {
  local o="$tmp/c/o" state="$tmp/c/job.state"
  entry "$o-sched" PS_RUN_DIR="$tmp/c/run4" -- ps_scheduler "--state_file=$state"
  echo state >"$state"
  entry "$o-sched2" PS_RUN_DIR="$tmp/c/run4" -- ps_scheduler "--state_file=$state"
  if lacks "$o-sched" --restore && has "$o-sched2" --restore; then
    pass "scheduler: --restore only once its state file exists"
  else fail "scheduler --restore:"; cat "$o-sched.args" "$o-sched2.args"; fi
  accepted "$o-sched2" ps_scheduler || true
  entry "$o-insecure" PS_INSECURE=true PS_RUN_DIR="$tmp/c/run5" -- ps_worker "--secret_key_file=$tmp/c/none.key" \
    --scheduler_public_key=/x.pub --rank=1
  if has "$o-insecure" --insecure && has "$o-insecure" --rank=1 && lacks "$o-insecure" key; then
    pass "PS_INSECURE=true: the key flags dropped, --insecure added"
  else fail "PS_INSECURE=true:"; cat "$o-insecure.args"; fi
  accepted "$o-insecure" ps_worker || true
  if ! entry "$o-nokey" PS_RUN_DIR="$tmp/c/run6" -- ps_worker "--secret_key_file=$tmp/c/none.key" &&
     grep -q "make_secrets.sh" "$o-nokey.err"; then pass "a missing key file stops the pod, naming make_secrets.sh"
  else fail "a missing key file:"; cat "$o-nokey.args" "$o-nokey.err"; fi
}

# run COMMAND: a user's program as the worker, the job in its environment.
check_entry_run() {
  local o="$tmp/c/r" key="$tmp/c/keys/ps-worker-1.key" show='env | grep "^PS_" | sort; printf "%s\n" "$@"'
  echo "secret" >"$key" && chmod 440 "$key"
  entry "$o-run" PS_SCHEDULER=ps-scheduler:9000 JOB_COMPLETION_INDEX=1 PS_SECRET_KEY_FILE="$key" \
    PS_SCHEDULER_PUBLIC_KEY=/p.pub PS_RUN_DIR="$tmp/c/run7" -- run sh -c "$show" sh --epochs=2
  if has "$o-run" PS_SCHEDULER=ps-scheduler:9000 && has "$o-run" PS_RANK=1 && has "$o-run" --epochs=2 &&
     has "$o-run" "PS_SECRET_KEY_FILE=$tmp/c/run7/ps-worker-1.key" && has "$o-run" PS_SCHEDULER_PUBLIC_KEY=/p.pub &&
     [[ $(( 8#$(stat -c %a "$tmp/c/run7/ps-worker-1.key") & 8#077 )) -eq 0 ]]; then
    pass "run: the command gets PS_SCHEDULER, PS_RANK from the Indexed Job, a private copy of its key, its args"
  else fail "run:"; cat "$o-run.args" "$o-run.err"; fi
  entry "$o-plain" PS_SCHEDULER=s:1 PS_RANK=0 PS_INSECURE=true PS_SECRET_KEY_FILE="$key" -- run sh -c "$show"
  if has "$o-plain" PS_INSECURE=true && lacks "$o-plain" PS_SECRET_KEY_FILE; then
    pass "run with PS_INSECURE=true: no key handed on"
  else fail "run, insecure:"; cat "$o-plain.args"; fi
  if ! entry "$o-nosched" PS_RANK=0 -- run true && grep -q "set PS_SCHEDULER" "$o-nosched.err"; then
    pass "run without PS_SCHEDULER: refused, naming it"
  else fail "run without PS_SCHEDULER:"; cat "$o-nosched.err"; fi
}

# ---------------------------------------------------------------------------
# (d) the manifests' args, on 127.0.0.1, through the entrypoint, with real keys

# manifest_args KIND: the args of the ps container of the base's KIND, one per line.
manifest_args() {
  "$py" - "$k8s" "$1" <<'PY'
import sys
sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
sys.path.insert(0, sys.argv[1])
import k8s_schema
for d in k8s_schema.load_kustomization(sys.argv[1] + "/base"):
    if d.kind == sys.argv[2]:
        print("\n".join(d.obj["spec"]["template"]["spec"]["containers"][0]["args"]))
PY
}

# secret_volume SECRET DIR MODE: the Secret's files as its volume shows them.
secret_volume() {
  "$py" - "$tmp/secrets.yaml" "$1" "$2" "$3" <<'PY'
import base64, os, sys, yaml
path, name, out, mode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4], 8)
os.makedirs(out, exist_ok=True)
for d in yaml.safe_load_all(open(path)):
    if d and d["metadata"]["name"] == name:
        for key, value in d["data"].items():
            with open(os.path.join(out, key), "wb") as f:
                f.write(base64.b64decode(value))
            os.chmod(os.path.join(out, key), mode)
PY
}

# local_args KIND POD INDEX: KIND's manifest args for pod POD (its files
# under $tmp/e/POD) on 127.0.0.1; a short training for the workers.
local_args() {
  local metrics='/^--metrics_/d'
  grep -qE '^    --metrics_port \(' "$(help_file ps_server)" &&
    metrics='s/^--metrics_port=.*/--metrics_port=0/; s/^--metrics_host=.*/--metrics_host=127.0.0.1/'
  manifest_args "$1" | sed -e 's/^--host=0\.0\.0\.0$/--host=127.0.0.1/' -e 's/^--port=[0-9]*$/--port=0/' \
    -e 's/^--advertise_host=\$(POD_IP)$/--advertise_host=127.0.0.1/' -e "s#^--scheduler=.*#--scheduler=$endpoint#" \
    -e 's/^--register_timeout=.s*/--register_timeout=60s/' -e 's/^--epochs=.*/--epochs=1/' \
    -e "s#/etc/ps/#$tmp/e/$2/etc/ps/#; s#/var/lib/ps/#$tmp/e/$2/var/lib/ps/#" \
    -e "s/\$(POD_NAME)/$2/; s/\$(JOB_COMPLETION_INDEX)/$3/" -e "$metrics"
  [[ "$1" != Job ]] || printf '%s\n' --train_limit=512 --test_limit=256
}

# pod KIND POD INDEX SECRET BINARY [STDOUT]: lays out the pod's volumes, then
# starts it in the background (stdout to STDOUT, default $tmp/e/POD.out;
# stderr to $tmp/e/POD.log).
pod() {
  local dir="$tmp/e/$2" out="${6:-$tmp/e/$2.out}" args
  secret_volume "$4" "$dir/etc/ps/keys" 440
  secret_volume ps-public-keys "$dir/etc/ps/public" 444
  mkdir -p "$dir/var/lib/ps/checkpoints" "$dir/var/lib/ps/scheduler"
  mapfile -t args < <(local_args "$1" "$2" "$3")
  timeout 120 env PS_BIN_DIR="$bin" PS_RUN_DIR="$dir/run/ps" POD_NAME="$2" PS_INSECURE=false \
    "$k8s/ps-entrypoint.sh" "$5" "${args[@]}" >"$out" 2>"$dir.log" &
  pids+=($!)
}

start_scheduler() {
  mkdir -p "$tmp/e"
  mkfifo "$tmp/e/sched.fifo"
  endpoint=unused
  pod Deployment ps-scheduler 0 ps-scheduler-key ps_scheduler "$tmp/e/sched.fifo"
  # The scheduler prints its endpoint once listening: read that line, then let cat drain the rest.
  local line=""
  exec 3<"$tmp/e/sched.fifo"
  read -r -t 30 line <&3 || true
  cat <&3 >"$tmp/e/ps-scheduler.out" &
  exec 3<&-
  endpoint="${line##*tcp://}"
  [[ "$line" == "ps_scheduler listening on tcp://127.0.0.1:"* ]] ||
    { fail "the scheduler did not start: '$line'"; tail -5 "$tmp/e/ps-scheduler.log"; return 1; }
}

check_local_job() {
  echo "(d) the manifests' args on 127.0.0.1, through ps-entrypoint, with make_secrets.sh's keys"
  start_scheduler || return 0
  local sched_pid="${pids[-1]}" i rc others=()
  pod StatefulSet ps-server-0 0 ps-server-keys ps_server; others+=("${pids[-1]}")
  pod StatefulSet ps-server-1 1 ps-server-keys ps_server; others+=("${pids[-1]}")
  pod Job ps-worker-0 0 ps-worker-keys ps_worker; others+=("${pids[-1]}")
  pod Job ps-worker-1 1 ps-worker-keys ps_worker; others+=("${pids[-1]}")
  for i in "${others[@]}" "$sched_pid"; do
    rc=0; wait "$i" || rc=$?
    [[ $rc -eq 0 ]] || fail "a process of the job (pid $i) exited with $rc"
  done
  check_local_outcome
}

check_local_outcome() {
  local e="$tmp/e" n r ranks=""
  if grep -q '"event": *"done"' "$e/ps-worker-0.out" && grep -q '"event": *"done"' "$e/ps-worker-1.out" &&
     grep -q "CurveZMQ on" "$e/ps-scheduler.log"; then
    pass "the job formed with CurveZMQ, both workers trained and ended"
  else fail "the job did not run to its end:"; tail -3 "$e"/*.log; return; fi
  for n in 0 1; do
    entry "$e/again-$n" POD_NAME="ps-server-$n" PS_RUN_DIR="$e/again-run-$n" -- ps_server \
      "--checkpoint_dir=$e/ps-server-$n/var/lib/ps/checkpoints"
    r="$(sed -n 's/^--rank=//p' "$e/again-$n.args")"
    ranks+="$r"
    has "$e/again-$n" "--restore_dir=$e/ps-server-$n/var/lib/ps/checkpoints" || ranks+="?"
  done
  if [[ "$ranks" == 01 ]]; then
    pass "after the job pod ps-server-N's volume holds rank N's checkpoint: a restart takes rank N back"
  else fail "restart ranks from the servers' checkpoints: '$ranks'"; ls -R "$e"/ps-server-*/var; fi
  entry "$e/again-sched" PS_RUN_DIR="$e/again-run-s" -- ps_scheduler \
    "--state_file=$e/ps-scheduler/var/lib/ps/scheduler/job.state"
  if has "$e/again-sched" --restore; then pass "the scheduler's state file is there: a restart takes the job back"
  else fail "no scheduler state file"; ls -R "$e/ps-scheduler/var"; fi
}

main() {
  check_valid
  check_broken
  echo "(c) scripts/k8s/ps-entrypoint.sh"
  make_stubs
  check_entry_server
  check_entry_elastic
  check_entry_others
  check_entry_run
  check_local_job
  if [[ $failed -eq 0 ]]; then echo "k8s_manifests: all passed"; else echo "k8s_manifests: FAILED"; exit 1; fi
}

main
