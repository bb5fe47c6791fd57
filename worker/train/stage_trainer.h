#ifndef PS_WORKER_TRAIN_STAGE_TRAINER_H_
#define PS_WORKER_TRAIN_STAGE_TRAINER_H_

// Model parallelism across workers: the training loop of one
// pipeline stage. With TrainerOptions::stages = K, the job's W workers form
// W / K replica groups; worker w is stage w % K of group w / K and holds the
// contiguous layers BalanceStages gives stage w % K (balanced by
// multiply-adds), pulling and pushing only their tensors.
//
// A step of a group: stage 0 reads the group's batch (the groups are
// data-parallel replicas, each with its own shard), splits it into M
// micro-batches and sends each one's activations to stage 1, which sends its
// own on, and so on; the last stage computes the loss and sends the
// gradients back. The stages run 1F1B: stage k starts K - 1 - k forward
// passes, then alternates one forward and one backward pass, so a stage's
// backward pass starts as soon as its first gradient is back and a stage
// holds at most K - k micro-batches' activations in flight. Gradients
// accumulate over the micro-batches; after the last one the last stage
// sends the step's loss back along the chain (every stage reports it and
// stops on a non-finite one), and each stage pushes its tensors' gradients
// and pulls their next values in one request. In sync mode a slice's step
// completes with the pushes of the live workers of its stage (R pushes with
// R groups; server/store/slice_store.h).
//
// Evaluation runs through the pipeline too: group 0 mid-run, every group at
// the end; the last stage sends the result back, so every stage reports it.
//
// A neighbour that dies or falls silent ends its group: a stage waiting for
// it fails with kUnavailable naming the neighbour once the cluster view no
// longer lists it, or kDeadlineExceeded after the request timeout; the other
// groups go on (in sync, once the scheduler has removed the dead workers).

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_spec.h"
#include "worker/models/mlp_stage.h"
#include "worker/train/trainer.h"

namespace ps {

// kInvalidArgument naming the field: stages outside [1, 64], micro_batches
// outside [1, batch_size], or stages > 1 with pipeline (one exchange in
// flight per stage) or with a straggler.
absl::Status ValidateStageOptions(const TrainerOptions& o);

// The whole model's tensors, each marked with the stage of `ranges` that
// holds it (the same names and initial values as the unstaged model).
std::vector<TensorSpec> StagedTensorSpecs(const std::vector<int>& layers, const std::vector<LayerRange>& ranges,
                                          uint64_t seed);

// Train() for options.stages > 1: connects, trains this worker's stage,
// evaluates with its group and reports like Train. Errors as Train's, plus
// kInvalidArgument when the job's workers are not a multiple of the stages,
// and the pipeline's (see above).
absl::StatusOr<TrainResult> TrainStages(const TrainerOptions& options,
                                        const std::function<void(const TrainEvent&)>& on_event);

}  // namespace ps

#endif  // PS_WORKER_TRAIN_STAGE_TRAINER_H_
