#ifndef PS_WORKER_COMPUTE_NULL_NULL_BACKEND_H_
#define PS_WORKER_COMPUTE_NULL_NULL_BACKEND_H_

// The ComputeBackend of an infinitely fast device (--device=null): memory of
// the model's shapes in host memory, as the cpu backend has it, and no
// arithmetic at all. The trainer keeps its exact exchange pattern (layers in
// pieces, pushes as backward produces them, pulls before forward), so a
// worker on it runs at the rate the servers' path alone allows: the ceiling
// a worker with a faster GPU approaches. Gradients stay what the buffers hold
// (zeros), the loss is 0 and no prediction is correct.
//
// Not thread-safe: one backend per worker thread.

#include <cstddef>
#include <cstdint>
#include <string>

#include "worker/compute/compute_backend.h"

namespace ps {

class NullBackend final : public ComputeBackend {
 public:
  NullBackend() = default;
  ~NullBackend() override = default;
  NullBackend(const NullBackend&) = delete;
  NullBackend& operator=(const NullBackend&) = delete;

  std::string name() const override { return "null"; }
  bool host_memory() const override { return true; }

  // 64-byte aligned, zero-filled host memory; free with Free().
  float* Alloc(size_t n) override;
  void Free(float* d) override;
  absl::StatusOr<float*> AllocHost(size_t n) override { return Alloc(n); }
  void FreeHost(float* h) override { Free(h); }
  // Device and host memory are the same memory: a copy is a memcpy, as on
  // the cpu backend (the trainer never copies on a host-memory backend).
  void CopyToDevice(float* d_dst, const float* src, size_t n) override;
  void CopyToHost(float* dst, const float* d_src, size_t n) override;
  Ticket Record() override { return ++last_ticket_; }
  bool Done(Ticket ticket) override;
  void WaitFor(Ticket ticket) override { Done(ticket); }
  void Synchronize() override {}

  // None of these computes anything.
  void GemmLd(bool, bool, int, int, int, float, const float*, const float*, float, float*, Ld) override {}
  void BiasActivation(float*, const float*, int, int, bool) override {}
  void ReluGrad(float*, const float*, size_t) override {}
  void BiasGrad(const float*, int, int, float*) override {}
  // Returns 0 and sets *correct to 0; d_dlogits is left as it is.
  float SoftmaxCrossEntropy(const float* d_logits, const int32_t* labels, int rows, int cols, float* d_dlogits,
                            int* correct) override;

 private:
  Ticket last_ticket_ = 0;
};

}  // namespace ps

#endif  // PS_WORKER_COMPUTE_NULL_NULL_BACKEND_H_
