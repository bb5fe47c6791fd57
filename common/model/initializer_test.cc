#include "common/model/initializer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/model/model_spec.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

constexpr size_t kLarge = 100000;

std::vector<float> Fill(const TensorSpec& t, uint64_t offset, size_t n) {
  std::vector<float> out(n, -12345.0f);
  FillInitialValues(t, offset, absl::MakeSpan(out));
  return out;
}

std::vector<float> FillAll(const TensorSpec& t) { return Fill(t, 0, static_cast<size_t>(t.NumElements())); }

double Mean(const std::vector<float>& v) {
  double sum = 0;
  for (float x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

double StdDev(const std::vector<float>& v) {
  const double mean = Mean(v);
  double sq = 0;
  for (float x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / static_cast<double>(v.size()));
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int CountEqual(const std::vector<float>& a, const std::vector<float>& b) {
  int same = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) same += a[i] == b[i];
  return same;
}

TEST(InitializerTest, ZerosFillsZero) {
  const TensorSpec t{"w", {10, 7}, Initializer::Zeros()};
  ASSERT_TRUE(t.Validate().ok());
  const std::vector<float> v = Fill(t, 13, 50);
  for (float x : v) {
    EXPECT_EQ(x, 0.0f);
    EXPECT_FALSE(std::signbit(x));
  }
}

TEST(InitializerTest, ConstantFillsValue) {
  const TensorSpec t{"b", {64}, Initializer::Constant(-2.5f)};
  ASSERT_TRUE(t.Validate().ok());
  const std::vector<float> v = Fill(t, 3, 61);
  for (float x : v) EXPECT_EQ(x, -2.5f);
}

TEST(InitializerTest, EmptyRangeWritesNothing) {
  const TensorSpec t{"w", {4}, Initializer::Uniform(0.0f, 1.0f, 3)};
  std::vector<float> none;
  FillInitialValues(t, 4, absl::MakeSpan(none));  // an empty range at the end is inside
  EXPECT_TRUE(none.empty());
}

TEST(InitializerTest, UniformStaysInRangeWithMeanInMiddle) {
  const TensorSpec t{"layer.w", {1000, 100}, Initializer::Uniform(-3.0f, 5.0f, 42)};
  ASSERT_TRUE(t.Validate().ok());
  const std::vector<float> v = FillAll(t);
  ASSERT_EQ(v.size(), kLarge);
  float lo = v[0], hi = v[0];
  for (float x : v) {
    ASSERT_GE(x, -3.0f);
    ASSERT_LT(x, 5.0f);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  // sd of U(-3, 5) is 8/sqrt(12) = 2.31; the mean of 1e5 has sd 0.0073.
  EXPECT_NEAR(Mean(v), 1.0, 0.04);
  EXPECT_NEAR(StdDev(v), 8.0 / std::sqrt(12.0), 0.03);
  // The whole range is used.
  EXPECT_LT(lo, -2.99f);
  EXPECT_GT(hi, 4.99f);
}

// Rounding to float must not produce b itself: uniform stays in [a, b).
TEST(InitializerTest, UniformNeverReturnsUpperBound) {
  const TensorSpec t{"w", {int64_t{1} << 30}, Initializer::Uniform(0.0f, 1.0f, 1)};
  ASSERT_TRUE(t.Validate().ok());
  const std::vector<float> v = Fill(t, 31132604 - 2, 5);
  for (float x : v) {
    EXPECT_GE(x, 0.0f);
    EXPECT_LT(x, 1.0f);
  }
}

TEST(InitializerTest, NormalHasRequestedMeanAndStdDev) {
  const TensorSpec t{"emb", {kLarge}, Initializer::Normal(2.0f, 0.5f, 7)};
  ASSERT_TRUE(t.Validate().ok());
  const std::vector<float> v = FillAll(t);
  // Standard error of the mean: 0.5 / sqrt(1e5) = 0.0016; of the sd: 0.0011.
  EXPECT_NEAR(Mean(v), 2.0, 0.01);
  EXPECT_NEAR(StdDev(v), 0.5, 0.01);
  for (float x : v) ASSERT_TRUE(std::isfinite(x));
  // Roughly 68% within one sd.
  int within = 0;
  for (float x : v) within += std::abs(x - 2.0f) < 0.5f;
  EXPECT_NEAR(within / static_cast<double>(v.size()), 0.6827, 0.01);
}

TEST(InitializerTest, NormalWithZeroStdDevIsConstant) {
  const TensorSpec t{"w", {100}, Initializer::Normal(-1.25f, 0.0f, 7)};
  ASSERT_TRUE(t.Validate().ok());
  for (float x : FillAll(t)) EXPECT_EQ(x, -1.25f);
}

TEST(InitializerTest, HeUsesFanInOfFirstDimension) {
  const TensorSpec t{"fc.weight", {50, 2000}, Initializer::He(11)};
  ASSERT_TRUE(t.Validate().ok());
  const std::vector<float> v = FillAll(t);
  ASSERT_EQ(v.size(), kLarge);
  EXPECT_NEAR(Mean(v), 0.0, 0.01);
  EXPECT_NEAR(StdDev(v), std::sqrt(2.0 / 50.0), 0.01 * std::sqrt(2.0 / 50.0) * 3);

  // Same element count, fan_in 2000: sd shrinks to sqrt(2/2000).
  const TensorSpec wide{"fc.weight", {2000, 50}, Initializer::He(11)};
  EXPECT_NEAR(StdDev(FillAll(wide)), std::sqrt(2.0 / 2000.0), 0.03 * std::sqrt(2.0 / 2000.0));
}

TEST(InitializerTest, SlicedFillEqualsWholeFill) {
  for (const Initializer& init : {Initializer::Uniform(-1.0f, 1.0f, 5), Initializer::Normal(0.5f, 2.0f, 6),
                                  Initializer::He(7), Initializer::Constant(3.0f), Initializer::Zeros()}) {
    const TensorSpec t{"enc.w", {97, 13}, init};
    ASSERT_TRUE(t.Validate().ok());
    const std::vector<float> whole = FillAll(t);
    const size_t n = whole.size();
    for (size_t k : {size_t{0}, size_t{1}, size_t{2}, size_t{13}, size_t{500}, n - 1, n}) {
      std::vector<float> parts = Fill(t, 0, k);
      const std::vector<float> rest = Fill(t, k, n - k);
      parts.insert(parts.end(), rest.begin(), rest.end());
      EXPECT_TRUE(BitwiseEqual(parts, whole)) << "kind " << static_cast<int>(init.kind) << " split at " << k;
    }
    // Three uneven pieces, filled in reverse order.
    std::vector<float> pieces(n);
    FillInitialValues(t, 1000, absl::MakeSpan(pieces).subspan(1000));
    FillInitialValues(t, 7, absl::MakeSpan(pieces).subspan(7, 993));
    FillInitialValues(t, 0, absl::MakeSpan(pieces).subspan(0, 7));
    EXPECT_TRUE(BitwiseEqual(pieces, whole)) << "kind " << static_cast<int>(init.kind);
  }
}

TEST(InitializerTest, SameNameAndSeedIsDeterministic) {
  const TensorSpec a{"layer3.weight", {300, 3}, Initializer::Normal(0.0f, 1.0f, 99)};
  const TensorSpec b = a;
  EXPECT_TRUE(BitwiseEqual(FillAll(a), FillAll(b)));
  EXPECT_TRUE(BitwiseEqual(FillAll(a), FillAll(a)));
}

TEST(InitializerTest, DifferentSeedsDiffer) {
  for (InitKind kind : {InitKind::kUniform, InitKind::kNormal, InitKind::kHe}) {
    const TensorSpec a{"w", {1000}, Initializer{kind, 0.0f, 1.0f, 1}};
    const TensorSpec b{"w", {1000}, Initializer{kind, 0.0f, 1.0f, 2}};
    EXPECT_LT(CountEqual(FillAll(a), FillAll(b)), 5) << static_cast<int>(kind);
  }
}

TEST(InitializerTest, DifferentNamesWithSameSeedDiffer) {
  for (InitKind kind : {InitKind::kUniform, InitKind::kNormal, InitKind::kHe}) {
    const TensorSpec a{"layer0.weight", {1000}, Initializer{kind, 0.0f, 1.0f, 5}};
    const TensorSpec b{"layer1.weight", {1000}, Initializer{kind, 0.0f, 1.0f, 5}};
    EXPECT_LT(CountEqual(FillAll(a), FillAll(b)), 5) << static_cast<int>(kind);
  }
}

TEST(InitializerTest, ShapeDoesNotChangeUniformValues) {
  // Values depend on the element index, not on how the shape groups it.
  const TensorSpec flat{"w", {600}, Initializer::Uniform(0.0f, 1.0f, 3)};
  const TensorSpec matrix{"w", {20, 30}, Initializer::Uniform(0.0f, 1.0f, 3)};
  EXPECT_TRUE(BitwiseEqual(FillAll(flat), FillAll(matrix)));
}

TEST(InitializerTest, NeighbouringElementsAreNotCorrelated) {
  const TensorSpec t{"w", {kLarge}, Initializer::Normal(0.0f, 1.0f, 8)};
  const std::vector<float> v = FillAll(t);
  double lag1 = 0;
  for (size_t i = 1; i < v.size(); ++i) lag1 += static_cast<double>(v[i]) * v[i - 1];
  lag1 /= static_cast<double>(v.size() - 1);
  EXPECT_NEAR(lag1, 0.0, 0.02);  // standard error 1/sqrt(1e5) = 0.003
}

}  // namespace
}  // namespace ps
