#include "worker/client/push_replay.h"

namespace ps {

std::vector<zmq::message_t> KeptPush::Frames() const {
  std::vector<zmq::message_t> out;
  if (!shared.empty()) {
    for (zmq::message_t& f : shared) out.emplace_back().copy(f);
    return out;
  }
  out.reserve(frames.size());
  for (const std::string& f : frames) out.emplace_back(f.data(), f.size());
  return out;
}

uint64_t PushReplay::Number(PushRequestMsg& push, std::vector<zmq::message_t>& payloads, bool owned) {
  push.seq = ++next_seq_;
  if (!keep_) return 0;
  KeptPush copy;
  copy.push = push;
  copy.push.then_pull.reset();
  copy.push.want_checkpoint = false;
  if (owned || (replicated_ && no_checkpoints_)) {
    for (zmq::message_t& p : payloads) copy.shared.emplace_back().copy(p);
  } else {
    copy.frames.reserve(payloads.size());
    for (const zmq::message_t& p : payloads) copy.frames.emplace_back(static_cast<const char*>(p.data()), p.size());
  }
  for (const zmq::message_t& p : payloads) copy.bytes += p.size();
  const uint64_t added = copy.bytes;
  bytes_ += added;
  kept_.emplace(push.seq, std::move(copy));
  if (!asked_checkpoint_ && bytes_ > max_bytes_ / 4) {
    push.want_checkpoint = true;
    asked_checkpoint_ = true;
  }
  return added;
}

uint64_t PushReplay::OnDurable(uint64_t durable) {
  if (replicated_) {
    if (durable == kNothingToKeep) {
      no_checkpoints_ = true;
      return 0;  // copies go as their pushes are answered
    }
    if (durable <= durable_) return 0;
    durable_ = durable;
    asked_checkpoint_ = false;  // answered: ask again once the copies pass a quarter anew
    uint64_t dropped = 0;
    for (auto it = kept_.begin(); it != kept_.end() && it->first <= durable;) {
      if (!it->second.acked) {
        ++it;
        continue;
      }
      dropped += it->second.bytes;
      it = kept_.erase(it);
    }
    bytes_ -= dropped;
    return dropped;
  }
  if (durable == 0 || (durable <= durable_ && durable != kNothingToKeep)) return 0;
  if (durable == kNothingToKeep) {
    if (!keep_) return 0;
    keep_ = false;
  }
  durable_ = durable;
  auto end = kept_.upper_bound(durable);
  uint64_t dropped = 0;
  for (auto it = kept_.begin(); it != end; ++it) dropped += it->second.bytes;
  kept_.erase(kept_.begin(), end);
  bytes_ -= dropped;
  asked_checkpoint_ = false;  // answered: past a quarter still (pushes sent while it was written), ask again
  return dropped;
}

uint64_t PushReplay::OnAcked(uint64_t seq) {
  if (!replicated_) return 0;
  auto it = kept_.find(seq);
  if (it == kept_.end()) return 0;
  if (!no_checkpoints_ && seq > durable_) {
    it->second.acked = true;
    return 0;
  }
  const uint64_t dropped = it->second.bytes;
  kept_.erase(it);
  bytes_ -= dropped;
  return dropped;
}

uint64_t PushReplay::Forget(uint64_t seq) {
  auto it = kept_.find(seq);
  if (it == kept_.end() || !replicated_) return 0;
  const uint64_t dropped = it->second.bytes;
  kept_.erase(it);
  bytes_ -= dropped;
  return dropped;
}

uint64_t PushReplay::Clear() {
  const uint64_t dropped = bytes_;
  kept_.clear();
  bytes_ = 0;
  return dropped;
}

}  // namespace ps
