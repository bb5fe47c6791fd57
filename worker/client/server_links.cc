#include "worker/client/server_links.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/net/transport.h"
#include "glog/logging.h"

namespace ps::client_internal {

absl::Status ServerLink::Refusal(int rank) const {
  if (!gave_up.ok()) return gave_up;
  if (failed_over) {
    return absl::UnavailableError(
        absl::StrCat("server ", rank, " (", endpoint, ") died; backups serve its slices now (--replicas)"));
  }
  return absl::OkStatus();
}

bool ServerLink::MarkDown(absl::Time now) {
  if (down) return false;
  down = true;
  down_since = now;
  return true;
}

std::vector<Held> ServerLink::TakeHeld() {
  std::vector<Held> taken = std::move(held);
  held.clear();
  return taken;
}

void ServerLink::FailHeld(const absl::Status& status) {
  for (Held& h : held) {
    if (h.op) FailOp(h.op, status);
  }
  held.clear();
}

bool ServerLink::GiveUpIfOverdue(int rank, absl::Time now, absl::Duration timeout) {
  if (!down || failed_over || !gave_up.ok() || now - down_since <= timeout) return false;
  gave_up = absl::UnavailableError(
      absl::StrCat("server ", rank, " (", endpoint, ") died ", absl::FormatDuration(now - down_since),
                   " ago and no replacement registered within ", absl::FormatDuration(timeout),
                   " (restart it with ps_server --restore_dir)"));
  LOG(ERROR) << "client: " << gave_up;
  FailHeld(gave_up);
  return true;
}

std::vector<Unsent> ServerLink::SettleShm(int rank, std::unique_ptr<ShmChannel> channel, const absl::Status& why,
                                          absl::Time now, absl::Duration retry_after) {
  shm_offer_id = 0;
  if (channel != nullptr) {
    LOG(INFO) << "client: server " << rank << " (" << endpoint
              << ") is on this host: messages go through shared memory (two rings of " << (channel->ring_bytes() >> 20)
              << " MiB)";
    shm = std::move(channel);
    shm_state = ShmState::kOn;
  } else if (absl::IsResourceExhausted(why)) {
    // A busy server (channels or offers at their limit): ask again later.
    LOG(INFO) << "client: server " << rank << " (" << endpoint << ") has no shared-memory channel to spare now ("
              << why.message() << "); asking again in " << absl::FormatDuration(retry_after);
    shm_state = ShmState::kUntried;
    shm_retry_at = now + retry_after;
  } else {
    LOG(INFO) << "client: server " << rank << " (" << endpoint << ") stays on its socket: " << why.message();
    shm_state = ShmState::kOff;
  }
  std::vector<Unsent> waited = std::move(awaiting_shm);
  awaiting_shm.clear();
  return waited;
}

bool ServerLink::DropShm(int rank, const absl::Status& why, bool retry) {
  const bool open = shm != nullptr;
  // A server that stopped (the job's end, or a death the scheduler reports)
  // closes its end: worth a line, not a warning. Anything else is a fault.
  if (open && absl::IsUnavailable(why)) {
    LOG(INFO) << "client: server " << rank << "'s shared-memory channel closed (" << why.message()
              << "); its requests go through the socket";
  } else if (open && !absl::IsCancelled(why)) {
    LOG(WARNING) << "client: server " << rank << "'s shared-memory channel closed (" << why.message()
                 << "); its requests go through the socket";
  }
  shm.reset();
  awaiting_shm.clear();
  shm_offer_id = 0;
  shm_state = retry ? ShmState::kUntried : ShmState::kOff;
  return open;
}

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
