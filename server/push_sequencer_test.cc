#include "server/push_sequencer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;

TEST(PushSequencerTest, EachNumberIsAppliedOnceAndUnnumberedAlways) {
  PushSequencer seq(/*keeps_checkpoints=*/true);
  EXPECT_FALSE(seq.SetNode(0, 7));  // its first node
  EXPECT_TRUE(seq.Admit(0, 1));
  EXPECT_TRUE(seq.Admit(0, 2));
  EXPECT_FALSE(seq.Admit(0, 2));  // re-sent
  EXPECT_FALSE(seq.Admit(0, 1));
  EXPECT_TRUE(seq.Admit(0, 0));
  EXPECT_TRUE(seq.Admit(0, 0));
  EXPECT_TRUE(seq.Admit(1, 1));  // another worker numbers on its own
  EXPECT_EQ(seq.duplicates(), 2u);
}

TEST(PushSequencerTest, DurableSeqFollowsCheckpointsAndNothingToKeepWithout) {
  PushSequencer seq(true);
  seq.SetNode(0, 7);
  ASSERT_TRUE(seq.Admit(0, 1));
  ASSERT_TRUE(seq.Admit(0, 2));
  EXPECT_EQ(seq.DurableSeq(0), 0u);
  seq.MarkDurable(seq.Snapshot());
  ASSERT_TRUE(seq.Admit(0, 3));
  EXPECT_EQ(seq.DurableSeq(0), 2u);
  EXPECT_EQ(seq.DurableSeq(5), 0u);  // never heard of
  PushSequencer none(false);
  EXPECT_EQ(none.DurableSeq(0), kNothingToKeep);
}

TEST(PushSequencerTest, ARestartedWorkerNumbersAfresh) {
  PushSequencer seq(true);
  seq.SetNode(0, 7);
  ASSERT_TRUE(seq.Admit(0, 5));
  EXPECT_FALSE(seq.SetNode(0, 7));  // the same node again: nothing changes
  EXPECT_FALSE(seq.Admit(0, 5));
  EXPECT_TRUE(seq.SetNode(0, 9));  // a new node for the rank
  EXPECT_TRUE(seq.Admit(0, 1));
  EXPECT_EQ(seq.DurableSeq(0), 0u);
}

TEST(PushSequencerTest, SnapshotRestoresAsDurableAndForgetStartsOver) {
  PushSequencer seq(true);
  seq.SetNode(1, 4);
  seq.SetNode(0, 3);
  ASSERT_TRUE(seq.Admit(1, 6));
  ASSERT_TRUE(seq.Admit(0, 2));
  const std::vector<WorkerSeq> snap = seq.Snapshot();
  EXPECT_THAT(snap, ElementsAre(WorkerSeq{0, 3, 2}, WorkerSeq{1, 4, 6}));
  PushSequencer restored(true);
  restored.Restore(snap);
  EXPECT_EQ(restored.DurableSeq(1), 6u);
  EXPECT_FALSE(restored.Admit(1, 6));
  EXPECT_FALSE(restored.SetNode(1, 4));  // the same node as in the checkpoint
  restored.Forget();
  EXPECT_FALSE(restored.SetNode(1, 4));  // forgotten: a first node again
  EXPECT_TRUE(restored.Admit(1, 1));
}

}  // namespace
}  // namespace ps
