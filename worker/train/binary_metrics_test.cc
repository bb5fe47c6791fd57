#include "worker/train/binary_metrics.h"

#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(AccuracyTest, ThresholdsLogitsAtZero) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 0.0f};
  const std::vector<float> labels = {1, 0, 0, 0};
  EXPECT_DOUBLE_EQ(*Accuracy(logits, labels), 0.75);  // 0.5 is wrong; logit 0 predicts negative
  EXPECT_FALSE(Accuracy({}, {}).has_value());
}

TEST(RocAucTest, PerfectInverseAndConstant) {
  const std::vector<float> labels = {0, 0, 1, 1, 1};
  EXPECT_DOUBLE_EQ(*RocAuc({0.1f, 0.2f, 0.3f, 0.8f, 0.9f}, labels), 1.0);
  EXPECT_DOUBLE_EQ(*RocAuc({0.9f, 0.8f, 0.3f, 0.2f, 0.1f}, labels), 0.0);
  EXPECT_DOUBLE_EQ(*RocAuc({5, 5, 5, 5, 5}, labels), 0.5);
}

// Hand count: positives {0.4, 0.7, 0.7}, negatives {0.1, 0.4, 0.7, 0.9}.
// Pairs won: 0.4 beats 0.1 and ties 0.4 (1.5); each 0.7 beats 0.1 and 0.4 and
// ties 0.7 (2.5 each): 6.5 of 12.
TEST(RocAucTest, TiesCountOneHalf) {
  const std::vector<float> scores = {0.1f, 0.4f, 0.4f, 0.7f, 0.7f, 0.7f, 0.9f};
  const std::vector<float> labels = {0, 1, 0, 1, 0, 1, 0};
  EXPECT_DOUBLE_EQ(*RocAuc(scores, labels), 6.5 / 12);
}

// One inversion among 2 x 2 pairs, the input in no particular order.
TEST(RocAucTest, OneInversion) { EXPECT_DOUBLE_EQ(*RocAuc({0.8f, 0.3f, 0.6f, 0.1f}, {1, 1, 0, 0}), 0.75); }

TEST(RocAucTest, UndefinedWithoutBothClassesOrWithNan) {
  EXPECT_FALSE(RocAuc({0.1f, 0.2f}, {1, 1}).has_value());
  EXPECT_FALSE(RocAuc({0.1f, 0.2f}, {0, 0}).has_value());
  EXPECT_FALSE(RocAuc({}, {}).has_value());
  EXPECT_FALSE(RocAuc({0.1f, std::numeric_limits<float>::quiet_NaN()}, {0, 1}).has_value());
}

}  // namespace
}  // namespace ps
