#ifndef PS_SERVER_MEMBERSHIP_MEMBERSHIP_H_
#define PS_SERVER_MEMBERSHIP_MEMBERSHIP_H_

// A server's place in its job: who it is (node id and rank, from the
// registration; the rank and incarnation of the checkpoint it restored),
// which job incarnation it serves, who the live workers are (from the
// latest cluster view; WorkerOf checks a request's sender against them),
// how its life ends (shut down, drained, superseded), and the timing of the
// drain it asks for on a stop request (ServerOptions::drain_on_stop).
// Decisions only: the server sends what they call for.
//
// Not thread-safe: the server's loop owns it.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/net/transport.h"
#include "common/wire/messages.h"

namespace ps {

class Membership {
 public:
  // ---- who this server is ----
  uint32_t node_id() const { return node_id_; }  // 0: not registered yet
  int rank() const { return rank_; }             // -1: not registered yet
  bool registered() const { return node_id_ != 0; }
  // The first registration reply's node id and rank.
  void Register(uint32_t node_id, int rank) {
    node_id_ = node_id;
    rank_ = rank;
  }
  // Started from a checkpoint of rank `rank`, written by job incarnation
  // `incarnation` (0: none named, format 1).
  void Restored(int rank, uint64_t incarnation) {
    restored_rank_ = rank;
    restored_incarnation_ = incarnation;
  }
  int restored_rank() const { return restored_rank_; }  // -1: not restored
  bool restored() const { return restored_rank_ >= 0; }
  uint64_t restored_incarnation() const { return restored_incarnation_; }
  // The rank and incarnation a checkpoint of this server is written as.
  int CheckpointRank() const { return rank_ >= 0 ? rank_ : restored_rank_; }
  uint64_t CheckpointIncarnation() const { return incarnation_ != 0 ? incarnation_ : restored_incarnation_; }

  // ---- the job incarnation ----
  uint64_t incarnation() const { return incarnation_; }  // 0: not known yet
  // Takes the job's incarnation from the first registration reply or view
  // that names it. True when a restored server's checkpoint is of another
  // incarnation: this job's workers are new nodes (push numbers start again).
  bool AdoptIncarnation(uint64_t incarnation);

  // ---- the live workers ----
  // A new view with `num_workers` worker ranks: none live until AddWorker.
  void ClearWorkers(int num_workers);
  // Worker `rank` is node `node_id`, registered with `public_key`.
  void AddWorker(uint32_t node_id, int rank, const std::string& public_key);
  bool IsWorker(uint32_t node_id) const { return worker_rank_.contains(node_id); }
  size_t live_workers() const { return worker_rank_.size(); }
  const std::vector<bool>& worker_live() const { return worker_live_; }  // by rank
  // The rank of the worker that sent `env`: kPermissionDenied for a sender
  // that is not a live worker of this job or uses another's key,
  // kFailedPrecondition for a node of another job incarnation.
  absl::StatusOr<int> WorkerOf(const Envelope& env, const RawMessage& raw) const;

  // ---- how its life ends ----
  bool shutdown() const { return shutdown_; }
  void set_shutdown() { shutdown_ = true; }
  bool left() const { return left_; }  // drained: shut down by the scheduler with ShutdownMsg::left
  void set_left() { left_ = true; }
  bool superseded() const { return superseded_; }  // the scheduler refused this registered server
  void set_superseded(bool superseded) { superseded_ = superseded; }

  // ---- the drain asked for on a stop request ----
  // The scheduler's request id of DrainRequestMsg (1: the registration).
  static constexpr uint64_t kDrainRequestId = 2;
  // What a stop request calls for now (OnStop):
  enum class DrainStep {
    kWait,      // nothing yet: the drain is under way
    kAsk,       // ask the scheduler (the first time)
    kAskAgain,  // ask the scheduler again (it said to)
    kExpired,   // not drained within the timeout
  };
  DrainStep OnStop(absl::Time now, absl::Duration timeout);
  bool draining() const { return drain_deadline_ != absl::InfiniteFuture(); }
  // The scheduler refused the drain with `code` at `now`: whether the
  // refusal may pass (asked again in `again`), else it stops this server.
  bool DrainRefusalPasses(absl::StatusCode code, absl::Time now, absl::Duration again);
  // A restarted scheduler does not know the drain under way: whether to
  // ask it again (now).
  bool ReaskDrain();

 private:
  uint32_t node_id_ = 0;
  int rank_ = -1;
  uint64_t incarnation_ = 0;           // the job's, from the registration reply
  uint64_t restored_incarnation_ = 0;  // the checkpoint's (0: none, or format 1)
  int restored_rank_ = -1;             // >= 0: started from a checkpoint of this rank

  absl::flat_hash_map<uint32_t, int> worker_rank_;         // node id -> worker rank (live workers)
  absl::flat_hash_map<uint32_t, std::string> worker_key_;  // node id -> the key it registered with
  std::vector<bool> worker_live_;                          // by rank, from the latest view

  bool shutdown_ = false;
  bool left_ = false;
  bool superseded_ = false;
  // When the drain this server asked for (on a stop request) must be done
  // by (InfiniteFuture: none asked).
  absl::Time drain_deadline_ = absl::InfiniteFuture();
  // When to ask again (InfiniteFuture: not due): the scheduler said to (its
  // slices were moving), or a restarted one does not know the drain yet.
  absl::Time drain_again_at_ = absl::InfiniteFuture();
  bool drain_reasked_ = false;  // asked a restarted scheduler, which may not be ready yet
};

}  // namespace ps

#endif  // PS_SERVER_MEMBERSHIP_MEMBERSHIP_H_
