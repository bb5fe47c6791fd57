#include "common/placement/replica_placement.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace ps {

absl::StatusOr<std::vector<std::vector<int32_t>>> PlaceReplicas(const PartitionMap& map, int replicas) {
  const int servers = map.num_servers();
  if (replicas < 1 || replicas > servers) {
    return absl::InvalidArgumentError(absl::StrCat("--replicas=", replicas, ": must be in [1, ", servers,
                                                   "], the job's servers (no server holds two copies of a slice)"));
  }
  const std::vector<Slice>& slices = map.slices();
  std::vector<std::vector<int32_t>> copies(slices.size());
  for (const Slice& s : slices) copies[s.key] = {s.server};
  // Dense slices largest first (ties: lower key), then the table shards in key order.
  std::vector<uint32_t> order(slices.size());
  for (uint32_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    if (slices[a].table != slices[b].table) return !slices[a].table;
    return slices[a].length > slices[b].length;
  });
  // from[p][b]: copies of primary p's slices on b; load[b]: backup bytes on b
  // (table shards: backup shards, in a load of their own).
  std::vector<std::vector<uint64_t>> from(servers, std::vector<uint64_t>(servers, 0));
  std::vector<uint64_t> dense_load(servers, 0), table_load(servers, 0);
  for (uint32_t key : order) {
    const Slice& s = slices[key];
    std::vector<uint64_t>& load = s.table ? table_load : dense_load;
    const uint64_t weight = s.table ? 1 : s.length * sizeof(float);
    std::vector<int32_t>& held = copies[key];
    while (static_cast<int>(held.size()) < replicas) {
      int32_t best = -1;
      for (int32_t b = 0; b < servers; ++b) {
        if (std::find(held.begin(), held.end(), b) != held.end()) continue;
        if (best < 0 || std::tie(from[s.server][b], load[b], b) < std::tie(from[s.server][best], load[best], best)) {
          best = b;
        }
      }
      held.push_back(best);
      ++from[s.server][best];
      load[best] += weight;
    }
  }
  return copies;
}

}  // namespace ps
