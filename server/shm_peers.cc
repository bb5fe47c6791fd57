#include "server/shm_peers.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"

namespace ps {
namespace {

std::string Id(const zmq::message_t& m) { return std::string(static_cast<const char*>(m.data()), m.size()); }

}  // namespace

absl::Status ShmPeers::Start() {
  if (ring_bytes_ == 0) return absl::OkStatus();
  PS_ASSIGN_OR_RETURN(acceptor_, ShmAcceptor::Start(ring_bytes_));
  return absl::OkStatus();
}

absl::StatusOr<ShmGrantMsg> ShmPeers::Offer(const RawMessage& raw) {
  if (acceptor_ == nullptr) {
    return absl::FailedPreconditionError("shared memory is off on this server (--shm=false)");
  }
  const std::string id = Id(raw.routing_id);
  if (auto it = by_routing_id_.find(id); it != by_routing_id_.end()) {
    Close(it->second, absl::CancelledError("the worker asked for a new channel"));
    Reindex();
  }
  if (peers_.size() >= kMaxChannels) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this server has ", peers_.size(), " shared-memory channels open already; use the socket"));
  }
  return acceptor_->Offer(id, raw.user_id);
}

void ShmPeers::AddToPoll(PollSet& poll, int base) {
  if (acceptor_ == nullptr) return;
  poll.AddFd(acceptor_->ready_fd(), base);
  for (size_t i = 0; i < peers_.size(); ++i) {
    poll.AddFd(peers_[i].channel->wake_fd(), base + 1 + static_cast<int>(i));
    poll.AddFd(peers_[i].channel->peer_socket(), base + 1 + static_cast<int>(i));
  }
}

void ShmPeers::OnReady(const PollSet& poll, int base, absl::FunctionRef<void(RawMessage)> handle) {
  if (acceptor_ == nullptr) return;
  const size_t polled = peers_.size();  // the tags of this round
  std::vector<RawMessage> received;
  bool closed = false;
  for (size_t i = 0; i < polled; ++i) {
    if (!poll.IsReady(base + 1 + static_cast<int>(i))) continue;
    Peer& peer = peers_[i];
    absl::Status s = peer.channel->Poll(64, [&](RawMessage raw) {
      raw.routing_id = zmq::message_t(peer.routing_id.data(), peer.routing_id.size());
      raw.user_id = peer.user_id;
      received.push_back(std::move(raw));
    });
    if (!s.ok()) {
      Close(i, s);
      closed = true;
    }
  }
  if (poll.IsReady(base)) {
    for (ShmAcceptor::Ready& ready : acceptor_->TakeReady()) {
      ready.channel->set_oversize_sender(
          [this, id = ready.routing_id](const Envelope& env, std::vector<zmq::message_t> payloads) {
            return socket_(id, env, std::move(payloads));
          });
      LOG(INFO) << "server: a worker on this host now exchanges messages through shared memory (two rings of "
                << (ready.channel->ring_bytes() >> 20) << " MiB)";
      peers_.push_back(Peer{std::move(ready.channel), std::move(ready.routing_id), std::move(ready.user_id)});
      closed = true;  // reindex
    }
  }
  if (closed) Reindex();
  for (RawMessage& raw : received) handle(std::move(raw));
}

bool ShmPeers::Has(const zmq::message_t& routing_id) const {
  return !by_routing_id_.empty() && by_routing_id_.contains(Id(routing_id));
}

bool ShmPeers::Send(const zmq::message_t& routing_id, const Envelope& envelope, std::vector<zmq::message_t>& payloads,
                    bool views) {
  if (by_routing_id_.empty()) return false;
  auto it = by_routing_id_.find(Id(routing_id));
  if (it == by_routing_id_.end()) return false;
  // A worker that stops reading its replies loses its channel, not the
  // server's memory: at most four rings' worth wait.
  if (absl::Status s = peers_[it->second].channel->Send(envelope, std::move(payloads), 4 * ring_bytes_, views);
      !s.ok()) {
    Close(it->second, s);
    Reindex();
  }
  return true;
}

bool ShmPeers::AnyIncoming() const {
  for (const Peer& p : peers_) {
    if (p.channel->HasIncoming()) return true;
  }
  return false;
}

void ShmPeers::Close(size_t i, const absl::Status& why) {
  Peer& peer = peers_[i];
  if (peer.channel == nullptr) return;
  if (absl::IsUnavailable(why) || absl::IsCancelled(why)) {
    VLOG(1) << "server: a shared-memory channel closed: " << why.message();
  } else {
    LOG(WARNING) << "server: closed a worker's shared-memory channel after " << peer.channel->messages_received()
                 << " messages: " << why;
  }
  peer.channel.reset();
}

void ShmPeers::Reindex() {
  std::erase_if(peers_, [](const Peer& p) { return p.channel == nullptr; });
  by_routing_id_.clear();
  for (size_t i = 0; i < peers_.size(); ++i) by_routing_id_[peers_[i].routing_id] = i;
}

}  // namespace ps
