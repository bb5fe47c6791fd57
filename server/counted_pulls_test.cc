// server/counted_pulls.h: a (worker, shard, pull) counts once; unnumbered
// pulls always count; the oldest is forgotten past the capacity.

#include "server/counted_pulls.h"

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

}  // namespace
}  // namespace ps
