// The scheduler's record of copies (--replicas): a dead server's slices are
// led by their next copy, a last copy is kept for the server's restart, the
// copies lost are made again one at a time on the live server holding the
// fewest, never where one failed, and the counts say how far it got.

#include "scheduler/replica_set.h"

#include "scheduler/scheduler.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// 6 tensors of 1 MiB, one slice each, and one table, on 3 servers.
PartitionMap Model() {
  std::vector<TensorSpec> specs;
  for (int t = 0; t < 6; ++t) specs.push_back(TensorSpec{"t" + std::to_string(t), {1 << 18}, Initializer::Zeros()});
  PlacementSpec placement;
  placement.slice_bytes = 1 << 20;
  absl::StatusOr<PartitionMap> map = PartitionMap::Build(specs, 3, placement, 1);
  EXPECT_TRUE(map.ok()) << map.status();
  return *map;
}

TEST(ReplicaSetTest, ADeadServersSlicesAreLedByTheirNextCopy) {
  const PartitionMap map = Model();
  ReplicaSet set;
  ASSERT_TRUE(set.Place(map, 2).ok());
  const std::vector<std::vector<int32_t>> before = set.copies();
  int led = 0, held = 0;
  for (const auto& c : before) {
    led += c[0] == 1 ? 1 : 0;
    held += (c[0] == 1 || c[1] == 1) ? 1 : 0;
  }
  const auto [promoted, last] = set.Lose(1);
  EXPECT_EQ(promoted, led);
  EXPECT_EQ(last, 0);
  EXPECT_EQ(set.Missing(), held);
  for (size_t key = 0; key < before.size(); ++key) {
    const auto& c = set.copies()[key];
    EXPECT_FALSE(set.Holds(static_cast<uint32_t>(key), 1)) << key;
    if (before[key][0] == 1) {
      EXPECT_EQ(c, std::vector<int32_t>{before[key][1]}) << key;  // the backup leads
    }
    if (before[key][1] == 1) {
      EXPECT_EQ(c, std::vector<int32_t>{before[key][0]}) << key;  // the primary stays
    }
  }
  EXPECT_EQ(set.ByCopies(), (std::map<int, int>{{0, 0}, {1, held}, {2, static_cast<int>(before.size()) - held}}));
}

TEST(ReplicaSetTest, ALastCopyWaitsForItsServer) {
  ReplicaSet set;
  ASSERT_TRUE(set.Place(Model(), 2).ok());
  set.Lose(1);
  // The slices 1 held are on one server now, 0 or 2.
  EXPECT_EQ(set.LastCopiesOn(0) + set.LastCopiesOn(2), set.Missing());
  const int alone_on_2 = set.LastCopiesOn(2);
  const auto [promoted, last] = set.Lose(2);
  EXPECT_EQ(last, alone_on_2);  // kept, waiting for server 2's restart
  EXPECT_GT(last, 0);
  EXPECT_EQ(set.LastCopiesOn(2), last);
  for (const auto& c : set.copies()) EXPECT_FALSE(c.empty());
}

// One copy of each slice (--elastic): a move's second copy is dropped with
// either server; where the old one died, the slice keeps it alone and waits
// for its restart (the move rolls back), as the slices it held alone.
TEST(ReplicaSetTest, OneCopyEachAMoveRollsBackWhenEitherSideDies) {
  ReplicaSet set;
  ASSERT_TRUE(set.Place(Model(), 1).ok());
  const std::vector<std::vector<int32_t>> placed = set.copies();
  uint32_t a = 0, b = 0;  // two slices led by server 0, moving to server 1
  while (placed[a][0] != 0) ++a;
  b = a + 1;
  while (placed[b][0] != 0) ++b;
  set.Add(ReplicaSet::Copy{a, 0, 1});
  set.Add(ReplicaSet::Copy{b, 0, 1});
  const auto [promoted_new, last_new] = set.Lose(1);  // the new side dies
  EXPECT_EQ(promoted_new, 0);
  EXPECT_EQ(set.copies()[a], std::vector<int32_t>{0});
  EXPECT_EQ(set.copies()[b], std::vector<int32_t>{0});
  EXPECT_EQ(last_new, set.LastCopiesOn(1));
  set.Add(ReplicaSet::Copy{a, 0, 2});
  const int alone_on_0 = set.LastCopiesOn(0);
  const auto [promoted_old, last_old] = set.Lose(0);  // the old side dies
  EXPECT_EQ(promoted_old, 0);
  EXPECT_EQ(last_old, alone_on_0 + 1);  // a too: back on server 0 alone
  EXPECT_EQ(set.copies()[a], std::vector<int32_t>{0});
  EXPECT_EQ(set.Missing(), 0);
  EXPECT_FALSE(set.NextCopy({1, 2}, {}).has_value());
}

TEST(ReplicaSetTest, CopiesAreMadeAgainOnTheLeastLoadedLiveServer) {
  ReplicaSet set;
  ASSERT_TRUE(set.Place(Model(), 2).ok());
  set.Lose(1);
  const std::set<int32_t> live = {0, 2};
  std::set<std::pair<uint32_t, int32_t>> failed;
  int made = 0;
  while (std::optional<ReplicaSet::Copy> next = set.NextCopy(live, failed)) {
    EXPECT_EQ(set.copies()[next->key][0], next->primary);
    EXPECT_NE(next->target, next->primary);
    EXPECT_TRUE(live.count(next->target));
    set.Add(*next);
    ++made;
    ASSERT_LE(made, 100);
  }
  EXPECT_EQ(set.Missing(), 0);  // every slice on 0 and 2 now
  for (const auto& c : set.copies()) EXPECT_EQ(std::set<int32_t>(c.begin(), c.end()), live);
}

TEST(ReplicaSetTest, NoCopyWhereOneFailedOrWhereNoServerCanTakeIt) {
  ReplicaSet set;
  ASSERT_TRUE(set.Place(Model(), 2).ok());
  set.Lose(1);
  // With 0 and 2 live, a slice's only candidate is the other one: once that
  // failed, it is not tried again.
  std::set<std::pair<uint32_t, int32_t>> failed;
  const std::optional<ReplicaSet::Copy> first = set.NextCopy({0, 2}, failed);
  ASSERT_TRUE(first.has_value());
  failed.insert({first->key, first->target});
  const std::optional<ReplicaSet::Copy> second = set.NextCopy({0, 2}, failed);
  if (second.has_value()) {
    EXPECT_NE(second->key, first->key);
  }
  // A primary that is not live gets no copy made from it.
  EXPECT_FALSE(set.NextCopy({}, {}).has_value());
  // One copy each: nothing to make.
  ReplicaSet one;
  ASSERT_TRUE(one.Place(Model(), 1).ok());
  EXPECT_FALSE(one.NextCopy({0, 1, 2}, {}).has_value());
  EXPECT_TRUE(one.ByCopies().empty());
}

// A whole job restarted from its checkpoints: each slice keeps its most
// advanced copy (a tie goes to the placed primary), the others are made again.
TEST(ReplicaSetTest, ARestartedJobKeepsEachSlicesMostAdvancedCopy) {
  ReplicaSet set;
  ASSERT_TRUE(set.Place(Model(), 2).ok());
  const std::vector<std::vector<int32_t>> placed = set.copies();
  const uint32_t slices = static_cast<uint32_t>(placed.size());
  // Servers 0 and 1 come back with their checkpoints, server 2 without.
  // Server 1 wrote its checkpoint later: its copies are one version ahead,
  // except slice 0's, which is as far as server 0's.
  std::map<int32_t, std::vector<SliceData>> held;
  for (uint32_t key = 0; key < slices; ++key) {
    for (int32_t r : placed[key]) {
      if (r == 2) continue;
      held[r].push_back(SliceData{key, 1, r == 1 && key != 0 ? 8u : 7u, 0});
    }
  }
  ASSERT_TRUE(set.Seat(held).ok());
  for (uint32_t key = 0; key < slices; ++key) {
    const std::vector<int32_t>& c = set.copies()[key];
    ASSERT_EQ(c.size(), 1u) << "slice " << key;
    const bool on0 = placed[key][0] == 0 || placed[key][1] == 0;
    const bool on1 = placed[key][0] == 1 || placed[key][1] == 1;
    if (on1 && (key != 0 || !on0)) {
      EXPECT_EQ(c[0], 1) << "slice " << key;  // the most advanced copy
    } else if (key == 0 && on0 && on1) {
      EXPECT_EQ(c[0], placed[0][0]) << "a tie goes to the placed primary";
    } else {
      EXPECT_EQ(c[0], 0) << "slice " << key;  // the only copy held
    }
  }
  EXPECT_EQ(set.Missing(), static_cast<int>(slices));
  // The copies are made again, on the servers holding the fewest.
  const std::optional<ReplicaSet::Copy> next = set.NextCopy({0, 1, 2}, {});
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->target, 2);
}

TEST(ReplicaSetTest, ARestartMissingASlicesEveryCopyIsRefused) {
  ReplicaSet set;
  ASSERT_TRUE(set.Place(Model(), 2).ok());
  const std::vector<std::vector<int32_t>> placed = set.copies();
  // Only server 0's checkpoint: the slices it held no copy of are lost.
  std::map<int32_t, std::vector<SliceData>> held{{0, {}}};
  std::vector<uint32_t> lost;
  for (uint32_t key = 0; key < placed.size(); ++key) {
    if (placed[key][0] == 0 || placed[key][1] == 0) {
      held[0].push_back(SliceData{key, 1, 3, 0});
    } else {
      lost.push_back(key);
    }
  }
  ASSERT_FALSE(lost.empty());
  const absl::Status s = set.Seat(held);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(absl::StrCat("slices ", absl::StrJoin(lost, ", "),
                                                                          " are in none of the 1 restored")));
  EXPECT_EQ(set.copies(), placed) << "a refused restart leaves the copies as placed";
  // A key the model does not have.
  held[0].push_back(SliceData{static_cast<uint32_t>(placed.size()), 1, 3, 0});
  EXPECT_EQ(set.Seat(held).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReplicaSetTest, MoreCopiesThanServersIsRefused) {
  ReplicaSet set;
  const absl::Status s = set.Place(Model(), 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("--replicas=4"));
  SchedulerOptions options;
  options.num_servers = 3;
  options.replicas = 4;
  EXPECT_THAT(std::string(options.Validate().message()), ::testing::HasSubstr("replicas: 4 not in [1, 3]"));
  options.replicas = 0;
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
