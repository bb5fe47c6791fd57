// Duplicates told apart per slice (--replicas): a push applies to the
// slices that lack it only, whatever path it came by, and a slice's record
// moves with a copy of it.

#include "server/replication/slice_seqs.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;

PushRequestMsg Push(uint64_t seq, std::vector<uint32_t> keys) {
  PushRequestMsg push;
  push.seq = seq;
  for (uint32_t k : keys) push.slices.push_back(SliceData{k, 1, 0});
  return push;
}

TEST(SliceSeqsTest, APushAppliesToTheSlicesThatLackItOnly) {
  SliceSeqs seqs;
  // Primary 1 reached this server with push 41's part for slice 2, and died
  // before slice 0's part came by way of another server.
  EXPECT_THAT(seqs.Admit(Push(41, {2}), /*origin=*/1, /*worker=*/1), ElementsAre(true));
  EXPECT_THAT(seqs.Admit(Push(41, {0, 2}), 1, 1), ElementsAre(true, false));
  EXPECT_EQ(seqs.duplicates(), 1u);
  // Once held, again: a duplicate on both; an older one too.
  EXPECT_THAT(seqs.Admit(Push(41, {0, 2}), 1, 1), ElementsAre(false, false));
  EXPECT_THAT(seqs.Admit(Push(40, {0}), 1, 1), ElementsAre(false));
  // Another worker, another numbering: their own records.
  EXPECT_THAT(seqs.Admit(Push(41, {0}), 1, 0), ElementsAre(true));
  EXPECT_THAT(seqs.Admit(Push(5, {0}), 3, 1), ElementsAre(true));
  // Unnumbered pushes are always new.
  EXPECT_THAT(seqs.Admit(Push(0, {0}), 1, 1), ElementsAre(true));
}

TEST(SliceSeqsTest, ASlicesRecordMovesWithItsCopy) {
  SliceSeqs primary, copy;
  primary.Admit(Push(7, {4}), 0, 1);
  primary.Admit(Push(3, {4}), 2, 0);
  primary.Admit(Push(9, {5}), 0, 1);
  EXPECT_THAT(primary.Of(4), ElementsAre(OriginSeq{0, 1, 7}, OriginSeq{2, 0, 3}));
  copy.Admit(Push(100, {4}), 0, 1);  // a stale record of its own: replaced
  copy.Set(4, primary.Of(4));
  EXPECT_THAT(copy.Of(4), ElementsAre(OriginSeq{0, 1, 7}, OriginSeq{2, 0, 3}));
  EXPECT_THAT(copy.Admit(Push(7, {4}), 0, 1), ElementsAre(false));
  EXPECT_THAT(copy.Admit(Push(8, {4}), 0, 1), ElementsAre(true));
  EXPECT_TRUE(copy.Of(5).empty());
}

}  // namespace
}  // namespace ps
