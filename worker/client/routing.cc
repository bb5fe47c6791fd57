#include "worker/client/routing.h"

#include <algorithm>
#include <utility>

namespace ps::client_internal {
namespace {

bool AnyIn(const std::vector<uint32_t>& keys, const absl::flat_hash_set<uint32_t>& set) {
  return std::any_of(keys.begin(), keys.end(), [&](uint32_t k) { return set.contains(k); });
}

}  // namespace

std::vector<uint32_t> SliceKeys(const Body& body) {
  std::vector<uint32_t> keys;
  const PullRequestMsg* pull = std::get_if<PullRequestMsg>(&body);
  if (const auto* push = std::get_if<PushRequestMsg>(&body)) {
    for (const SliceData& s : push->slices) keys.push_back(s.key);
    if (push->then_pull.has_value()) pull = &*push->then_pull;
  }
  if (pull != nullptr) {
    keys.insert(keys.end(), pull->keys.begin(), pull->keys.end());
    for (const RowsRequest& rows : pull->rows) keys.push_back(rows.key);
  }
  return keys;
}

bool Routing::TakeView(const ClusterViewMsg& view) {
  epoch_ = view.epoch;
  if (view.copies.empty()) return false;
  copies_ = view.copies;
  // --elastic with one copy each: a move re-routes pushes as a failover does.
  const bool made = !replicated_;
  replicated_ = true;
  return made;
}

bool Routing::LeadsAny(int rank) const {
  return std::any_of(copies_.begin(), copies_.end(),
                     [&](const std::vector<int32_t>& c) { return !c.empty() && c[0] == rank; });
}

bool Routing::Misrouted(const Envelope& envelope, int target) const {
  if (copies_.empty()) return false;
  for (uint32_t key : SliceKeys(envelope.body)) {
    if (Leader(key, target) != target) return true;
  }
  return false;
}

std::vector<Moved> Routing::TakeMovedDue(absl::Time now) {
  std::vector<Moved> due;
  if (moved_.empty()) return due;
  std::vector<Moved> waiting = std::move(moved_);
  moved_.clear();
  for (Moved& m : waiting) {
    if (now >= m.deadline) {
      FailOp(m.held.op, m.refusal);
      continue;
    }
    const bool newer = epoch_ > m.sent_epoch;  // a view came since it was routed
    if (epoch_ < m.refused_epoch || (!newer && now < m.retry_at)) {
      moved_.push_back(std::move(m));
    } else {
      due.push_back(std::move(m));
    }
  }
  return due;
}

void Routing::AddMovedKeys(absl::flat_hash_set<uint32_t>& keys) const {
  for (const Moved& m : moved_) {
    for (uint32_t k : SliceKeys(m.held.envelope.body)) keys.insert(k);
  }
}

bool Routing::Fence(Outgoing& out, KeysInFlight in_flight, absl::Time deadline) {
  const std::vector<uint32_t> keys = SliceKeys(out.envelope.body);
  if (keys.empty()) return false;
  absl::flat_hash_set<uint32_t> held = in_flight();
  AddMovedKeys(held);
  for (const Fenced& f : fenced_) {
    for (uint32_t k : SliceKeys(f.out.envelope.body)) held.insert(k);
  }
  if (!AnyIn(keys, held)) return false;
  fenced_.push_back(Fenced{std::move(out), deadline});
  return true;
}

void Routing::ReleaseFenced(absl::Time now, KeysInFlight in_flight, absl::FunctionRef<void(Outgoing&)> send) {
  if (fenced_.empty()) return;
  absl::flat_hash_set<uint32_t> held = in_flight();
  AddMovedKeys(held);
  std::deque<Fenced> waiting = std::move(fenced_);
  fenced_.clear();
  for (Fenced& f : waiting) {
    const std::vector<uint32_t> keys = SliceKeys(f.out.envelope.body);
    if (now >= f.deadline) {
      FailOp(f.out.op, absl::DeadlineExceededError(
                           "the request waited past its deadline behind an earlier request for its slices, which a "
                           "move sends to their new server"));
      continue;
    }
    if (AnyIn(keys, held)) {
      for (uint32_t k : keys) held.insert(k);  // a later request for these waits behind this one
      fenced_.push_back(std::move(f));
      continue;
    }
    // Sent by the current view, it leaves nothing in transit, unless `send`
    // fenced it again (then it holds back the rest, as above).
    const size_t before = fenced_.size();
    send(f.out);
    if (fenced_.size() > before) held.insert(keys.begin(), keys.end());
  }
}

void Routing::FailFenced(const absl::Status& status) {
  for (Fenced& f : fenced_) FailOp(f.out.op, status);
  fenced_.clear();
}

}  // namespace ps::client_internal
