// SliceStore with pipeline stages: a sync step of a slice waits
// for the live workers of the stage that holds it (R pushes with R replica
// groups, not W), a worker pushing another stage's tensor is refused, and a
// checkpoint keeps the stages.
#include <string>
#include <vector>

#include "server/store/checkpoint_codec.h"
#include "server/store/slice_store_testing.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using testing::ExpectCode;
using ::testing::HasSubstr;
using testing::Model;
using testing::Push;
using testing::SlicesOf;
using testing::Values;

// Two stages: "a" (stage 0, key 0) and "b" (stage 1, key 1), 4 workers:
// workers 0 and 2 hold stage 0, workers 1 and 3 stage 1.
ModelSpec TwoStages(ConsistencyMode mode, int32_t staleness = 0) {
  ModelSpec m = Model({TensorSpec{"a", {2}, Initializer::Constant(10.0f)},
                       TensorSpec{"b", {2}, Initializer::Constant(20.0f), /*stage=*/1}},
                      mode, staleness);
  m.stages = 2;
  return m;
}

bool Ready(const SliceStore& store, int64_t clock, uint32_t key) {
  const PullRequestMsg pull{clock, {key}, 0};
  EXPECT_TRUE(store.CheckPull(pull).ok());
  return store.PullReady(pull);
}

class SliceStoreStagesTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(store_.Create(model_, SlicesOf(model_), 4).ok()); }
  ThreadPool pool_{2};
  SliceStore store_{&pool_, false};
  ModelSpec model_ = TwoStages(ConsistencyMode::kSync);
};

TEST_F(SliceStoreStagesTest, SyncStepOfASliceCompletesWithThePushesOfItsStage) {
  ASSERT_TRUE(Push(store_, 0, 0, {{0, {1, 2}}}).ok());
  EXPECT_FALSE(Ready(store_, 1, 0));
  EXPECT_THAT(store_.DescribeWait(PullRequestMsg{1, {0}, 0}), HasSubstr("workers [2]"));
  ASSERT_TRUE(Push(store_, 2, 0, {{0, {3, 4}}}).ok());
  // Two pushes (workers 0 and 2), mean {2, 3}, lr 1; stage 1 is not waited for.
  EXPECT_THAT(Values(store_, 0), ElementsAre(8, 7));
  EXPECT_TRUE(Ready(store_, 1, 0));
  EXPECT_FALSE(Ready(store_, 1, 1));
  ASSERT_TRUE(Push(store_, 3, 0, {{1, {2, 2}}}).ok());
  ASSERT_TRUE(Push(store_, 1, 0, {{1, {4, 6}}}).ok());
  EXPECT_THAT(Values(store_, 1), ElementsAre(17, 16));
  EXPECT_TRUE(Ready(store_, 1, 1));
}

TEST_F(SliceStoreStagesTest, PushOfAnotherStagesTensorIsRefusedAndChangesNothing) {
  ExpectCode(Push(store_, 1, 0, {{0, {1, 1}}}), absl::StatusCode::kFailedPrecondition,
             "worker 1 is stage 1 of 2 and pushed slice 0 of 'a' [0, 2), which stage 0 holds");
  // A push naming its own slice and another stage's is refused whole.
  ExpectCode(Push(store_, 2, 0, {{0, {1, 1}}, {1, {1, 1}}}), absl::StatusCode::kFailedPrecondition,
             "which stage 1 holds");
  EXPECT_THAT(Values(store_, 0), ElementsAre(10, 10));
  EXPECT_THAT(Values(store_, 1), ElementsAre(20, 20));
  ASSERT_TRUE(Push(store_, 0, 0, {{0, {1, 1}}}).ok());
  ASSERT_TRUE(Push(store_, 2, 0, {{0, {1, 1}}}).ok());
  EXPECT_EQ(store_.Version(0), 1u);
}

TEST_F(SliceStoreStagesTest, AStageWorkerLeavingCompletesOnlyItsStagesStep) {
  ASSERT_TRUE(Push(store_, 0, 0, {{0, {2, 2}}}).ok());
  ASSERT_TRUE(Push(store_, 1, 0, {{1, {2, 2}}}).ok());
  // Worker 2 (stage 0 of group 1) dies: stage 0's step has what it waits for.
  EXPECT_TRUE(store_.SetWorkerActive(2, false));
  EXPECT_EQ(store_.Version(0), 1u);
  EXPECT_THAT(Values(store_, 0), ElementsAre(8, 8));
  EXPECT_EQ(store_.Version(1), 0u);  // still waits for worker 3
  ASSERT_TRUE(Push(store_, 3, 0, {{1, {4, 4}}}).ok());
  EXPECT_THAT(Values(store_, 1), ElementsAre(17, 17));
}

TEST_F(SliceStoreStagesTest, AWorkersClockCountsOnlyTheSlicesOfItsStage) {
  ASSERT_TRUE(Push(store_, 0, 0, {{0, {1, 1}}}).ok());
  ASSERT_TRUE(Push(store_, 2, 0, {{0, {1, 1}}}).ok());
  ASSERT_TRUE(Push(store_, 0, 1, {{0, {1, 1}}}).ok());
  // Worker 0 pushed steps 0 and 1 to "a"; "b" (stage 1) has no say.
  EXPECT_EQ(store_.WorkerClock(0), 2);
  EXPECT_EQ(store_.WorkerClock(2), 1);
  EXPECT_EQ(store_.WorkerClock(1), 0);
}

TEST(SliceStoreStagesModelTest, StagesThatDoNotDivideTheWorkersAreRefused) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = TwoStages(ConsistencyMode::kSync);
  ExpectCode(store.Create(model, SlicesOf(model), 3), absl::StatusCode::kInvalidArgument,
             "a model of 2 pipeline stages needs a multiple of 2 workers");
  ModelSpec bad = model;
  bad.tensors[1].stage = 2;
  ExpectCode(store.Create(bad, SlicesOf(bad), 4), absl::StatusCode::kInvalidArgument,
             "tensor 'b': stage 2 outside [0, 2)");
  bad.tensors[1].stage = 0;
  ExpectCode(store.Create(bad, SlicesOf(bad), 4), absl::StatusCode::kInvalidArgument, "stage 1 of 2 holds no tensor");
  bad = model;
  bad.tables.push_back(TableSpec{"t", 4});
  ExpectCode(store.Create(bad, SlicesOf(bad), 4), absl::StatusCode::kInvalidArgument, "tables are for stages = 1 only");
  EXPECT_FALSE(store.has_model());
}

TEST(SliceStoreStagesModelTest, SspWaitsOnlyForTheClocksOfTheSlicesStage) {
  ThreadPool pool(1);
  SliceStore store(&pool, false);
  const ModelSpec model = TwoStages(ConsistencyMode::kSsp, 0);
  ASSERT_TRUE(store.Create(model, SlicesOf(model), 4).ok());
  ASSERT_TRUE(Push(store, 0, 0, {{0, {1, 1}}}).ok());
  EXPECT_FALSE(Ready(store, 1, 0));  // worker 2 has not pushed step 0
  ASSERT_TRUE(Push(store, 2, 0, {{0, {1, 1}}}).ok());
  EXPECT_TRUE(Ready(store, 1, 0));  // stage 1's workers 1 and 3 are not waited for
  EXPECT_FALSE(Ready(store, 1, 1));
}

TEST_F(SliceStoreStagesTest, ACheckpointKeepsTheStages) {
  ASSERT_TRUE(Push(store_, 0, 0, {{0, {2, 2}}}).ok());
  std::string image;
  ASSERT_TRUE(EncodeStore(store_, &image).ok());
  ThreadPool pool(1);
  SliceStore restored(&pool, false);
  ASSERT_TRUE(DecodeStore(image, &restored).ok());
  EXPECT_EQ(restored.model().stages, 2);
  EXPECT_EQ(restored.model().tensors[1].stage, 1);
  ExpectCode(Push(restored, 1, 0, {{0, {1, 1}}}), absl::StatusCode::kFailedPrecondition, "which stage 0 holds");
  ASSERT_TRUE(Push(restored, 2, 0, {{0, {4, 4}}}).ok());
  EXPECT_THAT(Values(restored, 0), ElementsAre(7, 7));
}

}  // namespace
}  // namespace ps
