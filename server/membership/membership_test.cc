// server/membership/membership.h: the incarnation adopted once, the live
// workers WorkerOf checks, and the drain's timing.

#include "server/membership/membership.h"

#include "gtest/gtest.h"

namespace ps {
namespace {

Envelope From(uint32_t sender, uint64_t incarnation) {
  Envelope env{kProtocolVersion, 7, sender, AckMsg{}};
  env.incarnation = incarnation;
  return env;
}

TEST(MembershipTest, CheckpointRankIsTheRestoredOneUntilRegistered) {
  Membership m;
  m.Restored(3, 11);
  EXPECT_EQ(m.CheckpointRank(), 3);
  EXPECT_EQ(m.CheckpointIncarnation(), 11u);
  m.Register(5, 1);
  EXPECT_EQ(m.CheckpointRank(), 1);
  EXPECT_FALSE(m.AdoptIncarnation(11));
  EXPECT_EQ(m.CheckpointIncarnation(), 11u);
}

TEST(MembershipTest, AnotherIncarnationThanTheCheckpointsStartsANewOne) {
  Membership m;
  m.Restored(0, 11);
  EXPECT_FALSE(m.AdoptIncarnation(0));  // none named yet
  EXPECT_TRUE(m.AdoptIncarnation(12));
  EXPECT_FALSE(m.AdoptIncarnation(13));  // adopted once
  EXPECT_EQ(m.incarnation(), 12u);
}

TEST(MembershipTest, WorkerOfKnowsOnlyLiveWorkersOfThisIncarnation) {
  Membership m;
  EXPECT_FALSE(m.AdoptIncarnation(4));
  m.ClearWorkers(2);
  m.AddWorker(9, 1, "");
  EXPECT_EQ(m.worker_live(), (std::vector<bool>{false, true}));
  const RawMessage raw;
  ASSERT_TRUE(m.WorkerOf(From(9, 4), raw).ok());
  EXPECT_EQ(*m.WorkerOf(From(9, 4), raw), 1);
  EXPECT_EQ(*m.WorkerOf(From(9, 0), raw), 1);  // states none
  EXPECT_EQ(m.WorkerOf(From(8, 4), raw).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(m.WorkerOf(From(9, 3), raw).status().code(), absl::StatusCode::kFailedPrecondition);
  m.ClearWorkers(2);
  EXPECT_FALSE(m.IsWorker(9));
  EXPECT_EQ(m.WorkerOf(From(9, 4), raw).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST(MembershipTest, DrainAsksOnceThenWhenToldThenExpires) {
  Membership m;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(m.draining());
  EXPECT_EQ(m.OnStop(t0, absl::Seconds(10)), Membership::DrainStep::kAsk);
  EXPECT_TRUE(m.draining());
  EXPECT_EQ(m.OnStop(t0 + absl::Seconds(1), absl::Seconds(10)), Membership::DrainStep::kWait);
  // Refused while slices move: asked again a second later.
  EXPECT_FALSE(m.DrainRefusalPasses(absl::StatusCode::kFailedPrecondition, t0, absl::Seconds(1)));
  EXPECT_TRUE(m.DrainRefusalPasses(absl::StatusCode::kUnavailable, t0 + absl::Seconds(2), absl::Seconds(1)));
  EXPECT_EQ(m.OnStop(t0 + absl::Seconds(2), absl::Seconds(10)), Membership::DrainStep::kWait);
  EXPECT_EQ(m.OnStop(t0 + absl::Seconds(3), absl::Seconds(10)), Membership::DrainStep::kAskAgain);
  EXPECT_EQ(m.OnStop(t0 + absl::Seconds(4), absl::Seconds(10)), Membership::DrainStep::kWait);
  EXPECT_EQ(m.OnStop(t0 + absl::Seconds(11), absl::Seconds(10)), Membership::DrainStep::kExpired);
  EXPECT_FALSE(m.DrainRefusalPasses(absl::StatusCode::kUnavailable, t0 + absl::Seconds(11), absl::Seconds(1)));
}

TEST(MembershipTest, ARestartedSchedulerIsAskedAgainUnlessDrained) {
  Membership m;
  EXPECT_FALSE(m.ReaskDrain());  // no drain asked
  m.OnStop(absl::FromUnixSeconds(1000), absl::Seconds(10));
  EXPECT_TRUE(m.ReaskDrain());
  // Asked again: a restarted scheduler not ready yet may refuse it as a precondition.
  EXPECT_TRUE(
      m.DrainRefusalPasses(absl::StatusCode::kFailedPrecondition, absl::FromUnixSeconds(1001), absl::Seconds(1)));
  m.set_left();
  EXPECT_FALSE(m.ReaskDrain());
}

}  // namespace
}  // namespace ps
