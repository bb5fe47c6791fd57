// The fence of a worker's requests across a move (IoThread, see
// kv_client_internal.h): a request for slices that an earlier request of
// this worker still holds in transit waits behind it, so that each slice's
// server takes this worker's requests in the order they were made. Without
// it, a pull refused by the server a slice just left (or still in flight to
// it) is routed again after a push the worker made later, which went
// straight to the new server: with admission after several pulls
// (TableSpec::admit_after), that push can find its row not admitted yet.

#include <algorithm>

#include "worker/client/kv_client_internal.h"

namespace ps::client_internal {

namespace {

// The slice keys `body` pushes or pulls (none: a request for no slice).
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

bool AnyIn(const std::vector<uint32_t>& keys, const absl::flat_hash_set<uint32_t>& set) {
  return std::any_of(keys.begin(), keys.end(), [&](uint32_t k) { return set.contains(k); });
}

}  // namespace

absl::flat_hash_set<uint32_t> IoThread::KeysInTransit() const {
  absl::flat_hash_set<uint32_t> keys;
  for (const Moved& m : moved_) {
    for (uint32_t k : SliceKeys(m.held.envelope.body)) keys.insert(k);
  }
  for (const auto& [id, f] : in_flight_) {
    // Routed by an older view, to a live server (a dead one's requests
    // fail over in their own order): its slices that another server leads now.
    if (f.view_epoch >= view_epoch_ || f.target < 0 || f.target >= static_cast<int>(links_.size()) ||
        links_[f.target].failed_over) {
      continue;
    }
    for (uint32_t k : SliceKeys(f.envelope.body)) {
      if (Route(k, f.target) != f.target) keys.insert(k);
    }
  }
  return keys;
}

bool IoThread::Fence(Outgoing& out) {
  if (copies_.empty()) return false;  // no slice moves
  const uint64_t epoch = view_epoch_;
  const bool older = std::any_of(in_flight_.begin(), in_flight_.end(), [epoch](const auto& entry) {
    return entry.second.target >= 0 && entry.second.view_epoch < epoch;
  });
  if (fenced_.empty() && moved_.empty() && !older) return false;
  const std::vector<uint32_t> keys = SliceKeys(out.envelope.body);
  if (keys.empty()) return false;
  absl::flat_hash_set<uint32_t> held = KeysInTransit();
  for (const Fenced& f : fenced_) {
    for (uint32_t k : SliceKeys(f.out.envelope.body)) held.insert(k);
  }
  if (!AnyIn(keys, held)) return false;
  fenced_.push_back(Fenced{std::move(out), runtime_.Now() + out.timeout});
  absl::MutexLock lock(&mu_);
  ++recovery_.requests_fenced;
  return true;
}

void IoThread::ReleaseFenced() {
  if (fenced_.empty()) return;
  const absl::Time now = runtime_.Now();
  absl::flat_hash_set<uint32_t> held = KeysInTransit();
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
    // Sent by the current view, it leaves nothing in transit, unless Send
    // fenced it again (then it holds back the rest, as above).
    const size_t before = fenced_.size();
    Send(f.out);
    if (fenced_.size() > before) held.insert(keys.begin(), keys.end());
  }
}

}  // namespace ps::client_internal
