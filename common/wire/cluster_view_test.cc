#include "common/wire/cluster_view.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

NodeInfo Server(uint32_t id, int rank) { return NodeInfo{id, Role::kServer, rank, "tcp://s:" + std::to_string(rank)}; }
NodeInfo Worker(uint32_t id, int rank, std::string address = "") {
  return NodeInfo{id, Role::kWorker, rank, std::move(address)};
}

// 2 servers and 3 workers; worker 2 takes connections (a pipeline stage).
ClusterViewMsg Formed() {
  ClusterViewMsg v{2, 3, {Worker(5, 2, "tcp://w:2"), Server(1, 0), Worker(3, 0), Server(2, 1), Worker(4, 1)}};
  v.epoch = 1;
  v.incarnation = 77;
  return v;
}

TEST(ClusterViewTest, ServersSeeEveryNodeWorkersOnlyThoseTheyReach) {
  const ClusterViewMsg server = ViewFor(Formed(), Role::kServer);
  ASSERT_EQ(server.nodes.size(), 5u);
  EXPECT_EQ(server.nodes[0], Server(1, 0));  // servers first, by rank; then workers by rank
  EXPECT_EQ(server.nodes[1], Server(2, 1));
  EXPECT_EQ(server.nodes[2], Worker(3, 0));
  EXPECT_EQ(server.nodes[4], Worker(5, 2, "tcp://w:2"));
  const ClusterViewMsg worker = ViewFor(Formed(), Role::kWorker);
  EXPECT_THAT(worker.nodes, ::testing::ElementsAre(Server(1, 0), Server(2, 1), Worker(5, 2, "tcp://w:2")));
  EXPECT_EQ(worker.num_workers, 3);
}

// Worker 1 dies (view 2), a new node takes its rank (view 3), server 1 is
// replaced and the copies change (view 4): each change is a few entries,
// and merging each into the view before gives the whole view, for both roles.
TEST(ClusterViewTest, ADeltaMergedIntoTheViewBeforeIsTheWholeView) {
  std::vector<ClusterViewMsg> views = {Formed()};
  ClusterViewMsg v = Formed();
  std::erase_if(v.nodes, [](const NodeInfo& n) { return n.node_id == 4; });
  v.dead = {4};
  v.epoch = 2;
  views.push_back(v);
  v.nodes.push_back(Worker(6, 1));
  v.epoch = 3;
  views.push_back(v);
  std::erase_if(v.nodes, [](const NodeInfo& n) { return n.node_id == 2; });
  v.nodes.push_back(Server(7, 1));
  v.dead = {2, 4};
  v.copies = {{0, 1}, {1, 0}, {0, 1}};
  v.epoch = 4;
  views.push_back(v);
  v.copies[2] = {1};  // slice 2's primary died: its backup leads it
  v.epoch = 5;
  views.push_back(v);
  for (Role role : {Role::kServer, Role::kWorker}) {
    ClusterViewMsg held = ViewFor(views[0], role);
    for (size_t i = 1; i < views.size(); ++i) {
      const ClusterViewMsg delta = ViewDelta(ViewFor(views[i - 1], role), ViewFor(views[i], role));
      EXPECT_EQ(delta.base_epoch, i);
      EXPECT_LE(delta.nodes.size(), 1u) << "view " << i + 1;
      EXPECT_LE(delta.dead.size(), 1u) << "view " << i + 1;
      if (i == 4) {  // one slice's copies changed: that slice alone
        EXPECT_EQ(delta.copy_keys, std::vector<uint32_t>{2});
        EXPECT_EQ(delta.copies, (std::vector<std::vector<int32_t>>{{1}}));
      }
      ASSERT_TRUE(MergeView(held, delta).ok());
      EXPECT_EQ(held, ViewFor(views[i], role)) << "view " << i + 1 << ", role " << RoleName(role);
    }
  }
  const ClusterViewMsg unchanged = ViewDelta(ViewFor(views[4], Role::kServer), ViewFor(views[4], Role::kServer));
  EXPECT_TRUE(unchanged.nodes.empty() && unchanged.dead.empty() && unchanged.copies.empty());
}

TEST(ClusterViewTest, ADeltaAgainstAnotherViewIsRefusedAndChangesNothing) {
  ClusterViewMsg held = ViewFor(Formed(), Role::kServer);
  ClusterViewMsg later = Formed();
  later.nodes.push_back(Worker(9, 3));
  later.epoch = 3;
  ClusterViewMsg delta = ViewDelta(ViewFor(Formed(), Role::kServer), ViewFor(later, Role::kServer));
  delta.base_epoch = 2;  // view 2 never reached this node
  const ClusterViewMsg before = held;
  const absl::Status s = MergeView(held, delta);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("a change to cluster view 2 reached a node holding view 1"));
  EXPECT_EQ(held, before);
  // A change to the copies of a slice the view does not have.
  held.copies = {{0, 1}};
  ClusterViewMsg moved = held;
  moved.copies = {{1, 0}, {0}};
  moved.copy_keys = {0, 5};
  moved.base_epoch = held.epoch;
  moved.epoch = held.epoch + 1;
  const ClusterViewMsg kept = held;
  const absl::Status bad = MergeView(held, moved);
  EXPECT_EQ(bad.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(bad.message(), ::testing::HasSubstr("moves the copies of slice 5 of 1"));
  EXPECT_EQ(held, kept);
}

}  // namespace
}  // namespace ps
