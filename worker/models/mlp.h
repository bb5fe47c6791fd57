#ifndef PS_WORKER_MODELS_MLP_H_
#define PS_WORKER_MODELS_MLP_H_

// A multilayer perceptron: dense layers with ReLU between them and softmax
// cross-entropy on top, computed through a ComputeBackend. Layer i has
// tensors "fc<i>.weight" [in x out] (He-initialised) and "fc<i>.bias" [out]
// (zeros): tensor 2i and 2i+1 of TensorSpecs().
//
// Parameters and gradients live in host buffers (host_param, host_grad) that
// a KVClient pulls into and pushes from, allocated with the backend's
// AllocHost (pinned memory on a GPU); the model copies them to and from the
// device, asynchronously, when the backend's memory is not host memory.
// Not thread-safe.

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/model_spec.h"
#include "worker/compute/compute_backend.h"
#include "worker/compute/tensor_buffers.h"

namespace ps {

class Mlp {
 public:
  // `layers` = {784, 512, 256, 10}: at least 2 sizes, each in [1, 1 << 16];
  // max_batch >= 1. `backend` is borrowed and must outlive the model.
  // kInvalidArgument naming the bad layer index and size, a max_batch < 1 or
  // a null backend; kResourceExhausted naming a host buffer (pinned on a
  // GPU) that cannot be had, and its size (ComputeBackend::AllocHost,
  // ReserveLossRows). Parameters start at zero: fill host_param (e.g. with
  // FillInitialValues of TensorSpecs()) and call ParamsToDevice.
  static absl::StatusOr<std::unique_ptr<Mlp>> Create(const std::vector<int>& layers, int max_batch,
                                                     ComputeBackend* backend);
  ~Mlp();
  Mlp(const Mlp&) = delete;
  Mlp& operator=(const Mlp&) = delete;

  int num_layers() const { return static_cast<int>(layers_.size()) - 1; }
  // Whether the backend computes in host memory (host_param is what it reads).
  bool host_memory() const { return backend_->host_memory(); }
  int num_tensors() const { return 2 * num_layers(); }
  const std::vector<int>& layers() const { return layers_; }
  // The tensors to register, He initialiser seeded with `seed`.
  std::vector<TensorSpec> TensorSpecs(uint64_t seed) const;
  int64_t NumParameters() const;

  // Host buffers of tensor t, sized like its TensorSpec. When the backend has
  // host memory they are the very buffers the model computes with.
  absl::Span<float> host_param(int t) { return absl::MakeSpan(tensors_.host_params[t], tensors_.sizes[t]); }
  absl::Span<const float> host_grad(int t) const {
    return absl::MakeConstSpan(tensors_.host_grads[t], tensors_.sizes[t]);
  }

  // From the next TrainStep on, tensor t's gradient goes to `host` (at
  // least host_grad(t).size() floats of the backend's AllocHost kind of
  // memory, which the caller keeps alive until it sets another; nullptr:
  // the model's own buffer again), so that each step can leave its
  // gradients in a buffer of their own (a PushBufferPool's) that a push
  // keeps without copying. Call between steps, not during one.
  void SetHostGrad(int t, float* host);

  // Copies host_param(t) of layer `layer`'s two tensors to the device (no-op
  // for host memory). Call after the pull of that layer completes. The copy
  // is asynchronous: later forward passes are ordered after it, and the
  // caller must not write those host_param buffers again until the next
  // TrainStep or Evaluate has returned (both wait for it).
  void ParamsToDevice(int layer);
  // The same for rows [r0, r1) of layer `layer`'s weight only, and its bias
  // too when r1 is the last row (a layer in pieces: each piece uploaded as
  // its pull lands, the forward pass on the first rows waiting for no more
  // than theirs). Requires 0 <= r0 < r1 <= in.
  void RowsToDevice(int layer, int r0, int r1);
  // Waits for every upload and computation issued so far; host_param may be
  // written again afterwards.
  void Synchronize();

  // Forward and backward on `batch` rows of `x` [batch x layers[0]] with
  // `labels`; leaves the gradients in host_grad. `layer_done(i)` is called as
  // soon as layer i's gradients are in host_grad and its parameters are no
  // longer needed for this step (last layer first), so a caller can push
  // them (and pull into its host_param) while the rest of the backward pass
  // runs: on a device the backward pass of all layers is enqueued at once,
  // each layer's gradient download with it, and layer_done(i) runs when the
  // backend's ticket for layer i is done; on the cpu, right after layer i's
  // backward pass. All work is finished when TrainStep returns. `x` may be
  // any host memory (it is staged through an AllocHost buffer). Returns the
  // mean loss;
  // *correct gets the number of rows classified right. When the loss is NaN
  // or infinite it is returned at once: no backward pass, no layer_done.
  // Requires 0 < batch <= max_batch (CHECKed) and labels in [0, layers().back()).
  float TrainStep(const float* x, const int32_t* labels, int batch, const std::function<void(int layer)>& layer_done,
                  int* correct);

  // Pieces (as P3 slices a layer's exchange): layer `layer`'s weight
  // [in x out] is computed in pieces of rows [0, row_ends[0]),
  // [row_ends[0], row_ends[1]), ..., ending at `in`, so that a caller can
  // push one piece's gradient while the next is computed, and start the
  // forward pass on the first rows of its parameters while the last are
  // still arriving. Empty: the layer is one piece (the default). Results do
  // not change. kInvalidArgument naming the layer for ends that are not
  // increasing within (0, in] or do not end at `in`; kOutOfRange for a
  // layer outside [0, num_layers()).
  absl::Status SetWeightPieces(int layer, std::vector<int> row_ends);
  // Where layer `layer`'s pieces end ({in}: one piece). Requires a valid layer.
  const std::vector<int>& weight_pieces(int layer) const { return pieces_[layer]; }
  // What TrainStep tells its caller, and asks of it, on the way. Each may be
  // empty.
  struct StepHooks {
    // As for TrainStep above.
    std::function<void(int layer)> layer_done;
    // A layer in pieces: rows [0, end_row) of its weight gradient are in
    // host_grad (called once per piece, in order, before layer_done(layer);
    // the bias gradient comes with layer_done).
    std::function<void(int layer, int end_row)> rows_done;
    // A layer in pieces: the forward pass is about to read rows
    // [0, end_row) of its weight, and with end_row == in its bias too; on a
    // device backend the caller has uploaded them (ParamsToDevice) by the
    // time this returns. A caller whose parameters are all in place needs none.
    std::function<void(int layer, int end_row)> need_rows;
  };
  float TrainStep(const float* x, const int32_t* labels, int batch, const StepHooks& hooks, int* correct);

  // Accuracy and mean loss on `n` rows, in batches of max_batch; computes no
  // gradient. Both 0 when n <= 0.
  struct Evaluation {
    double accuracy = 0;
    double loss = 0;
  };
  Evaluation Evaluate(const float* x, const int32_t* labels, int64_t n);

 private:
  Mlp(std::vector<int> layers, int max_batch, ComputeBackend* backend);
  // The buffers, once: Create's errors from the backend.
  absl::Status Allocate();
  // The input for the device: `x` itself on host memory, else a copy in
  // d_input_ (staged through h_input_, uploaded asynchronously).
  const float* Input(const float* x, int batch);
  // Fills d_acts_[1..] and returns the loss; writes dlogits unless nullptr.
  // need_rows: StepHooks::need_rows (may be empty).
  float Forward(const float* d_x, const int32_t* labels, int batch, float* d_dlogits, int* correct,
                const std::function<void(int layer, int end_row)>& need_rows = nullptr);
  // Given d_deltas_[layer]: enqueues layer's gradients into tensors_.d_grads (and
  // their download into tensors_.host_grads), and d_deltas_[layer - 1] for layer > 0.
  // Each weight piece is followed by a ticket in `reports` (end_row >= 0),
  // then the whole layer's (end_row -1); after each, report_done() reports
  // those done so far.
  struct Report {
    ComputeBackend::Ticket ticket;
    int layer;
    int end_row;
  };
  void Backward(const float* d_x, int layer, int batch, std::vector<Report>& reports,
                const std::function<void()>& report_done);
  // The weight gradient of rows [r0, r1) of `layer`, and its download.
  void WeightGradRows(const float* a, int layer, int batch, int r0, int r1);

  const std::vector<int> layers_;
  const int max_batch_;
  ComputeBackend* const backend_;
  TensorBuffers tensors_;          // parameters and gradients, host and device
  std::vector<float*> own_grads_;  // tensors_.host_grads as allocated (SetHostGrad(t, nullptr))
  // d_acts_[i], [max_batch x layers[i]]: the input of layer i, i.e. the
  // output of layer i - 1 (the logits for i = num_layers()); d_acts_[0] is
  // d_input_.
  std::vector<float*> d_acts_;
  // d_deltas_[i], [max_batch x layers[i + 1]]: the loss gradient w.r.t. the
  // pre-activation output of layer i.
  std::vector<float*> d_deltas_;
  float* d_input_ = nullptr;  // nullptr on host memory
  // The pinned staging buffer of the input (nullptr on host memory), free to
  // overwrite once input_ticket_ is done.
  float* h_input_ = nullptr;
  ComputeBackend::Ticket input_ticket_ = 0;
  std::vector<std::vector<int>> pieces_;  // per layer: SetWeightPieces' row ends; {in} when whole
};

}  // namespace ps

#endif  // PS_WORKER_MODELS_MLP_H_
