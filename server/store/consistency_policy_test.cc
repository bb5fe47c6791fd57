#include "server/store/consistency_policy.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/optim/optimizer.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A slice of 2 floats at version 3; worker 0 has pushed up to clock 5,
// worker 1 up to clock 2.
SliceState Slice3() {
  SliceState s;
  s.values = {10, 10};
  s.version = 3;
  s.pushed = {0, 0};
  s.worker_clock = {5, 2};
  s.join_step = {0, 0};
  return s;
}

std::unique_ptr<ConsistencyPolicy> Policy(ConsistencyMode mode, int32_t staleness = 0) {
  return ConsistencyPolicy::Create(Consistency{mode, staleness});
}

const uint8_t kBoth[] = {1, 1};
auto Name() {
  return [] { return std::string("slice 7"); };
}

// Plain SGD with learning rate 1: a value moves by exactly the gradient applied.
std::unique_ptr<Optimizer> Sgd() {
  OptimizerConfig sgd;
  sgd.learning_rate = 1.0f;
  auto optimizer = Optimizer::Create(sgd);
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  return *std::move(optimizer);
}

TEST(ConsistencyPolicyTest, EachModeDecidesWhenAPullMaySeeTheSlice) {
  const SliceState s = Slice3();
  auto sync = Policy(ConsistencyMode::kSync);
  EXPECT_TRUE(sync->PullReady(s, 3, kBoth));
  EXPECT_FALSE(sync->PullReady(s, 4, kBoth));
  auto async = Policy(ConsistencyMode::kAsync);
  EXPECT_TRUE(async->PullReady(s, 1000, kBoth));
  EXPECT_EQ(async->DescribeWait(s, 1000, kBoth, Name()), "");
  auto ssp = Policy(ConsistencyMode::kSsp, 2);
  EXPECT_TRUE(ssp->PullReady(s, 4, kBoth));  // slowest clock 2 >= 4 - 2
  EXPECT_FALSE(ssp->PullReady(s, 5, kBoth));
  EXPECT_THAT(ssp->DescribeWait(s, 5, kBoth, Name()), HasSubstr("slice 7: pull at clock 5 with staleness 2"));
  EXPECT_THAT(ssp->DescribeWait(s, 5, kBoth, Name()), HasSubstr("workers behind: [1]"));
  const uint8_t only_first[] = {1, 0};
  EXPECT_TRUE(ssp->PullReady(s, 5, only_first));  // an inactive worker is not waited for
  EXPECT_TRUE(ssp->LeavingFreesPulls());
  EXPECT_FALSE(sync->LeavingFreesPulls());
}

TEST(ConsistencyPolicyTest, SyncSumsAStepAndAppliesTheMeanOnce) {
  const std::unique_ptr<Optimizer> optimizer = Sgd();
  auto sync = Policy(ConsistencyMode::kSync);
  SliceState s = Slice3();
  EXPECT_TRUE(sync->CheckPush(s, 0, 3, Name()).ok());
  EXPECT_THAT(std::string(sync->CheckPush(s, 0, 2, Name()).message()), HasSubstr("step already applied"));
  EXPECT_TRUE(sync->PushAhead(s, 4));
  const float g0[] = {2, 4}, g1[] = {4, 8};
  EXPECT_FALSE(sync->Apply(s, 0, g0, *optimizer, kBoth));
  EXPECT_EQ(sync->CheckPush(s, 0, 3, Name()).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(sync->Apply(s, 1, g1, *optimizer, kBoth));
  EXPECT_EQ(s.version, 4u);
  EXPECT_THAT(s.values, ElementsAre(7, 4));  // 10 - mean(2, 4), 10 - mean(4, 8)
  EXPECT_FALSE(sync->MeasuresStaleness());
}

// A step that waits for one worker only (the other is not active, or not
// counted yet) is applied from the push itself: no step sum is kept.
TEST(ConsistencyPolicyTest, SyncStepOfOneWorkerAppliesThePushWithoutASum) {
  const std::unique_ptr<Optimizer> optimizer = Sgd();
  auto sync = Policy(ConsistencyMode::kSync);
  SliceState s = Slice3();
  const uint8_t only_first[] = {1, 0};
  const float g[] = {2, 4};
  EXPECT_TRUE(sync->Apply(s, 0, g, *optimizer, only_first));
  EXPECT_EQ(s.version, 4u);
  EXPECT_THAT(s.values, ElementsAre(8, 6));
  EXPECT_TRUE(s.sum.empty());
  EXPECT_EQ(s.arrived, 0);
  EXPECT_THAT(s.pushed, ElementsAre(0, 0));  // the next step waits for worker 0 again
  EXPECT_EQ(s.optimizer_steps, 1u);
  EXPECT_TRUE(sync->CheckPush(s, 0, 4, Name()).ok());
}

TEST(ConsistencyPolicyTest, SyncStepWaitingOnlyForALeaverSettles) {
  const std::unique_ptr<Optimizer> optimizer = Sgd();
  auto sync = Policy(ConsistencyMode::kSync);
  SliceState s = Slice3();
  const float g0[] = {2, 2};
  ASSERT_FALSE(sync->Apply(s, 0, g0, *optimizer, kBoth));
  EXPECT_FALSE(sync->HasDueStep(s, kBoth));
  const uint8_t only_first[] = {1, 0};  // worker 1 left
  EXPECT_TRUE(sync->HasDueStep(s, only_first));
  bool ran = false;
  EXPECT_TRUE(sync->Settle(s, *optimizer, only_first, &ran));
  EXPECT_TRUE(ran);
  EXPECT_THAT(s.values, ElementsAre(8, 8));
  // It comes back: counted from the next step.
  sync->Rejoin(s, 1, only_first);
  EXPECT_EQ(s.join_step[1], 5u);
  EXPECT_EQ(s.worker_clock[1], 5);
}

}  // namespace
}  // namespace ps
