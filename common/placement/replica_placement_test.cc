// Where a slice's copies go (--replicas=K): never two on one server, the
// primary first; one server's slices backed up across all the others; the
// backup bytes balanced; the same answer every time; a K the servers cannot
// hold refused by name.
#include "common/placement/replica_placement.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;

// A model of `tensors` tensors of 1 to 3 MiB, cut into 1 MiB slices, and
// `tables` tables, on `servers` servers.
PartitionMap Model(int servers, int tensors, int tables) {
  std::vector<TensorSpec> specs;
  for (int t = 0; t < tensors; ++t) {
    specs.push_back(
        TensorSpec{"t" + std::to_string(t), {static_cast<int64_t>((1 + t % 3) * kMiB / 4)}, Initializer::Zeros()});
  }
  PlacementSpec placement;
  placement.slice_bytes = kMiB;
  absl::StatusOr<PartitionMap> map = PartitionMap::Build(specs, servers, placement, tables);
  EXPECT_TRUE(map.ok()) << map.status();
  return *map;
}

TEST(ReplicaPlacementTest, KCopiesOnKDistinctServersThePrimaryFirst) {
  for (int servers : {1, 2, 3, 5, 8}) {
    for (int k = 1; k <= servers; ++k) {
      const PartitionMap map = Model(servers, 12, 2);
      auto copies = PlaceReplicas(map, k);
      ASSERT_TRUE(copies.ok()) << copies.status();
      ASSERT_EQ(copies->size(), map.slices().size());
      for (const Slice& s : map.slices()) {
        const std::vector<int32_t>& held = (*copies)[s.key];
        ASSERT_EQ(held.size(), static_cast<size_t>(k)) << "slice " << s.key;
        EXPECT_EQ(held[0], s.server);
        EXPECT_EQ(std::set<int32_t>(held.begin(), held.end()).size(), held.size()) << "slice " << s.key;
        for (int32_t r : held) EXPECT_TRUE(r >= 0 && r < servers);
      }
    }
  }
}

TEST(ReplicaPlacementTest, OneServersSlicesAreBackedUpAcrossAllTheOthersInBalance) {
  constexpr int kServers = 4;
  const PartitionMap map = Model(kServers, 24, 3);
  auto copies = PlaceReplicas(map, 2);
  ASSERT_TRUE(copies.ok()) << copies.status();
  std::vector<std::set<int32_t>> backed_on(kServers);
  std::vector<uint64_t> backup_bytes(kServers, 0), primary_bytes(kServers, 0);
  for (const Slice& s : map.slices()) {
    backed_on[s.server].insert((*copies)[s.key][1]);
    if (!s.table) {
      backup_bytes[(*copies)[s.key][1]] += s.length * 4;
      primary_bytes[s.server] += s.length * 4;
    }
  }
  // Each server's slices (dense and table shards: 9 or more each) have
  // copies on every other server: its death spreads its load.
  for (int r = 0; r < kServers; ++r) EXPECT_EQ(backed_on[r].size(), kServers - 1u) << "server " << r;
  // The backups' bytes within a slice (1 MiB) of each other.
  const auto [lo, hi] = std::minmax_element(backup_bytes.begin(), backup_bytes.end());
  EXPECT_LE(*hi - *lo, kMiB) << "backup bytes " << *lo << " to " << *hi;
}

TEST(ReplicaPlacementTest, TheSameAnswerEveryTimeAndKOneIsTheMap) {
  const PartitionMap map = Model(5, 17, 2);
  auto a = PlaceReplicas(map, 3), b = PlaceReplicas(Model(5, 17, 2), 3), one = PlaceReplicas(map, 1);
  ASSERT_TRUE(a.ok() && b.ok() && one.ok());
  EXPECT_EQ(*a, *b);
  for (const Slice& s : map.slices()) EXPECT_EQ((*one)[s.key], std::vector<int32_t>{s.server});
}

TEST(ReplicaPlacementTest, MoreCopiesThanServersIsRefused) {
  const PartitionMap map = Model(2, 3, 1);
  for (int k : {0, 3, -1}) {
    auto copies = PlaceReplicas(map, k);
    EXPECT_EQ(copies.status().code(), absl::StatusCode::kInvalidArgument) << k;
    EXPECT_THAT(std::string(copies.status().message()), HasSubstr("must be in [1, 2]"));
  }
}

}  // namespace
}  // namespace ps
