#include "worker/train/text_examples.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(ShuffledOrderTest, IsAPermutationFixedBySeed) {
  const std::vector<size_t> a = ShuffledOrder(1000, 7);
  std::vector<size_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<size_t> identity(1000);
  std::iota(identity.begin(), identity.end(), size_t{0});
  EXPECT_EQ(sorted, identity);
  EXPECT_EQ(ShuffledOrder(1000, 7), a);
  EXPECT_NE(ShuffledOrder(1000, 8), a);
  EXPECT_NE(a, identity);
  EXPECT_TRUE(ShuffledOrder(0, 1).empty());
  EXPECT_EQ(ShuffledOrder(1, 1), std::vector<size_t>{0});
}

TEST(EvaluateLogitsTest, LossAccuracyAndAucOfKnownLogits) {
  const std::vector<LabeledTokens> examples = {{{}, 1}, {{}, 0}, {{}, 1}, {{}, 0}};
  // Logit 0 costs log 2 whatever the label; 2 for a positive costs log(1 + e^-2).
  const std::vector<float> logits = {2, -2, 0, 1};
  const Evaluation e = EvaluateLogits(logits, examples);
  const double expected = (2 * std::log1p(std::exp(-2.0)) + std::log(2.0) + std::log1p(std::exp(1.0))) / 4;
  EXPECT_NEAR(e.loss, expected, 1e-12);
  ASSERT_TRUE(e.accuracy.has_value());
  EXPECT_DOUBLE_EQ(*e.accuracy, 0.5);  // 2 and -2 right; 0 (not > 0) and 1 wrong
  ASSERT_TRUE(e.auc.has_value());
  // Positive scores {2, 0} against negative {-2, 1}: 2 > both, 0 > -2 only: 3 of 4 pairs.
  EXPECT_DOUBLE_EQ(*e.auc, 0.75);
}

TEST(EvaluateLogitsTest, NoExamplesMeasureNothing) {
  const Evaluation e = EvaluateLogits({}, {});
  EXPECT_EQ(e.loss, 0);
  EXPECT_FALSE(e.accuracy.has_value());
  EXPECT_FALSE(e.auc.has_value());
}

}  // namespace
}  // namespace ps
