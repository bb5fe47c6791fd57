// server/replication/counted_pulls.h: a (worker, shard, pull) counts once; unnumbered
// pulls always count; the oldest is forgotten past the capacity; a shard's
// pulls travel with its copy.

#include "server/replication/counted_pulls.h"

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(CountedPullsTest, EachWorkerShardAndPullCountsOnce) {
  CountedPulls counted;
  EXPECT_TRUE(counted.First(0, 4, 100));
  EXPECT_FALSE(counted.First(0, 4, 100));  // re-sent
  EXPECT_TRUE(counted.First(0, 5, 100));   // the same pull's rows of another shard
  EXPECT_TRUE(counted.First(1, 4, 100));   // another worker's pull of that number
  EXPECT_TRUE(counted.First(0, 4, 101));   // the worker's next pull
  EXPECT_TRUE(counted.First(0, 4, 0));     // unnumbered: always
  EXPECT_TRUE(counted.First(0, 4, 0));
}

TEST(CountedPullsTest, TheOldestIsForgottenPastTheCapacity) {
  CountedPulls counted;
  for (uint64_t p = 1; p <= CountedPulls::kCapacity; ++p) ASSERT_TRUE(counted.First(0, 1, p));
  EXPECT_FALSE(counted.First(0, 1, 1));  // still remembered: exactly kCapacity held
  EXPECT_TRUE(counted.First(0, 1, CountedPulls::kCapacity + 1));
  EXPECT_TRUE(counted.First(0, 1, 1)) << "the oldest went to make room";
  EXPECT_FALSE(counted.First(0, 1, CountedPulls::kCapacity));
}

// A copy of shard 4 made on another server knows the pulls its primary
// counted for that shard (and only those): re-sent there, they count no more.
TEST(CountedPullsTest, AShardsPullsTravelWithItsCopy) {
  CountedPulls primary;
  ASSERT_TRUE(primary.First(0, 4, 100));
  ASSERT_TRUE(primary.First(1, 5, 100));  // another shard's
  ASSERT_TRUE(primary.First(1, 4, 7));
  ASSERT_TRUE(primary.First(0, 4, 0));  // unnumbered: not remembered
  const std::vector<CountedPullId> of4 = primary.Of(4);
  EXPECT_EQ(of4, (std::vector<CountedPullId>{{0, 100}, {1, 7}}));
  CountedPulls copy;
  ASSERT_TRUE(copy.First(2, 4, 9));  // counted here before: kept
  copy.Add(4, of4);
  EXPECT_FALSE(copy.First(0, 4, 100));
  EXPECT_FALSE(copy.First(1, 4, 7));
  EXPECT_FALSE(copy.First(2, 4, 9));
  EXPECT_TRUE(copy.First(1, 5, 100)) << "shard 5's pulls did not come with shard 4";
  EXPECT_TRUE(copy.First(0, 4, 101));
  EXPECT_EQ(copy.Of(4).size(), 4u);
}

// A copy carries a shard's most recent kCopied pulls, oldest first.
TEST(CountedPullsTest, ACopyCarriesTheShardsMostRecentPulls) {
  CountedPulls counted;
  const uint64_t n = CountedPulls::kCopied + 100;
  for (uint64_t p = 1; p <= n; ++p) ASSERT_TRUE(counted.First(0, 4, p));
  const std::vector<CountedPullId> of4 = counted.Of(4);
  ASSERT_EQ(of4.size(), CountedPulls::kCopied);
  EXPECT_EQ(of4.front().pull_id, 101u);
  EXPECT_EQ(of4.back().pull_id, n);
}

}  // namespace
}  // namespace ps
