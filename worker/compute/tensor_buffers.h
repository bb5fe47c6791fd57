#ifndef PS_WORKER_COMPUTE_TENSOR_BUFFERS_H_
#define PS_WORKER_COMPUTE_TENSOR_BUFFERS_H_

// The parameter and gradient buffers of a model's tensors (Mlp, MlpStage):
// per tensor, host buffers from the backend's AllocHost (what a KVClient
// pulls into and pushes from; pinned on a GPU) and their device copies,
// which on host memory are the host buffers themselves.

#include <cstddef>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model/model_spec.h"
#include "worker/compute/compute_backend.h"

namespace ps {

struct TensorBuffers {
  std::vector<size_t> sizes;  // elements of tensor t
  std::vector<float*> host_params, host_grads;
  std::vector<float*> d_params, d_grads;

  // The buffers of every tensor of `specs`. A host buffer that cannot be had
  // is AllocHost's error (kResourceExhausted) naming the tensor, the buffer
  // (its parameters or its gradient) and its size; what was allocated before
  // stays listed, for Free.
  absl::Status Allocate(const std::vector<TensorSpec>& specs, ComputeBackend* backend) {
    const bool host = backend->host_memory();
    for (const TensorSpec& spec : specs) {
      const size_t n = static_cast<size_t>(spec.NumElements());
      for (auto [buffers, what] : {std::pair{&host_params, "parameters"}, std::pair{&host_grads, "gradient"}}) {
        absl::StatusOr<float*> h = backend->AllocHost(n);
        if (!h.ok()) {
          return absl::Status(h.status().code(),
                              absl::StrCat("no host buffer for the ", what, " of tensor '", spec.name, "' (", n,
                                           " floats, ", n * sizeof(float), " bytes): ", h.status().message()));
        }
        buffers->push_back(*h);
      }
      sizes.push_back(n);
      d_params.push_back(host ? host_params.back() : backend->Alloc(n));
      d_grads.push_back(host ? host_grads.back() : backend->Alloc(n));
    }
    return absl::OkStatus();
  }
  // After the backend has finished every use of them (also after an
  // Allocate that failed part way).
  void Free(ComputeBackend* backend) {
    if (!backend->host_memory()) {
      for (float* d : d_params) backend->Free(d);
      for (float* d : d_grads) backend->Free(d);
    }
    for (float* h : host_params) backend->FreeHost(h);
    for (float* h : host_grads) backend->FreeHost(h);
  }
};

}  // namespace ps

#endif  // PS_WORKER_COMPUTE_TENSOR_BUFFERS_H_
