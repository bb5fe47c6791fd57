#include <cstddef>

#include "common/base/cpu_clones.h"
#include "glog/logging.h"
#include "server/optim/optimizers_internal.h"

namespace ps::internal {
namespace {

// Raw __restrict pointers and no branch in the body, so that GCC vectorises
// the loop without runtime alias checks (scripts/check_vectorized.sh).
PS_CPU_CLONES void SgdLoop(float* __restrict w, const float* __restrict grad, size_t n, float lr, float scale,
                           float decay) {
  for (size_t i = 0; i < n; ++i) {
    const float g = scale * grad[i] + decay * w[i];
    w[i] -= lr * g;
  }
}

}  // namespace

SgdOptimizer::SgdOptimizer(const OptimizerConfig& config) : config_(config) {}

uint64_t SgdOptimizer::StateSize(uint64_t n) const { return 0; }

void SgdOptimizer::Update(absl::Span<float> value, absl::Span<float> state, absl::Span<const float> grad,
                          float grad_scale, uint64_t step) const {
  DCHECK_EQ(value.size(), grad.size());
  DCHECK_EQ(state.size(), StateSize(value.size()));
  SgdLoop(value.data(), grad.data(), value.size(), config_.LearningRateAt(step), grad_scale, config_.weight_decay);
}

}  // namespace ps::internal
