#ifndef PS_SERVER_SLICE_STATE_H_
#define PS_SERVER_SLICE_STATE_H_

// The state of one parameter slice that SliceStore keeps and the
// consistency policies (server/consistency_policy.h) read and change.
// Internal to server/. Not thread-safe: a slice is changed by one thread at a
// time (SliceStore spreads different slices over its pool).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/types/span.h"
#include "common/model_spec.h"
#include "common/partition_map.h"

namespace ps {

// Clocks beyond this are refused (SliceStore::Push, CheckPull) and never
// stored, so clock arithmetic never overflows.
inline constexpr int64_t kMaxClock = int64_t{1} << 53;

// Whether `slice` lies inside its tensor of `model`. Written so that no sum
// can wrap around: slices come off the wire or a file.
inline bool SliceFits(const ModelSpec& model, const Slice& slice) {
  const uint64_t n = slice.tensor < model.tensors.size()
                         ? static_cast<uint64_t>(model.tensors[slice.tensor].NumElements())
                         : 0;
  return slice.length > 0 && slice.length <= n && slice.offset <= n - slice.length;
}

struct SliceState {
  Slice slice;
  std::vector<float> values;
  std::vector<float> optimizer_state;
  uint64_t version = 0;          // sync: steps completed; async/ssp: pushes applied
  uint64_t optimizer_steps = 0;  // updates the optimizer has made (sync: less
                                 // than version once an empty step was skipped)
  // sync: the running sum of step `version`'s pushes, and who has pushed.
  std::vector<float> sum;
  int arrived = 0;
  std::vector<uint8_t> pushed;
  // Per worker, one past the last clock it pushed here (raised when it
  // re-joins).
  std::vector<int64_t> worker_clock;
  // sync: per worker, the first step it is counted at (0 unless it re-joined).
  std::vector<uint64_t> join_step;
  // Per worker, pushes for a step below this skip the slice (empty: none
  // do; see SliceStore::SkipStepsAlreadyApplied).
  std::vector<int64_t> floor;
};

// The slowest clock on `s` among the workers `active` marks; the largest
// int64 when none is active.
inline int64_t MinWorkerClock(const SliceState& s, absl::Span<const uint8_t> active) {
  int64_t slowest = std::numeric_limits<int64_t>::max();
  for (size_t w = 0; w < active.size(); ++w) {
    if (active[w]) slowest = std::min(slowest, s.worker_clock[w]);
  }
  return slowest;
}

}  // namespace ps

#endif  // PS_SERVER_SLICE_STATE_H_
