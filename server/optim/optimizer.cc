#include "server/optim/optimizer.h"

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/optim/optimizers_internal.h"

namespace ps {

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerConfig& config) {
  if (absl::Status status = config.Validate(); !status.ok()) return status;
  switch (config.kind) {
    case OptimizerKind::kSgd: return std::make_unique<internal::SgdOptimizer>(config);
    case OptimizerKind::kMomentum: return std::make_unique<internal::MomentumOptimizer>(config);
    case OptimizerKind::kAdam: return std::make_unique<internal::AdamOptimizer>(config);
    case OptimizerKind::kAdagrad: return std::make_unique<internal::AdagradOptimizer>(config);
    case OptimizerKind::kFtrl: return std::make_unique<internal::FtrlOptimizer>(config);
  }
  // A kind cast from an out-of-range integer, should Validate() not catch it.
  return absl::InvalidArgumentError(absl::StrCat("unknown optimizer kind ", static_cast<int>(config.kind)));
}

}  // namespace ps
