#ifndef PS_SERVER_SHM_PEERS_H_
#define PS_SERVER_SHM_PEERS_H_

// A server's shared-memory channels (common/net/shm_channel.h), one per worker
// connection that asked for one and fetched it (common/net/shm_handshake.h):
// granting them, polling them beside the socket, and sending a peer's
// replies through its channel. A message that arrives on a channel carries
// the routing id and CurveZMQ user id of the socket connection that asked
// for it, so the server checks and answers it like one from the socket.
//
// Thread-safety: the server's loop thread only.

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/net/poll_set.h"
#include "common/net/shm_handshake.h"

namespace ps {

class ShmPeers {
 public:
  // Each channel maps two rings: past this many, offers are refused and
  // workers stay on the socket.
  static constexpr size_t kMaxChannels = 64;

  // How a message too large for a ring reaches `routing_id` (the socket).
  using SocketSender =
      std::function<absl::Status(const std::string& routing_id, const Envelope&, std::vector<zmq::message_t>)>;

  // ring_bytes 0: shared memory is off and every offer is refused.
  ShmPeers(uint64_t ring_bytes, SocketSender socket) : ring_bytes_(ring_bytes), socket_(std::move(socket)) {}
  absl::Status Start();
  bool enabled() const { return acceptor_ != nullptr; }

  // An authenticated worker's offer (`raw` is its ShmOffer): the grant to
  // answer with. A channel this connection had is closed first.
  // kFailedPrecondition when shared memory is off here; kResourceExhausted
  // with kMaxChannels open or too many offers not fetched yet.
  absl::StatusOr<ShmGrantMsg> Offer(const RawMessage& raw);
  // Adds the acceptor and every channel to `poll`, under tags from `base` up.
  void AddToPoll(PollSet& poll, int base);
  // After poll.Wait: adopts fetched channels, and hands each message the
  // ready channels received to `handle`. A channel that fails is closed
  // (logged); its peer goes on over the socket.
  void OnReady(const PollSet& poll, int base, absl::FunctionRef<void(RawMessage)> handle);
  // Sends through `routing_id`'s channel: false when it has none (the
  // caller uses the socket; `payloads` untouched).
  bool Send(const zmq::message_t& routing_id, const Envelope& envelope, std::vector<zmq::message_t>& payloads,
            bool views = false);
  // `routing_id` has a channel: its replies may carry views of live values
  // (ShmChannel::Send copies them straight into the ring).
  bool Has(const zmq::message_t& routing_id) const;
  size_t size() const { return peers_.size(); }
  // Some channel holds a message not yet received (no syscall).
  bool AnyIncoming() const;

 private:
  struct Peer {
    std::unique_ptr<ShmChannel> channel;
    std::string routing_id;
    std::string user_id;
  };
  void Close(size_t i, const absl::Status& why);
  void Reindex();

  const uint64_t ring_bytes_;
  SocketSender socket_;
  std::unique_ptr<ShmAcceptor> acceptor_;
  std::vector<Peer> peers_;
  absl::flat_hash_map<std::string, size_t> by_routing_id_;
};

}  // namespace ps

#endif  // PS_SERVER_SHM_PEERS_H_
