#ifndef PS_WORKER_COMPUTE_CPU_CPU_BACKEND_H_
#define PS_WORKER_COMPUTE_CPU_CPU_BACKEND_H_

// The ComputeBackend on the host CPU: OpenBLAS sgemm for matrix products,
// plain loops (written so that GCC vectorises them) for everything else.
// Backend memory is host memory, so the copies are memcpy, every call has
// finished when it returns, tickets are done as soon as they are recorded and
// Synchronize() returns at once. Not thread-safe: one backend per worker
// thread.

#include <cstddef>
#include <cstdint>
#include <string>

#include "worker/compute/compute_backend.h"

namespace ps {

class CpuBackend final : public ComputeBackend {
 public:
  // Sets OpenBLAS to `threads` threads, so that results and timings do not
  // depend on the machine's default. OpenBLAS keeps that setting process-wide:
  // the last CpuBackend constructed wins. Requires 1 <= threads <= 256 (use
  // CreateBackend() to get a Status instead).
  explicit CpuBackend(int threads);
  ~CpuBackend() override = default;
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

  std::string name() const override { return "cpu"; }
  bool host_memory() const override { return true; }

  // 64-byte aligned, zero-filled; free with Free().
  float* Alloc(size_t n) override;
  void Free(float* d) override;
  // The same memory as Alloc.
  absl::StatusOr<float*> AllocHost(size_t n) override { return Alloc(n); }
  void FreeHost(float* h) override { Free(h); }
  void CopyToDevice(float* d_dst, const float* src, size_t n) override;
  void CopyToHost(float* dst, const float* d_src, size_t n) override;
  Ticket Record() override { return ++last_ticket_; }
  // Always true (CHECKs that the ticket was issued).
  bool Done(Ticket ticket) override;
  void WaitFor(Ticket ticket) override { Done(ticket); }
  void Synchronize() override {}

  void GemmLd(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* d_a, const float* d_b,
              float beta, float* d_c, Ld ld) override;
  void BiasActivation(float* d_y, const float* d_bias, int rows, int cols, bool relu) override;
  void ReluGrad(float* d_dy, const float* d_y, size_t n) override;
  void BiasGrad(const float* d_dy, int rows, int cols, float* d_db) override;
  // Per row: subtracts the row maximum before exponentiating and sums in
  // double, so logits of +-1000 give finite loss and gradient. Ties in the
  // argmax go to the lowest index. Returns 0 for rows <= 0.
  float SoftmaxCrossEntropy(const float* d_logits, const int32_t* labels, int rows, int cols, float* d_dlogits,
                            int* correct) override;

 private:
  Ticket last_ticket_ = 0;
};

}  // namespace ps

#endif  // PS_WORKER_COMPUTE_CPU_CPU_BACKEND_H_
