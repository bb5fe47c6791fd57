# shellcheck shell=bash disable=SC2317  # end_job_test is called through trap
# Sourced by the script tests.
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

# The frame of a job test script, after it set $root:
#   begin_job_test NAME [BIN_DIR]
# resolves BIN_DIR (default: build/bin) into $bin, makes $tmp (removed at the
# end, kept when a check failed), sets failed=0, defines pass / fail / show,
# and on exit kills what any pids.txt under $tmp names, then runs the
# script's extra_cleanup if it defines one. SIGINT/SIGTERM exit 130.
begin_job_test() {
  bin="${2:-$root/build/bin}"
  bin="$(cd "$bin" && pwd)" || { echo "FAIL: bin dir '${2:-}' not found"; exit 1; }
  tmp="$(mktemp -d "/tmp/$1.XXXXXX")"
  failed=0
  trap end_job_test EXIT
  trap 'echo "interrupted"; failed=1; exit 130' INT TERM
}

end_job_test() {
  local pids=()
  mapfile -t pids < <(find "$tmp" -name pids.txt 2>/dev/null)
  kill_job_leftovers "$bin" "${pids[@]}"
  if declare -F extra_cleanup >/dev/null; then extra_cleanup; fi
  if [[ $failed -eq 0 ]]; then rm -rf "$tmp"; else echo "outputs kept in $tmp"; fi
}

pass() { echo "  ok: $*"; }
fail() { echo "  FAIL: $*"; failed=1; }
show() {  # file: the end of a run's output, on failure
  echo "  --- last lines of $1:"; tail -n 15 "$1" | sed 's/^/  | /'
}
