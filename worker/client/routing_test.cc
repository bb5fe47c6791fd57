#include "worker/client/routing.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::client_internal {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

ClusterViewMsg View(uint64_t epoch, std::vector<std::vector<int32_t>> copies) {
  ClusterViewMsg view;
  view.epoch = epoch;
  view.copies = std::move(copies);
  return view;
}

Outgoing Pull(int target, std::vector<uint32_t> keys) {
  Outgoing out;
  out.target = target;
  out.envelope.body = PullRequestMsg{0, std::move(keys)};
  out.op = std::make_shared<Op>();
  absl::MutexLock lock(&out.op->mu);
  out.op->replies_pending = 1;
  return out;
}

absl::Status StatusOf(const std::shared_ptr<Op>& op) {
  absl::MutexLock lock(&op->mu);
  return op->status;
}

Moved MovedPull(uint32_t key, uint64_t sent_epoch, uint64_t refused_epoch, absl::Time retry_at, absl::Time deadline) {
  Outgoing out = Pull(0, {key});
  return Moved{Held{std::move(out.envelope), {}, absl::Seconds(1), out.op, {}},
               0,
               refused_epoch,
               sent_epoch,
               retry_at,
               deadline,
               absl::UnavailableError("moved"),
               false};
}

TEST(RoutingTest, AViewWithCopiesNamesTheLeadersAndMakesTheJobReplicated) {
  Routing routing;
  EXPECT_FALSE(routing.TakeView(View(3, {})));
  EXPECT_EQ(routing.epoch(), 3u);
  EXPECT_FALSE(routing.moves());
  EXPECT_EQ(routing.Leader(0, 7), 7);  // no copies: the fallback

  EXPECT_TRUE(routing.TakeView(View(4, {{1, 0}, {}, {2}})));
  EXPECT_TRUE(routing.replicated());
  EXPECT_TRUE(routing.moves());
  EXPECT_EQ(routing.Leader(0, 7), 1);
  EXPECT_EQ(routing.Leader(1, 7), 7);  // the view names no copy of slice 1
  EXPECT_EQ(routing.Leader(9, 7), 7);  // nor of a slice past its list
  EXPECT_TRUE(routing.LeadsAny(2));
  EXPECT_FALSE(routing.LeadsAny(0));               // a backup only
  EXPECT_FALSE(routing.TakeView(View(5, {{0}})));  // replicated already
}

TEST(RoutingTest, ARequestIsMisroutedWhenAnotherServerLeadsOneOfItsSlices) {
  Routing routing;
  Envelope push{kProtocolVersion, 0, 0, PushRequestMsg{1, {SliceData{0, 1, 1}}}};
  EXPECT_FALSE(routing.Misrouted(push, 0));  // no copies: nothing moves
  routing.TakeView(View(2, {{0}, {1}}));
  EXPECT_FALSE(routing.Misrouted(push, 0));
  std::get<PushRequestMsg>(push.body).then_pull = PullRequestMsg{1, {1}};
  EXPECT_TRUE(routing.Misrouted(push, 0));  // the pull riding on it is slice 1's, led by server 1
}

TEST(RoutingTest, AMovedRequestGoesAgainOnANewerViewOrItsRetryTimeAndFailsAtItsDeadline) {
  Routing routing;
  routing.TakeView(View(5, {{0}}));
  routing.AddMoved(MovedPull(0, 5, 6, kT0 + absl::Milliseconds(5), kT0 + absl::Seconds(1)));
  Moved late = MovedPull(1, 5, 5, kT0 + absl::Milliseconds(5), kT0 + absl::Milliseconds(1));
  const std::shared_ptr<Op> late_op = late.held.op;
  routing.AddMoved(std::move(late));
  EXPECT_TRUE(routing.holding());

  // The refusing server's view (6) is not here yet; the other is past its deadline.
  EXPECT_THAT(routing.TakeMovedDue(kT0 + absl::Milliseconds(2)), IsEmpty());
  EXPECT_TRUE(absl::IsUnavailable(StatusOf(late_op)));
  EXPECT_THAT(routing.TakeMovedDue(kT0 + absl::Milliseconds(10)), IsEmpty());  // still behind view 6
  routing.TakeView(View(6, {{1}}));
  std::vector<Moved> due = routing.TakeMovedDue(kT0 + absl::Milliseconds(3));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].refused_epoch, 6u);
  EXPECT_FALSE(routing.holding());
}

TEST(RoutingTest, ARequestForSlicesInTransitWaitsBehindThemAndGoesInOrder) {
  Routing routing;
  routing.TakeView(View(2, {{0}, {0}, {0}}));
  const auto none = [] { return absl::flat_hash_set<uint32_t>{}; };
  const auto key1 = [] { return absl::flat_hash_set<uint32_t>{1}; };
  Outgoing free = Pull(0, {0});
  EXPECT_FALSE(routing.Fence(free, key1, kT0 + absl::Seconds(1)));
  Outgoing first = Pull(0, {1, 2});
  EXPECT_TRUE(routing.Fence(first, key1, kT0 + absl::Seconds(1)));
  Outgoing second = Pull(0, {2});  // behind the fenced one, for slice 2
  EXPECT_TRUE(routing.Fence(second, none, kT0 + absl::Seconds(1)));
  Outgoing expiring = Pull(0, {1});
  const std::shared_ptr<Op> expiring_op = expiring.op;
  EXPECT_TRUE(routing.Fence(expiring, key1, kT0 + absl::Milliseconds(1)));

  std::vector<std::vector<uint32_t>> sent;
  const auto send = [&](Outgoing& out) { sent.push_back(std::get<PullRequestMsg>(out.envelope.body).keys); };
  routing.ReleaseFenced(kT0, key1, send);  // slice 1 still in transit: all wait
  EXPECT_THAT(sent, IsEmpty());
  routing.ReleaseFenced(kT0 + absl::Milliseconds(2), none, send);
  EXPECT_THAT(sent, ElementsAre(ElementsAre(1, 2), ElementsAre(2)));
  EXPECT_TRUE(absl::IsDeadlineExceeded(StatusOf(expiring_op)));
  EXPECT_FALSE(routing.holding());
}

}  // namespace
}  // namespace ps::client_internal
