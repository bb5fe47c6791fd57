#ifndef PS_SERVER_STORE_STEP_FORWARDING_H_
#define PS_SERVER_STORE_STEP_FORWARDING_H_

// --replicas, sync: a primary forwards each step of a dense slice to the
// slice's backups once, as the step's sum, after it completes (Li et al.,
// OSDI'14 4.3: replication after aggregation costs k/n of the push
// bandwidth), instead of each worker's push as it arrives.
//
// What it keeps: a worker hears of its push only once the step that holds
// it reached every live backup (the primary parks the reply until then), so
// on any copy the step in progress holds a subset of the step's pushes and
// the slice's record of pushes applied (server/replication/slice_seqs.h) names exactly
// those: a failover's re-sends give the promoted copy the rest, and each is
// applied once. A backup completes the step with the primary's sum through
// the same optimizer call, so its values and optimizer state are the
// primary's bytes.
//
// The wire form (PushRequestMsg::step_sum, forwarded): per slice a
// SliceData {key, length: the sum's floats (0 for a step that completed
// empty), version: the step, rows: the workers it summed} and two frames:
// the sum (float32), then the step's record: the workers summed (int32
// each, ascending), then the slice's push record (server/replication/slice_seqs.h) at
// the step's end, as OriginSeq entries of {int32 origin, int32 worker,
// uint64 seq}.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/net/transport.h"
#include "common/wire/messages.h"
#include "server/store/slice_store.h"

namespace ps {

struct ForwardedStep {
  SliceStore::CompletedStep step;
  std::vector<OriginSeq> seqs;  // the slice's push record at the step's end
};

// Appends `step` (with `seqs`) to `push` and its two frames to `frames`;
// the sum's frame takes the step's vector over (no copy of its bytes).
void AppendStep(SliceStore::CompletedStep step, const std::vector<OriginSeq>& seqs, PushRequestMsg* push,
                std::vector<zmq::message_t>* frames);

// The steps a step_sum forward carries; kInvalidArgument naming the slice
// for frames that do not match their SliceData (a count, a length, a
// record cut short).
absl::StatusOr<std::vector<ForwardedStep>> DecodeSteps(const PushRequestMsg& push,
                                                       const std::vector<zmq::message_t>& frames);

}  // namespace ps

#endif  // PS_SERVER_STORE_STEP_FORWARDING_H_
