#include <cmath>
#include <cstddef>

#include "common/base/cpu_clones.h"
#include "glog/logging.h"
#include "server/optim/optimizers_internal.h"

namespace ps::internal {
namespace {

// Branch-free over __restrict pointers; std::sqrt vectorises because the file
// is compiled with -fno-math-errno.
PS_CPU_CLONES void AdagradLoop(float* __restrict w, float* __restrict h, const float* __restrict grad, size_t n,
                               float lr, float eps, float scale, float decay) {
  for (size_t i = 0; i < n; ++i) {
    const float g = scale * grad[i] + decay * w[i];
    const float hi = h[i] + g * g;
    h[i] = hi;
    w[i] -= lr * g / (std::sqrt(hi) + eps);
  }
}

}  // namespace

AdagradOptimizer::AdagradOptimizer(const OptimizerConfig& config) : config_(config) {}

uint64_t AdagradOptimizer::StateSize(uint64_t n) const { return n; }

void AdagradOptimizer::Update(absl::Span<float> value, absl::Span<float> state, absl::Span<const float> grad,
                              float grad_scale, uint64_t step) const {
  DCHECK_EQ(value.size(), grad.size());
  DCHECK_EQ(state.size(), StateSize(value.size()));
  AdagradLoop(value.data(), state.data(), grad.data(), value.size(), config_.LearningRateAt(step), config_.epsilon,
              grad_scale, config_.weight_decay);
}

}  // namespace ps::internal
