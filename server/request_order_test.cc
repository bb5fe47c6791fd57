#include "server/request_order.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;

TEST(ServeOrderTest, TheFirstLayersOfOtherWorkersGoAheadOfAQueueOfLastLayers) {
  // Worker 1's last layers (tensors 4, 2) queued before worker 2's first (0).
  const std::vector<QueuedRequest> batch = {{1, 4}, {1, 2}, {2, 0}};
  EXPECT_THAT(ServeOrder(batch), ElementsAre(2, 0, 1));
}

TEST(ServeOrderTest, ASendersRequestsKeepTheirOrder) {
  // Worker 1 sent tensor 4's push before tensor 0's: numbered in that
  // order, applied in that order. Worker 2's tensor 2 goes between.
  const std::vector<QueuedRequest> batch = {{1, 4}, {1, 0}, {2, 2}};
  EXPECT_THAT(ServeOrder(batch), ElementsAre(2, 0, 1));
}

TEST(ServeOrderTest, EqualPrioritiesInArrivalOrder) {
  const std::vector<QueuedRequest> batch = {{3, 1}, {1, 1}, {2, 1}, {1, 0}};
  EXPECT_THAT(ServeOrder(batch), ElementsAre(0, 1, 3, 2));
  EXPECT_TRUE(ServeOrder({}).empty());
}

}  // namespace
}  // namespace ps
