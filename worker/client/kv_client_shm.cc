// The client's same-host data plane: the first request to a server asks it
// for a shared-memory channel (common/net/shm_handshake.h); requests wait for
// the answer, then go through the channel where the server proved to be on
// this host, and through the socket otherwise. A channel that fails is
// dropped, the requests in flight on it go again through the socket (the
// server drops a push it applied already, by its sequence number), and the
// client goes on over the socket; it asks again after a reconnection.

#include "absl/strings/str_cat.h"
#include "common/net/shm_handshake.h"
#include "glog/logging.h"
#include "worker/client/kv_client_internal.h"

namespace ps::client_internal {
namespace {

constexpr absl::Duration kShmOfferTimeout = absl::Seconds(5);
// Blocks the I/O thread while it lasts: the acceptor answers at once when
// it answers at all.
constexpr absl::Duration kShmFetchTimeout = absl::Seconds(1);
constexpr absl::Duration kShmRetryAfter = absl::Seconds(5);

}  // namespace

void IoThread::OfferShm(int target) {
  ServerLink& link = links_[target];
  const uint32_t node = scheduler_.node_id();
  if (!options_.shm) {
    link.shm_state = ShmState::kOff;
    return;
  }
  if (node == 0) return;  // not registered yet: this request goes by the socket
  link.shm_offer_id = in_flight_.NextId();
  Envelope offer{kProtocolVersion, link.shm_offer_id, node, ShmOfferMsg{}};
  offer.incarnation = scheduler_.incarnation();
  if (absl::Status s = SendOn(target, offer); !s.ok()) {
    link.shm_state = ShmState::kOff;
    return;
  }
  link.shm_state = ShmState::kOffered;
  link.shm_offer_deadline = Now() + kShmOfferTimeout;
}

void IoThread::OnShmAnswer(int target, const Envelope& env) {
  absl::StatusOr<std::unique_ptr<ShmChannel>> channel = ChannelFromAnswer(env, kShmFetchTimeout);
  if (!channel.ok()) {
    ShmSettled(target, nullptr, channel.status());
    return;
  }
  // The channel calls this from its Send, which only the I/O state's owner
  // (io_mu_ held) makes.
  (*channel)->set_oversize_sender(
      [this, target](const Envelope& e, std::vector<zmq::message_t> payloads)
          ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) { return SendOn(target, e, std::move(payloads)); });
  ShmSettled(target, *std::move(channel), absl::OkStatus());
}

void IoThread::ShmSettled(int target, std::unique_ptr<ShmChannel> channel, const absl::Status& why) {
  const bool on = channel != nullptr;
  std::vector<Unsent> waited = links_[target].SettleShm(target, std::move(channel), why, Now(), kShmRetryAfter);
  if (on) {
    shm_servers_.fetch_add(1, std::memory_order_relaxed);
    poll_items_stale_ = true;
  }
  for (Unsent& u : waited) {
    if (in_flight_.contains(u.id)) Transmit(target, u.id, u.envelope, std::move(u.payloads));
  }
}

void IoThread::PollShm(int target) {
  ServerLink& link = links_[target];
  if (link.shm == nullptr) return;
  std::vector<RawMessage> received;
  absl::Status s = link.shm->Poll(256, [&](RawMessage raw) { received.push_back(std::move(raw)); });
  if (!s.ok()) CloseShm(target, s, /*retry=*/false);
  for (RawMessage& raw : received) OnMessage(target, std::move(raw));
}

void IoThread::CloseShm(int target, const absl::Status& why, bool retry) {
  // Requests held for an offer stay in flight: what drops the socket
  // decides their fate (failed, or held for a replacement server).
  if (links_[target].DropShm(target, why, retry && options_.shm)) shm_servers_.fetch_sub(1, std::memory_order_relaxed);
  if (!absl::IsCancelled(why)) ResendOffShm(target);
  poll_items_stale_ = true;
}

void IoThread::ResendOffShm(int target) {
  std::vector<uint64_t> failed;
  size_t resent = 0;
  for (auto& [id, req] : in_flight_) {
    if (req.target != target || !req.via_shm) continue;
    req.via_shm = false;
    if (SendOn(target, req.envelope, std::move(req.shm_frames)).ok()) {
      ++resent;
    } else {
      failed.push_back(id);
    }
  }
  for (uint64_t id : failed) {
    Finish(id,
           absl::UnavailableError(absl::StrCat("server ", target, ": its shared-memory channel closed and the ",
                                               "socket took no request")),
           nullptr);
  }
  if (resent > 0) {
    LOG(INFO) << "client: server " << target << ": " << resent
              << " requests in flight on the closed channel went again through the socket";
    recovery_.requests_resent_off_shm += resent;
  }
}

void IoThread::ExpireShmOffers() {
  const absl::Time now = Now();
  for (size_t r = 0; r < links_.size(); ++r) {
    if (links_[r].ShmOfferExpired(now)) {
      ShmSettled(static_cast<int>(r), nullptr,
                 absl::DeadlineExceededError(
                     absl::StrCat("no answer to the offer within ", absl::FormatDuration(kShmOfferTimeout))));
    }
  }
}

}  // namespace ps::client_internal

namespace ps::client_internal {

absl::Duration IoThread::SpinBeforePoll(absl::Duration wait) {
  if (shm_servers_.load(std::memory_order_relaxed) == 0 || in_flight_.empty()) return wait;
  const bool got = SpinUntil(options_.shm_spin, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) {
    if (queue_.MayHold()) return true;
    for (const ServerLink& link : links_) {
      if (link.shm != nullptr && link.shm->HasIncoming()) return true;
    }
    return false;
  });
  return got ? absl::ZeroDuration() : wait;
}

}  // namespace ps::client_internal
