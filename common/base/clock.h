#ifndef PS_COMMON_BASE_CLOCK_H_
#define PS_COMMON_BASE_CLOCK_H_

// The time every role reads for its deadlines, heartbeats and failure
// detection, behind an interface so that tests can drive that logic with a
// FakeClock instead of sleeping.
//
//   const Clock* clock = options.clock ? options.clock : RealClock();
//   if (clock->Now() > deadline) ...
//
// RealClock() is absl::Now(). FakeClock stands still until the test moves
// it. Both are thread-safe.

#include <atomic>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ps {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// The wall clock; a process-wide instance that is never destroyed.
const Clock* RealClock();

// `clock` when not null, else RealClock(): options carry a null clock by default.
inline const Clock* ClockOr(const Clock* clock) { return clock != nullptr ? clock : RealClock(); }

// A clock that moves only when told to. Starts at the Unix epoch plus one
// day unless given a start (so that Now() - InfinitePast-like values stay
// finite).
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24)) : nanos_(absl::ToUnixNanos(start)) {}
  absl::Time Now() const override { return absl::FromUnixNanos(nanos_.load(std::memory_order_acquire)); }
  void Advance(absl::Duration d) { nanos_.fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_acq_rel); }

 private:
  std::atomic<int64_t> nanos_;
};

}  // namespace ps

#endif  // PS_COMMON_BASE_CLOCK_H_
