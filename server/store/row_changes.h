#ifndef PS_SERVER_STORE_ROW_CHANGES_H_
#define PS_SERVER_STORE_ROW_CHANGES_H_

// The table rows that changed, and those that went (expired, or evicted
// with no disk tier to keep them), in numbered cuts: what a serving round
// sends a replica that holds the rows as they were at an earlier cut.
//
// Recording starts with Enable (the first subscriber); until then Changed
// and Removed cost one branch. The ids since the last cut are the open cut;
// Cut() closes it under the next number (from 1). Since(c) merges the cuts
// after c: an id changed and then removed in them is removed, one removed
// and then changed again (re-created) is changed.
//
// Bounded: the cuts kept hold at most `max_ids` ids together. Past that the
// oldest cuts go, and a replica at a cut older than those kept gets a
// snapshot instead (Delta::snapshot); when the open cut alone passes the
// bound, every cut before the one that closes it asks for a snapshot.
// Forget(c) drops the cuts every replica holds already.
//
// Not thread-safe: the thread that changes the shard's rows.

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace ps {

class RowChanges {
 public:
  explicit RowChanges(uint64_t max_ids) : max_ids_(max_ids) {}

  bool enabled() const { return enabled_; }
  // From now on: a replica at the last cut (or later) may get deltas.
  void Enable() {
    if (!enabled_) floor_ = last_cut();
    enabled_ = true;
  }

  void Changed(uint64_t id) {
    if (enabled_) Record(id, /*removed=*/false);
  }
  void Removed(uint64_t id) {
    if (enabled_) Record(id, /*removed=*/true);
  }

  // Closes the open cut; returns its number (the first is 1).
  uint64_t Cut();
  uint64_t last_cut() const { return next_cut_ - 1; }

  struct Delta {
    bool snapshot = false;  // the cuts after `since` are not all kept: send every row
    std::vector<uint64_t> changed;
    std::vector<uint64_t> removed;
  };
  // The ids changed or removed after cut `since` up to the last cut; a
  // snapshot for 0 (a replica that holds nothing) or a cut before recording
  // began or before the cuts kept.
  Delta Since(uint64_t since) const;

  // Drops the cuts up to and including `upto`.
  void Forget(uint64_t upto);

  // Ids held in the kept cuts and the open one.
  uint64_t size() const { return kept_ids_ + open_.size(); }

 private:
  struct CutIds {
    uint64_t number = 0;
    absl::flat_hash_map<uint64_t, bool> ids;  // id -> removed
  };
  void Record(uint64_t id, bool removed);
  // Drops the oldest cut kept: a replica before it gets a snapshot.
  void DropOldest();

  const uint64_t max_ids_;
  bool enabled_ = false;
  uint64_t next_cut_ = 1;
  // A replica at a cut below this gets a snapshot: the cuts after it were
  // dropped, or recording began after it.
  uint64_t floor_ = 0;
  bool open_overflowed_ = false;
  absl::flat_hash_map<uint64_t, bool> open_;
  std::deque<CutIds> cuts_;  // oldest first
  uint64_t kept_ids_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_STORE_ROW_CHANGES_H_
