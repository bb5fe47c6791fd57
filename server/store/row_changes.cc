#include "server/store/row_changes.h"

#include <algorithm>

namespace ps {

void RowChanges::Record(uint64_t id, bool removed) {
  if (open_overflowed_) return;
  open_[id] = removed;
  while (size() > max_ids_ && !cuts_.empty()) DropOldest();
  if (open_.size() > max_ids_) {
    // Not even the open cut fits: the cut that closes it is where deltas start again.
    open_.clear();
    open_overflowed_ = true;
  }
}

void RowChanges::DropOldest() {
  kept_ids_ -= cuts_.front().ids.size();
  floor_ = std::max(floor_, cuts_.front().number);
  cuts_.pop_front();
}

uint64_t RowChanges::Cut() {
  const uint64_t number = next_cut_++;
  if (open_overflowed_) {  // Record dropped every cut before it as well
    floor_ = number;
    open_overflowed_ = false;
    return number;
  }
  if (!open_.empty()) {
    kept_ids_ += open_.size();
    cuts_.push_back(CutIds{number, std::move(open_)});
    open_ = {};
  }
  return number;
}

RowChanges::Delta RowChanges::Since(uint64_t since) const {
  Delta delta;
  if (since == 0 || since < floor_) {  // 0: a replica that holds nothing yet
    delta.snapshot = true;
    return delta;
  }
  absl::flat_hash_map<uint64_t, bool> merged;
  for (const CutIds& cut : cuts_) {
    if (cut.number <= since) continue;
    for (const auto& [id, removed] : cut.ids) merged[id] = removed;
  }
  for (const auto& [id, removed] : merged) (removed ? delta.removed : delta.changed).push_back(id);
  std::sort(delta.changed.begin(), delta.changed.end());
  std::sort(delta.removed.begin(), delta.removed.end());
  return delta;
}

void RowChanges::Forget(uint64_t upto) {
  while (!cuts_.empty() && cuts_.front().number <= upto) DropOldest();
}

}  // namespace ps
