#ifndef PS_WORKER_COMPUTE_CUDA_CUDA_BACKEND_H_
#define PS_WORKER_COMPUTE_CUDA_CUDA_BACKEND_H_

// The ComputeBackend on an NVIDIA GPU: cuBLAS SGEMM for matrix products (in
// full float32: no TF32, so results match the cpu backend to rounding) and
// the kernels of cuda_kernels.cu for the rest. Built only when CMake finds
// nvcc (PS_HAVE_CUDA); the class stays inside cuda_backend.cc so that nothing
// outside worker/cuda sees a CUDA type.
//
// Streams. Compute (cuBLAS and kernels) runs in issue order on one stream;
// CopyToDevice runs on an upload stream and CopyToHost on a download stream,
// ordered with compute by events exactly as compute_backend.h promises:
// an upload waits for the compute issued before it and the compute issued
// after it waits for the upload; a download waits for the compute issued
// before it and nothing waits for the download. So gradients already computed
// travel to the host while the GPU computes the next layer's. AllocHost is
// pinned memory (cudaHostAlloc), which the copies need to be asynchronous.
//
// Tickets are a ring of 64 pre-created event triples (compute, upload,
// download stream): Record() records the next triple, Done() queries it,
// WaitFor() synchronizes on it. A ticket more than 64 records old is answered
// conservatively (its slot holds a later ticket, whose completion implies its
// own): Done() may say false a little longer, WaitFor() may wait a little
// longer, never less.
//
// Buffers are allocated at start-up (SoftmaxCrossEntropy's label staging
// for ReserveLossRows' rows, or when a larger batch than any before
// arrives), never per step. Pinned host memory that cannot be had
// (AllocHost, ReserveLossRows, and at start-up) is an error naming the
// buffer and its bytes, for the trainer to report. Any other failing CUDA
// or cuBLAS call after start-up (a device fault or a bug; nothing a caller
// could retry) aborts with the call and CUDA's error string.
// Not thread-safe: one backend per worker thread; each call makes the
// backend's GPU the calling thread's current device.

#include <memory>

#include "absl/status/statusor.h"
#include "worker/compute/compute_backend.h"

namespace ps {

// Picks GPU options.gpu, or options.rank modulo the device count when it is
// -1, and sets up its streams, events and cuBLAS handle.
// kInvalidArgument for gpu < -1 or gpu >= the device count (naming both);
// kUnavailable "no GPU found: ..." with CUDA's error when the driver reports
// none or fails (a machine without a GPU reports "CUDA driver version is
// insufficient for CUDA runtime version"), and kUnavailable naming the call
// and error when the chosen GPU cannot be set up or cannot run this build's
// kernels. `options.device` is not looked at.
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCudaBackend(const BackendOptions& options);

}  // namespace ps

#endif  // PS_WORKER_COMPUTE_CUDA_CUDA_BACKEND_H_
