#ifndef PS_SERVER_STORE_DELTA_PULL_H_
#define PS_SERVER_STORE_DELTA_PULL_H_

// Delta pulls (CompressionSpec ",pull=delta"): a dense slice's
// pull answered with the change since the values the worker holds,
// compressed as the pushes are (topk, randomk, onebit).
//
// The server keeps, per slice, `ref`: the values a worker holds once it has
// applied every frame (a lossy copy of the parameters), its version, and
// the frame that took ref from the version before. A pull of a newer
// version first moves ref on: the frame of (values - ref), and ref plus what
// that frame decodes to, so that what one frame leaves out is in the next
// one's difference (error feedback without a residual per worker). A worker
// that holds ref's previous version gets the frame; any other (a new or
// restarted worker, one that skipped a version, a second pull of the slice
// while one is in flight) gets ref whole, as float32. In sync every worker
// pulls every version, so one frame serves them all; in async a worker
// often finds ref two versions on and gets it whole.
//
// Costs the server one float per element of such slices (ref) and the last
// frame; the worker keeps its own copy (worker/client/delta_pulls.h). The
// state lives in the slice (SliceState::delta): a slice created, moved in or
// restored starts without it, and an assign drops it.
//
// Not thread-safe: the server's thread, as the slice store.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/compress/compressor.h"

namespace ps {

struct DeltaPull {
  std::vector<float> ref;
  uint64_t version = 0;  // of ref
  uint64_t base = 0;     // the version `frame` takes ref from (0: none)
  std::string frame;
};

// What to send a worker that holds version `have` of a slice now at
// `version` with `values`: `frame` (compressed, from `base`) when `base` != 0,
// else `whole` (ref's floats).
struct DeltaReply {
  uint64_t base = 0;
  const std::string* frame = nullptr;
  absl::Span<const float> whole;
};

// Moves `state` to `version` (a new state takes `values` as they are) and
// says what to send. `spec`: the slice's compression (delta_pull()).
DeltaReply PullDelta(DeltaPull& state, uint64_t version, absl::Span<const float> values, uint64_t have,
                     const CompressionSpec& spec);

}  // namespace ps

#endif  // PS_SERVER_STORE_DELTA_PULL_H_
