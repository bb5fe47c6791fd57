// A scheduler restored from its state file (--restore) finishes the move
// its predecessor was making: the state saved before a move's
// release names it, and the restored scheduler's views name the new copy
// as the slice's only one. The nodes are raw protocol peers
// (tests/scheduler_peer.h), re-registering under the node ids of the state.

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "scheduler/job_state.h"
#include "scheduler/scheduler.h"
#include "tests/scheduler_peer.h"

namespace ps {
namespace {

// One server, one worker; server 1 joined and is taking slice 1 from
// server 0: it holds the copy (copies [0, 1]) and server 0 was releasing its own.
JobState MovingJob() {
  JobState s;
  s.incarnation = 0x5eed5eed5eed5eedULL;
  s.endpoint = "tcp://127.0.0.1:0";
  s.num_servers = 1;
  s.num_workers = 1;
  s.next_node_id = 4;
  s.view_epoch = 6;
  s.nodes = {JobStateNode{NodeInfo{1, Role::kServer, 0, "tcp://127.0.0.1:1", ""}, false, true},
             JobStateNode{NodeInfo{2, Role::kWorker, 0, "", ""}, false, true},
             JobStateNode{NodeInfo{3, Role::kServer, 1, "tcp://127.0.0.1:2", ""}, false, true}};
  ModelSpec model;
  model.tensors = {TensorSpec{"w", {2, 1000}, Initializer::Zeros()}};
  model.placement.slice_bytes = 4000;  // two slices of 1,000 floats
  s.model = model;
  s.copies = {{0}, {0, 1}};
  s.releasing = JobStateMove{1, 0, 1};
  return s;
}

// The first view the server of `rank`, node `node`, gets when it
// re-registers with the scheduler at `endpoint`.
ClusterViewMsg ViewSeenBy(const std::string& endpoint, uint32_t node, int32_t rank, uint64_t incarnation) {
  testing::SchedulerPeer peer(endpoint);
  EXPECT_TRUE(peer.Reconnect(Role::kServer, "tcp://127.0.0.1:9", rank, node, incarnation)) << "node " << node;
  std::optional<ClusterViewMsg> view = peer.Await<ClusterViewMsg>();
  EXPECT_TRUE(view.has_value()) << "node " << node << ": no view";
  return view.value_or(ClusterViewMsg{});
}

class SchedulerRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(::testing::TempDir(), "/restore-", getpid(), "-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".state");
  }
  // A scheduler of one server and one worker, --elastic, keeping its state
  // in path_: restored from `state` when given (written there first).
  void Start(const std::optional<JobState>& state) {
    if (state.has_value()) {
      ASSERT_TRUE(WriteJobState(path_, *state).ok());
    }
    SchedulerOptions options;
    options.bind = "127.0.0.1:0";
    options.num_servers = 1;
    options.num_workers = 1;
    options.heartbeat_timeout = absl::Minutes(5);  // the peers send none
    options.elastic = true;
    options.state_file = path_;
    options.restore = state.has_value();
    auto scheduler = Scheduler::Create(options);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = *std::move(scheduler);
    thread_ = std::thread([this] { (void)scheduler_->Run(); });
  }
  void Stop() {
    if (scheduler_) scheduler_->RequestStop();
    if (thread_.joinable()) thread_.join();
    scheduler_.reset();
  }
  void TearDown() override {
    Stop();
    std::remove(path_.c_str());
  }

  std::string path_;
  std::unique_ptr<Scheduler> scheduler_;
  std::thread thread_;
};

TEST_F(SchedulerRestoreTest, AMoveWhoseReleaseWasUnderWayIsFinished) {
  const JobState state = MovingJob();
  Start(state);
  if (HasFatalFailure()) return;
  // The view of the epoch the release announced (the saved one's next) names the new copy alone.
  const std::vector<std::vector<int32_t>> want = {{0}, {1}};
  for (const auto& [node, rank] : std::vector<std::pair<uint32_t, int32_t>>{{1, 0}, {3, 1}}) {
    const ClusterViewMsg view = ViewSeenBy(scheduler_->endpoint(), node, rank, state.incarnation);
    EXPECT_EQ(view.copies, want) << "node " << node;
    EXPECT_EQ(view.epoch, state.view_epoch + 1) << "node " << node;
  }
}

// The whole path with a live scheduler: server 1 joins a job of one server
// (peers play both, and the worker); the scheduler asks server 0 to copy a
// slice to it, then to release its own. With the release unanswered the
// state file names the move; the scheduler stopped there and restored
// finishes it.
TEST_F(SchedulerRestoreTest, ALiveSchedulersReleaseIsSavedBeforeItIsAskedThenFinishedWhenRestored) {
  Start(std::nullopt);
  if (HasFatalFailure()) return;
  testing::SchedulerPeer zero(scheduler_->endpoint()), worker(scheduler_->endpoint());
  zero.Register(Role::kServer, "tcp://127.0.0.1:1");
  worker.Register(Role::kWorker, "");
  ASSERT_TRUE(zero.Registered() && worker.Registered());
  worker.Send(DefineModelRequestMsg{*MovingJob().model});
  ASSERT_TRUE(zero.AwaitAndAck<CreateSlicesRequestMsg>().has_value());
  ASSERT_TRUE(worker.Await<DefineModelReplyMsg>().has_value());
  testing::SchedulerPeer one(scheduler_->endpoint());
  one.Register(Role::kServer, "tcp://127.0.0.1:2", /*join=*/true);
  ASSERT_TRUE(one.Registered());
  ASSERT_TRUE(one.AwaitAndAck<CreateSlicesRequestMsg>().has_value());
  // The move: the copy (answered), then the release (left unanswered).
  const std::optional<AddCopyRequestMsg> copy = zero.AwaitAndAck<AddCopyRequestMsg>();
  ASSERT_TRUE(copy.has_value());
  EXPECT_EQ(copy->server, 1);
  EXPECT_EQ(copy->release_epoch, 0u);
  const std::optional<AddCopyRequestMsg> release = zero.Await<AddCopyRequestMsg>();
  ASSERT_TRUE(release.has_value());
  EXPECT_EQ(release->key, copy->key);
  EXPECT_EQ(release->server, 0);
  auto saved = ReadJobState(path_);
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_TRUE(saved->releasing.has_value());
  EXPECT_EQ(*saved->releasing, (JobStateMove{copy->key, 0, 1}));
  EXPECT_EQ(saved->copies[copy->key], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(release->release_epoch, saved->view_epoch + 1);
  Stop();
  Start(*saved);
  if (HasFatalFailure()) return;
  const ClusterViewMsg view = ViewSeenBy(scheduler_->endpoint(), zero.node_id(), 0, zero.incarnation());
  EXPECT_EQ(view.copies[copy->key], std::vector<int32_t>{1});
  EXPECT_EQ(view.epoch, release->release_epoch);
}

TEST_F(SchedulerRestoreTest, WithoutAReleaseTheCopiesStayAsSaved) {
  JobState state = MovingJob();
  state.releasing.reset();  // the copy made, the release not asked yet: the balance is planned again
  Start(state);
  if (HasFatalFailure()) return;
  const ClusterViewMsg view = ViewSeenBy(scheduler_->endpoint(), 1, 0, state.incarnation);
  EXPECT_EQ(view.copies, (std::vector<std::vector<int32_t>>{{0}, {0, 1}}));
  EXPECT_EQ(view.epoch, state.view_epoch);
}

}  // namespace
}  // namespace ps
