#include "worker/compute_backend.h"

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/cpu/cpu_backend.h"

#ifdef PS_HAVE_CUDA
#include "worker/cuda/cuda_backend.h"
#endif

namespace ps {

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateBackend(const BackendOptions& options) {
  if (options.device != "cpu" && options.device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("device \"", options.device, "\" is unknown; use one of: cpu, cuda"));
  }
  if (options.cpu_threads < 1 || options.cpu_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu_threads ", options.cpu_threads, " is outside [1, 256]"));
  }
  if (options.device == "cpu") {
    return std::unique_ptr<ComputeBackend>(std::make_unique<CpuBackend>(options.cpu_threads));
  }
#ifdef PS_HAVE_CUDA
  return CreateCudaBackend(options);
#else
  return absl::UnimplementedError(
      "this build has no CUDA support; rebuild on a machine with the CUDA toolkit (nvcc) or use "
      "--device=cpu");
#endif
}

}  // namespace ps
