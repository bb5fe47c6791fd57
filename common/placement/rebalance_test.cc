#include "common/placement/rebalance.h"

#include <algorithm>
#include <map>

#include "absl/status/statusor.h"
#include "common/placement/replica_placement.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// A map of `tables` tables of `shards` shards each (and `dense` dense
// slices of 1 KiB) on `servers` servers, with its copies.
struct Job {
  PartitionMap map;
  std::vector<std::vector<int32_t>> copies;
};

Job MakeJob(int servers, uint32_t shards, int tables, int dense = 0, int replicas = 1) {
  std::vector<TensorSpec> tensors;
  if (dense > 0) tensors.push_back(TensorSpec{"w", {dense * 256}, Initializer::Zeros()});
  PlacementSpec placement;
  placement.slice_bytes = 1024;
  placement.table_shards = shards;
  absl::StatusOr<PartitionMap> map = PartitionMap::Build(tensors, servers, placement, tables);
  EXPECT_TRUE(map.ok()) << map.status();
  absl::StatusOr<std::vector<std::vector<int32_t>>> copies = PlaceReplicas(*map, replicas);
  EXPECT_TRUE(copies.ok()) << copies.status();
  return Job{*std::move(map), *std::move(copies)};
}

std::set<int32_t> Ranks(int n) {
  std::set<int32_t> r;
  for (int i = 0; i < n; ++i) r.insert(i);
  return r;
}

// Table 0's shards per server (primaries).
std::map<int32_t, int> ShardsPerServer(const Job& job) {
  std::map<int32_t, int> count;
  for (int v = 0; v < job.map.table_shards(); ++v) ++count[job.copies[job.map.TableSlice(0, v)][0]];
  return count;
}

// The fraction of 100,000 ids of table "t" whose server differs between
// two copy lists.
double MovedRows(const Job& job, const std::vector<std::vector<int32_t>>& after) {
  const uint64_t hash = TableHash("t");
  int moved = 0;
  for (uint64_t id = 0; id < 100000; ++id) {
    const uint32_t key = job.map.TableSlice(0, TableRowShard(hash, id, job.map.table_shards()));
    moved += job.copies[key][0] != after[key][0];
  }
  return moved / 100000.0;
}

TEST(RebalanceTest, AServerJoiningTakesAboutOneOverSOfTheRowsAndOnlyFromTheOthers) {
  Job job = MakeJob(1, 64, 1);
  for (int servers = 2; servers <= 6; ++servers) {
    const std::vector<SliceMove> moves = PlanMoves(job.map, job.copies, Ranks(servers));
    std::vector<std::vector<int32_t>> after = job.copies;
    for (const SliceMove& m : moves) {
      EXPECT_EQ(m.to, servers - 1) << "a copy moved between two servers that stay";
      ApplyMove(m, after);
    }
    // 64 shards over `servers`: floor or ceil each, the newcomer's all moved.
    EXPECT_EQ(moves.size(), 64u / servers) << servers << " servers";
    const double fraction = MovedRows(job, after);
    EXPECT_NEAR(fraction, 1.0 / servers, 0.03) << servers << " servers";
    job.copies = after;
    for (const auto& [server, n] : ShardsPerServer(job)) {
      EXPECT_GE(n, 64 / servers);
      EXPECT_LE(n, (64 + servers - 1) / servers);
    }
  }
}

TEST(RebalanceTest, ADrainMovesOnlyTheLeavingServersCopiesAndKeepsTheRestBalanced) {
  Job job = MakeJob(4, 64, 2, 12);
  const std::vector<SliceMove> moves = PlanMoves(job.map, job.copies, {0, 1, 3});
  int tables = 0;
  for (const SliceMove& m : moves) {
    EXPECT_EQ(m.from, 2);
    tables += job.map.slices()[m.key].table;
    ApplyMove(m, job.copies);
  }
  EXPECT_EQ(tables, 2 * 16);             // server 2 held 16 shards of each table
  EXPECT_EQ(moves.size(), 2u * 16 + 3);  // and 3 of the 12 dense slices
  for (const std::vector<int32_t>& c : job.copies) EXPECT_NE(c[0], 2);
  for (const auto& [server, n] : ShardsPerServer(job)) EXPECT_TRUE(n == 21 || n == 22) << server << ": " << n;
  std::vector<uint64_t> bytes(4, 0);
  for (const Slice& s : job.map.slices()) bytes[job.copies[s.key][0]] += s.length * 4;
  EXPECT_EQ(bytes, (std::vector<uint64_t>{4096, 4096, 0, 4096}));
}

TEST(RebalanceTest, EqualDenseSlicesSpreadEvenlyOverANewServer) {
  Job job = MakeJob(3, 0, 0, 12);
  const std::vector<SliceMove> moves = PlanMoves(job.map, job.copies, Ranks(4));
  ASSERT_EQ(moves.size(), 3u);
  for (const SliceMove& m : moves) {
    EXPECT_EQ(m.to, 3);
    ApplyMove(m, job.copies);
  }
  std::vector<int> count(4, 0);
  for (const std::vector<int32_t>& c : job.copies) ++count[c[0]];
  EXPECT_EQ(count, (std::vector<int>{3, 3, 3, 3}));
}

TEST(RebalanceTest, WithReplicasNoServerEndsWithTwoCopiesOfASlice) {
  Job job = MakeJob(3, 32, 1, 6, 2);
  for (const std::set<int32_t>& servers : {std::set<int32_t>{0, 1, 2, 3}, std::set<int32_t>{0, 2, 3}}) {
    const std::vector<SliceMove> moves = PlanMoves(job.map, job.copies, servers);
    EXPECT_FALSE(moves.empty());
    for (const SliceMove& m : moves) ApplyMove(m, job.copies);
    std::map<int32_t, int> held;
    for (const std::vector<int32_t>& c : job.copies) {
      ASSERT_EQ(c.size(), 2u);
      EXPECT_NE(c[0], c[1]);
      for (int32_t s : c) {
        EXPECT_TRUE(servers.contains(s)) << s;
        if (job.map.slices()[&c - job.copies.data()].table) ++held[s];
      }
    }
    // 64 table copies: 16 each on 4 servers, 21 or 22 on 3.
    for (const auto& [s, n] : held) EXPECT_LE(n, (64 + servers.size() - 1) / servers.size()) << s;
  }
}

TEST(RebalanceTest, OneShardPerServerMovesNoTableShardAndThePlanIsDeterministic) {
  // table_shards 0 (the layout before shards could move): a new server
  // would leave every server within one shard already, so no shard moves.
  Job job = MakeJob(2, 0, 1);
  EXPECT_TRUE(PlanMoves(job.map, job.copies, Ranks(3)).empty());
  Job big = MakeJob(2, 64, 2, 10);
  EXPECT_EQ(PlanMoves(big.map, big.copies, Ranks(5)), PlanMoves(big.map, big.copies, Ranks(5)));
}

}  // namespace
}  // namespace ps
