#include "worker/models/mlp_stage.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model/initializer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/compute/compute_backend.h"
#include "worker/models/mlp.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BalanceStages, MinimisesTheLargestStage) {
  // Layer costs 401408, 131072, 2560: the first layer alone outweighs the rest.
  EXPECT_THAT(*BalanceStages({784, 512, 256, 10}, 2), ElementsAre(LayerRange{0, 1}, LayerRange{1, 3}));
  EXPECT_THAT(*BalanceStages({784, 512, 256, 10}, 3),
              ElementsAre(LayerRange{0, 1}, LayerRange{1, 2}, LayerRange{2, 3}));
  // 784-4096-4096-4096-10: 3.2M, 16.8M, 16.8M, 41k multiply-adds per row.
  EXPECT_THAT(*BalanceStages({784, 4096, 4096, 4096, 10}, 2), ElementsAre(LayerRange{0, 2}, LayerRange{2, 4}));
  EXPECT_THAT(*BalanceStages({784, 10}, 1), ElementsAre(LayerRange{0, 1}));
  EXPECT_THAT(BalanceStages({784, 512, 10}, 3).status().message(), HasSubstr("2 layers cannot be split into 3"));
  EXPECT_FALSE(BalanceStages({784, 10}, 0).ok());
}

TEST(StagesOfCounts, GivesTheRangesAndRefusesCountsThatDoNotAddUp) {
  const std::vector<int> layers = {784, 64, 64, 64, 10};  // 4 layers
  auto ranges = StagesOfCounts(layers, {1, 3});
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_EQ(*ranges, (std::vector<LayerRange>{{0, 1}, {1, 4}}));
  EXPECT_THAT(StagesOfCounts(layers, {2, 1}).status().message(),
              HasSubstr("the stages hold 3 layers; the model has 4"));
  EXPECT_THAT(StagesOfCounts(layers, {0, 4}).status().message(), HasSubstr("stage 0 gets 0 layers"));
  EXPECT_THAT(StagesOfCounts(layers, {3, 3}).status().message(), HasSubstr("stage 1 gets 3 layers"));
}

TEST(MlpStage, BadRangesAndSizesAreRefusedByName) {
  auto backend = CreateBackend({});
  ASSERT_TRUE(backend.ok());
  EXPECT_THAT(MlpStage::Create({784, 512, 10}, {1, 3}, 8, 1, backend->get()).status().message(),
              HasSubstr("stage layers [1, 3) are not a range of the 2 layers"));
  EXPECT_THAT(MlpStage::Create({784, 512, 10}, {1, 1}, 8, 1, backend->get()).status().message(),
              HasSubstr("not a range"));
  EXPECT_THAT(MlpStage::Create({784, 0, 10}, {0, 1}, 8, 1, backend->get()).status().message(),
              HasSubstr("layer 1 has size 0"));
  EXPECT_FALSE(MlpStage::Create({784, 512, 10}, {0, 1}, 0, 1, backend->get()).ok());
  EXPECT_FALSE(MlpStage::Create({784, 512, 10}, {0, 1}, 8, 1, nullptr).ok());
}

// A K-stage pipeline of `ranges` over M micro-batches of `micro` rows (GPipe:
// every forward, then every backward, last micro-batch first), in one process,
// against Mlp::TrainStep on the whole batch: same loss, same gradients.
struct Case {
  std::vector<LayerRange> ranges;
  int batch;
  int micro;
};

class PipelineGradientTest : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineGradientTest, EqualsTheOneStageGradientsToFloatTolerance) {
  const std::vector<int> layers = {784, 64, 48, 32, 10};
  const Case c = GetParam();
  auto backend = CreateBackend({});
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(c.batch) * layers[0]);
  for (float& v : x) v = pixel(rng);
  std::vector<int32_t> labels(c.batch);
  for (int r = 0; r < c.batch; ++r) labels[r] = (r * 7 + 3) % 10;

  auto whole = Mlp::Create(layers, c.batch, backend->get());
  ASSERT_TRUE(whole.ok());
  const std::vector<TensorSpec> specs = (*whole)->TensorSpecs(11);
  for (size_t t = 0; t < specs.size(); ++t) FillInitialValues(specs[t], 0, (*whole)->host_param(t));
  for (int l = 0; l < (*whole)->num_layers(); ++l) (*whole)->ParamsToDevice(l);
  int correct = 0;
  const float want_loss = (*whole)->TrainStep(x.data(), labels.data(), c.batch, nullptr, &correct);

  const int micro_batches = (c.batch + c.micro - 1) / c.micro;
  std::vector<std::unique_ptr<MlpStage>> stages;
  for (const LayerRange& range : c.ranges) {
    auto s = MlpStage::Create(layers, range, c.micro, micro_batches, backend->get());
    ASSERT_TRUE(s.ok()) << s.status();
    for (int t = 0; t < (*s)->num_tensors(); ++t) {
      const absl::Span<float> src = (*whole)->host_param(2 * range.first + t);
      std::copy(src.begin(), src.end(), (*s)->host_param(t).begin());
    }
    (*s)->ParamsToDevice();
    (*s)->BeginStep(c.batch);
    stages.push_back(*std::move(s));
  }
  const size_t k = stages.size();
  // boundary[j][m]: micro-batch m's activations out of stage j (its
  // gradient on the way back).
  std::vector<std::vector<std::vector<float>>> acts(k), grads(k);
  double loss = 0;
  int pipeline_correct = 0;
  for (int m = 0; m < micro_batches; ++m) {
    const int rows = std::min(c.micro, c.batch - m * c.micro);
    const float* in = x.data() + static_cast<size_t>(m) * c.micro * layers[0];
    for (size_t j = 0; j < k; ++j) {
      acts[j].emplace_back(static_cast<size_t>(rows) * stages[j]->out_width());
      const float l =
          stages[j]->Forward(m, in, rows, labels.data() + m * c.micro, acts[j].back().data(), &pipeline_correct);
      if (j + 1 == k) loss += static_cast<double>(l) * rows / c.batch;
      in = acts[j].back().data();
    }
  }
  for (int m = micro_batches - 1; m >= 0; --m) {
    const int rows = std::min(c.micro, c.batch - m * c.micro);
    const float* grad_out = nullptr;
    for (size_t j = k; j-- > 0;) {
      grads[j].assign(1, std::vector<float>(static_cast<size_t>(rows) * stages[j]->in_width()));
      stages[j]->Backward(m, grad_out, grads[j][0].data());
      grad_out = grads[j][0].data();
    }
  }
  EXPECT_NEAR(loss, want_loss, 1e-5);
  EXPECT_EQ(pipeline_correct, correct);
  for (size_t j = 0; j < k; ++j) {
    stages[j]->FinishStep();
    for (int t = 0; t < stages[j]->num_tensors(); ++t) {
      const absl::Span<const float> want = (*whole)->host_grad(2 * c.ranges[j].first + t);
      const absl::Span<const float> got = stages[j]->host_grad(t);
      float scale = 1e-3f;
      for (float v : want) scale = std::max(scale, std::abs(v));
      float worst = 0;
      for (size_t e = 0; e < want.size(); ++e) worst = std::max(worst, std::abs(got[e] - want[e]));
      EXPECT_LE(worst, 1e-5f * scale + 1e-7f) << "stage " << j << " tensor " << t << " (scale " << scale << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Splits, PipelineGradientTest,
    ::testing::Values(Case{{{0, 4}}, 24, 24},                          // one stage, one micro-batch
                      Case{{{0, 4}}, 24, 10},                          // one stage, micro-batches 10, 10, 4
                      Case{{{0, 2}, {2, 4}}, 24, 24},                  // two stages
                      Case{{{0, 1}, {1, 4}}, 24, 8},                   // two stages, three micro-batches
                      Case{{{0, 1}, {1, 2}, {2, 4}}, 25, 4},           // three stages, 7 micro-batches, last of 1
                      Case{{{0, 1}, {1, 2}, {2, 3}, {3, 4}}, 16, 2}),  // one layer per stage
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(info.param.ranges.size(), "stages_batch", info.param.batch, "_micro", info.param.micro);
    });

}  // namespace
}  // namespace ps
