#include <cstddef>

#include "common/base/cpu_clones.h"
#include "glog/logging.h"
#include "server/optim/optimizers_internal.h"

namespace ps::internal {
namespace {

// kNesterov is a template argument so that each instantiation is a
// branch-free loop GCC can vectorise.
template <bool kNesterov>
PS_CPU_CLONES void MomentumLoop(float* __restrict w, float* __restrict velocity, const float* __restrict grad, size_t n,
                                float lr, float mu, float scale, float decay) {
  for (size_t i = 0; i < n; ++i) {
    const float g = scale * grad[i] + decay * w[i];
    const float v = mu * velocity[i] + g;
    velocity[i] = v;
    w[i] -= lr * (kNesterov ? g + mu * v : v);
  }
}

}  // namespace

MomentumOptimizer::MomentumOptimizer(const OptimizerConfig& config) : config_(config) {}

uint64_t MomentumOptimizer::StateSize(uint64_t n) const { return n; }

void MomentumOptimizer::Update(absl::Span<float> value, absl::Span<float> state, absl::Span<const float> grad,
                               float grad_scale, uint64_t step) const {
  DCHECK_EQ(value.size(), grad.size());
  DCHECK_EQ(state.size(), StateSize(value.size()));
  const auto loop = config_.nesterov ? &MomentumLoop<true> : &MomentumLoop<false>;
  loop(value.data(), state.data(), grad.data(), value.size(), config_.LearningRateAt(step), config_.momentum,
       grad_scale, config_.weight_decay);
}

}  // namespace ps::internal
