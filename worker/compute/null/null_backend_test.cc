#include "worker/compute/null/null_backend.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/compute/compute_backend.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

TEST(NullBackendTest, CreateBackendMakesItByName) {
  absl::StatusOr<std::unique_ptr<ComputeBackend>> b = CreateBackend({.device = "null"});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->name(), "null");
  EXPECT_TRUE((*b)->host_memory());
  absl::StatusOr<std::unique_ptr<ComputeBackend>> unknown = CreateBackend({.device = "tpu"});
  ASSERT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("use one of: cpu, cuda, null"));
}

TEST(NullBackendTest, MemoryIsZeroFilledAlignedHostMemoryAndCopiesMoveBytes) {
  NullBackend b;
  float* d = b.Alloc(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 64, 0u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(d[i], 0.0f);
  std::vector<float> host(1000, 2.5f), back(1000);
  b.CopyToDevice(d, host.data(), host.size());
  b.CopyToHost(back.data(), d, back.size());
  EXPECT_EQ(back, host);
  b.Free(d);
  b.Free(nullptr);
}

TEST(NullBackendTest, ComputeChangesNothingAndTicketsAreDone) {
  NullBackend b;
  std::vector<float> a(6, 1.0f), w(6, 1.0f), c(4, 7.0f), dlogits(4, 3.0f);
  b.Gemm(false, false, 2, 2, 3, 1.0f, a.data(), w.data(), 0.0f, c.data());
  b.BiasActivation(c.data(), w.data(), 2, 2, true);
  b.ReluGrad(c.data(), a.data(), 4);
  b.BiasGrad(a.data(), 2, 2, c.data());
  EXPECT_EQ(c, std::vector<float>(4, 7.0f));
  const int32_t labels[2] = {0, 1};
  int correct = -1;
  EXPECT_EQ(b.SoftmaxCrossEntropy(c.data(), labels, 2, 2, dlogits.data(), &correct), 0.0f);
  EXPECT_EQ(correct, 0);
  EXPECT_EQ(dlogits, std::vector<float>(4, 3.0f));
  const ComputeBackend::Ticket t = b.Record();
  EXPECT_TRUE(b.Done(t));
  b.WaitFor(t);
  b.Synchronize();
}

}  // namespace
}  // namespace ps
