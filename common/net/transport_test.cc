#include "common/net/transport.h"

#include "absl/strings/match.h"
#include "common/wire/codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(NormalizeEndpointTest, AcceptsHostPortAndFullEndpoints) {
  EXPECT_EQ(NormalizeEndpoint("127.0.0.1:9000").value(), "tcp://127.0.0.1:9000");
  EXPECT_EQ(NormalizeEndpoint("tcp://10.0.0.2:0").value(), "tcp://10.0.0.2:0");
  EXPECT_EQ(NormalizeEndpoint("host-a:65535").value(), "tcp://host-a:65535");
  EXPECT_EQ(NormalizeEndpoint("ipc:///tmp/x.sock").value(), "ipc:///tmp/x.sock");
}

TEST(NormalizeEndpointTest, RefusesWhatIsNotAnEndpoint) {
  for (const char* bad :
       {"", "localhost", ":9000", "host:", "host:port", "host:70000", "host:-1", "udp://host:1", "tcp://host"}) {
    auto s = NormalizeEndpoint(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(BindRouterTest, PortZeroGivesARealPortAndWildcardsAreAdvertised) {
  zmq::context_t context;
  std::string bound;
  auto s = BindRouter(context, "tcp://127.0.0.1:0", "127.0.0.1", &bound);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(bound, StartsWith("tcp://127.0.0.1:"));
  EXPECT_FALSE(absl::EndsWith(bound, ":0"));
  std::string wild;
  auto w = BindRouter(context, "tcp://0.0.0.0:0", "10.9.8.7", &wild);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(wild, StartsWith("tcp://10.9.8.7:"));
}

TEST(BindRouterTest, AnAddressInUseIsUnavailable) {
  zmq::context_t context;
  std::string bound, again;
  auto first = BindRouter(context, "tcp://127.0.0.1:0", "127.0.0.1", &bound);
  ASSERT_TRUE(first.ok());
  auto second = BindRouter(context, bound, "127.0.0.1", &again);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(bound));
}

// A ROUTER on an ephemeral port and a DEALER connected to it.
class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = BindRouter(context_, "tcp://127.0.0.1:0", "127.0.0.1", &bound_);
    ASSERT_TRUE(r.ok()) << r.status();
    router_ = *std::move(r);
    auto d = ConnectDealer(context_, bound_);
    ASSERT_TRUE(d.ok()) << d.status();
    dealer_ = *std::move(d);
  }

  zmq::context_t context_;
  std::string bound_;
  zmq::socket_t router_, dealer_;
};

TEST_F(TransportTest, HeaderAndPayloadFramesCrossIntact) {
  std::vector<float> a = {1, 2, 3}, b(1000, 0.5f);
  std::vector<zmq::message_t> payloads;
  payloads.emplace_back(a.data(), a.size() * sizeof(float));
  payloads.emplace_back(b.data(), b.size() * sizeof(float));
  const Envelope sent{kProtocolVersion, 42, 7, PushRequestMsg{3, {SliceData{0, 3, 0}, SliceData{1, 1000, 0}}}};
  ASSERT_TRUE(SendMessage(dealer_, nullptr, sent, std::move(payloads)).ok());
  zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq::poll(&item, 1, std::chrono::seconds(10)), 1);
  auto raw = ReceiveMessage(router_, /*routed=*/true);
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_GT(raw->routing_id.size(), 0u);
  auto env = DecodeEnvelope(Bytes(raw->header));
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(*env, sent);
  ASSERT_EQ(raw->payloads.size(), 2u);
  EXPECT_EQ(raw->payloads[0].size(), 12u);
  EXPECT_EQ(std::memcmp(raw->payloads[1].data(), b.data(), 4000), 0);
  // And back, addressed by the routing id.
  ASSERT_TRUE(SendMessage(router_, &raw->routing_id, Envelope{kProtocolVersion, 42, 0, AckMsg{}}).ok());
  zmq::pollitem_t back{dealer_.handle(), 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq::poll(&back, 1, std::chrono::seconds(10)), 1);
  auto reply = ReceiveMessage(dealer_, /*routed=*/false);
  ASSERT_TRUE(reply.ok());
  EXPECT_TRUE(std::holds_alternative<AckMsg>(DecodeEnvelope(Bytes(reply->header))->body));
}

TEST_F(TransportTest, NothingWaitingIsUnavailableAndAnUnknownPeerCannotBeAddressed) {
  EXPECT_EQ(ReceiveMessage(router_, true).status().code(), absl::StatusCode::kUnavailable);
  zmq::message_t nobody("no-such-peer", 12);
  const absl::Status s = SendMessage(router_, &nobody, Envelope{kProtocolVersion, 1, 0, AckMsg{}});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
}

TEST_F(TransportTest, AnEmptyHeaderFrameIsDataLoss) {
  zmq::message_t empty;
  dealer_.send(empty, zmq::send_flags::none);  // the router sees [id][empty]: a header of 0 bytes
  zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq::poll(&item, 1, std::chrono::seconds(10)), 1);
  auto raw = ReceiveMessage(router_, true);
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(DecodeEnvelope(Bytes(raw->header)).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST_F(TransportTest, AMessageOfTooManyFramesIsDroppedAndTheNextOneArrives) {
  // With the routing id the router adds, one frame over the cap.
  for (size_t i = 0; i + 1 < kMaxFramesPerMessage; ++i) {
    zmq::message_t empty;
    dealer_.send(empty, zmq::send_flags::sndmore);
  }
  zmq::message_t last;
  dealer_.send(last, zmq::send_flags::none);
  ASSERT_TRUE(SendMessage(dealer_, nullptr, Envelope{kProtocolVersion, 5, 1, AckMsg{}}).ok());
  zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq::poll(&item, 1, std::chrono::seconds(10)), 1);
  auto dropped = ReceiveMessage(router_, /*routed=*/true);
  EXPECT_EQ(dropped.status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_EQ(zmq::poll(&item, 1, std::chrono::seconds(10)), 1);
  auto next = ReceiveMessage(router_, /*routed=*/true);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(DecodeEnvelope(Bytes(next->header))->request_id, 5u);
  EXPECT_EQ(next->user_id, "");  // plaintext
}

}  // namespace
}  // namespace ps
