#ifndef PS_SERVER_OPTIM_OPTIMIZER_H_
#define PS_SERVER_OPTIM_OPTIMIZER_H_

// An update rule applied by a server to one slice of parameters.
//
// Each rule keeps its state beside the slice, as StateSize(n) floats the
// caller allocates (zero-filled) and passes back on every call. Update() is a
// plain loop over contiguous floats that the compiler vectorises; it touches
// only the spans it is given, so different slices may be updated from
// different threads at once. An Optimizer object itself is immutable after
// Create() and thread-safe.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/model_spec.h"

namespace ps {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Floats of state kept for a slice of n elements (0 for plain SGD).
  virtual uint64_t StateSize(uint64_t n) const = 0;

  // Applies one update with gradient `grad_scale * grad` to `value`.
  // `step` is the number of updates this slice has had before this one (0 for
  // the first), which Adam uses for bias correction.
  // Requires value.size() == grad.size() and state.size() == StateSize(n).
  virtual void Update(absl::Span<float> value, absl::Span<float> state, absl::Span<const float> grad, float grad_scale,
                      uint64_t step) const = 0;

  // kInvalidArgument when config.Validate() fails.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const OptimizerConfig& config);
};

}  // namespace ps

#endif  // PS_SERVER_OPTIM_OPTIMIZER_H_
