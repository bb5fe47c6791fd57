#ifndef PS_WORKER_CLIENT_DELTA_PULLS_H_
#define PS_WORKER_CLIENT_DELTA_PULLS_H_

// The worker's half of delta pulls (server/store/delta_pull.h): per
// dense slice of a tensor whose compression says ",pull=delta", the values
// this worker holds (the server's `ref` as of their version), which each
// pull reply either replaces (sent whole) or moves on (a frame from the
// version held). A pull says which version it holds (PullRequestMsg::have).
// Two pulls of a slice in flight at once may bring the same frame twice
// (the second finds the values held already) or the second whole; replies
// of one slice out of order, which the servers do not send, fail the later
// one rather than give wrong values.
//
// Costs the worker one float per element of such slices. Thread-safe: a
// lock per slice (callers build pulls, the I/O thread delivers replies).

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/model/model_spec.h"
#include "common/placement/partition_map.h"
#include "common/wire/messages.h"

namespace ps {

class DeltaPulls {
 public:
  DeltaPulls(const ModelSpec& model, const PartitionMap& map);

  // Whether pulls of dense slice `key` are delta pulls.
  bool Has(uint32_t key) const { return key < slices_.size() && slices_[key] != nullptr; }
  // The version to tell the server this worker holds (0: nothing yet),
  // for a pull of slice `key` (Has) now being built.
  uint64_t Ask(uint32_t key);
  // The reply `meta` (its key Has) with `payload`: the values it brings go
  // to `out` (the slice's length). kDataLoss naming the slice for a frame
  // from a version this worker does not hold (replies out of order) or one
  // that does not decode; nothing changes then.
  absl::Status Deliver(const SliceData& meta, absl::string_view payload, absl::Span<float> out);

 private:
  struct Held {
    absl::Mutex mu;
    std::vector<float> values ABSL_GUARDED_BY(mu);
    uint64_t version ABSL_GUARDED_BY(mu) = 0;  // 0: nothing held
  };
  std::vector<std::unique_ptr<Held>> slices_;  // per slice key; null: not a delta pull
};

}  // namespace ps

#endif  // PS_WORKER_CLIENT_DELTA_PULLS_H_
