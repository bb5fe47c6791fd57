#include "worker/train/stage_link.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/net/security.h"
#include "common/net/transport.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using Kind = StageLink::Kind;

constexpr absl::Duration kTimeout = absl::Seconds(10);

std::vector<float> Iota(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Stage 1 listens, stage 0 dials; activations down, gradients back, in order.
void ExchangeThreeMicroBatches(StageLink& listener, StageLink& dialer) {
  for (int m = 0; m < 3; ++m) {
    ASSERT_TRUE(dialer.Send(Kind::kActivations, 7, m, 2, 3, Iota(6, 10.0f * m)).ok());
  }
  for (int m = 0; m < 3; ++m) {
    absl::StatusOr<StageLink::Tensor> t = listener.Receive(Kind::kActivations, 7, m, 3, 4, kTimeout);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->rows, 2);
    EXPECT_THAT(t->data(), ElementsAreArray(Iota(6, 10.0f * m)));
  }
  for (int m = 2; m >= 0; --m) {
    ASSERT_TRUE(listener.Send(Kind::kGradients, 7, m, 2, 3, Iota(6, -1.0f * m)).ok());
    absl::StatusOr<StageLink::Tensor> g = dialer.Receive(Kind::kGradients, 7, m, 3, 4, kTimeout);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_THAT(g->data(), ElementsAreArray(Iota(6, -1.0f * m)));
  }
}

TEST(StageLink, CarriesActivationsDownAndGradientsBackInOrder) {
  auto listener = StageLink::Listen("tcp://127.0.0.1:0", "127.0.0.1", NodeSecurity(), "", "stage 0");
  ASSERT_TRUE(listener.ok()) << listener.status();
  // Nothing heard yet: a listener answers, it never starts.
  EXPECT_EQ((*listener)->Send(Kind::kGradients, 0, 0, 1, 1, {1.0f}).code(), absl::StatusCode::kFailedPrecondition);
  auto dialer = StageLink::Dial((*listener)->endpoint(), NodeSecurity(), "", "stage 1");
  ASSERT_TRUE(dialer.ok()) << dialer.status();
  ExchangeThreeMicroBatches(**listener, **dialer);
}

TEST(StageLink, WithKeysAdmitsOnlyThePredecessor) {
  auto a = GenerateCurveKeyPair(), b = GenerateCurveKeyPair(), stranger = GenerateCurveKeyPair();
  ASSERT_TRUE(a.ok() && b.ok() && stranger.ok());
  const NodeSecurity stage0 = NodeSecurity::WithKeys(*a, "", {});
  const NodeSecurity stage1 = NodeSecurity::WithKeys(*b, "", {});
  auto listener = StageLink::Listen("tcp://127.0.0.1:0", "127.0.0.1", stage1, a->public_key, "stage 0");
  ASSERT_TRUE(listener.ok()) << listener.status();
  auto dialer = StageLink::Dial((*listener)->endpoint(), stage0, b->public_key, "stage 1");
  ASSERT_TRUE(dialer.ok()) << dialer.status();
  ExchangeThreeMicroBatches(**listener, **dialer);
  // Another key is refused in the handshake: what it sends never arrives.
  auto intruder =
      StageLink::Dial((*listener)->endpoint(), NodeSecurity::WithKeys(*stranger, "", {}), b->public_key, "stage 1");
  ASSERT_TRUE(intruder.ok());
  ASSERT_TRUE((*intruder)->Send(Kind::kActivations, 8, 0, 1, 3, {1, 2, 3}).ok());
  auto got = (*listener)->Receive(Kind::kActivations, 8, 0, 3, 4, absl::Milliseconds(500));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("from stage 0"));
}

TEST(StageLink, AListenerThatBoundBeforeKnowingItsPeerAdmitsItOnceTold) {
  auto a = GenerateCurveKeyPair(), b = GenerateCurveKeyPair();
  ASSERT_TRUE(a.ok() && b.ok());
  const NodeSecurity stage0 = NodeSecurity::WithKeys(*a, "", {});
  auto listener =
      StageLink::Listen("tcp://127.0.0.1:0", "127.0.0.1", NodeSecurity::WithKeys(*b, "", {}), "", "stage 0");
  ASSERT_TRUE(listener.ok()) << listener.status();
  // Before Admit nobody gets in, the predecessor included.
  auto early = StageLink::Dial((*listener)->endpoint(), stage0, b->public_key, "stage 1");
  ASSERT_TRUE(early.ok());
  ASSERT_TRUE((*early)->Send(Kind::kActivations, 0, 0, 1, 3, {1, 2, 3}).ok());
  auto got = (*listener)->Receive(Kind::kActivations, 0, 0, 3, 4, absl::Milliseconds(500));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  early->reset();
  (*listener)->Admit(a->public_key);
  auto dialer = StageLink::Dial((*listener)->endpoint(), stage0, b->public_key, "stage 1");
  ASSERT_TRUE(dialer.ok()) << dialer.status();
  ExchangeThreeMicroBatches(**listener, **dialer);
}

TEST(StageLink, ASilentPeerEndsInADeadlineNamingIt) {
  auto listener = StageLink::Listen("tcp://127.0.0.1:0", "127.0.0.1", NodeSecurity(), "", "stage 2 of group 1");
  ASSERT_TRUE(listener.ok());
  auto got = (*listener)->Receive(Kind::kActivations, 0, 0, 3, 4, absl::Milliseconds(100));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(got.status().message(), HasSubstr("no activations of step 0 micro-batch 0 from stage 2 of group 1"));
}

// A hand-made DEALER sends what a broken or hostile peer might.
class MalformedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = StageLink::Listen("tcp://127.0.0.1:0", "127.0.0.1", NodeSecurity(), "", "stage 0");
    ASSERT_TRUE(l.ok());
    listener_ = *std::move(l);
    peer_ = zmq::socket_t(context_, zmq::socket_type::dealer);
    peer_.set(zmq::sockopt::linger, 0);
    peer_.connect(listener_->endpoint());
  }
  // Header fields as the wire has them; then `payload_bytes` of zeros.
  void SendRaw(uint16_t kind, uint64_t step, uint32_t micro, uint32_t rows, uint32_t cols, size_t payload_bytes,
               uint32_t magic = 0x47535350) {
    unsigned char h[40] = {};
    const uint16_t version = 1;
    const uint64_t declared = uint64_t{rows} * cols * 4;
    std::memcpy(h, &magic, 4);
    std::memcpy(h + 4, &version, 2);
    std::memcpy(h + 6, &kind, 2);
    std::memcpy(h + 8, &step, 8);
    std::memcpy(h + 16, &micro, 4);
    std::memcpy(h + 20, &rows, 4);
    std::memcpy(h + 24, &cols, 4);
    std::memcpy(h + 32, &declared, 8);
    peer_.send(zmq::buffer(h, sizeof(h)), zmq::send_flags::sndmore);
    peer_.send(zmq::message_t(payload_bytes), zmq::send_flags::none);
  }
  absl::Status Next() { return listener_->Receive(Kind::kActivations, 3, 1, 4, 8, kTimeout).status(); }

  zmq::context_t context_;
  zmq::socket_t peer_;
  std::unique_ptr<StageLink> listener_;
};

TEST_F(MalformedTest, EveryBadFieldIsAnErrorNamingIt) {
  SendRaw(1, 3, 1, 2, 4, 32, /*magic=*/0x12345678);
  EXPECT_THAT(Next().message(), HasSubstr("not a stage message"));
  SendRaw(2, 3, 1, 2, 4, 32);
  EXPECT_THAT(Next().message(), HasSubstr("gradients of step 3 micro-batch 1 where activations"));
  SendRaw(1, 3, 2, 2, 4, 32);
  EXPECT_THAT(Next().message(), HasSubstr("micro-batch 2 where activations of step 3 micro-batch 1 come next"));
  SendRaw(1, 3, 1, 2, 5, 40);
  EXPECT_THAT(Next().message(), HasSubstr("2 x 5 where 1..8 x 4 fit"));
  SendRaw(1, 3, 1, 9, 4, 144);
  EXPECT_THAT(Next().message(), HasSubstr("9 x 4 where 1..8 x 4 fit"));
  SendRaw(1, 3, 1, 2, 4, 31);
  EXPECT_THAT(Next().message(), HasSubstr("a payload of 31 bytes"));
  peer_.send(zmq::str_buffer("short"), zmq::send_flags::none);
  EXPECT_THAT(Next().message(), HasSubstr("5-byte header and 0 payloads"));
  // And a good one after all that is read.
  SendRaw(1, 3, 1, 2, 4, 32);
  EXPECT_TRUE(Next().ok());
}

}  // namespace
}  // namespace ps
