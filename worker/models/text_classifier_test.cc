#include "worker/models/text_classifier.h"

#include <cmath>
#include <functional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;

double Softplus(double z) { return std::log1p(std::exp(z)); }
double Sigmoid(double z) { return 1 / (1 + std::exp(-z)); }

TEST(TokenBatchTest, UniqueIdsInFirstAppearanceOrder) {
  TokenBatch batch;
  batch.Add(std::vector<uint64_t>{7, 3, 7});
  batch.Add(std::vector<uint64_t>{});
  batch.Add(std::vector<uint64_t>{3, 9});
  EXPECT_EQ(batch.messages(), 3u);
  EXPECT_THAT(batch.ids(), ElementsAre(7, 3, 9));
  EXPECT_THAT(batch.offsets(), ElementsAre(0, 3, 3, 5));
  EXPECT_THAT(batch.index(), ElementsAre(0, 1, 0, 1, 2));
  batch.Clear();
  EXPECT_EQ(batch.messages(), 0u);
  batch.Add(std::vector<uint64_t>{9});
  EXPECT_THAT(batch.ids(), ElementsAre(9));
  EXPECT_THAT(batch.index(), ElementsAre(0));
}

TEST(TextClassifierTest, ConfigIsValidated) {
  EXPECT_EQ(TextClassifier::Create({.dim = 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TextClassifier::Create({.dim = 8, .hidden = -1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TextClassifier::Create({.dim = 8, .hidden = 5000}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(TextClassifier::Create({.dim = 8, .hidden = 4}).ok());
}

// Two messages over ids a, b: m0 = [a, b, a] (label 1), m1 = [b] (label 0);
// a = (1, 2), b = (4, -2); out_w = (0.5, -1.5), out_b = 0.25.
// pooled m0 = (2, 2/3): logit 1 - 1 + 0.25 = 0.25; pooled m1 = (4, -2):
// logit 2 + 3 + 0.25 = 5.25.
TEST(TextClassifierTest, LinearForwardAndBackwardByHand) {
  const BasicTextClassifier<double> model = *BasicTextClassifier<double>::Create({.dim = 2});
  TokenBatch batch;
  batch.Add(std::vector<uint64_t>{100, 200, 100});
  batch.Add(std::vector<uint64_t>{200});
  const std::vector<double> rows = {1, 2, 4, -2};
  DenseParams<double> dense = model.ZeroDense();
  dense.out_w = {0.5, -1.5};
  dense.out_b = {0.25};
  TextClassifierGrads<double> g;
  std::vector<double> logits;
  const absl::StatusOr<double> loss = model.LossAndGradients(batch, rows, dense, std::vector<float>{1, 0}, &g, &logits);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_THAT(logits, ElementsAre(0.25, 5.25));
  EXPECT_NEAR(*loss, (Softplus(0.25) - 0.25 + Softplus(5.25)) / 2, 1e-15);
  const double dz0 = (Sigmoid(0.25) - 1) / 2, dz1 = Sigmoid(5.25) / 2;
  EXPECT_NEAR(g.dense.out_b[0], dz0 + dz1, 1e-15);
  EXPECT_NEAR(g.dense.out_w[0], dz0 * 2 + dz1 * 4, 1e-15);
  EXPECT_NEAR(g.dense.out_w[1], dz0 * 2 / 3 + dz1 * -2, 1e-15);
  // Row a: 2 of m0's 3 tokens; row b: 1 of m0's 3 plus all of m1.
  ASSERT_EQ(g.rows.size(), 4u);
  EXPECT_NEAR(g.rows[0], 2.0 / 3 * dz0 * 0.5, 1e-15);
  EXPECT_NEAR(g.rows[1], 2.0 / 3 * dz0 * -1.5, 1e-15);
  EXPECT_NEAR(g.rows[2], 1.0 / 3 * dz0 * 0.5 + dz1 * 0.5, 1e-15);
  EXPECT_NEAR(g.rows[3], 1.0 / 3 * dz0 * -1.5 + dz1 * -1.5, 1e-15);
  std::vector<double> only_logits(2);
  ASSERT_TRUE(model.Logits(batch, rows, dense, absl::MakeSpan(only_logits)).ok());
  EXPECT_THAT(only_logits, ElementsAre(0.25, 5.25));
}

// m1 of the case above through hidden_w = [[1, 0], [0, -1]], hidden_b =
// (0, 0.5): h = (ReLU(4), ReLU(2 + 0.5)) = (4, 2.5); out_w = (1, 2): logit 9.
// m0 pools to (2, 2/3): h = (2, ReLU(-2/3 + 0.5)) = (2, 0): logit 2.
TEST(TextClassifierTest, HiddenForwardByHand) {
  const TextClassifier model = *TextClassifier::Create({.dim = 2, .hidden = 2});
  TokenBatch batch;
  batch.Add(std::vector<uint64_t>{100, 200, 100});
  batch.Add(std::vector<uint64_t>{200});
  DenseParams<float> dense = model.ZeroDense();
  dense.hidden_w = {1, 0, 0, -1};
  dense.hidden_b = {0, 0.5f};
  dense.out_w = {1, 2};
  std::vector<float> logits(2);
  ASSERT_TRUE(model.Logits(batch, std::vector<float>{1, 2, 4, -2}, dense, absl::MakeSpan(logits)).ok());
  EXPECT_FLOAT_EQ(logits[0], 2);
  EXPECT_FLOAT_EQ(logits[1], 9);
}

// A batch with repeated ids across and within messages, and an empty one.
TokenBatch GradCheckBatch() {
  TokenBatch batch;
  batch.Add(std::vector<uint64_t>{1, 2, 3, 2});
  batch.Add(std::vector<uint64_t>{3, 4});
  batch.Add(std::vector<uint64_t>{});
  batch.Add(std::vector<uint64_t>{5, 1, 1, 1, 4});
  return batch;
}

double Pseudo(int i) { return std::sin(1.7 * i + 0.3) * 0.8; }

// Central differences of the double-precision loss against its analytic
// gradient, for every row value and every dense parameter. With step 1e-5
// the truncation error is O(1e-10) and the rounding error O(1e-11), so a
// tolerance of 1e-7 (absolute) plus 1e-6 (relative) has a wide margin, and
// still catches a gradient that is off by any factor or a term that is
// missing (those show up at 1e-3 and above).
void CheckGradients(const TextClassifierConfig& config) {
  const auto model = *BasicTextClassifier<double>::Create(config);
  const TokenBatch batch = GradCheckBatch();
  std::vector<double> rows(batch.ids().size() * config.dim);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = Pseudo(static_cast<int>(i));
  DenseParams<double> dense = model.InitDense(/*seed=*/3);
  dense.hidden_b.assign(dense.hidden_b.size(), 0.1);
  dense.out_b = {-0.2};
  const std::vector<float> labels = {1, 0, 1, 0.25f};
  TextClassifierGrads<double> g;
  ASSERT_TRUE(model.LossAndGradients(batch, rows, dense, labels, &g).ok());
  TextClassifierGrads<double> unused;
  auto check = [&](std::vector<double>& params, const std::vector<double>& analytic, const char* name) {
    ASSERT_EQ(params.size(), analytic.size()) << name;
    for (size_t i = 0; i < params.size(); ++i) {
      const double saved = params[i], h = 1e-5;
      params[i] = saved + h;
      const double up = *model.LossAndGradients(batch, rows, dense, labels, &unused);
      params[i] = saved - h;
      const double down = *model.LossAndGradients(batch, rows, dense, labels, &unused);
      params[i] = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[i], numeric, 1e-7 + 1e-6 * std::abs(numeric)) << name << "[" << i << "]";
    }
  };
  check(rows, g.rows, "rows");
  check(dense.hidden_w, g.dense.hidden_w, "hidden_w");
  check(dense.hidden_b, g.dense.hidden_b, "hidden_b");
  check(dense.out_w, g.dense.out_w, "out_w");
  check(dense.out_b, g.dense.out_b, "out_b");
}

TEST(TextClassifierTest, GradientsMatchFiniteDifferencesLinear) { CheckGradients({.dim = 6}); }
TEST(TextClassifierTest, GradientsMatchFiniteDifferencesHidden) { CheckGradients({.dim = 6, .hidden = 5}); }

// Float computes what double does, to float precision.
TEST(TextClassifierTest, FloatAgreesWithDouble) {
  const TextClassifierConfig config{.dim = 8, .hidden = 4};
  const auto model_d = *BasicTextClassifier<double>::Create(config);
  const auto model_f = *TextClassifier::Create(config);
  const TokenBatch batch = GradCheckBatch();
  std::vector<double> rows_d(batch.ids().size() * config.dim);
  for (size_t i = 0; i < rows_d.size(); ++i) rows_d[i] = Pseudo(static_cast<int>(i));
  const std::vector<float> rows_f(rows_d.begin(), rows_d.end());
  const std::vector<float> labels = {1, 0, 1, 0};
  TextClassifierGrads<double> gd;
  TextClassifierGrads<float> gf;
  const double loss_d = *model_d.LossAndGradients(batch, rows_d, model_d.InitDense(5), labels, &gd);
  const double loss_f = *model_f.LossAndGradients(batch, rows_f, model_f.InitDense(5), labels, &gf);
  EXPECT_NEAR(loss_f, loss_d, 1e-6);
  ASSERT_EQ(gf.rows.size(), gd.rows.size());
  for (size_t i = 0; i < gd.rows.size(); ++i) EXPECT_NEAR(gf.rows[i], gd.rows[i], 1e-6) << i;
  for (size_t i = 0; i < gd.dense.hidden_w.size(); ++i) {
    EXPECT_NEAR(gf.dense.hidden_w[i], gd.dense.hidden_w[i], 1e-6) << i;
  }
}

TEST(TextClassifierTest, InitDenseIsDeterministicAndBounded) {
  const TextClassifier model = *TextClassifier::Create({.dim = 16, .hidden = 8});
  const DenseParams<float> a = model.InitDense(1), b = model.InitDense(1), c = model.InitDense(2);
  EXPECT_EQ(a.hidden_w, b.hidden_w);
  EXPECT_EQ(a.out_w, b.out_w);
  EXPECT_NE(a.hidden_w, c.hidden_w);
  for (float w : a.hidden_w) EXPECT_LE(std::abs(w), std::sqrt(6.0f / 16));
  for (float w : a.out_w) EXPECT_LE(std::abs(w), std::sqrt(3.0f / 8));
  EXPECT_THAT(a.hidden_b, ::testing::Each(0.0f));
  EXPECT_THAT(a.out_b, ElementsAre(0.0f));
}

TEST(TextClassifierTest, WrongSizesAndLabelsAreInvalidArgument) {
  const TextClassifier model = *TextClassifier::Create({.dim = 2});
  TokenBatch batch;
  batch.Add(std::vector<uint64_t>{1, 2});
  const DenseParams<float> dense = model.ZeroDense();
  TextClassifierGrads<float> g;
  const std::vector<float> rows = {1, 2, 3, 4};
  EXPECT_EQ(
      model.LossAndGradients(batch, std::vector<float>{1, 2, 3}, dense, std::vector<float>{1}, &g).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model.LossAndGradients(batch, rows, dense, std::vector<float>{1, 0}, &g).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model.LossAndGradients(batch, rows, dense, std::vector<float>{2}, &g).status().code(),
            absl::StatusCode::kInvalidArgument);
  DenseParams<float> bad = dense;
  bad.out_w.push_back(0);
  EXPECT_EQ(model.LossAndGradients(batch, rows, bad, std::vector<float>{1}, &g).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> logits(2);
  EXPECT_EQ(model.Logits(batch, rows, dense, absl::MakeSpan(logits)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TextClassifierTest, EmptyBatchHasZeroLoss) {
  const TextClassifier model = *TextClassifier::Create({.dim = 3});
  TextClassifierGrads<float> g;
  const absl::StatusOr<double> loss = model.LossAndGradients(TokenBatch(), {}, model.ZeroDense(), {}, &g);
  ASSERT_TRUE(loss.ok());
  EXPECT_EQ(*loss, 0.0);
  EXPECT_TRUE(g.rows.empty());
}

}  // namespace
}  // namespace ps
