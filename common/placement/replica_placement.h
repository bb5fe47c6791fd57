#ifndef PS_COMMON_PLACEMENT_REPLICA_PLACEMENT_H_
#define PS_COMMON_PLACEMENT_REPLICA_PLACEMENT_H_

// Where the copies of each slice go when a job keeps K of them (
// a primary and K-1 backups, so that a dead server's slices are served by
// a backup without a restart).
//
// The primary of a slice is the server the PartitionMap gives it. Its
// backups are K-1 other servers, distinct, chosen slice by slice (dense
// slices largest first, then the table shards) as the server that holds
// the fewest copies of this primary's slices so far, then the fewest
// bytes of backups, then the lowest rank: the copies of one server's
// slices spread over all the others (a dead server's load falls on many),
// and the backup bytes stay balanced. Table shards grow at run time and
// have no size here: they count one shard each, in a load of their own.
//
// A pure function of (map, K), like the map: every node computes the same.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/placement/partition_map.h"

namespace ps {

// copies[key] lists the servers holding slice `key`: its primary first,
// then its backups. kInvalidArgument when K < 1 or K is more than the
// map's servers (no server may hold two copies of one slice).
absl::StatusOr<std::vector<std::vector<int32_t>>> PlaceReplicas(const PartitionMap& map, int replicas);

}  // namespace ps

#endif  // PS_COMMON_PLACEMENT_REPLICA_PLACEMENT_H_
