#ifndef PS_WORKER_COMPUTE_HOST_MEMORY_H_
#define PS_WORKER_COMPUTE_HOST_MEMORY_H_

// The host memory of the backends whose device memory is host memory (cpu,
// null): 64-byte aligned (a cache line, and what AVX-512 loads want),
// zero-filled. Thread-safe.

#include <cstddef>

namespace ps {

// n floats (n == 0 still gets a unique pointer). Never nullptr: aborts when
// out of memory (backends allocate once, at start-up).
float* AllocHostFloats(size_t n);
// Releases AllocHostFloats' memory; nullptr does nothing.
void FreeHostFloats(float* p);
// n floats from `src` to `dst` (the copies of a backend whose device memory
// is host memory); nothing when they are the same memory.
void CopyHostFloats(float* dst, const float* src, size_t n);

}  // namespace ps

#endif  // PS_WORKER_COMPUTE_HOST_MEMORY_H_
