#ifndef PS_WORKER_COMPUTE_COMPUTE_BACKEND_H_
#define PS_WORKER_COMPUTE_COMPUTE_BACKEND_H_

// What the model code needs from a compute device: memory, matrix multiply,
// bias + activation, softmax cross-entropy and their gradients. `cpu` uses
// OpenBLAS; a `cuda` backend implements the same calls on a GPU.
//
// Pointers named `d_*` live in the backend's memory (Alloc); for the cpu
// backend that is ordinary host memory. Matrices are row-major.
//
// Ordering. The compute calls (Gemm ... SoftmaxCrossEntropy) run in the order
// they are issued, possibly asynchronously on a device, and return before
// they finish (SoftmaxCrossEntropy excepted: it returns the loss, so it waits
// for its own result). Copies may be asynchronous too and are ordered with
// compute as follows:
//  - CopyToDevice starts after all compute issued before it, and all compute
//    issued after it starts after the copy: it may overwrite device memory
//    that earlier compute still reads, and later compute sees the new data.
//  - CopyToHost starts after all compute issued before it (it sees its
//    results), but later compute does NOT wait for it: do not overwrite its
//    device source until a ticket recorded after it is done.
//  - Host memory handed to a copy is the backend's until a ticket recorded
//    after the copy is done: do not write CopyToDevice's source, nor read or
//    write CopyToHost's destination, before then. Copies are truly
//    asynchronous only from and to AllocHost memory; other host memory works
//    but may make the copy synchronous.
// Tickets: Record() marks all work issued so far, compute and copies; Done()
// says without blocking whether that work has finished, WaitFor() blocks
// until it has. Synchronize() waits for everything.
//
// Not thread-safe: one backend per worker thread, and every call (tickets
// included) from that thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps {

class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;

  virtual std::string name() const = 0;
  // True when backend memory is host memory (no copies needed).
  virtual bool host_memory() const = 0;

  // Device memory for n floats, zero-filled. Never nullptr (aborts when out of
  // memory: this happens once at start-up, not per step). Free(nullptr) does
  // nothing.
  virtual float* Alloc(size_t n) = 0;
  virtual void Free(float* d) = 0;
  // Host memory for n floats, zero-filled, that copies to and from the device
  // are fastest with and may run asynchronously from (pinned memory on a
  // GPU): for the buffers a KVClient pulls into and pushes from. Never
  // nullptr; release with FreeHost (FreeHost(nullptr) does nothing). Pinned
  // memory is scarcer than memory: kResourceExhausted when it cannot be had
  // (kUnavailable for another error of the device; the message names its
  // bytes and the device's error), which the caller reports naming what the
  // buffer was for. Host-memory backends abort when out of memory, as Alloc.
  virtual absl::StatusOr<float*> AllocHost(size_t n) = 0;
  virtual void FreeHost(float* h) = 0;

  // n floats from host `src` to device `d_dst` and back; asynchronous, ordered
  // as the file comment says.
  virtual void CopyToDevice(float* d_dst, const float* src, size_t n) = 0;
  virtual void CopyToHost(float* dst, const float* d_src, size_t n) = 0;

  // A ticket (> 0, increasing) for all work issued so far.
  using Ticket = uint64_t;
  virtual Ticket Record() = 0;
  // Whether the work of `ticket` has finished; never blocks. Ticket 0 (no
  // work) is always done. Requires 0 or a ticket this backend returned
  // (CHECKed).
  virtual bool Done(Ticket ticket) = 0;
  // Blocks until the work of `ticket` has finished.
  virtual void WaitFor(Ticket ticket) = 0;
  // Blocks until all work issued so far has finished.
  virtual void Synchronize() = 0;

  // C[m x n] = alpha * op(A) * op(B) + beta * C, with op(A) [m x k] and
  // op(B) [k x n]; op transposes when the flag is set (A is then stored
  // [k x m], B [n x k]).
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* d_a, const float* d_b,
            float beta, float* d_c) {
    GemmLd(trans_a, trans_b, m, n, k, alpha, d_a, d_b, beta, d_c, {});
  }
  // The same on sub-matrices: the leading dimensions (the distance between
  // two stored rows) of A, B and C; 0 stands for the row length as stored,
  // which Gemm uses. A piece of a wider matrix is its first element with
  // the wider matrix's row length.
  struct Ld {
    int a = 0, b = 0, c = 0;
  };
  virtual void GemmLd(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* d_a, const float* d_b,
                      float beta, float* d_c, Ld ld) = 0;
  // y[r][c] += bias[c] for every row r; then y = max(y, 0) when `relu`.
  virtual void BiasActivation(float* d_y, const float* d_bias, int rows, int cols, bool relu) = 0;
  // dy[i] = 0 where y[i] <= 0 (the gradient of ReLU, given its output y).
  virtual void ReluGrad(float* d_dy, const float* d_y, size_t n) = 0;
  // db[c] = sum over rows of dy[r][c].
  virtual void BiasGrad(const float* d_dy, int rows, int cols, float* d_db) = 0;
  // For logits [rows x cols] and host labels: writes the gradient of the mean
  // cross-entropy, (softmax - onehot) / rows, into d_dlogits (may be nullptr
  // when only the loss is wanted) and returns the mean loss; *correct gets
  // how many rows' argmax equals the label. Requires labels in [0, cols).
  // Blocks until the loss is known (all compute issued before it is done).
  virtual float SoftmaxCrossEntropy(const float* d_logits, const int32_t* labels, int rows, int cols, float* d_dlogits,
                                    int* correct) = 0;
  // What SoftmaxCrossEntropy needs for up to `rows` rows (staging buffers,
  // pinned on a GPU), allocated now, so that no step allocates: a model
  // calls it once with its largest batch. kResourceExhausted naming the
  // buffer and its bytes when it cannot be had. A SoftmaxCrossEntropy on
  // more rows than reserved allocates then, and aborts if it cannot. The
  // default, for backends that need nothing: OK.
  virtual absl::Status ReserveLossRows(int rows) {
    (void)rows;
    return absl::OkStatus();
  }
};

struct BackendOptions {
  // "cpu", "cuda", or "null": no arithmetic, the model's memory only
  // (null/null_backend.h), for the servers' path alone.
  std::string device = "cpu";
  int cpu_threads = 1;  // OpenBLAS threads for the cpu backend
  int gpu = -1;         // cuda: device index; -1 = rank modulo device count
  // The worker's rank, for gpu = -1.
  int rank = 0;
};

// kInvalidArgument for an unknown device, cpu_threads outside [1, 256], or
// (cuda) gpu < -1 or gpu >= the device count (naming both); kUnimplemented
// for "cuda" in a build without CUDA; kUnavailable when CUDA is built but no
// GPU is found or the GPU cannot be used (the message has the CUDA error).
absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateBackend(const BackendOptions& options);

}  // namespace ps

#endif  // PS_WORKER_COMPUTE_COMPUTE_BACKEND_H_
