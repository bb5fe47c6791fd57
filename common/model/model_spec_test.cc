#include "common/model/model_spec.h"

#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

void ExpectInvalid(const absl::Status& s, const std::string& substring) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(substring));
}

TensorSpec Tensor(std::string name, std::vector<int64_t> shape) {
  return TensorSpec{std::move(name), std::move(shape), Initializer::Zeros()};
}

ModelSpec SmallModel() {
  ModelSpec spec;
  spec.tensors = {Tensor("fc1.weight", {4, 3}), Tensor("fc1.bias", {3})};
  return spec;
}

TEST(RoleNameTest, NamesEveryRole) {
  EXPECT_STREQ(RoleName(Role::kScheduler), "scheduler");
  EXPECT_STREQ(RoleName(Role::kServer), "server");
  EXPECT_STREQ(RoleName(Role::kWorker), "worker");
}

TEST(OptimizerKindTest, NameAndParseRoundTrip) {
  for (OptimizerKind kind :
       {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdam, OptimizerKind::kAdagrad}) {
    absl::StatusOr<OptimizerKind> parsed = ParseOptimizerKind(OptimizerName(kind));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_STREQ(OptimizerName(OptimizerKind::kAdam), "adam");
}

TEST(OptimizerKindTest, ParseRejectsUnknownNameAndListsValidOnes) {
  absl::StatusOr<OptimizerKind> parsed = ParseOptimizerKind("rmsprop");
  ExpectInvalid(parsed.status(), "'rmsprop'");
  ExpectInvalid(parsed.status(), "sgd, momentum, adam, adagrad");
  ExpectInvalid(ParseOptimizerKind("").status(), "''");
  ExpectInvalid(ParseOptimizerKind("SGD").status(), "'SGD'");
}

TEST(LrScheduleTest, CosineDecaysFromTheRateToTheFloorThenStaysFlat) {
  OptimizerConfig c;
  c.learning_rate = 0.1f;
  EXPECT_FLOAT_EQ(c.LearningRateAt(12345), 0.1f);  // constant by default
  c.lr_schedule = LrSchedule::kCosine;
  c.decay_steps = 100;
  c.min_lr_ratio = 0.1f;
  ASSERT_TRUE(c.Validate().ok());
  EXPECT_FLOAT_EQ(c.LearningRateAt(0), 0.1f);
  EXPECT_FLOAT_EQ(c.LearningRateAt(50), 0.1f * (0.1f + 0.9f * 0.5f));
  EXPECT_FLOAT_EQ(c.LearningRateAt(100), 0.01f);
  EXPECT_FLOAT_EQ(c.LearningRateAt(1000), 0.01f);
}

TEST(LrScheduleTest, BadScheduleSettingsAreRefusedNamingTheField) {
  OptimizerConfig c;
  c.lr_schedule = LrSchedule::kCosine;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("decay_steps"));
  c.decay_steps = 10;
  c.min_lr_ratio = 1.5f;
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("min_lr_ratio"));
  EXPECT_EQ(ParseLrSchedule("cosine").value(), LrSchedule::kCosine);
  EXPECT_EQ(ParseLrSchedule("warmup").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorSpecTest, NumElementsIsProductOfShape) {
  EXPECT_EQ(Tensor("a", {4, 3}).NumElements(), 12);
  EXPECT_EQ(Tensor("a", {7}).NumElements(), 7);
  EXPECT_EQ(Tensor("a", {2, 3, 5}).NumElements(), 30);
  EXPECT_EQ(Tensor("a", {}).NumElements(), 0);
}

TEST(TensorSpecTest, NumElementsSaturatesInsteadOfOverflowing) {
  TensorSpec t = Tensor("huge", {int64_t{1} << 40, int64_t{1} << 40});
  EXPECT_EQ(t.NumElements(), std::numeric_limits<int64_t>::max());
}

TEST(TensorSpecTest, ValidTensorsPass) {
  EXPECT_TRUE(Tensor("fc1.weight", {784, 512}).Validate().ok());
  TensorSpec t = Tensor("w", {3});
  t.init = Initializer::Uniform(-1, 1, 7);
  EXPECT_TRUE(t.Validate().ok());
  t.init = Initializer::Normal(0, 0, 7);
  EXPECT_TRUE(t.Validate().ok());
  t.init = Initializer::He(3);
  EXPECT_TRUE(t.Validate().ok());
  t.init = Initializer::Constant(-2.5f);
  EXPECT_TRUE(t.Validate().ok());
}

TEST(TensorSpecTest, RejectsEmptyName) { ExpectInvalid(Tensor("", {3}).Validate(), "empty name"); }

TEST(TensorSpecTest, RejectsEmptyShape) {
  ExpectInvalid(Tensor("scalar", {}).Validate(), "tensor 'scalar': shape is empty");
}

TEST(TensorSpecTest, RejectsNonPositiveDimensionNamingIt) {
  ExpectInvalid(Tensor("fc1.weight", {4, -3}).Validate(),
                "tensor 'fc1.weight': shape dimension 1 is -3; must be positive");
  ExpectInvalid(Tensor("b", {0}).Validate(), "tensor 'b': shape dimension 0 is 0");
}

TEST(TensorSpecTest, RejectsMoreThan2To40Elements) {
  EXPECT_TRUE(Tensor("edge", {int64_t{1} << 20, int64_t{1} << 20}).Validate().ok());
  ExpectInvalid(Tensor("big", {(int64_t{1} << 20) + 1, int64_t{1} << 20}).Validate(), "tensor 'big'");
  ExpectInvalid(Tensor("huge", {int64_t{1} << 40, int64_t{1} << 40}).Validate(), "2^40");
}

TEST(TensorSpecTest, RejectsBadInitializers) {
  TensorSpec t = Tensor("emb", {10, 4});
  t.init = Initializer::Uniform(1, 1, 0);
  ExpectInvalid(t.Validate(), "tensor 'emb': uniform initializer needs a < b, got a=1 b=1");
  t.init = Initializer::Uniform(2, 1, 0);
  ExpectInvalid(t.Validate(), "a=2 b=1");
  t.init = Initializer::Normal(0, -0.5f, 0);
  ExpectInvalid(t.Validate(), "tensor 'emb': normal initializer standard deviation is -0.5");
  t.init = Initializer::Constant(std::nanf(""));
  ExpectInvalid(t.Validate(), "must be finite");
  t.init = Initializer{static_cast<InitKind>(42), 0, 0, 0};
  ExpectInvalid(t.Validate(), "unknown initializer kind 42");
}

TEST(OptimizerConfigTest, DefaultsAreValid) { EXPECT_TRUE(OptimizerConfig{}.Validate().ok()); }

TEST(OptimizerConfigTest, RejectsBadLearningRate) {
  OptimizerConfig c;
  c.learning_rate = 0;
  ExpectInvalid(c.Validate(), "optimizer learning_rate is 0");
  c.learning_rate = -0.1f;
  ExpectInvalid(c.Validate(), "learning_rate is -0.1");
  c.learning_rate = std::numeric_limits<float>::infinity();
  ExpectInvalid(c.Validate(), "learning_rate is inf");
  c.learning_rate = std::nanf("");
  ExpectInvalid(c.Validate(), "learning_rate");
}

TEST(OptimizerConfigTest, RejectsMomentumAndBetasOutsideUnitInterval) {
  OptimizerConfig c;
  c.momentum = 1.0f;
  ExpectInvalid(c.Validate(), "optimizer momentum is 1; must be in [0, 1)");
  c = OptimizerConfig{};
  c.momentum = -0.1f;
  ExpectInvalid(c.Validate(), "momentum is -0.1");
  c = OptimizerConfig{};
  c.beta1 = 1.5f;
  ExpectInvalid(c.Validate(), "optimizer beta1 is 1.5");
  c = OptimizerConfig{};
  c.beta2 = std::nanf("");
  ExpectInvalid(c.Validate(), "optimizer beta2");
  c = OptimizerConfig{};
  c.momentum = 0.0f;
  EXPECT_TRUE(c.Validate().ok());
}

TEST(OptimizerConfigTest, RejectsBadEpsilonAndWeightDecay) {
  OptimizerConfig c;
  c.epsilon = 0;
  ExpectInvalid(c.Validate(), "optimizer epsilon is 0");
  c = OptimizerConfig{};
  c.weight_decay = -1e-4f;
  ExpectInvalid(c.Validate(), "optimizer weight_decay is -0.0001");
  c = OptimizerConfig{};
  c.weight_decay = 0;
  EXPECT_TRUE(c.Validate().ok());
}

TEST(OptimizerConfigTest, RejectsUnknownKind) {
  OptimizerConfig c;
  c.kind = static_cast<OptimizerKind>(9);
  ExpectInvalid(c.Validate(), "optimizer kind 9");
}

TEST(ConsistencyTest, ParsesAndPrintsEveryMode) {
  for (const char* text : {"sync", "async", "ssp:0", "ssp:3", "ssp:1000000"}) {
    absl::StatusOr<Consistency> c = Consistency::Parse(text);
    ASSERT_TRUE(c.ok()) << text << ": " << c.status();
    EXPECT_EQ(c->ToString(), text);
  }
  absl::StatusOr<Consistency> ssp = Consistency::Parse("ssp:3");
  ASSERT_TRUE(ssp.ok());
  EXPECT_EQ(ssp->mode, ConsistencyMode::kSsp);
  EXPECT_EQ(ssp->staleness, 3);
  EXPECT_EQ(Consistency::Parse("async")->mode, ConsistencyMode::kAsync);
  EXPECT_EQ(Consistency{}.ToString(), "sync");
}

TEST(ConsistencyTest, RejectsMalformedTextNamingIt) {
  for (const char* text : {"ssp", "ssp:", "ssp:-1", "ssp:x", "ssp:3x", "ssp: 3", "ssp:+3", "ssp:1000001",
                           "ssp:99999999999", "foo", "", "SYNC", "sync "}) {
    absl::StatusOr<Consistency> c = Consistency::Parse(text);
    ExpectInvalid(c.status(), std::string("'") + text + "'");
  }
}

TEST(ModelSpecTest, SmallModelIsValid) { EXPECT_TRUE(SmallModel().Validate().ok()); }

TEST(ModelSpecTest, RejectsNoTensors) { ExpectInvalid(ModelSpec{}.Validate(), "no tensors"); }

TEST(ModelSpecTest, RejectsDuplicateNames) {
  ModelSpec spec = SmallModel();
  spec.tensors.push_back(Tensor("fc1.bias", {5}));
  ExpectInvalid(spec.Validate(), "duplicate tensor name 'fc1.bias'");
}

TEST(ModelSpecTest, RejectsBadTensorNamingIt) {
  ModelSpec spec = SmallModel();
  spec.tensors[1].shape = {0};
  ExpectInvalid(spec.Validate(), "tensor 'fc1.bias': shape dimension 0 is 0");
}

TEST(ModelSpecTest, RejectsBadOptimizer) {
  ModelSpec spec = SmallModel();
  spec.optimizer.beta2 = 1.0f;
  ExpectInvalid(spec.Validate(), "beta2");
}

TEST(ModelSpecTest, RejectsBadConsistency) {
  ModelSpec spec = SmallModel();
  spec.consistency = Consistency{ConsistencyMode::kSsp, -2};
  ExpectInvalid(spec.Validate(), "staleness is -2");
}

TEST(ModelSpecTest, StagesMustBeInRangeEachHoldingATensor) {
  ModelSpec spec = SmallModel();
  spec.stages = 0;
  ExpectInvalid(spec.Validate(), "stages is 0; must be in [1, 4096]");
  spec.stages = 2;
  ExpectInvalid(spec.Validate(), "stage 1 of 2 holds no tensor");
  spec.tensors.back().stage = 1;
  EXPECT_TRUE(spec.Validate().ok());
  EXPECT_EQ(spec.StageOf(5), 1);
  ExpectInvalid(spec.ValidateFor(3), "a model of 2 pipeline stages needs a multiple of 2 workers");
  EXPECT_TRUE(spec.ValidateFor(4).ok());
  spec.tensors.back().stage = -1;
  ExpectInvalid(spec.Validate(), "stage -1 outside [0, 2)");
  // One stage: a model of tables only holds no tensor, and is valid.
  ModelSpec tables;
  tables.tables.push_back(TableSpec{"emb", 8});
  EXPECT_TRUE(tables.Validate().ok());
}

TEST(ModelSpecTest, ATableHasItsOwnConsistencyOrTheModels) {
  ModelSpec spec = SmallModel();
  spec.tables = {TableSpec{"emb", 8}, TableSpec{"ids", 4}};
  spec.tables[1].consistency = Consistency{ConsistencyMode::kAsync, 0};
  EXPECT_TRUE(spec.Validate().ok());
  EXPECT_EQ(spec.TableConsistency(0), spec.consistency);
  EXPECT_EQ(spec.ConsistencyOf(/*table=*/true, 1).mode, ConsistencyMode::kAsync);
  EXPECT_EQ(spec.ConsistencyOf(/*table=*/false, 1), spec.consistency);
  spec.tables[1].consistency = Consistency{ConsistencyMode::kSsp, -1};
  ExpectInvalid(spec.Validate(), "table 'ids': consistency");
}

TEST(ModelSpecTest, RejectsBadPlacement) {
  ModelSpec spec = SmallModel();
  spec.placement.slice_bytes = 3;
  ExpectInvalid(spec.Validate(), "slice_bytes is 3");

  spec = SmallModel();
  spec.placement.explicit_ranks["fc9.weight"] = 0;
  ExpectInvalid(spec.Validate(), "unknown tensor 'fc9.weight'");

  spec = SmallModel();
  spec.placement.explicit_ranks["fc1.weight"] = -1;
  ExpectInvalid(spec.Validate(), "tensor 'fc1.weight': server rank is -1");

  spec = SmallModel();
  spec.placement.table_shards = kMaxTableShards + 1;
  ExpectInvalid(spec.Validate(), "table_shards is 4097; must be in [0, 4096]");

  spec = SmallModel();
  spec.placement.explicit_ranks["fc1.weight"] = 5;  // checked against servers by PartitionMap
  spec.placement.slice_bytes = 4;
  EXPECT_TRUE(spec.Validate().ok());
}

}  // namespace
}  // namespace ps
