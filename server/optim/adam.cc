#include <cmath>
#include <cstddef>

#include "common/base/cpu_clones.h"
#include "glog/logging.h"
#include "server/optim/optimizers_internal.h"

namespace ps::internal {
namespace {

// c1 = 1 / (1 - b1^t) and c2 = 1 / (1 - b2^t), hoisted out of the loop so its
// body is multiplies, one sqrt and one divide: all vectorisable at -O3 with
// -fno-math-errno.
PS_CPU_CLONES void AdamLoop(float* __restrict w, float* __restrict m, float* __restrict v, const float* __restrict grad,
                            size_t n, float lr, float b1, float b2, float eps, float c1, float c2, float scale,
                            float decay) {
  for (size_t i = 0; i < n; ++i) {
    const float g = scale * grad[i] + decay * w[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    w[i] -= lr * (mi * c1) / (std::sqrt(vi * c2) + eps);
  }
}

}  // namespace

AdamOptimizer::AdamOptimizer(const OptimizerConfig& config) : config_(config) {}

uint64_t AdamOptimizer::StateSize(uint64_t n) const { return 2 * n; }

void AdamOptimizer::Update(absl::Span<float> value, absl::Span<float> state, absl::Span<const float> grad,
                           float grad_scale, uint64_t step) const {
  const size_t n = value.size();
  DCHECK_EQ(n, grad.size());
  DCHECK_EQ(state.size(), StateSize(n));
  // In double: for b2 = 0.999, 1 - b2^t loses most of its digits in float.
  // Validate() keeps the betas below 1, so neither denominator is 0.
  const double t = static_cast<double>(step) + 1.0;
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(double{config_.beta1}, t)));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(double{config_.beta2}, t)));
  AdamLoop(value.data(), state.data(), state.data() + n, grad.data(), n, config_.LearningRateAt(step), config_.beta1,
           config_.beta2, config_.epsilon, c1, c2, grad_scale, config_.weight_decay);
}

}  // namespace ps::internal
