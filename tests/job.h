#ifndef PS_TESTS_JOB_H_
#define PS_TESTS_JOB_H_

// A job of real binaries, each its own process on 127.0.0.1 (or ipc://
// sockets) with ephemeral ports, assembled process by process so that a test
// can SIGKILL and restart any of them; and the small helpers the
// multi-process tests share. The one multi-process harness of the tests
// (tests/cluster_fixture.h is the in-process one). Not thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/child_process.h"
#include "tests/cluster_fixture.h"

namespace ps::testing {

// The whole file, or "" when it cannot be read.
std::string ReadFile(const std::string& path);
bool Exists(const std::string& path);
// The integer after "KEY=" in `line` (e.g. IntField(line, "start_step")), or
// -1 when the line has no such field.
int64_t IntField(const std::string& line, const std::string& key);
// The same as a double (dense_sum=...), -1 when missing.
double DoubleField(const std::string& line, const std::string& key);

// The value of top-level field `key` of the JSON object on `line`, as its
// text (a string with its quotes, a number, an array...), wherever it
// stands among the fields; nullopt when the line is not such an object or
// has no such field. What the workers' event lines need, no more: no
// escapes beyond \" inside strings are interpreted.
std::optional<std::string> JsonField(const std::string& line, const std::string& key);
// The lines of `text` whose "event" field is "`event`", in order.
std::vector<std::string> JsonEvents(const std::string& text, const std::string& event);
// JsonField as a number; `fallback` when missing or not a number.
double JsonNumber(const std::string& line, const std::string& key, double fallback = -1);
// The test accuracy in rank 0's "done" event among the workers' output
// `stdout_text`; -1 when there is none.
double FinalAccuracy(const std::string& stdout_text);

// Polls `condition` every 20 ms until it holds or `timeout` passes; returns
// whether it held. For conditions only a file shows (a process's events or
// output: it cannot be asked), so each test bounds its wait.
template <typename Condition>
bool WaitFor(Condition condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return condition();
}

// Soak tests: the seed of their random choices (PS_SOAK_SEED when set, so
// that a printed seed reproduces a run; else a random one), and the
// liveness flags of their nodes (heartbeats every 0.2 s, 2 s timeouts).
uint32_t SoakSeed();
std::vector<std::string> SoakLiveness();

// A soak's ps_exact_sum worker: `steps` steps of `step_ms` emulated compute
// over a dense tensor of `dense` elements in 16 KiB slices, as rank `rank`
// in `consistency`, with SoakLiveness().
std::vector<std::string> SoakWorkerFlags(int rank, int steps, int64_t dense, int step_ms,
                                         const std::string& consistency);

// Exports the checkpoints in `checkpoint_dir` to `npz` (ps_export) and
// returns the sum of tensor `tensor`'s elements there; the export's or the
// file's error otherwise.
absl::StatusOr<double> ExportedSum(const std::string& checkpoint_dir, const std::string& npz,
                                   const std::string& tensor);

// Expects `p` to exit with 0 within `deadline` (gtest failures name `what`
// and show its stderr).
void ExpectExitZero(ChildProcess& p, const std::string& what, absl::Duration deadline);

// Every process is stopped by its pid when the job goes away (also when the
// test failed); the job's directory outlives them. Processes are kept in the
// order they were started, killed ones included: indices stay valid, but a
// reference into servers() or workers() does not survive the next Start.
class Job {
 public:
  Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::string& dir() const { return dir_; }
  std::string checkpoints() const { return dir_ + "/ckpt"; }
  // The scheduler endpoint the next server or worker is told.
  const std::string& endpoint() const { return endpoint_; }

  // Starts a scheduler for `servers` x `workers` (--port=0, the counts and
  // --register_timeout=30s, then `flags`, which may override them, e.g.
  // --bind=ipc://...) and waits for the endpoint it listens on, which later
  // nodes are told. The first one logs to
  // scheduler.log, the next ones (restarts) to scheduler.restart.log,
  // scheduler.restart2.log, ... Errors: the start's, or the wait's.
  absl::Status StartScheduler(int servers, int workers, std::vector<std::string> flags = {});
  // Starts a server (--scheduler, --num_threads=1, --port=0, then `flags`).
  // Its log: server<i>.log the first time, then server<i>.restart.log, ...
  absl::Status StartServer(int i, std::vector<std::string> flags = {});
  // Starts `binary` (ps_worker or ps_exact_sum) with --scheduler added; its
  // log: worker<n>.log, n counting every worker started so far.
  absl::Status StartWorker(const std::string& binary, std::vector<std::string> flags);
  // StartWorker `workers` times with the same flags.
  absl::Status StartWorkers(const std::string& binary, int workers, const std::vector<std::string>& flags);
  // A scheduler, `servers` servers and `workers` copies of `binary` with
  // `flags`, all with the defaults above.
  absl::Status StartJob(int servers, int workers, const std::string& binary, const std::vector<std::string>& flags);

  // Every process started (workers, then servers, then schedulers) must exit
  // 0, each within `deadline` (gtest failures show its stderr).
  void ExpectAllExitZero(absl::Duration deadline = absl::Seconds(90));

  // The text of <name>.log in the job's directory ("" before it exists).
  // For a test about a message; a test about what happened reads events.
  std::string Log(const std::string& name) const;

  // The structured events (common/base/events.h) of the process whose log
  // is <name>.log (every node writes them to <name>.events): the
  // lines of kind `kind` whose fields match `where`, in order. A field
  // matches its value as JSON text (1, true) or as a string's contents
  // (server for "server").
  using Fields = std::vector<std::pair<std::string, std::string>>;
  std::vector<std::string> Events(const std::string& name, const std::string& kind, const Fields& where = {}) const;
  // The same over every scheduler started (the first and each restored one).
  std::vector<std::string> SchedulerEvents(const std::string& kind, const Fields& where = {}) const;
  int CountSchedulerEvents(const std::string& kind, const Fields& where = {}) const {
    return static_cast<int>(SchedulerEvents(kind, where).size());
  }
  // Waits until the schedulers wrote at least `n` such events (bounded by
  // `timeout`); whether they did.
  bool WaitForSchedulerEvents(const std::string& kind, const Fields& where, int n,
                              absl::Duration timeout = absl::Seconds(60)) const;
  // Waits until process `name` wrote at least `n` such events.
  bool WaitForEvents(const std::string& name, const std::string& kind, const Fields& where, int n,
                     absl::Duration timeout = absl::Seconds(60)) const;
  // How many slices lacked a copy when server `rank` was last lost (the
  // scheduler's "server_lost" event); -1 when it was not lost.
  int SlicesLackingAfterLoss(int rank) const;
  // The log names (without .log) of the processes, in the order of start.
  const std::vector<std::string>& scheduler_logs() const { return scheduler_logs_; }
  // Whether any worker started has exited (checked without waiting).
  bool AnyWorkerExited();
  const std::vector<std::string>& server_logs() const { return server_logs_; }
  const std::vector<std::string>& worker_logs() const { return worker_logs_; }

  // Ranks follow the order of registration: which started server said (its
  // "registered" event) that it got `rank`. -1 when none did within the
  // timeout.
  int ServerWithRank(int rank, absl::Duration timeout = absl::Seconds(30)) const;

  // The scheduler started last.
  ChildProcess& scheduler() { return schedulers_.back(); }
  std::vector<ChildProcess>& schedulers() { return schedulers_; }
  std::vector<ChildProcess>& servers() { return servers_; }
  std::vector<ChildProcess>& workers() { return workers_; }

 private:
  // `base`, then base.restart, base.restart2, ... for the same base.
  std::string NextLogName(const std::string& base);
  absl::Status Start(const std::string& binary, std::vector<std::string> flags, const std::string& log,
                     std::vector<ChildProcess>* into, std::vector<std::string>* logs);

  ScopedTempDir temp_;  // outlives the processes, which die first
  const std::string dir_;
  std::string endpoint_;
  std::vector<std::string> scheduler_logs_, server_logs_, worker_logs_;
  std::vector<ChildProcess> schedulers_, servers_, workers_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_JOB_H_
