// The entry point CreateBackend() looks up in libps_cuda.so after dlopen
// (worker/compute/compute_backend.cc): unmangled, so dlsym finds it by this name.
// Both sides are this build, with the same compiler and Abseil, so the C++
// types in its signature mean the same on both.
#include "worker/compute/cuda/cuda_backend.h"

extern "C" __attribute__((visibility("default"))) void ps_create_cuda_backend(
    const ps::BackendOptions& options, absl::StatusOr<std::unique_ptr<ps::ComputeBackend>>* out) {
  *out = ps::CreateCudaBackend(options);
}
