// SliceStore forwarding sync steps as their sums (server/store/step_forwarding.h):
// a primary records each step as it completes (by the last push, by the
// one-push path, by a worker leaving), a backup completes it from that sum
// to the same bytes, and refuses what does not fit; which slices sum their
// steps; the wire form of a forward and its refusals.
#include <cstring>
#include <limits>
#include <vector>

#include "server/store/slice_store_testing.h"
#include "server/store/step_forwarding.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using testing::ExpectCode;
using testing::Model;
using testing::OneSlice;
using testing::Push;
using testing::SlicesOf;
using testing::Values;

OptimizerConfig Adam() {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.learning_rate = 0.1f;
  return c;
}

class SliceStoreStepsTest : public ::testing::Test {
 protected:
  void Make(const ModelSpec& model, int workers) {
    model_ = model;
    ASSERT_TRUE(primary_.Create(model_, SlicesOf(model_), workers).ok());
    ASSERT_TRUE(backup_.Create(model_, SlicesOf(model_), workers).ok());
    primary_.SetStepForwarding([](uint32_t) { return true; }, [](uint32_t) { return false; });
    backup_.SetStepForwarding([](uint32_t) { return true; }, [](uint32_t) { return true; });
  }
  // Applies each step the primary recorded to the backup.
  // The steps the primary completed, their optimizer run (after the sums
  // were taken, as a server does once it sent them).
  std::vector<SliceStore::CompletedStep> Take() {
    std::vector<SliceStore::CompletedStep> steps = primary_.TakeCompletedSteps();
    primary_.CompleteDueSteps();
    return steps;
  }
  void Replay() {
    for (SliceStore::CompletedStep& step : Take()) {
      absl::StatusOr<bool> applied = backup_.ApplyStep(std::move(step));
      ASSERT_TRUE(applied.ok()) << applied.status();
      EXPECT_TRUE(*applied);
    }
  }
  void ExpectSameBytes(uint32_t key) {
    const SliceState& p = primary_.State(key);
    const SliceState& b = backup_.State(key);
    EXPECT_EQ(p.version, b.version);
    EXPECT_EQ(p.optimizer_steps, b.optimizer_steps);
    ASSERT_EQ(p.values.size(), b.values.size());
    EXPECT_EQ(std::memcmp(p.values.data(), b.values.data(), p.values.size() * sizeof(float)), 0);
    ASSERT_EQ(p.optimizer_state.size(), b.optimizer_state.size());
    EXPECT_EQ(std::memcmp(p.optimizer_state.data(), b.optimizer_state.data(), p.optimizer_state.size() * 4), 0);
    EXPECT_EQ(p.worker_clock, b.worker_clock);
  }
  ThreadPool pool_{2};
  SliceStore primary_{&pool_, false};
  SliceStore backup_{&pool_, false};
  ModelSpec model_;
};

TEST_F(SliceStoreStepsTest, AStepIsRecordedOnceWithItsSumAndTheBackupReachesTheSameBytes) {
  Make(OneSlice(ConsistencyMode::kSync, 0, Adam()), 3);
  for (int step = 0; step < 4; ++step) {
    ASSERT_TRUE(Push(primary_, 2, step, {{0, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}}}).ok());
    ASSERT_TRUE(Push(primary_, 0, step, {{0, {1.5f, -2, 3, -4, 5, -6.25f}}}).ok());
    EXPECT_TRUE(primary_.TakeCompletedSteps().empty());  // the step waits for worker 1
    ASSERT_TRUE(Push(primary_, 1, step, {{0, {1e-3f, 7, 0, 1, 2, 3}}}).ok());
    // The step has every push; its optimizer waits until its sum was taken.
    EXPECT_EQ(primary_.Version(0), static_cast<uint64_t>(step));
    std::vector<SliceStore::CompletedStep> steps = Take();
    EXPECT_EQ(primary_.Version(0), static_cast<uint64_t>(step) + 1);
    ASSERT_EQ(steps.size(), 1u);
    EXPECT_EQ(steps[0].key, 0u);
    EXPECT_EQ(steps[0].step, static_cast<uint64_t>(step));
    EXPECT_THAT(steps[0].workers, ElementsAre(0, 1, 2));
    // The sum in arrival order, as the primary added it: ((w2 + w0) + w1).
    EXPECT_EQ(steps[0].sum[0], (0.1f + 1.5f) + 1e-3f);
    EXPECT_EQ(steps[0].sum[5], (0.6f + -6.25f) + 3.0f);
    absl::StatusOr<bool> applied = backup_.ApplyStep(std::move(steps[0]));
    ASSERT_TRUE(applied.ok()) << applied.status();
    EXPECT_TRUE(*applied);
    ExpectSameBytes(0);
  }
  EXPECT_EQ(backup_.Version(0), 4u);
  EXPECT_EQ(backup_.WorkerClock(1), 4);
}

TEST_F(SliceStoreStepsTest, TheOnePushPathRecordsThePushAsTheSum) {
  Make(OneSlice(ConsistencyMode::kSync, 0, Adam()), 2);
  ASSERT_FALSE(primary_.SetWorkerActive(1, false));  // the step waits for worker 0 alone
  ASSERT_TRUE(Push(primary_, 0, 0, {{0, {1, 2, 3, 4, 5, 6}}}).ok());
  std::vector<SliceStore::CompletedStep> steps = Take();
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_THAT(steps[0].workers, ElementsAre(0));
  EXPECT_THAT(steps[0].sum, ElementsAre(1, 2, 3, 4, 5, 6));
  ASSERT_TRUE(backup_.ApplyStep(std::move(steps[0])).ok());
  ExpectSameBytes(0);
}

TEST_F(SliceStoreStepsTest, AWorkerLeavingCompletesTheStepOnThePrimaryOnlyAndTheBackupTakesItsSum) {
  Make(OneSlice(ConsistencyMode::kSync), 2);
  ASSERT_TRUE(Push(primary_, 0, 0, {{0, {1, 1, 1, 1, 1, 1}}}).ok());
  // Worker 1 dies: the primary completes step 0 with worker 0's push; the
  // backup, which follows, does not complete it on its own.
  EXPECT_TRUE(primary_.SetWorkerActive(1, false));
  EXPECT_FALSE(backup_.SetWorkerActive(1, false));
  EXPECT_EQ(backup_.Version(0), 0u);
  std::vector<SliceStore::CompletedStep> steps = primary_.TakeCompletedSteps();
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_THAT(steps[0].workers, ElementsAre(0));
  ASSERT_TRUE(backup_.ApplyStep(std::move(steps[0])).ok());
  EXPECT_THAT(Values(backup_, 0), ElementsAre(9, 9, 9, 9, 9, 9));
  ExpectSameBytes(0);
}

TEST_F(SliceStoreStepsTest, AnEmptyStepTravelsWithoutASum) {
  Make(OneSlice(ConsistencyMode::kSync), 2);
  // Worker 1 leaves and comes back (counted from step 1); worker 0 dies
  // before pushing step 0: nobody active is counted at step 0, which
  // completes empty.
  ASSERT_FALSE(primary_.SetWorkerActive(1, false));
  ASSERT_FALSE(primary_.SetWorkerActive(1, true));
  EXPECT_TRUE(primary_.SetWorkerActive(0, false));
  std::vector<SliceStore::CompletedStep> steps = primary_.TakeCompletedSteps();
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_TRUE(steps[0].workers.empty());
  EXPECT_TRUE(steps[0].sum.empty());
  ASSERT_TRUE(backup_.ApplyStep(std::move(steps[0])).ok());
  EXPECT_EQ(backup_.Version(0), 1u);
  EXPECT_THAT(Values(backup_, 0), ElementsAre(10, 10, 10, 10, 10, 10));
  EXPECT_EQ(backup_.State(0).optimizer_steps, 0u);
}

TEST_F(SliceStoreStepsTest, ABackupRefusesStepsThatDoNotFitAndChangesNothing) {
  Make(OneSlice(ConsistencyMode::kSync), 2);
  const std::vector<float> sum(6, 1.0f);
  ExpectCode(backup_.ApplyStep({0, 0, {0, 1}, std::vector<float>(5, 1.0f)}).status(),
             absl::StatusCode::kInvalidArgument, "a sum of 5 values from 2 pushes; the slice has 6");
  ExpectCode(backup_.ApplyStep({0, 0, {}, sum}).status(), absl::StatusCode::kInvalidArgument, "from 0 pushes");
  ExpectCode(backup_.ApplyStep({0, 0, {0, 1}, {}}).status(), absl::StatusCode::kInvalidArgument, "a sum of 0 values");
  ExpectCode(backup_.ApplyStep({0, 0, {1, 0}, sum}).status(), absl::StatusCode::kInvalidArgument,
             "ascending ranks below 2, not 0 at 1");
  ExpectCode(backup_.ApplyStep({0, 0, {0, 2}, sum}).status(), absl::StatusCode::kInvalidArgument, "not 2 at 1");
  ExpectCode(backup_.ApplyStep({0, 0, {-1}, sum}).status(), absl::StatusCode::kInvalidArgument, "not -1 at 0");
  std::vector<float> nan = sum;
  nan[3] = std::numeric_limits<float>::quiet_NaN();
  ExpectCode(backup_.ApplyStep({0, 0, {0}, nan}).status(), absl::StatusCode::kInvalidArgument, "NaN or Inf");
  ExpectCode(backup_.ApplyStep({0, 1, {0}, sum}).status(), absl::StatusCode::kFailedPrecondition,
             "the slice is at step 0");
  ExpectCode(backup_.ApplyStep({7, 0, {0}, sum}).status(), absl::StatusCode::kNotFound, "no slice with key 7");
  EXPECT_EQ(backup_.Version(0), 0u);
  EXPECT_THAT(Values(backup_, 0), ElementsAre(10, 10, 10, 10, 10, 10));
  // Step 0 applies; sent again (a new primary re-sends its last step), it is held already.
  absl::StatusOr<bool> first = backup_.ApplyStep({0, 0, {0, 1}, sum});
  ASSERT_TRUE(first.ok() && *first);
  EXPECT_THAT(Values(backup_, 0), ElementsAre(9.5, 9.5, 9.5, 9.5, 9.5, 9.5));  // the mean of 2, lr 1
  absl::StatusOr<bool> again = backup_.ApplyStep({0, 0, {0, 1}, sum});
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  EXPECT_EQ(backup_.Version(0), 1u);
  EXPECT_THAT(Values(backup_, 0), ElementsAre(9.5, 9.5, 9.5, 9.5, 9.5, 9.5));
}

// K = 3 after a failover: the step a backup holds, summed again by the new
// primary in another order (a last bit apart) or from other workers, is told
// apart from the same step sent again; nothing is said of a step the
// slice does not keep the sum of (not its last, or none yet).
TEST_F(SliceStoreStepsTest, AStepHeldWithAnotherSumIsToldApart) {
  Make(OneSlice(ConsistencyMode::kSync), 2);
  const std::vector<float> sum = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  std::vector<float> other = sum;
  other[4] = std::nextafter(other[4], 1.0f);  // the same pushes added in another order
  const std::vector<int32_t> both = {0, 1};
  EXPECT_FALSE(backup_.HoldsStepWithAnotherSum({0, 0, both, other}, both));  // step 0 not held yet
  ASSERT_TRUE(backup_.ApplyStep({0, 0, both, sum}).ok());
  EXPECT_FALSE(backup_.HoldsStepWithAnotherSum({0, 0, both, sum}, both));
  EXPECT_TRUE(backup_.HoldsStepWithAnotherSum({0, 0, both, other}, both));
  EXPECT_TRUE(backup_.HoldsStepWithAnotherSum({0, 0, {0}, sum}, both));
  EXPECT_FALSE(backup_.HoldsStepWithAnotherSum({0, 0, {}, {}}, both));  // an empty step: no sum to tell
  ASSERT_TRUE(backup_.ApplyStep({0, 1, both, other}).ok());
  EXPECT_FALSE(backup_.HoldsStepWithAnotherSum({0, 0, both, other}, both));  // not its last step any more
  EXPECT_TRUE(backup_.HoldsStepWithAnotherSum({0, 1, both, sum}, both));
}

// One forward's steps of several slices apply all or none: a bad later
// step leaves the earlier ones unapplied; a slice's second step is checked
// against the version its first reaches.
TEST_F(SliceStoreStepsTest, AForwardsStepsApplyAllOrNone) {
  Make(Model({TensorSpec{"a", {6}, Initializer::Constant(10.0f)}, TensorSpec{"b", {6}, Initializer::Constant(10.0f)}},
             ConsistencyMode::kSync),
       2);
  const std::vector<float> sum(6, 1.0f);
  ExpectCode(backup_.ApplySteps({{0, 0, {0, 1}, sum}, {1, 0, {0, 1}, std::vector<float>(5, 1.0f)}}).status(),
             absl::StatusCode::kInvalidArgument, "a sum of 5 values");
  ExpectCode(backup_.ApplySteps({{0, 0, {0, 1}, sum}, {0, 2, {0, 1}, sum}}).status(),
             absl::StatusCode::kFailedPrecondition, "the slice is at step 1");
  EXPECT_EQ(backup_.Version(0), 0u);
  EXPECT_THAT(Values(backup_, 0), ElementsAre(10, 10, 10, 10, 10, 10));
  absl::StatusOr<std::vector<bool>> applied =
      backup_.ApplySteps({{0, 0, {0, 1}, sum}, {0, 1, {0, 1}, sum}, {1, 0, {0}, sum}, {0, 1, {0, 1}, sum}});
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_THAT(*applied, ElementsAre(true, true, true, false));  // the last: held already
  EXPECT_EQ(backup_.Version(0), 2u);
  EXPECT_THAT(Values(backup_, 0), ElementsAre(9, 9, 9, 9, 9, 9));  // two means of 2, lr 1
  EXPECT_THAT(Values(backup_, 1), ElementsAre(9, 9, 9, 9, 9, 9));  // one push's
}

TEST_F(SliceStoreStepsTest, AStepReplacesACopysPartialStep) {
  Make(OneSlice(ConsistencyMode::kSync), 3);
  // The backup's copy was taken while worker 0's push was in the step; the
  // primary's sum holds every push of it.
  ASSERT_TRUE(Push(backup_, 0, 0, {{0, {3, 3, 3, 3, 3, 3}}}).ok());
  for (int w = 0; w < 3; ++w) ASSERT_TRUE(Push(primary_, w, 0, {{0, {3, 3, 3, 3, 3, 3}}}).ok());
  Replay();
  EXPECT_THAT(Values(backup_, 0), ElementsAre(7, 7, 7, 7, 7, 7));
  ExpectSameBytes(0);
}

TEST(SliceStoreForwardsStepsTest, DenseSyncSlicesWhosePushesAreNotSmallerThanTheSum) {
  ThreadPool pool(1);
  const auto forwards = [&](ConsistencyMode mode, const char* compression, int workers, uint64_t min_bytes = 0) {
    ModelSpec model = Model({TensorSpec{"w", {6}, Initializer::Constant(1.0f)}}, mode);
    model.compression = *CompressionSpec::Parse(compression);
    model.compress_min_bytes = min_bytes;
    model.tables = {TableSpec{"emb", 2, Initializer::Constant(1.0f)}};
    SliceStore store(&pool, false);
    EXPECT_TRUE(store.Create(model, SlicesOf(model), workers).ok());
    EXPECT_FALSE(store.ForwardsSteps(1));   // the table's shard
    EXPECT_FALSE(store.ForwardsSteps(99));  // no such slice
    return store.ForwardsSteps(0);
  };
  EXPECT_TRUE(forwards(ConsistencyMode::kSync, "none", 2));
  EXPECT_FALSE(forwards(ConsistencyMode::kSync, "none", 1));  // the sum is the push
  EXPECT_FALSE(forwards(ConsistencyMode::kAsync, "none", 3));
  EXPECT_FALSE(forwards(ConsistencyMode::kSsp, "none", 3));
  EXPECT_FALSE(forwards(ConsistencyMode::kSync, "bf16", 1));
  EXPECT_TRUE(forwards(ConsistencyMode::kSync, "bf16", 2));
  EXPECT_FALSE(forwards(ConsistencyMode::kSync, "topk:0.01", 8));
  EXPECT_TRUE(forwards(ConsistencyMode::kSync, "topk:0.25", 2));
  EXPECT_FALSE(forwards(ConsistencyMode::kSync, "onebit", 16));
  // A tensor under the compression threshold travels uncompressed: as sums.
  EXPECT_TRUE(forwards(ConsistencyMode::kSync, "onebit", 16, 1024));
}

TEST(StepForwardingTest, StepsRoundTripAndFramesThatDoNotMatchAreRefused) {
  PushRequestMsg push;
  push.step_sum = true;
  std::vector<zmq::message_t> frames;
  AppendStep({3, 41, {0, 2}, {1.5f, -2.0f}}, {{1, 0, 17}, {1, 2, 9}}, &push, &frames);
  AppendStep({4, 41, {}, {}}, {}, &push, &frames);
  ASSERT_EQ(frames.size(), 4u);
  absl::StatusOr<std::vector<ForwardedStep>> steps = DecodeSteps(push, frames);
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 2u);
  EXPECT_EQ((*steps)[0].step.key, 3u);
  EXPECT_EQ((*steps)[0].step.step, 41u);
  EXPECT_THAT((*steps)[0].step.workers, ElementsAre(0, 2));
  EXPECT_THAT((*steps)[0].step.sum, ElementsAre(1.5f, -2.0f));
  EXPECT_THAT((*steps)[0].seqs, ElementsAre(OriginSeq{1, 0, 17}, OriginSeq{1, 2, 9}));
  EXPECT_TRUE((*steps)[1].step.workers.empty() && (*steps)[1].step.sum.empty() && (*steps)[1].seqs.empty());

  std::vector<zmq::message_t> three;
  for (int i = 0; i < 3; ++i) three.emplace_back().copy(frames[i]);
  ExpectCode(DecodeSteps(push, three).status(), absl::StatusCode::kInvalidArgument,
             "forwarded steps of 2 slices in 3 payload frames");
  PushRequestMsg bad = push;
  bad.slices[0].length = 3;  // the sum is 2 floats
  ExpectCode(DecodeSteps(bad, frames).status(), absl::StatusCode::kInvalidArgument,
             "forwarded step 41 of slice 3: 8 bytes for a sum of 3 floats");
  bad = push;
  bad.slices[0].rows = 3;  // the record holds 2 workers and 2 seqs: 40 bytes, not 12 + a multiple of 16
  ExpectCode(DecodeSteps(bad, frames).status(), absl::StatusCode::kInvalidArgument, "for the record of 3 workers");
  bad = push;
  bad.slices[0].rows = 1u << 31;
  ExpectCode(DecodeSteps(bad, frames).status(), absl::StatusCode::kInvalidArgument, "for the record of");
}

}  // namespace
}  // namespace ps
