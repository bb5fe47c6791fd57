#ifndef PS_WORKER_MODELS_MLP_STAGE_H_
#define PS_WORKER_MODELS_MLP_STAGE_H_

// One stage of a pipeline-parallel MLP (model parallelism across
// workers): the contiguous layers [first, last) of the MLP `layers`, with
// the whole model's tensor names (fc<i>.weight, fc<i>.bias for i in
// [first, last)), so that a stage pulls and pushes exactly its own tensors.
//
// A step of B rows runs as M micro-batches. Each stage runs Forward for
// micro-batch m on what the stage before it produced (stage 0: the images)
// and keeps that micro-batch's activations until its Backward, which gets
// the loss gradient with respect to the stage's output activations from the
// stage after it (the last stage: from its own loss) and produces the
// gradient with respect to its input for the stage before. Gradients
// accumulate over the step's micro-batches, each weighted by its share of
// the B rows, so that after FinishStep host_grad holds what Mlp::TrainStep
// computes for the whole batch of B rows (tested to float tolerance).
//
//   auto s = MlpStage::Create(layers, {.first = 0, .last = 2}, micro_rows, M, backend);
//   s->BeginStep(B);
//   for m: s->Forward(m, input_m, rows_m, labels_m, out_m, &correct)   (GPipe: all forwards,
//   for m, last first: s->Backward(m, grad_out_m, grad_in_m)            then all backwards)
//   s->FinishStep();  // host_grad ready to push
//
// The activations of every micro-batch in flight are kept: M x (micro_rows x
// the widths of the stage's layers), GPipe's activation memory. Not
// thread-safe.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/model_spec.h"
#include "worker/compute/compute_backend.h"
#include "worker/compute/tensor_buffers.h"

namespace ps {

struct LayerRange {
  int first = 0;  // the stage's first layer
  int last = 0;   // one past its last layer
  bool operator==(const LayerRange&) const = default;
};

// Splits the layers of `layers` (sizes; layer i maps layers[i] to
// layers[i + 1]) into `stages` contiguous ranges, minimising the largest
// stage's compute (multiply-adds, in x out per layer). kInvalidArgument
// when there are fewer layers than stages or stages < 1.
absl::StatusOr<std::vector<LayerRange>> BalanceStages(const std::vector<int>& layers, int stages);

// The stages of `layers` as given by hand: `counts` layers per stage, in
// order (ps_worker --stage_layers=2,2). kInvalidArgument naming the flag
// when a count is below 1 or they do not add up to the model's layers.
absl::StatusOr<std::vector<LayerRange>> StagesOfCounts(const std::vector<int>& layers, const std::vector<int>& counts);

class MlpStage {
 public:
  // kInvalidArgument for a range outside the model or empty, sizes outside
  // [1, 65536], micro_rows or micro_batches below 1, or no backend;
  // kResourceExhausted naming a host buffer (pinned on a GPU) that cannot be
  // had, and its size (ComputeBackend::AllocHost, ReserveLossRows).
  static absl::StatusOr<std::unique_ptr<MlpStage>> Create(const std::vector<int>& layers, LayerRange range,
                                                          int micro_rows, int micro_batches, ComputeBackend* backend);
  ~MlpStage();
  MlpStage(const MlpStage&) = delete;
  MlpStage& operator=(const MlpStage&) = delete;

  bool first_stage() const { return range_.first == 0; }
  bool last_stage() const { return range_.last == static_cast<int>(layers_.size()) - 1; }
  LayerRange range() const { return range_; }
  int in_width() const { return layers_[range_.first]; }
  int out_width() const { return layers_[range_.last]; }
  int num_layers() const { return range_.last - range_.first; }
  int num_tensors() const { return 2 * num_layers(); }
  // This stage's tensors, initialised as Mlp::TensorSpecs(seed) does them.
  std::vector<TensorSpec> TensorSpecs(uint64_t seed) const { return LayerSpecs(layers_, range_, seed); }
  // The tensors of layers `range` of the MLP `layers`, marked stage `stage`.
  static std::vector<TensorSpec> LayerSpecs(const std::vector<int>& layers, LayerRange range, uint64_t seed,
                                            int stage = 0);
  int64_t NumParameters() const;

  // Tensor t of this stage (0: fc<first>.weight, 1: fc<first>.bias, ...).
  absl::Span<float> host_param(int t) { return absl::MakeSpan(tensors_.host_params[t], tensors_.sizes[t]); }
  absl::Span<const float> host_grad(int t) const {
    return absl::MakeConstSpan(tensors_.host_grads[t], tensors_.sizes[t]);
  }
  // Copies every host_param to the device (no-op on host memory).
  void ParamsToDevice();

  // A step of `rows` rows in all: zeroes the gradients.
  void BeginStep(int rows);
  // Micro-batch `micro` (< micro_batches) of `rows` (<= micro_rows) rows:
  // `input` [rows x in_width] in host memory. Not the last stage: writes the
  // output activations [rows x out_width] into `output` (host) and returns
  // 0. The last stage: `labels` (rows), returns the micro-batch's mean loss
  // and adds its right answers to *correct.
  float Forward(int micro, const float* input, int rows, const int32_t* labels, float* output, int* correct);
  // Backward of micro-batch `micro` (after its Forward): `grad_output`
  // [rows x out_width] is the loss gradient with respect to this stage's
  // output activations (ignored by the last stage, which starts from its
  // loss). Writes the gradient with respect to its input into `grad_input`
  // [rows x in_width] unless this is the first stage.
  void Backward(int micro, const float* grad_output, float* grad_input);
  // Every micro-batch's Backward done: the step's gradients into host_grad.
  void FinishStep();

 private:
  MlpStage(std::vector<int> layers, LayerRange range, int micro_rows, int micro_batches, ComputeBackend* backend);
  // The buffers, once: Create's errors from the backend.
  absl::Status Allocate();
  // Layer i of the stage (0-based) for micro-batch m: its weight-gradient,
  // bias-gradient and (unless it is the stage's first layer, or the stage is
  // the model's first) input-gradient products, scaled by `alpha`.
  void BackwardLayer(int m, int i, float alpha, bool input_grad);
  float* act(int m, int i) { return acts_[m * (num_layers() + 1) + i]; }

  const std::vector<int> layers_;
  const LayerRange range_;
  const int micro_rows_;
  const int micro_batches_;
  ComputeBackend* const backend_;
  TensorBuffers tensors_;  // parameters and gradients, host and device
  // Per micro-batch, num_layers() + 1 buffers [micro_rows x width]: the
  // stage's input, then each layer's output (post-ReLU but the logits).
  std::vector<float*> acts_;
  std::vector<float*> deltas_;  // per layer of the stage, [micro_rows x out]; reused by each micro-batch
  float* d_grad_in_ = nullptr;  // [micro_rows x in_width]: the input gradient before it goes to the host
  float* d_ones_ = nullptr;     // micro_rows ones: bias gradients as a product, accumulated
  std::vector<int> rows_;       // per micro-batch
  int step_rows_ = 0;
  bool accumulated_ = false;  // a backward pass of this step has written the gradients
};

}  // namespace ps

#endif  // PS_WORKER_MODELS_MLP_STAGE_H_
