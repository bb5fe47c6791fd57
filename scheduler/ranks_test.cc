#include "scheduler/ranks.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;

TEST(GiveRanksTest, AskedRanksAreKeptAndTheRestFillTheGapsInOrder) {
  EXPECT_THAT(GiveRanks({1, -1}), ElementsAre(1, 0));
  EXPECT_THAT(GiveRanks({-1, -1, -1}), ElementsAre(0, 1, 2));
  EXPECT_THAT(GiveRanks({-1, 0, -1, 3}), ElementsAre(1, 0, 2, 3));
  EXPECT_THAT(GiveRanks({2, 1, 0}), ElementsAre(2, 1, 0));
  EXPECT_THAT(GiveRanks({}), ElementsAre());
}

}  // namespace
}  // namespace ps
