# Sourced by the script tests. kill_job_leftovers BIN_DIR PIDS_FILE...: kills,
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
