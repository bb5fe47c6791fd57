#include "server/optim/optimizer.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/model/model_spec.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

constexpr double kTol = 1e-6;

OptimizerConfig Config(OptimizerKind kind, float lr) {
  OptimizerConfig config;
  config.kind = kind;
  config.learning_rate = lr;
  return config;
}

std::unique_ptr<Optimizer> Make(const OptimizerConfig& config) {
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = Optimizer::Create(config);
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  return optimizer.ok() ? *std::move(optimizer) : nullptr;
}

// One parameter slice with its zero-filled optimizer state.
struct Slot {
  Slot(const Optimizer& optimizer, std::vector<float> w)
      : optimizer(optimizer), value(std::move(w)), state(optimizer.StateSize(value.size()), 0.0f) {}

  void Step(const std::vector<float>& grad, float grad_scale = 1.0f) {
    optimizer.Update(absl::MakeSpan(value), absl::MakeSpan(state), grad, grad_scale, steps++);
  }

  const Optimizer& optimizer;
  std::vector<float> value;
  std::vector<float> state;
  uint64_t steps = 0;
};

TEST(SgdTest, StepsMatchHandComputed) {
  auto sgd = Make(Config(OptimizerKind::kSgd, 0.5f));
  ASSERT_NE(sgd, nullptr);
  Slot slot(*sgd, {1.0f, -2.0f, 3.0f});
  slot.Step({2.0f, 1.0f, -4.0f});
  EXPECT_EQ(slot.value, (std::vector<float>{0.0f, -2.5f, 5.0f}));
  slot.Step({1.0f, 1.0f, 1.0f});
  EXPECT_EQ(slot.value, (std::vector<float>{-0.5f, -3.0f, 4.5f}));
}

TEST(SgdTest, StateSizeIsZero) {
  auto sgd = Make(Config(OptimizerKind::kSgd, 0.1f));
  ASSERT_NE(sgd, nullptr);
  EXPECT_EQ(sgd->StateSize(0), 0u);
  EXPECT_EQ(sgd->StateSize(1000), 0u);
}

TEST(SgdTest, WeightDecayAddsL2Term) {
  OptimizerConfig config = Config(OptimizerKind::kSgd, 0.1f);
  config.weight_decay = 0.01f;
  auto sgd = Make(config);
  ASSERT_NE(sgd, nullptr);
  Slot slot(*sgd, {2.0f, -1.0f});
  slot.Step({1.0f, 0.0f});
  EXPECT_NEAR(slot.value[0], 2.0 - 0.1 * (1.0 + 0.01 * 2.0), kTol);
  EXPECT_NEAR(slot.value[1], -1.0 - 0.1 * (0.01 * -1.0), kTol);
}

TEST(SgdTest, GradScaleTurnsSumIntoMean) {
  auto sgd = Make(Config(OptimizerKind::kSgd, 0.5f));
  ASSERT_NE(sgd, nullptr);
  // Four workers pushed 1, 2, 3 and 6: the sum is 12, the mean 3.
  Slot summed(*sgd, {1.0f});
  summed.Step({12.0f}, 0.25f);
  Slot mean(*sgd, {1.0f});
  mean.Step({3.0f});
  EXPECT_EQ(summed.value[0], -0.5f);
  EXPECT_EQ(summed.value, mean.value);
}

TEST(MomentumTest, ThreeStepsMatchHandComputed) {
  OptimizerConfig config = Config(OptimizerKind::kMomentum, 0.1f);
  config.momentum = 0.9f;
  auto momentum = Make(config);
  ASSERT_NE(momentum, nullptr);
  Slot slot(*momentum, {1.0f});
  const double mu = 0.9f, lr = 0.1f;

  slot.Step({1.0f});
  double v = 1.0;
  double w = 1.0 - lr * v;  // 0.9
  EXPECT_NEAR(slot.state[0], v, kTol);
  EXPECT_NEAR(slot.value[0], w, kTol);

  slot.Step({2.0f});
  v = mu * v + 2.0;  // 2.9
  w -= lr * v;       // 0.61
  EXPECT_NEAR(slot.state[0], v, kTol);
  EXPECT_NEAR(slot.value[0], w, kTol);

  slot.Step({-1.0f});
  v = mu * v - 1.0;  // 1.61
  w -= lr * v;       // 0.449
  EXPECT_NEAR(slot.state[0], v, kTol);
  EXPECT_NEAR(slot.value[0], w, kTol);
  EXPECT_NEAR(slot.value[0], 0.449, 1e-5);
}

TEST(MomentumTest, NesterovLooksAheadAlongVelocity) {
  OptimizerConfig config = Config(OptimizerKind::kMomentum, 0.1f);
  config.momentum = 0.9f;
  auto plain = Make(config);
  config.nesterov = true;
  auto nesterov = Make(config);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(nesterov, nullptr);
  Slot p(*plain, {1.0f});
  Slot n(*nesterov, {1.0f});
  const double mu = 0.9f, lr = 0.1f;

  p.Step({1.0f});
  n.Step({1.0f});
  EXPECT_NEAR(p.value[0], 1.0 - lr * 1.0, kTol);               // 0.9
  EXPECT_NEAR(n.value[0], 1.0 - lr * (1.0 + mu * 1.0), kTol);  // 0.81

  p.Step({2.0f});
  n.Step({2.0f});
  const double v2 = mu * 1.0 + 2.0;                                      // 2.9 for both
  EXPECT_NEAR(p.value[0], 1.0 - lr * 1.0 - lr * v2, kTol);               // 0.61
  EXPECT_NEAR(n.value[0], 1.0 - lr * 1.9 - lr * (2.0 + mu * v2), kTol);  // 0.349
  // The velocity itself does not depend on nesterov.
  EXPECT_EQ(p.state, n.state);
  EXPECT_NEAR(p.state[0], v2, kTol);
}

TEST(MomentumTest, StateSizeIsN) {
  auto momentum = Make(Config(OptimizerKind::kMomentum, 0.1f));
  ASSERT_NE(momentum, nullptr);
  EXPECT_EQ(momentum->StateSize(0), 0u);
  EXPECT_EQ(momentum->StateSize(7), 7u);
}

TEST(AdamTest, FirstStepMovesEachWeightByLearningRate) {
  auto adam = Make(Config(OptimizerKind::kAdam, 0.01f));
  ASSERT_NE(adam, nullptr);
  Slot slot(*adam, {1.0f, 1.0f, 1.0f, 1.0f});
  slot.Step({0.5f, -3.0f, 1e-3f, -100.0f});
  // mhat = g and vhat = g^2, so the step is lr * g / (|g| + eps).
  EXPECT_NEAR(slot.value[0], 1.0 - 0.01, kTol);
  EXPECT_NEAR(slot.value[1], 1.0 + 0.01, kTol);
  EXPECT_NEAR(slot.value[2], 1.0 - 0.01, kTol);
  EXPECT_NEAR(slot.value[3], 1.0 + 0.01, kTol);
}

TEST(AdamTest, ThreeStepsMatchHandComputed) {
  OptimizerConfig config = Config(OptimizerKind::kAdam, 0.1f);
  config.beta1 = 0.9f;
  config.beta2 = 0.999f;
  config.epsilon = 1e-8f;
  auto adam = Make(config);
  ASSERT_NE(adam, nullptr);
  Slot slot(*adam, {1.0f, -0.5f});
  const double b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, lr = 0.1f;
  const double grads[3][2] = {{1.0, 0.25}, {-2.0, 0.25}, {0.5, -1.0}};
  double w[2] = {1.0, -0.5}, m[2] = {0, 0}, v[2] = {0, 0};
  for (int t = 1; t <= 3; ++t) {
    slot.Step({static_cast<float>(grads[t - 1][0]), static_cast<float>(grads[t - 1][1])});
    for (int i = 0; i < 2; ++i) {
      const double g = grads[t - 1][i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double mhat = m[i] / (1 - std::pow(b1, t));
      const double vhat = v[i] / (1 - std::pow(b2, t));
      w[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      EXPECT_NEAR(slot.value[i], w[i], kTol) << "t=" << t << " i=" << i;
      // State layout: m in [0, n), v in [n, 2n).
      EXPECT_NEAR(slot.state[i], m[i], kTol) << "t=" << t << " i=" << i;
      EXPECT_NEAR(slot.state[2 + i], v[i], kTol) << "t=" << t << " i=" << i;
    }
  }
}

TEST(AdamTest, StateSizeIsTwoN) {
  auto adam = Make(Config(OptimizerKind::kAdam, 0.1f));
  ASSERT_NE(adam, nullptr);
  EXPECT_EQ(adam->StateSize(0), 0u);
  EXPECT_EQ(adam->StateSize(5), 10u);
}

TEST(AdagradTest, TwoStepsMatchHandComputed) {
  OptimizerConfig config = Config(OptimizerKind::kAdagrad, 0.1f);
  config.epsilon = 1e-8f;
  auto adagrad = Make(config);
  ASSERT_NE(adagrad, nullptr);
  Slot slot(*adagrad, {1.0f});
  slot.Step({3.0f});
  EXPECT_NEAR(slot.state[0], 9.0, kTol);
  EXPECT_NEAR(slot.value[0], 1.0 - 0.1 * 3.0 / (3.0 + 1e-8), kTol);  // 0.9
  slot.Step({4.0f});
  EXPECT_NEAR(slot.state[0], 25.0, kTol);
  EXPECT_NEAR(slot.value[0], 0.9 - 0.1 * 4.0 / (5.0 + 1e-8), kTol);  // 0.82
}

TEST(AdagradTest, StateSizeIsN) {
  auto adagrad = Make(Config(OptimizerKind::kAdagrad, 0.1f));
  ASSERT_NE(adagrad, nullptr);
  EXPECT_EQ(adagrad->StateSize(0), 0u);
  EXPECT_EQ(adagrad->StateSize(9), 9u);
}

const OptimizerKind kAllKinds[] = {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdam,
                                   OptimizerKind::kAdagrad};

TEST(OptimizerTest, WeightDecayEqualsGradientPlusDecayTimesWeight) {
  for (OptimizerKind kind : kAllKinds) {
    OptimizerConfig config = Config(kind, 0.1f);
    config.weight_decay = 0.05f;
    auto decayed = Make(config);
    config.weight_decay = 0.0f;
    auto plain = Make(config);
    ASSERT_NE(decayed, nullptr);
    ASSERT_NE(plain, nullptr);
    const std::vector<float> w = {2.0f, -1.5f, 0.25f};
    const std::vector<float> g = {0.5f, 1.0f, -2.0f};
    std::vector<float> g_plus_decay(w.size());
    for (size_t i = 0; i < w.size(); ++i) g_plus_decay[i] = g[i] + 0.05f * w[i];
    Slot a(*decayed, w);
    a.Step(g);
    Slot b(*plain, w);
    b.Step(g_plus_decay);
    EXPECT_EQ(a.value, b.value) << OptimizerName(kind);
    EXPECT_NE(a.value, w) << OptimizerName(kind);
  }
}

TEST(OptimizerTest, CreateBuildsRequestedKind) {
  const uint64_t expected_state[] = {0, 4, 8, 4};
  for (int k = 0; k < 4; ++k) {
    auto optimizer = Make(Config(kAllKinds[k], 0.1f));
    ASSERT_NE(optimizer, nullptr);
    EXPECT_EQ(optimizer->StateSize(4), expected_state[k]) << OptimizerName(kAllKinds[k]);
  }
}

TEST(OptimizerTest, CreateRejectsNonPositiveLearningRate) {
  for (float lr : {0.0f, -0.1f}) {
    auto optimizer = Optimizer::Create(Config(OptimizerKind::kSgd, lr));
    EXPECT_EQ(optimizer.status().code(), absl::StatusCode::kInvalidArgument) << lr;
  }
}

TEST(OptimizerTest, CreateRejectsMomentumOfOneOrMore) {
  for (float momentum : {1.0f, 1.5f}) {
    OptimizerConfig config = Config(OptimizerKind::kMomentum, 0.1f);
    config.momentum = momentum;
    auto optimizer = Optimizer::Create(config);
    EXPECT_EQ(optimizer.status().code(), absl::StatusCode::kInvalidArgument) << momentum;
  }
}

TEST(OptimizerTest, CreateRejectsNonPositiveEpsilon) {
  for (OptimizerKind kind : {OptimizerKind::kAdam, OptimizerKind::kAdagrad}) {
    for (float epsilon : {0.0f, -1e-8f}) {
      OptimizerConfig config = Config(kind, 0.1f);
      config.epsilon = epsilon;
      auto optimizer = Optimizer::Create(config);
      EXPECT_EQ(optimizer.status().code(), absl::StatusCode::kInvalidArgument) << OptimizerName(kind) << " " << epsilon;
    }
  }
}

// The update rules again, one element at a time in double.
void ReferenceUpdate(const OptimizerConfig& c, std::vector<double>& w, std::vector<double>& state,
                     const std::vector<float>& grad, double scale, uint64_t step) {
  const size_t n = w.size();
  const double t = static_cast<double>(step) + 1.0;
  for (size_t i = 0; i < n; ++i) {
    const double g = scale * grad[i] + double{c.weight_decay} * w[i];
    switch (c.kind) {
      case OptimizerKind::kSgd: w[i] -= c.learning_rate * g; break;
      case OptimizerKind::kMomentum:
        state[i] = c.momentum * state[i] + g;
        w[i] -= c.learning_rate * (c.nesterov ? g + c.momentum * state[i] : state[i]);
        break;
      case OptimizerKind::kAdam: {
        double& m = state[i];
        double& v = state[n + i];
        m = c.beta1 * m + (1.0 - c.beta1) * g;
        v = c.beta2 * v + (1.0 - c.beta2) * g * g;
        const double mhat = m / (1.0 - std::pow(double{c.beta1}, t));
        const double vhat = v / (1.0 - std::pow(double{c.beta2}, t));
        w[i] -= c.learning_rate * mhat / (std::sqrt(vhat) + c.epsilon);
        break;
      }
      case OptimizerKind::kAdagrad:
        state[i] += g * g;
        w[i] -= c.learning_rate * g / (std::sqrt(state[i]) + c.epsilon);
        break;
      case OptimizerKind::kFtrl: ADD_FAILURE() << "no dense reference for FTRL (it updates table rows only)"; return;
    }
  }
}

void ExpectMatchesReferenceOnLongOddSpan(const OptimizerConfig& config) {
  SCOPED_TRACE(std::string(OptimizerName(config.kind)) + (config.nesterov ? " nesterov" : ""));
  auto optimizer = Make(config);
  ASSERT_NE(optimizer, nullptr);
  constexpr size_t kN = 1003;
  // One float of padding in front so the spans start off vector alignment.
  std::vector<float> value(kN + 1), state(optimizer->StateSize(kN) + 1);
  std::vector<double> ref_value(kN), ref_state(optimizer->StateSize(kN), 0.0);
  for (size_t i = 0; i < kN; ++i) value[i + 1] = ref_value[i] = std::cos(0.11 * i);
  const float kScale = 0.5f;
  for (uint64_t step = 0; step < 3; ++step) {
    std::vector<float> grad(kN + 1);
    for (size_t i = 0; i < kN; ++i) grad[i + 1] = std::sin(0.37 * i + step);
    optimizer->Update(absl::MakeSpan(value).subspan(1), absl::MakeSpan(state).subspan(1),
                      absl::MakeConstSpan(grad).subspan(1), kScale, step);
    ReferenceUpdate(config, ref_value, ref_state, std::vector<float>(grad.begin() + 1, grad.end()), kScale, step);
  }
  EXPECT_EQ(value[0], 0.0f);
  for (size_t i = 0; i < kN; ++i) {
    const double tol = 1e-5 * (1 + std::abs(ref_value[i]));
    ASSERT_NEAR(value[i + 1], ref_value[i], tol) << "value i=" << i;
  }
  for (size_t i = 0; i < ref_state.size(); ++i) {
    const double tol = 1e-5 * (1 + std::abs(ref_state[i]));
    ASSERT_NEAR(state[i + 1], ref_state[i], tol) << "state i=" << i;
  }
}

TEST(OptimizerTest, LongOddSpanMatchesScalarReference) {
  for (OptimizerKind kind : kAllKinds) {
    OptimizerConfig config = Config(kind, 0.05f);
    config.weight_decay = 0.01f;
    ExpectMatchesReferenceOnLongOddSpan(config);
    if (kind == OptimizerKind::kMomentum) {
      config.nesterov = true;
      ExpectMatchesReferenceOnLongOddSpan(config);
    }
  }
}

}  // namespace
}  // namespace ps
