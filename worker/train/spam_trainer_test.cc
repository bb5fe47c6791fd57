#include "worker/train/spam_trainer.h"

#include <cstdio>
#include <fstream>
#include <set>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

SpamTrainerOptions Valid() {
  SpamTrainerOptions o;
  o.client.scheduler = "127.0.0.1:1";
  return o;
}

TEST(SpamTrainerOptionsTest, DefaultsAreValidAndBadFieldsAreNamed) {
  EXPECT_TRUE(Valid().Validate().ok()) << Valid().Validate();
  struct Case {
    void (*change)(SpamTrainerOptions&);
    const char* name;
  };
  const Case cases[] = {
      {[](SpamTrainerOptions& o) { o.epochs = 0; }, "epochs"},
      {[](SpamTrainerOptions& o) { o.batch_size = 0; }, "batch_size"},
      {[](SpamTrainerOptions& o) { o.row_lr = 0; }, "row_lr"},
      {[](SpamTrainerOptions& o) { o.dense_lr = -1; }, "dense_lr"},
      {[](SpamTrainerOptions& o) { o.init_scale = 0; }, "init_scale"},
      {[](SpamTrainerOptions& o) { o.max_ids_per_request = kMaxIdsPerRequest + 1; }, "max_ids_per_request"},
      {[](SpamTrainerOptions& o) { o.model.dim = 0; }, "dim"},
      {[](SpamTrainerOptions& o) { o.progress_every = absl::ZeroDuration(); }, "progress_every"},
      {[](SpamTrainerOptions& o) { o.client.scheduler.clear(); }, "scheduler"},
  };
  for (const Case& c : cases) {
    SpamTrainerOptions o = Valid();
    c.change(o);
    const absl::Status s = o.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.name));
  }
}

TEST(SpamModelSpecTest, DenseHeadAndOneAdagradTable) {
  SpamTrainerOptions o = Valid();
  o.model.dim = 8;
  o.row_lr = 0.3f;
  o.dense_lr = 0.04f;
  o.admit_after = 2;
  const absl::StatusOr<ModelSpec> m = SpamModelSpec(o, 2);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->Validate().ok()) << m->Validate();
  ASSERT_EQ(m->tensors.size(), 2u);
  EXPECT_EQ(m->tensors[0].name, kOutWeights);
  EXPECT_EQ(m->tensors[0].NumElements(), 8);
  EXPECT_EQ(m->tensors[1].name, kOutBias);
  ASSERT_EQ(m->tables.size(), 1u);
  const TableSpec& t = m->tables[0];
  EXPECT_EQ(t.name, kTokenTable);
  EXPECT_EQ(t.dim, 8);
  EXPECT_EQ(t.init, Initializer::Uniform(-0.1f, 0.1f, 1));
  EXPECT_EQ(t.admit_after, 2u);
  EXPECT_EQ(m->TableOptimizer(0).kind, OptimizerKind::kAdagrad);
  EXPECT_FLOAT_EQ(m->TableOptimizer(0).learning_rate, 0.3f);
  EXPECT_EQ(m->optimizer.kind, OptimizerKind::kAdagrad);
  EXPECT_FLOAT_EQ(m->optimizer.learning_rate, 0.04f);
}

TEST(SpamModelSpecTest, HiddenLayerAddsTwoTensorsAndPlacementIsChecked) {
  SpamTrainerOptions o = Valid();
  o.model.dim = 4;
  o.model.hidden = 3;
  const absl::StatusOr<ModelSpec> m = SpamModelSpec(o, 1);
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<std::pair<std::string, int64_t>> tensors;
  for (const TensorSpec& t : m->tensors) tensors.emplace_back(t.name, t.NumElements());
  EXPECT_THAT(
      tensors,
      ElementsAre(std::pair<std::string, int64_t>{kHiddenWeights, 12}, std::pair<std::string, int64_t>{kHiddenBias, 3},
                  std::pair<std::string, int64_t>{kOutWeights, 3}, std::pair<std::string, int64_t>{kOutBias, 1}));
  o.placement = "/nonexistent/placement";
  EXPECT_EQ(SpamModelSpec(o, 1).status().code(), absl::StatusCode::kNotFound);
}

TEST(SpamTrainerLimitsTest, EveryBatchFitsOneRequestAndOneFrame) {
  SpamTrainerOptions o = Valid();
  EXPECT_EQ(MaxDistinctIdsPerMessage(o), kMaxIdsPerRequest / 32);  // 4096
  o.batch_size = 1;
  EXPECT_EQ(MaxDistinctIdsPerMessage(o), kMaxIdsPerRequest);
  // A 1 MiB frame holds 1048576 / (8 + 4 * 32) = 7710 ids with their rows.
  o.client.security.max_frame_bytes = 1 << 20;
  EXPECT_EQ(MaxDistinctIdsPerMessage(o), 7710u);
  o.batch_size = 100000;
  EXPECT_EQ(MaxDistinctIdsPerMessage(o), 1u);
}

TEST(SpamTrainerLimitsTest, KeepDistinctPrefixCutsAtTheFirstIdOverTheLimit) {
  std::vector<uint64_t> ids = {1, 2, 1, 2, 3, 1, 4, 3};
  KeepDistinctPrefix(3, &ids);
  EXPECT_THAT(ids, ElementsAre(1, 2, 1, 2, 3, 1));
  KeepDistinctPrefix(3, &ids);
  EXPECT_THAT(ids, ElementsAre(1, 2, 1, 2, 3, 1));
  KeepDistinctPrefix(1, &ids);
  EXPECT_THAT(ids, ElementsAre(1));
}

TEST(SpamTrainerLimitsTest, StepsPerEpochUseTheShortestShard) {
  // 4810 training messages: shards of 2405; 3 workers: 1603 or 1604, so 1603.
  EXPECT_EQ(SpamStepsPerEpoch(4810, 2, 32), 76);  // 75 full batches and one of 5
  EXPECT_EQ(SpamStepsPerEpoch(4810, 3, 32), 51);  // ceil(1603 / 32)
  EXPECT_EQ(SpamStepsPerEpoch(64, 2, 32), 1);
  EXPECT_EQ(SpamStepsPerEpoch(1, 2, 32), 0);
}

TEST(IdChunksTest, ChunksCoverEveryExampleInOrderWithinTheLimit) {
  std::vector<LabeledTokens> examples;
  for (uint64_t i = 0; i < 50; ++i) examples.push_back({{i, i + 1, i + 2, 1000, 1000}, 0});
  const auto chunks = IdChunks(examples, 10);
  size_t next = 0;
  for (const auto& [begin, end] : chunks) {
    EXPECT_EQ(begin, next);
    EXPECT_LT(begin, end);
    absl::flat_hash_set<uint64_t> ids;
    for (size_t i = begin; i < end; ++i) ids.insert(examples[i].ids.begin(), examples[i].ids.end());
    EXPECT_LE(ids.size(), 10u);
    // Chunks are greedy: the next example would not have fitted.
    if (end < examples.size()) {
      ids.insert(examples[end].ids.begin(), examples[end].ids.end());
      EXPECT_GT(ids.size(), 10u);
    }
    next = end;
  }
  EXPECT_EQ(next, examples.size());
  // Example i shares i+1, i+2 with its neighbours: 1000 plus 9 consecutive ids, so 7 examples a chunk.
  EXPECT_EQ(chunks.front(), (std::pair<size_t, size_t>{0, 7}));
}

TEST(IdChunksTest, AnExampleOverTheLimitGoesAlone) {
  const std::vector<LabeledTokens> examples = {{{1}, 0}, {{2, 3, 4, 5}, 1}, {{6}, 0}};
  EXPECT_THAT(IdChunks(examples, 2), ElementsAre(std::pair<size_t, size_t>{0, 1}, std::pair<size_t, size_t>{1, 2},
                                                 std::pair<size_t, size_t>{2, 3}));
  EXPECT_TRUE(IdChunks({}, 2).empty());
}

}  // namespace
}  // namespace ps
