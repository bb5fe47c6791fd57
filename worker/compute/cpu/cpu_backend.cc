#include "worker/compute/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "glog/logging.h"
#include "worker/compute/host_memory.h"

namespace ps {
namespace {

// The loops below take __restrict pointers and keep branches out of their
// bodies so that GCC vectorises them without runtime alias checks.
void AddBiasRow(float* __restrict y, const float* __restrict bias, int cols) {
  for (int c = 0; c < cols; ++c) y[c] += bias[c];
}

void AddBiasReluRow(float* __restrict y, const float* __restrict bias, int cols) {
  // std::max(v, 0) keeps a NaN in v, so a diverging run stays visible.
  for (int c = 0; c < cols; ++c) y[c] = std::max(y[c] + bias[c], 0.0f);
}

void AccumulateRow(float* __restrict sum, const float* __restrict row, int cols) {
  for (int c = 0; c < cols; ++c) sum[c] += row[c];
}

void ReluGradLoop(float* __restrict dy, const float* __restrict y, size_t n) {
  for (size_t i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// Cross-entropy of one row; writes (softmax - onehot) * scale into `grad`
// when it is not null and returns -log softmax[label].
double SoftmaxRow(const float* logits, int label, int cols, float scale, float* grad) {
  const float max = *std::max_element(logits, logits + cols);
  double sum = 0;
  for (int c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(logits[c]) - max);
  const double log_sum = std::log(sum);
  if (grad != nullptr) {
    const double inv_sum = 1.0 / sum;
    for (int c = 0; c < cols; ++c) {
      const double p = std::exp(static_cast<double>(logits[c]) - max) * inv_sum;
      grad[c] = static_cast<float>((p - (c == label ? 1.0 : 0.0)) * scale);
    }
  }
  return log_sum - (static_cast<double>(logits[label]) - max);
}

}  // namespace

CpuBackend::CpuBackend(int threads) {
  CHECK(threads >= 1 && threads <= 256) << "cpu threads " << threads;
  openblas_set_num_threads(threads);
}

float* CpuBackend::Alloc(size_t n) { return AllocHostFloats(n); }

void CpuBackend::Free(float* d) { FreeHostFloats(d); }

void CpuBackend::CopyToDevice(float* d_dst, const float* src, size_t n) { CopyHostFloats(d_dst, src, n); }

void CpuBackend::CopyToHost(float* dst, const float* d_src, size_t n) { CopyHostFloats(dst, d_src, n); }

bool CpuBackend::Done(Ticket ticket) {
  CHECK_LE(ticket, last_ticket_) << "ticket was never recorded";
  return true;
}

void CpuBackend::GemmLd(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* d_a,
                        const float* d_b, float beta, float* d_c, Ld ld) {
  if (m <= 0 || n <= 0) return;
  // Leading dimensions default to the row lengths as stored; BLAS insists
  // on >= 1 even when k == 0.
  const int lda = std::max(1, ld.a > 0 ? ld.a : trans_a ? m : k);
  const int ldb = std::max(1, ld.b > 0 ? ld.b : trans_b ? k : n);
  const int ldc = ld.c > 0 ? ld.c : n;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              d_a, lda, d_b, ldb, beta, d_c, ldc);
}

void CpuBackend::BiasActivation(float* d_y, const float* d_bias, int rows, int cols, bool relu) {
  for (int r = 0; r < rows; ++r) {
    float* row = d_y + static_cast<size_t>(r) * cols;
    if (relu) {
      AddBiasReluRow(row, d_bias, cols);
    } else {
      AddBiasRow(row, d_bias, cols);
    }
  }
}

void CpuBackend::ReluGrad(float* d_dy, const float* d_y, size_t n) { ReluGradLoop(d_dy, d_y, n); }

void CpuBackend::BiasGrad(const float* d_dy, int rows, int cols, float* d_db) {
  std::fill(d_db, d_db + std::max(cols, 0), 0.0f);
  for (int r = 0; r < rows; ++r) AccumulateRow(d_db, d_dy + static_cast<size_t>(r) * cols, cols);
}

float CpuBackend::SoftmaxCrossEntropy(const float* d_logits, const int32_t* labels, int rows, int cols,
                                      float* d_dlogits, int* correct) {
  int right = 0;
  double total = 0;
  const float scale = rows > 0 ? 1.0f / static_cast<float>(rows) : 0.0f;
  for (int r = 0; r < rows; ++r) {
    const size_t offset = static_cast<size_t>(r) * cols;
    const float* logits = d_logits + offset;
    const int label = labels[r];
    DCHECK(label >= 0 && label < cols) << "label " << label << " in row " << r;
    total += SoftmaxRow(logits, label, cols, scale, d_dlogits == nullptr ? nullptr : d_dlogits + offset);
    right += std::max_element(logits, logits + cols) - logits == label;
  }
  if (correct != nullptr) *correct = right;
  return rows > 0 ? static_cast<float>(total / rows) : 0.0f;
}

}  // namespace ps
