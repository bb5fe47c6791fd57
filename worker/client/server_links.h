#ifndef PS_WORKER_CLIENT_SERVER_LINKS_H_
#define PS_WORKER_CLIENT_SERVER_LINKS_H_

// The client's links to the job's servers, one per server rank: the socket
// and where it goes, whether the scheduler declared the server dead and what
// waits for its replacement, the pushes to replay to it, and the same-host
// channel. The I/O thread (kv_client_internal.h) owns it: kv_client_io.cc
// sends and reads through it, kv_client_recovery.cc replaces a server's
// socket, kv_client_shm.cc sets up and drops the channel.
//
// Not thread-safe: its owner's I/O lock guards it.

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/net/poll_set.h"
#include "common/net/security.h"
#include "common/net/shm_channel.h"
#include "common/wire/messages.h"
#include "worker/client/client_requests.h"
#include "worker/client/push_replay.h"
#include "zmq.hpp"

namespace ps::client_internal {

// Server r's shared-memory channel in the I/O thread's poll: tag kShmTagBase - r.
inline constexpr int kShmTagBase = -3;

// A request held while its server is down.
struct Held {
  Envelope envelope;
  std::vector<Destination> destinations;
  absl::Duration timeout;
  std::shared_ptr<Op> op;
  std::vector<zmq::message_t> payloads;  // empty: it was in flight (use the replay copy)
};

// A request sent while a shared-memory channel is being set up: it goes
// once the channel is there (or is not), so that order is kept.
struct Unsent {
  uint64_t id;
  Envelope envelope;
  std::vector<zmq::message_t> payloads;
};

enum class ShmState { kUntried, kOffered, kOn, kOff };

// What the client knows of one server rank, and what it keeps for it: the
// requests held while it is down, the pushes to replay, the channel.
struct ServerLink {
  // Why a new request to server `rank` fails at once (OK: it may go): no
  // replacement came in time, or backups serve its slices now (what still
  // goes to it is not for a slice: stats).
  absl::Status Refusal(int rank) const;
  // The server was declared dead at `now`: requests are held from then on.
  // False when it was down already.
  bool MarkDown(absl::Time now);
  // Request `h` waits for the server's replacement.
  void Hold(Held h) { held.push_back(std::move(h)); }
  // The held requests, in order; none is held afterwards.
  std::vector<Held> TakeHeld();
  // Fails every held request (those a caller waits for) with `status`.
  void FailHeld(const absl::Status& status);
  // No replacement within `timeout` of its death: held requests fail, and
  // so does every new one (gave_up). Whether it gave up now.
  bool GiveUpIfOverdue(int rank, absl::Time now, absl::Duration timeout);

  // Whether the next request asks the server for a channel (none was
  // asked, or a busy server's time to ask again has come).
  bool ShmDue(absl::Time now) const { return shm_state == ShmState::kUntried && now >= shm_retry_at; }
  // Whether the offer got no answer in time.
  bool ShmOfferExpired(absl::Time now) const { return shm_state == ShmState::kOffered && now >= shm_offer_deadline; }
  // The offer is settled: `channel`, or none for `why` (a busy server is
  // asked again after `retry_after`). Returns the requests that waited for
  // it, in order.
  std::vector<Unsent> SettleShm(int rank, std::unique_ptr<ShmChannel> channel, const absl::Status& why, absl::Time now,
                                absl::Duration retry_after);
  // Drops the channel and any offer (`retry`: ask again on the next
  // request); the requests that waited for an offer are forgotten (what
  // drops the socket decides their fate). Whether a channel was open.
  bool DropShm(int rank, const absl::Status& why, bool retry);

  zmq::socket_t socket;  // closed: dropped, or its reconnection failed
  std::string endpoint;
  std::string public_key;  // from the cluster view
  uint32_t node_id = 0;
  bool down = false;         // declared dead; requests are held
  bool failed_over = false;  // --replicas: dead, its slices led by their backups now
  absl::Status gave_up;      // no replacement in time: requests fail with this
  absl::Time down_since;
  PushReplay replay;  // numbering, and the copies its checkpoint lacks
  std::vector<Held> held;
  // New pushes waiting, in order, for a checkpoint to free the replay
  // budget (replay.full()), each until its deadline.
  std::deque<std::pair<Held, absl::Time>> over_budget;
  absl::Time budget_probed;  // the last probe whose answer says what its checkpoint holds
  // The same-host data plane (kv_client_shm.cc).
  ShmState shm_state = ShmState::kUntried;
  std::unique_ptr<ShmChannel> shm;  // kOn
  uint64_t shm_offer_id = 0;        // kOffered: the request
  absl::Time shm_offer_deadline;
  absl::Time shm_retry_at;           // kUntried after a busy server: ask again from then
  std::vector<Unsent> awaiting_shm;  // kOffered: sent after the answer
  // Its socket may hold a reply its descriptor will not announce: it was
  // used since a drain that emptied it (PollSet::AddSocketFd).
  bool unsettled = true;
};

class ServerLinks {
 public:
  // Borrows `context` and `security` (the client's keys) for its lifetime.
  ServerLinks(zmq::context_t* context, const NodeSecurity* security) : context_(context), security_(security) {}
  ServerLinks(const ServerLinks&) = delete;
  ServerLinks& operator=(const ServerLinks&) = delete;

  size_t size() const { return links_.size(); }
  ServerLink& operator[](size_t rank) { return links_[rank]; }
  const ServerLink& operator[](size_t rank) const { return links_[rank]; }
  auto begin() { return links_.begin(); }
  auto end() { return links_.end(); }
  auto begin() const { return links_.begin(); }
  auto end() const { return links_.end(); }

  // One link per server rank of the first cluster view, each with a socket
  // to its server (pushes numbered afresh, copies kept up to
  // `max_replay_bytes`). The first socket that cannot be made is the error
  // (kFailedPrecondition for plaintext off loopback without --insecure).
  absl::Status Connect(const ClusterViewMsg& view, uint64_t max_replay_bytes);
  // A later view with more servers (they joined the running job): links to
  // the new ranks, dialled.
  absl::Status Grow(const ClusterViewMsg& view, uint64_t max_replay_bytes, bool replicated);
  // Gives server `rank` a new socket to `endpoint` (a replacement server, or
  // the same one after a reset); on an error the link is left without one.
  absl::Status Redial(int rank, const std::string& endpoint, const std::string& public_key);
  // Closes server `rank`'s socket (if open), dropping what is queued on it
  // (linger 0: ZeroMQ lets go of the callers' buffers).
  void CloseSocket(int rank);
  // Closes every socket and forgets the links (the client's end).
  void CloseAll();

  // Sends on server `rank`'s socket, which is unsettled from then on;
  // kUnavailable when it has none.
  absl::Status Send(int rank, const Envelope& envelope, std::vector<zmq::message_t> payloads);
  // Whether some open socket may hold a message its descriptor will not announce.
  bool AnyUnsettled() const;
  // Adds the channels' descriptors, and with `sockets` the open sockets'
  // (tag: the rank), to the I/O thread's poll.
  void AddToPoll(PollSet& poll, bool sockets) const;

 private:
  absl::StatusOr<zmq::socket_t> Dial(const std::string& endpoint, const std::string& public_key) const;

  zmq::context_t* const context_;
  const NodeSecurity* const security_;
  std::vector<ServerLink> links_;
};

}  // namespace ps::client_internal

#endif  // PS_WORKER_CLIENT_SERVER_LINKS_H_
