#include "worker/compute/cuda/cuda_kernels.h"

#include <algorithm>
#include <cmath>

namespace ps::kernels {
namespace {

constexpr int kThreads = 256;
// Element-wise kernels loop grid-stride past this many blocks.
constexpr size_t kMaxBlocks = size_t{1} << 16;
constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kWarp = 32;

// BiasGrad: a block of kColumnsPerBlock x kRowLanes threads per 32 columns.
constexpr int kColumnsPerBlock = 32;
constexpr int kRowLanes = 16;

unsigned BlocksFor(size_t n) { return static_cast<unsigned>(std::min(kMaxBlocks, (n + kThreads - 1) / kThreads)); }

__global__ void ScaleKernel(float* c, size_t n, float beta) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    c[i] = beta == 0.0f ? 0.0f : beta * c[i];
  }
}

__global__ void BiasActivationKernel(float* y, const float* bias, size_t n, int cols, bool relu) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const float v = y[i] + bias[i % cols];
    // Like std::max(v, 0.0f) on the cpu: a NaN stays visible.
    y[i] = relu && v < 0.0f ? 0.0f : v;
  }
}

__global__ void ReluGradKernel(float* dy, const float* y, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  }
}

// Threads (x, y) of block b sum column 32 b + x over rows y, y + 16, ...
// (neighbouring x read neighbouring addresses); then row lane 0 adds the 16
// partial sums.
__global__ void BiasGradKernel(const float* dy, int rows, int cols, float* db) {
  __shared__ float partial[kRowLanes][kColumnsPerBlock + 1];
  const int c = blockIdx.x * kColumnsPerBlock + threadIdx.x;
  float sum = 0.0f;
  if (c < cols) {
    for (int r = threadIdx.y; r < rows; r += kRowLanes) sum += dy[static_cast<size_t>(r) * cols + c];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.0f;
    for (int i = 0; i < kRowLanes; ++i) total += partial[i][threadIdx.x];
    db[c] = total;
  }
}

// Keeps (v, i) the larger value, ties to the lower index; i < 0 is "none yet".
__device__ void ArgmaxCombine(float& v, int& i, float other_v, int other_i) {
  if (other_i < 0) return;
  if (i < 0 || other_v > v || (other_v == v && other_i < i)) {
    v = other_v;
    i = other_i;
  }
}

// One warp per row; every lane of a warp has the same row, so a warp leaves
// (or stays) as a whole and the full-mask shuffles are safe.
__global__ void SoftmaxRowsKernel(const float* logits, const int32_t* labels, int rows, int cols, float scale,
                                  float* dlogits, double* row_loss, int* row_correct) {
  const int row = static_cast<int>((blockIdx.x * size_t{blockDim.x} + threadIdx.x) / kWarp);
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float* x = logits + static_cast<size_t>(row) * cols;

  float best = 0.0f;
  int best_i = -1;
  for (int c = lane; c < cols; c += kWarp) ArgmaxCombine(best, best_i, x[c], c);
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other_v = __shfl_xor_sync(kFullWarp, best, offset);
    const int other_i = __shfl_xor_sync(kFullWarp, best_i, offset);
    ArgmaxCombine(best, best_i, other_v, other_i);
  }
  const double max = best;

  double sum = 0.0;
  for (int c = lane; c < cols; c += kWarp) sum += exp(static_cast<double>(x[c]) - max);
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    sum += __shfl_xor_sync(kFullWarp, sum, offset);
  }

  const int label = labels[row];
  const bool valid = label >= 0 && label < cols;
  if (dlogits != nullptr) {
    float* grad = dlogits + static_cast<size_t>(row) * cols;
    const double inv_sum = 1.0 / sum;
    for (int c = lane; c < cols; c += kWarp) {
      const double p = exp(static_cast<double>(x[c]) - max) * inv_sum;
      grad[c] = static_cast<float>((p - (c == label ? 1.0 : 0.0)) * scale);
    }
  }
  if (lane == 0) {
    row_loss[row] = valid ? log(sum) - (static_cast<double>(x[label]) - max) : nan("");
    row_correct[row] = valid && best_i == label ? 1 : 0;
  }
}

// One block: a fixed-order tree sum, so the loss is the same run to run.
__global__ void SumRowsKernel(const double* row_loss, const int* row_correct, int rows, XentTotals* totals) {
  __shared__ double loss[kThreads];
  __shared__ int hits[kThreads];
  const int t = threadIdx.x;
  double l = 0.0;
  int h = 0;
  for (int r = t; r < rows; r += kThreads) {
    l += row_loss[r];
    h += row_correct[r];
  }
  loss[t] = l;
  hits[t] = h;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (t < stride) {
      loss[t] += loss[t + stride];
      hits[t] += hits[t + stride];
    }
    __syncthreads();
  }
  if (t == 0) {
    totals->loss = loss[0];
    totals->correct = hits[0];
  }
}

}  // namespace

cudaError_t LaunchScale(float* c, size_t n, float beta, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ScaleKernel<<<BlocksFor(n), kThreads, 0, stream>>>(c, n, beta);
  return cudaGetLastError();
}

cudaError_t LaunchBiasActivation(float* y, const float* bias, int rows, int cols, bool relu, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const size_t n = static_cast<size_t>(rows) * cols;
  BiasActivationKernel<<<BlocksFor(n), kThreads, 0, stream>>>(y, bias, n, cols, relu);
  return cudaGetLastError();
}

cudaError_t LaunchReluGrad(float* dy, const float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ReluGradKernel<<<BlocksFor(n), kThreads, 0, stream>>>(dy, y, n);
  return cudaGetLastError();
}

cudaError_t LaunchBiasGrad(const float* dy, int rows, int cols, float* db, cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((cols + kColumnsPerBlock - 1) / kColumnsPerBlock);
  BiasGradKernel<<<blocks, dim3(kColumnsPerBlock, kRowLanes), 0, stream>>>(dy, rows < 0 ? 0 : rows, cols, db);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxCrossEntropy(const float* logits, const int32_t* labels, int rows, int cols, float scale,
                                      float* dlogits, double* row_loss, int* row_correct, XentTotals* totals,
                                      cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaErrorInvalidValue;
  constexpr int kRowsPerBlock = kThreads / kWarp;
  const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  SoftmaxRowsKernel<<<blocks, kThreads, 0, stream>>>(logits, labels, rows, cols, scale, dlogits, row_loss, row_correct);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return error;
  SumRowsKernel<<<1, kThreads, 0, stream>>>(row_loss, row_correct, rows, totals);
  return cudaGetLastError();
}

}  // namespace ps::kernels
