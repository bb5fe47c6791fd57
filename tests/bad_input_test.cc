// Hostile and malformed requests sent straight to a server's socket: each gets
// an error reply naming the problem, the server keeps serving a real worker,
// and the stored parameters stay exact.
#include <random>

#include "common/compress/compressor.h"
#include "common/net/transport.h"
#include "common/wire/codec.h"
#include "common/wire/wire_frames.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_fixture.h"
#include "tests/raw_peer.h"
#include "worker/client/kv_client.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using testing::InProcessCluster;
using testing::RawPeer;

constexpr int kN = 1000;

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = InProcessCluster::Start(1, 1);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    KVClientOptions options;
    options.scheduler = cluster_->scheduler_endpoint();
    auto client = KVClient::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    ModelSpec model;
    model.tensors = {{"w", {kN}, Initializer::Constant(1.0f)}};
    model.tables = {{"emb", 2, Initializer::Constant(1.0f)}, {"admitted", 2, Initializer::Constant(1.0f)}};
    model.tables[1].admit_after = 2;  // a row once its id was pulled twice
    model.optimizer.learning_rate = 1.0f;
    ASSERT_TRUE(client_->RegisterModel(model).ok());
    auto raw = RawPeer::Connect(cluster_->server_endpoint(0));
    ASSERT_TRUE(raw.ok()) << raw.status();
    raw_ = *std::move(raw);
  }

  void TearDown() override {
    raw_.reset();
    if (client_ != nullptr) {
      EXPECT_TRUE(client_->Finish().ok());
    }
    if (cluster_ != nullptr) {
      EXPECT_TRUE(cluster_->Join(absl::Seconds(10)).ok());
    }
  }

  // Sends raw frames and returns the server's error reply (kUnknown for
  // anything else).
  ErrorMsg Exchange(std::vector<zmq::message_t> frames) {
    return raw_->Refusal(std::move(frames), std::nullopt, absl::Seconds(10));
  }

  static zmq::message_t Header(const Envelope& env) { return RawPeer::HeaderFrame(env); }

  ErrorMsg Push(uint32_t sender, PushRequestMsg push, std::vector<std::vector<float>> payloads,
                uint32_t version = kProtocolVersion) {
    std::vector<zmq::message_t> frames;
    frames.push_back(Header(Envelope{version, 77, sender, std::move(push)}));
    for (auto& p : payloads) frames.emplace_back(p.data(), p.size() * sizeof(float));
    return Exchange(std::move(frames));
  }

  // The worker's own view of the parameters, pulled for step `clock`.
  std::vector<float> PullW(int64_t clock) {
    std::vector<float> out(kN, -1.0f);
    TensorBuffer buf[] = {{0, absl::MakeSpan(out)}};
    EXPECT_TRUE(client_->Wait(client_->Pull(buf, clock)).ok());
    return out;
  }

  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<KVClient> client_;
  std::unique_ptr<RawPeer> raw_;
};

PushRequestMsg WholeSlice(uint64_t length = kN) { return PushRequestMsg{0, {SliceData{0, length, 0}}}; }

TEST_F(BadInputTest, GarbageHeadersGetDataLoss) {
  std::mt19937 rng(42);
  for (int len : {8, 16, 64, 1000}) {
    std::vector<uint8_t> junk(len);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    std::vector<zmq::message_t> frames;
    frames.emplace_back(junk.data(), junk.size());
    const ErrorMsg e = Exchange(std::move(frames));
    EXPECT_TRUE(e.code == absl::StatusCode::kDataLoss || e.code == absl::StatusCode::kInvalidArgument)
        << len << ": " << e.message;
  }
  std::vector<zmq::message_t> odd;
  odd.emplace_back("abcde", 5);
  const ErrorMsg e = Exchange(std::move(odd));
  EXPECT_EQ(e.code, absl::StatusCode::kDataLoss);
  EXPECT_THAT(e.message, HasSubstr("8-byte words"));
  EXPECT_EQ(PullW(0), std::vector<float>(kN, 1.0f));
}

TEST_F(BadInputTest, WrongProtocolVersionIsRefused) {
  const ErrorMsg e = Push(client_->node_id(), WholeSlice(), {std::vector<float>(kN, 1.0f)}, 99);
  EXPECT_EQ(e.code, absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(e.message, HasSubstr("protocol version 99"));
}

TEST_F(BadInputTest, UnregisteredSenderIsRefused) {
  const ErrorMsg e = Push(4242, WholeSlice(), {std::vector<float>(kN, 1.0f)});
  EXPECT_EQ(e.code, absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(e.message, HasSubstr("4242"));
}

// A push that says a primary forwards it (--replicas) from a worker node, or
// to a server of a job that keeps one copy: refused, nothing applied.
TEST_F(BadInputTest, ForgedForwardIsRefused) {
  PushRequestMsg forged = WholeSlice();
  forged.for_worker = 0;
  forged.seq = 1;
  const ErrorMsg e = Push(client_->node_id(), forged, {std::vector<float>(kN, 1.0f)});
  EXPECT_EQ(e.code, absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(e.message, HasSubstr("is not a server of this job"));
  EXPECT_EQ(PullW(0), std::vector<float>(kN, 1.0f));
}

// Pulled rows (what a primary forwards of a pull's table reads) from a worker.
TEST_F(BadInputTest, PulledRowsFromAWorkerAreRefused) {
  PushRequestMsg pulled = WholeSlice();
  pulled.pulled = true;
  const ErrorMsg e = Push(client_->node_id(), pulled, {std::vector<float>(kN, 1.0f)});
  EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.message, HasSubstr("pulled rows come only from a primary server"));
  EXPECT_EQ(PullW(0), std::vector<float>(kN, 1.0f));
}

// A step's sum (what a primary forwards of a completed sync step) from a worker.
TEST_F(BadInputTest, StepSumsFromAWorkerAreRefused) {
  PushRequestMsg sums = WholeSlice();
  sums.step_sum = true;
  const ErrorMsg e = Push(client_->node_id(), sums, {std::vector<float>(kN, 1.0f)});
  EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.message, HasSubstr("step sums come only from a primary server"));
  EXPECT_EQ(PullW(0), std::vector<float>(kN, 1.0f));
}

TEST_F(BadInputTest, UnknownSliceIsNotFound) {
  const ErrorMsg e =
      Push(client_->node_id(), PushRequestMsg{0, {SliceData{999, kN, 0}}}, {std::vector<float>(kN, 1.0f)});
  EXPECT_EQ(e.code, absl::StatusCode::kNotFound);
  EXPECT_THAT(e.message, HasSubstr("999"));
}

TEST_F(BadInputTest, PayloadSizesThatDoNotMatchAreRefused) {
  const uint32_t me = client_->node_id();
  EXPECT_EQ(Push(me, WholeSlice(), {std::vector<float>(kN - 1, 1.0f)}).code, absl::StatusCode::kInvalidArgument);
  // A header claiming a 4 GB payload with a small frame behind it.
  EXPECT_EQ(Push(me, WholeSlice(uint64_t{1} << 30), {std::vector<float>(kN, 1.0f)}).code,
            absl::StatusCode::kInvalidArgument);
  // Truncated multipart: two slices listed, one frame sent.
  PushRequestMsg two{0, {SliceData{0, kN, 0}, SliceData{0, kN, 0}}};
  EXPECT_THAT(Push(me, two, {std::vector<float>(kN, 1.0f)}).message, HasSubstr("payload frames"));
  // A frame that is not a whole number of floats.
  std::vector<zmq::message_t> frames;
  frames.push_back(Header(Envelope{kProtocolVersion, 5, me, WholeSlice()}));
  frames.emplace_back("1234567", 7);
  const ErrorMsg e = Exchange(std::move(frames));
  EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.message, HasSubstr("whole number of floats"));
  EXPECT_EQ(PullW(0), std::vector<float>(kN, 1.0f));
}

TEST_F(BadInputTest, CompressedFramesThatDoNotMatchTheirBytesAreRefusedAndChangeNothing) {
  PushRequestMsg push = WholeSlice();
  push.slices[0].compressed = true;
  const auto send = [&](const std::string& frame) {
    std::vector<zmq::message_t> frames;
    frames.push_back(Header(Envelope{kProtocolVersion, 9, client_->node_id(), push}));
    frames.emplace_back(frame.data(), frame.size());
    return Exchange(std::move(frames));
  };
  std::vector<float> grad(kN, 0.0f);
  grad[7] = 3.0f;
  grad[900] = -2.0f;
  const auto topk = Compressor::Create(*CompressionSpec::Parse("topk:0.002"));  // 2 of 1000
  std::string good;
  topk->Encode(grad, 0, &good);
  std::string fewer;  // a frame of 999 values for a slice of 1000
  topk->Encode(absl::MakeConstSpan(grad).first(kN - 1), 0, &fewer);
  std::string out_of_range = good;  // the first index (after header and k) past the end
  const uint32_t past = kN + 5;
  std::memcpy(out_of_range.data() + kCompressionHeaderBytes + 8, &past, 4);
  std::string nan_scale;
  Compressor::Create({.kind = CompressionKind::kOneBit})->Encode(grad, 0, &nan_scale);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan_scale.data() + kCompressionHeaderBytes, &nan, 4);
  for (const auto& [frame, want] :
       std::vector<std::pair<std::string, std::string>>{{fewer, "declares 999 values; the header says 1000"},
                                                        {out_of_range, "index 1005 (the 1th of 2) out of range"},
                                                        {nan_scale, "scale nan is not a finite value"},
                                                        {good.substr(0, good.size() - 3), "sparse"},
                                                        {"0123456789", "shorter than its 16-byte header"}}) {
    const ErrorMsg e = send(frame);
    EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument) << want;
    EXPECT_THAT(e.message, HasSubstr("compressed frame of slice 0: ")) << want;
    EXPECT_THAT(e.message, HasSubstr(want));
  }
  // A frame and a header that agree on 2^40 values, for a slice of 1000:
  // refused before decoding would allocate them.
  std::string huge;
  Compressor::Create({.kind = CompressionKind::kBf16})->Encode(grad, 0, &huge);
  const uint64_t n = uint64_t{1} << 40;
  std::memcpy(huge.data() + 8, &n, sizeof(n));
  push.slices[0].length = n;
  const ErrorMsg e = send(huge);
  EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.message, HasSubstr("header says 1099511627776 floats, slice has 1000"));
  push.slices[0].length = kN;
  EXPECT_EQ(PullW(0), std::vector<float>(kN, 1.0f));
  // The good one applies its two values (SGD, lr 1), and nothing else.
  EXPECT_EQ(send(good).code, absl::StatusCode::kUnknown);  // not a refusal: an Ack
  std::vector<float> want(kN, 1.0f);
  want[7] = -2.0f;
  want[900] = 3.0f;
  EXPECT_EQ(PullW(1), want);
}

// A table shard's compressed push whose ids (common/wire/id_coding.h) do not
// match their bytes: refused naming the problem, no row changed; then the
// same rows with well-coded ids apply.
TEST_F(BadInputTest, CompressedRowsWhoseIdsDoNotMatchTheirBytesAreRefusedAndChangeNothing) {
  const uint32_t key = client_->partition_map().TableSlice(0, 0);
  const std::vector<uint64_t> ids = {10, 11};
  const std::vector<float> grad = {1.0f, 2.0f, 3.0f, 4.0f};  // 2 rows of dim 2
  const auto bf16 = Compressor::Create({.kind = CompressionKind::kBf16});
  std::string values;
  bf16->Encode(grad, 0, &values);
  const auto send = [&](const std::string& frame) {
    PushRequestMsg push{0, {SliceData{key, 4, 0, 2, /*compressed=*/true}}};
    std::vector<zmq::message_t> frames;
    frames.push_back(Header(Envelope{kProtocolVersion, 9, client_->node_id(), push}));
    frames.emplace_back(frame.data(), frame.size());
    return Exchange(std::move(frames));
  };
  const auto rows = [&](int64_t step) {
    std::vector<float> out(4, -1.0f);
    const RowBuffer pull[] = {{0, ids, absl::MakeSpan(out)}};
    EXPECT_TRUE(client_->Wait(client_->Exchange({.pull_rows = pull, .pull_step = step})).ok());
    return out;
  };
  for (const auto& [frame, want] : std::vector<std::pair<std::string, std::string>>{
           {std::string("\x01\x0a\x00", 3) + values, "id 1: a step of 0 after 10"},
           {std::string("\x01\x0a\x81", 3), "id 1: id varint cut short"},
           {std::string("\x07") + values, "unknown coding 7"},
           {std::string("\x00\x0a", 2), "cannot hold 2 ids"},
           {std::string("\x01\x0a\x01\x05", 4) + values, "header"}}) {  // a third id: the values start late
    const ErrorMsg e = send(frame);
    EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument) << want;
    EXPECT_THAT(e.message, HasSubstr(absl::StrCat("compressed frame of slice ", key, ": ")));
    EXPECT_THAT(e.message, HasSubstr(want));
  }
  EXPECT_EQ(rows(0), std::vector<float>(4, 1.0f));
  // Delta coded right (10, then 1 more): applied (SGD, lr 1).
  EXPECT_EQ(send(RowsFrame(ids, /*delta_ids=*/true, grad, *bf16)).code, absl::StatusCode::kUnknown);  // an Ack
  EXPECT_EQ(rows(1), (std::vector<float>{0.0f, -1.0f, -2.0f, -3.0f}));
}

// A pull of table rows sent again (a re-send after a failover or a move:
// the same pull_id) counts towards admission once; another pull counts.
TEST_F(BadInputTest, APullSentTwiceCountsTowardsAdmissionOnce) {
  const uint32_t key = client_->partition_map().TableSlice(1, 0);
  const auto pull = [&](uint64_t pull_id, uint64_t request_id) {
    PullRequestMsg p{0, {}, 10000, {RowsRequest{key, {5}}}};
    p.pull_id = pull_id;
    ASSERT_TRUE(raw_->Send(Envelope{kProtocolVersion, request_id, client_->node_id(), p}).ok());
    absl::StatusOr<testing::RawReply> reply = raw_->Receive(absl::Seconds(10));
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_TRUE(std::holds_alternative<PullReplyMsg>(reply->env.body)) << BodyName(reply->env.body);
  };
  const auto rows = [&]() -> uint64_t {
    absl::StatusOr<ServerStats> stats = client_->GetServerStats(0);
    return stats.ok() && stats->tables.size() == 2 ? stats->tables[1].rows : ~uint64_t{0};
  };
  pull(7, 1);
  pull(7, 2);  // the same pull again, under a new request id as a re-send has
  EXPECT_EQ(rows(), 0u) << "counted twice: admitted after one pull";
  pull(8, 3);
  EXPECT_EQ(rows(), 1u);
}

TEST_F(BadInputTest, NonFiniteGradientIsRefusedAndChangesNothing) {
  std::vector<float> grad(kN, 1.0f);
  grad[500] = std::numeric_limits<float>::quiet_NaN();
  const ErrorMsg e = Push(client_->node_id(), WholeSlice(), {grad});
  EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.message, HasSubstr("NaN or Inf"));
  grad[500] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Push(client_->node_id(), WholeSlice(), {grad}).code, absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PullW(0), std::vector<float>(kN, 1.0f));
}

TEST_F(BadInputTest, PushWithABadPullPartChangesNothing) {
  PushRequestMsg push = WholeSlice();
  push.then_pull = PullRequestMsg{1, {0, 31337}, 1000};
  const ErrorMsg e = Push(client_->node_id(), push, {std::vector<float>(kN, 0.5f)});
  EXPECT_EQ(e.code, absl::StatusCode::kNotFound);
  EXPECT_THAT(e.message, HasSubstr("31337"));
  EXPECT_EQ(PullW(0), std::vector<float>(kN, 1.0f));
}

TEST_F(BadInputTest, PushPullAppliesThenAnswersWithTheNewValues) {
  std::vector<float> grad(kN, 0.5f), out(kN, -1.0f);
  const ConstTensorBuffer push[] = {{0, grad}};
  TensorBuffer pull[] = {{0, absl::MakeSpan(out)}};
  ASSERT_TRUE(client_->Wait(client_->PushPull(push, pull, 0)).ok());
  EXPECT_EQ(out, std::vector<float>(kN, 0.5f));
  auto stats = client_->GetServerStats(0);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->pushes_applied, 1u);
  EXPECT_EQ(stats->pulls_served, 1u);
}

TEST_F(BadInputTest, AFloodOfWaitingPullsIsRefusedOnceTheCapIsReached) {
  // Sync pulls for a step nobody has reached park on the server; a peer may
  // not park more than the server's cap (4096).
  const int kCap = 4096;
  for (int i = 0; i < kCap; ++i) {
    std::vector<zmq::message_t> frames;
    frames.push_back(Header(Envelope{kProtocolVersion, 1000u + i, client_->node_id(), PullRequestMsg{7, {0}, 60000}}));
    ASSERT_TRUE(raw_->Send(std::move(frames)).ok());
  }
  std::vector<zmq::message_t> one_more;
  one_more.push_back(Header(Envelope{kProtocolVersion, 99, client_->node_id(), PullRequestMsg{7, {0}, 60000}}));
  const ErrorMsg e = Exchange(std::move(one_more));
  EXPECT_EQ(e.code, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(e.message, HasSubstr("pulls waiting"));
  // The real worker is still served.
  EXPECT_EQ(PullW(0), std::vector<float>(kN, 1.0f));
}

TEST_F(BadInputTest, MessageTypeAServerDoesNotTakeIsRefused) {
  std::vector<zmq::message_t> frames;
  frames.push_back(Header(Envelope{kProtocolVersion, 9, client_->node_id(), BarrierRequestMsg{"x", 10}}));
  const ErrorMsg e = Exchange(std::move(frames));
  EXPECT_EQ(e.code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.message, HasSubstr("barrierRequest"));
}

TEST_F(BadInputTest, SyncPushForAnAppliedStepIsRefusedAndTheServerKeepsServing) {
  std::vector<float> grad(kN, 0.25f);
  const ConstTensorBuffer push[] = {{0, grad}};
  ASSERT_TRUE(client_->Wait(client_->Push(push, 0)).ok());
  EXPECT_EQ(PullW(1), std::vector<float>(kN, 0.75f));
  const ErrorMsg e = Push(client_->node_id(), WholeSlice(), {grad});
  EXPECT_EQ(e.code, absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(e.message, HasSubstr("already applied"));
  EXPECT_EQ(PullW(1), std::vector<float>(kN, 0.75f));
  auto stats = client_->GetServerStats(0);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->errors_replied, 1u);
  EXPECT_EQ(stats->updates_applied, 1u);
}

}  // namespace
}  // namespace ps
