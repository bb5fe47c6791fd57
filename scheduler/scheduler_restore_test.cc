// A scheduler restored from its state file (--restore) finishes the move
// its predecessor was making (issue 33): the state saved before a move's
// release names it, and the restored scheduler's views name the new copy
// as the slice's only one. The nodes are raw protocol peers
// (tests/raw_peer.h) re-registering under the node ids of the state.

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "scheduler/job_state.h"
#include "scheduler/scheduler.h"
#include "tests/raw_peer.h"

namespace ps {
namespace {

constexpr absl::Duration kWait = absl::Seconds(20);

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

// The first view `node` gets when it re-registers.
ClusterViewMsg ViewSeenBy(const std::string& endpoint, uint32_t node, Role role, int32_t rank, uint64_t incarnation) {
  auto peer = testing::RawPeer::Connect(endpoint);
  EXPECT_TRUE(peer.ok()) << peer.status();
  if (!peer.ok()) return {};
  Envelope env{kProtocolVersion, 1, node,
               RegisterRequestMsg{role, role == Role::kServer ? "tcp://127.0.0.1:9" : "", rank, "", node}};
  env.incarnation = incarnation;
  EXPECT_TRUE((*peer)->Send(env).ok());
  while (true) {
    absl::StatusOr<testing::RawReply> reply = (*peer)->Receive(kWait);
    if (!reply.ok()) {
      ADD_FAILURE() << "node " << node << ": no view: " << reply.status();
      return {};
    }
    if (const auto* err = std::get_if<ErrorMsg>(&reply->env.body)) {
      ADD_FAILURE() << "node " << node << " refused: " << err->message;
      return {};
    }
    if (const auto* view = std::get_if<ClusterViewMsg>(&reply->env.body)) return *view;
  }
}

class SchedulerRestoreTest : public ::testing::Test {
 protected:
  void Start(const JobState& state) {
    path_ =
        absl::StrCat(::testing::TempDir(), "/restore-", ::testing::UnitTest::GetInstance()->random_seed(), ".state");
    ASSERT_TRUE(WriteJobState(path_, state).ok());
    SchedulerOptions options;
    options.bind = "127.0.0.1:0";
    options.num_servers = state.num_servers;
    options.num_workers = state.num_workers;
    options.elastic = true;
    options.state_file = path_;
    options.restore = true;
    auto scheduler = Scheduler::Create(options);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = *std::move(scheduler);
    thread_ = std::thread([this] { (void)scheduler_->Run(); });
  }
  void TearDown() override {
    if (scheduler_) scheduler_->RequestStop();
    if (thread_.joinable()) thread_.join();
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
    const ClusterViewMsg view = ViewSeenBy(scheduler_->endpoint(), node, Role::kServer, rank, state.incarnation);
    EXPECT_EQ(view.copies, want) << "node " << node;
    EXPECT_EQ(view.epoch, state.view_epoch + 1) << "node " << node;
  }
}

TEST_F(SchedulerRestoreTest, WithoutAReleaseTheCopiesStayAsSaved) {
  JobState state = MovingJob();
  state.releasing.reset();  // the copy made, the release not asked yet: the balance is planned again
  Start(state);
  if (HasFatalFailure()) return;
  const ClusterViewMsg view = ViewSeenBy(scheduler_->endpoint(), 1, Role::kServer, 0, state.incarnation);
  EXPECT_EQ(view.copies, (std::vector<std::vector<int32_t>>{{0}, {0, 1}}));
  EXPECT_EQ(view.epoch, state.view_epoch);
}

}  // namespace
}  // namespace ps
