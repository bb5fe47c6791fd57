#include "server/store/slice_state.h"

#include <cstring>

#include "common/base/cpu_clones.h"

namespace ps {
namespace {

PS_CPU_CLONES void AddInto(float* __restrict sum, const float* __restrict grad, size_t n) {
  for (size_t i = 0; i < n; ++i) sum[i] += grad[i];
}

}  // namespace

void AddToStepSum(SliceState& s, const Gradient& g) {
  if (s.table != nullptr) {
    s.table->Accumulate(g.ids, g.values);
  } else if (s.arrived == 0) {
    s.sum.resize(s.values.size());
    std::memcpy(s.sum.data(), g.values.data(), g.values.size() * sizeof(float));
  } else {
    AddInto(s.sum.data(), g.values.data(), g.values.size());
  }
}

void ApplyStepSum(SliceState& s, const Optimizer& optimizer, float grad_scale) {
  if (s.table != nullptr) {
    s.table->ApplyPending(grad_scale);
  } else {
    optimizer.Update(absl::MakeSpan(s.values), absl::MakeSpan(s.optimizer_state), s.sum, grad_scale, s.optimizer_steps);
  }
  ++s.optimizer_steps;
}

void ApplyGradient(SliceState& s, const Gradient& g, const Optimizer& optimizer) {
  if (s.table != nullptr) {
    s.table->Apply(g.ids, g.values, 1.0f);
  } else {
    optimizer.Update(absl::MakeSpan(s.values), absl::MakeSpan(s.optimizer_state), g.values, 1.0f, s.optimizer_steps);
  }
  ++s.optimizer_steps;
}

}  // namespace ps
