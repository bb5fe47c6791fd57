#include "server/store/slice_store.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/base/thread_pool.h"
#include "common/model/initializer.h"
#include "common/model/model_spec.h"
#include "common/placement/partition_map.h"
#include "common/wire/codec.h"
#include "common/wire/messages.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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
using ::ps::testing::Sgd;
using ::ps::testing::SlicesOf;
using ::ps::testing::Values;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- helpers ----------------------------------------------------------------

// "a": 6 elements of 10 in slices 0 [0,3) and 1 [3,6); "b": 4x3 uniform in
// slices 2, 3, 4 of 4 elements each.
ModelSpec FiveSlices(ConsistencyMode mode, int32_t staleness = 0) {
  return Model({TensorSpec{"a", {6}, Initializer::Constant(10.0f)},
                TensorSpec{"b", {4, 3}, Initializer::Uniform(-1.0f, 1.0f, 3)}},
               mode, staleness, Sgd(), /*slice_bytes=*/16);
}

PullRequestMsg Pull(int64_t clock, std::vector<uint32_t> keys) { return PullRequestMsg{clock, std::move(keys), 0}; }

bool Ready(const SliceStore& store, int64_t clock, std::vector<uint32_t> keys = {0}) {
  const PullRequestMsg pull = Pull(clock, std::move(keys));
  EXPECT_TRUE(store.CheckPull(pull).ok());
  return store.PullReady(pull);
}

// A store over FiveSlices with a snapshot of its values, for the tests that
// check a rejected push changes nothing.
class SliceStoreRejectedPushTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(store_.Create(model_, slices_, 3).ok());
    for (const Slice& s : slices_) before_.push_back(Values(store_, s.key));
  }
  void ExpectUnchanged() {
    for (size_t i = 0; i < slices_.size(); ++i) {
      EXPECT_EQ(Values(store_, slices_[i].key), before_[i]) << "slice " << slices_[i].key;
      EXPECT_EQ(store_.Version(slices_[i].key), 0u);
    }
    EXPECT_EQ(store_.stats().pushes_applied, 0u);
    EXPECT_EQ(store_.stats().updates_applied, 0u);
  }

  ThreadPool pool_{2};
  SliceStore store_{&pool_, /*allow_nonfinite=*/false};
  ModelSpec model_ = FiveSlices(ConsistencyMode::kSync);
  std::vector<Slice> slices_ = SlicesOf(model_);
  std::vector<std::vector<float>> before_;
};

// ---- Create -------------------------------------------------------------------

TEST(SliceStoreTest, CreateFillsInitialValues) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  EXPECT_FALSE(store.has_model());
  const ModelSpec model = FiveSlices(ConsistencyMode::kSync);
  const std::vector<Slice> slices = SlicesOf(model);
  ASSERT_EQ(slices.size(), 5u);
  ASSERT_TRUE(store.Create(model, slices, 2).ok());
  EXPECT_TRUE(store.has_model());
  EXPECT_EQ(store.stats().slices_held, 5u);
  EXPECT_THAT(Values(store, 0), ElementsAre(10, 10, 10));
  EXPECT_THAT(Values(store, 1), ElementsAre(10, 10, 10));
  for (const Slice& s : slices) {
    EXPECT_EQ(Values(store, s.key), Initial(model, s)) << "slice " << s.key;
    EXPECT_EQ(store.Version(s.key), 0u);
  }
  // The uniform tensor really is random, not zeros.
  EXPECT_NE(Values(store, 2), Filled(4, 0.0f));
}

TEST(SliceStoreTest, CreateHoldsOnlyTheSlicesGiven) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = FiveSlices(ConsistencyMode::kAsync);
  const std::vector<Slice> mine = SlicesOf(model, /*num_servers=*/2, /*server=*/1);
  ASSERT_FALSE(mine.empty());
  ASSERT_LT(mine.size(), 5u);
  ASSERT_TRUE(store.Create(model, mine, 1).ok());
  EXPECT_EQ(store.stats().slices_held, mine.size());
  for (const Slice& s : mine) EXPECT_EQ(Values(store, s.key), Initial(model, s));
  const std::vector<Slice> theirs = SlicesOf(model, 2, 0);
  ASSERT_FALSE(theirs.empty());
  ExpectCode(store.CheckPull(Pull(0, {theirs[0].key})), absl::StatusCode::kNotFound, "unknown slice key");
}

TEST(SliceStoreTest, CreateSameModelTwiceIsOk) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kAsync);
  const std::vector<Slice> slices = SlicesOf(model);
  ASSERT_TRUE(store.Create(model, slices, 1).ok());
  ASSERT_TRUE(Push(store, 0, 0, {{0, {1, 1, 1, 1, 1, 1}}}).ok());
  EXPECT_TRUE(store.Create(model, slices, 1).ok());
  // A no-op: the pushed update is still there.
  EXPECT_THAT(Values(store, 0), ElementsAre(9, 9, 9, 9, 9, 9));
  EXPECT_EQ(store.Version(0), 1u);
}

// --replicas, a restored store: keeps the slices the job keeps here, as they
// were, and drops the others; a slice it lacks or another model changes nothing.
TEST(SliceStoreTest, RetainKeepsTheCopiesGivenAndDropsTheOthers) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = FiveSlices(ConsistencyMode::kAsync);
  const std::vector<Slice> all = SlicesOf(model);
  ASSERT_EQ(all.size(), 5u);
  ASSERT_TRUE(store.Create(model, all, 1).ok());
  ASSERT_TRUE(Push(store, 0, 0, {{0, {1, 1, 1}}}).ok());
  const std::vector<SliceData> held = store.Held();
  ASSERT_EQ(held.size(), 5u);
  EXPECT_EQ(held[0], (SliceData{0, 3, 1, 0}));  // key, length, version, rows
  EXPECT_EQ(held[2].version, 0u);

  ExpectCode(store.Retain(model, {all[0], Slice{9, 0, 0, 3, 0, false}}, 1), absl::StatusCode::kFailedPrecondition,
             "slice 9 (tensor 0, offset 0) is not in this server's checkpoint");
  Slice moved = all[1];
  moved.offset += 1;
  ExpectCode(store.Retain(model, {moved}, 1), absl::StatusCode::kFailedPrecondition, "slice 1 ");
  ExpectCode(store.Retain(model, {all[0]}, 2), absl::StatusCode::kFailedPrecondition, "different model");
  EXPECT_EQ(store.stats().slices_held, 5u) << "a refused Retain changes nothing";

  ASSERT_TRUE(store.Retain(model, {all[3], all[0]}, 1).ok());
  EXPECT_EQ(store.stats().slices_held, 2u);
  EXPECT_THAT(store.stats().held_keys, ElementsAre(0, 3));
  EXPECT_THAT(Values(store, 0), ElementsAre(9, 9, 9));  // as it was, update included
  ExpectCode(store.CheckPull(Pull(0, {1})), absl::StatusCode::kNotFound, "unknown slice key");
}

TEST(SliceStoreTest, CreateBeyondTheMemoryBudgetIsResourceExhausted) {
  ThreadPool pool(1);
  // 6 floats of values + 6 of the sync sum = 48 bytes; Adam adds 48 more.
  SliceStore fits(&pool, false, 48);
  EXPECT_TRUE(fits.Create(OneSlice(ConsistencyMode::kSync), SlicesOf(OneSlice(ConsistencyMode::kSync)), 1).ok());
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  const ModelSpec big = OneSlice(ConsistencyMode::kSync, 0, adam);
  SliceStore tight(&pool, false, 95);
  const absl::Status s = tight.Create(big, SlicesOf(big), 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("max_memory_mb"));
  EXPECT_FALSE(tight.has_model());
}

TEST(SliceStoreTest, CreateDifferentModelIsFailedPrecondition) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kSync);
  const std::vector<Slice> slices = SlicesOf(model);
  ASSERT_TRUE(store.Create(model, slices, 2).ok());

  ModelSpec other = model;
  other.optimizer.learning_rate = 0.5f;
  ExpectCode(store.Create(other, slices, 2), absl::StatusCode::kFailedPrecondition, "different model");
  std::vector<Slice> fewer = slices;
  fewer[0].length = 5;
  ExpectCode(store.Create(model, fewer, 2), absl::StatusCode::kFailedPrecondition, "different model");
  EXPECT_THAT(Values(store, 0), ElementsAre(10, 10, 10, 10, 10, 10));
  EXPECT_EQ(store.stats().slices_held, 1u);
}

TEST(SliceStoreTest, CreateWithNoWorkersIsInvalidArgument) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kSync);
  ExpectCode(store.Create(model, SlicesOf(model), 0), absl::StatusCode::kInvalidArgument, "num_workers is 0");
  ExpectCode(store.Create(model, SlicesOf(model), -2), absl::StatusCode::kInvalidArgument, "num_workers is -2");
  EXPECT_FALSE(store.has_model());
  EXPECT_TRUE(store.Create(model, SlicesOf(model), 1).ok());
}

TEST(SliceStoreTest, CreateInvalidModelIsInvalidArgument) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  ModelSpec model = OneSlice(ConsistencyMode::kSync);
  const std::vector<Slice> slices = SlicesOf(model);
  model.optimizer.learning_rate = -1.0f;
  ExpectCode(store.Create(model, slices, 1), absl::StatusCode::kInvalidArgument, "learning_rate");
  ModelSpec empty = model;
  empty.tensors.clear();
  ExpectCode(store.Create(empty, {}, 1), absl::StatusCode::kInvalidArgument, "no tensors");
  EXPECT_FALSE(store.has_model());
}

TEST(SliceStoreTest, CreateSliceThatDoesNotFitIsInvalidArgument) {
  const ModelSpec model = OneSlice(ConsistencyMode::kSync);  // "w" has 6 elements
  const std::vector<std::vector<Slice>> bad = {
      {Slice{0, 0, 0, 7, 0}},                        // past the end
      {Slice{0, 0, 4, 3, 0}},                        // past the end from an offset
      {Slice{0, 1, 0, 1, 0}},                        // tensor index out of range
      {Slice{0, 0, 0, 0, 0}},                        // empty
      {Slice{0, 0, 0, 3, 0}, Slice{0, 0, 3, 3, 0}},  // duplicate key
  };
  for (const auto& slices : bad) {
    ThreadPool pool(1);
    SliceStore store(&pool, false);
    ExpectCode(store.Create(model, slices, 1), absl::StatusCode::kInvalidArgument, "does not fit the model");
    EXPECT_FALSE(store.has_model());
  }
}

// Slice bounds come off the wire: offset + length must not wrap around.
TEST(SliceStoreTest, CreateSliceWithOverflowingOffsetIsInvalidArgument) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kSync);
  const Slice wrap{0, 0, std::numeric_limits<uint64_t>::max(), 2, 0};
  EXPECT_EQ(store.Create(model, {wrap}, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(store.has_model());
}

// ---- sync ---------------------------------------------------------------------

class SliceStoreSyncTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(store_.Create(model_, SlicesOf(model_), 3).ok()); }
  ThreadPool pool_{2};
  SliceStore store_{&pool_, false};
  ModelSpec model_ = OneSlice(ConsistencyMode::kSync);
};

TEST_F(SliceStoreSyncTest, StepAppliesOnlyWhenAllWorkersPushed) {
  ASSERT_TRUE(Push(store_, 0, 0, {{0, {1, 2, 3, 4, 5, 6}}}).ok());
  ASSERT_TRUE(Push(store_, 2, 0, {{0, {0, 2, 4, 6, 8, 10}}}).ok());
  EXPECT_THAT(Values(store_, 0), ElementsAre(10, 10, 10, 10, 10, 10));
  EXPECT_EQ(store_.Version(0), 0u);
  EXPECT_TRUE(Ready(store_, 0));
  EXPECT_FALSE(Ready(store_, 1));
  const std::string wait = store_.DescribeWait(Pull(1, {0}));
  EXPECT_THAT(wait, HasSubstr("at step 0"));
  EXPECT_THAT(wait, HasSubstr("workers [1]"));
  EXPECT_EQ(store_.stats().pushes_applied, 2u);
  EXPECT_EQ(store_.stats().updates_applied, 0u);

  ASSERT_TRUE(Push(store_, 1, 0, {{0, {2, 2, 2, 2, 2, 2}}}).ok());
  // Sum {3, 6, 9, 12, 15, 18}, mean {1, ..., 6}, lr 1.
  EXPECT_THAT(Values(store_, 0), ElementsAre(9, 8, 7, 6, 5, 4));
  EXPECT_EQ(store_.Version(0), 1u);
  EXPECT_TRUE(Ready(store_, 1));
  EXPECT_FALSE(Ready(store_, 2));
  EXPECT_EQ(store_.stats().pushes_applied, 3u);
  EXPECT_EQ(store_.stats().updates_applied, 1u);
}

TEST_F(SliceStoreSyncTest, DescribeWaitListsEveryWorkerMissing) {
  EXPECT_THAT(store_.DescribeWait(Pull(1, {0})), HasSubstr("workers [0,1,2]"));
  ASSERT_TRUE(Push(store_, 1, 0, {{0, Filled(6, 1)}}).ok());
  EXPECT_THAT(store_.DescribeWait(Pull(1, {0})), HasSubstr("workers [0,2]"));
}

TEST_F(SliceStoreSyncTest, SecondStepStartsFromFreshSum) {
  for (int w = 0; w < 3; ++w) ASSERT_TRUE(Push(store_, w, 0, {{0, Filled(6, 3)}}).ok());
  EXPECT_THAT(Values(store_, 0), ElementsAre(7, 7, 7, 7, 7, 7));
  for (int w = 0; w < 3; ++w) {
    ASSERT_TRUE(Push(store_, w, 1, {{0, {static_cast<float>(w), 0, 0, 0, 0, 6}}}).ok());
  }
  // Step 1 mean: {1, 0, 0, 0, 0, 6}; nothing of step 0's sum left over.
  EXPECT_THAT(Values(store_, 0), ElementsAre(6, 7, 7, 7, 7, 1));
  EXPECT_EQ(store_.Version(0), 2u);
  EXPECT_TRUE(Ready(store_, 2));
  EXPECT_EQ(store_.stats().updates_applied, 2u);
}

TEST_F(SliceStoreSyncTest, PushForAppliedStepIsFailedPrecondition) {
  for (int w = 0; w < 3; ++w) ASSERT_TRUE(Push(store_, w, 0, {{0, Filled(6, 3)}}).ok());
  ExpectCode(Push(store_, 0, 0, {{0, Filled(6, 3)}}), absl::StatusCode::kFailedPrecondition, "already applied");
  // A negative clock is not a step at all.
  ExpectCode(Push(store_, 1, -1, {{0, Filled(6, 3)}}), absl::StatusCode::kInvalidArgument, "outside");
  EXPECT_THAT(Values(store_, 0), ElementsAre(7, 7, 7, 7, 7, 7));
  EXPECT_EQ(store_.Version(0), 1u);
  EXPECT_EQ(store_.stats().pushes_applied, 3u);
}

TEST_F(SliceStoreSyncTest, PushForFutureStepIsFailedPrecondition) {
  ExpectCode(Push(store_, 0, 2, {{0, Filled(6, 3)}}), absl::StatusCode::kFailedPrecondition, "still at step 0");
  ExpectCode(Push(store_, 0, 1, {{0, Filled(6, 3)}}), absl::StatusCode::kFailedPrecondition, "still at step 0");
  EXPECT_THAT(Values(store_, 0), ElementsAre(10, 10, 10, 10, 10, 10));
  EXPECT_EQ(store_.Version(0), 0u);
  EXPECT_EQ(store_.stats().pushes_applied, 0u);
  // Worker 0 may still push step 0: the rejected pushes left no trace.
  EXPECT_TRUE(Push(store_, 0, 0, {{0, Filled(6, 3)}}).ok());
}

// What the server holds back (a re-sent push running ahead) rather than refuses.
TEST_F(SliceStoreSyncTest, PushAheadOnlyForStepsNotReached) {
  PushRequestMsg push{0, {SliceData{0, 6, 0}}};
  EXPECT_FALSE(store_.PushAhead(push));  // step 0 is the slice's step
  push.clock = 1;
  EXPECT_TRUE(store_.PushAhead(push));
  push.slices = {SliceData{99, 6, 0}};  // an unknown key: applying it names the problem
  EXPECT_FALSE(store_.PushAhead(push));
  for (int w = 0; w < 3; ++w) ASSERT_TRUE(Push(store_, w, 0, {{0, Filled(6, 3)}}).ok());
  push = PushRequestMsg{1, {SliceData{0, 6, 0}}};
  EXPECT_FALSE(store_.PushAhead(push));  // step 1 reached
}

TEST(SliceStoreTest, PushAheadIsFalseOutsideSync) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  EXPECT_FALSE(store.PushAhead(PushRequestMsg{5, {SliceData{0, 4, 0}}}));  // no model
  const ModelSpec model = Model({TensorSpec{"w", {4}, Initializer::Zeros()}}, ConsistencyMode::kAsync);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 2).ok());
  EXPECT_FALSE(store.PushAhead(PushRequestMsg{5, {SliceData{0, 4, 0}}}));
}

TEST_F(SliceStoreSyncTest, SecondPushOfSameStepIsAlreadyExists) {
  ASSERT_TRUE(Push(store_, 0, 0, {{0, Filled(6, 3)}}).ok());
  ExpectCode(Push(store_, 0, 0, {{0, Filled(6, 300)}}), absl::StatusCode::kAlreadyExists,
             "worker 0 already pushed step 0");
  EXPECT_THAT(Values(store_, 0), ElementsAre(10, 10, 10, 10, 10, 10));
  EXPECT_EQ(store_.stats().pushes_applied, 1u);
  // The rejected gradient did not reach the sum: mean of 3, 6, 0 is 3.
  ASSERT_TRUE(Push(store_, 1, 0, {{0, Filled(6, 6)}}).ok());
  ASSERT_TRUE(Push(store_, 2, 0, {{0, Filled(6, 0)}}).ok());
  EXPECT_THAT(Values(store_, 0), ElementsAre(7, 7, 7, 7, 7, 7));
}

TEST(SliceStoreTest, SyncSlicesAdvanceIndependently) {
  ThreadPool pool(2);
  SliceStore store(&pool, false);
  const ModelSpec model = FiveSlices(ConsistencyMode::kSync);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 2).ok());
  ASSERT_TRUE(Push(store, 0, 0, {{0, {2, 4, 6}}, {1, {1, 1, 1}}}).ok());
  ASSERT_TRUE(Push(store, 1, 0, {{0, {0, 0, 2}}}).ok());
  EXPECT_THAT(Values(store, 0), ElementsAre(9, 8, 6));
  EXPECT_THAT(Values(store, 1), ElementsAre(10, 10, 10));
  EXPECT_TRUE(Ready(store, 1, {0}));
  EXPECT_FALSE(Ready(store, 1, {0, 1}));
  EXPECT_THAT(store.DescribeWait(Pull(1, {0, 1})), HasSubstr("slice 1 of 'a' [3, 6)"));
  EXPECT_THAT(store.DescribeWait(Pull(1, {0, 1})), HasSubstr("workers [1]"));
  EXPECT_EQ(store.stats().updates_applied, 1u);
}

// ---- async --------------------------------------------------------------------

TEST(SliceStoreTest, AsyncAppliesEachPushAndRecordsStaleness) {
  ThreadPool pool(2);
  SliceStore store(&pool, false);
  const ModelSpec model = Model({TensorSpec{"w", {4}, Initializer::Zeros()}}, ConsistencyMode::kAsync);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 2).ok());

  ASSERT_TRUE(Push(store, 0, 0, {{0, {1, 2, 3, 4}, /*version=*/0}}).ok());
  EXPECT_THAT(Values(store, 0), ElementsAre(-1, -2, -3, -4));
  EXPECT_EQ(store.Version(0), 1u);
  ASSERT_TRUE(Push(store, 1, 0, {{0, {1, 1, 1, 1}, /*version=*/0}}).ok());  // staleness 1
  EXPECT_THAT(Values(store, 0), ElementsAre(-2, -3, -4, -5));
  EXPECT_EQ(store.Version(0), 2u);
  ASSERT_TRUE(Push(store, 0, 1, {{0, {0, 0, 0, 8}, /*version=*/0}}).ok());  // staleness 2
  EXPECT_THAT(Values(store, 0), ElementsAre(-2, -3, -4, -13));
  EXPECT_EQ(store.Version(0), 3u);
  ASSERT_TRUE(Push(store, 1, 1, {{0, {0, 0, 0, 0}, /*version=*/3}}).ok());  // fresh
  ASSERT_TRUE(Push(store, 1, 2, {{0, {0, 0, 0, 0}, /*version=*/9}}).ok());  // ahead: 0

  const StatsReplyMsg& stats = store.stats();
  ASSERT_GE(stats.staleness_histogram.size(), 3u);
  EXPECT_EQ(stats.staleness_histogram[0], 3u);
  EXPECT_EQ(stats.staleness_histogram[1], 1u);
  EXPECT_EQ(stats.staleness_histogram[2], 1u);
  for (size_t s = 3; s < stats.staleness_histogram.size(); ++s) {
    EXPECT_EQ(stats.staleness_histogram[s], 0u) << s;
  }
  EXPECT_EQ(stats.staleness_max, 2u);
  EXPECT_EQ(stats.pushes_applied, 5u);
  EXPECT_EQ(stats.updates_applied, 5u);
  EXPECT_EQ(store.Version(0), 5u);
  // Async pulls never wait.
  EXPECT_TRUE(Ready(store, 1000));
  EXPECT_EQ(store.DescribeWait(Pull(1000, {0})), "nothing");
}

TEST(SliceStoreTest, AsyncVeryStalePushLandsInLastBucket) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = Model({TensorSpec{"w", {1}, Initializer::Zeros()}}, ConsistencyMode::kAsync);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 1).ok());
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(Push(store, 0, i, {{0, {1}, uint64_t(i)}}).ok());
  ASSERT_TRUE(Push(store, 0, 300, {{0, {1}, 0}}).ok());  // staleness 300
  const StatsReplyMsg& stats = store.stats();
  EXPECT_EQ(stats.staleness_max, 300u);
  EXPECT_EQ(stats.staleness_histogram[0], 300u);
  EXPECT_EQ(stats.staleness_histogram.back(), 1u);
  EXPECT_THAT(Values(store, 0), ElementsAre(-301));
}

TEST(SliceStoreTest, AsyncUsesWholeGradientNotMean) {
  // Sync divides the sum by num_workers; async applies each gradient as is.
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kAsync, 0, Sgd(0.5f));
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 4).ok());
  ASSERT_TRUE(Push(store, 3, 0, {{0, {2, 4, 6, 8, 10, 12}}}).ok());
  EXPECT_THAT(Values(store, 0), ElementsAre(9, 8, 7, 6, 5, 4));
}

// ---- ssp ----------------------------------------------------------------------

TEST(SliceStoreTest, SspPullWaitsForSlowestWorkerWithinStaleness) {
  ThreadPool pool(2);
  SliceStore store(&pool, false);
  const ModelSpec model = FiveSlices(ConsistencyMode::kSsp, /*staleness=*/1);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 3).ok());
  const std::vector<float> g = {1, 1, 1};

  // Worker clocks (one past the last clock pushed) {0, 0, 0}: ready iff c <= 1.
  EXPECT_TRUE(Ready(store, 0));
  EXPECT_TRUE(Ready(store, 1));
  EXPECT_FALSE(Ready(store, 2));

  ASSERT_TRUE(Push(store, 0, 0, {{0, g}}).ok());
  ASSERT_TRUE(Push(store, 1, 0, {{0, g}}).ok());
  // {1, 1, 0}: still 2 is not ready, and worker 2 is the one behind.
  EXPECT_FALSE(Ready(store, 2));
  EXPECT_THAT(store.DescribeWait(Pull(2, {0})), HasSubstr("workers behind: [2]"));
  // Pushes are applied on arrival.
  EXPECT_THAT(Values(store, 0), ElementsAre(8, 8, 8));
  EXPECT_EQ(store.Version(0), 2u);

  ASSERT_TRUE(Push(store, 2, 0, {{0, g}}).ok());  // {1, 1, 1}
  EXPECT_TRUE(Ready(store, 2));
  EXPECT_FALSE(Ready(store, 3));
  // Slice 1 saw no pushes: a pull that also wants it is not ready at 2.
  EXPECT_FALSE(Ready(store, 2, {0, 1}));
  EXPECT_TRUE(Ready(store, 1, {0, 1}));

  ASSERT_TRUE(Push(store, 0, 1, {{0, g}}).ok());
  ASSERT_TRUE(Push(store, 0, 2, {{0, g}}).ok());  // {3, 1, 1}: a fast worker does not help
  EXPECT_FALSE(Ready(store, 3));
  ASSERT_TRUE(Push(store, 1, 1, {{0, g}}).ok());  // {3, 2, 1}
  EXPECT_FALSE(Ready(store, 3));
  EXPECT_THAT(store.DescribeWait(Pull(3, {0})), HasSubstr("workers behind: [2]"));
  ASSERT_TRUE(Push(store, 2, 1, {{0, g}}).ok());  // {3, 2, 2}
  EXPECT_TRUE(Ready(store, 3));
  EXPECT_FALSE(Ready(store, 4));
  EXPECT_THAT(Values(store, 0), ElementsAre(3, 3, 3));  // 10 - 7 pushes of 1
  EXPECT_THAT(Values(store, 1), ElementsAre(10, 10, 10));
}

TEST(SliceStoreTest, SspWorkerClockNeverGoesBack) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kSsp, /*staleness=*/0);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 1).ok());
  ASSERT_TRUE(Push(store, 0, 4, {{0, Filled(6, 1)}}).ok());  // clock 5
  ASSERT_TRUE(Push(store, 0, 1, {{0, Filled(6, 1)}}).ok());  // a late push keeps 5
  EXPECT_TRUE(Ready(store, 5));
  EXPECT_FALSE(Ready(store, 6));
}

// ---- rejected pushes ----------------------------------------------------------

TEST(SliceStoreTest, PushWithoutModelIsFailedPrecondition) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  ExpectCode(Push(store, 0, 0, {{0, {1}}}), absl::StatusCode::kFailedPrecondition, "no model");
  EXPECT_EQ(store.stats().pushes_applied, 0u);
}

TEST_F(SliceStoreRejectedPushTest, UnknownKeyIsNotFound) {
  ExpectCode(Push(store_, 0, 0, {{0, {1, 1, 1}}, {99, {1}}}), absl::StatusCode::kNotFound, "unknown slice key 99");
  ExpectUnchanged();
}

TEST_F(SliceStoreRejectedPushTest, HeaderLengthNotMatchingSliceIsInvalidArgument) {
  PushRequestMsg push{0, {SliceData{0, 4, 0}}};  // slice 0 has 3 elements
  const std::vector<float> g = {1, 1, 1, 1};
  const std::vector<absl::Span<const float>> payloads = {g};
  ExpectCode(store_.Push(0, push, payloads), absl::StatusCode::kInvalidArgument,
             "header says 4 floats, payload has 4, slice has 3");
  ExpectUnchanged();
}

TEST_F(SliceStoreRejectedPushTest, PayloadLengthNotMatchingHeaderIsInvalidArgument) {
  PushRequestMsg push{0, {SliceData{0, 3, 0}}};
  const std::vector<float> g = {1, 1};
  const std::vector<absl::Span<const float>> payloads = {g};
  ExpectCode(store_.Push(0, push, payloads), absl::StatusCode::kInvalidArgument,
             "header says 3 floats, payload has 2, slice has 3");
  ExpectUnchanged();
}

TEST_F(SliceStoreRejectedPushTest, PayloadAndHeaderAgreeingButNotSliceIsInvalidArgument) {
  ExpectCode(Push(store_, 0, 0, {{2, {1, 1, 1, 1, 1}}}), absl::StatusCode::kInvalidArgument, "slice has 4");
  ExpectCode(Push(store_, 0, 0, {{2, {}}}), absl::StatusCode::kInvalidArgument, "slice has 4");
  ExpectUnchanged();
}

TEST_F(SliceStoreRejectedPushTest, PayloadCountNotMatchingSlicesIsInvalidArgument) {
  PushRequestMsg push{0, {SliceData{0, 3, 0}, SliceData{1, 3, 0}}};
  const std::vector<float> g = {1, 1, 1};
  const std::vector<absl::Span<const float>> one = {g};
  ExpectCode(store_.Push(0, push, one), absl::StatusCode::kInvalidArgument,
             "push lists 2 slices but carries 1 payload frames");
  const std::vector<absl::Span<const float>> three = {g, g, g};
  ExpectCode(store_.Push(0, push, three), absl::StatusCode::kInvalidArgument, "carries 3 payload frames");
  ExpectUnchanged();
}

TEST_F(SliceStoreRejectedPushTest, DuplicateKeyIsInvalidArgument) {
  ExpectCode(Push(store_, 0, 0, {{1, {1, 1, 1}}, {0, {1, 1, 1}}, {1, {2, 2, 2}}}), absl::StatusCode::kInvalidArgument,
             "slice key 1 repeated in push");
  ExpectUnchanged();
}

TEST_F(SliceStoreRejectedPushTest, NaNGradientIsInvalidArgument) {
  ExpectCode(Push(store_, 0, 0, {{3, {0, 0, kNaN, 0}}}), absl::StatusCode::kInvalidArgument, "NaN");
  ExpectCode(Push(store_, 0, 0, {{3, {0, 0, 0, -kNaN}}}), absl::StatusCode::kInvalidArgument, "NaN");
  ExpectUnchanged();
}

TEST_F(SliceStoreRejectedPushTest, InfGradientIsInvalidArgument) {
  ExpectCode(Push(store_, 1, 0, {{1, {kInf, 0, 0}}}), absl::StatusCode::kInvalidArgument, "Inf");
  ExpectCode(Push(store_, 1, 0, {{1, {0, 0, -kInf}}}), absl::StatusCode::kInvalidArgument, "Inf");
  ExpectUnchanged();
}

TEST_F(SliceStoreRejectedPushTest, LargestFiniteGradientIsAccepted) {
  const float big = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(Push(store_, 0, 0, {{0, {big, -big, tiny}}}).ok());
}

TEST_F(SliceStoreRejectedPushTest, WorkerRankOutOfRangeIsInvalidArgument) {
  ExpectCode(Push(store_, 3, 0, {{0, {1, 1, 1}}}), absl::StatusCode::kInvalidArgument, "worker rank 3 out of range");
  ExpectCode(Push(store_, -1, 0, {{0, {1, 1, 1}}}), absl::StatusCode::kInvalidArgument, "worker rank -1 out of range");
  ExpectUnchanged();
}

TEST_F(SliceStoreRejectedPushTest, PushWithOneBadSliceChangesNoSlice) {
  ExpectCode(Push(store_, 0, 0, {{0, {1, 1, 1}}, {2, {1, kNaN, 1, 1}}}), absl::StatusCode::kInvalidArgument,
             "slice 2 of 'b'");
  ExpectCode(Push(store_, 0, 0, {{0, {1, 1, 1}}, {1, {1, 1}}}), absl::StatusCode::kInvalidArgument,
             "slice 1 of 'a' [3, 6)");
  ExpectCode(Push(store_, 0, 0, {{0, {1, 1, 1}}, {4, {1, 1, 1, 1}, 0}, {7, {1}}}), absl::StatusCode::kNotFound,
             "unknown slice key 7");
  ExpectUnchanged();
  // Slice 0 did not record worker 0's push: all three workers can push step 0.
  for (int w = 0; w < 3; ++w) ASSERT_TRUE(Push(store_, w, 0, {{0, {3, 6, 9}}}).ok());
  EXPECT_THAT(Values(store_, 0), ElementsAre(7, 4, 1));
}

TEST_F(SliceStoreRejectedPushTest, SyncStepErrorInSecondSliceChangesNoSlice) {
  for (int w = 0; w < 3; ++w) ASSERT_TRUE(Push(store_, w, 0, {{1, {3, 3, 3}}}).ok());
  ASSERT_EQ(store_.Version(1), 1u);
  // Slice 0 is at step 0, slice 1 at step 1: a step-0 push to both fails whole.
  ExpectCode(Push(store_, 0, 0, {{0, {3, 3, 3}}, {1, {3, 3, 3}}}), absl::StatusCode::kFailedPrecondition,
             "already applied");
  EXPECT_THAT(Values(store_, 0), ElementsAre(10, 10, 10));
  EXPECT_THAT(Values(store_, 1), ElementsAre(7, 7, 7));
  EXPECT_EQ(store_.stats().pushes_applied, 3u);
}

TEST(SliceStoreTest, NonFiniteGradientAcceptedWhenAllowed) {
  ThreadPool pool(1);
  SliceStore store(&pool, /*allow_nonfinite=*/true);
  const ModelSpec model = OneSlice(ConsistencyMode::kAsync);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 1).ok());
  ASSERT_TRUE(Push(store, 0, 0, {{0, {kNaN, kInf, -kInf, 1, 0, 0}}}).ok());
  const std::vector<float> v = Values(store, 0);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], -kInf);
  EXPECT_EQ(v[2], kInf);
  EXPECT_EQ(v[3], 9.0f);
  EXPECT_EQ(v[4], 10.0f);
  EXPECT_EQ(store.Version(0), 1u);
}

// ---- CheckPull ----------------------------------------------------------------

TEST(SliceStoreTest, CheckPullRejectsUnknownAndRepeatedKeys) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  ExpectCode(store.CheckPull(Pull(0, {0})), absl::StatusCode::kFailedPrecondition, "no model");
  const ModelSpec model = FiveSlices(ConsistencyMode::kSync);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 1).ok());
  EXPECT_TRUE(store.CheckPull(Pull(0, {4, 0, 2})).ok());
  EXPECT_TRUE(store.CheckPull(Pull(0, {})).ok());
  ExpectCode(store.CheckPull(Pull(0, {0, 5})), absl::StatusCode::kNotFound, "unknown slice key 5");
  ExpectCode(store.CheckPull(Pull(0, {2, 1, 2})), absl::StatusCode::kInvalidArgument, "slice key 2 repeated in pull");
}

// ---- parallel apply -----------------------------------------------------------

TEST(SliceStoreTest, ParallelPushMatchesSequentialExpectation) {
  constexpr int kSlices = 64, kLen = 1000;
  ThreadPool pool(4);
  SliceStore store(&pool, false);
  const ModelSpec model = Model({TensorSpec{"big", {kSlices * kLen}, Initializer::Constant(100.0f)}},
                                ConsistencyMode::kSync, 0, Sgd(), /*slice_bytes=*/kLen * 4);
  const std::vector<Slice> slices = SlicesOf(model);
  ASSERT_EQ(slices.size(), static_cast<size_t>(kSlices));
  ASSERT_TRUE(store.Create(model, slices, 2).ok());

  auto grad = [](int worker, int key, int i) { return static_cast<float>((key * 31 + i * 7 + worker * 5) % 23); };
  for (int w = 0; w < 2; ++w) {
    std::vector<Grad> grads;
    for (int k = 0; k < kSlices; ++k) {
      Grad g{static_cast<uint32_t>(k), std::vector<float>(kLen)};
      for (int i = 0; i < kLen; ++i) g.values[i] = grad(w, k, i);
      grads.push_back(std::move(g));
    }
    ASSERT_TRUE(Push(store, w, 0, grads).ok());
  }
  for (int k = 0; k < kSlices; ++k) {
    std::vector<float> expected(kLen);
    for (int i = 0; i < kLen; ++i) expected[i] = 100.0f - 0.5f * (grad(0, k, i) + grad(1, k, i));
    ASSERT_EQ(Values(store, k), expected) << "slice " << k;
    EXPECT_EQ(store.Version(k), 1u);
  }
  EXPECT_EQ(store.stats().updates_applied, static_cast<uint64_t>(kSlices));
  EXPECT_EQ(store.stats().pushes_applied, 2u);
}

TEST(SliceStoreTest, ParallelAdamEqualsSingleThreadBitForBit) {
  constexpr int kSlices = 64, kLen = 1000;
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  adam.learning_rate = 0.01f;
  adam.weight_decay = 0.001f;
  const ModelSpec model = Model({TensorSpec{"big", {kSlices, kLen}, Initializer::Normal(0.0f, 1.0f, 5)}},
                                ConsistencyMode::kAsync, 0, adam, /*slice_bytes=*/kLen * 4);
  const std::vector<Slice> slices = SlicesOf(model);
  ASSERT_EQ(slices.size(), static_cast<size_t>(kSlices));
  ThreadPool pool4(4), pool1(1);
  SliceStore parallel(&pool4, false), sequential(&pool1, false);
  ASSERT_TRUE(parallel.Create(model, slices, 1).ok());
  ASSERT_TRUE(sequential.Create(model, slices, 1).ok());
  for (int step = 0; step < 3; ++step) {
    std::vector<Grad> grads;
    for (int k = 0; k < kSlices; ++k) {
      Grad g{static_cast<uint32_t>(k), std::vector<float>(kLen)};
      for (int i = 0; i < kLen; ++i) g.values[i] = std::sin(0.01f * (k * kLen + i + step));
      grads.push_back(std::move(g));
    }
    ASSERT_TRUE(Push(parallel, 0, step, grads).ok());
    ASSERT_TRUE(Push(sequential, 0, step, grads).ok());
  }
  for (int k = 0; k < kSlices; ++k) {
    ASSERT_EQ(Values(parallel, k), Values(sequential, k)) << "slice " << k;
    EXPECT_NE(Values(parallel, k), Initial(model, slices[k]));
  }
}

// ---- stateful optimizers through the store --------------------------------------

TEST(SliceStoreTest, MomentumMatchesHandComputedReference) {
  OptimizerConfig opt;
  opt.kind = OptimizerKind::kMomentum;
  opt.learning_rate = 0.1f;
  opt.momentum = 0.9f;
  for (bool nesterov : {false, true}) {
    opt.nesterov = nesterov;
    ThreadPool pool(1);
    SliceStore store(&pool, false);
    const ModelSpec model = Model({TensorSpec{"w", {3}, Initializer::Constant(1.0f)}}, ConsistencyMode::kAsync, 0, opt);
    ASSERT_TRUE(store.Create(model, SlicesOf(model), 1).ok());
    const std::vector<double> g1 = {1.0, -2.0, 0.5}, g2 = {0.25, 3.0, -1.0};
    ASSERT_TRUE(Push(store, 0, 0, {{0, {1.0f, -2.0f, 0.5f}}}).ok());
    ASSERT_TRUE(Push(store, 0, 1, {{0, {0.25f, 3.0f, -1.0f}}}).ok());
    const std::vector<float> v = Values(store, 0);
    for (int i = 0; i < 3; ++i) {
      double w = 1.0, vel = 0.0;
      for (double g : {g1[i], g2[i]}) {
        vel = 0.9 * vel + g;
        w -= 0.1 * (nesterov ? g + 0.9 * vel : vel);
      }
      EXPECT_NEAR(v[i], w, 1e-6) << "nesterov " << nesterov << " element " << i;
    }
    EXPECT_EQ(store.Version(0), 2u);
  }
}

TEST(SliceStoreTest, AdamMatchesHandComputedReference) {
  OptimizerConfig opt;
  opt.kind = OptimizerKind::kAdam;
  opt.learning_rate = 0.01f;
  opt.beta1 = 0.9f;
  opt.beta2 = 0.999f;
  opt.epsilon = 1e-8f;
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = Model({TensorSpec{"w", {3}, Initializer::Constant(0.5f)}}, ConsistencyMode::kAsync, 0, opt);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 2).ok());
  const std::vector<double> g1 = {1.0, -2.0, 0.5}, g2 = {0.25, 3.0, -1.0};
  ASSERT_TRUE(Push(store, 0, 0, {{0, {1.0f, -2.0f, 0.5f}}}).ok());
  // After one step Adam moves each weight by lr against the gradient's sign.
  EXPECT_THAT(Values(store, 0), ElementsAre(::testing::FloatNear(0.49f, 1e-6f), ::testing::FloatNear(0.51f, 1e-6f),
                                            ::testing::FloatNear(0.49f, 1e-6f)));
  ASSERT_TRUE(Push(store, 1, 0, {{0, {0.25f, 3.0f, -1.0f}}}).ok());
  const std::vector<float> v = Values(store, 0);
  const double b1 = double{0.9f}, b2 = double{0.999f};
  for (int i = 0; i < 3; ++i) {
    double w = 0.5, m = 0, s = 0;
    int t = 0;
    for (double g : {g1[i], g2[i]}) {
      ++t;
      m = b1 * m + (1 - b1) * g;
      s = b2 * s + (1 - b2) * g * g;
      const double mhat = m / (1 - std::pow(b1, t));
      const double shat = s / (1 - std::pow(b2, t));
      w -= double{0.01f} * mhat / (std::sqrt(shat) + 1e-8);
    }
    EXPECT_NEAR(v[i], w, 2e-6) << "element " << i;
  }
}

TEST(SliceStoreTest, SgdWeightDecayAddsToGradient) {
  OptimizerConfig opt = Sgd(0.5f);
  opt.weight_decay = 0.25f;
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kAsync, 0, opt);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 1).ok());
  // w = 10 - 0.5 * (g + 0.25 * 10) = 8.75 - 0.5 g.
  ASSERT_TRUE(Push(store, 0, 0, {{0, {0, 1, 2, 3, 4, -2}}}).ok());
  EXPECT_THAT(Values(store, 0), ElementsAre(8.75f, 8.25f, 7.75f, 7.25f, 6.75f, 9.75f));
}

// ---- workers leaving and joining --------------------------------------------------

TEST_F(SliceStoreSyncTest, InactiveWorkerIsNotWaitedForAndStepUsesMeanOfArrived) {
  EXPECT_FALSE(store_.SetWorkerActive(2, false));  // nothing pending: no step completes
  EXPECT_FALSE(store_.IsWorkerActive(2));
  ASSERT_TRUE(Push(store_, 0, 0, {{0, {1, 2, 3, 4, 5, 6}}}).ok());
  EXPECT_EQ(store_.Version(0), 0u);
  EXPECT_THAT(store_.DescribeWait(Pull(1, {0})), HasSubstr("workers [1]"));
  ASSERT_TRUE(Push(store_, 1, 0, {{0, {3, 4, 5, 6, 7, 8}}}).ok());
  // Mean of the two pushes that arrived: {2, 3, 4, 5, 6, 7}, lr 1.
  EXPECT_THAT(Values(store_, 0), ElementsAre(8, 7, 6, 5, 4, 3));
  EXPECT_EQ(store_.Version(0), 1u);
  EXPECT_TRUE(Ready(store_, 1));
  EXPECT_EQ(store_.stats().updates_applied, 1u);
}

TEST_F(SliceStoreSyncTest, DeactivationCompletesAPendingStep) {
  ASSERT_TRUE(Push(store_, 0, 0, {{0, Filled(6, 2)}}).ok());
  ASSERT_TRUE(Push(store_, 2, 0, {{0, Filled(6, 4)}}).ok());
  EXPECT_FALSE(Ready(store_, 1));
  EXPECT_TRUE(store_.SetWorkerActive(1, false));
  EXPECT_THAT(Values(store_, 0), ElementsAre(7, 7, 7, 7, 7, 7));  // 10 - mean(2, 4)
  EXPECT_EQ(store_.Version(0), 1u);
  EXPECT_TRUE(Ready(store_, 1));
  EXPECT_EQ(store_.stats().updates_applied, 1u);
  // Setting the state it already has changes nothing.
  EXPECT_FALSE(store_.SetWorkerActive(1, false));
  EXPECT_FALSE(store_.SetWorkerActive(0, true));
  EXPECT_EQ(store_.Version(0), 1u);
}

TEST_F(SliceStoreSyncTest, PushOfAWorkerThatLeftAfterPushingStillCounts) {
  ASSERT_TRUE(Push(store_, 2, 0, {{0, Filled(6, 9)}}).ok());
  EXPECT_FALSE(store_.SetWorkerActive(2, false));  // 0 and 1 have not pushed
  ASSERT_TRUE(Push(store_, 0, 0, {{0, Filled(6, 0)}}).ok());
  ASSERT_TRUE(Push(store_, 1, 0, {{0, Filled(6, 3)}}).ok());
  EXPECT_THAT(Values(store_, 0), ElementsAre(6, 6, 6, 6, 6, 6));  // 10 - mean(9, 0, 3)
}

TEST_F(SliceStoreSyncTest, PushFromInactiveWorkerIsFailedPrecondition) {
  ASSERT_FALSE(store_.SetWorkerActive(1, false));
  ExpectCode(Push(store_, 1, 0, {{0, Filled(6, 1)}}), absl::StatusCode::kFailedPrecondition,
             "worker 1 has been removed from the job");
  EXPECT_EQ(store_.stats().pushes_applied, 0u);
  // A bad rank is still a bad rank.
  ExpectCode(Push(store_, 3, 0, {{0, Filled(6, 1)}}), absl::StatusCode::kInvalidArgument, "worker rank 3 out of range");
}

TEST_F(SliceStoreSyncTest, NoActiveWorkerCompletesNothing) {
  ASSERT_TRUE(Push(store_, 0, 0, {{0, Filled(6, 6)}}).ok());
  EXPECT_FALSE(store_.SetWorkerActive(0, false));  // 1 and 2 have not pushed
  EXPECT_FALSE(store_.SetWorkerActive(1, false));
  EXPECT_FALSE(store_.SetWorkerActive(2, false));
  EXPECT_EQ(store_.Version(0), 0u);
  EXPECT_THAT(Values(store_, 0), ElementsAre(10, 10, 10, 10, 10, 10));
  EXPECT_THAT(store_.DescribeWait(Pull(1, {0})), HasSubstr("workers [] (no worker is active)"));
  // Worker 1 comes back, counted from step 1: step 0 waits for nobody active
  // any more and completes with the one push that arrived.
  EXPECT_TRUE(store_.SetWorkerActive(1, true));
  EXPECT_THAT(Values(store_, 0), ElementsAre(4, 4, 4, 4, 4, 4));
  EXPECT_EQ(store_.Version(0), 1u);
  EXPECT_EQ(store_.WorkerClock(1), 1);
}

TEST_F(SliceStoreSyncTest, RejoiningWorkerIsCountedFromTheNextStep) {
  ASSERT_FALSE(store_.SetWorkerActive(2, false));
  ASSERT_TRUE(Push(store_, 0, 0, {{0, Filled(6, 1)}}).ok());
  EXPECT_FALSE(store_.SetWorkerActive(2, true));  // step 0 still waits for worker 1
  EXPECT_TRUE(store_.IsWorkerActive(2));
  EXPECT_EQ(store_.WorkerClock(2), 1);  // where it resumes
  ExpectCode(Push(store_, 2, 0, {{0, Filled(6, 100)}}), absl::StatusCode::kFailedPrecondition,
             "worker 2 re-joined the job and is counted from step 1");
  EXPECT_THAT(store_.DescribeWait(Pull(1, {0})), HasSubstr("workers [1]"));
  ASSERT_TRUE(Push(store_, 1, 0, {{0, Filled(6, 3)}}).ok());
  EXPECT_THAT(Values(store_, 0), ElementsAre(8, 8, 8, 8, 8, 8));  // 10 - mean(1, 3)
  // Step 1 waits for all three.
  ASSERT_TRUE(Push(store_, 0, 1, {{0, Filled(6, 1)}}).ok());
  ASSERT_TRUE(Push(store_, 1, 1, {{0, Filled(6, 2)}}).ok());
  EXPECT_EQ(store_.Version(0), 1u);
  EXPECT_THAT(store_.DescribeWait(Pull(2, {0})), HasSubstr("workers [2]"));
  ASSERT_TRUE(Push(store_, 2, 1, {{0, Filled(6, 6)}}).ok());
  EXPECT_THAT(Values(store_, 0), ElementsAre(5, 5, 5, 5, 5, 5));  // 8 - mean(1, 2, 6)
  EXPECT_EQ(store_.Version(0), 2u);
  EXPECT_EQ(store_.WorkerClock(2), 2);
}

TEST_F(SliceStoreSyncTest, WorkerWhosePushIsInRejoinsAtTheSameStep) {
  ASSERT_TRUE(Push(store_, 2, 0, {{0, Filled(6, 3)}}).ok());
  ASSERT_FALSE(store_.SetWorkerActive(2, false));
  ASSERT_FALSE(store_.SetWorkerActive(2, true));
  ExpectCode(Push(store_, 2, 0, {{0, Filled(6, 3)}}), absl::StatusCode::kAlreadyExists,
             "worker 2 already pushed step 0");
  ASSERT_TRUE(Push(store_, 0, 0, {{0, Filled(6, 3)}}).ok());
  ASSERT_TRUE(Push(store_, 1, 0, {{0, Filled(6, 3)}}).ok());
  EXPECT_THAT(Values(store_, 0), ElementsAre(7, 7, 7, 7, 7, 7));
  EXPECT_TRUE(Push(store_, 2, 1, {{0, Filled(6, 3)}}).ok());
}

// A one-worker job whose worker restarts: the step it never pushed is skipped
// (values unchanged, no optimizer step) and it carries on from the next one.
TEST(SliceStoreTest, SyncWorkerRejoiningAloneSkipsTheStepNobodyPushed) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kSync);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 1).ok());
  ASSERT_TRUE(Push(store, 0, 0, {{0, Filled(6, 1)}}).ok());
  ASSERT_EQ(store.Version(0), 1u);
  EXPECT_FALSE(store.SetWorkerActive(0, false));
  EXPECT_TRUE(store.SetWorkerActive(0, true));
  EXPECT_EQ(store.Version(0), 2u);
  EXPECT_THAT(Values(store, 0), ElementsAre(9, 9, 9, 9, 9, 9));
  EXPECT_EQ(store.stats().updates_applied, 1u);
  EXPECT_EQ(store.WorkerClock(0), 2);
  ASSERT_TRUE(Push(store, 0, 2, {{0, Filled(6, 1)}}).ok());
  EXPECT_THAT(Values(store, 0), ElementsAre(8, 8, 8, 8, 8, 8));
}

TEST(SliceStoreTest, SspDoesNotWaitForInactiveWorker) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kSsp, /*staleness=*/0);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 3).ok());
  ASSERT_TRUE(Push(store, 0, 0, {{0, Filled(6, 1)}}).ok());
  ASSERT_TRUE(Push(store, 1, 0, {{0, Filled(6, 1)}}).ok());
  EXPECT_FALSE(Ready(store, 1));
  EXPECT_THAT(store.DescribeWait(Pull(1, {0})), HasSubstr("workers behind: [2]"));
  EXPECT_TRUE(store.SetWorkerActive(2, false));  // parked pulls may now be ready
  EXPECT_TRUE(Ready(store, 1));
  EXPECT_FALSE(Ready(store, 2));
  EXPECT_THAT(store.DescribeWait(Pull(2, {0})), HasSubstr("workers behind: [0,1]"));
  ExpectCode(Push(store, 2, 0, {{0, Filled(6, 1)}}), absl::StatusCode::kFailedPrecondition,
             "worker 2 has been removed from the job");
  // Back again: raised to the slowest other worker's clock, it holds no one back.
  ASSERT_TRUE(Push(store, 0, 1, {{0, Filled(6, 1)}}).ok());  // clocks {2, 1, -}
  EXPECT_FALSE(store.SetWorkerActive(2, true));
  EXPECT_EQ(store.WorkerClock(2), 1);
  EXPECT_TRUE(Ready(store, 1));
  EXPECT_FALSE(Ready(store, 2));
  EXPECT_THAT(store.DescribeWait(Pull(2, {0})), HasSubstr("workers behind: [1,2]"));
  ASSERT_TRUE(Push(store, 2, 1, {{0, Filled(6, 1)}}).ok());
  ASSERT_TRUE(Push(store, 1, 1, {{0, Filled(6, 1)}}).ok());
  EXPECT_TRUE(Ready(store, 2));
  EXPECT_THAT(Values(store, 0), ElementsAre(5, 5, 5, 5, 5, 5));
}

TEST(SliceStoreTest, AsyncRefusesInactiveWorkerOnly) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kAsync);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 2).ok());
  EXPECT_FALSE(store.SetWorkerActive(0, false));
  ExpectCode(Push(store, 0, 0, {{0, Filled(6, 1)}}), absl::StatusCode::kFailedPrecondition,
             "worker 0 has been removed");
  ASSERT_TRUE(Push(store, 1, 0, {{0, Filled(6, 1)}}).ok());
  EXPECT_FALSE(store.SetWorkerActive(0, true));
  ASSERT_TRUE(Push(store, 0, 0, {{0, Filled(6, 1)}}).ok());
  EXPECT_THAT(Values(store, 0), ElementsAre(8, 8, 8, 8, 8, 8));
}

TEST(SliceStoreTest, WorkerClockAndVersionsSpanTheSlices) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  EXPECT_EQ(store.MinVersion(), 0u);
  EXPECT_EQ(store.MaxVersion(), 0u);
  const ModelSpec model = FiveSlices(ConsistencyMode::kAsync);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 2).ok());
  EXPECT_EQ(store.WorkerClock(0), 0);
  ASSERT_TRUE(Push(store, 0, 3, {{0, {1, 1, 1}}, {1, {1, 1, 1}}}).ok());
  EXPECT_EQ(store.WorkerClock(0), 0);  // slices 2, 3, 4 have nothing from it yet
  EXPECT_EQ(store.MinVersion(), 0u);
  EXPECT_EQ(store.MaxVersion(), 1u);
  std::vector<Grad> all;
  for (uint32_t k = 0; k < 5; ++k) all.push_back({k, Filled(k < 2 ? 3 : 4, 1)});
  ASSERT_TRUE(Push(store, 0, 4, all).ok());
  ASSERT_TRUE(Push(store, 0, 5, {{2, Filled(4, 1)}}).ok());
  ASSERT_TRUE(Push(store, 0, 6, {{2, Filled(4, 1)}}).ok());
  EXPECT_EQ(store.WorkerClock(0), 5);  // slices 3 and 4 last got clock 4
  EXPECT_EQ(store.WorkerClock(1), 0);
  EXPECT_EQ(store.MinVersion(), 1u);
  EXPECT_EQ(store.MaxVersion(), 3u);
}

// ---- a rank's steps applied under its previous node are skipped ----------------

TEST(SliceStoreTest, AsyncSkipsStepsTheStateHoldsPerSliceAfterANewNode) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = FiveSlices(ConsistencyMode::kAsync);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 2).ok());
  // The old node got step 0 to slices 0 and 1, step 1 to slice 0 only: it
  // died half way through sending step 1.
  ASSERT_TRUE(Push(store, 0, 0, {{0, {1, 1, 1}}, {1, {1, 1, 1}}}).ok());
  ASSERT_TRUE(Push(store, 0, 1, {{0, {1, 1, 1}}}).ok());
  store.SkipStepsAlreadyApplied(0);
  // Its successor resumes at the minimum clock (1) and sends step 1 whole.
  ASSERT_TRUE(Push(store, 0, 1, {{0, {5, 5, 5}}, {1, {2, 2, 2}}}).ok());
  EXPECT_THAT(Values(store, 0), ElementsAre(8, 8, 8));  // 10 - 1 - 1: the re-sent step 1 skipped here
  EXPECT_THAT(Values(store, 1), ElementsAre(7, 7, 7));  // 10 - 1 - 2
  EXPECT_EQ(store.stats().slices_skipped, 1u);
  // A push of nothing but applied steps changes nothing and is no error.
  ASSERT_TRUE(Push(store, 0, 0, {{0, {9, 9, 9}}, {1, {9, 9, 9}}}).ok());
  EXPECT_THAT(Values(store, 0), ElementsAre(8, 8, 8));
  EXPECT_THAT(Values(store, 1), ElementsAre(7, 7, 7));
  EXPECT_EQ(store.stats().slices_skipped, 3u);
  EXPECT_EQ(store.stats().pushes_applied, 3u);
  // From step 2 on, everything applies; the other worker was never affected.
  ASSERT_TRUE(Push(store, 0, 2, {{0, {1, 1, 1}}, {1, {1, 1, 1}}}).ok());
  ASSERT_TRUE(Push(store, 1, 0, {{0, {1, 1, 1}}}).ok());
  EXPECT_THAT(Values(store, 0), ElementsAre(6, 6, 6));
  EXPECT_THAT(Values(store, 1), ElementsAre(6, 6, 6));
}

TEST_F(SliceStoreSyncTest, NewNodesSkipThePushTheStepSumHoldsAndCompleteTheStep) {
  // Before the restart: workers 0 and 2 pushed step 0; the checkpoint holds
  // their sum. Every rank is a new node now (a whole job restarted).
  ASSERT_TRUE(Push(store_, 0, 0, {{0, Filled(6, 1)}}).ok());
  ASSERT_TRUE(Push(store_, 2, 0, {{0, Filled(6, 2)}}).ok());
  for (int w = 0; w < 3; ++w) store_.SkipStepsAlreadyApplied(w);
  EXPECT_EQ(store_.WorkerClock(0), 1);
  EXPECT_EQ(store_.WorkerClock(1), 0);
  // Worker 0 resumes from an earlier clock elsewhere: skipped, not "already pushed".
  ASSERT_TRUE(Push(store_, 0, 0, {{0, Filled(6, 50)}}).ok());
  EXPECT_EQ(store_.Version(0), 0u);
  ASSERT_TRUE(Push(store_, 1, 0, {{0, Filled(6, 3)}}).ok());
  EXPECT_EQ(store_.Version(0), 1u);
  EXPECT_THAT(Values(store_, 0), ElementsAre(8, 8, 8, 8, 8, 8));  // 10 - mean(1, 2, 3)
  EXPECT_EQ(store_.stats().slices_skipped, 1u);
  ExpectCode(Push(store_, 1, 0, {{0, Filled(6, 3)}}), absl::StatusCode::kFailedPrecondition, "step already applied");
}

TEST(SliceStoreTest, AsyncRejoiningWorkerResumesWhereItsPushesEnded) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kAsync);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 2).ok());
  ASSERT_TRUE(Push(store, 0, 0, {{0, Filled(6, 1)}}).ok());
  for (int c = 0; c < 5; ++c) ASSERT_TRUE(Push(store, 1, c, {{0, Filled(6, 1)}}).ok());
  EXPECT_FALSE(store.SetWorkerActive(0, false));
  EXPECT_FALSE(store.SetWorkerActive(0, true));
  EXPECT_EQ(store.WorkerClock(0), 1);  // not raised: no step of its is skipped
}

TEST(SliceStoreTest, WorkerClockOfAServerWithNoSlicesIsZero) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = OneSlice(ConsistencyMode::kSsp, 1);
  ASSERT_TRUE(store.Create(model, {}, 2).ok());
  EXPECT_EQ(store.WorkerClock(1), 0);
  EXPECT_EQ(store.MinVersion(), 0u);
}

}  // namespace
}  // namespace ps
