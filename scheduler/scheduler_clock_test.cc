// The scheduler's failure detection driven by a FakeClock: a node is
// declared dead when it has been silent for more than heartbeat_timeout of
// the scheduler's clock, never before, however long the test takes in real
// time. The peers are raw protocol peers (tests/scheduler_peer.h).

#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/base/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
#include "tests/scheduler_peer.h"

namespace ps {
namespace {

using ::testing::Contains;
using ::testing::Not;

using Peer = testing::SchedulerPeer;

class SchedulerClockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SchedulerOptions options;
    options.bind = "127.0.0.1:0";
    options.num_servers = 1;
    options.num_workers = 2;
    options.heartbeat_timeout = absl::Seconds(5);
    options.clock = &clock_;
    auto scheduler = Scheduler::Create(options);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = *std::move(scheduler);
    thread_ = std::thread([this] { (void)scheduler_->Run(); });
    server_.emplace(scheduler_->endpoint());
    live_.emplace(scheduler_->endpoint());
    silent_.emplace(scheduler_->endpoint());
    server_->Register(Role::kServer, "tcp://127.0.0.1:1");
    live_->Register(Role::kWorker, "");
    silent_->Register(Role::kWorker, "");
    for (Peer* p : {&*server_, &*live_, &*silent_}) ASSERT_TRUE(p->Registered()) << "no registration reply";
  }
  void TearDown() override {
    if (scheduler_) scheduler_->RequestStop();
    if (thread_.joinable()) thread_.join();
  }

  // Both live nodes make themselves heard; the views the server saw on the way.
  std::vector<ClusterViewMsg> LiveNodesHeard() {
    std::vector<ClusterViewMsg> views;
    EXPECT_TRUE(live_->RoundTrip(nullptr));
    EXPECT_TRUE(server_->RoundTrip(&views));
    EXPECT_TRUE(server_->RoundTrip(&views));
    return views;
  }

  FakeClock clock_;
  std::unique_ptr<Scheduler> scheduler_;
  std::thread thread_;
  std::optional<Peer> server_, live_, silent_;
};

TEST_F(SchedulerClockTest, ASilentWorkerIsDeclaredDeadOnlyPastTheHeartbeatTimeoutOfItsClock) {
  std::vector<ClusterViewMsg> views = LiveNodesHeard();  // the formation's view
  clock_.Advance(absl::Seconds(5));
  views = LiveNodesHeard();
  for (const ClusterViewMsg& v : views) {
    EXPECT_THAT(v.dead, Not(Contains(silent_->node_id()))) << "declared dead at exactly the timeout";
  }
  clock_.Advance(absl::Milliseconds(1));
  std::optional<ClusterViewMsg> view = server_->Await<ClusterViewMsg>();
  ASSERT_TRUE(view.has_value()) << "no view declaring the silent worker dead";
  EXPECT_THAT(view->dead, Contains(silent_->node_id()));
  EXPECT_THAT(view->dead, Not(Contains(live_->node_id())));
  EXPECT_THAT(view->dead, Not(Contains(server_->node_id())));
}

TEST_F(SchedulerClockTest, HeartbeatsKeepANodeAliveForAnyLengthOfTime) {
  LiveNodesHeard();
  for (int i = 0; i < 20; ++i) {  // 80 s of the scheduler's time
    clock_.Advance(absl::Seconds(4));
    ASSERT_TRUE(silent_->RoundTrip(nullptr));
    for (const ClusterViewMsg& v : LiveNodesHeard()) {
      ASSERT_TRUE(v.dead.empty()) << "a node that beat every 4 s was declared dead after " << 4 * (i + 1) << " s";
    }
  }
}

TEST_F(SchedulerClockTest, ADeadNodesHeartbeatIsRefusedNamingItsRank) {
  LiveNodesHeard();
  clock_.Advance(absl::Seconds(5));
  LiveNodesHeard();
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(server_->Await<ClusterViewMsg>().has_value());
  silent_->Send(HeartbeatMsg{});
  std::optional<ErrorMsg> refused = silent_->Await<ErrorMsg>();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code, absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused->message, ::testing::HasSubstr("was declared dead or replaced; restart it with --rank="));
}

}  // namespace
}  // namespace ps
