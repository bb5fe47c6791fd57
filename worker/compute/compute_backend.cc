#include "worker/compute/compute_backend.h"

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/compute/cpu/cpu_backend.h"
#include "worker/compute/null/null_backend.h"

#ifdef PS_HAVE_CUDA
#include <dlfcn.h>
#include <unistd.h>

#include <mutex>
#include <string>
#endif

namespace ps {
namespace {

#ifdef PS_HAVE_CUDA
using CreateFn = void (*)(const BackendOptions&, absl::StatusOr<std::unique_ptr<ComputeBackend>>*);

// The module as built (PS_CUDA_MODULE), or beside the running program.
std::string ModulePath() {
  if (access(PS_CUDA_MODULE, R_OK) == 0) return PS_CUDA_MODULE;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return PS_CUDA_MODULE;
  const std::string self(exe, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/') + 1) + "libps_cuda.so";
}

// libps_cuda.so, loaded on the first cuda backend and kept for the life of
// the process (its code runs every backend made from it).
absl::StatusOr<CreateFn> LoadCudaModule() {
  static std::once_flag once;
  static absl::StatusOr<CreateFn> create = absl::UnknownError("not loaded");
  std::call_once(once, [] {
    const std::string path = ModulePath();
    void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (module == nullptr) {
      const char* why = dlerror();
      create = absl::UnavailableError(absl::StrCat("cannot load the CUDA backend ", path, ": ", why ? why : "?"));
      return;
    }
    auto* fn = reinterpret_cast<CreateFn>(dlsym(module, "ps_create_cuda_backend"));
    if (fn == nullptr) {
      const char* why = dlerror();
      create = absl::UnavailableError(absl::StrCat(path, " has no ps_create_cuda_backend: ", why ? why : "null"));
      return;
    }
    create = fn;
  });
  return create;
}
#endif

}  // namespace

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateBackend(const BackendOptions& options) {
  if (options.device != "cpu" && options.device != "cuda" && options.device != "null") {
    return absl::InvalidArgumentError(
        absl::StrCat("device \"", options.device, "\" is unknown; use one of: cpu, cuda, null"));
  }
  if (options.cpu_threads < 1 || options.cpu_threads > 256) {
    return absl::InvalidArgumentError(absl::StrCat("cpu_threads ", options.cpu_threads, " is outside [1, 256]"));
  }
  if (options.device == "cpu") {
    return std::unique_ptr<ComputeBackend>(std::make_unique<CpuBackend>(options.cpu_threads));
  }
  if (options.device == "null") return std::unique_ptr<ComputeBackend>(std::make_unique<NullBackend>());
#ifdef PS_HAVE_CUDA
  absl::StatusOr<CreateFn> create = LoadCudaModule();
  if (!create.ok()) return create.status();
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend = absl::UnknownError("not created");
  (*create)(options, &backend);
  return backend;
#else
  return absl::UnimplementedError(
      "this build has no CUDA support; rebuild on a machine with the CUDA toolkit (nvcc) or use "
      "--device=cpu");
#endif
}

}  // namespace ps
