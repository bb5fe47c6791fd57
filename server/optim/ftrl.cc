#include <cmath>
#include <cstddef>

#include "common/base/cpu_clones.h"
#include "glog/logging.h"
#include "server/optim/optimizers_internal.h"

namespace ps::internal {
namespace {

// Per coordinate, branch-free (the l1 test is a select) so that it
// vectorises; std::sqrt does because the file is built with -fno-math-errno.
PS_CPU_CLONES void FtrlLoop(float* __restrict w, float* __restrict z, float* __restrict n_acc,
                            const float* __restrict grad, size_t n, float alpha, float beta, float l1, float l2,
                            float scale, float decay) {
  const float inv_alpha = 1.0f / alpha;
  for (size_t i = 0; i < n; ++i) {
    const float g = scale * grad[i] + decay * w[i];
    const float n_old = n_acc[i];
    const float n_new = n_old + g * g;
    const float sqrt_new = std::sqrt(n_new);
    const float sigma = (sqrt_new - std::sqrt(n_old)) * inv_alpha;
    const float zi = z[i] + g - sigma * w[i];
    z[i] = zi;
    n_acc[i] = n_new;
    const float shrunk = zi - std::copysign(l1, zi);
    const float wi = -shrunk / ((beta + sqrt_new) * inv_alpha + l2);
    w[i] = std::fabs(zi) <= l1 ? 0.0f : wi;
  }
}

}  // namespace

FtrlOptimizer::FtrlOptimizer(const OptimizerConfig& config) : config_(config) {}

uint64_t FtrlOptimizer::StateSize(uint64_t n) const { return 2 * n; }

void FtrlOptimizer::Update(absl::Span<float> value, absl::Span<float> state, absl::Span<const float> grad,
                           float grad_scale, uint64_t step) const {
  DCHECK_EQ(value.size(), grad.size());
  DCHECK_EQ(state.size(), StateSize(value.size()));
  const size_t n = value.size();
  FtrlLoop(value.data(), state.data(), state.data() + n, grad.data(), n, config_.LearningRateAt(step),
           config_.ftrl_beta, config_.l1, config_.l2, grad_scale, config_.weight_decay);
}

}  // namespace ps::internal
