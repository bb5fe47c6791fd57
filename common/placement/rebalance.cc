#include "common/placement/rebalance.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>

namespace ps {
namespace {

bool Holds(const std::vector<int32_t>& copies, int32_t server) {
  return std::find(copies.begin(), copies.end(), server) != copies.end();
}

// What is balanced, and what it weighs: group 0 the dense slices by bytes,
// group 1 + t table t's shards, one each.
class Loads {
 public:
  Loads(const PartitionMap& map, const std::vector<std::vector<int32_t>>& copies, const std::set<int32_t>& servers)
      : map_(map), copies_(copies), servers_(servers.begin(), servers.end()) {
    const int32_t top = std::max(*servers.rbegin(), MaxRank(copies));
    load_.assign(1 + map.num_tables(), std::vector<uint64_t>(top + 1, 0));
    keys_.resize(load_.size());
    for (const Slice& s : map.slices()) {
      keys_[Group(s.key)].push_back(s.key);
      for (int32_t server : copies[s.key]) load_[Group(s.key)][server] += Weight(s.key);
    }
  }

  size_t groups() const { return load_.size(); }
  size_t Group(uint32_t key) const { return map_.slices()[key].table ? 1 + map_.slices()[key].tensor : 0; }
  uint64_t Weight(uint32_t key) const {
    const Slice& s = map_.slices()[key];
    return s.table ? 1 : s.length * sizeof(float);
  }

  // The staying server of group `g`'s least load (ties: the lower rank)
  // that holds no copy of `key` (any key: -1 holds none); -1 when none.
  int32_t Lightest(size_t g, int64_t key) const {
    int32_t best = -1;
    for (int32_t s : servers_) {
      if (key >= 0 && Holds(copies_[key], s)) continue;
      if (best < 0 || load_[g][s] < load_[g][best]) best = s;
    }
    return best;
  }
  int32_t Heaviest(size_t g) const {
    int32_t best = servers_[0];
    for (int32_t s : servers_) {
      if (load_[g][s] > load_[g][best]) best = s;
    }
    return best;
  }
  uint64_t Load(size_t g, int32_t s) const { return load_[g][s]; }
  const std::vector<uint32_t>& Keys(size_t g) const { return keys_[g]; }

  SliceMove Move(uint32_t key, int32_t from, int32_t to) {
    const SliceMove move{key, from, to};
    ApplyMove(move, copies_);
    load_[Group(key)][from] -= Weight(key);
    load_[Group(key)][to] += Weight(key);
    return move;
  }
  const std::vector<std::vector<int32_t>>& copies() const { return copies_; }

 private:
  static int32_t MaxRank(const std::vector<std::vector<int32_t>>& copies) {
    int32_t top = 0;
    for (const std::vector<int32_t>& c : copies) {
      for (int32_t s : c) top = std::max(top, s);
    }
    return top;
  }

  const PartitionMap& map_;
  std::vector<std::vector<int32_t>> copies_;
  std::vector<int32_t> servers_;  // ascending
  std::vector<std::vector<uint64_t>> load_;
  std::vector<std::vector<uint32_t>> keys_;  // per group, ascending
};

// Every copy on a server not in `servers` moves, largest first.
void Drain(const std::set<int32_t>& servers, Loads& loads, std::vector<SliceMove>& moves) {
  std::vector<uint32_t> order;
  for (size_t g = 0; g < loads.groups(); ++g) order.insert(order.end(), loads.Keys(g).begin(), loads.Keys(g).end());
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return loads.Weight(a) > loads.Weight(b); });
  for (uint32_t key : order) {
    for (size_t i = 0; i < loads.copies()[key].size(); ++i) {
      const int32_t from = loads.copies()[key][i];
      if (servers.contains(from)) continue;
      const int32_t to = loads.Lightest(loads.Group(key), key);
      if (to >= 0) moves.push_back(loads.Move(key, from, to));
    }
  }
}

// Group `g`'s copies from the heaviest server to the lightest while that
// narrows their gap: the copy whose weight is nearest half the gap.
void Balance(size_t g, Loads& loads, std::vector<SliceMove>& moves) {
  for (;;) {
    const int32_t heavy = loads.Heaviest(g);
    const int32_t light = loads.Lightest(g, -1);
    const uint64_t gap = loads.Load(g, heavy) - loads.Load(g, light);
    int64_t best = -1;
    uint64_t best_miss = 0;
    for (uint32_t key : loads.Keys(g)) {
      const std::vector<int32_t>& held = loads.copies()[key];
      const uint64_t w = loads.Weight(key);
      if (w == 0 || w >= gap || !Holds(held, heavy) || Holds(held, light)) continue;
      const uint64_t miss = static_cast<uint64_t>(std::llabs(static_cast<int64_t>(2 * w) - static_cast<int64_t>(gap)));
      if (best < 0 || miss <= best_miss) {  // ties: the higher key
        best = key;
        best_miss = miss;
      }
    }
    if (best < 0) return;
    moves.push_back(loads.Move(static_cast<uint32_t>(best), heavy, light));
  }
}

}  // namespace

void ApplyMove(const SliceMove& move, std::vector<std::vector<int32_t>>& copies) {
  std::vector<int32_t>& held = copies[move.key];
  std::replace(held.begin(), held.end(), move.from, move.to);
}

std::vector<SliceMove> PlanMoves(const PartitionMap& map, const std::vector<std::vector<int32_t>>& copies,
                                 const std::set<int32_t>& servers) {
  std::vector<SliceMove> moves;
  if (servers.empty()) return moves;
  Loads loads(map, copies, servers);
  Drain(servers, loads, moves);
  for (size_t g = 0; g < loads.groups(); ++g) Balance(g, loads, moves);
  return moves;
}

}  // namespace ps
