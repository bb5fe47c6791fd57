#include "scheduler/unreachable_servers.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(UnreachableServersTest, AReportSaysWhatIsNewAndWhatCameBack) {
  UnreachableServers u;
  auto change = u.Update(0, {{1, 5000, true}});
  ASSERT_EQ(change.lost.size(), 1u);
  EXPECT_EQ(change.lost[0].server, 1);
  EXPECT_THAT(change.back, IsEmpty());
  // The same report again (the next heartbeat): nothing new.
  change = u.Update(0, {{1, 6000, true}});
  EXPECT_THAT(change.lost, IsEmpty());
  EXPECT_THAT(u.WorkersCutFrom(1), ElementsAre(0));
  change = u.Update(2, {{1, 5100, true}, {3, 5100, true}});
  EXPECT_EQ(change.lost.size(), 2u);
  EXPECT_THAT(u.WorkersCutFrom(1), ElementsAre(0, 2));
  EXPECT_THAT(u.Servers(), ElementsAre(1, 3));
  // Worker 2 reaches server 1 again; server 3 is still cut off from it.
  change = u.Update(2, {{3, 6100, true}});
  EXPECT_THAT(change.back, ElementsAre(1));
  EXPECT_THAT(u.WorkersCutFrom(1), ElementsAre(0));
  change = u.Update(0, {});
  EXPECT_THAT(change.back, ElementsAre(1));
  EXPECT_THAT(u.Servers(), ElementsAre(3));
}

TEST(UnreachableServersTest, ADeadServerOrAGoneWorkerIsForgotten) {
  UnreachableServers u;
  u.Update(0, {{1, 5000, true}, {2, 5000, true}});
  u.Update(1, {{1, 5000, true}});
  u.ForgetServer(1);
  EXPECT_THAT(u.Servers(), ElementsAre(2));
  EXPECT_THAT(u.WorkersCutFrom(1), IsEmpty());
  u.ForgetWorker(0);
  EXPECT_THAT(u.Servers(), IsEmpty());
  // A server forgotten and reported again is new again.
  EXPECT_EQ(u.Update(1, {{1, 7000, true}}).lost.size(), 1u);
}

}  // namespace
}  // namespace ps
