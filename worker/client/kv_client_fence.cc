// The fence of a worker's requests across a move (the I/O thread's side;
// routing.h keeps the requests that wait): a request for slices that an
// earlier request of this worker still holds in transit waits behind it, so
// that each slice's server takes this worker's requests in the order they
// were made. Without
// it, a pull refused by the server a slice just left (or still in flight to
// it) is routed again after a push the worker made later, which went
// straight to the new server: with admission after several pulls
// (TableSpec::admit_after), that push can find its row not admitted yet.

#include <algorithm>

#include "worker/client/kv_client_internal.h"

namespace ps::client_internal {

absl::flat_hash_set<uint32_t> IoThread::KeysOffRoute() const {
  absl::flat_hash_set<uint32_t> keys;
  for (const auto& [id, f] : in_flight_) {
    // Routed by an older view, to a live server (a dead one's requests
    // fail over in their own order): its slices that another server leads now.
    if (f.view_epoch >= routing_.epoch() || f.target < 0 || f.target >= static_cast<int>(links_.size()) ||
        links_[f.target].failed_over) {
      continue;
    }
    for (uint32_t k : SliceKeys(f.envelope.body)) {
      if (routing_.Leader(k, f.target) != f.target) keys.insert(k);
    }
  }
  return keys;
}

bool IoThread::Fence(Outgoing& out) {
  if (!routing_.moves()) return false;  // no slice moves
  const uint64_t epoch = routing_.epoch();
  const bool older = std::any_of(in_flight_.begin(), in_flight_.end(), [epoch](const auto& entry) {
    return entry.second.target >= 0 && entry.second.view_epoch < epoch;
  });
  if (!routing_.holding() && !older) return false;
  const absl::Time deadline = Now() + out.timeout;
  if (!routing_.Fence(
          out, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) { return KeysOffRoute(); }, deadline)) {
    return false;
  }
  ++recovery_.requests_fenced;
  return true;
}

void IoThread::ReleaseFenced() {
  routing_.ReleaseFenced(
      Now(), [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) { return KeysOffRoute(); },
      [this](Outgoing& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) { Send(out); });
}

}  // namespace ps::client_internal
