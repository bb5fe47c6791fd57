# shellcheck shell=bash disable=SC2317  # end_test is called through trap
# The one library of the script tests (tests/*.sh): each sources it, calls
# begin_test or begin_job_test, and reports with pass / fail / die / skip /
# show. Nothing here is redefined by a test.
#
# poll SECONDS CMD...: runs CMD every 0.1 s until it succeeds (returns 0) or
# SECONDS pass (returns 1). pid_gone PID: whether that process has exited.
poll() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1  # pacing between checks of the condition, not synchronisation
  done
}
pid_gone() { ! kill -0 "$1" 2>/dev/null; }

# kill_job_leftovers BIN_DIR PIDS_FILE...: kills,
# by pid, every process named in the launcher's pids.txt files ("name pid"
# lines) that is still one of BIN_DIR's binaries, or a Python worker of the
# build's package (BIN_DIR/../python: BIN_DIR/ps_torch_worker and
# BIN_DIR/ps_torch_spam_worker exec python3 on their scripts there); a pid
# reused by something else is left alone.
kill_job_leftovers() {
  local bin="$1" f name pid cmd
  shift
  for f in "$@"; do
    [[ -f "$f" ]] || continue
    while read -r name pid; do
      cmd="$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")"
      if [[ "$cmd" == "$bin/"* || "$cmd" == *" $(dirname "$bin")/python/"* ]]; then
        echo "cleanup: killing leftover $name (pid $pid)"
        kill -9 "$pid" 2>/dev/null
      fi
    done <"$f"
  done
}

# The frame of a test script:
#   begin_test NAME
# makes $tmp (removed at the end, kept when a check failed), sets failed=0,
# and on exit kills what any pids.txt under $tmp names (with $bin set: the
# leftovers of launch_job runs), then runs the script's extra_cleanup if it
# defines one. SIGINT/SIGTERM exit 130.
#   begin_job_test NAME [BIN_DIR]
# the same after resolving BIN_DIR (default: $root/build/bin) into $bin.
begin_test() {
  tmp="$(mktemp -d "/tmp/$1.XXXXXX")"
  failed=0
  trap end_test EXIT
  trap 'echo "interrupted"; failed=1; exit 130' INT TERM
}

begin_job_test() {
  bin="${2:-$root/build/bin}"
  bin="$(cd "$bin" && pwd)" || { echo "FAIL: bin dir '${2:-}' not found"; exit 1; }
  begin_test "$1"
}

end_test() {
  local pids=()
  if [[ -n "${bin:-}" ]]; then
    mapfile -t pids < <(find "$tmp" -name pids.txt 2>/dev/null)
    kill_job_leftovers "$bin" "${pids[@]}"
  fi
  if declare -F extra_cleanup >/dev/null; then extra_cleanup; fi
  if [[ $failed -eq 0 ]]; then rm -rf "$tmp"; else echo "outputs kept in $tmp"; fi
}

# pass TEXT / fail TEXT: one check's outcome (fail marks the test failed and
# goes on); die TEXT: fails and exits at once; skip REASON: exits 77 (ctest's
# SKIP_RETURN_CODE here) saying why; show FILE: the end of a run's output.
pass() { echo "  ok: $*"; }
fail() { echo "  FAIL: $*"; failed=1; }
die() { echo "  FAIL: $*"; failed=1; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
show() { echo "  --- last lines of $1:"; tail -n 15 "$1" | sed 's/^/  | /'; }
