#ifndef PS_WORKER_CLIENT_IN_FLIGHT_H_
#define PS_WORKER_CLIENT_IN_FLIGHT_H_

// The client's requests in flight, by request id, and the ids themselves
// (one sequence for the scheduler and every server). The I/O thread
// (kv_client_internal.h) owns it: it adds a request when it sends one and
// takes it out when the reply, an error or the deadline settles it.
//
// Not thread-safe: its owner's I/O lock guards it.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "common/wire/messages.h"
#include "worker/client/client_requests.h"
#include "zmq.hpp"

namespace ps::client_internal {

struct InFlight {
  std::shared_ptr<Op> op;  // null: an internal re-send whose answer nobody waits for
  int target;
  absl::Time deadline;
  std::vector<Destination> destinations;
  Envelope envelope;  // servers: to send again after a restart (payload: the replay copy)
  absl::Duration timeout;
  // Sent through a shared-memory channel: its payload (frames sharing the
  // caller's buffers, not copies), sent again through the socket if the
  // channel closes before the reply comes.
  bool via_shm = false;
  std::vector<zmq::message_t> shm_frames;
  // A push numbered for another server (origin >= 0: a part re-sent after
  // a failover), which no replay copy of this link holds: its payload,
  // shared, to go again should this server die too.
  std::vector<zmq::message_t> relayed;
  // A push of a job with one copy of each slice: its payload, shared, to go
  // again should its link be cut meanwhile (IoThread::ResendInFlight).
  std::vector<zmq::message_t> resend;
  uint64_t view_epoch = 0;  // the view it was routed by
  // A push re-sent after its server restarted (ResendTo): it may have been
  // applied before the crash, so it keeps its numbering wherever it goes.
  bool replayed = false;
};

class InFlightRequests {
 public:
  using Map = absl::flat_hash_map<uint64_t, InFlight>;

  // A new request id (never 0: replies that answer no request carry 0).
  uint64_t NextId() { return next_id_++; }
  // The ids of the requests in flight to `target`, in the order they were sent.
  std::vector<uint64_t> To(int target) const {
    std::vector<uint64_t> ids;
    for (const auto& [id, req] : requests_) {
      if (req.target == target) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  // The table itself, as a map.
  InFlight& operator[](uint64_t id) { return requests_[id]; }
  InFlight& at(uint64_t id) { return requests_.at(id); }
  bool contains(uint64_t id) const { return requests_.contains(id); }
  bool empty() const { return requests_.empty(); }
  Map::iterator find(uint64_t id) { return requests_.find(id); }
  Map::iterator begin() { return requests_.begin(); }
  Map::iterator end() { return requests_.end(); }
  Map::const_iterator begin() const { return requests_.begin(); }
  Map::const_iterator end() const { return requests_.end(); }
  void erase(Map::iterator it) { requests_.erase(it); }
  Map::node_type extract(uint64_t id) { return requests_.extract(id); }

 private:
  Map requests_;
  uint64_t next_id_ = 1;
};

}  // namespace ps::client_internal

#endif  // PS_WORKER_CLIENT_IN_FLIGHT_H_
