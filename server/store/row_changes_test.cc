#include "server/store/row_changes.h"

#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

using Ids = std::vector<uint64_t>;

TEST(RowChangesTest, RecordsNothingUntilEnabled) {
  RowChanges changes(100);
  changes.Changed(1);
  EXPECT_EQ(changes.size(), 0u);
  EXPECT_EQ(changes.Cut(), 1u);
  // A replica from before recording began gets a snapshot; from the cut on, deltas.
  EXPECT_TRUE(changes.Since(0).snapshot);
  changes.Enable();
  changes.Changed(7);
  changes.Cut();
  const RowChanges::Delta d = changes.Since(1);
  EXPECT_FALSE(d.snapshot);
  EXPECT_EQ(d.changed, Ids{7});
  EXPECT_TRUE(d.removed.empty());
}

TEST(RowChangesTest, MergesCutsAfterTheReplicasOwn) {
  RowChanges changes(100);
  changes.Enable();
  EXPECT_EQ(changes.Cut(), 1u);  // the replica's snapshot
  changes.Changed(3);
  changes.Changed(1);
  EXPECT_EQ(changes.Cut(), 2u);
  changes.Changed(2);
  changes.Removed(3);  // changed, then gone
  changes.Removed(5);
  EXPECT_EQ(changes.Cut(), 3u);
  changes.Changed(5);  // gone, then made again
  changes.Changed(1);
  EXPECT_EQ(changes.Cut(), 4u);
  changes.Changed(9);  // the open cut: in no delta yet

  EXPECT_TRUE(changes.Since(0).snapshot);  // a replica that holds nothing
  RowChanges::Delta all = changes.Since(1);
  EXPECT_FALSE(all.snapshot);
  EXPECT_EQ(all.changed, (Ids{1, 2, 5}));
  EXPECT_EQ(all.removed, (Ids{3}));
  RowChanges::Delta last = changes.Since(3);
  EXPECT_EQ(last.changed, (Ids{1, 5}));
  EXPECT_TRUE(last.removed.empty());
  EXPECT_TRUE(changes.Since(4).changed.empty());
}

TEST(RowChangesTest, PastTheBoundTheOldestCutsGoAndTheirReplicasGetASnapshot) {
  RowChanges changes(4);
  changes.Enable();
  changes.Cut();  // 1
  changes.Changed(1);
  changes.Changed(2);
  changes.Cut();  // 2: {1, 2}
  changes.Changed(3);
  changes.Changed(4);
  changes.Cut();  // 3: {3, 4}
  EXPECT_EQ(changes.size(), 4u);
  EXPECT_EQ(changes.Since(1).changed, (Ids{1, 2, 3, 4}));
  changes.Changed(5);  // five ids: cut 2 goes
  EXPECT_EQ(changes.size(), 3u);
  changes.Cut();  // 4: {5}
  EXPECT_TRUE(changes.Since(1).snapshot);
  const RowChanges::Delta d = changes.Since(2);
  EXPECT_FALSE(d.snapshot);
  EXPECT_EQ(d.changed, (Ids{3, 4, 5}));
}

TEST(RowChangesTest, AnOpenCutPastTheBoundSendsEveryoneASnapshotUntilItCloses) {
  RowChanges changes(2);
  changes.Enable();
  changes.Changed(1);
  changes.Cut();  // 1
  for (uint64_t id = 10; id < 15; ++id) changes.Changed(id);
  EXPECT_EQ(changes.Cut(), 2u);
  EXPECT_TRUE(changes.Since(1).snapshot);
  EXPECT_TRUE(changes.Since(0).snapshot);
  changes.Changed(20);
  changes.Cut();  // 3
  const RowChanges::Delta d = changes.Since(2);
  EXPECT_FALSE(d.snapshot);
  EXPECT_EQ(d.changed, Ids{20});
}

TEST(RowChangesTest, ForgottenCutsAreNotTakenForAnEmptyDelta) {
  RowChanges changes(100);
  changes.Enable();
  changes.Cut();  // 1
  changes.Changed(1);
  changes.Cut();  // 2
  changes.Changed(2);
  changes.Cut();      // 3
  changes.Forget(2);  // every replica holds cut 2
  EXPECT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes.Since(2).changed, Ids{2});
  // A replica still at 1 (one back with an old cursor) cannot get a delta.
  EXPECT_TRUE(changes.Since(1).snapshot);
}

}  // namespace
}  // namespace ps
