#ifndef PS_SERVER_FEED_SERVING_FEED_H_
#define PS_SERVER_FEED_SERVING_FEED_H_

// A training server's side of the serving replicas that follow its job
// (ps_serve --scheduler; server/serving/serving_follower.h): it answers
// their rounds with the current values of what changed since each one's
// last round. Beside the push path, not in it: it reads the store between
// the loop's batches, and the tables' change records (TableShard::changes,
// server/store/row_changes.h) are all the push path does for it.
//
// A round (ServingRequestMsg kRound) names what the replica holds of the
// slices this server leads: per dense slice the version of its values, per
// table shard the change cut its rows are as of. The answer has a part for
// every slice the server leads: a dense slice's values when their version
// differs; a table shard's rows changed and removed since that cut (a
// snapshot of the shard when the replica holds none, or its cut is older
// than the record keeps: the record is bounded, TableShard::kMaxRecordedChanges
// ids, so a replica that falls behind costs a snapshot, never memory or a
// wait of training).
//
// When: a model whose slices are all async (or ssp) is captured at once;
// the step named is the newest slice version. With sync slices the capture
// waits for the first moment, between batches, at which every sync slice
// here stands at one version >= the round's target step: that moment is
// the training model after that step, exactly (a worker's push of step
// t+1 needs every slice at t first). Past the round's wait the capture is
// taken as it stands, exact only if the versions agree.
//
// Subscribers are remembered by their socket identity with the cuts they
// hold: the record drops what every subscriber heard from within the last
// minute holds. When the server stops (Flush), each gets a last round
// (job_ended) against what it held, unasked.
//
// Not thread-safe: the server's loop thread.

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/wire/messages.h"
#include "server/store/slice_store.h"
#include "zmq.hpp"

namespace ps {

class ServingFeed {
 public:
  using Send = std::function<void(const std::string& routing_id, uint64_t request_id, ServingReplyMsg reply,
                                  std::vector<zmq::message_t> payloads)>;
  // `store` is borrowed; `leads(key)`: whether this server answers for the
  // slice now (its primary).
  ServingFeed(SliceStore* store, std::function<bool(uint32_t)> leads) : store_(store), leads_(std::move(leads)) {}

  // A round from the replica at `routing_id`: answered by Poll. The
  // request's errors: kUnavailable before the model exists; kInvalidArgument
  // for a kind other than kRound.
  absl::Status OnRequest(const std::string& routing_id, uint64_t request_id, const ServingRequestMsg& request,
                         absl::Time now);
  // Answers the rounds whose moment has come. Once per loop iteration.
  void Poll(absl::Time now, const Send& send);
  // The earliest deadline of a round waiting (InfiniteFuture: none).
  absl::Time NextDeadline() const;
  // The server stops: every subscriber gets its last round now.
  void Flush(absl::Time now, const Send& send);

  size_t waiting() const { return pending_.size(); }

 private:
  struct Pending {
    std::string routing_id;
    uint64_t request_id = 0;
    ServingRequestMsg request;
    absl::Time deadline;
  };
  struct Subscriber {
    absl::flat_hash_map<uint32_t, uint64_t> cuts;  // table shard key -> cut held
    std::vector<ServingPart> held;                 // as its last round said
    uint64_t request_id = 0;
    absl::Time seen;
  };
  // The step of a capture now, and whether it is exact; nullopt while the
  // sync slices disagree or stand below `target`.
  struct Moment {
    uint64_t step = 0;
    bool exact = false;
  };
  std::optional<Moment> Ready(uint64_t target) const;
  Moment Now() const;
  void Answer(const std::string& routing_id, uint64_t request_id, const std::vector<ServingPart>& held, Moment moment,
              bool job_ended, const Send& send);
  ServingPart TablePart(const Slice& slice, uint64_t cut_held, std::vector<zmq::message_t>* payloads);
  bool Syncs(const Slice& slice) const;
  void ForgetHeard(absl::Time now);

  SliceStore* const store_;
  const std::function<bool(uint32_t)> leads_;
  std::deque<Pending> pending_;
  absl::flat_hash_map<std::string, Subscriber> subscribers_;
};

}  // namespace ps

#endif  // PS_SERVER_FEED_SERVING_FEED_H_
