#include "server/store/table_shard.h"

#include <memory>
#include <string>
#include <vector>

#include "common/model/initializer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<Optimizer> MakeOptimizer(OptimizerKind kind, float lr) {
  OptimizerConfig config;
  config.kind = kind;
  config.learning_rate = lr;
  return *Optimizer::Create(config);
}

TableSpec Spec(int dim, uint32_t admit_after = 0) {
  return TableSpec{"emb", dim, Initializer::Uniform(-1, 1, 7), std::nullopt, admit_after};
}

std::vector<float> Initial(const TableSpec& spec, uint64_t id) {
  std::vector<float> row(spec.dim);
  FillInitialRow(spec, id, absl::MakeSpan(row));
  return row;
}

std::vector<float> Read(TableShard& shard, std::vector<uint64_t> ids) {
  std::vector<float> out(ids.size() * shard.dim());
  shard.Read(ids, absl::MakeSpan(out));
  return out;
}

TEST(TableShardTest, RowIsCreatedOnFirstPullWithTheSameInitialValuesOnAnyShard) {
  const TableSpec spec = Spec(3);
  auto sgd = MakeOptimizer(OptimizerKind::kSgd, 1.0f);
  TableBudget budget_a, budget_b;
  TableShard a(spec, *sgd, &budget_a, 0, 0), b(spec, *sgd, &budget_b, 0, 0);
  const uint64_t id = 0xdeadbeefcafef00dULL;
  EXPECT_EQ(a.rows(), 0u);
  EXPECT_EQ(Read(a, {id}), Initial(spec, id));
  EXPECT_EQ(Read(b, {id}), Initial(spec, id));
  EXPECT_NE(Initial(spec, id), Initial(spec, id + 1));
  EXPECT_EQ(a.rows(), 1u);
  EXPECT_EQ(a.Stats().admissions, 1u);
  EXPECT_EQ(budget_a.used.load(), a.RowBytes());
  for (float v : Initial(spec, id)) {
    EXPECT_GE(v, -1.0f);
    EXPECT_LT(v, 1.0f);
  }
}

TEST(TableShardTest, SgdTouchesOnlyThePushedRows) {
  TableSpec spec = Spec(2);
  spec.init = Initializer::Constant(10.0f);
  auto sgd = MakeOptimizer(OptimizerKind::kSgd, 1.0f);
  TableBudget budget;
  TableShard shard(spec, *sgd, &budget, 0, 0);
  Read(shard, {1, 2, 3});
  const std::vector<uint64_t> ids = {3, 1};
  const std::vector<float> grads = {1, 2, 4, 8};
  shard.Apply(ids, grads, 0.5f);
  EXPECT_THAT(*shard.RowOf(1), ElementsAre(8, 6));
  EXPECT_THAT(*shard.RowOf(2), ElementsAre(10, 10));
  EXPECT_THAT(*shard.RowOf(3), ElementsAre(9.5, 9));
  EXPECT_EQ(shard.Stats().rows_pushed, 2u);
}

TEST(TableShardTest, AdamIsLazyEachRowCountsItsOwnSteps) {
  TableSpec spec = Spec(2);
  spec.init = Initializer::Zeros();
  auto adam = MakeOptimizer(OptimizerKind::kAdam, 0.1f);
  TableBudget budget;
  TableShard shard(spec, *adam, &budget, 0, 0);
  const std::vector<float> g = {1, -2};
  for (int i = 0; i < 3; ++i) shard.Apply(std::vector<uint64_t>{5}, g, 1.0f);
  shard.Apply(std::vector<uint64_t>{6}, g, 1.0f);
  // Row 6's first update is Adam's first step (bias-corrected), whatever
  // row 5 went through: a dense Adam step 0 on its own.
  std::vector<float> value = {0, 0}, state(adam->StateSize(2), 0.0f);
  adam->Update(absl::MakeSpan(value), absl::MakeSpan(state), g, 1.0f, 0);
  std::vector<float> row6 = *shard.RowOf(6);
  EXPECT_EQ(row6[0], value[0]);
  EXPECT_EQ(row6[1], value[1]);
  EXPECT_NEAR(row6[0], -0.1f, 1e-6);  // Adam's first step is lr * sign(g)
  std::vector<float> row5 = *shard.RowOf(5);
  EXPECT_NEAR(row5[0], -0.3f, 1e-5);
}

TEST(TableShardTest, SyncSumsRepeatedIdsAcrossPushesAndAppliesOnce) {
  TableSpec spec = Spec(2);
  spec.init = Initializer::Zeros();
  auto sgd = MakeOptimizer(OptimizerKind::kSgd, 1.0f);
  TableBudget budget;
  TableShard shard(spec, *sgd, &budget, 0, 0);
  shard.Accumulate(std::vector<uint64_t>{1, 2}, std::vector<float>{2, 4, 6, 8});
  shard.Accumulate(std::vector<uint64_t>{2}, std::vector<float>{10, 20});
  EXPECT_TRUE(shard.has_pending());
  EXPECT_FALSE(shard.RowOf(1).has_value());  // nothing applied before the step completes
  shard.ApplyPending(0.5f);
  EXPECT_FALSE(shard.has_pending());
  EXPECT_THAT(*shard.RowOf(1), ElementsAre(-1, -2));
  EXPECT_THAT(*shard.RowOf(2), ElementsAre(-8, -14));
}

TEST(TableShardTest, ClockEvictsAnUntouchedRowAtTheBudgetAndCountsIt) {
  const TableSpec spec = Spec(4);
  auto sgd = MakeOptimizer(OptimizerKind::kSgd, 1.0f);
  TableBudget budget;
  TableShard shard(spec, *sgd, &budget, 0, 0);
  budget.limit = 3 * shard.RowBytes();
  Read(shard, {1, 2, 3});
  Read(shard, {4});  // every row was touched: the hand clears them all, then evicts 1
  EXPECT_FALSE(shard.RowOf(1).has_value());
  Read(shard, {2});  // a second chance for 2
  Read(shard, {5});  // the hand passes 2 (touched) and evicts 3
  EXPECT_FALSE(shard.RowOf(3).has_value());
  EXPECT_TRUE(shard.RowOf(2).has_value());
  EXPECT_TRUE(shard.RowOf(4).has_value());
  EXPECT_TRUE(shard.RowOf(5).has_value());
  EXPECT_EQ(shard.rows(), 3u);
  EXPECT_EQ(shard.Stats().evictions, 2u);
  EXPECT_LE(budget.used.load(), budget.limit);
  // An evicted row comes back as its initial value.
  EXPECT_EQ(Read(shard, {1}), Initial(spec, 1));
}

TEST(TableShardTest, NoRoomAndNothingToEvictReadsInitialValuesAndDropsGradients) {
  const TableSpec spec = Spec(4);
  auto sgd = MakeOptimizer(OptimizerKind::kSgd, 1.0f);
  TableBudget budget;
  TableShard shard(spec, *sgd, &budget, 0, 0);
  budget.limit = shard.RowBytes() / 2;
  EXPECT_EQ(Read(shard, {9}), Initial(spec, 9));
  shard.Apply(std::vector<uint64_t>{9}, std::vector<float>(4, 1.0f), 1.0f);
  EXPECT_EQ(shard.rows(), 0u);
  EXPECT_EQ(shard.Stats().rejections, 1u);
  EXPECT_EQ(shard.Stats().gradients_dropped, 1u);
}

TEST(TableShardTest, AdmissionCreatesARowOnlyAfterNPullsAndDropsEarlierGradients) {
  const TableSpec spec = Spec(2, /*admit_after=*/3);
  auto sgd = MakeOptimizer(OptimizerKind::kSgd, 1.0f);
  TableBudget budget;
  TableShard shard(spec, *sgd, &budget, 0, 0);
  const std::vector<float> g = {1, 1};
  EXPECT_EQ(Read(shard, {7}), Initial(spec, 7));
  shard.Apply(std::vector<uint64_t>{7}, g, 1.0f);
  EXPECT_EQ(Read(shard, {7}), Initial(spec, 7));  // the push was dropped
  EXPECT_EQ(shard.rows(), 0u);
  EXPECT_EQ(Read(shard, {7}), Initial(spec, 7));  // third pull: admitted, created
  EXPECT_EQ(shard.rows(), 1u);
  shard.Apply(std::vector<uint64_t>{7}, g, 1.0f);
  const std::vector<float> init = Initial(spec, 7);
  EXPECT_THAT(*shard.RowOf(7), ElementsAre(init[0] - 1, init[1] - 1));
  const TableStatsMsg stats = shard.Stats();
  EXPECT_EQ(stats.admissions, 1u);
  EXPECT_EQ(stats.rejections, 2u);
  EXPECT_EQ(stats.gradients_dropped, 1u);
}

TEST(TableShardTest, FtrlKeepsWeightsAtZeroUnderL1AndMatchesTheClosedForm) {
  OptimizerConfig config;
  config.kind = OptimizerKind::kFtrl;
  config.learning_rate = 0.1f;  // alpha
  config.ftrl_beta = 1.0f;
  config.l1 = 0.5f;
  auto ftrl = *Optimizer::Create(config);
  TableSpec spec = Spec(1);
  spec.init = Initializer::Zeros();
  TableBudget budget;
  TableShard shard(spec, *ftrl, &budget, 0, 0);
  shard.Apply(std::vector<uint64_t>{1, 2}, std::vector<float>{0.25f, 1.0f}, 1.0f);
  EXPECT_EQ((*shard.RowOf(1))[0], 0.0f);  // |z| = 0.25 <= l1
  // z = 1, n = 1: w = -(1 - 0.5) / ((1 + 1) / 0.1) = -0.025.
  EXPECT_FLOAT_EQ((*shard.RowOf(2))[0], -0.025f);
}

TEST(TableShardTest, EncodeDecodeRestoresRowsStepsPendingSumAndSketch) {
  const TableSpec spec = Spec(3, /*admit_after=*/2);
  auto adam = MakeOptimizer(OptimizerKind::kAdam, 0.1f);
  TableBudget budget;
  TableShard shard(spec, *adam, &budget, 1, 1);
  Read(shard, {1, 2, 3, 1, 2});  // 1 and 2 admitted, 3 seen once
  shard.Apply(std::vector<uint64_t>{1}, std::vector<float>{1, 2, 3}, 1.0f);
  shard.Accumulate(std::vector<uint64_t>{2, 3}, std::vector<float>{1, 1, 1, 2, 2, 2});
  std::string bytes;
  shard.Encode(&bytes);
  TableBudget budget2;
  TableShard restored(spec, *adam, &budget2, 1, 1);
  absl::string_view data = bytes;
  ASSERT_TRUE(restored.Decode(&data, TableShard::kFormat).ok());
  EXPECT_TRUE(data.empty());
  EXPECT_EQ(restored.Stats(), shard.Stats());
  EXPECT_EQ(budget2.used.load(), budget.used.load());
  for (uint64_t id : {1, 2, 3}) EXPECT_EQ(restored.RowOf(id), shard.RowOf(id)) << id;
  // The same pending sum and per-row steps: one more step gives the same rows.
  shard.ApplyPending(0.5f);
  restored.ApplyPending(0.5f);
  shard.Apply(std::vector<uint64_t>{1}, std::vector<float>{1, 1, 1}, 1.0f);
  restored.Apply(std::vector<uint64_t>{1}, std::vector<float>{1, 1, 1}, 1.0f);
  for (uint64_t id : {1, 2, 3}) EXPECT_EQ(restored.RowOf(id), shard.RowOf(id)) << id;
  // The sketch too: id 3's second pull admits it in both.
  Read(shard, {3});
  Read(restored, {3});
  EXPECT_TRUE(restored.RowOf(3).has_value());
  EXPECT_EQ(restored.RowOf(3), shard.RowOf(3));
}

TEST(TableShardTest, DecodeRefusesTruncatedMismatchedAndRepeatedData) {
  const TableSpec spec = Spec(2);
  auto sgd = MakeOptimizer(OptimizerKind::kSgd, 1.0f);
  TableBudget budget;
  TableShard shard(spec, *sgd, &budget, 0, 0);
  Read(shard, {1, 2});
  std::string bytes;
  shard.Encode(&bytes);
  for (size_t cut : {size_t{0}, size_t{3}, size_t{20}, bytes.size() - 1}) {
    TableBudget b;
    TableShard t(spec, *sgd, &b, 0, 0);
    absl::string_view data(bytes.data(), cut);
    const absl::Status s = t.Decode(&data, TableShard::kFormat);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << cut;
    EXPECT_THAT(std::string(s.message()), HasSubstr("truncated")) << cut;
  }
  {
    TableBudget b;
    TableShard wider(Spec(3), *sgd, &b, 0, 0);
    absl::string_view data = bytes;
    EXPECT_THAT(std::string(wider.Decode(&data, TableShard::kFormat).message()), HasSubstr("rows of 2 values"));
  }
  {
    std::string twice = bytes;
    // The second row's id (after dim, row floats, 13 counters and the count,
    // then id, steps and 2 floats of the first row) made equal to the first's.
    const size_t first = 4 + 8 + 13 * 8 + 8, second = first + 8 + 8 + 2 * 4;
    twice.replace(second, 8, bytes.substr(first, 8));
    TableBudget b;
    TableShard t(spec, *sgd, &b, 0, 0);
    absl::string_view data = twice;
    const absl::Status s = t.Decode(&data, TableShard::kFormat);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()), HasSubstr("twice"));
  }
}

TEST(TableShardTest, ResidentBytesPerRowStayWithin1_3TimesTheRawRowAndState) {
  const TableSpec spec = Spec(64);
  auto adagrad = MakeOptimizer(OptimizerKind::kAdagrad, 0.1f);
  TableBudget budget;
  TableShard shard(spec, *adagrad, &budget, 0, 0);
  std::vector<uint64_t> ids(4096);
  for (uint64_t base = 0; base < 100000; base += ids.size()) {
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = (base + i) * 0x9e3779b97f4a7c15ULL;
    Read(shard, ids);
  }
  const double raw = 64.0 * 4 * 2;  // values and Adagrad's accumulator
  const double per_row = static_cast<double>(shard.Bytes()) / static_cast<double>(shard.rows());
  EXPECT_LE(per_row, 1.3 * raw) << per_row;
}

TEST(TableShardTest, RecordsTheRowsAPushChangedAndThoseEvictedForServingReplicas) {
  const TableSpec spec = Spec(2);
  auto sgd = MakeOptimizer(OptimizerKind::kSgd, 1.0f);
  TableBudget budget;
  TableShard shard(spec, *sgd, &budget, 0, 0);
  budget.limit = 3 * shard.RowBytes();
  Read(shard, {1, 2});
  const std::vector<float> grads = {1, 1};
  shard.Apply(std::vector<uint64_t>{1}, grads, 1.0f);  // before any replica: not recorded
  shard.changes().Enable();
  const uint64_t start = shard.changes().Cut();
  Read(shard, {3});  // made by a pull: its initial values, which a replica gives anyway
  shard.Apply(std::vector<uint64_t>{2}, grads, 1.0f);
  shard.Assign(std::vector<uint64_t>{3}, std::vector<float>{5, 5});
  Read(shard, {4});  // no disk tier: the row the hand evicts (1) is gone for good
  EXPECT_FALSE(shard.RowOf(1).has_value());
  shard.changes().Cut();
  const RowChanges::Delta d = shard.changes().Since(start);
  EXPECT_FALSE(d.snapshot);
  EXPECT_THAT(d.changed, ElementsAre(2, 3));
  EXPECT_THAT(d.removed, ElementsAre(1));
  EXPECT_TRUE(shard.changes().Since(0).snapshot);  // a replica that holds nothing
}

}  // namespace
}  // namespace ps
