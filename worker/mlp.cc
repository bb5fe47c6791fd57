#include "worker/mlp.h"

#include <cmath>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace ps {
namespace {

constexpr int kMaxLayerSize = 1 << 16;

}  // namespace

absl::StatusOr<std::unique_ptr<Mlp>> Mlp::Create(const std::vector<int>& layers, int max_batch,
                                                 ComputeBackend* backend) {
  if (layers.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an MLP needs at least 2 layer sizes (input and output), got ", layers.size()));
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
  return std::unique_ptr<Mlp>(new Mlp(layers, max_batch, backend));
}

Mlp::Mlp(std::vector<int> layers, int max_batch, ComputeBackend* backend)
    : layers_(std::move(layers)), max_batch_(max_batch), backend_(backend) {
  tensors_.Allocate(TensorSpecs(0), backend_);
  // On host memory the caller's input is used in place; no input buffers.
  if (!backend_->host_memory()) {
    const size_t n = static_cast<size_t>(max_batch_) * layers_[0];
    d_input_ = backend_->Alloc(n);
    h_input_ = backend_->AllocHost(n);
  }
  layer_tickets_.resize(num_layers());
  d_acts_.push_back(d_input_);
  for (int i = 1; i <= num_layers(); ++i) {
    d_acts_.push_back(backend_->Alloc(static_cast<size_t>(max_batch_) * layers_[i]));
    d_deltas_.push_back(backend_->Alloc(static_cast<size_t>(max_batch_) * layers_[i]));
  }
}

Mlp::~Mlp() {
  // A ParamsToDevice may still be in flight.
  backend_->Synchronize();
  if (!backend_->host_memory()) {
    backend_->Free(d_input_);
    backend_->FreeHost(h_input_);
  }
  tensors_.Free(backend_);
  for (int i = 1; i <= num_layers(); ++i) backend_->Free(d_acts_[i]);
  for (float* d : d_deltas_) backend_->Free(d);
}

std::vector<TensorSpec> Mlp::TensorSpecs(uint64_t seed) const {
  std::vector<TensorSpec> specs;
  for (int i = 0; i < num_layers(); ++i) {
    specs.push_back({absl::StrCat("fc", i, ".weight"),
                     {layers_[i], layers_[i + 1]},
                     Initializer::He(seed + i)});
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

float Mlp::Forward(const float* d_x, const int32_t* labels, int batch, float* d_dlogits,
                   int* correct) {
  const float* a = d_x;
  for (int i = 0; i < num_layers(); ++i) {
    backend_->Gemm(false, false, batch, layers_[i + 1], layers_[i], 1.0f, a, tensors_.d_params[2 * i], 0.0f,
                   d_acts_[i + 1]);
    backend_->BiasActivation(d_acts_[i + 1], tensors_.d_params[2 * i + 1], batch, layers_[i + 1],
                             /*relu=*/i + 1 < num_layers());
    a = d_acts_[i + 1];
  }
  return backend_->SoftmaxCrossEntropy(a, labels, batch, layers_.back(), d_dlogits, correct);
}

void Mlp::Backward(const float* d_x, int layer, int batch) {
  const int in = layers_[layer];
  const int out = layers_[layer + 1];
  const float* a = layer == 0 ? d_x : d_acts_[layer];
  const float* delta = d_deltas_[layer];
  backend_->Gemm(true, false, in, out, batch, 1.0f, a, delta, 0.0f, tensors_.d_grads[2 * layer]);
  backend_->BiasGrad(delta, batch, out, tensors_.d_grads[2 * layer + 1]);
  if (layer > 0) {
    // delta of the layer below: through W^T, then through its ReLU (whose
    // output is this layer's input `a`).
    backend_->Gemm(false, true, batch, in, out, 1.0f, delta, tensors_.d_params[2 * layer], 0.0f,
                   d_deltas_[layer - 1]);
    backend_->ReluGrad(d_deltas_[layer - 1], a, static_cast<size_t>(batch) * in);
  }
  if (!backend_->host_memory()) {
    // Downloads run beside the compute of the layers below; tensors_.d_grads is not
    // written again before TrainStep has waited for them.
    for (int t = 2 * layer; t < 2 * layer + 2; ++t) {
      backend_->CopyToHost(tensors_.host_grads[t], tensors_.d_grads[t], tensors_.sizes[t]);
    }
  }
}

float Mlp::TrainStep(const float* x, const int32_t* labels, int batch,
                     const std::function<void(int layer)>& layer_done, int* correct) {
  CHECK(batch > 0 && batch <= max_batch_) << "batch " << batch << ", max_batch " << max_batch_;
  const float* d_x = Input(x, batch);
  // Waits for the forward pass: the loss decides whether to go on.
  const float loss = Forward(d_x, labels, batch, d_deltas_.back(), correct);
  // A diverged step has nothing worth pushing.
  if (!std::isfinite(loss)) return loss;
  // layer_done(i) may hand host_grad to another thread and overwrite
  // host_param, so it waits for layer i's ticket: its gradient download and
  // every kernel that reads its parameters (the delta for layer i - 1) are
  // done. Layers are reported last first; between enqueues, those already
  // done are reported at once (on the cpu: each right after its backward).
  int next = num_layers() - 1;  // the next layer to report
  const auto report = [&] {
    if (layer_done) layer_done(next);
    --next;
  };
  for (int layer = num_layers() - 1; layer >= 0; --layer) {
    Backward(d_x, layer, batch);
    layer_tickets_[layer] = backend_->Record();
    while (next >= layer && backend_->Done(layer_tickets_[next])) report();
  }
  while (next >= 0) {
    backend_->WaitFor(layer_tickets_[next]);
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
