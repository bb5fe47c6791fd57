#ifndef PS_WORKER_TRAINER_INTERNAL_H_
#define PS_WORKER_TRAINER_INTERNAL_H_

// Pieces of the Fashion-MNIST trainer that the data-parallel loop
// (trainer.cc) and the pipeline-parallel one (stage_trainer.cc) share.
// Internal to worker/.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/fashion_mnist.h"
#include "worker/train_event.h"
#include "worker/trainer.h"

namespace ps {

// The indices replica `rank` of `workers` trains on: a seeded permutation of
// the training set, cut into equal shards (equal, so that every replica runs
// the same number of steps, which sync mode needs).
std::vector<int64_t> Shard(int64_t n, int rank, int workers, uint64_t seed);

// kInvalidArgument unless the layers fit Fashion-MNIST (784 in, 10 out).
absl::Status CheckLayers(const TrainerOptions& o, const Dataset& train);

// `data` cut to its first `limit` samples (0: all).
absl::StatusOr<Dataset> Limit(absl::StatusOr<Dataset> data, int64_t limit);

// options.optimizer with its cosine decay spread over the run's updates
// (`replicas` data-parallel replicas, each pushing every step).
OptimizerConfig WithDecaySteps(const TrainerOptions& options, int64_t train_count, int replicas);

// Returns freed heap to the system (malloc_trim) and starts the peak
// resident memory (VmHWM) over from the current resident set (Linux:
// /proc/self/clear_refs), so that the training's peak is not the
// data set's loading; PeakRssBytes reads it (0 where /proc cannot tell).
void ResetPeakRss();
int64_t PeakRssBytes();

// Where a run stands, for its "progress" events.
struct Progress {
  int epoch = 0;
  int epochs = 0;
  int64_t step = 0;         // the next step
  int64_t total_steps = 0;
  int64_t steps_done = 0;   // by this process (a rejoined one started later)
  int64_t samples = 0;      // trained by this process
  double loss_sum = 0;      // this epoch's, over loss_count samples
  int64_t loss_count = 0;
  int64_t correct = 0;
  double elapsed_s = 0;
  double wait_s = 0;
};
// The fields of a "progress" event (rank first is the caller's): epoch,
// step, running loss and accuracy, samples/s, elapsed, ETA, wait.
std::vector<std::pair<std::string, std::string>> ProgressFields(const Progress& p);

// The "done" event of a worker's result.
TrainEvent DoneEvent(int rank, const TrainResult& result);

}  // namespace ps

#endif  // PS_WORKER_TRAINER_INTERNAL_H_
