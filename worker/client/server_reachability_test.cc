#include "worker/client/server_reachability.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::client_internal {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

ServerReachability TwoServers() {
  ServerReachability r({.probe_after = absl::Seconds(1), .timeout = absl::Seconds(5), .warn_every = absl::Seconds(3)});
  r.Resize(2, kT0);
  return r;
}

absl::Time At(double seconds) { return kT0 + absl::Seconds(seconds); }

TEST(ServerReachabilityTest, IdleLinksAreNeitherProbedNorUnreachable) {
  ServerReachability r = TwoServers();
  const std::vector<bool> none = {false, false}, live = {true, true};
  const auto round = r.Check(none, live, At(60));
  EXPECT_THAT(round.probe, IsEmpty());
  EXPECT_THAT(round.lost, IsEmpty());
  EXPECT_THAT(r.Report(At(60)), IsEmpty());
}

TEST(ServerReachabilityTest, ASilentServerWaitedOnIsProbedThenUnreachableAfterTheTimeout) {
  ServerReachability r = TwoServers();
  const std::vector<bool> waiting = {true, true}, live = {true, true};
  // Requests begin to wait at 10 s (the links were idle before): silence counts from then.
  EXPECT_THAT(r.Check(waiting, live, At(10)).probe, IsEmpty());
  EXPECT_THAT(r.Check(waiting, live, At(11)).probe, ElementsAre(0, 1));
  EXPECT_THAT(r.Check(waiting, live, At(11.5)).probe, IsEmpty());  // one probe per probe_after
  r.Heard(0, At(11.6));                                            // server 0 answers its probe
  EXPECT_THAT(r.Check(waiting, live, At(12.6)).probe, ElementsAre(0, 1));
  r.Heard(0, At(12.7));
  auto round = r.Check(waiting, live, At(14.9));
  EXPECT_THAT(round.lost, IsEmpty());
  round = r.Check(waiting, live, At(15));
  EXPECT_THAT(round.lost, ElementsAre(1));
  EXPECT_TRUE(r.unreachable(1));
  EXPECT_EQ(r.unreachable_since(1), At(10));
  EXPECT_FALSE(r.unreachable(0));
  r.Heard(0, At(15.5));
  const std::vector<UnreachableServer> report = r.Report(At(16));
  ASSERT_EQ(report.size(), 1u);
  EXPECT_EQ(report[0], (UnreachableServer{1, 6000, true}));
}

TEST(ServerReachabilityTest, AServerWaitedOnThatAnswersProbesStaysReachable) {
  ServerReachability r = TwoServers();
  const std::vector<bool> waiting = {true, false}, live = {true, true};
  for (double t = 0; t < 60; t += 0.5) {
    for (int s : r.Check(waiting, live, At(t)).probe) r.Heard(s, At(t + 0.01));  // a sync step held for a minute
    EXPECT_FALSE(r.unreachable(0)) << t;
  }
}

TEST(ServerReachabilityTest, StillUnreachableRepeatsEveryWarnEveryUntilHeard) {
  ServerReachability r = TwoServers();
  const std::vector<bool> waiting = {false, true}, live = {true, true};
  r.Check(waiting, live, At(0));
  EXPECT_THAT(r.Check(waiting, live, At(5)).lost, ElementsAre(1));
  EXPECT_THAT(r.Check(waiting, live, At(7)).still, IsEmpty());
  EXPECT_THAT(r.Check(waiting, live, At(8)).still, ElementsAre(1));
  EXPECT_THAT(r.Check(waiting, live, At(11)).still, ElementsAre(1));
  // The worker's own network is down: it hears no other server either.
  EXPECT_FALSE(r.Report(At(11))[0].hears_others);
  EXPECT_TRUE(r.Heard(1, At(12)));
  EXPECT_FALSE(r.unreachable(1));
  EXPECT_FALSE(r.Heard(1, At(12.1)));
  EXPECT_THAT(r.Report(At(12.2)), IsEmpty());
}

TEST(ServerReachabilityTest, AnUnreachableServerIsProbedEvenWithNothingWaiting) {
  ServerReachability r = TwoServers();
  r.Check(std::vector<bool>{false, true}, std::vector<bool>{true, true}, At(0));
  ASSERT_THAT(r.Check(std::vector<bool>{false, true}, std::vector<bool>{true, true}, At(5)).lost, ElementsAre(1));
  // Its requests expired: nothing waits, but it is probed until it answers.
  EXPECT_THAT(r.Check(std::vector<bool>{false, false}, std::vector<bool>{true, true}, At(6)).probe, ElementsAre(1));
}

TEST(ServerReachabilityTest, ADeadServerIsTheFailoversNotUnreachable) {
  ServerReachability r = TwoServers();
  r.Check(std::vector<bool>{true, true}, std::vector<bool>{true, true}, At(0));
  ASSERT_THAT(r.Check(std::vector<bool>{true, true}, std::vector<bool>{true, true}, At(5)).lost, ElementsAre(0, 1));
  const auto round = r.Check(std::vector<bool>{true, true}, std::vector<bool>{true, false}, At(6));
  EXPECT_FALSE(r.unreachable(1));
  EXPECT_THAT(round.probe, ElementsAre(0));
  EXPECT_EQ(r.Report(At(6)).size(), 1u);
}

}  // namespace
}  // namespace ps::client_internal
