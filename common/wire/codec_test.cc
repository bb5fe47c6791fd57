#include "common/wire/codec.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "capnp/message.h"
#include "capnp/serialize.h"
#include "common/wire/messages.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schemas/ps.capnp.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// ---- helpers ----------------------------------------------------------------

std::vector<uint8_t> ToBytes(const kj::Array<capnp::word>& words) {
  auto bytes = words.asBytes();
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

std::vector<uint8_t> Encode(const Envelope& envelope) { return ToBytes(EncodeEnvelope(envelope)); }

std::vector<uint8_t> EncodeBuilder(capnp::MessageBuilder& builder) {
  return ToBytes(capnp::messageToFlatArray(builder));
}

absl::StatusOr<Envelope> Decode(const std::vector<uint8_t>& bytes) {
  return DecodeEnvelope(absl::MakeConstSpan(bytes));
}

uint64_t WordAt(const std::vector<uint8_t>& bytes, size_t word) {
  uint64_t w;
  std::memcpy(&w, bytes.data() + word * 8, 8);
  return w;
}

void SetWordAt(std::vector<uint8_t>& bytes, size_t word, uint64_t value) {
  std::memcpy(bytes.data() + word * 8, &value, 8);
}

void ExpectCode(const absl::Status& s, absl::StatusCode code, const std::string& substring) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(substring));
}

// Encodes `body` with non-default envelope fields, decodes it and checks that
// every field came back equal.
void ExpectRoundTrip(const Body& body) {
  Envelope in{kProtocolVersion + 6, 0x0123456789abcdefULL, 4242, body, 0xfedcba9876543210ULL};
  in.incarnation = 0x8badf00ddeadbeefULL;
  in.priority = 7;
  absl::StatusOr<Envelope> out = Decode(Encode(in));
  ASSERT_TRUE(out.ok()) << BodyName(body) << ": " << out.status();
  EXPECT_EQ(out->version, kProtocolVersion + 6);
  EXPECT_EQ(out->request_id, 0x0123456789abcdefULL);
  EXPECT_EQ(out->sender, 4242u);
  EXPECT_EQ(out->durable_seq, 0xfedcba9876543210ULL);
  EXPECT_EQ(out->incarnation, 0x8badf00ddeadbeefULL);
  EXPECT_EQ(out->priority, 7u);
  EXPECT_EQ(out->body.index(), body.index()) << BodyName(body);
  EXPECT_TRUE(*out == in) << BodyName(body);
}

// A model with every field away from its default.
ModelSpec FullModel() {
  ModelSpec m;
  m.tensors = {
      TensorSpec{"layer0.weight", {784, 256}, Initializer::He(17)},
      TensorSpec{"layer0.bias", {256}, Initializer::Constant(0.25f)},
      TensorSpec{"layer1.weight", {256, 10}, Initializer::Uniform(-0.5f, 0.75f, 99)},
      TensorSpec{"layer1.bias", {10}, Initializer::Normal(1.5f, 0.125f, 1234567890123ULL)},
      TensorSpec{"emb", {3, 4, 5}, Initializer::Zeros()},
  };
  m.optimizer.kind = OptimizerKind::kAdam;
  m.optimizer.learning_rate = 0.003f;
  m.optimizer.momentum = 0.8f;
  m.optimizer.nesterov = true;
  m.optimizer.beta1 = 0.85f;
  m.optimizer.beta2 = 0.995f;
  m.optimizer.epsilon = 1e-6f;
  m.optimizer.weight_decay = 0.0005f;
  m.optimizer.lr_schedule = LrSchedule::kCosine;
  m.optimizer.decay_steps = 4690;
  m.optimizer.min_lr_ratio = 0.05f;
  m.consistency = Consistency{ConsistencyMode::kSsp, 7};
  m.placement.rule = PlacementRule::kLayer;
  m.placement.slice_bytes = 12345;
  m.placement.table_shards = 64;
  m.placement.explicit_ranks = {{"emb", 2}, {"layer1.bias", 1}};
  OptimizerConfig ftrl;
  ftrl.kind = OptimizerKind::kFtrl;
  ftrl.learning_rate = 0.05f;
  ftrl.l1 = 0.5f;
  ftrl.l2 = 0.25f;
  ftrl.ftrl_beta = 2.0f;
  m.tables = {TableSpec{"tokens", 32, Initializer::Uniform(-0.1f, 0.1f, 5), std::nullopt, 0},
              TableSpec{"wide", 1, Initializer::Zeros(), ftrl, 3}};
  m.tables[1].consistency = Consistency{ConsistencyMode::kSsp, 4};  // its own mode, kept on the wire
  m.compression = *CompressionSpec::Parse("topk:0.05,pull=delta,warmup=300");
  m.tensors[2].compression = *CompressionSpec::Parse("randomk:0.5,pull=none,warmup=7");
  m.tables[0].compression = *CompressionSpec::Parse("bf16,ids=raw");
  return m;
}

std::vector<Slice> FullSlices() {
  return {Slice{0, 0, 0, 100000, 0}, Slice{1, 0, 100000, 100704, 3}, Slice{2, 4, 0, 60, 2}, Slice{3, 1, 7, 9, 1},
          Slice{4, 1, 0, 0, 3, true}};
}

std::vector<SliceData> FullSliceData() {
  return {SliceData{3, 1000, 17}, SliceData{0, 1, 0}, SliceData{0xfffffffe, 1ULL << 40, ~0ULL}, SliceData{4, 96, 2, 3}};
}

// ---- round trips ------------------------------------------------------------

TEST(CodecTest, ErrorRoundTrips) {
  ExpectRoundTrip(ErrorMsg{absl::StatusCode::kFailedPrecondition, "step 3 already applied"});
  ExpectRoundTrip(ErrorMsg{absl::StatusCode::kUnauthenticated, "last canonical code"});
  ExpectRoundTrip(ErrorMsg{absl::StatusCode::kFailedPrecondition, "moved", 7, /*push_applied=*/true});
  ExpectRoundTrip(ErrorMsg{absl::StatusCode::kFailedPrecondition, "sums differ", 0, false, false, {3, 9}});
  ExpectRoundTrip(ErrorMsg{absl::StatusCode::kFailedPrecondition, "moved", 8, false, /*push_held=*/true});
}

// A push held in a step of a slice that moved on: the refusal names the
// view to route by and says the push is held (sent again numbered as it was).
TEST(CodecTest, AMovedHeldErrorSaysSo) {
  const ErrorMsg e = ErrorOf(MovedHeldError("slice 4 is led by another server now", 9));
  EXPECT_EQ(e.code, absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(e.view_epoch, 9u);
  EXPECT_TRUE(e.push_held);
  EXPECT_FALSE(e.push_applied);
  EXPECT_FALSE(ErrorOf(MovedError("moved", 9, true)).push_held);
}

TEST(CodecTest, AckRoundTrips) { ExpectRoundTrip(AckMsg{}); }

TEST(CodecTest, RegisterRequestRoundTrips) {
  ExpectRoundTrip(RegisterRequestMsg{Role::kServer, "tcp://10.0.0.7:5555"});
  ExpectRoundTrip(RegisterRequestMsg{Role::kScheduler, "ipc:///tmp/x"});
  ExpectRoundTrip(RegisterRequestMsg{Role::kServer, "tcp://10.0.0.7:5555", 3});
  // A restored server: the slices its checkpoint holds, with their versions.
  ExpectRoundTrip(RegisterRequestMsg{
      Role::kServer, "tcp://10.0.0.7:5555", 3, "", 0, true, {SliceData{4, 1024, 77, 0}, SliceData{9, 64, 12, 8}}});
  ExpectRoundTrip(
      RegisterRequestMsg{Role::kServer, "tcp://10.0.0.7:5555", -1, "rq>Z85-public-key-of-forty-characters!!"});
  ExpectRoundTrip(RegisterRequestMsg{Role::kWorker, "", 2, "", 0xfffffffeu});  // re-registering under its id
}

// A registration that names no rank reads back as -1 (the schema default),
// not as a request for rank 0.
TEST(CodecTest, RegisterRequestWithoutRankIsMinusOne) {
  absl::StatusOr<Envelope> out = Decode(Encode(Envelope{1, 2, 3, RegisterRequestMsg{Role::kWorker, ""}}));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(std::get<RegisterRequestMsg>(out->body).rank, -1);
}

TEST(CodecTest, HeartbeatRoundTrips) {
  ExpectRoundTrip(HeartbeatMsg{});
  ExpectRoundTrip(HeartbeatMsg{{UnreachableServer{3, 1500, true}, UnreachableServer{0, 7, false}}});
}
TEST(CodecTest, ShmOfferAndGrantRoundTrip) {
  ExpectRoundTrip(ShmOfferMsg{});
  ExpectRoundTrip(ShmGrantMsg{"ps-shm-12-ab", std::string("\0\x01\xff token bytes", 18), 32 << 20});
}

TEST(CodecTest, RegisterReplyRoundTrips) { ExpectRoundTrip(RegisterReplyMsg{77, -3, 0xffffffffffffffffULL, 3}); }

TEST(CodecTest, ClusterViewRoundTrips) {
  ExpectRoundTrip(ClusterViewMsg{2,
                                 3,
                                 {NodeInfo{1, Role::kScheduler, 0, ""}, NodeInfo{2, Role::kServer, 0, "tcp://a:1"},
                                  NodeInfo{3, Role::kServer, 1, "tcp://b:2"}, NodeInfo{9, Role::kWorker, 2, "w"}}});
  ExpectRoundTrip(ClusterViewMsg{
      1,
      1,
      {NodeInfo{2, Role::kServer, 0, "tcp://a:1", "server-key"}, NodeInfo{3, Role::kWorker, 0, "", "worker-key"}}});
  ClusterViewMsg after_failure{2, 1, {NodeInfo{4, Role::kServer, 1, "tcp://c:3"}}};
  after_failure.dead = {3, 7};
  after_failure.epoch = 12;
  ExpectRoundTrip(after_failure);
  // --replicas: slice 0's copy on server 1 was promoted; slice 1 keeps both.
  after_failure.copies = {{1}, {0, 1}, {}};
  ExpectRoundTrip(after_failure);
  after_failure.base_epoch = 11;  // a change to view 11
  ExpectRoundTrip(after_failure);
  after_failure.copy_keys = {0, 1, 7};  // ... to the copies of slices 0, 1 and 7
  ExpectRoundTrip(after_failure);
}

TEST(CodecTest, DefineModelRequestRoundTrips) { ExpectRoundTrip(DefineModelRequestMsg{FullModel()}); }

TEST(CodecTest, DefineModelReplyRoundTrips) {
  ModelSpec model = FullModel();
  model.optimizer.kind = OptimizerKind::kMomentum;
  model.consistency = Consistency{ConsistencyMode::kAsync, 0};
  ExpectRoundTrip(DefineModelReplyMsg{model, FullSlices()});
}

TEST(CodecTest, CreateSlicesRequestRoundTrips) {
  ModelSpec model = FullModel();
  model.optimizer.kind = OptimizerKind::kAdagrad;
  ExpectRoundTrip(CreateSlicesRequestMsg{model, FullSlices(), 5});
  // With replicas: each slice's servers, primary first.
  ExpectRoundTrip(CreateSlicesRequestMsg{model, FullSlices(), 5, {{0, 1}, {3, 0}, {2, 4}, {1, 2}, {3, 1}}});
}

TEST(CodecTest, EveryEnumValueRoundTrips) {
  for (OptimizerKind k :
       {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdam, OptimizerKind::kAdagrad}) {
    for (ConsistencyMode c : {ConsistencyMode::kSync, ConsistencyMode::kAsync, ConsistencyMode::kSsp}) {
      for (PlacementRule p : {PlacementRule::kAuto, PlacementRule::kLayer}) {
        ModelSpec model = FullModel();
        model.optimizer.kind = k;
        model.consistency.mode = c;
        model.placement.rule = p;
        ExpectRoundTrip(DefineModelRequestMsg{model});
      }
    }
  }
}

TEST(CodecTest, BarrierRequestRoundTrips) { ExpectRoundTrip(BarrierRequestMsg{"epoch-3", 123456789012ULL}); }

TEST(CodecTest, WorkerDoneRoundTrips) { ExpectRoundTrip(WorkerDoneMsg{}); }

TEST(CodecTest, ShutdownRoundTrips) { ExpectRoundTrip(ShutdownMsg{"worker 2 failed"}); }

// Text fields travel by (data, size): a NUL inside a string survives.
TEST(CodecTest, TextWithEmbeddedNulAndUtf8RoundTrips) {
  ExpectRoundTrip(ShutdownMsg{std::string("a\0b\xc3\xa9", 5)});
  ExpectRoundTrip(BarrierRequestMsg{std::string(10000, 'x'), 1});
  ExpectRoundTrip(ShutdownMsg{""});
  ExpectRoundTrip(ShutdownMsg{"", /*left=*/true});
}

TEST(CodecTest, PushRequestRoundTrips) {
  ExpectRoundTrip(PushRequestMsg{-5, FullSliceData()});
  ExpectRoundTrip(PushRequestMsg{std::numeric_limits<int64_t>::max(), {}});
  ExpectRoundTrip(PushRequestMsg{3, FullSliceData(), PullRequestMsg{4, {1, 2, 7}, 2500}});
  ExpectRoundTrip(PushRequestMsg{3, {}, PullRequestMsg{}});  // present but empty stays present
  ExpectRoundTrip(PushRequestMsg{3, FullSliceData(), std::nullopt, 0xffffffffffffULL, true});
  PushRequestMsg forwarded{3, FullSliceData(), std::nullopt, 17};
  forwarded.for_worker = 4;  // a primary's forward to a backup (--replicas)
  forwarded.origin = 2;      // numbered by the worker's pushes to server 2's slices
  forwarded.view_epoch = 0xfffffffffffULL;
  ExpectRoundTrip(forwarded);
  forwarded.pulled = true;  // the rows a pull read on the primary
  ExpectRoundTrip(forwarded);
  forwarded.pulled = false;
  forwarded.step_sum = true;  // sync steps the primary completed, as their sums
  ExpectRoundTrip(forwarded);
}

TEST(CodecTest, PullRequestRoundTrips) {
  ExpectRoundTrip(PullRequestMsg{42, {5, 0, 0xffffffffu, 17}, 30000});
  ExpectRoundTrip(PullRequestMsg{42, {5}, 30000, {RowsRequest{6, {1, ~0ULL, 0}}, RowsRequest{7, {}}}});
}

// Ascending ids close together travel delta coded (common/wire/id_coding.h),
// in a quarter of the bytes here, and come back the same.
TEST(CodecTest, AscendingRowIdsTravelDeltaCoded) {
  std::vector<uint64_t> close, descending;
  for (uint64_t i = 0; i < 1000; ++i) close.push_back(1000000 + 3 * i);
  for (uint64_t i = 0; i < 1000; ++i) descending.push_back(close[999 - i]);  // descending: as they are
  const PullRequestMsg coded{1, {}, 0, {RowsRequest{6, close, true}, RowsRequest{7, {}}}};
  const PullRequestMsg raw{1, {}, 0, {RowsRequest{6, descending}, RowsRequest{7, close}}};  // not delta_ids: raw
  ExpectRoundTrip(coded);
  ExpectRoundTrip(raw);
  const size_t coded_bytes = Encode(Envelope{1, 2, 3, coded}).size();
  const size_t raw_bytes = Encode(Envelope{1, 2, 3, raw}).size();
  EXPECT_LT(coded_bytes, 1200u);  // 1,000 one-byte deltas, and the header
  EXPECT_GT(raw_bytes, 8000u);
}

TEST(CodecTest, AMalformedCodedRowRequestIsInvalidArgument) {
  const auto decode = [](std::vector<capnp::byte> coded, size_t listed) {
    capnp::MallocMessageBuilder builder;
    auto header = builder.initRoot<wire::Header>();
    auto rows = header.initBody().initPullRequest().initRows(1);
    rows[0].setKey(9);
    rows[0].initIds(listed);
    rows[0].setCoded(capnp::Data::Reader(coded.data(), coded.size()));
    return Decode(EncodeBuilder(builder)).status();
  };
  ExpectCode(decode({1, 10, 0}, 0), absl::StatusCode::kInvalidArgument,  // delta coded: 10, then a step of 0
             "row request of slice 9: id 1: a step of 0 after 10");
  ExpectCode(decode({0, 1, 0, 0, 0, 0, 0, 0, 0}, 0), absl::StatusCode::kInvalidArgument,  // raw: never sent coded
             "row request of slice 9: id section of coding 0 where only delta coding (1) is taken");
  ExpectCode(decode({1, 10, 1}, 2), absl::StatusCode::kInvalidArgument,
             "row request of slice 9: ids given both as a list and coded");
  EXPECT_TRUE(decode({1, 10, 1}, 0).ok());
}

TEST(CodecTest, PullReplyRoundTrips) { ExpectRoundTrip(PullReplyMsg{FullSliceData()}); }

TEST(CodecTest, StatsRequestRoundTrips) { ExpectRoundTrip(StatsRequestMsg{}); }

TEST(CodecTest, StatsReplyRoundTrips) {
  StatsReplyMsg m;
  m.pushes_applied = 1;
  m.updates_applied = 2;
  m.pulls_served = 3;
  m.errors_replied = 4;
  m.bytes_in = 5ULL << 40;
  m.bytes_out = 6;
  m.staleness_histogram = {10, 0, 7, 1, 0, 0, 2};
  m.staleness_max = 6;
  m.slices_held = 8;
  m.waited_pull_micros = 9;
  m.held_keys = {1, 5};
  m.tables = {TableStatsMsg{1, 2, 3, 4, 5, 6, 7, 8, 9}, TableStatsMsg{0, 1ULL << 40}};
  m.worker_clocks = {0, -1, 1LL << 50};
  m.max_version = 77;
  ExpectRoundTrip(m);
}

TEST(CodecTest, ReplicaCopyMessagesRoundTrip) {
  ExpectRoundTrip(AddCopyRequestMsg{77, 3});
  ExpectRoundTrip(AddCopyRequestMsg{77, 3, 12});
  ExpectRoundTrip(DrainRequestMsg{2});
  ExpectRoundTrip(SliceCopyMsg{12, {}});
  ExpectRoundTrip(SliceCopyMsg{12, {OriginSeq{0, 1, 99}, OriginSeq{2, 0, 0xffffffffffffULL}}});
  ExpectRoundTrip(SliceCopyMsg{13, {}, {CountedPullId{0, 1}, CountedPullId{3, ~uint64_t{0}}}});
  ExpectRoundTrip(SliceCopyMsg{14, {}, {}, /*view_epoch=*/7});
  ExpectRoundTrip(ServingRequestMsg{ServingKind::kLookup, std::string("emb\0b", 5)});
  ExpectRoundTrip(ServingRequestMsg{ServingKind::kDense, "fc1.weight"});
  ExpectRoundTrip(ServingRequestMsg{});
  ExpectRoundTrip(ServingRequestMsg{ServingKind::kRound, "", {{3, 17, 0}, {9, 17, 44}}, 19, 1000});
  ExpectRoundTrip(ServingRequestMsg{ServingKind::kSubscribe, "", {}, 0, 0});
  ExpectRoundTrip(ServingReplyMsg{41, 1796223883432, true, "ckpt/", {2000, 16}, {"b", "w"}, {"emb"}, {16}});
  ExpectRoundTrip(ServingReplyMsg{});
  ServingReplyMsg round{19, 1796223883432, true, "", {}, {}, {}, {}, {{3, 19, 0, true}, {9, 19, 45, true, true, 7, 2}}};
  round.job_ended = true;
  ExpectRoundTrip(round);
}

TEST(CodecTest, RoundTripCoversEveryBodyType) {
  // A new alternative in Body needs a round-trip test above; this fails until
  // the count is updated.
  EXPECT_EQ(std::variant_size_v<Body>, 24u);
}

TEST(CodecTest, DefaultEnvelopeRoundTrips) {
  Envelope in;
  in.body = AckMsg{};
  absl::StatusOr<Envelope> out = Decode(Encode(in));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->version, kProtocolVersion);
  EXPECT_EQ(out->request_id, 0u);
  EXPECT_EQ(out->sender, 0u);
  EXPECT_TRUE(std::holds_alternative<AckMsg>(out->body));
}

TEST(CodecTest, ErrorCodeAboveCanonicalRangeBecomesUnknown) {
  capnp::MallocMessageBuilder builder;
  auto header = builder.initRoot<wire::Header>();
  header.setVersion(kProtocolVersion);
  auto error = header.initBody().initError();
  error.setCode(17);
  error.setMessage("future code");
  absl::StatusOr<Envelope> out = Decode(EncodeBuilder(builder));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(std::get<ErrorMsg>(out->body), (ErrorMsg{absl::StatusCode::kUnknown, "future code"}));
}

// An error reply must never decode as success: code 0 becomes kUnknown.
TEST(CodecTest, ErrorCodeZeroDoesNotDecodeAsOk) {
  capnp::MallocMessageBuilder builder;
  auto header = builder.initRoot<wire::Header>();
  header.setVersion(kProtocolVersion);
  auto error = header.initBody().initError();
  error.setCode(0);
  error.setMessage("not really ok");
  absl::StatusOr<Envelope> out = Decode(EncodeBuilder(builder));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(std::get<ErrorMsg>(out->body), (ErrorMsg{absl::StatusCode::kUnknown, "not really ok"}));
}

TEST(CodecTest, BodyNameNamesTheType) {
  EXPECT_STREQ(BodyName(Body(PushRequestMsg{})), "pushRequest");
  EXPECT_STREQ(BodyName(Body(ErrorMsg{})), "error");
  EXPECT_STREQ(BodyName(Body(StatsReplyMsg{})), "statsReply");
  EXPECT_STREQ(BodyName(Body(CreateSlicesRequestMsg{})), "createSlicesRequest");
}

TEST(CodecTest, LargeKeyListDecodes) {
  PullRequestMsg pull{3, {}, 1000};
  for (uint32_t k = 0; k < 100000; ++k) pull.keys.push_back(k * 7 + 1);
  ExpectRoundTrip(pull);
}

TEST(CodecTest, LargePushDecodes) {
  PushRequestMsg push{9, {}};
  for (uint32_t k = 0; k < 50000; ++k) push.slices.push_back(SliceData{k, k + 1ULL, k * 3ULL});
  ExpectRoundTrip(push);
}

// ---- malformed input ----------------------------------------------------------

TEST(CodecTest, EmptyBytesAreDataLoss) { ExpectCode(Decode({}).status(), absl::StatusCode::kDataLoss, "0 bytes"); }

TEST(CodecTest, LengthNotMultipleOfEightIsDataLoss) {
  std::vector<uint8_t> bytes = Encode(Envelope{1, 2, 3, AckMsg{}});
  for (size_t cut : {size_t{1}, size_t{3}, size_t{7}}) {
    std::vector<uint8_t> shorter(bytes.begin(), bytes.end() - cut);
    ExpectCode(Decode(shorter).status(), absl::StatusCode::kDataLoss, "8-byte words");
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  ExpectCode(Decode(longer).status(), absl::StatusCode::kDataLoss, "8-byte words");
}

TEST(CodecTest, EveryTruncationIsDataLossOrValid) {
  const Envelope in{kProtocolVersion, 11, 12, CreateSlicesRequestMsg{FullModel(), FullSlices(), 4}};
  const std::vector<uint8_t> bytes = Encode(in);
  ASSERT_EQ(bytes.size() % 8, 0u);
  int data_loss = 0;
  for (size_t len = 8; len < bytes.size(); len += 8) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + len);
    absl::StatusOr<Envelope> out = Decode(cut);
    if (out.ok()) {
      ADD_FAILURE() << "truncated to " << len << " of " << bytes.size() << " bytes decoded OK";
    } else {
      EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss) << len << ": " << out.status();
      ++data_loss;
    }
  }
  // A single-segment message says its own length, so every cut is noticed.
  EXPECT_EQ(data_loss, static_cast<int>(bytes.size() / 8 - 1));
}

TEST(CodecTest, TrailingWordsAfterMessageAreIgnored) {
  const Envelope in{kProtocolVersion, 5, 6, ShutdownMsg{"bye"}};
  std::vector<uint8_t> bytes = Encode(in);
  bytes.resize(bytes.size() + 16, 0xab);
  absl::StatusOr<Envelope> out = Decode(bytes);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(*out == in);
}

TEST(CodecTest, RandomBytesNeverCrash) {
  std::mt19937_64 rng(20240607);
  int ok = 0, data_loss = 0, invalid = 0;
  for (size_t words : {1, 2, 3, 4, 8, 16, 64, 257}) {
    for (int iter = 0; iter < 2000; ++iter) {
      std::vector<uint8_t> bytes(words * 8);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      if (iter % 2 == 1) {
        // Half of the time, a plausible one-segment table so that decoding
        // gets past it and into the pointers.
        const uint32_t table[2] = {0, static_cast<uint32_t>(words - 1)};
        std::memcpy(bytes.data(), table, 8);
      }
      const absl::Status s = Decode(bytes).status();
      if (s.ok()) {
        ++ok;
      } else if (s.code() == absl::StatusCode::kDataLoss) {
        ++data_loss;
      } else if (s.code() == absl::StatusCode::kInvalidArgument) {
        ++invalid;
      } else {
        ADD_FAILURE() << "unexpected " << s;
      }
    }
  }
  EXPECT_GT(data_loss, 0);
  EXPECT_EQ(ok + data_loss + invalid, 8 * 2000);
}

TEST(CodecTest, RandomBitFlipsNeverCrash) {
  const std::vector<uint8_t> good =
      Encode(Envelope{kProtocolVersion, 1, 2, DefineModelReplyMsg{FullModel(), FullSlices()}});
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 5000; ++iter) {
    std::vector<uint8_t> bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t bit = rng() % (bytes.size() * 8);
      bytes[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    }
    const absl::Status s = Decode(bytes).status();
    EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kDataLoss || s.code() == absl::StatusCode::kInvalidArgument)
        << s;
  }
}

TEST(CodecTest, HugeSegmentSizeIsDataLoss) {
  std::vector<uint8_t> bytes = Encode(Envelope{1, 2, 3, AckMsg{}});
  // Segment table: (segment count - 1, size of segment 0 in words).
  const uint32_t table[2] = {0, 0x7fffffffu};
  std::memcpy(bytes.data(), table, 8);
  ExpectCode(Decode(bytes).status(), absl::StatusCode::kDataLoss, "malformed header");
}

TEST(CodecTest, HugeSegmentCountIsDataLoss) {
  std::vector<uint8_t> bytes = Encode(Envelope{1, 2, 3, AckMsg{}});
  const uint32_t table[2] = {0xfffffffeu, 1};
  std::memcpy(bytes.data(), table, 8);
  ExpectCode(Decode(bytes).status(), absl::StatusCode::kDataLoss, "malformed header");
}

TEST(CodecTest, RootPointerOutOfSegmentIsDataLoss) {
  std::vector<uint8_t> bytes = Encode(Envelope{1, 2, 3, AckMsg{}});
  // Root struct pointer (word 1) with an offset far past the segment end.
  const uint64_t root = WordAt(bytes, 1);
  SetWordAt(bytes, 1, (root & ~uint64_t{0xfffffffc}) | (uint64_t{0x0fffffff} << 2));
  ExpectCode(Decode(bytes).status(), absl::StatusCode::kDataLoss, "malformed header");
}

// A frame with a null root pointer holds no header: kDataLoss.
TEST(CodecTest, NullRootIsDataLoss) {
  std::vector<uint8_t> bytes(16, 0);
  const uint32_t table[2] = {0, 1};  // one segment of one word: the null root
  std::memcpy(bytes.data(), table, 8);
  EXPECT_EQ(Decode(bytes).status().code(), absl::StatusCode::kDataLoss);
}

TEST(CodecTest, UnknownRoleIsInvalidArgument) {
  capnp::MallocMessageBuilder builder;
  auto header = builder.initRoot<wire::Header>();
  header.setVersion(kProtocolVersion);
  auto reg = header.initBody().initRegisterRequest();
  reg.setRole(static_cast<wire::Role>(7));
  reg.setAddress("tcp://x:1");
  ExpectCode(Decode(EncodeBuilder(builder)).status(), absl::StatusCode::kInvalidArgument, "role");
}

TEST(CodecTest, UnknownRoleInClusterViewIsInvalidArgument) {
  capnp::MallocMessageBuilder builder;
  auto header = builder.initRoot<wire::Header>();
  auto nodes = header.initBody().initClusterView().initNodes(2);
  nodes[0].setRole(wire::Role::SERVER);
  nodes[1].setRole(static_cast<wire::Role>(3));
  ExpectCode(Decode(EncodeBuilder(builder)).status(), absl::StatusCode::kInvalidArgument, "role 3");
}

TEST(CodecTest, AChangeToCopiesOfMoreSlicesThanItListsIsInvalidArgument) {
  capnp::MallocMessageBuilder builder;
  auto header = builder.initRoot<wire::Header>();
  auto view = header.initBody().initClusterView();
  view.setBaseEpoch(3);
  view.initCopyKeys(2).set(1, 4);
  view.initCopies(1).init(0, 1).set(0, 2);
  ExpectCode(Decode(EncodeBuilder(builder)).status(), absl::StatusCode::kInvalidArgument,
             "cluster view changes the copies of 2 slices and lists 1");
}

TEST(CodecTest, ASliceCopyWithMorePullIdsThanWorkersIsInvalidArgument) {
  capnp::MallocMessageBuilder builder;
  auto header = builder.initRoot<wire::Header>();
  auto copy = header.initBody().initSliceCopy();
  copy.setKey(3);
  copy.initPullWorkers(1).set(0, 2);
  copy.initPullIds(2);
  ExpectCode(Decode(EncodeBuilder(builder)).status(), absl::StatusCode::kInvalidArgument,
             "slice copy lists 1 workers of counted pulls and 2 pull ids");
}

TEST(CodecTest, UnknownInitKindIsInvalidArgument) {
  capnp::MallocMessageBuilder builder;
  auto header = builder.initRoot<wire::Header>();
  auto tensors = header.initBody().initDefineModelRequest().initModel().initTensors(1);
  tensors[0].setName("w");
  tensors[0].initShape(1).set(0, 4);
  tensors[0].setInitKind(static_cast<wire::InitKind>(99));
  ExpectCode(Decode(EncodeBuilder(builder)).status(), absl::StatusCode::kInvalidArgument, "initializer kind 99");
}

TEST(CodecTest, UnknownOptimizerKindIsInvalidArgument) {
  capnp::MallocMessageBuilder builder;
  auto header = builder.initRoot<wire::Header>();
  auto model = header.initBody().initCreateSlicesRequest().initModel();
  model.initOptimizer().setKind(static_cast<wire::OptimizerKind>(5));
  ExpectCode(Decode(EncodeBuilder(builder)).status(), absl::StatusCode::kInvalidArgument, "optimizer kind 5");
}

TEST(CodecTest, UnknownConsistencyModeIsInvalidArgument) {
  capnp::MallocMessageBuilder builder;
  auto header = builder.initRoot<wire::Header>();
  auto model = header.initBody().initDefineModelReply().initModel();
  model.setConsistency(static_cast<wire::ConsistencyMode>(3));
  ExpectCode(Decode(EncodeBuilder(builder)).status(), absl::StatusCode::kInvalidArgument, "consistency mode 3");
}

TEST(CodecTest, UnknownPlacementRuleIsInvalidArgument) {
  capnp::MallocMessageBuilder builder;
  auto header = builder.initRoot<wire::Header>();
  auto model = header.initBody().initDefineModelRequest().initModel();
  model.setPlacementRule(static_cast<wire::PlacementRule>(2));
  ExpectCode(Decode(EncodeBuilder(builder)).status(), absl::StatusCode::kInvalidArgument, "placement rule 2");
}

TEST(CodecTest, UnknownBodyDiscriminantIsInvalidArgument) {
  // ack and workerDone are both empty structs, so their frames differ only in
  // the union discriminant; patch it to a value this schema does not have.
  std::vector<uint8_t> ack = Encode(Envelope{1, 2, 3, AckMsg{}});
  const std::vector<uint8_t> done = Encode(Envelope{1, 2, 3, WorkerDoneMsg{}});
  ASSERT_EQ(ack.size(), done.size());
  std::vector<size_t> diff;
  for (size_t i = 0; i < ack.size(); ++i) {
    if (ack[i] != done[i]) diff.push_back(i);
  }
  ASSERT_EQ(diff.size(), 1u);
  ASSERT_EQ(ack[diff[0]], static_cast<uint8_t>(wire::Header::Body::ACK));
  for (uint8_t which : {uint8_t{24}, uint8_t{25}, uint8_t{200}, uint8_t{255}}) {
    std::vector<uint8_t> bytes = ack;
    bytes[diff[0]] = which;
    bytes[diff[0] + 1] = 0;
    ExpectCode(Decode(bytes).status(), absl::StatusCode::kInvalidArgument, "message body");
  }
  ack[diff[0]] = static_cast<uint8_t>(wire::Header::Body::STATS_REQUEST);
  absl::StatusOr<Envelope> out = Decode(ack);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(std::holds_alternative<StatsRequestMsg>(out->body));
}

// Finds the inline-composite list pointer of an empty struct list (one that
// points at a tag word with no elements) and returns the tag's word index.
size_t FindEmptyStructListTag(const std::vector<uint8_t>& bytes) {
  for (size_t w = 1; w + 1 < bytes.size() / 8; ++w) {
    const uint64_t p = WordAt(bytes, w);
    const bool list = (p & 3) == 1;
    const bool inline_composite = ((p >> 32) & 7) == 7;
    const uint64_t words = p >> 35;
    if (!list || !inline_composite || words != 0) continue;
    const int64_t offset = static_cast<int32_t>(static_cast<uint32_t>(p)) >> 2;
    const size_t tag = w + 1 + offset;
    if (tag < bytes.size() / 8 && (WordAt(bytes, tag) & 0xfffffffc) == 0) return tag;
  }
  return 0;
}

TEST(CodecTest, ZeroSizedStructListBeyondTraversalLimitIsDataLoss) {
  // A list of zero-sized structs costs no bytes, but the traversal limit must
  // still bound how many elements a peer can make us materialise.
  std::vector<uint8_t> bytes = Encode(Envelope{1, 2, 3, PushRequestMsg{4, {}}});
  const size_t tag = FindEmptyStructListTag(bytes);
  ASSERT_NE(tag, 0u);
  SetWordAt(bytes, tag, uint64_t{1 << 28} << 2);  // 2^28 elements of 0 data, 0 pointers
  ExpectCode(Decode(bytes).status(), absl::StatusCode::kDataLoss, "malformed header");

  SetWordAt(bytes, tag, uint64_t{1000} << 2);  // 1000 elements is within the limit
  absl::StatusOr<Envelope> out = Decode(bytes);
  ASSERT_TRUE(out.ok()) << out.status();
  const auto& push = std::get<PushRequestMsg>(out->body);
  EXPECT_EQ(push.clock, 4);
  ASSERT_EQ(push.slices.size(), 1000u);
  EXPECT_EQ(push.slices[999], (SliceData{0, 0, 0}));
}

}  // namespace
}  // namespace ps
