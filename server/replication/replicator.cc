#include "server/replication/replicator.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"

namespace ps {

void Replicator::SetCopies(const std::vector<Slice>& slices, const std::vector<std::vector<int32_t>>& copies) {
  for (size_t i = 0; i < slices.size() && i < copies.size(); ++i) copies_[slices[i].key] = copies[i];
}

void Replicator::TakeCopies(const ClusterViewMsg& view, int32_t self) {
  if (view.copies.empty()) return;
  copies_.clear();
  for (size_t key = 0; key < view.copies.size(); ++key) copies_[static_cast<uint32_t>(key)] = view.copies[key];
  // Copies the view lists here now are ordinary backups (a view sent
  // before the copy was complete does not list it yet).
  absl::erase_if(held_, [&](uint32_t key) {
    const std::vector<int32_t>* copies = CopiesOf(key);
    return copies != nullptr && std::find(copies->begin(), copies->end(), self) != copies->end();
  });
  for (auto& [key, ranks] : joining_) {
    const std::vector<int32_t>* copies = CopiesOf(key);
    if (copies == nullptr) continue;
    std::erase_if(ranks, [&](int32_t r) { return std::find(copies->begin(), copies->end(), r) != copies->end(); });
  }
  absl::erase_if(joining_, [](const auto& entry) { return entry.second.empty(); });
  std::erase_if(excluded_, [&](const std::pair<uint32_t, int32_t>& e) {
    const std::vector<int32_t>* copies = CopiesOf(e.first);
    return copies == nullptr || std::find(copies->begin(), copies->end(), e.second) == copies->end();
  });
}

std::vector<Replicator::Settled> Replicator::OnView(const ClusterViewMsg& view, int32_t self) {
  TakeCopies(view, self);
  absl::flat_hash_set<int32_t> live;
  for (const NodeInfo& n : view.nodes) {
    if (n.role != Role::kServer || n.rank < 0) continue;
    live.insert(n.rank);
    auto it = links_.find(n.rank);
    if (it != links_.end() && it->second.address == n.address) continue;
    if (it != links_.end()) links_.erase(it);  // a replacement: a new link
    links_.emplace(n.rank, Link{n.address, n.public_key, zmq::socket_t(), false});
  }
  std::vector<Settled> settled;
  for (auto it = links_.begin(); it != links_.end();) {
    if (live.contains(it->first)) {
      ++it;
      continue;
    }
    // A backup that left owes nothing: its copies are gone from the view.
    const int32_t rank = it->first;
    std::vector<uint64_t> tokens;
    for (const auto& [token, p] : pending_) {
      if (std::find(p.waiting.begin(), p.waiting.end(), rank) != p.waiting.end()) tokens.push_back(token);
    }
    for (uint64_t token : tokens) {
      const absl::Status left =
          pending_[token].copy
              ? absl::UnavailableError(absl::StrCat("server ", rank, " left before its copy was complete"))
              : absl::OkStatus();
      Answered(token, rank, left, &settled);
    }
    for (auto& [key, ranks] : joining_) std::erase_if(ranks, [&](int32_t r) { return r == rank; });
    it = links_.erase(it);
  }
  return settled;
}

absl::Status Replicator::CheckLeads(const std::vector<uint32_t>& keys, int32_t self) const {
  for (uint32_t key : keys) {
    const std::vector<int32_t>* copies = CopiesOf(key);
    if (copies != nullptr && (*copies)[0] != self) {
      return absl::FailedPreconditionError(absl::StrCat("slice ", key, " is served by server ", (*copies)[0],
                                                        " now, not by server ", self,
                                                        " (the sender acts on an older cluster view)"));
    }
  }
  return absl::OkStatus();
}

absl::Status Replicator::CheckApply(const PushRequestMsg& push, int32_t self, int32_t forwarder) const {
  const bool forwarded = push.for_worker >= 0;
  if (!replicated()) {
    if (!forwarded) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("server ", forwarder, " forwarded a push, but this server holds no backups (--replicas 1)"));
  }
  for (const SliceData& s : push.slices) {
    const std::vector<int32_t>* copies = CopiesOf(s.key);
    if (copies == nullptr) continue;  // not a slice of this job: the store names it
    const int32_t primary = (*copies)[0];
    if (!forwarded && primary != self) {
      return absl::FailedPreconditionError(absl::StrCat("slice ", s.key, " is served by server ", primary,
                                                        " now, not by server ", self,
                                                        " (the sender acts on an older cluster view)"));
    }
    const bool holds = std::find(copies->begin(), copies->end(), self) != copies->end() || held_.contains(s.key);
    if (forwarded && (primary != forwarder || !holds)) {
      return absl::FailedPreconditionError(absl::StrCat("server ", forwarder, " forwarded slice ", s.key,
                                                        ", whose primary is server ", primary,
                                                        " (a replaced primary, fenced by the view)"));
    }
  }
  return absl::OkStatus();
}

std::vector<int32_t> Replicator::Recipients(uint32_t key) const {
  std::vector<int32_t> backups;
  const std::vector<int32_t>* copies = CopiesOf(key);
  if (copies == nullptr) return backups;
  for (auto it = copies->begin() + 1; it != copies->end(); ++it) {
    if (!excluded_.contains({key, *it})) backups.push_back(*it);
  }
  if (auto it = joining_.find(key); it != joining_.end()) {
    for (int32_t r : it->second) {
      if (std::find(backups.begin(), backups.end(), r) == backups.end()) backups.push_back(r);
    }
  }
  return backups;
}

std::vector<int32_t> Replicator::BackupsOfKey(uint32_t key, int32_t self) const {
  return IsPrimary(key, self) ? Recipients(key) : std::vector<int32_t>();
}

std::vector<int32_t> Replicator::BackupsOf(const PushRequestMsg& push, int32_t self) const {
  std::vector<int32_t> backups;
  for (const SliceData& s : push.slices) {
    for (int32_t r : BackupsOfKey(s.key, self)) {
      if (std::find(backups.begin(), backups.end(), r) == backups.end()) backups.push_back(r);
    }
  }
  std::sort(backups.begin(), backups.end());
  return backups;
}

absl::StatusOr<Replicator::Link*> Replicator::LinkTo(int32_t rank) {
  auto it = links_.find(rank);
  if (it == links_.end()) return nullptr;
  Link& link = it->second;
  if (link.socket.handle() == nullptr) {
    PS_ASSIGN_OR_RETURN(link.socket, ConnectDealer(context_, link.address, security_, Traffic::kData, link.public_key));
  }
  return &link;
}

absl::Status Replicator::Forward(uint64_t token, uint32_t self_node, int32_t self, uint64_t view_epoch, int worker,
                                 const PushRequestMsg& push, std::vector<zmq::message_t>& payloads,
                                 const std::vector<int32_t>& backups) {
  PushRequestMsg forwarded = push;
  forwarded.then_pull.reset();
  forwarded.for_worker = worker;
  if (forwarded.origin < 0) forwarded.origin = self;
  forwarded.view_epoch = view_epoch;
  Pending& pending = pending_[token];
  for (const SliceData& s : push.slices) pending.keys.push_back(s.key);
  for (int32_t rank : backups) {
    PS_ASSIGN_OR_RETURN(Link * link, LinkTo(rank));
    if (link == nullptr) continue;  // gone from the view: its copy with it
    // The slices this backup holds a copy of, with their frames.
    forwarded.slices.clear();
    std::vector<zmq::message_t> frames;
    const size_t per_slice = push.step_sum ? 2 : 1;  // a step's sum and its record (server/store/step_forwarding.h)
    for (size_t i = 0; i < push.slices.size() && per_slice * i < payloads.size(); ++i) {
      const std::vector<int32_t> of = BackupsOfKey(push.slices[i].key, self);
      if (std::find(of.begin(), of.end(), rank) == of.end()) continue;
      forwarded.slices.push_back(push.slices[i]);
      for (size_t f = per_slice * i; f < per_slice * (i + 1) && f < payloads.size(); ++f) {
        frames.emplace_back().copy(payloads[f]);  // shares the frame, no copy of its bytes
      }
    }
    const Envelope env{kProtocolVersion, token, self_node, forwarded};
    if (absl::Status s = SendTo(*link, rank, env, std::move(frames)); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("forwarding to backup server ", rank, ": ", s.message()));
    }
    pending.waiting.push_back(rank);
  }
  if (pending.waiting.empty()) pending_.erase(token);
  return absl::OkStatus();
}

absl::Status Replicator::SendCopy(uint64_t token, uint32_t self_node, int32_t rank, const SliceCopyMsg& copy,
                                  SliceImage image) {
  PS_ASSIGN_OR_RETURN(Link * link, LinkTo(rank));
  if (link == nullptr) return absl::FailedPreconditionError(absl::StrCat("server ", rank, " is not in the view"));
  std::vector<zmq::message_t> frames;
  frames.emplace_back(image.image.data(), image.image.size());
  frames.emplace_back(image.disk_rows.data(), image.disk_rows.size());
  if (absl::Status s = SendTo(*link, rank, Envelope{kProtocolVersion, token, self_node, copy}, std::move(frames));
      !s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("sending server ", rank, " its copy of slice ", copy.key, ": ", s.message()));
  }
  // From now on every update of the slice goes to it too, in order after the image.
  std::vector<int32_t>& joining = joining_[copy.key];
  if (std::find(joining.begin(), joining.end(), rank) == joining.end()) joining.push_back(rank);
  pending_[token] = Pending{{rank}, absl::OkStatus(), /*copy=*/true, {copy.key}};
  return absl::OkStatus();
}

void Replicator::DropJoining(uint32_t key, int32_t rank) {
  auto it = joining_.find(key);
  if (it == joining_.end()) return;
  std::erase_if(it->second, [&](int32_t r) { return r == rank; });
  if (it->second.empty()) joining_.erase(it);
}

ReplicationStats Replicator::Stats(int32_t self, const std::vector<uint32_t>& held) const {
  ReplicationStats stats;
  for (uint32_t key : held) {
    const std::vector<int32_t>* copies = CopiesOf(key);
    if (copies == nullptr) continue;
    ++((*copies)[0] == self ? stats.led : stats.backups);
  }
  for (const auto& [rank, link] : links_) {
    if (rank != self) stats.unacknowledged[rank] = 0;
  }
  for (const auto& [token, p] : pending_) {
    for (int32_t r : p.waiting) ++stats.unacknowledged[r];
  }
  stats.refused = refused_;
  return stats;
}

void Replicator::AddToPoll(PollSet& poll, int tag) {
  for (auto& [rank, link] : links_) {
    if (link.socket.handle() != nullptr) poll.AddSocketFd(link.socket, tag + rank, link.unsettled);
    if (link.channel != nullptr) {
      poll.AddFd(link.channel->wake_fd(), tag + kChannelTags + rank);
      poll.AddFd(link.channel->peer_socket(), tag + kChannelTags + rank);
    }
  }
}

void Replicator::Answered(uint64_t token, int32_t rank, const absl::Status& status, std::vector<Settled>* settled,
                          const std::vector<uint32_t>& named) {
  // A refusal after the acknowledgement, of the forward's slices `keys`
  // (or of those it named).
  const auto late = [&](std::vector<uint32_t> keys) {
    Settled s{token, status, /*late=*/true, rank, std::move(keys)};
    if (!named.empty()) {
      s.named = true;
      if (s.keys.empty()) s.keys = named;  // a forward too old to be remembered
      std::erase_if(s.keys, [&](uint32_t k) { return std::find(named.begin(), named.end(), k) == named.end(); });
    }
    settled->push_back(std::move(s));
  };
  auto it = pending_.find(token);
  if (it == pending_.end()) {  // settled already
    if (status.ok()) return;
    auto keys = settled_keys_.find(token);
    late(keys != settled_keys_.end() ? keys->second : std::vector<uint32_t>());
    return;
  }
  Pending& p = it->second;
  auto at = std::find(p.waiting.begin(), p.waiting.end(), rank);
  if (at == p.waiting.end()) {
    // Acknowledged already, others not yet.
    if (!status.ok() && !p.copy) late(p.keys);
    return;
  }
  p.waiting.erase(at);
  // A copy refused: no more updates go to it (they were sent after its
  // image, so its answers to them come after this one and are refusals).
  if (p.copy && !status.ok()) DropJoining(p.keys[0], rank);
  const bool failed_copy = !p.copy && !status.ok() && std::none_of(p.keys.begin(), p.keys.end(), [&](uint32_t key) {
    const std::vector<int32_t> gets = Recipients(key);
    return std::find(gets.begin(), gets.end(), rank) != gets.end();
  });
  if (failed_copy) {
    LOG(INFO) << "server: server " << rank << " refused an update of slices whose copy it failed to take: " << status;
  } else if (p.status.ok() && !status.ok()) {
    p.status = status;
  }
  if (!p.waiting.empty()) return;
  settled->push_back(Settled{token, std::move(p.status)});
  if (!p.copy) {  // for a refusal that may follow its acknowledgement
    settled_keys_[token] = std::move(p.keys);
    if (settled_keys_.size() > kSettledKeys) settled_keys_.erase(settled_keys_.begin());
  }
  pending_.erase(it);
}

std::vector<Replicator::Settled> Replicator::OnReady(PollSet& poll, int tag) {
  std::vector<Settled> settled;
  for (auto& [rank, link] : links_) {
    const int32_t from = rank;
    if (link.channel != nullptr && poll.IsReady(tag + kChannelTags + rank)) {
      absl::Status s = link.channel->Poll(256, [&](RawMessage raw) { OnAnswer(from, raw, &settled); });
      if (!s.ok()) CloseShm(link, rank, s);
    }
    if (link.socket.handle() == nullptr || !poll.IsReady(tag + rank)) continue;
    (void)DrainMessages(
        link.socket, /*routed=*/false, 256,
        [&](RawMessage raw) {
          OnAnswer(from, raw, &settled);
          return absl::OkStatus();
        },
        &link.unsettled);
  }
  return settled;
}

void Replicator::OnAnswer(int32_t from, const RawMessage& raw, std::vector<Settled>* settled) {
  auto env = DecodeEnvelope(Bytes(raw.header));
  if (!env.ok()) {
    LOG(ERROR) << "server: undecodable answer from backup server " << from << ": " << env.status();
    return;
  }
  Link& link = links_.at(from);
  if (link.shm == Shm::kOffered && env->request_id == link.offer_id) {
    OnShmAnswer(link, from, *env);
    return;
  }
  absl::Status status;
  const auto* error = std::get_if<ErrorMsg>(&env->body);
  if (error != nullptr) {
    ++refused_;
    status = absl::Status(error->code, absl::StrCat("backup server ", from, " refused the update: ", error->message));
    LOG(ERROR) << "server: " << status;
  }
  Answered(env->request_id, from, status, settled, error != nullptr ? error->slices : std::vector<uint32_t>());
}

}  // namespace ps
