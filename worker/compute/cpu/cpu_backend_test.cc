#include "worker/compute/cpu/cpu_backend.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/compute/compute_backend.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

std::vector<float> RandomVector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Reference C = alpha * op(A) op(B) + beta * C in double.
std::vector<double> NaiveGemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const std::vector<float>& a,
                              const std::vector<float>& b, float beta, const std::vector<float>& c) {
  std::vector<double> out(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        const double av = trans_a ? a[p * m + i] : a[i * k + p];
        const double bv = trans_b ? b[j * k + p] : b[p * n + j];
        sum += av * bv;
      }
      out[i * n + j] = alpha * sum + static_cast<double>(beta) * c[i * n + j];
    }
  }
  return out;
}

class CpuBackendTest : public ::testing::Test {
 protected:
  CpuBackend backend_{1};
};

TEST_F(CpuBackendTest, NameAndHostMemory) {
  EXPECT_EQ(backend_.name(), "cpu");
  EXPECT_TRUE(backend_.host_memory());
}

TEST_F(CpuBackendTest, AllocIsAlignedAndZeroed) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{1000}}) {
    float* d = backend_.Alloc(n);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 64, 0u) << n;
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(d[i], 0.0f) << i;
    backend_.Free(d);
  }
}

TEST_F(CpuBackendTest, CopiesRoundTrip) {
  const std::vector<float> src = RandomVector(33, 1);
  float* d = backend_.Alloc(src.size());
  backend_.CopyToDevice(d, src.data(), src.size());
  std::vector<float> back(src.size(), -1.0f);
  backend_.CopyToHost(back.data(), d, back.size());
  backend_.Synchronize();
  EXPECT_EQ(back, src);
  backend_.Free(d);
}

TEST_F(CpuBackendTest, AllocHostIsAlignedZeroedAndUsableForCopies) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{1000}}) {
    absl::StatusOr<float*> allocated = backend_.AllocHost(n);
    ASSERT_TRUE(allocated.ok()) << allocated.status();
    float* h = *allocated;
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(h) % 64, 0u) << n;
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(h[i], 0.0f) << i;
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<float>(i);
    float* d = backend_.Alloc(n);
    backend_.CopyToDevice(d, h, n);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(d[i], static_cast<float>(i)) << i;
    backend_.Free(d);
    backend_.FreeHost(h);
  }
  backend_.Free(nullptr);
  backend_.FreeHost(nullptr);
}

// Every call has finished when it returns: a ticket is done at once.
TEST_F(CpuBackendTest, TicketsIncreaseAndAreDoneAtOnce) {
  EXPECT_TRUE(backend_.Done(0));
  backend_.WaitFor(0);
  const std::vector<float> src = RandomVector(8, 2);
  std::vector<float> dst(8);
  backend_.CopyToHost(dst.data(), src.data(), src.size());
  const ComputeBackend::Ticket first = backend_.Record();
  EXPECT_GT(first, 0u);
  EXPECT_TRUE(backend_.Done(first));
  EXPECT_EQ(dst, src);
  const ComputeBackend::Ticket second = backend_.Record();
  EXPECT_GT(second, first);
  backend_.WaitFor(second);
  EXPECT_TRUE(backend_.Done(first));
  EXPECT_TRUE(backend_.Done(second));
}

TEST_F(CpuBackendTest, DoneOnAnUnrecordedTicketDies) {
  const ComputeBackend::Ticket last = backend_.Record();
  EXPECT_DEATH(backend_.Done(last + 1), "never recorded");
}

struct GemmCase {
  bool trans_a;
  bool trans_b;
  float alpha;
  float beta;
};

TEST_F(CpuBackendTest, GemmMatchesNaiveForAllTransposes) {
  const int m = 5, n = 7, k = 3;
  const GemmCase cases[] = {
      {false, false, 1.0f, 0.0f}, {true, false, 1.0f, 0.0f},   {false, true, 1.0f, 0.0f},  {true, true, 1.0f, 0.0f},
      {false, false, 0.5f, 2.0f}, {true, false, -1.5f, 0.25f}, {false, true, 2.0f, -1.0f}, {true, true, 0.75f, 1.0f},
  };
  uint32_t seed = 10;
  for (const GemmCase& gc : cases) {
    const std::vector<float> a = RandomVector(m * k, seed++);
    const std::vector<float> b = RandomVector(k * n, seed++);
    std::vector<float> c = RandomVector(m * n, seed++);
    const std::vector<double> want = NaiveGemm(gc.trans_a, gc.trans_b, m, n, k, gc.alpha, a, b, gc.beta, c);
    backend_.Gemm(gc.trans_a, gc.trans_b, m, n, k, gc.alpha, a.data(), b.data(), gc.beta, c.data());
    for (int i = 0; i < m * n; ++i) {
      EXPECT_NEAR(c[i], want[i], 1e-5) << "trans_a=" << gc.trans_a << " trans_b=" << gc.trans_b << " alpha=" << gc.alpha
                                       << " beta=" << gc.beta << " i=" << i;
    }
  }
}

TEST_F(CpuBackendTest, GemmExactOnSmallIntegers) {
  // [1 2; 3 4] * [5 6; 7 8] = [19 22; 43 50]; with B transposed [17 23; 39 53].
  const std::vector<float> a = {1, 2, 3, 4};
  const std::vector<float> b = {5, 6, 7, 8};
  std::vector<float> c(4, 100.0f);
  backend_.Gemm(false, false, 2, 2, 2, 1.0f, a.data(), b.data(), 0.0f, c.data());
  EXPECT_EQ(c, (std::vector<float>{19, 22, 43, 50}));
  backend_.Gemm(false, true, 2, 2, 2, 1.0f, a.data(), b.data(), 1.0f, c.data());
  EXPECT_EQ(c, (std::vector<float>{19 + 17, 22 + 23, 43 + 39, 50 + 53}));
}

TEST_F(CpuBackendTest, BiasActivationWithoutRelu) {
  std::vector<float> y = {1, -2, 3, -4, 5, -6};
  const std::vector<float> bias = {0.5f, 1.0f, -10.0f};
  backend_.BiasActivation(y.data(), bias.data(), 2, 3, false);
  EXPECT_EQ(y, (std::vector<float>{1.5f, -1.0f, -7.0f, -3.5f, 6.0f, -16.0f}));
}

TEST_F(CpuBackendTest, BiasActivationWithRelu) {
  std::vector<float> y = {1, -2, 3, -4, 5, -6};
  const std::vector<float> bias = {0.5f, 1.0f, -10.0f};
  backend_.BiasActivation(y.data(), bias.data(), 2, 3, true);
  EXPECT_EQ(y, (std::vector<float>{1.5f, 0.0f, 0.0f, 0.0f, 6.0f, 0.0f}));
}

TEST_F(CpuBackendTest, BiasActivationMatchesNaiveOnRandomMatrix) {
  const int rows = 9, cols = 37;
  const std::vector<float> bias = RandomVector(cols, 2);
  for (bool relu : {false, true}) {
    std::vector<float> y = RandomVector(rows * cols, 3);
    const std::vector<float> before = y;
    backend_.BiasActivation(y.data(), bias.data(), rows, cols, relu);
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        float want = before[r * cols + c] + bias[c];
        if (relu && want < 0) want = 0;
        EXPECT_EQ(y[r * cols + c], want) << relu << " " << r << " " << c;
      }
    }
  }
}

TEST_F(CpuBackendTest, ReluGradZeroesWhereOutputIsNotPositive) {
  std::vector<float> dy = {1, 2, 3, 4, 5};
  const std::vector<float> y = {0.5f, 0.0f, -1.0f, 2.0f, 1e-30f};
  backend_.ReluGrad(dy.data(), y.data(), dy.size());
  EXPECT_EQ(dy, (std::vector<float>{1, 0, 0, 4, 5}));
}

TEST_F(CpuBackendTest, ReluGradMatchesNaiveOnRandomVector) {
  const size_t n = 1001;
  std::vector<float> dy = RandomVector(n, 4);
  const std::vector<float> y = RandomVector(n, 5);
  const std::vector<float> before = dy;
  backend_.ReluGrad(dy.data(), y.data(), n);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(dy[i], y[i] > 0 ? before[i] : 0.0f) << i;
}

TEST_F(CpuBackendTest, BiasGradSumsColumns) {
  const std::vector<float> dy = {1, 2, 3, 10, 20, 30};
  std::vector<float> db = {-7, -7, -7};  // overwritten, not accumulated into
  backend_.BiasGrad(dy.data(), 2, 3, db.data());
  EXPECT_EQ(db, (std::vector<float>{11, 22, 33}));
}

TEST_F(CpuBackendTest, BiasGradMatchesNaiveOnRandomMatrix) {
  const int rows = 13, cols = 29;
  const std::vector<float> dy = RandomVector(rows * cols, 6);
  std::vector<float> db(cols, 1.0f);
  backend_.BiasGrad(dy.data(), rows, cols, db.data());
  for (int c = 0; c < cols; ++c) {
    double want = 0;
    for (int r = 0; r < rows; ++r) want += dy[r * cols + c];
    EXPECT_NEAR(db[c], want, 1e-5) << c;
  }
}

TEST_F(CpuBackendTest, SoftmaxCrossEntropyMatchesHandComputation) {
  // Row 0: logits 1 2 3, label 2. Row 1: logits 0 0 0, label 0.
  const std::vector<float> logits = {1, 2, 3, 0, 0, 0};
  const std::vector<int32_t> labels = {2, 0};
  std::vector<float> grad(6, 99.0f);
  int correct = -1;
  const float loss = backend_.SoftmaxCrossEntropy(logits.data(), labels.data(), 2, 3, grad.data(), &correct);
  const double sum0 = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const double loss0 = std::log(sum0) - 3.0;  // 0.40760596...
  const double loss1 = std::log(3.0);         // 1.09861228...
  EXPECT_NEAR(loss, (loss0 + loss1) / 2, 1e-6);
  EXPECT_NEAR(loss, 0.75310912, 1e-6);
  EXPECT_EQ(correct, 2);  // row 1 is a tie, which goes to index 0, its label
  const double want[6] = {std::exp(1.0) / sum0 / 2,
                          std::exp(2.0) / sum0 / 2,
                          (std::exp(3.0) / sum0 - 1.0) / 2,
                          (1.0 / 3 - 1.0) / 2,
                          1.0 / 3 / 2,
                          1.0 / 3 / 2};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(grad[i], want[i], 1e-6) << i;
}

TEST_F(CpuBackendTest, SoftmaxCrossEntropyGradientRowsSumToZero) {
  const int rows = 8, cols = 10;
  std::vector<float> logits = RandomVector(rows * cols, 7);
  for (float& x : logits) x *= 5;
  std::vector<int32_t> labels(rows);
  for (int r = 0; r < rows; ++r) labels[r] = (r * 3) % cols;
  std::vector<float> grad(rows * cols);
  int correct = 0;
  backend_.SoftmaxCrossEntropy(logits.data(), labels.data(), rows, cols, grad.data(), &correct);
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    for (int c = 0; c < cols; ++c) sum += grad[r * cols + c];
    EXPECT_NEAR(sum, 0.0, 1e-7) << r;
    EXPECT_LT(grad[r * cols + labels[r]], 0.0f) << r;
  }
}

TEST_F(CpuBackendTest, SoftmaxCrossEntropyCountsArgmax) {
  const std::vector<float> logits = {
      0.1f, 0.9f, 0.0f,   // argmax 1
      5.0f, 1.0f, 2.0f,   // argmax 0
      -1.f, -2.f, -0.5f,  // argmax 2
      3.0f, 3.5f, 3.4f,   // argmax 1
  };
  const std::vector<int32_t> labels = {1, 2, 2, 0};
  int correct = -1;
  backend_.SoftmaxCrossEntropy(logits.data(), labels.data(), 4, 3, nullptr, &correct);
  EXPECT_EQ(correct, 2);
}

TEST_F(CpuBackendTest, SoftmaxCrossEntropyIsStableForHugeLogits) {
  const std::vector<float> logits = {1000.0f, -1000.0f, 0.0f, -1000.0f, 1000.0f, 1000.0f};
  const std::vector<int32_t> labels = {0, 0};
  std::vector<float> grad(6);
  int correct = 0;
  const float loss = backend_.SoftmaxCrossEntropy(logits.data(), labels.data(), 2, 3, grad.data(), &correct);
  // Row 0: loss ~0 (exp(-1000) vanishes). Row 1: log(2) + 2000.
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, (0.0 + 2000.0 + std::log(2.0)) / 2, 1e-3);
  for (float g : grad) EXPECT_TRUE(std::isfinite(g));
  EXPECT_NEAR(grad[0], 0.0f, 1e-7);
  EXPECT_NEAR(grad[1], 0.0f, 1e-7);
  EXPECT_NEAR(grad[2], 0.0f, 1e-7);
  EXPECT_NEAR(grad[3], -0.5f, 1e-7);
  EXPECT_NEAR(grad[4], 0.25f, 1e-7);
  EXPECT_NEAR(grad[5], 0.25f, 1e-7);
  EXPECT_EQ(correct, 1);
}

TEST_F(CpuBackendTest, SoftmaxCrossEntropyLossOnlyWithNullGradient) {
  const std::vector<float> logits = {0, 0, 0, 0};
  const std::vector<int32_t> labels = {3};
  int correct = -1;
  const float loss = backend_.SoftmaxCrossEntropy(logits.data(), labels.data(), 1, 4, nullptr, &correct);
  EXPECT_NEAR(loss, std::log(4.0), 1e-6);
  EXPECT_EQ(correct, 0);
}

TEST(CreateBackendTest, CpuByDefault) {
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend = CreateBackend(BackendOptions{});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "cpu");
  EXPECT_TRUE((*backend)->host_memory());
}

TEST(CreateBackendTest, UnknownDeviceIsInvalidArgumentListingDevices) {
  BackendOptions options;
  options.device = "foo";
  const absl::Status status = CreateBackend(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("\"foo\""));
  EXPECT_THAT(std::string(status.message()), HasSubstr("cpu, cuda"));
}

TEST(CreateBackendTest, CpuThreadsOutOfRangeIsInvalidArgument) {
  for (int threads : {0, -1, 257}) {
    BackendOptions options;
    options.cpu_threads = threads;
    const absl::Status status = CreateBackend(options).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << threads;
    EXPECT_THAT(std::string(status.message()), HasSubstr("cpu_threads")) << threads;
  }
  BackendOptions options;
  options.cpu_threads = 256;
  EXPECT_TRUE(CreateBackend(options).ok());
}

#ifndef PS_HAVE_CUDA
TEST(CreateBackendTest, CudaIsUnimplementedWithoutCudaBuild) {
  BackendOptions options;
  options.device = "cuda";
  const absl::Status status = CreateBackend(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(status.message()), HasSubstr("no CUDA support"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("--device=cpu"));
}
#else
// With CUDA built, a GPU gives a cuda backend and its absence says so
// (worker/compute/cuda/cuda_backend_test.cc checks the details).
TEST(CreateBackendTest, CudaBuildGivesCudaOrSaysNoGpu) {
  BackendOptions options;
  options.device = "cuda";
  absl::StatusOr<std::unique_ptr<ComputeBackend>> backend = CreateBackend(options);
  if (backend.ok()) {
    EXPECT_EQ((*backend)->name(), "cuda");
    EXPECT_FALSE((*backend)->host_memory());
  } else {
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable) << backend.status();
    EXPECT_THAT(std::string(backend.status().message()), HasSubstr("no GPU"));
  }
}
#endif

}  // namespace
}  // namespace ps
