// BSP: a slice sums the pushes of step t of every worker counted at that
// step, applies the optimizer once with their mean, and answers pulls for
// step t+1 only after that.
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/store/consistency_policy.h"

namespace ps::internal {
namespace {

class SyncPolicy final : public ConsistencyPolicy {
 public:
  absl::Status CheckPush(const SliceState& s, int worker, int64_t clock,
                         absl::FunctionRef<std::string()> name) const override {
    const auto version = static_cast<int64_t>(s.version);
    if (clock < static_cast<int64_t>(s.join_step[worker])) {
      return absl::FailedPreconditionError(absl::StrCat("push for step ", clock, " to ", name(), ": worker ", worker,
                                                        " re-joined the job and is counted from step ",
                                                        s.join_step[worker]));
    }
    if (clock < version) {
      return absl::FailedPreconditionError(absl::StrCat("push for step ", clock, " to ", name(),
                                                        ": step already applied (slice is at step ", version, ")"));
    }
    if (clock > version) {
      return absl::FailedPreconditionError(absl::StrCat("push for step ", clock, " to ", name(),
                                                        ": slice is still at step ", version, "; pull step ", clock,
                                                        " first"));
    }
    if (s.pushed[worker]) {
      return absl::AlreadyExistsError(absl::StrCat("worker ", worker, " already pushed step ", clock, " to ", name()));
    }
    return absl::OkStatus();
  }

  bool Apply(SliceState& s, int worker, const Gradient& grad, const Optimizer& optimizer,
             absl::Span<const uint8_t> active) const override {
    s.pushed[worker] = 1;
    if (s.arrived == 0 && s.table == nullptr && StepComplete(s, active)) {
      // The only push the step waits for (one worker holds the slice): its
      // mean is itself, applied as it is, without a copy into the sum.
      ApplyGradient(s, grad, optimizer);
      NextStep(s);
      return true;
    }
    AddToStepSum(s, grad);
    ++s.arrived;
    return StepComplete(s, active) && CompleteStep(s, optimizer);
  }
  bool MeasuresStaleness() const override { return false; }
  bool CompleteForwardedStep(SliceState& s, const Optimizer& optimizer) const override {
    return CompleteStep(s, optimizer);
  }
  bool HasSteps() const override { return true; }
  bool Accumulate(SliceState& s, int worker, const Gradient& grad, absl::Span<const uint8_t> active) const override {
    s.pushed[worker] = 1;
    AddToStepSum(s, grad);
    ++s.arrived;
    return StepComplete(s, active);
  }

  bool PullReady(const SliceState& s, int64_t clock, absl::Span<const uint8_t>) const override {
    return static_cast<int64_t>(s.version) >= clock;
  }
  std::string DescribeWait(const SliceState& s, int64_t clock, absl::Span<const uint8_t> active,
                           absl::FunctionRef<std::string()> name) const override {
    if (PullReady(s, clock, active)) return "";
    std::vector<int> behind;
    for (size_t w = 0; w < active.size(); ++w) {
      if (Counted(s, active, w) && !s.pushed[w]) behind.push_back(static_cast<int>(w));
    }
    const bool none = std::find(active.begin(), active.end(), 1) == active.end();
    return absl::StrCat(name(), " is at step ", s.version, ", pull wants step ", clock, "; step ", s.version,
                        " still needs pushes from workers [", absl::StrJoin(behind, ","), "]",
                        none ? " (no worker is active)" : "");
  }
  bool PushAhead(const SliceState& s, int64_t clock) const override { return static_cast<int64_t>(s.version) < clock; }

  // A push it made before leaving is still in the step's sum: count it at
  // this step, which then needs nothing more from it.
  void Rejoin(SliceState& s, int worker, absl::Span<const uint8_t>) const override {
    s.join_step[worker] = s.pushed[worker] ? s.version : s.version + 1;
    s.worker_clock[worker] = std::max(s.worker_clock[worker], static_cast<int64_t>(s.join_step[worker]));
  }
  // Steps that waited only for a worker that left, or only for workers gone
  // before (a joiner: an empty step nobody is counted at), complete now.
  bool Settle(SliceState& s, const Optimizer& optimizer, absl::Span<const uint8_t> active, bool* ran) const override {
    if (!StepComplete(s, active)) return false;
    *ran = CompleteStep(s, optimizer);
    return true;
  }
  bool HasDueStep(const SliceState& s, absl::Span<const uint8_t> active) const override {
    return StepComplete(s, active);
  }

 private:
  // Whether worker w is waited for at the slice's current step.
  static bool Counted(const SliceState& s, absl::Span<const uint8_t> active, size_t w) {
    return active[w] && s.join_step[w] <= s.version;
  }
  // Whether the current step has every push it waits for (and some worker
  // is active at all).
  static bool StepComplete(const SliceState& s, absl::Span<const uint8_t> active) {
    bool any_active = false;
    for (size_t w = 0; w < active.size(); ++w) {
      any_active |= active[w] != 0;
      if (Counted(s, active, w) && !s.pushed[w]) return false;
    }
    return any_active;
  }
  // Applies the current step (the mean of the pushes that arrived, or an
  // empty step) and starts the next; true when the optimizer ran. With every
  // worker present, arrived == num_workers: the same mean, to the bit, as
  // before workers could leave.
  static bool CompleteStep(SliceState& s, const Optimizer& optimizer) {
    const bool ran = s.arrived > 0;
    if (ran) ApplyStepSum(s, optimizer, 1.0f / static_cast<float>(s.arrived));
    NextStep(s);
    return ran;
  }
  static void NextStep(SliceState& s) {
    ++s.version;
    s.arrived = 0;
    std::fill(s.pushed.begin(), s.pushed.end(), 0);
  }
};

}  // namespace

std::unique_ptr<ConsistencyPolicy> NewSyncPolicy() { return std::make_unique<SyncPolicy>(); }

}  // namespace ps::internal
