#ifndef PS_SERVER_SERVING_SERVING_FOLLOWER_H_
#define PS_SERVER_SERVING_SERVING_FOLLOWER_H_

// A serving replica following a running job (ps_serve --scheduler): keeps
// the replica's ServingModel (server/serving/serving_model.h) at the job's
// model, a round every sync_interval.
//
// It asks the job's scheduler for the model and the cluster view (a reader:
// it never registers, nothing waits on it; ServingRequestMsg kSubscribe),
// then, each round, asks every server that leads slices for its part
// (kRound, with what the replica holds of them: server/feed/serving_feed.h
// says what comes back). A round is published only whole: every slice of
// the model in it, from its leader in the view, applied under one lock
// (ServingModel::Apply), so a lookup sees one version, never two rounds'
// layers or rows. In sync mode every part must stand at one step, exactly
// the training model after it: the first round targets the step after the
// last published; when the servers' parts disagree it asks them all again
// for a step beyond the newest (a few times, then the round is skipped and
// the replica serves on what it had). Async (and ssp) rounds are published
// as they come, named by the oldest part's step, not exact.
//
// Faults: a server that does not answer within its wait plus `timeout`, an
// error, or a part missing (the view changed: a failover, a move) ends the
// round; the replica asks the scheduler for the view again and goes on,
// its held cuts kept where their server still leads the slice (others get
// a snapshot of that shard). When the servers stop, each sends its last
// round unasked (job_ended); once all have, the follower applies them (the
// job's final model) and returns OK, the replica serving on. With no
// scheduler to answer, it retries every second, serving what it has.
//
// Thread-safety: Run on one thread; RequestStop and the counters from any.

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/model/model_spec.h"
#include "common/net/security.h"
#include "common/placement/partition_map.h"
#include "common/wire/messages.h"
#include "server/serving/serving_model.h"
#include "zmq.hpp"

namespace ps {

struct FollowOptions {
  std::string scheduler;  // HOST:PORT, tcp:// or ipc://
  absl::Duration sync_interval = absl::Seconds(1);
  // How long past a round's wait a server's answer (and the scheduler's)
  // may take before the round ends.
  absl::Duration timeout = absl::Seconds(5);
  // The replica's keys as a client of the job (the scheduler's public key,
  // its own key admitted by the job); none on loopback.
  SecurityOptions security;
};

class ServingFollower {
 public:
  // Checks the options and loads the keys: kInvalidArgument naming the
  // option, NodeSecurity::Load's errors.
  static absl::StatusOr<std::unique_ptr<ServingFollower>> Create(const FollowOptions& options, ServingModel* model);
  ~ServingFollower();

  // Follows until RequestStop (kCancelled) or the job's end (OK, its final
  // model applied).
  absl::Status Run();
  void RequestStop() { stop_.store(true); }

  uint64_t rounds_published() const { return published_.load(); }
  uint64_t rounds_skipped() const { return skipped_.load(); }
  // Payload bytes of the rounds published (values, ids), in all.
  uint64_t round_bytes() const { return round_bytes_.load(); }

 private:
  struct Peer {
    int32_t rank = 0;
    uint32_t node_id = 0;
    std::string endpoint;
    zmq::socket_t socket;
  };
  struct Held {
    uint64_t version = 0;
    uint64_t cut = 0;
    uint32_t cut_node = 0;  // the server whose cut it is
  };
  struct Part {  // one server's answer in a round
    int32_t rank = 0;
    ServingReplyMsg reply;
    std::vector<zmq::message_t> payloads;
  };
  enum class Outcome { kPublished, kDisagree, kEnded };

  ServingFollower(FollowOptions options, ServingModel* model) : options_(std::move(options)), model_(model) {}
  // One round (or the job's end): true when the job ended.
  absl::StatusOr<bool> FollowOnce();
  // Every server's last round is in (finals_).
  bool FinalsComplete() const;
  absl::Status Subscribe();
  absl::Status AdoptView(const DefineModelReplyMsg& model, const ClusterViewMsg& view);
  absl::StatusOr<Outcome> Round(uint64_t* target);
  absl::Status Ask(Peer& peer, uint64_t request_id, uint64_t target);
  absl::StatusOr<std::vector<Part>> Collect(uint64_t request_id, absl::Time deadline);
  // A message from `peer`: its answer to `request_id` (nullopt for another's);
  // a job_ended answer is kept in finals_ whatever its id.
  absl::StatusOr<std::optional<Part>> Receive(Peer& peer, uint64_t request_id);
  absl::Status CheckCovers(const std::vector<Part>& parts) const;
  absl::Status PublishParts(std::vector<Part> parts);
  absl::Status AddPart(const Part& part, ServingModel::Update* update, std::vector<std::pair<uint32_t, Held>>* held);
  void WaitForNextRound(absl::Time until);

  const FollowOptions options_;
  ServingModel* const model_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> published_{0}, skipped_{0}, round_bytes_{0};
  zmq::context_t context_{1};
  NodeSecurity security_;
  zmq::socket_t scheduler_;
  uint64_t next_request_ = 0;

  std::optional<ModelSpec> spec_;  // the job's model, once subscribed
  std::vector<Slice> slices_;
  std::vector<int32_t> leader_;                // per slice key, the rank leading it
  std::vector<std::pair<int, int>> shard_of_;  // per table slice key: its shard, of shards
  std::vector<Peer> peers_;                    // the servers leading slices
  absl::flat_hash_map<uint32_t, Held> held_;   // per slice key
  bool reset_ = true;                          // the next round rebuilds the model
  uint64_t last_step_ = 0;
  absl::flat_hash_map<int32_t, Part> finals_;  // job_ended answers, by rank
};

}  // namespace ps

#endif  // PS_SERVER_SERVING_SERVING_FOLLOWER_H_
