#ifndef PS_WORKER_COMPUTE_TENSOR_BUFFERS_H_
#define PS_WORKER_COMPUTE_TENSOR_BUFFERS_H_

// The parameter and gradient buffers of a model's tensors (Mlp, MlpStage):
// per tensor, host buffers from the backend's AllocHost (what a KVClient
// pulls into and pushes from; pinned on a GPU) and their device copies,
// which on host memory are the host buffers themselves.

#include <cstddef>
#include <vector>

#include "common/model/model_spec.h"
#include "worker/compute/compute_backend.h"

namespace ps {

struct TensorBuffers {
  std::vector<size_t> sizes;  // elements of tensor t
  std::vector<float*> host_params, host_grads;
  std::vector<float*> d_params, d_grads;

  void Allocate(const std::vector<TensorSpec>& specs, ComputeBackend* backend) {
    const bool host = backend->host_memory();
    for (const TensorSpec& spec : specs) {
      const size_t n = static_cast<size_t>(spec.NumElements());
      sizes.push_back(n);
      host_params.push_back(backend->AllocHost(n));
      host_grads.push_back(backend->AllocHost(n));
      d_params.push_back(host ? host_params.back() : backend->Alloc(n));
      d_grads.push_back(host ? host_grads.back() : backend->Alloc(n));
    }
  }
  // After the backend has finished every use of them.
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
