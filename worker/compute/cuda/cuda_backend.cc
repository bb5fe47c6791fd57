#include "worker/compute/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"
#include "worker/compute/cuda/cuda_kernels.h"

// For calls after a successful start-up: an error there is a device fault or
// a bug, which no caller can handle, so it aborts naming the call and CUDA's
// error.
#define PS_CUDA_CHECK(expr)                                                                           \
  do {                                                                                                \
    const cudaError_t ps_cuda_error_ = (expr);                                                        \
    CHECK(ps_cuda_error_ == cudaSuccess) << #expr << ": " << cudaGetErrorName(ps_cuda_error_) << ": " \
                                         << cudaGetErrorString(ps_cuda_error_);                       \
  } while (0)

#define PS_CUBLAS_CHECK(expr)                                                                                    \
  do {                                                                                                           \
    const cublasStatus_t ps_cublas_status_ = (expr);                                                             \
    CHECK(ps_cublas_status_ == CUBLAS_STATUS_SUCCESS) << #expr << ": " << cublasGetStatusName(ps_cublas_status_) \
                                                      << ": " << cublasGetStatusString(ps_cublas_status_);       \
  } while (0)

// For the destructor, which must not abort over a failing release.
#define PS_CUDA_LOG_IF_ERROR(expr)                                                                          \
  do {                                                                                                      \
    const cudaError_t ps_cuda_error_ = (expr);                                                              \
    LOG_IF(ERROR, ps_cuda_error_ != cudaSuccess)                                                            \
        << #expr << ": " << cudaGetErrorName(ps_cuda_error_) << ": " << cudaGetErrorString(ps_cuda_error_); \
  } while (0)

namespace ps {
namespace {

constexpr int kTicketSlots = 64;
// SoftmaxCrossEntropy's staging buffers start at this many rows.
constexpr int kInitialRows = 256;

std::string CudaError(cudaError_t error) {
  return absl::StrCat(cudaGetErrorName(error), ": ", cudaGetErrorString(error));
}

// For start-up calls: the GPU cannot be used, which a caller may report (and
// fall back to the cpu) instead of aborting.
absl::Status SetupStatus(int device, const char* call, cudaError_t error) {
  if (error == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();  // do not let a later launch check trip over it
  return absl::UnavailableError(absl::StrCat("GPU ", device, ": ", call, " failed: ", CudaError(error)));
}

// An allocation that failed, named by `what` (the memory and what it is
// for) and its bytes: kResourceExhausted when the memory could not be had,
// kUnavailable for another error of the device.
absl::Status AllocStatus(int device, const char* call, absl::string_view what, size_t bytes, cudaError_t error) {
  if (error == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();  // do not let a later launch check trip over it
  const std::string message =
      absl::StrCat("GPU ", device, ": ", what, ": ", call, " of ", bytes, " bytes failed: ", CudaError(error));
  return error == cudaErrorMemoryAllocation ? absl::ResourceExhaustedError(message) : absl::UnavailableError(message);
}

size_t Bytes(size_t n) {
  CHECK_LE(n, std::numeric_limits<size_t>::max() / sizeof(float));
  // A real, distinct pointer even for n == 0, as the cpu backend gives.
  return std::max<size_t>(n, 1) * sizeof(float);
}

class CudaBackend final : public ComputeBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // Streams, events, cuBLAS, the loss buffers, and a probe kernel that proves
  // this build has code for the GPU. kUnavailable naming the failing call.
  absl::Status Init();

  std::string name() const override { return "cuda"; }
  bool host_memory() const override { return false; }

  float* Alloc(size_t n) override;
  // Waits for all work first: pending work may still use the memory.
  void Free(float* d) override;
  // Pinned (page-locked) memory: kResourceExhausted (or kUnavailable) naming
  // its bytes when cudaHostAlloc fails.
  absl::StatusOr<float*> AllocHost(size_t n) override;
  // Waits for all work first: a pending copy may still use the memory.
  void FreeHost(float* h) override;
  void CopyToDevice(float* d_dst, const float* src, size_t n) override;
  void CopyToHost(float* dst, const float* d_src, size_t n) override;
  Ticket Record() override;
  bool Done(Ticket ticket) override;
  void WaitFor(Ticket ticket) override;
  void Synchronize() override;

  void GemmLd(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* d_a, const float* d_b,
              float beta, float* d_c, Ld ld) override;
  void BiasActivation(float* d_y, const float* d_bias, int rows, int cols, bool relu) override;
  void ReluGrad(float* d_dy, const float* d_y, size_t n) override;
  void BiasGrad(const float* d_dy, int rows, int cols, float* d_db) override;
  float SoftmaxCrossEntropy(const float* d_logits, const int32_t* labels, int rows, int cols, float* d_dlogits,
                            int* correct) override;
  absl::Status ReserveLossRows(int rows) override;

 private:
  // Each call's CUDA work goes to this backend's GPU, whichever device the
  // calling thread had current (streams and memory belong to one device).
  void Use() { PS_CUDA_CHECK(cudaSetDevice(device_)); }
  // The loss buffers for at least `rows` rows. A failing allocation is its
  // error (AllocStatus) naming the buffer; none is left allocated then.
  absl::Status GrowLossBuffers(int rows);
  void FreeLossBuffers();

  const int device_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t upload_ = nullptr;
  cudaStream_t download_ = nullptr;
  // Re-recorded by every copy: "compute issued so far" for a copy to wait
  // on, and "the last upload" for compute to wait on. A stream waits on the
  // record current when it is told to wait, so re-recording is safe.
  cudaEvent_t compute_mark_ = nullptr;
  cudaEvent_t upload_mark_ = nullptr;
  // Slot t % kTicketSlots: events on compute_, upload_, download_ (in that
  // order) for ticket t.
  std::array<std::array<cudaEvent_t, 3>, kTicketSlots> tickets_{};
  Ticket last_ticket_ = 0;
  Ticket done_through_ = 0;  // every ticket up to this one is known done
  cublasHandle_t cublas_ = nullptr;

  // SoftmaxCrossEntropy: labels staged through pinned memory, per-row loss
  // and hits, and their totals read back through pinned memory. Sized for
  // loss_rows_ rows; grown, never per step.
  int loss_rows_ = 0;
  int32_t* h_labels_ = nullptr;
  int32_t* d_labels_ = nullptr;
  double* d_row_loss_ = nullptr;
  int* d_row_correct_ = nullptr;
  kernels::XentTotals* d_totals_ = nullptr;
  kernels::XentTotals* h_totals_ = nullptr;
};

absl::Status CudaBackend::Init() {
  PS_RETURN_IF_ERROR(SetupStatus(device_, "cudaSetDevice", cudaSetDevice(device_)));
  for (cudaStream_t* stream : {&compute_, &upload_, &download_}) {
    // Non-blocking: no implicit ordering with the legacy default stream,
    // which other code in the process may use.
    PS_RETURN_IF_ERROR(
        SetupStatus(device_, "cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking)));
  }
  for (cudaEvent_t* event : {&compute_mark_, &upload_mark_}) {
    PS_RETURN_IF_ERROR(
        SetupStatus(device_, "cudaEventCreateWithFlags", cudaEventCreateWithFlags(event, cudaEventDisableTiming)));
  }
  for (auto& slot : tickets_) {
    for (cudaEvent_t& event : slot) {
      PS_RETURN_IF_ERROR(
          SetupStatus(device_, "cudaEventCreateWithFlags", cudaEventCreateWithFlags(&event, cudaEventDisableTiming)));
    }
  }
  const cublasStatus_t blas = cublasCreate(&cublas_);
  if (blas != CUBLAS_STATUS_SUCCESS) {
    cublas_ = nullptr;
    return absl::UnavailableError(absl::StrCat("GPU ", device_, ": cublasCreate failed: ", cublasGetStatusName(blas),
                                               ": ", cublasGetStatusString(blas)));
  }
  PS_CUBLAS_CHECK(cublasSetStream(cublas_, compute_));
  // Full float32 products. CUBLAS_DEFAULT_MATH never lowers precision (TF32
  // would need CUBLAS_TF32_TENSOR_OP_MATH), so results match the cpu backend
  // to float rounding; say so explicitly.
  PS_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  PS_RETURN_IF_ERROR(SetupStatus(device_, "cudaMalloc",
                                 cudaMalloc(reinterpret_cast<void**>(&d_totals_), sizeof(kernels::XentTotals))));
  PS_RETURN_IF_ERROR(AllocStatus(
      device_, "cudaHostAlloc", "pinned host memory for the loss totals read back from the GPU",
      sizeof(kernels::XentTotals),
      cudaHostAlloc(reinterpret_cast<void**>(&h_totals_), sizeof(kernels::XentTotals), cudaHostAllocDefault)));
  // The probe: a GPU older than the architectures this build has code for
  // fails here ("no kernel image is available"), not at the first step.
  PS_RETURN_IF_ERROR(SetupStatus(device_, "a probe kernel",
                                 kernels::LaunchScale(reinterpret_cast<float*>(d_totals_),
                                                      sizeof(kernels::XentTotals) / sizeof(float), 0.0f, compute_)));
  PS_RETURN_IF_ERROR(SetupStatus(device_, "cudaStreamSynchronize", cudaStreamSynchronize(compute_)));
  return GrowLossBuffers(kInitialRows);
}

CudaBackend::~CudaBackend() {
  PS_CUDA_LOG_IF_ERROR(cudaSetDevice(device_));
  for (cudaStream_t stream : {compute_, upload_, download_}) {
    if (stream != nullptr) PS_CUDA_LOG_IF_ERROR(cudaStreamSynchronize(stream));
  }
  FreeLossBuffers();
  if (d_totals_ != nullptr) PS_CUDA_LOG_IF_ERROR(cudaFree(d_totals_));
  if (h_totals_ != nullptr) PS_CUDA_LOG_IF_ERROR(cudaFreeHost(h_totals_));
  if (cublas_ != nullptr) {
    const cublasStatus_t status = cublasDestroy(cublas_);
    LOG_IF(ERROR, status != CUBLAS_STATUS_SUCCESS) << "cublasDestroy: " << cublasGetStatusString(status);
  }
  for (auto& slot : tickets_) {
    for (cudaEvent_t event : slot) {
      if (event != nullptr) PS_CUDA_LOG_IF_ERROR(cudaEventDestroy(event));
    }
  }
  for (cudaEvent_t event : {compute_mark_, upload_mark_}) {
    if (event != nullptr) PS_CUDA_LOG_IF_ERROR(cudaEventDestroy(event));
  }
  for (cudaStream_t stream : {compute_, upload_, download_}) {
    if (stream != nullptr) PS_CUDA_LOG_IF_ERROR(cudaStreamDestroy(stream));
  }
}

absl::Status CudaBackend::GrowLossBuffers(int rows) {
  if (rows <= loss_rows_) return absl::OkStatus();
  // Every earlier SoftmaxCrossEntropy synchronized before returning, so
  // nothing in flight uses the old buffers.
  FreeLossBuffers();
  const size_t n = static_cast<size_t>(rows);
  const std::string of = absl::StrCat(" of SoftmaxCrossEntropy for ", rows, " rows");
  absl::Status s =
      AllocStatus(device_, "cudaHostAlloc", absl::StrCat("pinned host memory for the labels", of), n * sizeof(int32_t),
                  cudaHostAlloc(reinterpret_cast<void**>(&h_labels_), n * sizeof(int32_t), cudaHostAllocDefault));
  const auto device_memory = [&](void** p, size_t bytes, const char* what) {
    return AllocStatus(device_, "cudaMalloc", absl::StrCat("device memory for ", what, of), bytes,
                       cudaMalloc(p, bytes));
  };
  if (s.ok()) s = device_memory(reinterpret_cast<void**>(&d_labels_), n * sizeof(int32_t), "the labels");
  if (s.ok()) s = device_memory(reinterpret_cast<void**>(&d_row_loss_), n * sizeof(double), "the losses per row");
  if (s.ok()) s = device_memory(reinterpret_cast<void**>(&d_row_correct_), n * sizeof(int), "the hits per row");
  if (!s.ok()) {
    FreeLossBuffers();
    return s;
  }
  loss_rows_ = rows;
  return absl::OkStatus();
}

absl::Status CudaBackend::ReserveLossRows(int rows) {
  Use();
  return GrowLossBuffers(rows);
}

void CudaBackend::FreeLossBuffers() {
  if (h_labels_ != nullptr) PS_CUDA_LOG_IF_ERROR(cudaFreeHost(h_labels_));
  for (void* d : {static_cast<void*>(d_labels_), static_cast<void*>(d_row_loss_), static_cast<void*>(d_row_correct_)}) {
    if (d != nullptr) PS_CUDA_LOG_IF_ERROR(cudaFree(d));
  }
  h_labels_ = nullptr;
  d_labels_ = nullptr;
  d_row_loss_ = nullptr;
  d_row_correct_ = nullptr;
  loss_rows_ = 0;
}

float* CudaBackend::Alloc(size_t n) {
  Use();
  const size_t bytes = Bytes(n);
  void* p = nullptr;
  PS_CUDA_CHECK(cudaMalloc(&p, bytes));
  // On the compute stream, which every later copy and kernel is ordered
  // after (a plain cudaMemset would go to the legacy stream, which our
  // non-blocking streams do not wait for).
  PS_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, compute_));
  return static_cast<float*>(p);
}

void CudaBackend::Free(float* d) {
  if (d == nullptr) return;
  Synchronize();
  PS_CUDA_CHECK(cudaFree(d));
}

absl::StatusOr<float*> CudaBackend::AllocHost(size_t n) {
  Use();
  const size_t bytes = Bytes(n);
  void* p = nullptr;
  PS_RETURN_IF_ERROR(AllocStatus(device_, "cudaHostAlloc", "pinned host memory", bytes,
                                 cudaHostAlloc(&p, bytes, cudaHostAllocDefault)));
  std::memset(p, 0, bytes);
  return static_cast<float*>(p);
}

void CudaBackend::FreeHost(float* h) {
  if (h == nullptr) return;
  Synchronize();
  PS_CUDA_CHECK(cudaFreeHost(h));
}

void CudaBackend::CopyToDevice(float* d_dst, const float* src, size_t n) {
  if (n == 0) return;
  Use();
  // Earlier compute may still read d_dst; later compute must see the copy.
  PS_CUDA_CHECK(cudaEventRecord(compute_mark_, compute_));
  PS_CUDA_CHECK(cudaStreamWaitEvent(upload_, compute_mark_, 0));
  PS_CUDA_CHECK(cudaMemcpyAsync(d_dst, src, n * sizeof(float), cudaMemcpyHostToDevice, upload_));
  PS_CUDA_CHECK(cudaEventRecord(upload_mark_, upload_));
  PS_CUDA_CHECK(cudaStreamWaitEvent(compute_, upload_mark_, 0));
}

void CudaBackend::CopyToHost(float* dst, const float* d_src, size_t n) {
  if (n == 0) return;
  Use();
  // After the compute that produced d_src; compute goes on meanwhile. An
  // upload issued before is covered too: compute issued after it waits for it.
  PS_CUDA_CHECK(cudaEventRecord(compute_mark_, compute_));
  PS_CUDA_CHECK(cudaStreamWaitEvent(download_, compute_mark_, 0));
  PS_CUDA_CHECK(cudaMemcpyAsync(dst, d_src, n * sizeof(float), cudaMemcpyDeviceToHost, download_));
}

ComputeBackend::Ticket CudaBackend::Record() {
  Use();
  ++last_ticket_;
  std::array<cudaEvent_t, 3>& slot = tickets_[last_ticket_ % kTicketSlots];
  PS_CUDA_CHECK(cudaEventRecord(slot[0], compute_));
  PS_CUDA_CHECK(cudaEventRecord(slot[1], upload_));
  PS_CUDA_CHECK(cudaEventRecord(slot[2], download_));
  return last_ticket_;
}

bool CudaBackend::Done(Ticket ticket) {
  CHECK_LE(ticket, last_ticket_) << "ticket was never recorded";
  if (ticket <= done_through_) return true;
  Use();
  // The slot holds `ticket` or a later one (see the header); either way its
  // events all being done means `ticket` is.
  for (cudaEvent_t event : tickets_[ticket % kTicketSlots]) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not ready" is an answer, not an error to keep
      return false;
    }
    PS_CUDA_CHECK(status);
  }
  done_through_ = std::max(done_through_, ticket);
  return true;
}

void CudaBackend::WaitFor(Ticket ticket) {
  CHECK_LE(ticket, last_ticket_) << "ticket was never recorded";
  if (ticket <= done_through_) return;
  Use();
  for (cudaEvent_t event : tickets_[ticket % kTicketSlots]) {
    PS_CUDA_CHECK(cudaEventSynchronize(event));
  }
  done_through_ = std::max(done_through_, ticket);
}

void CudaBackend::Synchronize() {
  Use();
  for (cudaStream_t stream : {compute_, upload_, download_}) {
    PS_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  done_through_ = last_ticket_;
}

void CudaBackend::GemmLd(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* d_a,
                         const float* d_b, float beta, float* d_c, Ld ld) {
  CHECK_GE(k, 0);
  if (m <= 0 || n <= 0) return;
  Use();
  if (k == 0) {  // C = beta * C, as BLAS defines it
    CHECK(ld.c == 0 || ld.c == n) << "k == 0 scales a contiguous C only";
    PS_CUDA_CHECK(kernels::LaunchScale(d_c, static_cast<size_t>(m) * n, beta, compute_));
    return;
  }
  // cuBLAS is column-major, and a row-major matrix read column-major is its
  // transpose. So row-major C = op(A) op(B) is column-major
  // C^T [n x m] = op(B)^T op(A)^T: pass B first and A second, with n and m
  // swapped, each transposed exactly when the caller asked. The leading
  // dimensions are the row lengths as stored, as for row-major BLAS.
  const int lda = ld.a > 0 ? ld.a : trans_a ? m : k;
  const int ldb = ld.b > 0 ? ld.b : trans_b ? k : n;
  const int ldc = ld.c > 0 ? ld.c : n;
  PS_CUBLAS_CHECK(cublasSgemm(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
                              k, &alpha, d_b, ldb, d_a, lda, &beta, d_c, ldc));
}

void CudaBackend::BiasActivation(float* d_y, const float* d_bias, int rows, int cols, bool relu) {
  Use();
  PS_CUDA_CHECK(kernels::LaunchBiasActivation(d_y, d_bias, rows, cols, relu, compute_));
}

void CudaBackend::ReluGrad(float* d_dy, const float* d_y, size_t n) {
  Use();
  PS_CUDA_CHECK(kernels::LaunchReluGrad(d_dy, d_y, n, compute_));
}

void CudaBackend::BiasGrad(const float* d_dy, int rows, int cols, float* d_db) {
  Use();
  PS_CUDA_CHECK(kernels::LaunchBiasGrad(d_dy, rows, cols, d_db, compute_));
}

float CudaBackend::SoftmaxCrossEntropy(const float* d_logits, const int32_t* labels, int rows, int cols,
                                       float* d_dlogits, int* correct) {
  if (rows <= 0) {
    if (correct != nullptr) *correct = 0;
    return 0.0f;
  }
  CHECK_GE(cols, 1);
  for (int r = 0; r < rows; ++r) {
    DCHECK(labels[r] >= 0 && labels[r] < cols) << "label " << labels[r] << " in row " << r;
  }
  Use();
  if (rows > loss_rows_) {
    // More rows than ReserveLossRows made room for: allocated now, or the
    // step cannot go on.
    const absl::Status grown = GrowLossBuffers(rows);
    CHECK(grown.ok()) << grown << " (ReserveLossRows with the largest batch reports this as an error instead)";
  }
  // Labels are host memory of any kind: stage them through pinned memory so
  // the copy is a plain DMA on the compute stream. The last call synchronized,
  // so h_labels_ is free to overwrite.
  std::memcpy(h_labels_, labels, static_cast<size_t>(rows) * sizeof(int32_t));
  PS_CUDA_CHECK(cudaMemcpyAsync(d_labels_, h_labels_, static_cast<size_t>(rows) * sizeof(int32_t),
                                cudaMemcpyHostToDevice, compute_));
  const float scale = 1.0f / static_cast<float>(rows);
  PS_CUDA_CHECK(kernels::LaunchSoftmaxCrossEntropy(d_logits, d_labels_, rows, cols, scale, d_dlogits, d_row_loss_,
                                                   d_row_correct_, d_totals_, compute_));
  PS_CUDA_CHECK(cudaMemcpyAsync(h_totals_, d_totals_, sizeof(kernels::XentTotals), cudaMemcpyDeviceToHost, compute_));
  // The caller wants the loss now: this waits for the whole forward pass
  // (the one synchronization of a training step).
  PS_CUDA_CHECK(cudaStreamSynchronize(compute_));
  if (correct != nullptr) *correct = h_totals_->correct;
  return static_cast<float>(h_totals_->loss / rows);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateCudaBackend(const BackendOptions& options) {
  if (options.gpu < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu ", options.gpu, " is not a device: use -1 (rank modulo the device count) or an index"));
  }
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    // Without a GPU the runtime reports an error here rather than 0 devices
    // (often "CUDA driver version is insufficient for CUDA runtime version").
    (void)cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("no GPU found: cudaGetDeviceCount failed with ", CudaError(error), "; use --device=cpu"));
  }
  if (count <= 0) {
    return absl::UnavailableError("no GPU found: cudaGetDeviceCount reports 0 devices; use --device=cpu");
  }
  if (options.gpu >= count) {
    return absl::InvalidArgumentError(absl::StrCat("gpu ", options.gpu, " does not exist: this machine has ", count,
                                                   " GPU(s), indices 0 to ", count - 1));
  }
  const int device = options.gpu >= 0 ? options.gpu : (options.rank % count + count) % count;
  auto backend = std::make_unique<CudaBackend>(device);
  PS_RETURN_IF_ERROR(backend->Init());
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
    LOG(INFO) << "cuda backend on GPU " << device << " of " << count << ": " << prop.name << " (sm_" << prop.major
              << prop.minor << ")";
  } else {
    (void)cudaGetLastError();
  }
  return std::unique_ptr<ComputeBackend>(std::move(backend));
}

}  // namespace ps
