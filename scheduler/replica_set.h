#ifndef PS_SCHEDULER_REPLICA_SET_H_
#define PS_SCHEDULER_REPLICA_SET_H_

// The scheduler's record of where every slice's copies are (ps_scheduler
// --replicas=K): placed with the model (common/placement/replica_placement.h), cut
// when a server dies (the next copy of each slice it led becomes its
// primary), and grown back to K one copy at a time: the next copy to make
// (which slice, from which primary, to which server), and the copy made.
//
// Not thread-safe: the scheduler's loop owns it.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/placement/partition_map.h"
#include "common/wire/messages.h"

namespace ps {

class ReplicaSet {
 public:
  // A copy to make: slice `key` from its primary to server `target`.
  struct Copy {
    uint32_t key = 0;
    int32_t primary = 0;
    int32_t target = 0;
  };

  // K copies of every slice of `map` (1 <= K <= its servers).
  absl::Status Place(const PartitionMap& map, int replicas);
  // Copies as a saved state or a view lists them (a restarted scheduler).
  void Restore(std::vector<std::vector<int32_t>> copies) { copies_ = std::move(copies); }

  // A whole job restarted from its checkpoints: `held` lists, per restored
  // server rank, the slices its checkpoint holds with their versions. Each
  // slice keeps one copy, its most advanced (on a tie the placed primary's,
  // then the lowest rank's): checkpoints are written at different moments,
  // so the others may disagree with it, and are made again from it
  // (NextCopy). Call after Place. kFailedPrecondition naming the slices no
  // checkpoint holds, kInvalidArgument for a key the model does not have;
  // either leaves the copies as placed.
  absl::Status Seat(const std::map<int32_t, std::vector<SliceData>>& held);

  int replicas() const { return replicas_; }
  // Per slice key, the servers holding a copy, primary first.
  const std::vector<std::vector<int32_t>>& copies() const { return copies_; }
  bool Holds(uint32_t key, int32_t rank) const;

  // Server `rank` died: every slice loses its copy there (a backup becomes
  // the primary of those it led), except a slice's last copy, which waits
  // for the server's restart as with one copy. With one copy of each slice
  // (--elastic, a move's second copy aside), a slice it led keeps it alone:
  // the move rolls back. Returns (slices whose primary changed, slices left
  // without any other copy).
  std::pair<int, int> Lose(int32_t rank);

  // The next copy to make, for a slice with fewer than K copies whose
  // primary is live: to the live server (in `live`) holding the fewest
  // copies that holds none of it, never a pair in `failed`. None when every
  // slice has K copies or no server can take one.
  std::optional<Copy> NextCopy(const std::set<int32_t>& live,
                               const std::set<std::pair<uint32_t, int32_t>>& failed) const;
  // `copy` is complete: its target holds the slice and gets every update.
  void Add(const Copy& copy);
  // A move is complete: server `to` holds slice `key` in `from`'s place
  // (its primary when `from` was), `from` none.
  void Move(uint32_t key, int32_t from, int32_t to);
  // Server `rank` is draining (none: no server is): its copies do not count
  // towards K, so NextCopy makes each of its slices K copies elsewhere
  // (never on it), while it still leads and holds them.
  void set_leaving(std::optional<int32_t> rank) { leaving_ = rank; }
  // Slices with fewer than K copies (not counting a leaving server's).
  int Missing() const;
  // Slices whose only copy is on server `rank` (lost with it unless it comes
  // back with its checkpoint).
  int LastCopiesOn(int32_t rank) const;
  // Copies -> slices with that many (empty with one copy each).
  std::map<int, int> ByCopies() const;

 private:
  // Copies of slice `key` that count towards K.
  int Counted(uint32_t key) const;

  int replicas_ = 1;
  std::vector<std::vector<int32_t>> copies_;
  std::optional<int32_t> leaving_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_REPLICA_SET_H_
