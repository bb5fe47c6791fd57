#include "server/replicator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace ps {

void Replicator::SetCopies(const std::vector<Slice>& slices, const std::vector<std::vector<int32_t>>& copies) {
  copies_.clear();
  for (size_t i = 0; i < slices.size() && i < copies.size(); ++i) copies_[slices[i].key] = copies[i];
}

void Replicator::SetPeers(const ClusterViewMsg& view) {
  for (const NodeInfo& n : view.nodes) {
    if (n.role != Role::kServer || n.rank < 0) continue;
    auto it = links_.find(n.rank);
    if (it != links_.end() && it->second.address == n.address) continue;
    if (it != links_.end()) links_.erase(it);  // a replacement: a new link (and pending acks of the old one stay owed)
    links_.emplace(n.rank, Link{n.address, n.public_key, zmq::socket_t(), false});
  }
}

std::vector<int32_t> Replicator::BackupsOf(const PushRequestMsg& push, int32_t self_rank) const {
  std::vector<int32_t> backups;
  for (const SliceData& s : push.slices) {
    auto it = copies_.find(s.key);
    if (it == copies_.end() || it->second.empty() || it->second[0] != self_rank) continue;
    for (size_t j = 1; j < it->second.size(); ++j) {
      if (std::find(backups.begin(), backups.end(), it->second[j]) == backups.end()) backups.push_back(it->second[j]);
    }
  }
  std::sort(backups.begin(), backups.end());
  return backups;
}

absl::Status Replicator::Forward(uint64_t token, uint32_t self_node, int worker, const PushRequestMsg& push,
                                 const std::vector<zmq::message_t>& payloads, const std::vector<int32_t>& backups) {
  PushRequestMsg forwarded = push;
  forwarded.then_pull.reset();
  forwarded.for_worker = worker;
  for (int32_t rank : backups) {
    auto it = links_.find(rank);
    if (it == links_.end()) {
      return absl::UnavailableError(absl::StrCat("backup server ", rank, " is not in the view: cannot forward"));
    }
    Link& link = it->second;
    if (link.socket.handle() == nullptr) {
      auto socket = ConnectDealer(context_, link.address, security_, Traffic::kData, link.public_key);
      if (!socket.ok()) return socket.status();
      link.socket = *std::move(socket);
    }
    std::vector<zmq::message_t> copies;
    copies.reserve(payloads.size());
    for (const zmq::message_t& p : payloads) copies.emplace_back(p.data(), p.size());
    const Envelope env{kProtocolVersion, token, self_node, forwarded};
    link.unsettled = true;  // a send may consume the notice of a reply (PollSet::AddSocketFd)
    if (absl::Status s = SendMessage(link.socket, nullptr, env, std::move(copies)); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("forwarding to backup server ", rank, ": ", s.message()));
    }
  }
  pending_[token].waiting += static_cast<int>(backups.size());
  return absl::OkStatus();
}

void Replicator::AddToPoll(PollSet& poll, int tag) {
  for (auto& [rank, link] : links_) {
    if (link.socket.handle() != nullptr) poll.AddSocketFd(link.socket, tag + rank, link.unsettled);
  }
}

std::vector<uint64_t> Replicator::OnReady(PollSet& poll, int tag, std::vector<absl::Status>* errors) {
  std::vector<uint64_t> done;
  for (auto& [rank, link] : links_) {
    if (link.socket.handle() == nullptr || !poll.IsReady(tag + rank)) continue;
    const int32_t from = rank;
    (void)DrainMessages(
        link.socket, /*routed=*/false, 256,
        [&](RawMessage raw) {
          auto env = DecodeEnvelope(Bytes(raw.header));
          if (!env.ok()) {
            errors->push_back(env.status());
            return absl::OkStatus();
          }
          if (const auto* error = std::get_if<ErrorMsg>(&env->body)) {
            errors->push_back(absl::InternalError(absl::StrCat("backup server ", from, " refused forwarded push ",
                                                               env->request_id, ": ", error->message)));
          }
          auto it = pending_.find(env->request_id);
          if (it == pending_.end()) return absl::OkStatus();  // late: the token is settled
          if (--it->second.waiting == 0) {
            done.push_back(it->first);
            pending_.erase(it);
          }
          return absl::OkStatus();
        },
        &link.unsettled);
  }
  return done;
}

}  // namespace ps
