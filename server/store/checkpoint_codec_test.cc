#include "server/store/checkpoint_codec.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/thread_pool.h"
#include "common/model/model_spec.h"
#include "common/placement/partition_map.h"
#include "common/wire/codec.h"
#include "common/wire/messages.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/checkpoint.h"
#include "server/store/slice_store.h"
#include "server/store/slice_store_testing.h"

namespace ps {
namespace {

using ::ps::testing::ExpectCode;
using ::ps::testing::Filled;
using ::ps::testing::Grad;
using ::ps::testing::Initial;
using ::ps::testing::Model;
using ::ps::testing::OneSlice;
using ::ps::testing::Push;
using ::ps::testing::SlicesOf;
using ::ps::testing::Values;
using ::testing::ElementsAre;

// ---- EncodeStore / DecodeStore ------------------------------------------------

// Worker w's gradient at clock c for every slice, from the version c.
std::vector<Grad> RoundTripGrads(const std::vector<Slice>& slices, int w, int c) {
  std::vector<Grad> grads;
  for (const Slice& s : slices) {
    Grad g{s.key, std::vector<float>(s.length), static_cast<uint64_t>(c)};
    for (size_t i = 0; i < s.length; ++i) {
      g.values[i] = std::sin(0.7f * static_cast<float>(i + 1) + 1.3f * w + 0.37f * c + s.key);
    }
    grads.push_back(std::move(g));
  }
  return grads;
}

std::string Serialized(const SliceStore& store) {
  std::string out;
  EXPECT_TRUE(EncodeStore(store, &out).ok());
  return out;
}

TEST(StoreCodecTest, RestoredStoreContinuesBitForBitForEveryOptimizerAndMode) {
  const std::vector<std::pair<int, int>> before = {{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}};
  const std::vector<std::pair<int, int>> after = {{2, 1}, {0, 2}, {2, 2}, {1, 2}};
  for (OptimizerKind kind :
       {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdam, OptimizerKind::kAdagrad}) {
    for (const Consistency& consistency :
         {Consistency{ConsistencyMode::kSync, 0}, Consistency{ConsistencyMode::kAsync, 0},
          Consistency{ConsistencyMode::kSsp, 1}}) {
      SCOPED_TRACE(absl::StrCat(OptimizerName(kind), " ", consistency.ToString()));
      OptimizerConfig opt;
      opt.kind = kind;
      opt.learning_rate = 0.1f;
      const ModelSpec model = Model({TensorSpec{"a", {6}, Initializer::Constant(10.0f)},
                                     TensorSpec{"b", {4, 3}, Initializer::Uniform(-1.0f, 1.0f, 3)}},
                                    consistency.mode, consistency.staleness, opt, /*slice_bytes=*/16);
      const std::vector<Slice> slices = SlicesOf(model);
      ThreadPool pool(2);
      SliceStore original(&pool, false), restored(&pool, false);
      ASSERT_TRUE(original.Create(model, slices, 3).ok());
      for (auto [w, c] : before) ASSERT_TRUE(Push(original, w, c, RoundTripGrads(slices, w, c)).ok());
      if (consistency.mode == ConsistencyMode::kSync) {
        ASSERT_EQ(original.Version(0), 1u);  // step 1 half pushed
      }

      const std::string image = Serialized(original);
      ASSERT_TRUE(DecodeStore(image, &restored).ok());
      EXPECT_TRUE(restored.has_model());
      EXPECT_EQ(Serialized(restored), image);
      EXPECT_EQ(restored.stats(), original.stats());
      EXPECT_TRUE(restored.Create(model, slices, 3).ok());  // CreateSlices again: a no-op
      ExpectCode(restored.Create(model, slices, 2), absl::StatusCode::kFailedPrecondition, "different model");

      for (auto [w, c] : after) {
        ASSERT_TRUE(Push(original, w, c, RoundTripGrads(slices, w, c)).ok());
        ASSERT_TRUE(Push(restored, w, c, RoundTripGrads(slices, w, c)).ok());
      }
      for (const Slice& s : slices) {
        EXPECT_EQ(Values(restored, s.key), Values(original, s.key)) << "slice " << s.key;
        EXPECT_EQ(restored.Version(s.key), original.Version(s.key));
        EXPECT_NE(Values(restored, s.key), Initial(model, s));
      }
      EXPECT_EQ(Serialized(restored), Serialized(original));
      if (consistency.mode == ConsistencyMode::kSync) {
        EXPECT_EQ(restored.Version(0), 3u);
      }
    }
  }
}

TEST(StoreCodecTest, RestoreKeepsWhoLeftAndWhoRejoined) {
  ThreadPool pool(1);
  SliceStore original(&pool, false), restored(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kSync);
  ASSERT_TRUE(original.Create(model, SlicesOf(model), 3).ok());
  ASSERT_FALSE(original.SetWorkerActive(1, false));
  ASSERT_FALSE(original.SetWorkerActive(2, false));
  ASSERT_FALSE(original.SetWorkerActive(2, true));  // counted from step 1
  ASSERT_TRUE(DecodeStore(Serialized(original), &restored).ok());
  EXPECT_TRUE(restored.IsWorkerActive(0));
  EXPECT_FALSE(restored.IsWorkerActive(1));
  EXPECT_TRUE(restored.IsWorkerActive(2));
  EXPECT_EQ(restored.WorkerClock(2), 1);
  ExpectCode(Push(restored, 1, 0, {{0, Filled(6, 1)}}), absl::StatusCode::kFailedPrecondition,
             "worker 1 has been removed");
  ExpectCode(Push(restored, 2, 0, {{0, Filled(6, 1)}}), absl::StatusCode::kFailedPrecondition, "counted from step 1");
  ASSERT_TRUE(Push(restored, 0, 0, {{0, Filled(6, 2)}}).ok());  // step 0 waits only for 0
  EXPECT_THAT(Values(restored, 0), ElementsAre(8, 8, 8, 8, 8, 8));
}

TEST(StoreCodecTest, SkippedStepsSurviveACheckpoint) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kAsync);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 2).ok());
  for (int c = 0; c < 3; ++c) ASSERT_TRUE(Push(store, 1, c, {{0, Filled(6, 1)}}).ok());
  store.SkipStepsAlreadyApplied(1);
  std::string data;
  ASSERT_TRUE(EncodeStore(store, &data).ok());
  SliceStore restored(&pool, false);
  ASSERT_TRUE(DecodeStore(data, &restored).ok());
  // Worker 1's new node resumed at 1 elsewhere: steps 1 and 2 are held here.
  ASSERT_TRUE(Push(restored, 1, 1, {{0, Filled(6, 5)}}).ok());
  ASSERT_TRUE(Push(restored, 1, 2, {{0, Filled(6, 5)}}).ok());
  ASSERT_TRUE(Push(restored, 1, 3, {{0, Filled(6, 1)}}).ok());
  EXPECT_THAT(Values(restored, 0), ElementsAre(6, 6, 6, 6, 6, 6));  // 10 - 3 - 1
  EXPECT_EQ(restored.stats().slices_skipped, 2u);
}

// A large state is written with breaks for the caller (the server's
// heartbeats): after every slice and every 64K rows of a table shard.
TEST(StoreCodecTest, EncodeGivesTheCallerBreaksThroughALargeTable) {
  ModelSpec model = Model({TensorSpec{"w", {4}, Initializer::Zeros()}}, ConsistencyMode::kAsync);
  model.tables = {TableSpec{"emb", 2, Initializer::Zeros()}};
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 1).ok());
  constexpr uint64_t kRows = 150000;
  std::vector<uint64_t> ids(kRows);
  for (uint64_t i = 0; i < kRows; ++i) ids[i] = i * 7919 + 1;
  std::vector<float> out(kRows * 2);
  store.Table(1)->Read(ids, absl::MakeSpan(out));  // creates the rows
  int breaks = 0;
  std::string image;
  ASSERT_TRUE(EncodeStore(store, &image, [&] { ++breaks; }).ok());
  EXPECT_EQ(breaks, 2 + 2);  // rows 64K and 128K, then each of the two slices
  SliceStore restored(&pool, false);
  ASSERT_TRUE(DecodeStore(image, &restored).ok());
  EXPECT_EQ(restored.Table(1)->rows(), kRows);
}

TEST(StoreCodecTest, SerializeWithoutModelIsFailedPrecondition) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  std::string out;
  ExpectCode(EncodeStore(store, &out), absl::StatusCode::kFailedPrecondition, "no model");
}

TEST(StoreCodecTest, RestoreIntoAStoreWithAModelIsFailedPrecondition) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kAsync);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 1).ok());
  ASSERT_TRUE(Push(store, 0, 0, {{0, Filled(6, 1)}}).ok());
  ExpectCode(DecodeStore(Serialized(store), &store), absl::StatusCode::kFailedPrecondition, "already holds a model");
  EXPECT_EQ(store.Version(0), 1u);
}

TEST(StoreCodecTest, RestoreBeyondTheMemoryBudgetIsResourceExhausted) {
  ThreadPool pool(1);
  SliceStore big(&pool, false), tight(&pool, false, /*max_bytes=*/40);
  const ModelSpec model = OneSlice(ConsistencyMode::kSync);  // 48 bytes with the sync sum
  ASSERT_TRUE(big.Create(model, SlicesOf(model), 1).ok());
  ExpectCode(DecodeStore(Serialized(big), &tight), absl::StatusCode::kResourceExhausted, "max_memory_mb");
  EXPECT_FALSE(tight.has_model());
}

// A sync store with one slice of 6 and 3 workers, 0 and 1 having pushed step
// 0, serialised; the offsets of its fields (the layout is in server/store/checkpoint.h).
class StoreDecodeTest : public ::testing::Test {
 protected:
  static constexpr int kWorkers = 3;
  void SetUp() override {
    ASSERT_TRUE(store_.Create(model_, SlicesOf(model_), kWorkers).ok());
    ASSERT_TRUE(Push(store_, 0, 0, {{0, Filled(6, 1)}}).ok());
    ASSERT_TRUE(Push(store_, 1, 0, {{0, Filled(6, 2)}}).ok());
    image_ = Serialized(store_);
    uint64_t spec = 0;
    std::memcpy(&spec, image_.data() + 4, 8);
    active_ = 12 + spec;
    uint64_t buckets = 0;
    std::memcpy(&buckets, image_.data() + active_ + kWorkers + 24, 8);
    slice_ = active_ + kWorkers + 32 + buckets * 8;
  }

  template <typename T>
  std::string With(size_t offset, T value) const {
    std::string data = image_;
    std::memcpy(data.data() + offset, &value, sizeof(T));
    return data;
  }

  // image_ with its model record replaced by `body`.
  template <typename Body>
  std::string WithSpec(const Body& body) const {
    Envelope envelope;
    envelope.body = body;
    const kj::Array<capnp::word> words = EncodeEnvelope(envelope);
    const kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
    std::string data = image_.substr(0, 4);
    const uint64_t size = bytes.size();
    data.append(reinterpret_cast<const char*>(&size), 8);
    data.append(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
    return data + image_.substr(active_);
  }

  void ExpectRefused(const std::string& data, const std::string& substring) {
    ThreadPool pool(1);
    SliceStore fresh(&pool, false);
    ExpectCode(DecodeStore(data, &fresh), absl::StatusCode::kDataLoss, substring);
    EXPECT_FALSE(fresh.has_model());
    // The refusal left nothing behind: the good image still loads.
    EXPECT_TRUE(DecodeStore(image_, &fresh).ok());
  }

  ThreadPool pool_{1};
  SliceStore store_{&pool_, false};
  ModelSpec model_ = OneSlice(ConsistencyMode::kSync);
  std::string image_;
  size_t active_ = 0;  // u8 x kWorkers
  size_t slice_ = 0;   // key u32, version u64, steps u64, arrived u32, pushed, clocks, joins, floats
  size_t pushed() const { return slice_ + 24; }
  size_t clocks() const { return pushed() + kWorkers; }
  size_t joins() const { return clocks() + 8 * kWorkers; }
};

TEST_F(StoreDecodeTest, EveryTruncationIsDataLoss) {
  for (size_t n = 0; n < image_.size(); ++n) {
    ThreadPool pool(1);
    SliceStore fresh(&pool, false);
    const absl::Status s = DecodeStore(absl::string_view(image_.data(), n), &fresh);
    ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << "first " << n << " bytes: " << s;
    ASSERT_FALSE(fresh.has_model()) << n;
  }
  ExpectRefused(image_.substr(0, image_.size() - 1), "truncated: it ends inside slice 0's step sum");
  ExpectRefused(image_.substr(0, 2), "truncated: it ends inside the format version");
}

TEST_F(StoreDecodeTest, TrailingBytesAreDataLoss) { ExpectRefused(image_ + "z", "1 bytes after the last slice"); }

TEST_F(StoreDecodeTest, GarbledFieldsAreDataLoss) {
  ExpectRefused(With<uint32_t>(0, 7), "slice store format 7");
  ExpectRefused(With<uint8_t>(active_, 2), "active flag of worker 0 is 2");
  ExpectRefused(With<uint32_t>(slice_, 9), "expected slice 0, found slice 9");
  ExpectRefused(With<uint64_t>(slice_ + 12, 5), "5 optimizer steps but version 0");
  ExpectRefused(With<uint32_t>(slice_ + 20, 1), "1 pushes arrived but 2 workers marked");
  ExpectRefused(With<uint8_t>(pushed() + 2, 1), "2 pushes arrived but 3 workers marked");
  ExpectRefused(With<uint8_t>(pushed() + 2, 7), "bad pushed flag for worker 2");
  ExpectRefused(With<int64_t>(clocks(), -1), "clock of worker 0 is -1");
  ExpectRefused(With<uint64_t>(joins() + 16, 5), "worker 2 joins at step 5");
  // Worker 0 pushed step 0: it cannot be counted only from step 1.
  ExpectRefused(With<uint64_t>(joins(), 1), "worker 0 joins at step 1");
  // With worker 2 inactive, step 0 would have been applied already.
  ExpectRefused(With<uint8_t>(active_ + 2, 0), "step 0 has every push it waits for but was not applied");
}

TEST_F(StoreDecodeTest, ModelThatDoesNotDecodeIsDataLoss) {
  uint64_t spec = 0;
  std::memcpy(&spec, image_.data() + 4, 8);
  ExpectRefused(With<uint64_t>(4, spec + 8), "");  // the spec swallows the active flags
  std::string data = image_;
  std::memset(data.data() + 12, 0xff, 16);  // the capnp segment table
  ExpectRefused(data, "the model and slice list do not decode");
}

// The optimizer's state size follows from the model: a model record saying
// momentum over data written for SGD is missing the state.
TEST_F(StoreDecodeTest, OptimizerStateOfTheWrongSizeIsDataLoss) {
  CreateSlicesRequestMsg other;
  other.model = model_;
  other.model.optimizer.kind = OptimizerKind::kMomentum;
  other.slices = SlicesOf(model_);
  other.num_workers = kWorkers;
  // Momentum reads the SGD store's step sum as its state and finds no sum.
  ExpectRefused(WithSpec(other), "truncated: it ends inside slice 0's step sum");
}

// A model that no longer validates, or a slice outside it.
TEST_F(StoreDecodeTest, InvalidModelOrSliceIsDataLoss) {
  CreateSlicesRequestMsg msg;
  msg.model = model_;
  msg.slices = SlicesOf(model_);
  msg.num_workers = kWorkers;
  SliceStore fresh(&pool_, false);
  EXPECT_TRUE(DecodeStore(WithSpec(msg), &fresh).ok());
  CreateSlicesRequestMsg bad = msg;
  bad.model.optimizer.learning_rate = -1;
  ExpectRefused(WithSpec(bad), "the model does not validate");
  bad = msg;
  bad.slices[0].length = 7;
  ExpectRefused(WithSpec(bad), "slice 0 does not fit the model");
  bad = msg;
  bad.num_workers = 0;
  ExpectRefused(WithSpec(bad), "num_workers is 0");
  bad = msg;
  bad.num_workers = 2;  // the per-worker arrays no longer line up
  ExpectRefused(WithSpec(bad), "");
  ExpectRefused(WithSpec(AckMsg{}), "holds a ack message");
}

// Format 1, written by older builds, is format 2 without the floor flags.
TEST_F(StoreDecodeTest, FormatOneWithoutFloorsIsRead) {
  std::string data = With<uint32_t>(0, 1);
  data.erase(joins() + 8 * kWorkers, 1);  // the floor flag (0: no floors)
  ThreadPool pool(1);
  SliceStore fresh(&pool, false);
  ASSERT_TRUE(DecodeStore(data, &fresh).ok());
  EXPECT_EQ(Serialized(fresh), image_);
}

// ---- the checkpoint's info -------------------------------------------------------

CheckpointInfo Info() {
  CheckpointInfo info;
  info.server_rank = 3;
  info.number = 7;
  info.unix_ms = 1700000000123;
  info.incarnation = 5;
  info.seqs = {WorkerSeq{0, 11, 41}, WorkerSeq{1, 12, 42}};
  return info;
}

TEST(CheckpointInfoCodecTest, RoundTripLeavesTheStoresPart) {
  const std::string body = EncodeCheckpointInfo(Info()) + "store";
  absl::string_view rest = body;
  absl::StatusOr<CheckpointInfo> info = DecodeCheckpointInfo(kCheckpointFormat, &rest);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(*info, Info());
  EXPECT_EQ(rest, "store");
}

// Format 1 has no incarnation: it reads as 0, unknown.
TEST(CheckpointInfoCodecTest, FormatOneHasNoIncarnation) {
  std::string body = EncodeCheckpointInfo(Info());
  body.erase(4 + 8 + 8, 8);
  absl::string_view rest = body;
  absl::StatusOr<CheckpointInfo> info = DecodeCheckpointInfo(1, &rest);
  ASSERT_TRUE(info.ok()) << info.status();
  CheckpointInfo want = Info();
  want.incarnation = 0;
  EXPECT_EQ(*info, want);
  EXPECT_TRUE(rest.empty());
}

TEST(CheckpointInfoCodecTest, ShortBodyIsDataLoss) {
  const std::string body = EncodeCheckpointInfo(Info());
  absl::string_view fixed(body.data(), 10);
  ExpectCode(DecodeCheckpointInfo(kCheckpointFormat, &fixed).status(), absl::StatusCode::kDataLoss,
             "too short for its info");
  absl::string_view seqs(body.data(), body.size() - 1);
  ExpectCode(DecodeCheckpointInfo(kCheckpointFormat, &seqs).status(), absl::StatusCode::kDataLoss,
             "too short for its 2 worker sequence numbers");
}

}  // namespace
}  // namespace ps
