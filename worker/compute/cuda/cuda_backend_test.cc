// The cuda backend against the cpu backend, op by op, and the MLP on it.
//
// Tests that need a GPU skip (printing CreateBackend's reason) where there is
// none; the CreateBackendCudaTest tests run everywhere this file is built,
// i.e. wherever nvcc is. A build without CUDA has no such file; there
// cpu_backend_test checks that --device=cuda is kUnimplemented.

#include "worker/compute/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/model/initializer.h"
#include "common/model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/compute/compute_backend.h"
#include "worker/compute/cpu/cpu_backend.h"
#include "worker/data/fashion_mnist.h"
#include "worker/models/mlp.h"
#include "worker/models/mlp_testing.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

BackendOptions CudaOptions() {
  BackendOptions options;
  options.device = "cuda";
  return options;
}

// CUDA's own answer, not the backend's: the GPU count, or the error.
struct GpuProbe {
  cudaError_t error = cudaSuccess;
  int count = 0;
};
GpuProbe ProbeGpus() {
  GpuProbe probe;
  probe.error = cudaGetDeviceCount(&probe.count);
  (void)cudaGetLastError();
  return probe;
}

// A cuda backend, or a skip naming why there is none: the test's GPU part
// needs one. Any other failure than kUnavailable fails the test.
#define PS_CUDA_BACKEND_OR_SKIP(var)                                                            \
  std::unique_ptr<ComputeBackend> var;                                                          \
  do {                                                                                          \
    absl::StatusOr<std::unique_ptr<ComputeBackend>> ps_made_ = CreateBackend(CudaOptions());    \
    if (!ps_made_.ok()) {                                                                       \
      ASSERT_EQ(ps_made_.status().code(), absl::StatusCode::kUnavailable) << ps_made_.status(); \
      GTEST_SKIP() << "no usable GPU: " << ps_made_.status().message();                         \
    }                                                                                           \
    var = std::move(ps_made_).value();                                                          \
  } while (0)

std::vector<float> RandomVector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Device memory holding a copy of host data, freed with the object.
class DeviceVector {
 public:
  // Waits for the copy: `host` may be a temporary.
  DeviceVector(ComputeBackend* backend, const std::vector<float>& host)
      : backend_(backend), n_(host.size()), d_(backend->Alloc(host.size())) {
    backend_->CopyToDevice(d_, host.data(), n_);
    backend_->WaitFor(backend_->Record());
  }
  DeviceVector(ComputeBackend* backend, size_t n) : backend_(backend), n_(n), d_(backend->Alloc(n)) {}
  ~DeviceVector() { backend_->Free(d_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;

  float* get() const { return d_; }
  std::vector<float> ToHost() const {
    std::vector<float> out(n_);
    backend_->CopyToHost(out.data(), d_, n_);
    backend_->Synchronize();
    return out;
  }

 private:
  ComputeBackend* const backend_;
  const size_t n_;
  float* const d_;
};

// Host memory from AllocHost (CHECKed: the tests' buffers are small), freed
// with the object.
class HostVector {
 public:
  HostVector(ComputeBackend* backend, size_t n) : backend_(backend), n_(n), h_(*backend->AllocHost(n)) {}
  ~HostVector() { backend_->FreeHost(h_); }
  HostVector(const HostVector&) = delete;
  HostVector& operator=(const HostVector&) = delete;

  float* get() const { return h_; }
  std::vector<float> Copy() const { return std::vector<float>(h_, h_ + n_); }
  void Fill(const std::vector<float>& v) { std::copy(v.begin(), v.end(), h_); }

 private:
  ComputeBackend* const backend_;
  const size_t n_;
  float* const h_;
};

// ---------------------------------------------------------------------------
// Creation: these run with or without a GPU.

TEST(CreateBackendCudaTest, UnavailableSayingNoGpuWhenThereIsNone) {
  const GpuProbe probe = ProbeGpus();
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend = CreateBackend(CudaOptions());
  if (probe.error == cudaSuccess && probe.count > 0) {
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->name(), "cuda");
    EXPECT_FALSE((*backend)->host_memory());
    return;
  }
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable) << backend.status();
  EXPECT_THAT(std::string(backend.status().message()), HasSubstr("no GPU found"));
  if (probe.error != cudaSuccess) {
    EXPECT_THAT(std::string(backend.status().message()), HasSubstr(cudaGetErrorString(probe.error)));
  }
}

TEST(CreateBackendCudaTest, GpuBelowMinusOneIsInvalidArgument) {
  BackendOptions options = CudaOptions();
  options.gpu = -2;
  const absl::Status status = CreateBackend(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("gpu -2"));
}

TEST(CreateBackendCudaTest, GpuBeyondDeviceCountIsInvalidArgumentNamingBoth) {
  const GpuProbe probe = ProbeGpus();
  if (probe.error != cudaSuccess || probe.count == 0) {
    GTEST_SKIP() << "no GPU: " << cudaGetErrorString(probe.error);
  }
  BackendOptions options = CudaOptions();
  options.gpu = probe.count + 5;
  const absl::Status status = CreateBackend(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(absl::StrCat("gpu ", probe.count + 5)));
  EXPECT_THAT(std::string(status.message()), HasSubstr(absl::StrCat("has ", probe.count, " GPU")));
}

TEST(CreateBackendCudaTest, MinusOnePicksRankModuloDeviceCount) {
  const GpuProbe probe = ProbeGpus();
  if (probe.error != cudaSuccess || probe.count == 0) {
    GTEST_SKIP() << "no GPU: " << cudaGetErrorString(probe.error);
  }
  for (int rank : {0, 1, 7}) {
    BackendOptions options = CudaOptions();
    options.rank = rank;
    absl::StatusOr<std::unique_ptr<ComputeBackend>> backend = CreateBackend(options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    // The backend's calls make its device current on the calling thread.
    (*backend)->Synchronize();
    int device = -1;
    ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
    EXPECT_EQ(device, rank % probe.count) << rank;
  }
}

// ---------------------------------------------------------------------------
// Op-by-op parity with the cpu backend.

class CudaParityTest : public ::testing::Test {
 protected:
  CpuBackend cpu_{1};
};

// Gemm tolerance: both backends sum k float products in some order; each
// result may be off by about k * 2^-24 * sum_p |a_ip b_pj|. With k <= 784
// that is below 5e-5 of sum |a b|, so allow 1e-4 of it (plus the beta * C
// term, and 1e-6 absolute for results that cancel to about 0).
TEST_F(CudaParityTest, GemmMatchesCpuForTransposesAndOddSizes) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  struct Shape {
    int m, n, k;
  };
  const Shape shapes[] = {{1, 1, 1},     {3, 5, 7},      {17, 33, 65},   {1, 300, 2},
                          {64, 10, 256}, {64, 512, 784}, {784, 512, 64}, {129, 1, 777}};
  const float scalars[][2] = {{1.0f, 0.0f}, {-1.5f, 0.25f}};
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    for (int trans = 0; trans < 4; ++trans) {
      const bool ta = trans & 1, tb = trans & 2;
      for (const auto& [alpha, beta] : scalars) {
        const std::vector<float> a = RandomVector(static_cast<size_t>(s.m) * s.k, seed++);
        const std::vector<float> b = RandomVector(static_cast<size_t>(s.k) * s.n, seed++);
        const std::vector<float> c = RandomVector(static_cast<size_t>(s.m) * s.n, seed++);
        std::vector<float> want = c;
        cpu_.Gemm(ta, tb, s.m, s.n, s.k, alpha, a.data(), b.data(), beta, want.data());
        DeviceVector da(cuda.get(), a), db(cuda.get(), b), dc(cuda.get(), c);
        cuda->Gemm(ta, tb, s.m, s.n, s.k, alpha, da.get(), db.get(), beta, dc.get());
        const std::vector<float> got = dc.ToHost();
        for (int i = 0; i < s.m; ++i) {
          for (int j = 0; j < s.n; ++j) {
            double magnitude = 0;
            for (int p = 0; p < s.k; ++p) {
              const float av = ta ? a[p * s.m + i] : a[i * s.k + p];
              const float bv = tb ? b[j * s.k + p] : b[p * s.n + j];
              magnitude += std::abs(static_cast<double>(av) * bv);
            }
            const size_t at = static_cast<size_t>(i) * s.n + j;
            const double tolerance = 1e-4 * (std::abs(alpha) * magnitude + std::abs(beta * c[at])) + 1e-6;
            ASSERT_NEAR(got[at], want[at], tolerance)
                << "m=" << s.m << " n=" << s.n << " k=" << s.k << " trans_a=" << ta << " trans_b=" << tb
                << " alpha=" << alpha << " beta=" << beta << " at " << i << "," << j;
          }
        }
      }
    }
  }
}

TEST_F(CudaParityTest, GemmWithEmptyInnerDimensionScalesC) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  const std::vector<float> c = {1, -2, 3, -4, 5, -6};
  for (float beta : {0.0f, 0.5f, 1.0f}) {
    DeviceVector da(cuda.get(), 1), db(cuda.get(), 1), dc(cuda.get(), c);
    cuda->Gemm(false, false, 2, 3, 0, 1.0f, da.get(), db.get(), beta, dc.get());
    const std::vector<float> got = dc.ToHost();
    for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(got[i], beta * c[i]) << beta << " " << i;
  }
}

TEST_F(CudaParityTest, GemmExactOnSmallIntegers) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  DeviceVector a(cuda.get(), {1, 2, 3, 4}), b(cuda.get(), {5, 6, 7, 8});
  DeviceVector c(cuda.get(), std::vector<float>(4, 100.0f));
  cuda->Gemm(false, false, 2, 2, 2, 1.0f, a.get(), b.get(), 0.0f, c.get());
  EXPECT_EQ(c.ToHost(), (std::vector<float>{19, 22, 43, 50}));
  cuda->Gemm(false, true, 2, 2, 2, 1.0f, a.get(), b.get(), 1.0f, c.get());
  EXPECT_EQ(c.ToHost(), (std::vector<float>{19 + 17, 22 + 23, 43 + 39, 50 + 53}));
  // A^T B = [1 3; 2 4][5 6; 7 8] = [26 30; 38 44].
  cuda->Gemm(true, false, 2, 2, 2, 1.0f, a.get(), b.get(), 0.0f, c.get());
  EXPECT_EQ(c.ToHost(), (std::vector<float>{26, 30, 38, 44}));
}

// Element-wise ops are one IEEE add or compare: bit-exact parity.
TEST_F(CudaParityTest, BiasActivationMatchesCpuExactly) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  const int shapes[][2] = {{1, 1}, {7, 13}, {64, 512}, {65, 1000}, {3, 70001}};
  uint32_t seed = 100;
  for (const auto& [rows, cols] : shapes) {
    for (bool relu : {false, true}) {
      std::vector<float> y = RandomVector(static_cast<size_t>(rows) * cols, seed++);
      y[y.size() / 2] = std::numeric_limits<float>::quiet_NaN();
      const std::vector<float> bias = RandomVector(cols, seed++);
      DeviceVector dy(cuda.get(), y), dbias(cuda.get(), bias);
      cpu_.BiasActivation(y.data(), bias.data(), rows, cols, relu);
      cuda->BiasActivation(dy.get(), dbias.get(), rows, cols, relu);
      const std::vector<float> got = dy.ToHost();
      for (size_t i = 0; i < y.size(); ++i) {
        if (std::isnan(y[i])) {
          ASSERT_TRUE(std::isnan(got[i])) << "a NaN must stay visible, at " << i;
        } else {
          ASSERT_EQ(got[i], y[i]) << rows << "x" << cols << " relu=" << relu << " at " << i;
        }
      }
    }
  }
}

TEST_F(CudaParityTest, ReluGradMatchesCpuExactly) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  uint32_t seed = 200;
  for (size_t n : {size_t{1}, size_t{1001}, size_t{100003}}) {
    std::vector<float> dy = RandomVector(n, seed++);
    std::vector<float> y = RandomVector(n, seed++);
    y[0] = 0.0f;  // not positive: gradient 0
    DeviceVector ddy(cuda.get(), dy), dyv(cuda.get(), y);
    cpu_.ReluGrad(dy.data(), y.data(), n);
    cuda->ReluGrad(ddy.get(), dyv.get(), n);
    EXPECT_EQ(ddy.ToHost(), dy) << n;
  }
}

// Column sums of float: off by about rows * 2^-24 * sum |dy| between
// summation orders; allow 1e-5 of sum |dy| (rows <= 1000) plus 1e-6.
TEST_F(CudaParityTest, BiasGradMatchesCpu) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  const int shapes[][2] = {{1, 1}, {0, 5}, {13, 29}, {64, 512}, {1000, 10}, {3, 1000}};
  uint32_t seed = 300;
  for (const auto& [rows, cols] : shapes) {
    const std::vector<float> dy = RandomVector(static_cast<size_t>(rows) * cols, seed++);
    std::vector<float> want(cols, 7.0f);
    cpu_.BiasGrad(dy.data(), rows, cols, want.data());
    DeviceVector ddy(cuda.get(), std::max<size_t>(dy.size(), 1));
    cuda->CopyToDevice(ddy.get(), dy.data(), dy.size());
    DeviceVector ddb(cuda.get(), std::vector<float>(cols, 7.0f));  // overwritten, not added to
    cuda->BiasGrad(ddy.get(), rows, cols, ddb.get());
    const std::vector<float> got = ddb.ToHost();
    for (int c = 0; c < cols; ++c) {
      double magnitude = 0;
      for (int r = 0; r < rows; ++r) magnitude += std::abs(dy[static_cast<size_t>(r) * cols + c]);
      ASSERT_NEAR(got[c], want[c], 1e-5 * magnitude + 1e-6) << rows << "x" << cols << " col " << c;
    }
  }
}

// Both backends compute in double and round once: loss within 1e-6
// relative, gradients within 1e-7 absolute (they are at most 1/rows), and the
// same argmax count, ties included.
TEST_F(CudaParityTest, SoftmaxCrossEntropyMatchesCpu) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  // 300 and 1000 rows are more than the backend's initial label buffer.
  const int shapes[][2] = {{1, 1}, {1, 10}, {7, 3}, {64, 10}, {300, 33}, {1000, 10}, {5, 1000}};
  uint32_t seed = 400;
  for (const auto& [rows, cols] : shapes) {
    std::vector<float> logits = RandomVector(static_cast<size_t>(rows) * cols, seed++, 5.0f);
    // Half steps make ties in many rows: the argmax must go to the lowest index.
    for (float& x : logits) x = std::round(x * 2) / 2;
    std::mt19937 rng(seed++);
    std::vector<int32_t> labels(rows);
    for (int32_t& l : labels) l = static_cast<int32_t>(rng() % cols);
    std::vector<float> want_grad(logits.size());
    int want_correct = -1;
    const float want_loss =
        cpu_.SoftmaxCrossEntropy(logits.data(), labels.data(), rows, cols, want_grad.data(), &want_correct);
    DeviceVector dlogits(cuda.get(), logits), dgrad(cuda.get(), logits.size());
    int correct = -2;
    const float loss = cuda->SoftmaxCrossEntropy(dlogits.get(), labels.data(), rows, cols, dgrad.get(), &correct);
    EXPECT_NEAR(loss, want_loss, 1e-6 * std::abs(want_loss) + 1e-7) << rows << "x" << cols;
    EXPECT_EQ(correct, want_correct) << rows << "x" << cols;
    const std::vector<float> grad = dgrad.ToHost();
    for (size_t i = 0; i < grad.size(); ++i) {
      ASSERT_NEAR(grad[i], want_grad[i], 1e-7) << rows << "x" << cols << " at " << i;
    }
    // Loss only, no gradient buffer.
    int loss_only_correct = -3;
    EXPECT_EQ(cuda->SoftmaxCrossEntropy(dlogits.get(), labels.data(), rows, cols, nullptr, &loss_only_correct), loss);
    EXPECT_EQ(loss_only_correct, correct);
  }
}

TEST_F(CudaParityTest, SoftmaxCrossEntropyIsStableForHugeLogits) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  const std::vector<float> logits = {1000.0f, -1000.0f, 0.0f, -1000.0f, 1000.0f, 1000.0f};
  const std::vector<int32_t> labels = {0, 0};
  DeviceVector dlogits(cuda.get(), logits), dgrad(cuda.get(), 6);
  int correct = 0;
  const float loss = cuda->SoftmaxCrossEntropy(dlogits.get(), labels.data(), 2, 3, dgrad.get(), &correct);
  EXPECT_NEAR(loss, (0.0 + 2000.0 + std::log(2.0)) / 2, 1e-3);
  EXPECT_EQ(correct, 1);  // row 1 ties between 1 and 2, neither the label
  const std::vector<float> grad = dgrad.ToHost();
  const float want[6] = {0, 0, 0, -0.5f, 0.25f, 0.25f};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(grad[i], want[i], 1e-7) << i;
}

TEST_F(CudaParityTest, SoftmaxCrossEntropyOfNoRowsIsZero) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  DeviceVector dlogits(cuda.get(), 10);
  int correct = -1;
  EXPECT_EQ(cuda->SoftmaxCrossEntropy(dlogits.get(), nullptr, 0, 10, nullptr, &correct), 0.0f);
  EXPECT_EQ(correct, 0);
}

// ---------------------------------------------------------------------------
// Memory, asynchronous copies and tickets.

TEST(CudaBackendTest, AllocAndAllocHostAreZeroFilledAndDistinct) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}}) {
    float* d = cuda->Alloc(n);
    absl::StatusOr<float*> allocated = cuda->AllocHost(n);
    ASSERT_TRUE(allocated.ok()) << allocated.status();
    float* h = *allocated;
    ASSERT_NE(d, nullptr);
    ASSERT_NE(h, nullptr);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(h[i], 0.0f) << i;
    std::vector<float> back(n, -1.0f);
    cuda->CopyToHost(back.data(), d, n);
    cuda->Synchronize();
    EXPECT_EQ(back, std::vector<float>(n, 0.0f));
    cuda->Free(d);
    cuda->FreeHost(h);
  }
  cuda->Free(nullptr);
  cuda->FreeHost(nullptr);
}

// Pinned memory that cannot be had (4 PiB) is kResourceExhausted naming its
// bytes and CUDA's error, not an abort; the backend goes on.
TEST(CudaBackendTest, PinnedMemoryThatCannotBeHadIsAnErrorNamingItsBytes) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  const size_t n = size_t{1} << 50;
  const absl::StatusOr<float*> huge = cuda->AllocHost(n);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_THAT(huge.status().message(),
              HasSubstr(absl::StrCat("cudaHostAlloc of ", n * sizeof(float), " bytes failed")));
  HostVector small(cuda.get(), 1000);
  EXPECT_EQ(small.Copy(), std::vector<float>(1000, 0.0f));
}

TEST(CudaBackendTest, PinnedCopiesRoundTripBehindTickets) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  const size_t n = 1 << 20;
  const std::vector<float> values = RandomVector(n, 7);
  HostVector up(cuda.get(), n), down(cuda.get(), n);
  up.Fill(values);
  DeviceVector d(cuda.get(), n);
  cuda->CopyToDevice(d.get(), up.get(), n);
  cuda->CopyToHost(down.get(), d.get(), n);
  const ComputeBackend::Ticket ticket = cuda->Record();
  cuda->WaitFor(ticket);
  EXPECT_TRUE(cuda->Done(ticket));
  EXPECT_EQ(down.Copy(), values);
}

// An upload waits for the compute issued before it, which may still read the
// old data, and the compute issued after it sees the new data; a download
// waits for the compute before it. A large Gemm in front keeps the reads
// queued long enough that a missing wait would show.
TEST(CudaBackendTest, CopiesAreOrderedWithCompute) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  const int big = 2048, cols = 1024;
  DeviceVector a(cuda.get(), RandomVector(static_cast<size_t>(big) * big, 1));
  DeviceVector b(cuda.get(), RandomVector(static_cast<size_t>(big) * big, 2));
  DeviceVector c(cuda.get(), static_cast<size_t>(big) * big);
  const std::vector<float> first = RandomVector(cols, 3), second = RandomVector(cols, 4);
  HostVector h_bias(cuda.get(), cols), h_y1(cuda.get(), cols), h_y2(cuda.get(), cols);
  DeviceVector bias(cuda.get(), first), y1(cuda.get(), cols), y2(cuda.get(), cols);
  cuda->Synchronize();
  h_bias.Fill(second);

  for (int i = 0; i < 4; ++i) {
    cuda->Gemm(false, false, big, big, big, 1.0f, a.get(), b.get(), 0.0f, c.get());
  }
  cuda->BiasActivation(y1.get(), bias.get(), 1, cols, false);  // reads `first`
  cuda->CopyToDevice(bias.get(), h_bias.get(), cols);
  cuda->BiasActivation(y2.get(), bias.get(), 1, cols, false);  // reads `second`
  cuda->CopyToHost(h_y1.get(), y1.get(), cols);
  cuda->CopyToHost(h_y2.get(), y2.get(), cols);
  const ComputeBackend::Ticket ticket = cuda->Record();
  cuda->WaitFor(ticket);
  EXPECT_EQ(h_y1.Copy(), first);
  EXPECT_EQ(h_y2.Copy(), second);
}

TEST(CudaBackendTest, TicketsIncreaseAndOlderOnesAreDoneWhenNewerAre) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  EXPECT_TRUE(cuda->Done(0));
  DeviceVector y(cuda.get(), 256), bias(cuda.get(), RandomVector(256, 5));
  std::vector<ComputeBackend::Ticket> tickets;
  // More than the ring of events: old tickets share slots with new ones.
  for (int i = 0; i < 200; ++i) {
    cuda->BiasActivation(y.get(), bias.get(), 1, 256, false);
    tickets.push_back(cuda->Record());
    if (i > 0) {
      EXPECT_GT(tickets[i], tickets[i - 1]);
    }
  }
  cuda->WaitFor(tickets.back());
  for (ComputeBackend::Ticket t : tickets) EXPECT_TRUE(cuda->Done(t)) << t;
  // Done eventually turns true without WaitFor.
  cuda->BiasActivation(y.get(), bias.get(), 1, 256, false);
  const ComputeBackend::Ticket last = cuda->Record();
  while (!cuda->Done(last)) {
  }
  cuda->WaitFor(last);
  cuda->Synchronize();
}

// ---------------------------------------------------------------------------
// The MLP on the GPU.

std::unique_ptr<Mlp> MakeMlp(const std::vector<int>& layers, int max_batch, ComputeBackend* backend, uint64_t seed) {
  absl::StatusOr<std::unique_ptr<Mlp>> made = Mlp::Create(layers, max_batch, backend);
  EXPECT_TRUE(made.ok()) << made.status();
  if (!made.ok()) return nullptr;
  std::unique_ptr<Mlp> mlp = std::move(made).value();
  const std::vector<TensorSpec> specs = mlp->TensorSpecs(seed);
  for (int t = 0; t < mlp->num_tensors(); ++t) FillInitialValues(specs[t], 0, mlp->host_param(t));
  for (int t = 1; t < mlp->num_tensors(); t += 2) {  // non-zero biases, so that they matter
    const std::vector<float> b = RandomVector(mlp->host_param(t).size(), 100 + t, 0.1f);
    std::copy(b.begin(), b.end(), mlp->host_param(t).begin());
  }
  for (int layer = 0; layer < mlp->num_layers(); ++layer) mlp->ParamsToDevice(layer);
  return mlp;
}

std::vector<std::vector<float>> Grads(const Mlp& mlp) {
  std::vector<std::vector<float>> grads;
  for (int t = 0; t < mlp.num_tensors(); ++t) {
    grads.emplace_back(mlp.host_grad(t).begin(), mlp.host_grad(t).end());
  }
  return grads;
}

TEST(CudaMlpTest, GradientMatchesFiniteDifferences) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  const int batch = 4;
  std::unique_ptr<Mlp> mlp = MakeMlp({6, 5, 4, 3}, batch, cuda.get(), 42);
  ASSERT_NE(mlp, nullptr);
  const std::vector<float> x = RandomVector(batch * 6, 1);
  double norm = 0;
  testing::ExpectGradientsMatchFiniteDifferences(*mlp, x, {0, 2, 1, 2}, batch, &norm);
  EXPECT_GT(norm, 1e-3);
}

// The same step on both backends: same loss and hits, gradients to float
// rounding; layer_done last layer first, each seeing its final gradients.
TEST(CudaMlpTest, TrainStepMatchesCpuAndReportsLayersInOrder) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  CpuBackend cpu(1);
  const std::vector<int> layers = {784, 512, 256, 10};
  const int batch = 64;
  std::unique_ptr<Mlp> on_cpu = MakeMlp(layers, batch, &cpu, 3);
  std::unique_ptr<Mlp> on_gpu = MakeMlp(layers, batch, cuda.get(), 3);
  ASSERT_NE(on_cpu, nullptr);
  ASSERT_NE(on_gpu, nullptr);
  std::vector<float> x = RandomVector(static_cast<size_t>(batch) * 784, 9);
  for (float& v : x) v = std::abs(v);  // pixels are in [0, 1]
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = (i * 7) % 10;

  int cpu_correct = -1, gpu_correct = -2;
  const float cpu_loss = on_cpu->TrainStep(x.data(), labels.data(), batch, nullptr, &cpu_correct);
  std::vector<int> order;
  std::vector<std::vector<float>> seen(on_gpu->num_tensors());
  const float gpu_loss = on_gpu->TrainStep(
      x.data(), labels.data(), batch,
      [&](int layer) {
        order.push_back(layer);
        for (int t = 2 * layer; t < 2 * layer + 2; ++t) {
          seen[t].assign(on_gpu->host_grad(t).begin(), on_gpu->host_grad(t).end());
        }
      },
      &gpu_correct);
  EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 * std::abs(cpu_loss));
  EXPECT_EQ(gpu_correct, cpu_correct);
  EXPECT_EQ(order, (std::vector<int>{2, 1, 0}));
  const std::vector<std::vector<float>> want = Grads(*on_cpu);
  const std::vector<std::vector<float>> got = Grads(*on_gpu);
  for (int t = 0; t < on_gpu->num_tensors(); ++t) {
    EXPECT_EQ(seen[t], got[t]) << "tensor " << t << " changed after its layer_done";
    double scale = 0;
    for (float g : want[t]) scale = std::max(scale, static_cast<double>(std::abs(g)));
    for (size_t i = 0; i < got[t].size(); ++i) {
      ASSERT_NEAR(got[t][i], want[t][i], 1e-4 * scale + 1e-7) << "tensor " << t << " at " << i;
    }
  }
}

// ---------------------------------------------------------------------------
// A short training run on Fashion-MNIST, the same on both backends: an
// MLP 784-128-10, plain SGD applied in layer_done (as a parameter server
// would, while the GPU computes the layers below), 5 epochs over the first
// 4096 training images, evaluated on the first 2000 test images.

struct TrainingOutcome {
  double loss_before = 0, loss_after = 0, accuracy = 0;
};

void TrainBriefly(ComputeBackend* backend, TrainingOutcome* out) {
  absl::StatusOr<Dataset> train = LoadFashionMnist(kDefaultFashionMnistDir, "train");
  absl::StatusOr<Dataset> test = LoadFashionMnist(kDefaultFashionMnistDir, "t10k");
  if (!train.ok() || !test.ok()) {
    GTEST_SKIP() << "no Fashion-MNIST: " << (train.ok() ? test.status() : train.status());
  }
  const int batch = 64, n = 4096, n_test = 2000;
  const float lr = 0.1f;
  constexpr int kEpochs = 5;
  std::unique_ptr<Mlp> mlp = MakeMlp({784, 128, 10}, batch, backend, 11);
  ASSERT_NE(mlp, nullptr);
  out->loss_before = mlp->Evaluate(train->images.data(), train->labels.data(), n).loss;
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    for (int first = 0; first < n; first += batch) {
      const float loss = mlp->TrainStep(
          train->images.data() + static_cast<size_t>(first) * 784, train->labels.data() + first, batch,
          [&](int layer) {
            for (int t = 2 * layer; t < 2 * layer + 2; ++t) {
              absl::Span<float> p = mlp->host_param(t);
              absl::Span<const float> g = mlp->host_grad(t);
              for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * g[i];
            }
            mlp->ParamsToDevice(layer);
          },
          nullptr);
      ASSERT_TRUE(std::isfinite(loss)) << "epoch " << epoch << " batch at " << first;
    }
  }
  out->loss_after = mlp->Evaluate(train->images.data(), train->labels.data(), n).loss;
  out->accuracy = mlp->Evaluate(test->images.data(), test->labels.data(), n_test).accuracy;
}

// Thresholds from the cpu run (training loss 2.35 -> 0.50, test accuracy
// 0.80), with room for the GPU's different rounding.
void ExpectLearned(const TrainingOutcome& outcome) {
  EXPECT_LT(outcome.loss_after, 0.7);
  EXPECT_LT(outcome.loss_after, outcome.loss_before / 2);
  EXPECT_GT(outcome.accuracy, 0.75);
}

TEST(CudaTrainingTest, CpuReferenceRunLearns) {
  CpuBackend cpu(1);
  TrainingOutcome outcome;
  TrainBriefly(&cpu, &outcome);
  if (IsSkipped() || HasFatalFailure()) return;
  ExpectLearned(outcome);
  std::printf("cpu: loss %.4f -> %.4f, test accuracy %.4f\n", outcome.loss_before, outcome.loss_after,
              outcome.accuracy);
}

TEST(CudaTrainingTest, GpuRunLearnsLikeTheCpu) {
  PS_CUDA_BACKEND_OR_SKIP(cuda);
  CpuBackend cpu(1);
  TrainingOutcome gpu_outcome, cpu_outcome;
  TrainBriefly(cuda.get(), &gpu_outcome);
  if (IsSkipped() || HasFatalFailure()) return;
  TrainBriefly(&cpu, &cpu_outcome);
  std::printf("gpu: loss %.4f -> %.4f, test accuracy %.4f (cpu: %.4f -> %.4f, %.4f)\n", gpu_outcome.loss_before,
              gpu_outcome.loss_after, gpu_outcome.accuracy, cpu_outcome.loss_before, cpu_outcome.loss_after,
              cpu_outcome.accuracy);
  ExpectLearned(gpu_outcome);
  // Same data, same start: rounding differences alone should not move the
  // result by much.
  EXPECT_NEAR(gpu_outcome.loss_before, cpu_outcome.loss_before, 1e-4 * cpu_outcome.loss_before);
  EXPECT_NEAR(gpu_outcome.accuracy, cpu_outcome.accuracy, 0.03);
}

}  // namespace
}  // namespace ps
