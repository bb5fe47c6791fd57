#ifndef PS_WORKER_TRAIN_PUSH_POOL_MEMORY_H_
#define PS_WORKER_TRAIN_PUSH_POOL_MEMORY_H_

// The memory of a trainer's PushBufferPool (worker/client/push_buffers.h):
// the compute backend's host memory (ComputeBackend::AllocHost, pinned on a
// GPU), which the model downloads each step's gradients into and the
// pushes keep. That memory can fail to come (pinned memory is scarce), but
// the pool takes no error: a buffer the allocator cannot give comes from
// the heap instead, and the failure is kept for the trainer, which asks for
// it (failure()) once it has taken a step's buffers and ends the step with
// it before anything writes there.
//
// Thread-safe: buffers come back on the client's threads.

#include <cstddef>
#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ps {

class PushPoolMemory {
 public:
  // `alloc(n)`: n floats (AllocHost); `free` takes back what it gave. Both
  // must stay usable until the last buffer is released (the pool's buffers
  // may outlive it: hold this object by shared_ptr in the pool's functions).
  PushPoolMemory(std::function<absl::StatusOr<float*>(size_t)> alloc, std::function<void(float*)> free)
      : alloc_(std::move(alloc)), free_(std::move(free)) {}
  PushPoolMemory(const PushPoolMemory&) = delete;
  PushPoolMemory& operator=(const PushPoolMemory&) = delete;

  // n floats from `alloc`, or from the heap when it fails (never nullptr):
  // PushBufferPool's alloc.
  float* Alloc(size_t n);
  // Back to where it came from: PushBufferPool's free.
  void Free(float* p);
  // The first failure of `alloc`, naming the buffer (a step's gradients to
  // push) and its size, with alloc's code (kResourceExhausted for pinned
  // memory that cannot be had); OK while none failed.
  absl::Status failure() const;

 private:
  const std::function<absl::StatusOr<float*>(size_t)> alloc_;
  const std::function<void(float*)> free_;
  mutable absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<float*> from_heap_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_WORKER_TRAIN_PUSH_POOL_MEMORY_H_
