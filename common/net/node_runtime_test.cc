#include "common/net/node_runtime.h"

#include "absl/status/status.h"
#include "common/base/clock.h"
#include "common/base/log_capture_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Heartbeat every second, down after 5 s of silence, dead after 5 + 20 s,
// no view within 30 s of registering ends the node.
class NodeRuntimeTest : public ::testing::Test {
 protected:
  NodeRuntimeTest()
      : runtime_({.scheduler = "127.0.0.1:7000",
                  .register_timeout = absl::Seconds(30),
                  .heartbeat_interval = absl::Seconds(1),
                  .heartbeat_timeout = absl::Seconds(5),
                  .scheduler_recovery_timeout = absl::Seconds(20),
                  .goes_on = "Serving goes on",
                  .clock = &clock_}) {
    runtime_.set_name("server 1");
  }

  // Registered, and holding the first view.
  void Join() {
    runtime_.Registering();
    ASSERT_TRUE(runtime_.NewerView(1));
  }

  FakeClock clock_;
  NodeRuntime runtime_;
};

TEST_F(NodeRuntimeTest, NoViewByTheRegistrationDeadlineEndsTheNode) {
  runtime_.Registering();
  clock_.Advance(absl::Seconds(30));
  EXPECT_TRUE(runtime_.Check(" (the cluster did not form)").ok()) << "the deadline itself is still in time";
  clock_.Advance(absl::Milliseconds(1));
  const absl::Status late = runtime_.Check(" (the cluster did not form)");
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(late.message(), "no cluster view from scheduler 127.0.0.1:7000 within 30s (the cluster did not form)");
}

TEST_F(NodeRuntimeTest, AViewBeforeTheDeadlineEndsTheRegistrationWait) {
  runtime_.Registering();
  clock_.Advance(absl::Seconds(29));
  ASSERT_TRUE(runtime_.NewerView(1));
  runtime_.Heard();
  clock_.Advance(absl::Seconds(4));
  EXPECT_TRUE(runtime_.Check().ok());
}

TEST_F(NodeRuntimeTest, WithoutARegisterTimeoutANodeWaitsForItsViewAnyOtherWay) {
  FakeClock clock;
  NodeRuntime runtime({.scheduler = "s", .clock = &clock});
  runtime.Registering();
  clock.Advance(absl::Hours(10));
  EXPECT_TRUE(runtime.Check().ok());
}

TEST_F(NodeRuntimeTest, HeartbeatsAreDueOncePerInterval) {
  runtime_.Registering();
  EXPECT_FALSE(runtime_.HeartbeatDue()) << "the registration itself counts as the first";
  clock_.Advance(absl::Milliseconds(999));
  EXPECT_FALSE(runtime_.HeartbeatDue());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(runtime_.HeartbeatDue());
  EXPECT_FALSE(runtime_.HeartbeatDue()) << "one per interval";
  clock_.Advance(absl::Milliseconds(2500));
  EXPECT_TRUE(runtime_.HeartbeatDue());
  EXPECT_FALSE(runtime_.HeartbeatDue()) << "a late loop sends one, not the ones it missed";
}

TEST_F(NodeRuntimeTest, PollTimeoutRunsToTheNextHeartbeatAndNoFurther) {
  runtime_.Registering();
  EXPECT_EQ(runtime_.PollTimeout(absl::Milliseconds(100)), absl::Milliseconds(100));
  clock_.Advance(absl::Milliseconds(940));
  EXPECT_EQ(runtime_.PollTimeout(absl::Milliseconds(100)), absl::Milliseconds(60));
  clock_.Advance(absl::Milliseconds(500));
  EXPECT_EQ(runtime_.PollTimeout(absl::Milliseconds(100)), absl::ZeroDuration()) << "overdue: do not block";
}

TEST_F(NodeRuntimeTest, SilenceIsDownAfterTheHeartbeatTimeoutAndDeadAfterTheRecoveryTimeout) {
  Join();
  testing::LogCapture log;
  clock_.Advance(absl::Seconds(5));
  EXPECT_TRUE(runtime_.Check().ok());
  EXPECT_FALSE(runtime_.scheduler_down()) << "silent for exactly the timeout is not yet down";
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(runtime_.Check().ok()) << "down is not dead: the node goes on";
  EXPECT_TRUE(runtime_.scheduler_down());
  EXPECT_THAT(log.text(), HasSubstr("server 1: scheduler 127.0.0.1:7000 silent for 5.001s; presumed down. Serving "
                                    "goes on; waiting up to 20s for it to come back"));
  clock_.Advance(absl::Seconds(5));
  EXPECT_TRUE(runtime_.Check().ok());
  EXPECT_EQ(log.text().find("presumed down"), log.text().rfind("presumed down")) << "logged once";
  clock_.Advance(absl::Seconds(15));
  const absl::Status dead = runtime_.Check();
  EXPECT_EQ(dead.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(dead.message(),
            "scheduler 127.0.0.1:7000 silent for 25.001s (heartbeat timeout 5s + scheduler recovery timeout 20s); "
            "presumed dead, stopping");
}

TEST_F(NodeRuntimeTest, AnyMessageFromTheSchedulerRestartsTheSilence) {
  Join();
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(absl::Seconds(4));
    runtime_.Heard();
    ASSERT_TRUE(runtime_.Check().ok());
  }
  EXPECT_FALSE(runtime_.scheduler_down()) << "40 s, never 5 s silent";
}

TEST_F(NodeRuntimeTest, BeforeItsFirstViewANodeIsNeverPresumingTheSchedulerDown) {
  runtime_.Registering();
  clock_.Advance(absl::Seconds(29));
  EXPECT_TRUE(runtime_.Check().ok());
  EXPECT_FALSE(runtime_.scheduler_down()) << "forming can take longer than a heartbeat timeout";
}

TEST_F(NodeRuntimeTest, ReregistrationIsThrottledUntilAnswered) {
  Join();
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(runtime_.Check().ok());
  ASSERT_TRUE(runtime_.scheduler_down());
  EXPECT_TRUE(runtime_.ReregisterDue());
  EXPECT_FALSE(runtime_.ReregisterDue()) << "every refused request says kUnauthenticated; one registration goes";
  clock_.Advance(absl::Milliseconds(999));
  EXPECT_FALSE(runtime_.ReregisterDue());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(runtime_.ReregisterDue()) << "unanswered for an interval: again";
  testing::LogCapture log;
  runtime_.Heard();
  runtime_.Reregistered("re-registered as node 7");
  EXPECT_FALSE(runtime_.scheduler_down());
  EXPECT_THAT(log.text(), HasSubstr("server 1: scheduler is back; re-registered as node 7"));
  EXPECT_TRUE(runtime_.ReregisterDue()) << "answered: the next refusal may re-register at once";
}

TEST_F(NodeRuntimeTest, AComebackBeforeTheRecoveryTimeoutKeepsTheNodeAlive) {
  Join();
  clock_.Advance(absl::Seconds(24));
  ASSERT_TRUE(runtime_.Check().ok());
  runtime_.Heard();
  runtime_.Reregistered();
  clock_.Advance(absl::Seconds(24));
  EXPECT_TRUE(runtime_.Check().ok()) << "silence counts from the last message, not from the first outage";
  EXPECT_TRUE(runtime_.scheduler_down()) << "24 s silent again: down again";
}

TEST_F(NodeRuntimeTest, OnlyNewerViewsAreApplied) {
  EXPECT_FALSE(runtime_.have_view());
  EXPECT_TRUE(runtime_.NewerView(3));
  EXPECT_TRUE(runtime_.have_view());
  EXPECT_FALSE(runtime_.NewerView(3)) << "repeated";
  EXPECT_FALSE(runtime_.NewerView(2)) << "older, overtaken on the way";
  EXPECT_TRUE(runtime_.NewerView(5));
  EXPECT_EQ(runtime_.view_epoch(), 5u);
}

TEST_F(NodeRuntimeTest, TheFirstViewIsAppliedWhateverItsEpoch) {
  // Epoch 0 is a view like any other when it is the first.
  EXPECT_TRUE(runtime_.NewerView(0));
  EXPECT_FALSE(runtime_.NewerView(0));
  EXPECT_TRUE(runtime_.NewerView(1));
}

TEST(FakeClockTest, MovesOnlyWhenAdvanced) {
  FakeClock clock;
  const absl::Time t0 = clock.Now();
  EXPECT_EQ(clock.Now(), t0);
  clock.Advance(absl::Milliseconds(1500));
  EXPECT_EQ(clock.Now() - t0, absl::Milliseconds(1500));
  EXPECT_THAT(absl::FormatTime(t0), Not(HasSubstr("infinite")));
}

TEST(RealClockTest, IsTheWallClock) {
  const absl::Time before = absl::Now();
  const absl::Time now = RealClock()->Now();
  EXPECT_GE(now, before);
  EXPECT_LE(now - before, absl::Seconds(60));
  EXPECT_EQ(ClockOr(nullptr), RealClock());
  FakeClock fake;
  EXPECT_EQ(ClockOr(&fake), &fake);
}

}  // namespace
}  // namespace ps
