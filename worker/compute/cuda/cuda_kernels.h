#ifndef PS_WORKER_COMPUTE_CUDA_CUDA_KERNELS_H_
#define PS_WORKER_COMPUTE_CUDA_CUDA_KERNELS_H_

// The kernels of the cuda backend (cuda_kernels.cu, the only file nvcc
// compiles): everything ComputeBackend needs besides cuBLAS. Each launcher
// enqueues its kernels on `stream` and returns the launch error (cudaSuccess
// when enqueued; faults while running surface at the next synchronizing
// call). Pointers are device memory, matrices row-major, sizes as in
// ComputeBackend. Thread-compatible: no state.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ps::kernels {

// c[i] *= beta for i < n; c = 0 when beta == 0 whatever it held (NaN too),
// as BLAS does. A GEMM with k == 0.
cudaError_t LaunchScale(float* c, size_t n, float beta, cudaStream_t stream);

// y[r][c] += bias[c]; then y = (y < 0 ? 0 : y) when relu (NaN stays NaN).
cudaError_t LaunchBiasActivation(float* y, const float* bias, int rows, int cols, bool relu, cudaStream_t stream);

// dy[i] = y[i] > 0 ? dy[i] : 0.
cudaError_t LaunchReluGrad(float* dy, const float* y, size_t n, cudaStream_t stream);

// db[c] = sum over r of dy[r][c]; one block per 32 columns sums all rows in
// a fixed order (deterministic, no atomics). Writes zeros when rows == 0.
cudaError_t LaunchBiasGrad(const float* dy, int rows, int cols, float* db, cudaStream_t stream);

// What LaunchSoftmaxCrossEntropy leaves in device memory for the host.
struct XentTotals {
  double loss;  // sum over rows of the cross-entropy
  int correct;  // rows whose argmax (ties: lowest index) equals the label
};

// Per row of logits [rows x cols] (one warp each), as CpuBackend does: the
// maximum is subtracted before exponentiating, exp sums in double; writes
// (softmax - onehot) * scale into dlogits unless it is nullptr, and the row's
// loss and hit into row_loss[r] and row_correct[r]. A second kernel sums those
// into *totals. A label outside [0, cols) gives that row a NaN loss (it is
// never used as an index). Requires rows >= 1, cols >= 1, row_loss and
// row_correct of `rows` elements.
cudaError_t LaunchSoftmaxCrossEntropy(const float* logits, const int32_t* labels, int rows, int cols, float scale,
                                      float* dlogits, double* row_loss, int* row_correct, XentTotals* totals,
                                      cudaStream_t stream);

}  // namespace ps::kernels

#endif  // PS_WORKER_COMPUTE_CUDA_CUDA_KERNELS_H_
