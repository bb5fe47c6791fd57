#ifndef PS_WORKER_TRAIN_TRAINER_H_
#define PS_WORKER_TRAIN_TRAINER_H_

// The training loop of a data-parallel worker: Fashion-MNIST, an MLP on a
// compute backend, parameters on the servers.
//
// Each step waits for layer i's fresh parameters just before the forward pass
// needs them, runs forward and backward, and pushes layer i's gradients (with
// the pull of its next parameters riding on the same request) as soon as the
// backward pass has produced them, last layer first: communication overlaps
// with compute in both directions. With `pipeline` (async, ssp), a step does
// not wait for the exchange of the step before it at all.
//
// Not thread-safe: one Trainer per worker process (or thread).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_spec.h"
#include "worker/client/kv_client.h"
#include "worker/compute/compute_backend.h"
#include "worker/data/fashion_mnist.h"
#include "worker/train/train_event.h"

namespace ps {

struct TrainerOptions {
  KVClientOptions client;
  BackendOptions backend;
  std::vector<int> layers = {784, 512, 256, 10};
  int batch_size = 64;
  int epochs = 10;
  // Defaults: Adam, lr 1e-3, cosine decay to 5% over the whole run (the
  // trainer fills in decay_steps from the run's length when it is 0).
  OptimizerConfig optimizer = DefaultOptimizer();
  Consistency consistency;
  // How the tensors travel (ModelSpec::compression, compress_min_bytes).
  CompressionSpec compression;
  uint64_t compress_min_bytes = ModelSpec().compress_min_bytes;
  // Async and ssp:K (K >= 1) only: compute step t+2 with the parameters the
  // exchange of step t brought, so the network never holds up compute (one
  // more step of staleness). Refused with sync.
  bool pipeline = false;
  // "auto", "layer" or a file of "tensor_name server_rank" lines (see
  // ParsePlacement); parsed once the server count is known.
  std::string placement = "auto";
  uint64_t slice_bytes = 1 << 20;
  std::string data_dir = kDefaultFashionMnistDir;
  int64_t train_limit = 0;  // use only the first N training images (0: all)
  int64_t test_limit = 0;   // evaluate on the first N test images (0: all)
  uint64_t seed = 1;
  int eval_every = 0;  // steps between evaluations by rank 0 (0: each epoch)
  absl::Duration progress_every = absl::Seconds(1);
  // How long a worker that has finished waits for the others (async workers
  // may finish at very different times) before the final evaluation.
  absl::Duration finish_timeout = absl::Minutes(30);
  // Straggler emulation (benchmarks only; off by default): the worker of rank
  // `straggler_rank` makes each step's compute `straggler_factor` times
  // longer by sleeping (factor - 1) times its measured compute time before
  // the step, as a slower device would. Sleeping, not spinning, so the other
  // processes on the machine keep their CPU.
  // A model file (.npz or .safetensors, as ps_export writes it) the servers
  // start from in a new job instead of the initializers (worker/client/
  // model_init.h); every worker names the same one. Empty: none.
  std::string init_from;
  int straggler_rank = -1;
  double straggler_factor = 1.0;
  // The timeline of steps [trace_from, trace_from + trace_steps) as "span"
  // events (data-parallel, not pipelined): when this worker computed
  // ("compute", a TrainStep), waited for a layer's parameters ("wait") and
  // sent a layer's push ("push", a point), in microseconds since the run
  // began (benchmarks: train_bench --overlap plots it). 0: none.
  int64_t trace_from = 0;
  int trace_steps = 0;
  // Model parallelism (worker/train/stage_trainer.h): the workers form groups of
  // `stages` pipeline stages (worker w: stage w % stages of group w /
  // stages), each step's batch split into `micro_batches` micro-batches.
  // stages 1: every worker holds the whole model (data parallelism only).
  int stages = 1;
  int micro_batches = 4;
  // Layers per stage, by hand (e.g. {1, 2}); empty: BalanceStages's split.
  std::vector<int> stage_layers;
  // The host a stage's link to its predecessor binds and announces.
  std::string stage_host = "127.0.0.1";

  static OptimizerConfig DefaultOptimizer();
  // kInvalidArgument naming the field.
  absl::Status Validate() const;
};

struct TrainResult {
  double test_accuracy = 0;
  double test_loss = 0;
  int64_t samples = 0;    // trained by this worker
  double wall_s = 0;      // from the first step to the end of the last
  double wait_s = 0;      // of which blocked on the network
  double straggle_s = 0;  // of which the emulated slowness of a straggler
  double eval_s = 0;      // of which spent evaluating (rank 0)
  int64_t steps = 0;
  int shm_servers = 0;  // servers this worker talked to through shared memory at the end
  // Peak resident memory of the training (from the first step on: what the
  // data set's loading needed before is not counted), from VmHWM.
  int64_t peak_rss_bytes = 0;
  // Pipeline stages (stages > 1): where this worker stood, the time its
  // forward and backward passes took, the time it waited for its
  // neighbours (the pipeline's bubble), and the bytes it sent them.
  int group = 0;
  int stage = 0;
  double compute_s = 0;
  double link_wait_s = 0;
  int64_t link_bytes_sent = 0;
};

// Parses --straggler "RANK:FACTOR" (FACTOR >= 1) into the two options.
absl::Status ParseStraggler(const std::string& flag, TrainerOptions* options);

// Connects, registers the model, trains, evaluates on the test set and tells
// the scheduler it is done. Once every worker is done, rank 0 also reports the
// servers' statistics (a "server_stats" event: updates, and the staleness of
// the updates they applied: mean, p99, max). `on_event` receives progress (may be empty).
// Errors: the data reader's (naming the file), the client's, and
// kInternal("step S worker R: loss is NaN ...") when training diverges.
absl::StatusOr<TrainResult> Train(const TrainerOptions& options,
                                  const std::function<void(const TrainEvent&)>& on_event);

// Parses --placement: "auto", "layer", or a file of "tensor_name server_rank"
// lines ('#' starts a comment). kNotFound for a missing file;
// kInvalidArgument naming the file and line for a malformed line, a tensor
// not in `tensors`, a rank outside [0, num_servers) or a tensor listed twice.
absl::StatusOr<PlacementSpec> ParsePlacement(const std::string& flag, const std::vector<TensorSpec>& tensors,
                                             int num_servers, uint64_t slice_bytes);

}  // namespace ps

#endif  // PS_WORKER_TRAIN_TRAINER_H_
