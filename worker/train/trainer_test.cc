#include "worker/train/trainer.h"

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

std::vector<TensorSpec> MlpTensors() {
  return {
      {"fc0.weight", {784, 512}, {}}, {"fc0.bias", {512}, {}}, {"fc1.weight", {512, 10}, {}}, {"fc1.bias", {10}, {}}};
}

class PlacementFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    std::ofstream(path_) << text;
    return path_;
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_ = ::testing::TempDir() + "/placement.txt";
};

TEST_F(PlacementFileTest, AutoAndLayerAreRules) {
  auto a = ParsePlacement("auto", MlpTensors(), 2, 4096);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->rule, PlacementRule::kAuto);
  EXPECT_EQ(a->slice_bytes, 4096u);
  auto l = ParsePlacement("layer", MlpTensors(), 2, 4096);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->rule, PlacementRule::kLayer);
}

TEST_F(PlacementFileTest, FileLinesBecomeExplicitRanks) {
  auto p = ParsePlacement(Write("# model-parallel\nfc0.weight 1\n  fc1.bias\t0  # tail comment\n\n"), MlpTensors(), 2,
                          1 << 20);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->explicit_ranks, (std::map<std::string, int32_t>{{"fc0.weight", 1}, {"fc1.bias", 0}}));
}

TEST_F(PlacementFileTest, BadFilesAreRefusedNamingFileAndLine) {
  EXPECT_EQ(ParsePlacement("/no/such/placement", MlpTensors(), 2, 1 << 20).status().code(),
            absl::StatusCode::kNotFound);
  struct Case {
    std::string text, message;
  } cases[] = {{"fc0.weight\n", "line 1: expected 'tensor_name server_rank'"},
               {"fc0.weight one\n", "expected 'tensor_name server_rank'"},
               {"\nfc9.weight 0\n", "line 2: no tensor named 'fc9.weight'"},
               {"fc0.weight 2\n", "server 2 does not exist (the job has 2 servers)"},
               {"fc0.weight -1\n", "server -1 does not exist"},
               {"fc0.weight 0\nfc0.weight 1\n", "placed twice"}};
  for (const Case& c : cases) {
    auto p = ParsePlacement(Write(c.text), MlpTensors(), 2, 1 << 20);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.message)) << c.text;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(path_));
  }
}

TEST(TrainerOptionsTest, ValidateNamesTheBadField) {
  struct Case {
    std::function<void(TrainerOptions&)> change;
    std::string names;
  } cases[] = {{[](TrainerOptions& o) { o.layers = {784}; }, "layers"},
               {[](TrainerOptions& o) {
                  o.layers = {784, 0, 10};
                },
                "layers: size 1 is 0"},
               {[](TrainerOptions& o) { o.batch_size = 0; }, "batch_size"},
               {[](TrainerOptions& o) { o.epochs = 0; }, "epochs"},
               {[](TrainerOptions& o) { o.optimizer.learning_rate = -1; }, "learning_rate"},
               {[](TrainerOptions& o) { o.eval_every = -5; }, "eval_every"}};
  for (const Case& c : cases) {
    TrainerOptions o;
    o.client.scheduler = "127.0.0.1:1";
    ASSERT_TRUE(o.Validate().ok()) << o.Validate();
    c.change(o);
    EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument) << c.names;
    EXPECT_THAT(std::string(o.Validate().message()), HasSubstr(c.names));
  }
}

TEST(TrainEventTest, RendersOneJsonObject) {
  TrainEvent e{"eval", {{"rank", "0"}, {"test_accuracy", "0.875"}, {"consistency", "\"sync\""}}};
  EXPECT_EQ(e.ToJson(), R"({"event":"eval","rank":0,"test_accuracy":0.875,"consistency":"sync"})");
}

}  // namespace
}  // namespace ps
