// A primary's links to backups on this host: the first message on a link
// offers a shared-memory channel (the backup grants it as it does to a
// worker: server/shm_peers.h); what is sent meanwhile waits, in order, and
// then goes through the channel, or through the socket where the backup is
// on another host, has shared memory off, or refuses. A channel that fails
// is closed and the link goes on over the socket: what was in the ring is
// the backup's, whose answers (or its departure from the view) settle it.

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/net/shm_handshake.h"
#include "glog/logging.h"
#include "server/replication/replicator.h"

namespace ps {
namespace {

// Blocks the server's loop while it lasts: a backup's acceptor answers at
// once when it answers at all (it is on this host).
constexpr absl::Duration kShmFetchTimeout = absl::Seconds(1);
// Offers' request ids, apart from the forwards' tokens (counted from 1).
constexpr uint64_t kOfferIds = uint64_t{1} << 63;

}  // namespace

absl::Status Replicator::SendTo(Link& link, int32_t rank, const Envelope& envelope,
                                std::vector<zmq::message_t> frames) {
  if (link.shm == Shm::kUntried) {
    link.shm = Shm::kOff;
    if (!shm_) LOG(INFO) << "server: backup server " << rank << " is reached through its socket (--shm=false here)";
    if (shm_ && envelope.sender != 0) {  // the offer goes as this server's node
      link.offer_id = kOfferIds | static_cast<uint32_t>(rank);
      if (SendOnSocket(link, rank, Envelope{kProtocolVersion, link.offer_id, envelope.sender, ShmOfferMsg{}}, {})
              .ok()) {
        link.shm = Shm::kOffered;
      }
    }
  }
  if (link.shm == Shm::kOffered) {
    link.queued.push_back(Queued{envelope, std::move(frames)});
    return absl::OkStatus();
  }
  if (link.shm == Shm::kOn) {
    std::vector<zmq::message_t> shared(frames.size());  // the same bytes, should the channel fail
    for (size_t i = 0; i < frames.size(); ++i) shared[i].copy(frames[i]);
    absl::Status s = link.channel->Send(envelope, std::move(frames));
    if (s.ok()) return s;
    CloseShm(link, rank, s);
    frames = std::move(shared);
  }
  return SendOnSocket(link, rank, envelope, std::move(frames));
}

absl::Status Replicator::SendOnSocket(Link& link, int32_t rank, const Envelope& envelope,
                                      std::vector<zmq::message_t> frames) {
  link.unsettled = true;  // a send may consume the notice of a reply (PollSet::AddSocketFd)
  absl::Status s = SendMessage(link.socket, nullptr, envelope, std::move(frames));
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("backup server ", rank, ": ", s.message()));
  return s;
}

void Replicator::OnShmAnswer(Link& link, int32_t rank, const Envelope& answer) {
  absl::StatusOr<std::unique_ptr<ShmChannel>> channel = ChannelFromAnswer(answer, kShmFetchTimeout);
  if (channel.ok()) {
    link.channel = *std::move(channel);
    // A message too large for the ring goes by the socket (and all after it).
    link.channel->set_oversize_sender([&link, rank, this](const Envelope& env, std::vector<zmq::message_t> frames) {
      return SendOnSocket(link, rank, env, std::move(frames));
    });
    link.shm = Shm::kOn;
    LOG(INFO) << "server: backup server " << rank << " is reached through shared memory";
  } else {
    link.shm = Shm::kOff;
    LOG(INFO) << "server: backup server " << rank << " is reached through its socket: " << channel.status();
  }
  std::vector<Queued> queued = std::move(link.queued);
  link.queued.clear();
  for (Queued& q : queued) {
    if (absl::Status s = SendTo(link, rank, q.envelope, std::move(q.frames)); !s.ok()) {
      LOG(ERROR) << "server: " << s;  // as a lost backup: its departure from the view settles what it owes
    }
  }
}

void Replicator::CloseShm(Link& link, int32_t rank, const absl::Status& why) {
  LOG(WARNING) << "server: shared-memory channel to backup server " << rank << " closed (" << why
               << "); its socket from now on";
  link.channel.reset();
  link.shm = Shm::kOff;
}

bool Replicator::AnyIncoming() const {
  for (const auto& [rank, link] : links_) {
    if (link.channel != nullptr && link.channel->HasIncoming()) return true;
  }
  return false;
}

int Replicator::shm_links() const {
  int n = 0;
  for (const auto& [rank, link] : links_) n += link.shm == Shm::kOn ? 1 : 0;
  return n;
}

}  // namespace ps
