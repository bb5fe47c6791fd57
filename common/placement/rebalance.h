#ifndef PS_COMMON_PLACEMENT_REBALANCE_H_
#define PS_COMMON_PLACEMENT_REBALANCE_H_

// Which slices move when the set of servers changes (servers join
// and leave a running job). The unit that moves is a slice's copy: a dense
// slice, or one of a table's fixed shards (PlacementSpec::table_shards), so
// a row never changes shard and a move is the copy-then-hand-over the
// replication machinery already does.
//
// PlanMoves moves as few copies as balance allows:
// - every copy on a server that is leaving moves (largest first, to the
//   server of the fewest bytes, or of the fewest of that table's shards);
// - then, separately for the dense bytes and for each table's shards, one
//   copy at a time from the most loaded server to the least loaded, while
//   that narrows the gap between them: a table's shards end within one of
//   each other on every server, and dense bytes as close as the slices'
//   sizes allow.
// A server joining a job of S servers thus takes about 1/(S+1) of every
// table's shards, all from the others, and no copy moves between two
// servers that stay; a leaving server's copies are all that move. No move
// puts two copies of a slice on one server. Ties go to the lower rank and
// the higher key: a pure function, the same on every node.

#include <cstdint>
#include <set>
#include <vector>

#include "common/placement/partition_map.h"

namespace ps {

// Slice `key`'s copy on server `from` goes to server `to` (in the copy
// list it takes `from`'s place: a moved primary stays primary).
struct SliceMove {
  uint32_t key = 0;
  int32_t from = 0;
  int32_t to = 0;
  bool operator==(const SliceMove&) const = default;
};

// The moves that take `copies` (per slice key of `map`, the servers
// holding a copy, primary first) onto `servers` (the job's servers after
// the change: those joining included, those leaving left out; not empty,
// and with at least as many servers as any slice has copies).
std::vector<SliceMove> PlanMoves(const PartitionMap& map, const std::vector<std::vector<int32_t>>& copies,
                                 const std::set<int32_t>& servers);

// `copies` with `move` made.
void ApplyMove(const SliceMove& move, std::vector<std::vector<int32_t>>& copies);

}  // namespace ps

#endif  // PS_COMMON_PLACEMENT_REBALANCE_H_
