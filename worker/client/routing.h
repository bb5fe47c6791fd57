#ifndef PS_WORKER_CLIENT_ROUTING_H_
#define PS_WORKER_CLIENT_ROUTING_H_

// Where the client sends each slice, by the latest cluster view (its epoch
// and the copies of each slice, primary first), and the requests a change
// of it caught in transit: those a server refused as routed by an older
// view (a slice moved), waiting to be routed again, and the fence behind
// them, which keeps a worker's requests for a slice in the order they were
// made (kv_client_fence.cc says why). The I/O thread (kv_client_internal.h)
// owns it; it sends and fails requests, this decides where and when.
//
// Not thread-safe: its owner's I/O lock guards it.

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/wire/messages.h"
#include "worker/client/client_requests.h"
#include "worker/client/server_links.h"

namespace ps::client_internal {

// A request a server refused as routed by an older view than its own (a
// slice moved: MovedError), waiting to be routed again.
struct Moved {
  Held held;
  int target = 0;              // the server that refused it
  uint64_t refused_epoch = 0;  // that server's view
  uint64_t sent_epoch = 0;     // the view it was routed by
  absl::Time retry_at;         // with no newer view by then: sent again anyway (that server is behind)
  absl::Time deadline;
  absl::Status refusal;
  bool replayed = false;  // re-sent after its server restarted (it keeps its numbering)
};

// The slice keys `body` pushes or pulls (none: a request for no slice).
std::vector<uint32_t> SliceKeys(const Body& body);

class Routing {
 public:
  Routing() = default;
  Routing(const Routing&) = delete;
  Routing& operator=(const Routing&) = delete;

  // Whether the job keeps pushes until answered, so that a dead server's
  // slices can fail over: it has several copies of each slice
  // (RegisterReplyMsg::replicas), or its views list copies (--elastic).
  bool replicated() const { return replicated_; }
  void set_replicated() { replicated_ = true; }
  // A newer view: its epoch, and its copies where it lists them. Returns
  // whether that made the job replicated.
  bool TakeView(const ClusterViewMsg& view);
  // The epoch of the latest view, which pushes carry.
  uint64_t epoch() const { return epoch_; }
  // Whether the view lists copies: slices fail over and move.
  bool moves() const { return !copies_.empty(); }
  // The server leading slice `key` now (`fallback` when the view names none).
  int Leader(uint32_t key, int fallback) const {
    return key < copies_.size() && !copies_[key].empty() ? copies_[key][0] : fallback;
  }
  // Whether server `rank` leads some slice.
  bool LeadsAny(int rank) const;
  // Whether some slice of a request built for server `target` is led by another now.
  bool Misrouted(const Envelope& envelope, int target) const;

  // Whether requests wait here (moved or fenced): the loop looks again
  // within kMovedRetry.
  bool holding() const { return !moved_.empty() || !fenced_.empty(); }

  // Request `m` waits to be routed again.
  void AddMoved(Moved m) { moved_.push_back(std::move(m)); }
  // The moved requests to route again now: a newer view came, or their
  // retry time passed. Those past their deadline fail with their refusal.
  std::vector<Moved> TakeMovedDue(absl::Time now);

  // The keys of requests in flight by an older view to a server that no
  // longer leads them (the owner knows what is in flight).
  using KeysInFlight = absl::FunctionRef<absl::flat_hash_set<uint32_t>()>;
  // Whether `out`, a request for slices, must wait behind an earlier one
  // that holds some of them in transit: moved, fenced, or `in_flight`.
  // Then it is kept, until `deadline`.
  bool Fence(Outgoing& out, KeysInFlight in_flight, absl::Time deadline);
  // Hands `send`, in order, the fenced requests nothing holds back any more;
  // fails those past their deadline. `send` may fence a request again.
  void ReleaseFenced(absl::Time now, KeysInFlight in_flight, absl::FunctionRef<void(Outgoing&)> send);
  // Fails every fenced request with `status`.
  void FailFenced(const absl::Status& status);

 private:
  struct Fenced {
    Outgoing out;
    absl::Time deadline;
  };
  // The keys of the moved requests added to `keys`.
  void AddMovedKeys(absl::flat_hash_set<uint32_t>& keys) const;

  bool replicated_ = false;
  std::vector<std::vector<int32_t>> copies_;  // by slice key: the servers holding it, primary first
  uint64_t epoch_ = 0;
  std::vector<Moved> moved_;
  std::deque<Fenced> fenced_;
};

}  // namespace ps::client_internal

#endif  // PS_WORKER_CLIENT_ROUTING_H_
