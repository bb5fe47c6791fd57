#ifndef PS_SERVER_STORE_SLICE_STATE_H_
#define PS_SERVER_STORE_SLICE_STATE_H_

// The state of one parameter slice that SliceStore keeps and the
// consistency policies (server/store/consistency_policy.h) read and change.
// Internal to server/. Not thread-safe: a slice is changed by one thread at a
// time (SliceStore spreads different slices over its pool).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "common/model/model_spec.h"
#include "common/placement/partition_map.h"
#include "server/optim/optimizer.h"
#include "server/store/delta_pull.h"
#include "server/store/table_shard.h"

namespace ps {

// Clocks beyond this are refused (SliceStore::Push, CheckPull) and never
// stored, so clock arithmetic never overflows.
inline constexpr int64_t kMaxClock = int64_t{1} << 53;

// Whether `slice` lies inside its tensor of `model`. Written so that no sum
// can wrap around: slices come off the wire or a file.
inline bool SliceFits(const ModelSpec& model, const Slice& slice) {
  if (slice.table) return slice.tensor < model.tables.size() && slice.offset == 0 && slice.length == 0;
  const uint64_t n =
      slice.tensor < model.tensors.size() ? static_cast<uint64_t>(model.tensors[slice.tensor].NumElements()) : 0;
  return slice.length > 0 && slice.length <= n && slice.offset <= n - slice.length;
}

// The `active` workers of pipeline stage `stage` (worker w is stage w % stages).
inline std::vector<uint8_t> StageHolders(const ModelSpec& model, int stage, absl::Span<const uint8_t> active) {
  std::vector<uint8_t> held(active.begin(), active.end());
  for (size_t w = 0; w < held.size(); ++w) {
    if (model.StageOf(static_cast<int>(w)) != stage) held[w] = 0;
  }
  return held;
}

// The workers a step of `slice` waits for: the `active` ones that hold it,
// that is every active worker, or with pipeline stages (model.stages > 1)
// those of the stage of the slice's tensor.
inline std::vector<uint8_t> HoldersOf(const ModelSpec& model, const Slice& slice, absl::Span<const uint8_t> active) {
  if (model.stages <= 1 || slice.table) return std::vector<uint8_t>(active.begin(), active.end());
  return StageHolders(model, model.tensors[slice.tensor].stage, active);
}

struct SliceState {
  Slice slice;
  std::vector<float> values;
  std::vector<float> optimizer_state;
  // A table shard's rows (slice.table); null for dense slices, whose
  // values, optimizer state and sum are the vectors here.
  std::unique_ptr<TableShard> table;
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
  // Delta pulls (server/store/delta_pull.h): what the workers hold; empty until
  // the first pull.
  DeltaPull delta;
};

// A pushed gradient for one slice: for a dense slice, one float per
// element; for a table shard, the rows (ids.size() x dim floats) of distinct
// ids.
struct Gradient {
  Gradient(absl::Span<const float> v) : values(v) {}  // NOLINT: a dense gradient is its floats
  template <size_t N>
  Gradient(const float (&v)[N]) : values(v) {}  // NOLINT
  Gradient(absl::Span<const float> v, absl::Span<const uint64_t> i) : values(v), ids(i) {}
  absl::Span<const float> values;
  absl::Span<const uint64_t> ids;
};

// What the consistency policies do with gradients, the same call for dense
// slices and table shards (slice_state.cc):
// a sync step's sum: `g` is the step's first push when s.arrived == 0;
void AddToStepSum(SliceState& s, const Gradient& g);
// applies grad_scale x the step's sum with `optimizer` and empties it;
void ApplyStepSum(SliceState& s, const Optimizer& optimizer, float grad_scale);
// applies one push as it arrives (async, ssp).
void ApplyGradient(SliceState& s, const Gradient& g, const Optimizer& optimizer);

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

#endif  // PS_SERVER_STORE_SLICE_STATE_H_
