#ifndef PS_WORKER_COMPUTE_BACKEND_H_
#define PS_WORKER_COMPUTE_BACKEND_H_

// What the model code needs from a compute device: memory, matrix multiply,
// bias + activation, softmax cross-entropy and their gradients. `cpu` uses
// OpenBLAS; a `cuda` backend implements the same calls on a GPU.
//
// Pointers named `d_*` live in the backend's memory (Alloc); for the cpu
// backend that is ordinary host memory. Matrices are row-major. Calls may run
// asynchronously on the device; Synchronize() waits for all of them.
// Not thread-safe: one backend per worker thread.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ps {

class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;

  virtual std::string name() const = 0;
  // True when backend memory is host memory (no copies needed).
  virtual bool host_memory() const = 0;

  // Device memory for n floats, zero-filled. Never nullptr (aborts when out of
  // memory: this happens once at start-up, not per step).
  virtual float* Alloc(size_t n) = 0;
  virtual void Free(float* d) = 0;
  virtual void CopyToDevice(float* d_dst, const float* src, size_t n) = 0;
  virtual void CopyToHost(float* dst, const float* d_src, size_t n) = 0;
  virtual void Synchronize() = 0;

  // C[m x n] = alpha * op(A) * op(B) + beta * C, with op(A) [m x k] and
  // op(B) [k x n]; op transposes when the flag is set (A is then stored
  // [k x m], B [n x k]).
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* d_a,
                    const float* d_b, float beta, float* d_c) = 0;
  // y[r][c] += bias[c] for every row r; then y = max(y, 0) when `relu`.
  virtual void BiasActivation(float* d_y, const float* d_bias, int rows, int cols, bool relu) = 0;
  // dy[i] = 0 where y[i] <= 0 (the gradient of ReLU, given its output y).
  virtual void ReluGrad(float* d_dy, const float* d_y, size_t n) = 0;
  // db[c] = sum over rows of dy[r][c].
  virtual void BiasGrad(const float* d_dy, int rows, int cols, float* d_db) = 0;
  // For logits [rows x cols] and host labels: writes the gradient of the mean
  // cross-entropy, (softmax - onehot) / rows, into d_dlogits (may be nullptr
  // when only the loss is wanted) and returns the mean loss; *correct gets
  // how many rows' argmax equals the label. Requires labels in [0, cols).
  virtual float SoftmaxCrossEntropy(const float* d_logits, const int32_t* labels, int rows, int cols,
                                    float* d_dlogits, int* correct) = 0;
};

struct BackendOptions {
  std::string device = "cpu";  // "cpu" or "cuda"
  int cpu_threads = 1;         // OpenBLAS threads for the cpu backend
  int gpu = -1;                // cuda: device index; -1 = rank modulo device count
  int rank = 0;
};

// kInvalidArgument for an unknown device or cpu_threads outside [1, 256];
// kUnimplemented for "cuda" in a build without CUDA; kUnavailable when CUDA is
// built but no GPU is found.
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateBackend(const BackendOptions& options);

}  // namespace ps

#endif  // PS_WORKER_COMPUTE_BACKEND_H_
