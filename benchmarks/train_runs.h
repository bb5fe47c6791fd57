#ifndef PS_BENCHMARKS_TRAIN_RUNS_H_
#define PS_BENCHMARKS_TRAIN_RUNS_H_

// What train_bench times against a running job: a worker training (the
// trainer, any backend) and the same model's exchange with no trainer at
// all (the data plane's bound: every tensor pushed and pulled in one call per
// step, the servers applying the update). Both time their steps after
// `warmup` steps. Not thread-safe; one call at a time per process.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/train/trainer.h"

namespace ps::bench {

struct TrainFigures {
  double samples_per_s = 0;  // this worker's, after the warm-up
  double steps_per_s = 0;
  double wait_share = 0;  // of the timed steps spent blocked on the servers
  double test_accuracy = 0;
  std::string data_plane;          // "shm" when this worker reached a server through shared memory, else "tcp"
  std::string pieces;              // the layers exchanged in pieces, as the start event names them
  std::vector<std::string> trace;  // the "span" events of traced steps (TrainerOptions::trace_steps), JSON
};

// Trains with `o` against the job of scheduler `scheduler` (o.client.scheduler
// is replaced). kInternal when the run has no progress event past `warmup`;
// the trainer's errors otherwise.
absl::StatusOr<TrainFigures> TrainAgainst(TrainerOptions o, const std::string& scheduler, int64_t warmup);

// The same model (o.layers, o.seed, o.consistency, o.optimizer, o.placement,
// o.slice_bytes) registered with the job of `scheduler`, then `steps` steps of
// one PushPull of every tensor (gradients zero), waited for each step; the
// steps per second after `warmup`. Ends with KVClient::Finish. The client's,
// placement's and registration's errors.
absl::StatusOr<double> ExchangeAgainst(TrainerOptions o, const std::string& scheduler, int64_t steps, int64_t warmup);

}  // namespace ps::bench

#endif  // PS_BENCHMARKS_TRAIN_RUNS_H_
