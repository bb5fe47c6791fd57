#include "worker/compute/host_memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "glog/logging.h"

namespace ps {
namespace {

constexpr size_t kAlignment = 64;

}  // namespace

float* AllocHostFloats(size_t n) {
  CHECK_LE(n, std::numeric_limits<size_t>::max() / sizeof(float) - kAlignment);
  // aligned_alloc wants a multiple of the alignment.
  const size_t bytes = (std::max<size_t>(n, 1) * sizeof(float) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, bytes);
  CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
  std::memset(p, 0, bytes);
  return static_cast<float*>(p);
}

void FreeHostFloats(float* p) { std::free(p); }

void CopyHostFloats(float* dst, const float* src, size_t n) {
  if (dst != src && n > 0) std::memcpy(dst, src, n * sizeof(float));
}

}  // namespace ps
