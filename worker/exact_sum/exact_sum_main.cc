// ps_exact_sum: a worker that pushes integer gradients and checks that the
// servers' arithmetic and consistency are exact (see worker/exact_sum/exact_sum_check.h).
#include <atomic>
#include <csignal>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"
#include "common/base/events_flags.h"
#include "common/base/main_support.h"
#include "worker/client/client_flags.h"
#include "worker/exact_sum/exact_sum_check.h"

ABSL_FLAG(int, steps, 20, "Push/pull steps.");
ABSL_FLAG(std::string, consistency, "",
          "sync, async or ssp:K (every worker must agree); empty: $PS_CONSISTENCY (the launchers set it), else sync.");
ABSL_FLAG(int64_t, dense_elements, 600000, "Elements of the large tensor (sliced over servers).");
ABSL_FLAG(int64_t, slice_bytes, 1 << 20, "Largest slice of a tensor, in bytes.");
ABSL_FLAG(int64_t, table_shards, 0, "Shards of the table, moved whole when servers join or leave (0: one per server).");
ABSL_FLAG(int, table_ids, 200, "Rows of the embedding table (all pulled every step).");
ABSL_FLAG(int, admit_after, 0,
          "The table admits an id once it was pulled this many times (> 1: every worker pulls every row that often "
          "before its first push, so that no gradient is dropped); 0 or 1: at once.");
ABSL_FLAG(int, step_ms, 0, "Emulated compute milliseconds per step on every worker (long runs, e.g. soak tests).");
ABSL_FLAG(int, progress_every, 0, "Print 'exact_sum steps=N' after every N steps (0: never).");
ABSL_FLAG(int, slow_rank, -1, "Rank of a worker to slow down (emulated straggler); -1: none.");
ABSL_FLAG(int, slow_step_ms, 0, "Extra milliseconds per step for --slow_rank.");
ABSL_FLAG(bool, until_stopped, false,
          "Run until SIGTERM or SIGINT (at most --steps steps), then check the sums and exit 0 (a job of one "
          "worker only).");

namespace {
std::atomic<bool> stop_requested{false};
extern "C" void RequestStop(int) { stop_requested.store(true); }
}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv, "ps_exact_sum --scheduler=HOST:PORT: checks exact push/pull sums.");
  if (absl::Status s = ps::OpenEventFileFromFlags(); !s.ok()) return ps::ExitCode(s, "ps_exact_sum");
  ps::ExactSumOptions options;
  options.client = ps::ClientOptionsFromFlags();
  options.steps = absl::GetFlag(FLAGS_steps);
  auto consistency = ps::Consistency::Parse(ps::WorkerConsistency(absl::GetFlag(FLAGS_consistency)));
  if (!consistency.ok()) return ps::ExitCode(consistency.status(), "ps_exact_sum: --consistency");
  options.consistency = *consistency;
  if (absl::Status s = ps::CompressionFromFlags(&options.compression, &options.compress_min_bytes); !s.ok()) {
    return ps::ExitCode(s, "ps_exact_sum");
  }
  options.dense_elements = absl::GetFlag(FLAGS_dense_elements);
  options.slice_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_slice_bytes));
  options.table_ids = absl::GetFlag(FLAGS_table_ids);
  options.table_shards = absl::GetFlag(FLAGS_table_shards);
  options.admit_after = absl::GetFlag(FLAGS_admit_after);
  options.step_time = absl::Milliseconds(absl::GetFlag(FLAGS_step_ms));
  options.slow_rank = absl::GetFlag(FLAGS_slow_rank);
  options.slow_step = absl::Milliseconds(absl::GetFlag(FLAGS_slow_step_ms));
  options.progress_every = absl::GetFlag(FLAGS_progress_every);
  options.on_progress = [](int64_t steps) {
    std::printf("exact_sum steps=%ld\n", static_cast<long>(steps));
    std::fflush(stdout);
  };
  if (absl::GetFlag(FLAGS_until_stopped)) {
    options.stop = &stop_requested;
    std::signal(SIGTERM, RequestStop);
    std::signal(SIGINT, RequestStop);
  }
  auto result = ps::RunExactSumCheck(options);
  if (!result.ok()) return ps::ExitCode(result.status(), "ps_exact_sum");
  std::printf("%s\n", result->placement.c_str());
  std::printf(
      "exact_sum OK rank=%d workers=%d steps=%d consistency=%s compression=%s dense_sum=%.1f expected_sum=%.1f "
      "clocks=[%s] max_lag_seen=%ld start_step=%ld pushes_resent=%lu servers_recovered=%lu shm_servers=%d "
      "requests_resent_off_shm=%lu requests_rerouted=%lu requests_fenced=%lu table_disk_rows=%lu "
      "longest_step_ms=%.1f\n",
      result->rank, result->num_workers, result->steps, options.consistency.ToString().c_str(),
      options.compression.ToString().c_str(), result->dense_sum, result->expected_sum,
      absl::StrJoin(result->clocks, ",").c_str(), static_cast<long>(result->max_lag_seen),
      static_cast<long>(result->start_step), static_cast<unsigned long>(result->client.pushes_resent),
      static_cast<unsigned long>(result->client.servers_recovered), result->client.shm_servers,
      static_cast<unsigned long>(result->client.requests_resent_off_shm),
      static_cast<unsigned long>(result->client.requests_rerouted),
      static_cast<unsigned long>(result->client.requests_fenced), static_cast<unsigned long>(result->table_disk_rows),
      absl::ToDoubleMilliseconds(result->longest_step));
  return 0;
}
