// The reader limits of common/wire/codec.h: what is refused, with which code,
// before anything is copied out of the frame.
#include <vector>

#include "capnp/any.h"
#include "capnp/message.h"
#include "capnp/serialize.h"
#include "common/wire/codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schemas/ps.capnp.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<Envelope> RoundTrip(const Body& body) {
  kj::Array<capnp::word> words = EncodeEnvelope(Envelope{kProtocolVersion, 1, 2, body});
  return DecodeEnvelope({reinterpret_cast<const uint8_t*>(words.begin()), words.size() * sizeof(capnp::word)});
}

TEST(CodecLimitsTest, AFrameOverTheHeaderLimitIsRefusedBeforeItIsRead) {
  std::vector<uint8_t> frame(kMaxHeaderBytes + 8, 0);
  absl::StatusOr<Envelope> env = DecodeEnvelope(frame);
  EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(env.status().message()), HasSubstr("over the 8388608-byte limit"));
}

TEST(CodecLimitsTest, SlicesUpToTheCapPassAndOneMoreIsRefused) {
  PushRequestMsg push;
  push.slices.resize(kMaxSlicesPerMessage);
  ASSERT_TRUE(RoundTrip(push).ok());
  push.slices.resize(kMaxSlicesPerMessage + 1);
  absl::StatusOr<Envelope> env = RoundTrip(push);
  EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(env.status().message()), HasSubstr("131073 slices"));
}

TEST(CodecLimitsTest, PullKeysOverTheCapAreRefused) {
  PullRequestMsg pull;
  pull.keys.assign(kMaxSlicesPerMessage + 1, 7);
  EXPECT_EQ(RoundTrip(pull).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CodecLimitsTest, ShapesNodesAndTensorsHaveCaps) {
  DefineModelRequestMsg define;
  define.model.tensors.push_back(TensorSpec{"t", std::vector<int64_t>(kMaxShapeRank + 1, 1), {}});
  EXPECT_THAT(std::string(RoundTrip(define).status().message()), HasSubstr("shape dimensions"));
  ClusterViewMsg view;
  view.nodes.resize(kMaxNodesPerView + 1);
  EXPECT_THAT(std::string(RoundTrip(view).status().message()), HasSubstr("nodes"));
  DefineModelRequestMsg many;
  many.model.tensors.resize(kMaxTensorsPerModel + 1);
  EXPECT_EQ(RoundTrip(many).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CodecLimitsTest, AListOfEmptyStructsCannotAmplifyASmallFrame) {
  // 100,000 tensors in one tag word: under the tensor cap, but each would
  // become a TensorSpec. The walk is bounded by the frame's size instead.
  capnp::MallocMessageBuilder builder;
  auto header = builder.initRoot<wire::Header>();
  header.setVersion(kProtocolVersion);
  auto model = header.initBody().initDefineModelRequest().initModel();
  capnp::AnyStruct::Builder(kj::mv(model)).getPointerSection()[0].initAsListOfAnyStruct(0, 0, 100000);
  kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  ASSERT_LT(words.size() * sizeof(capnp::word), 512u);
  absl::StatusOr<Envelope> env =
      DecodeEnvelope({reinterpret_cast<const uint8_t*>(words.begin()), words.size() * sizeof(capnp::word)});
  EXPECT_EQ(env.status().code(), absl::StatusCode::kDataLoss) << env.status();
}

}  // namespace
}  // namespace ps
