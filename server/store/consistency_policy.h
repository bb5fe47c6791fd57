#ifndef PS_SERVER_STORE_CONSISTENCY_POLICY_H_
#define PS_SERVER_STORE_CONSISTENCY_POLICY_H_

// What a consistency mode decides, slice by slice: whether a push may be
// applied, how it is applied, when a pull may see a slice, and what a worker
// leaving or joining changes. SliceStore keeps the state and calls one
// policy, chosen once per model; one implementation per mode and file:
// sync_policy.cc (BSP), async_policy.cc (ASP), ssp_policy.cc (bounded
// staleness). Internal to server/.
//
// `active[w]` is 1 for the workers the job waits for (see
// SliceStore::SetWorkerActive). Policies are immutable after construction
// and thread-safe; they change only the SliceState they are given, so the
// store may call them for different slices at once.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/model/model_spec.h"
#include "server/optim/optimizer.h"
#include "server/store/slice_state.h"

namespace ps {

class ConsistencyPolicy {
 public:
  // The policy of `consistency.mode` (ssp takes its staleness bound).
  static std::unique_ptr<ConsistencyPolicy> Create(const Consistency& consistency);
  virtual ~ConsistencyPolicy() = default;

  // Whether `worker` may push step `clock` to `s` now: OK, or the error to
  // answer (kFailedPrecondition, kAlreadyExists), naming the slice as
  // name() does (called only for an error).
  virtual absl::Status CheckPush(const SliceState& s, int worker, int64_t clock,
                                 absl::FunctionRef<std::string()> name) const;
  // Applies the gradient of `worker` to `s`; true when the optimizer ran.
  virtual bool Apply(SliceState& s, int worker, const Gradient& grad, const Optimizer& optimizer,
                     absl::Span<const uint8_t> active) const = 0;
  // Whether applied pushes are counted by staleness (each is an update of
  // its own; not so in sync, where a step is one update).
  virtual bool MeasuresStaleness() const { return true; }

  // Whether a pull at `clock` may see `s`.
  virtual bool PullReady(const SliceState& s, int64_t clock, absl::Span<const uint8_t> active) const = 0;
  // What a pull at `clock` waits for on `s`, for a deadline error; empty
  // when it does not wait on `s`.
  virtual std::string DescribeWait(const SliceState& s, int64_t clock, absl::Span<const uint8_t> active,
                                   absl::FunctionRef<std::string()> name) const = 0;
  // Whether a push of step `clock` is ahead of `s` (a re-sent sync push
  // waits for the step instead of being refused).
  virtual bool PushAhead(const SliceState& s, int64_t clock) const { return false; }

  // `worker` joins again (active[worker] is still 0): where it is counted
  // from on `s`.
  virtual void Rejoin(SliceState& s, int worker, absl::Span<const uint8_t> active) const {}
  // After a worker left or joined: completes on `s` what waited only for
  // workers no longer waited for. Returns true when a parked pull may now
  // be ready; sets *ran when the optimizer ran.
  virtual bool Settle(SliceState& s, const Optimizer& optimizer, absl::Span<const uint8_t> active, bool* ran) const {
    return false;
  }
  // Whether `s` holds a step that has every push it waits for but was not
  // applied: never between calls (a restored checkpoint showing one is
  // corrupt).
  virtual bool HasDueStep(const SliceState& s, absl::Span<const uint8_t> active) const { return false; }
  // Whether a worker leaving may let parked pulls go (ssp stops waiting
  // for its clock).
  virtual bool LeavingFreesPulls() const { return false; }
  // Sync: completes `s`'s current step with the sum and count that s.sum
  // and s.arrived hold, set from the step as its primary completed it
  // (SliceStore::ApplyStep); true when the optimizer ran. Modes without
  // steps never get one (the store refuses it before).
  virtual bool CompleteForwardedStep(SliceState& s, const Optimizer& optimizer) const { return false; }
  // Whether this mode has steps (sync): the ones a primary forwards as sums.
  virtual bool HasSteps() const { return false; }
  // Sync: adds the push of `worker` to `s`'s step like Apply, but leaves the
  // optimizer to CompleteForwardedStep (a primary sends the step's sum to
  // its backups first); true when the step now has every push it waits for.
  virtual bool Accumulate(SliceState& s, int worker, const Gradient& grad, absl::Span<const uint8_t> active) const {
    return false;
  }
};

namespace internal {
std::unique_ptr<ConsistencyPolicy> NewSyncPolicy();
std::unique_ptr<ConsistencyPolicy> NewAsyncPolicy();
std::unique_ptr<ConsistencyPolicy> NewSspPolicy(int32_t staleness);
}  // namespace internal

}  // namespace ps

#endif  // PS_SERVER_STORE_CONSISTENCY_POLICY_H_
