#ifndef PS_WORKER_TRAIN_TRAINER_INTERNAL_H_
#define PS_WORKER_TRAIN_TRAINER_INTERNAL_H_

// Pieces of the Fashion-MNIST trainer that the data-parallel loop
// (trainer.cc) and the pipeline-parallel one (stage_trainer.cc) share.
// Internal to worker/.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/client/kv_client.h"
#include "worker/data/fashion_mnist.h"
#include "worker/train/train_event.h"
#include "worker/train/trainer.h"

namespace ps {

// The most servers a placement file may name before the job's count is known.
inline constexpr int kMaxServers = 4096;

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

// What both training loops (trainer.cc, stage_trainer.cc) keep about their
// run and the events they print from it: the clock, this process's
// samples, the epoch's running loss and accuracy, the time waited for the
// servers and spent evaluating. The base of each loop's class.
class RunLog {
 protected:
  using Fields = std::vector<std::pair<std::string, std::string>>;
  // `steps_per_epoch` of this worker's (or group's) shard.
  RunLog(const TrainerOptions& o, KVClient* client, const std::function<void(const TrainEvent&)>& on_event,
         int64_t steps_per_epoch)
      : o_(o), client_(client), on_event_(on_event), steps_per_epoch_(steps_per_epoch) {}

  // An event, this worker's rank first.
  void Emit(const std::string& kind, Fields fields) const;
  // The run starts (or resumes) at step `start` now.
  void Begin(int64_t start);
  // Progress and evaluation lines report the running means of this epoch.
  void BeginEpoch() { loss_sum_ = 0, loss_count_ = 0, correct_ = 0; }
  // A step of `batch` samples: its summed loss and right answers.
  void Count(int batch, double loss_sum, int64_t correct);
  // A "progress" event when progress_every has passed since the last one
  // (or `force`), `extra` fields after the common ones.
  void MaybeReportProgress(int epoch, bool force, absl::FunctionRef<Fields()> extra);
  // An "eval" event of a test evaluation's results.
  void EmitEval(int epoch, bool final, double accuracy, double loss) const;
  // The result's fields this log knows; `train_s` from Begin to the last step.
  TrainResult Result(double train_s) const;

  const TrainerOptions& o_;
  KVClient* const client_;
  const std::function<void(const TrainEvent&)>& on_event_;
  const int64_t steps_per_epoch_;
  int64_t clock_ = 0;
  int64_t first_step_ = 0;
  int64_t samples_ = 0;
  double loss_sum_ = 0;
  int64_t loss_count_ = 0, correct_ = 0;
  absl::Time start_, last_progress_;
  absl::Duration waited_, evaluating_;
};

// Steps per epoch of a shard of `count` / `replicas` samples.
int64_t StepsPerEpoch(int64_t count, int replicas, int batch_size);

// The "done" event of a worker's result.
TrainEvent DoneEvent(int rank, const TrainResult& result);

}  // namespace ps

#endif  // PS_WORKER_TRAIN_TRAINER_INTERNAL_H_
