#include "worker/train/push_pool_memory.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {

float* PushPoolMemory::Alloc(size_t n) {
  absl::StatusOr<float*> p = alloc_(n);
  if (p.ok()) return *p;
  float* heap = new float[n > 0 ? n : 1]();
  absl::MutexLock lock(&mu_);
  from_heap_.insert(heap);
  if (failure_.ok()) {
    failure_ =
        absl::Status(p.status().code(), absl::StrCat("no host buffer for a step's gradients to push (", n, " floats, ",
                                                     n * sizeof(float), " bytes): ", p.status().message()));
  }
  return heap;
}

void PushPoolMemory::Free(float* p) {
  {
    absl::MutexLock lock(&mu_);
    if (from_heap_.erase(p) > 0) {
      delete[] p;
      return;
    }
  }
  free_(p);
}

absl::Status PushPoolMemory::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

}  // namespace ps
