// ASP: every push is applied on arrival; a pull returns the current value.
#include "server/store/consistency_policy.h"

namespace ps::internal {
namespace {

class AsyncPolicy final : public ConsistencyPolicy {
 public:
  bool Apply(SliceState& s, int, const Gradient& grad, const Optimizer& optimizer,
             absl::Span<const uint8_t>) const override {
    ApplyGradient(s, grad, optimizer);
    ++s.version;
    return true;
  }
  bool PullReady(const SliceState&, int64_t, absl::Span<const uint8_t>) const override { return true; }
  std::string DescribeWait(const SliceState&, int64_t, absl::Span<const uint8_t>,
                           absl::FunctionRef<std::string()>) const override {
    return "";
  }
};

}  // namespace

std::unique_ptr<ConsistencyPolicy> NewAsyncPolicy() { return std::make_unique<AsyncPolicy>(); }

}  // namespace ps::internal
