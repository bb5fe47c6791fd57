#ifndef PS_WORKER_EXACT_SUM_EXACT_SUM_CHECK_H_
#define PS_WORKER_EXACT_SUM_EXACT_SUM_CHECK_H_

// A worker that checks the parameter servers' arithmetic: it pushes
// integer-valued gradients with SGD lr=1 for a number of steps (to dense
// tensors, and to rows of an embedding table "rows", repeated ids among them,
// merged by the client) and verifies,
// at every pull, what the consistency model promises (sync: exactly t steps
// applied; ssp:K: no other worker more than K steps behind; every mode: its own
// pushes all applied), and at the end that every value is the exact sum of
// every push of every worker. Used by the quickstart, the multi-process tests
// and the in-process test.
//
// Resuming: the check starts at KVClient::ResumeStep(): step 0 in a new
// job; in a worker restarted with --rank, or in a whole job restarted from
// its servers' checkpoints, the step after the last one the servers hold.
// The expected values then start with every step before it. The servers'
// checkpoints are not coordinated, so right after a whole-job restart a slice
// may be a few steps ahead of the others: a resumed run (start_step > 0)
// skips the exact intermediate checks of sync mode, accepts its own pushes
// counted ahead until its steps catch up (then exactly again), and still
// checks every value exactly at the end, after the final barrier.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/model/model_spec.h"
#include "worker/client/kv_client.h"
#include "worker/client/push_compression.h"

namespace ps {

struct ExactSumOptions {
  KVClientOptions client;
  int steps = 20;
  Consistency consistency;
  // Elements of the large tensor that the partition map cuts into slices.
  int64_t dense_elements = 600000;
  uint64_t slice_bytes = 1 << 20;
  // Shards of the table (PlacementSpec::table_shards; 0: one per server).
  int64_t table_shards = 0;
  // Rows of table "rows" (every one pulled each step, kRowsPerStep pushed).
  int table_ids = 200;
  // Their ids: 0 .. table_ids - 1 (an item's number) instead of hashed over
  // the 64-bit space (a feature's hash).
  bool dense_table_ids = false;
  // > 1: the table admits an id after this many pulls (TableSpec::admit_after);
  // every worker pulls every row that often before its first push.
  int admit_after = 0;
  // How the tensors travel (ModelSpec::compression): the check simulates
  // every worker's compressor and error feedback, so the sums stay exact
  // for none, fp16, bf16, topk and randomk (integer gradients; pulls
  // exact while the sums fit the pull's 16 bits, so ",pull=none" for long
  // runs). Refused: onebit (its scale is no integer), pull=delta (the
  // workers hold a lossy copy of the parameters), and a resumed run (a
  // restarted worker's error feedback starts again from zero).
  CompressionSpec compression;
  uint64_t compress_min_bytes = ModelSpec().compress_min_bytes;
  // Emulated compute time per step of every worker (long runs: soak tests).
  absl::Duration step_time = absl::ZeroDuration();
  // Emulated extra compute time per step of worker `slow_rank` (a straggler).
  int slow_rank = -1;
  absl::Duration slow_step = absl::ZeroDuration();
  // When set, the check ends early once *stop is true: after the step in
  // progress, with the same final barrier and exact checks (ExactSumResult's
  // steps says how many it made). Borrowed for the whole run. Only in a job
  // of one worker: in a larger one the others would wait for its next push.
  const std::atomic<bool>* stop = nullptr;
  // Called after every `progress_every` steps with the steps done (0: never).
  int progress_every = 0;
  std::function<void(int64_t)> on_progress;

  absl::Status Validate() const;
};

struct ExactSumResult {
  int rank = 0;
  int num_workers = 0;
  int steps = 0;
  int64_t start_step = 0;        // the first step this run pushed (> 0: resumed)
  double dense_sum = 0;          // sum of the final dense tensor
  double expected_sum = 0;       // what it must be
  std::vector<float> clocks;     // final per-worker push counts as the servers hold them
  int64_t max_lag_seen = 0;      // largest (own clock - slowest worker's clock) at a pull
  std::string placement;         // the partition map, one line per tensor
  ClientStats client;            // the client's own counters at the end (re-sent pushes, recovered servers)
  uint64_t table_disk_rows = 0;  // rows on the servers' disk tiers at the end (ServerStats)
  // The bytes the live servers received and sent, at the end (ServerStats).
  uint64_t server_bytes_in = 0, server_bytes_out = 0;
  // The longest step (push, pull, check and the emulated compute):
  // what a failure stalled training for, at most.
  absl::Duration longest_step;
};

// Connects, registers the model, runs the steps and checks every pull.
// kDataLoss naming the step, tensor, element and both values when a pulled
// value is not what the consistency model allows; kInvalidArgument for
// `stop` in a job of several workers; the client's errors otherwise.
absl::StatusOr<ExactSumResult> RunExactSumCheck(const ExactSumOptions& options);

// The model the check registers (tensors "clock" [W], "dense" [N], "bias"
// [10]; table "rows" of dim 4).
ModelSpec ExactSumModel(const ExactSumOptions& options, int num_workers);

}  // namespace ps

#endif  // PS_WORKER_EXACT_SUM_EXACT_SUM_CHECK_H_
