#include "worker/models/mlp_stage.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"

namespace ps {
namespace {

constexpr int kMaxLayerSize = 1 << 16;

double LayerCost(const std::vector<int>& layers, int i) { return static_cast<double>(layers[i]) * layers[i + 1]; }

}  // namespace

absl::StatusOr<std::vector<LayerRange>> BalanceStages(const std::vector<int>& layers, int stages) {
  const int n = static_cast<int>(layers.size()) - 1;
  if (stages < 1 || n < stages) {
    return absl::InvalidArgumentError(
        absl::StrCat(n, " layers cannot be split into ", stages, " stages of at least one layer"));
  }
  // best[k][j]: the smallest largest-stage cost of layers [0, j) in k stages;
  // cut[k][j]: where the last of those k stages starts. n and stages are small.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    for (int j = k; j <= n; ++j) {
      double cost = 0;
      for (int s = j - 1; s >= k - 1; --s) {  // the k-th stage is [s, j)
        cost += LayerCost(layers, s);
        const double worst = std::max(best[k - 1][s], cost);
        if (worst < best[k][j]) {
          best[k][j] = worst;
          cut[k][j] = s;
        }
      }
    }
  }
  std::vector<LayerRange> ranges(stages);
  for (int k = stages, j = n; k >= 1; j = cut[k][j], --k) ranges[k - 1] = {cut[k][j], j};
  return ranges;
}

absl::StatusOr<std::vector<LayerRange>> StagesOfCounts(const std::vector<int>& layers, const std::vector<int>& counts) {
  const int n = static_cast<int>(layers.size()) - 1;
  std::vector<LayerRange> ranges;
  int first = 0;
  for (int count : counts) {
    if (count < 1 || count > n - first) {
      return absl::InvalidArgumentError(absl::StrCat("stage_layers: stage ", ranges.size(), " gets ", count,
                                                     " layers; each stage needs at least 1 and the model has ", n));
    }
    ranges.push_back({first, first + count});
    first += count;
  }
  if (first != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage_layers: the stages hold ", first, " layers; the model has ", n));
  }
  return ranges;
}

absl::StatusOr<std::unique_ptr<MlpStage>> MlpStage::Create(const std::vector<int>& layers, LayerRange range,
                                                           int micro_rows, int micro_batches, ComputeBackend* backend) {
  const int n = static_cast<int>(layers.size()) - 1;
  if (n < 1) return absl::InvalidArgumentError("an MLP needs at least 2 layer sizes");
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 1 || layers[i] > kMaxLayerSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", i, " has size ", layers[i], ", outside [1, ", kMaxLayerSize, "]"));
    }
  }
  if (range.first < 0 || range.last > n || range.first >= range.last) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage layers [", range.first, ", ", range.last, ") are not a range of the ", n, " layers"));
  }
  if (micro_rows < 1 || micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("micro_rows ", micro_rows, " and micro_batches ", micro_batches, " must be at least 1"));
  }
  if (backend == nullptr) return absl::InvalidArgumentError("no compute backend");
  std::unique_ptr<MlpStage> stage(new MlpStage(layers, range, micro_rows, micro_batches, backend));
  PS_RETURN_IF_ERROR(stage->Allocate());
  return stage;
}

MlpStage::MlpStage(std::vector<int> layers, LayerRange range, int micro_rows, int micro_batches,
                   ComputeBackend* backend)
    : layers_(std::move(layers)),
      range_(range),
      micro_rows_(micro_rows),
      micro_batches_(micro_batches),
      backend_(backend),
      rows_(micro_batches, 0) {}

absl::Status MlpStage::Allocate() {
  PS_RETURN_IF_ERROR(tensors_.Allocate(TensorSpecs(0), backend_));
  const size_t rows = static_cast<size_t>(micro_rows_);
  for (int m = 0; m < micro_batches_; ++m) {
    for (int g = range_.first; g <= range_.last; ++g) acts_.push_back(backend_->Alloc(rows * layers_[g]));
  }
  // The last stage keeps each micro-batch's loss gradient from its forward
  // pass to its backward pass: deltas_[top] per micro-batch.
  for (int i = 0; i < num_layers(); ++i) {
    const int copies = last_stage() && i + 1 == num_layers() ? micro_batches_ : 1;
    for (int c = 0; c < copies; ++c) deltas_.push_back(backend_->Alloc(rows * layers_[range_.first + i + 1]));
  }
  d_grad_in_ = backend_->Alloc(rows * in_width());
  d_ones_ = backend_->Alloc(rows);
  const std::vector<float> ones(rows, 1.0f);
  backend_->CopyToDevice(d_ones_, ones.data(), rows);
  backend_->Synchronize();
  // The last stage computes the loss, one micro-batch at a time.
  return last_stage() ? backend_->ReserveLossRows(micro_rows_) : absl::OkStatus();
}

MlpStage::~MlpStage() {
  backend_->Synchronize();
  tensors_.Free(backend_);
  for (float* d : acts_) backend_->Free(d);
  for (float* d : deltas_) backend_->Free(d);
  backend_->Free(d_grad_in_);
  backend_->Free(d_ones_);
}

std::vector<TensorSpec> MlpStage::LayerSpecs(const std::vector<int>& layers, LayerRange range, uint64_t seed,
                                             int stage) {
  std::vector<TensorSpec> specs;
  for (int g = range.first; g < range.last; ++g) {
    specs.push_back({absl::StrCat("fc", g, ".weight"), {layers[g], layers[g + 1]}, Initializer::He(seed + g), stage});
    specs.push_back({absl::StrCat("fc", g, ".bias"), {layers[g + 1]}, Initializer::Zeros(), stage});
  }
  return specs;
}

int64_t MlpStage::NumParameters() const {
  int64_t total = 0;
  for (size_t t = 0; t < tensors_.sizes.size(); ++t) total += static_cast<int64_t>(tensors_.sizes[t]);
  return total;
}

void MlpStage::ParamsToDevice() {
  if (backend_->host_memory()) return;
  for (size_t t = 0; t < tensors_.sizes.size(); ++t)
    backend_->CopyToDevice(tensors_.d_params[t], tensors_.host_params[t], tensors_.sizes[t]);
}

void MlpStage::BeginStep(int rows) {
  CHECK_GT(rows, 0);
  step_rows_ = rows;
  // The first backward pass of the step writes the gradients (beta 0).
  std::fill(rows_.begin(), rows_.end(), 0);
  accumulated_ = false;
}

float MlpStage::Forward(int micro, const float* input, int rows, const int32_t* labels, float* output, int* correct) {
  CHECK(micro >= 0 && micro < micro_batches_) << "micro-batch " << micro;
  CHECK(rows > 0 && rows <= micro_rows_) << "rows " << rows << ", micro_rows " << micro_rows_;
  rows_[micro] = rows;
  backend_->CopyToDevice(act(micro, 0), input, static_cast<size_t>(rows) * in_width());
  const int model_layers = static_cast<int>(layers_.size()) - 1;
  for (int i = 0; i < num_layers(); ++i) {
    const int g = range_.first + i;
    backend_->Gemm(false, false, rows, layers_[g + 1], layers_[g], 1.0f, act(micro, i), tensors_.d_params[2 * i], 0.0f,
                   act(micro, i + 1));
    backend_->BiasActivation(act(micro, i + 1), tensors_.d_params[2 * i + 1], rows, layers_[g + 1],
                             /*relu=*/g + 1 < model_layers);
  }
  if (last_stage()) {
    int right = 0;
    const float loss = backend_->SoftmaxCrossEntropy(act(micro, num_layers()), labels, rows, out_width(),
                                                     deltas_[num_layers() - 1 + micro], &right);
    if (correct != nullptr) *correct += right;
    return loss;
  }
  backend_->CopyToHost(output, act(micro, num_layers()), static_cast<size_t>(rows) * out_width());
  backend_->Synchronize();
  return 0;
}

void MlpStage::Backward(int micro, const float* grad_output, float* grad_input) {
  CHECK(micro >= 0 && micro < micro_batches_ && rows_[micro] > 0) << "micro-batch " << micro << " has no forward";
  const int rows = rows_[micro];
  const int top = num_layers() - 1;
  // The loss of the step is the mean over its rows: a micro-batch's own mean
  // (the last stage's loss gradient) weighs rows / step_rows. Stages below
  // get gradients already weighted.
  float alpha = 1.0f;
  if (last_stage()) {
    alpha = static_cast<float>(rows) / static_cast<float>(step_rows_);
  } else {
    float* delta = deltas_[top];
    backend_->CopyToDevice(delta, grad_output, static_cast<size_t>(rows) * out_width());
    backend_->ReluGrad(delta, act(micro, num_layers()), static_cast<size_t>(rows) * out_width());
  }
  for (int i = top; i >= 0; --i) BackwardLayer(micro, i, i == top ? alpha : 1.0f, grad_input != nullptr);
  accumulated_ = true;
  if (!first_stage() && grad_input != nullptr) {
    backend_->CopyToHost(grad_input, d_grad_in_, static_cast<size_t>(rows) * in_width());
  }
  backend_->Synchronize();
}

void MlpStage::BackwardLayer(int m, int i, float alpha, bool input_grad) {
  const int rows = rows_[m];
  const int g = range_.first + i;
  const int in = layers_[g], out = layers_[g + 1];
  const bool top_of_last = last_stage() && i == num_layers() - 1;
  const float* delta = top_of_last ? deltas_[i + m] : deltas_[i];
  const float* a = act(m, i);
  const float beta = accumulated_ ? 1.0f : 0.0f;
  backend_->Gemm(true, false, in, out, rows, alpha, a, delta, beta, tensors_.d_grads[2 * i]);
  backend_->Gemm(true, false, 1, out, rows, alpha, d_ones_, delta, beta, tensors_.d_grads[2 * i + 1]);
  if (i > 0) {
    // The delta of the layer below: through W^T, then through its ReLU
    // (whose output is this layer's input `a`).
    backend_->Gemm(false, true, rows, in, out, alpha, delta, tensors_.d_params[2 * i], 0.0f, deltas_[i - 1]);
    backend_->ReluGrad(deltas_[i - 1], a, static_cast<size_t>(rows) * in);
  } else if (!first_stage() && input_grad) {
    backend_->Gemm(false, true, rows, in, out, alpha, delta, tensors_.d_params[0], 0.0f, d_grad_in_);
  }
}

void MlpStage::FinishStep() {
  if (!backend_->host_memory()) {
    for (size_t t = 0; t < tensors_.sizes.size(); ++t)
      backend_->CopyToHost(tensors_.host_grads[t], tensors_.d_grads[t], tensors_.sizes[t]);
  }
  backend_->Synchronize();
}

}  // namespace ps
