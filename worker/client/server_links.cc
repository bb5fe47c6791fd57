#include "worker/client/server_links.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/net/transport.h"

namespace ps::client_internal {

absl::Status ServerLinks::Connect(const ClusterViewMsg& view, uint64_t max_replay_bytes) {
  links_.clear();
  links_.resize(view.num_servers);
  for (ServerLink& link : links_) link.replay = PushReplay(max_replay_bytes);
  for (const NodeInfo& n : view.nodes) {
    if (n.role == Role::kServer && n.rank >= 0 && n.rank < view.num_servers) {
      links_[n.rank].endpoint = n.address;
      links_[n.rank].public_key = n.public_key;
      links_[n.rank].node_id = n.node_id;
    }
  }
  for (ServerLink& link : links_) {
    PS_ASSIGN_OR_RETURN(link.socket, Dial(link.endpoint, link.public_key));
  }
  return absl::OkStatus();
}

absl::Status ServerLinks::Grow(const ClusterViewMsg& view, uint64_t max_replay_bytes, bool replicated) {
  const size_t before = links_.size();
  if (view.num_servers <= static_cast<int>(before)) return absl::OkStatus();
  links_.resize(view.num_servers);
  for (size_t r = before; r < links_.size(); ++r) {
    links_[r].replay = PushReplay(max_replay_bytes);
    if (replicated) links_[r].replay.set_replicated();
  }
  for (const NodeInfo& n : view.nodes) {
    if (n.role != Role::kServer || n.rank < static_cast<int>(before) || n.rank >= view.num_servers) continue;
    ServerLink& link = links_[n.rank];
    link.endpoint = n.address;
    link.public_key = n.public_key;
    link.node_id = n.node_id;
    PS_ASSIGN_OR_RETURN(link.socket, Dial(link.endpoint, link.public_key));
  }
  return absl::OkStatus();
}

absl::StatusOr<zmq::socket_t> ServerLinks::Dial(const std::string& endpoint, const std::string& public_key) const {
  PS_RETURN_IF_ERROR(security_->CheckEndpoint(endpoint, "server"));
  return ConnectDealer(*context_, endpoint, *security_, Traffic::kData, public_key);
}

absl::Status ServerLinks::Redial(int rank, const std::string& endpoint, const std::string& public_key) {
  ServerLink& link = links_[rank];
  absl::StatusOr<zmq::socket_t> fresh = Dial(endpoint, public_key);
  if (!fresh.ok()) return fresh.status();
  link.socket = *std::move(fresh);
  link.endpoint = endpoint;
  link.public_key = public_key;
  link.unsettled = true;
  return absl::OkStatus();
}

void ServerLinks::CloseSocket(int rank) {
  zmq::socket_t& s = links_[rank].socket;
  if (s) {
    s.set(zmq::sockopt::linger, 0);
    s.close();
  }
}

void ServerLinks::CloseAll() {
  for (size_t r = 0; r < links_.size(); ++r) CloseSocket(static_cast<int>(r));
  links_.clear();
}

absl::Status ServerLinks::Send(int rank, const Envelope& envelope, std::vector<zmq::message_t> payloads) {
  ServerLink& link = links_[rank];
  if (!link.socket) return absl::UnavailableError(absl::StrCat("server ", rank, " has no socket"));
  link.unsettled = true;
  return SendMessage(link.socket, nullptr, envelope, std::move(payloads));
}

bool ServerLinks::AnyUnsettled() const {
  for (const ServerLink& link : links_) {
    if (link.socket && link.unsettled) return true;
  }
  return false;
}

void ServerLinks::AddToPoll(PollSet& poll, bool sockets) const {
  for (size_t r = 0; r < links_.size(); ++r) {
    const ServerLink& link = links_[r];
    if (link.socket && sockets) poll.AddFd(link.socket.get(zmq::sockopt::fd), static_cast<int>(r));
    if (const ShmChannel* shm = link.shm.get()) {
      poll.AddFd(shm->wake_fd(), kShmTagBase - static_cast<int>(r));
      poll.AddFd(shm->peer_socket(), kShmTagBase - static_cast<int>(r));
    }
  }
}

}  // namespace ps::client_internal
