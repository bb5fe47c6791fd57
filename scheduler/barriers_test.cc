#include "scheduler/barriers.h"

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

Waiter At(int rank, absl::Time deadline = kT0 + absl::Seconds(10)) {
  return Waiter{"id" + std::to_string(rank), static_cast<uint64_t>(100 + rank), rank, deadline};
}

TEST(BarriersTest, CompletesWhenEveryLiveWorkerArrived) {
  Barriers b;
  auto first = b.Arrive("epoch", At(0), 2);
  ASSERT_TRUE(first.ok());
  EXPECT_THAT(*first, SizeIs(0));
  EXPECT_EQ(b.Arrive("epoch", At(0), 2).status().code(), absl::StatusCode::kAlreadyExists);
  auto second = b.Arrive("epoch", At(1), 2);
  ASSERT_TRUE(second.ok());
  ASSERT_THAT(*second, SizeIs(2));
  EXPECT_EQ((*second)[0].request_id, 100u);
  EXPECT_EQ((*second)[1].request_id, 101u);
  EXPECT_THAT(*b.Arrive("epoch", At(0), 2), SizeIs(0));  // the same name again: a new barrier
}

TEST(BarriersTest, ADeadWorkerCompletesWhatWaitedOnlyForIt) {
  Barriers b;
  ASSERT_TRUE(b.Arrive("a", At(0), 3).ok());
  ASSERT_TRUE(b.Arrive("a", At(1), 3).ok());
  ASSERT_TRUE(b.Arrive("b", At(0), 3).ok());
  b.Forget("id1");                        // worker 1 died after arriving at "a"
  EXPECT_THAT(b.Complete(2), SizeIs(0));  // "a" has worker 0 only now
  ASSERT_TRUE(b.Arrive("a", At(2), 2).ok());
  EXPECT_THAT(b.Complete(0), SizeIs(0));
  EXPECT_THAT(b.Complete(1), SizeIs(1));  // only "b" is left, with one arrival
}

TEST(BarriersTest, ExpiredArrivalsNameTheMissingRanks) {
  Barriers b;
  ASSERT_TRUE(b.Arrive("x", At(0, kT0 + absl::Seconds(1)), 3).ok());
  ASSERT_TRUE(b.Arrive("x", At(2, kT0 + absl::Seconds(5)), 3).ok());
  EXPECT_THAT(b.Expire(kT0, 3), SizeIs(0));
  auto expired = b.Expire(kT0 + absl::Seconds(2), 3);
  ASSERT_THAT(expired, SizeIs(1));
  EXPECT_EQ(expired[0].first.rank, 0);
  EXPECT_EQ(expired[0].second.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(expired[0].second.message()), HasSubstr("barrier 'x' timed out; workers not arrived: [1]"));
}

}  // namespace
}  // namespace ps
