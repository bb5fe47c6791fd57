#include "worker/models/local_embedding_table.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(LocalEmbeddingTableTest, UnseenRowsReadAsTheirInitialValueWithoutBeingCreated) {
  const LocalEmbeddingTable table({.dim = 4, .init_scale = 0.5f, .seed = 7});
  std::vector<float> a(8), b(8);
  table.Gather(std::vector<uint64_t>{11, 12}, absl::MakeSpan(a));
  table.Gather(std::vector<uint64_t>{12, 11}, absl::MakeSpan(b));
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(std::vector<float>(a.begin(), a.begin() + 4), std::vector<float>(b.begin() + 4, b.end()));
  EXPECT_NE(std::vector<float>(a.begin(), a.begin() + 4), std::vector<float>(a.begin() + 4, a.end()));
  for (float v : a) {
    EXPECT_GE(v, -0.5f);
    EXPECT_LT(v, 0.5f);
  }
  // Another seed, other values; scale 0, zeros.
  const LocalEmbeddingTable other({.dim = 4, .init_scale = 0.5f, .seed = 8});
  std::vector<float> c(4);
  other.Gather(std::vector<uint64_t>{11}, absl::MakeSpan(c));
  EXPECT_NE(c, std::vector<float>(a.begin(), a.begin() + 4));
  const LocalEmbeddingTable zeros({.dim = 4, .init_scale = 0});
  zeros.Gather(std::vector<uint64_t>{11}, absl::MakeSpan(c));
  EXPECT_THAT(c, ::testing::Each(0.0f));
}

// Two steps on one row from zero: h = g1^2, then g1^2 + g2^2.
TEST(LocalEmbeddingTableTest, AdagradUpdatesOnlyTheNamedRows) {
  LocalEmbeddingTable table({.dim = 2, .init_scale = 0, .lr = 0.5f, .eps = 0});
  table.ApplyAdagrad(std::vector<uint64_t>{5}, std::vector<float>{2, -1});
  table.ApplyAdagrad(std::vector<uint64_t>{5}, std::vector<float>{1, 0});
  std::vector<float> row(4);
  table.Gather(std::vector<uint64_t>{5, 6}, absl::MakeSpan(row));
  EXPECT_EQ(table.size(), 1u);
  EXPECT_FLOAT_EQ(row[0], -0.5f * 2 / 2 - 0.5f * 1 / std::sqrt(5.0f));
  EXPECT_FLOAT_EQ(row[1], -0.5f * -1 / 1);
  EXPECT_EQ(row[2], 0.0f);
  EXPECT_EQ(row[3], 0.0f);
}

TEST(LocalEmbeddingTableTest, DenseAdagradStep) {
  std::vector<float> w = {1, 1}, h = {0, 3};
  AdagradStep(absl::MakeSpan(w), absl::MakeSpan(h), std::vector<float>{1, 1}, 0.1f, 0);
  EXPECT_THAT(h, ::testing::ElementsAre(1, 4));
  EXPECT_FLOAT_EQ(w[0], 0.9f);
  EXPECT_FLOAT_EQ(w[1], 0.95f);
}

}  // namespace
}  // namespace ps
