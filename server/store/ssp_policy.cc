// SSP:K: pushes are applied on arrival; a pull at clock c waits until every
// active worker has pushed clock c-K-1 to the slice.
#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/store/consistency_policy.h"

namespace ps::internal {
namespace {

class SspPolicy final : public ConsistencyPolicy {
 public:
  explicit SspPolicy(int32_t staleness) : staleness_(staleness) {}

  bool Apply(SliceState& s, int, const Gradient& grad, const Optimizer& optimizer,
             absl::Span<const uint8_t>) const override {
    ApplyGradient(s, grad, optimizer);
    ++s.version;
    return true;
  }
  bool PullReady(const SliceState& s, int64_t clock, absl::Span<const uint8_t> active) const override {
    return MinWorkerClock(s, active) >= clock - staleness_;
  }
  std::string DescribeWait(const SliceState& s, int64_t clock, absl::Span<const uint8_t> active,
                           absl::FunctionRef<std::string()> name) const override {
    if (PullReady(s, clock, active)) return "";
    std::vector<int> behind;
    for (size_t w = 0; w < active.size(); ++w) {
      if (active[w] && s.worker_clock[w] < clock - staleness_) behind.push_back(static_cast<int>(w));
    }
    return absl::StrCat(name(), ": pull at clock ", clock, " with staleness ", staleness_,
                        " needs every worker at clock ", clock - staleness_, "; workers behind: [",
                        absl::StrJoin(behind, ","), "]");
  }
  // Raised to the slowest other worker's clock, it holds no one back.
  void Rejoin(SliceState& s, int worker, absl::Span<const uint8_t> active) const override {
    const int64_t slowest = MinWorkerClock(s, active);  // active[worker] is still 0
    if (slowest != std::numeric_limits<int64_t>::max()) {
      s.worker_clock[worker] = std::max(s.worker_clock[worker], slowest);
    }
  }
  bool LeavingFreesPulls() const override { return true; }

 private:
  const int32_t staleness_;
};

}  // namespace

std::unique_ptr<ConsistencyPolicy> NewSspPolicy(int32_t staleness) { return std::make_unique<SspPolicy>(staleness); }

}  // namespace ps::internal
