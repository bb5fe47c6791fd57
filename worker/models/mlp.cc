#include "worker/models/mlp.h"

#include <cmath>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"

namespace ps {
namespace {

constexpr int kMaxLayerSize = 1 << 16;

}  // namespace

absl::StatusOr<std::unique_ptr<Mlp>> Mlp::Create(const std::vector<int>& layers, int max_batch,
                                                 ComputeBackend* backend) {
  if (layers.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("an MLP needs at least 2 layer sizes (input and output), got ", layers.size()));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 1 || layers[i] > kMaxLayerSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", i, " has size ", layers[i], ", outside [1, ", kMaxLayerSize, "]"));
    }
  }
  if (max_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_batch ", max_batch, " is below 1"));
  }
  if (backend == nullptr) return absl::InvalidArgumentError("no compute backend");
  std::unique_ptr<Mlp> mlp(new Mlp(layers, max_batch, backend));
  PS_RETURN_IF_ERROR(mlp->Allocate());
  return mlp;
}

Mlp::Mlp(std::vector<int> layers, int max_batch, ComputeBackend* backend)
    : layers_(std::move(layers)), max_batch_(max_batch), backend_(backend) {
  for (int i = 0; i < num_layers(); ++i) pieces_.push_back({layers_[i]});
}

absl::Status Mlp::Allocate() {
  PS_RETURN_IF_ERROR(tensors_.Allocate(TensorSpecs(0), backend_));
  own_grads_ = tensors_.host_grads;
  // On host memory the caller's input is used in place; no input buffers.
  if (!backend_->host_memory()) {
    const size_t n = static_cast<size_t>(max_batch_) * layers_[0];
    d_input_ = backend_->Alloc(n);
    absl::StatusOr<float*> h = backend_->AllocHost(n);
    if (!h.ok()) {
      return absl::Status(h.status().code(),
                          absl::StrCat("no host buffer to stage the input through (", max_batch_, " rows of ",
                                       layers_[0], " floats, ", n * sizeof(float), " bytes): ", h.status().message()));
    }
    h_input_ = *h;
  }
  d_acts_.push_back(d_input_);
  for (int i = 1; i <= num_layers(); ++i) {
    d_acts_.push_back(backend_->Alloc(static_cast<size_t>(max_batch_) * layers_[i]));
    d_deltas_.push_back(backend_->Alloc(static_cast<size_t>(max_batch_) * layers_[i]));
  }
  return backend_->ReserveLossRows(max_batch_);
}

Mlp::~Mlp() {
  // A ParamsToDevice may still be in flight.
  backend_->Synchronize();
  if (!backend_->host_memory()) {
    backend_->Free(d_input_);
    backend_->FreeHost(h_input_);
  }
  // Lent ones are not the model's to free. (None before Allocate completed.)
  for (size_t t = 0; t < own_grads_.size(); ++t) SetHostGrad(static_cast<int>(t), nullptr);
  tensors_.Free(backend_);
  for (size_t i = 1; i < d_acts_.size(); ++i) backend_->Free(d_acts_[i]);
  for (float* d : d_deltas_) backend_->Free(d);
}

std::vector<TensorSpec> Mlp::TensorSpecs(uint64_t seed) const {
  std::vector<TensorSpec> specs;
  for (int i = 0; i < num_layers(); ++i) {
    specs.push_back({absl::StrCat("fc", i, ".weight"), {layers_[i], layers_[i + 1]}, Initializer::He(seed + i)});
    specs.push_back({absl::StrCat("fc", i, ".bias"), {layers_[i + 1]}, Initializer::Zeros()});
  }
  return specs;
}

int64_t Mlp::NumParameters() const {
  int64_t total = 0;
  for (int i = 0; i < num_layers(); ++i) {
    total += static_cast<int64_t>(layers_[i]) * layers_[i + 1] + layers_[i + 1];
  }
  return total;
}

void Mlp::ParamsToDevice(int layer) {
  CHECK(layer >= 0 && layer < num_layers()) << "layer " << layer;
  if (backend_->host_memory()) return;  // tensors_.d_params are the host buffers
  for (int t = 2 * layer; t < 2 * layer + 2; ++t) {
    backend_->CopyToDevice(tensors_.d_params[t], tensors_.host_params[t], tensors_.sizes[t]);
  }
}

void Mlp::RowsToDevice(int layer, int r0, int r1) {
  CHECK(layer >= 0 && layer < num_layers() && r0 >= 0 && r0 < r1 && r1 <= layers_[layer])
      << "layer " << layer << " rows " << r0 << ".." << r1;
  if (backend_->host_memory()) return;
  const size_t out = static_cast<size_t>(layers_[layer + 1]);
  const int w = 2 * layer;
  backend_->CopyToDevice(tensors_.d_params[w] + r0 * out, tensors_.host_params[w] + r0 * out, (r1 - r0) * out);
  if (r1 == layers_[layer]) {
    backend_->CopyToDevice(tensors_.d_params[w + 1], tensors_.host_params[w + 1], tensors_.sizes[w + 1]);
  }
}

void Mlp::Synchronize() { backend_->Synchronize(); }

const float* Mlp::Input(const float* x, int batch) {
  if (backend_->host_memory()) return x;
  const size_t n = static_cast<size_t>(batch) * layers_[0];
  // x is pageable (the dataset): one memcpy into pinned memory lets the
  // upload be a DMA that overlaps whatever the device still does. The last
  // upload from h_input_ is done by now in practice (the loss of its forward
  // pass was waited for); the ticket makes that a guarantee.
  backend_->WaitFor(input_ticket_);
  std::copy_n(x, n, h_input_);
  backend_->CopyToDevice(d_input_, h_input_, n);
  input_ticket_ = backend_->Record();
  return d_input_;
}

void Mlp::SetHostGrad(int t, float* host) {
  CHECK(t >= 0 && t < num_tensors()) << "tensor " << t;
  float* to = host != nullptr ? host : own_grads_[t];
  tensors_.host_grads[t] = to;
  if (backend_->host_memory()) tensors_.d_grads[t] = to;  // the model computes in it
}

absl::Status Mlp::SetWeightPieces(int layer, std::vector<int> row_ends) {
  if (layer < 0 || layer >= num_layers()) {
    return absl::OutOfRangeError(absl::StrCat("layer ", layer, " not in [0, ", num_layers(), ")"));
  }
  const int in = layers_[layer];
  if (row_ends.empty()) row_ends = {in};
  for (size_t p = 0; p < row_ends.size(); ++p) {
    const int lo = p == 0 ? 0 : row_ends[p - 1];
    if (row_ends[p] <= lo || row_ends[p] > in) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", layer, ": piece ", p, " ends at row ", row_ends[p],
                                                     "; ends must increase within (0, ", in, "]"));
    }
  }
  if (row_ends.back() != in) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer, ": the last piece ends at row ", row_ends.back(), ", not at ", in));
  }
  pieces_[layer] = std::move(row_ends);
  return absl::OkStatus();
}

float Mlp::Forward(const float* d_x, const int32_t* labels, int batch, float* d_dlogits, int* correct,
                   const std::function<void(int layer, int end_row)>& need_rows) {
  const float* a = d_x;
  for (int i = 0; i < num_layers(); ++i) {
    // A layer in pieces sums op(A) B over row ranges of its weight: the
    // columns of the input and the rows of the weight that go together.
    const int in = layers_[i], out = layers_[i + 1];
    int r0 = 0;
    for (int r1 : pieces_[i]) {
      if (need_rows && pieces_[i].size() > 1) need_rows(i, r1);
      backend_->GemmLd(false, false, batch, out, r1 - r0, 1.0f, a + r0, tensors_.d_params[2 * i] + size_t{1} * r0 * out,
                       r0 == 0 ? 0.0f : 1.0f, d_acts_[i + 1], {.a = in, .b = out, .c = out});
      r0 = r1;
    }
    backend_->BiasActivation(d_acts_[i + 1], tensors_.d_params[2 * i + 1], batch, layers_[i + 1],
                             /*relu=*/i + 1 < num_layers());
    a = d_acts_[i + 1];
  }
  return backend_->SoftmaxCrossEntropy(a, labels, batch, layers_.back(), d_dlogits, correct);
}

void Mlp::WeightGradRows(const float* a, int layer, int batch, int r0, int r1) {
  const int in = layers_[layer];
  const int out = layers_[layer + 1];
  const size_t first = size_t{1} * r0 * out;
  // Rows r0..r1 of A^T delta are A's columns r0..r1 (A is [batch x in]).
  backend_->GemmLd(true, false, r1 - r0, out, batch, 1.0f, a + r0, d_deltas_[layer], 0.0f,
                   tensors_.d_grads[2 * layer] + first, {.a = in, .b = out, .c = out});
  if (!backend_->host_memory()) {
    backend_->CopyToHost(tensors_.host_grads[2 * layer] + first, tensors_.d_grads[2 * layer] + first,
                         size_t{1} * (r1 - r0) * out);
  }
}

void Mlp::Backward(const float* d_x, int layer, int batch, std::vector<Report>& reports,
                   const std::function<void()>& report_done) {
  const int in = layers_[layer];
  const int out = layers_[layer + 1];
  const float* a = layer == 0 ? d_x : d_acts_[layer];
  const float* delta = d_deltas_[layer];
  if (layer > 0) {
    // delta of the layer below: through W^T, then through its ReLU (whose
    // output is this layer's input `a`). First, before any piece of the
    // weight's gradient is reported: a report lets the caller pull the
    // piece's next values into the weight (host memory: the very rows this
    // reads), which made the delta a mix of two steps' weights.
    backend_->Gemm(false, true, batch, in, out, 1.0f, delta, tensors_.d_params[2 * layer], 0.0f, d_deltas_[layer - 1]);
    backend_->ReluGrad(d_deltas_[layer - 1], a, static_cast<size_t>(batch) * in);
  }
  int r0 = 0;
  for (int r1 : pieces_[layer]) {
    WeightGradRows(a, layer, batch, r0, r1);
    if (pieces_[layer].size() > 1) {
      reports.push_back({backend_->Record(), layer, r1});
      report_done();
    }
    r0 = r1;
  }
  backend_->BiasGrad(delta, batch, out, tensors_.d_grads[2 * layer + 1]);
  if (!backend_->host_memory()) {
    // Downloads run beside the compute of the layers below; tensors_.d_grads is not
    // written again before TrainStep has waited for them. The weight's went
    // with its pieces.
    const int t = 2 * layer + 1;
    backend_->CopyToHost(tensors_.host_grads[t], tensors_.d_grads[t], tensors_.sizes[t]);
  }
  reports.push_back({backend_->Record(), layer, -1});
  report_done();
}

float Mlp::TrainStep(const float* x, const int32_t* labels, int batch, const std::function<void(int layer)>& layer_done,
                     int* correct) {
  return TrainStep(x, labels, batch, StepHooks{.layer_done = layer_done}, correct);
}

float Mlp::TrainStep(const float* x, const int32_t* labels, int batch, const StepHooks& hooks, int* correct) {
  CHECK(batch > 0 && batch <= max_batch_) << "batch " << batch << ", max_batch " << max_batch_;
  const float* d_x = Input(x, batch);
  // Waits for the forward pass: the loss decides whether to go on.
  const float loss = Forward(d_x, labels, batch, d_deltas_.back(), correct, hooks.need_rows);
  // A diverged step has nothing worth pushing.
  if (!std::isfinite(loss)) return loss;
  // layer_done(i) may hand host_grad to another thread and overwrite
  // host_param, so it waits for layer i's ticket: its gradient download and
  // every kernel that reads its parameters (the delta for layer i - 1) are
  // done; a piece's ticket, for its rows' download. Reports go in the order
  // of their tickets (layers last first); between enqueues, those already
  // done go at once (on the cpu: each right after its computation).
  std::vector<Report> reports;
  size_t next = 0;
  const auto report = [&] {
    const Report& r = reports[next++];
    if (r.end_row < 0 && hooks.layer_done) hooks.layer_done(r.layer);
    if (r.end_row >= 0 && hooks.rows_done) hooks.rows_done(r.layer, r.end_row);
  };
  const auto report_done = [&] {
    while (next < reports.size() && backend_->Done(reports[next].ticket)) report();
  };
  for (int layer = num_layers() - 1; layer >= 0; --layer) Backward(d_x, layer, batch, reports, report_done);
  while (next < reports.size()) {
    backend_->WaitFor(reports[next].ticket);
    report();
  }
  return loss;
}

Mlp::Evaluation Mlp::Evaluate(const float* x, const int32_t* labels, int64_t n) {
  Evaluation result;
  if (n <= 0) return result;
  int64_t right = 0;
  double loss_sum = 0;
  for (int64_t start = 0; start < n; start += max_batch_) {
    const int batch = static_cast<int>(std::min<int64_t>(max_batch_, n - start));
    int correct = 0;
    const float* d_x = Input(x + start * layers_[0], batch);
    loss_sum += static_cast<double>(Forward(d_x, labels + start, batch, nullptr, &correct)) * batch;
    right += correct;
  }
  result.accuracy = static_cast<double>(right) / static_cast<double>(n);
  result.loss = loss_sum / static_cast<double>(n);
  return result;
}

}  // namespace ps
