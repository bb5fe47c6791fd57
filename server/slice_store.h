#ifndef PS_SERVER_SLICE_STORE_H_
#define PS_SERVER_SLICE_STORE_H_

// The parameter slices one server holds, their optimizer state and version
// clocks, and the consistency rules (sync, async, ssp:K) that decide when a
// push is applied and when a pull may be answered. Knows no sockets.
//
// Not thread-safe: one thread (the server's request thread) calls every
// method. Push() itself spreads the per-slice work over the ThreadPool.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/messages.h"
#include "common/model_spec.h"
#include "common/partition_map.h"
#include "common/thread_pool.h"
#include "server/optimizer.h"

namespace ps {

class SliceStore {
 public:
  // `pool` is borrowed and must outlive the store. `max_bytes` bounds the
  // memory the slices, their optimizer state and sync sums may take (0: no
  // bound).
  SliceStore(ThreadPool* pool, bool allow_nonfinite, uint64_t max_bytes = 0);
  ~SliceStore();
  SliceStore(const SliceStore&) = delete;
  SliceStore& operator=(const SliceStore&) = delete;

  // Allocates and initialises `slices` of `model` for a job of `num_workers`.
  // kInvalidArgument for a bad model or slice; kFailedPrecondition when a
  // different model is already held (the same one again is a no-op);
  // kResourceExhausted when it needs more than max_bytes or memory runs out.
  absl::Status Create(const ModelSpec& model, const std::vector<Slice>& slices, int num_workers);
  bool has_model() const { return model_ != nullptr; }

  // Validates the whole push first and changes nothing unless every slice is
  // acceptable; then applies it (sync: adds to the step's sum and runs the
  // optimizer once all workers' pushes are in). `payloads[i]` holds the
  // gradient of push.slices[i]. Errors, each naming the slice:
  //   kFailedPrecondition: no model yet; sync push for a step already applied,
  //     or for a step the slice has not reached;
  //   kAlreadyExists: sync push this worker already made for this step;
  //   kNotFound: unknown slice key; kInvalidArgument: clock outside [0, 2^53], duplicate key in the
  //     push, payload length not matching the header or the slice, NaN or Inf
  //     in a gradient (unless allowed), worker rank out of range.
  absl::Status Push(int worker, const PushRequestMsg& push,
                    absl::Span<const absl::Span<const float>> payloads);

  // kNotFound for unknown keys, kInvalidArgument for repeated keys or a
  // clock outside [0, 2^53], kFailedPrecondition before the model exists.
  absl::Status CheckPull(const PullRequestMsg& pull) const;
  // Whether a pull at `clock` may see the slices now: sync, every slice has
  // applied step clock-1 (version >= clock); ssp:K, every worker has pushed
  // up to clock-K-1 to every slice; async, always. Requires CheckPull ok.
  bool PullReady(const PullRequestMsg& pull) const;
  // What a pull that is not ready waits for, for a deadline error.
  std::string DescribeWait(const PullRequestMsg& pull) const;

  // The current values and version of a slice. Requires a known key; the
  // span stays valid until the next Push or Create.
  absl::Span<const float> Values(uint32_t key) const;
  uint64_t Version(uint32_t key) const;

  // Counters since start (slices_held, pushes, updates, staleness).
  const StatsReplyMsg& stats() const { return stats_; }

 private:
  struct SliceState;

  absl::Status CheckMemory(const ModelSpec& model, const std::vector<Slice>& slices,
                           const Optimizer& optimizer) const;
  absl::Status Allocate(const ModelSpec& model, const std::vector<Slice>& slices, int num_workers,
                        std::unique_ptr<Optimizer> optimizer);
  absl::Status ValidatePush(int worker, const PushRequestMsg& push,
                            absl::Span<const absl::Span<const float>> payloads) const;
  absl::Status ValidateSyncStep(const SliceState& s, int worker, int64_t clock) const;
  // Applies one slice of a validated push; returns true when the optimizer ran.
  bool ApplySlice(SliceState& s, int worker, const SliceData& meta, absl::Span<const float> grad);
  int64_t MinWorkerClock(const SliceState& s) const;
  const SliceState* Find(uint32_t key) const;
  std::string SliceName(const SliceState& s) const;

  ThreadPool* const pool_;
  const bool allow_nonfinite_;
  const uint64_t max_bytes_;
  std::unique_ptr<ModelSpec> model_;
  std::vector<Slice> slice_list_;
  std::unique_ptr<Optimizer> optimizer_;
  int num_workers_ = 0;
  absl::flat_hash_map<uint32_t, std::unique_ptr<SliceState>> slices_;
  StatsReplyMsg stats_;
};

}  // namespace ps

#endif  // PS_SERVER_SLICE_STORE_H_
