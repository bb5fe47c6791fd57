#ifndef PS_SERVER_OPTIM_OPTIMIZERS_INTERNAL_H_
#define PS_SERVER_OPTIM_OPTIMIZERS_INTERNAL_H_

// The update rules behind Optimizer::Create(). Internal to server/: other
// modules use only optimizer.h. Each class is defined in its own .cc file,
// which server/CMakeLists.txt compiles with -O3 so that its loop vectorises.
//
// Every rule uses the gradient g = grad_scale * grad[i] + weight_decay * w[i].
// Each class is immutable after construction and thread-safe; the
// constructors require a config that passed OptimizerConfig::Validate().

#include <cstdint>

#include "absl/types/span.h"
#include "common/model/model_spec.h"
#include "server/optim/optimizer.h"

namespace ps::internal {

// w -= lr * g. No state.
class SgdOptimizer final : public Optimizer {
 public:
  explicit SgdOptimizer(const OptimizerConfig& config);
  uint64_t StateSize(uint64_t n) const override;
  void Update(absl::Span<float> value, absl::Span<float> state, absl::Span<const float> grad, float grad_scale,
              uint64_t step) const override;

 private:
  const OptimizerConfig config_;
};

// v = momentum * v + g; then w -= lr * v, or with nesterov
// w -= lr * (g + momentum * v). State: v, n floats.
class MomentumOptimizer final : public Optimizer {
 public:
  explicit MomentumOptimizer(const OptimizerConfig& config);
  uint64_t StateSize(uint64_t n) const override;
  void Update(absl::Span<float> value, absl::Span<float> state, absl::Span<const float> grad, float grad_scale,
              uint64_t step) const override;

 private:
  const OptimizerConfig config_;
};

// m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g^2; with t = step + 1,
// w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + epsilon).
// State: 2n floats, m in state[0, n) then v in state[n, 2n).
class AdamOptimizer final : public Optimizer {
 public:
  explicit AdamOptimizer(const OptimizerConfig& config);
  uint64_t StateSize(uint64_t n) const override;
  void Update(absl::Span<float> value, absl::Span<float> state, absl::Span<const float> grad, float grad_scale,
              uint64_t step) const override;

 private:
  const OptimizerConfig config_;
};

// h += g^2; w -= lr * g / (sqrt(h) + epsilon). State: h, n floats.
class AdagradOptimizer final : public Optimizer {
 public:
  explicit AdagradOptimizer(const OptimizerConfig& config);
  uint64_t StateSize(uint64_t n) const override;
  void Update(absl::Span<float> value, absl::Span<float> state, absl::Span<const float> grad, float grad_scale,
              uint64_t step) const override;

 private:
  const OptimizerConfig config_;
};

// FTRL-proximal (McMahan et al., "Ad Click Prediction", 2013), per
// coordinate, with alpha = learning rate: sigma = (sqrt(n + g^2) - sqrt(n)) /
// alpha; z += g - sigma * w; n += g^2; w = 0 when |z| <= l1, else
// -(z - sign(z) l1) / ((ftrl_beta + sqrt(n)) / alpha + l2). The weight is a
// function of (z, n): l1 makes it exactly 0 for rarely useful coordinates.
// State: 2n floats, z in state[0, n) then n in state[n, 2n).
class FtrlOptimizer final : public Optimizer {
 public:
  explicit FtrlOptimizer(const OptimizerConfig& config);
  uint64_t StateSize(uint64_t n) const override;
  void Update(absl::Span<float> value, absl::Span<float> state, absl::Span<const float> grad, float grad_scale,
              uint64_t step) const override;

 private:
  const OptimizerConfig config_;
};

}  // namespace ps::internal

#endif  // PS_SERVER_OPTIM_OPTIMIZERS_INTERNAL_H_
