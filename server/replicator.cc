#include "server/replicator.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace ps {

void Replicator::SetCopies(const std::vector<Slice>& slices, const std::vector<std::vector<int32_t>>& copies) {
  for (size_t i = 0; i < slices.size() && i < copies.size(); ++i) copies_[slices[i].key] = copies[i];
}

std::vector<uint64_t> Replicator::OnView(const ClusterViewMsg& view) {
  if (!view.copies.empty()) {
    copies_.clear();
    for (size_t key = 0; key < view.copies.size(); ++key) copies_[static_cast<uint32_t>(key)] = view.copies[key];
  }
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
    for (uint64_t token : tokens) Answered(token, rank, absl::OkStatus(), &settled);
    it = links_.erase(it);
  }
  std::vector<uint64_t> done;
  for (const Settled& s : settled) done.push_back(s.token);
  return done;
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
    if (forwarded && (primary != forwarder || std::find(copies->begin(), copies->end(), self) == copies->end())) {
      return absl::FailedPreconditionError(absl::StrCat("server ", forwarder, " forwarded slice ", s.key,
                                                        ", whose primary is server ", primary,
                                                        " (a replaced primary, fenced by the view)"));
    }
  }
  return absl::OkStatus();
}

std::vector<int32_t> Replicator::BackupsOf(const PushRequestMsg& push, int32_t self) const {
  std::vector<int32_t> backups;
  for (const SliceData& s : push.slices) {
    const std::vector<int32_t>* copies = CopiesOf(s.key);
    if (copies == nullptr || (*copies)[0] != self) continue;
    for (size_t j = 1; j < copies->size(); ++j) {
      if (std::find(backups.begin(), backups.end(), (*copies)[j]) == backups.end()) backups.push_back((*copies)[j]);
    }
  }
  std::sort(backups.begin(), backups.end());
  return backups;
}

absl::Status Replicator::Forward(uint64_t token, uint32_t self_node, int32_t self, uint64_t view_epoch, int worker,
                                 const PushRequestMsg& push, const std::vector<zmq::message_t>& payloads,
                                 const std::vector<int32_t>& backups) {
  PushRequestMsg forwarded = push;
  forwarded.then_pull.reset();
  forwarded.for_worker = worker;
  if (forwarded.origin < 0) forwarded.origin = self;
  forwarded.view_epoch = view_epoch;
  Pending& pending = pending_[token];
  for (int32_t rank : backups) {
    auto it = links_.find(rank);
    if (it == links_.end()) continue;  // gone from the view: its copy with it
    Link& link = it->second;
    if (link.socket.handle() == nullptr) {
      auto socket = ConnectDealer(context_, link.address, security_, Traffic::kData, link.public_key);
      if (!socket.ok()) return socket.status();
      link.socket = *std::move(socket);
    }
    // The slices this backup holds a copy of, with their frames.
    forwarded.slices.clear();
    std::vector<zmq::message_t> frames;
    for (size_t i = 0; i < push.slices.size() && i < payloads.size(); ++i) {
      const std::vector<int32_t>* copies = CopiesOf(push.slices[i].key);
      if (copies == nullptr || std::find(copies->begin() + 1, copies->end(), rank) == copies->end()) continue;
      forwarded.slices.push_back(push.slices[i]);
      frames.emplace_back(payloads[i].data(), payloads[i].size());
    }
    const Envelope env{kProtocolVersion, token, self_node, forwarded};
    link.unsettled = true;  // a send may consume the notice of a reply (PollSet::AddSocketFd)
    if (absl::Status s = SendMessage(link.socket, nullptr, env, std::move(frames)); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("forwarding to backup server ", rank, ": ", s.message()));
    }
    pending.waiting.push_back(rank);
  }
  if (pending.waiting.empty()) pending_.erase(token);
  return absl::OkStatus();
}

void Replicator::AddToPoll(PollSet& poll, int tag) {
  for (auto& [rank, link] : links_) {
    if (link.socket.handle() != nullptr) poll.AddSocketFd(link.socket, tag + rank, link.unsettled);
  }
}

void Replicator::Answered(uint64_t token, int32_t rank, const absl::Status& status, std::vector<Settled>* settled) {
  auto it = pending_.find(token);
  if (it == pending_.end()) return;  // late: the token is settled
  Pending& p = it->second;
  auto at = std::find(p.waiting.begin(), p.waiting.end(), rank);
  if (at == p.waiting.end()) return;
  p.waiting.erase(at);
  if (p.status.ok() && !status.ok()) p.status = status;
  if (!p.waiting.empty()) return;
  settled->push_back(Settled{token, std::move(p.status)});
  pending_.erase(it);
}

std::vector<Replicator::Settled> Replicator::OnReady(PollSet& poll, int tag) {
  std::vector<Settled> settled;
  for (auto& [rank, link] : links_) {
    if (link.socket.handle() == nullptr || !poll.IsReady(tag + rank)) continue;
    const int32_t from = rank;
    (void)DrainMessages(
        link.socket, /*routed=*/false, 256,
        [&](RawMessage raw) {
          auto env = DecodeEnvelope(Bytes(raw.header));
          if (!env.ok()) {
            LOG(ERROR) << "server: undecodable answer from backup server " << from << ": " << env.status();
            return absl::OkStatus();
          }
          absl::Status status;
          if (const auto* error = std::get_if<ErrorMsg>(&env->body)) {
            ++refused_;
            status = absl::Status(error->code,
                                  absl::StrCat("backup server ", from, " refused the update: ", error->message));
            LOG(ERROR) << "server: " << status;
          }
          Answered(env->request_id, from, status, &settled);
          return absl::OkStatus();
        },
        &link.unsettled);
  }
  return settled;
}

}  // namespace ps
