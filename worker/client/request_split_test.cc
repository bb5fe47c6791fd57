#include "worker/client/request_split.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::client_internal {
namespace {

using ::testing::ElementsAre;

zmq::message_t Frame(const std::string& s) { return zmq::message_t(s.data(), s.size()); }
std::string Text(const zmq::message_t& m) { return std::string(static_cast<const char*>(m.data()), m.size()); }

// Slices 0 and 2 are led by server 1 now, 1 and 3 by server 2.
int Route(uint32_t key) { return key % 2 == 0 ? 1 : 2; }

TEST(RequestSplitTest, PushWithPullSplitsSlicesFramesAndDestinations) {
  PushRequestMsg push{7, {SliceData{0, 1, 3}, SliceData{1, 1, 4}, SliceData{2, 1, 5}}};
  push.seq = 41;
  push.origin = 0;
  push.then_pull = PullRequestMsg{8, {0, 1, 2, 3}, 500, {RowsRequest{3, {9, 10}}}};
  std::vector<zmq::message_t> payloads;
  for (const char* s : {"a", "b", "c"}) payloads.push_back(Frame(s));
  std::vector<Destination> dest(5);
  for (uint32_t i = 0; i < 5; ++i) dest[i].key = i < 4 ? i : 3, dest[i].length = 100 + i;
  const Envelope env{kProtocolVersion, 0, 12, push, 0, 99};

  std::vector<RequestPart> parts = SplitByServer(env, std::move(payloads), std::move(dest), 0, Route);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].target, 1);
  EXPECT_EQ(parts[1].target, 2);
  const auto& to1 = std::get<PushRequestMsg>(parts[0].envelope.body);
  const auto& to2 = std::get<PushRequestMsg>(parts[1].envelope.body);
  EXPECT_EQ(to1.slices, (std::vector<SliceData>{SliceData{0, 1, 3}, SliceData{2, 1, 5}}));
  EXPECT_EQ(to2.slices, (std::vector<SliceData>{SliceData{1, 1, 4}}));
  // The header stays: one seq, numbered for the server the push was built for.
  EXPECT_EQ(to1.seq, 41u);
  EXPECT_EQ(to2.seq, 41u);
  EXPECT_EQ(to1.origin, 0);
  EXPECT_EQ(to1.clock, 7);
  EXPECT_EQ(parts[0].envelope.sender, 12u);
  EXPECT_EQ(parts[0].envelope.incarnation, 99u);
  ASSERT_EQ(parts[0].payloads.size(), 2u);
  EXPECT_EQ(Text(parts[0].payloads[0]), "a");
  EXPECT_EQ(Text(parts[0].payloads[1]), "c");
  ASSERT_EQ(parts[1].payloads.size(), 1u);
  EXPECT_EQ(Text(parts[1].payloads[0]), "b");
  // Each part's pull, and where its answers land, in request order.
  EXPECT_EQ(to1.then_pull, (PullRequestMsg{8, {0, 2}, 500, {}}));
  EXPECT_EQ(to2.then_pull, (PullRequestMsg{8, {1, 3}, 500, {RowsRequest{3, {9, 10}}}}));
  std::vector<uint64_t> lengths1, lengths2;
  for (const Destination& d : parts[0].destinations) lengths1.push_back(d.length);
  for (const Destination& d : parts[1].destinations) lengths2.push_back(d.length);
  EXPECT_THAT(lengths1, ElementsAre(100, 102));
  EXPECT_THAT(lengths2, ElementsAre(101, 103, 104));
}

TEST(RequestSplitTest, PartsThatOnlyPullOrOnlyPushLoseTheOtherHalf) {
  PushRequestMsg push{3, {SliceData{0, 1, 0}}};
  push.then_pull = PullRequestMsg{4, {1}, 0, {}};
  std::vector<zmq::message_t> payloads;
  payloads.push_back(Frame("x"));
  std::vector<Destination> dest(1);
  dest[0].key = 1;
  std::vector<RequestPart> parts =
      SplitByServer(Envelope{kProtocolVersion, 0, 1, push}, std::move(payloads), std::move(dest), 0, Route);
  ASSERT_EQ(parts.size(), 2u);
  const auto& pushed = std::get<PushRequestMsg>(parts[0].envelope.body);
  EXPECT_FALSE(pushed.then_pull.has_value());
  EXPECT_TRUE(parts[0].destinations.empty());
  EXPECT_EQ(std::get<PullRequestMsg>(parts[1].envelope.body), (PullRequestMsg{4, {1}, 0, {}}));
  ASSERT_EQ(parts[1].destinations.size(), 1u);
  EXPECT_EQ(parts[1].destinations[0].key, 1u);
}

TEST(RequestSplitTest, OtherRequestsGoWholeToTheFallback) {
  std::vector<RequestPart> parts = SplitByServer(Envelope{kProtocolVersion, 0, 1, StatsRequestMsg{}}, {}, {}, 5, Route);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].target, 5);
  EXPECT_TRUE(std::holds_alternative<StatsRequestMsg>(parts[0].envelope.body));
}

}  // namespace
}  // namespace ps::client_internal
