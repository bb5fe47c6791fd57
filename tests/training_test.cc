// Training end to end: real ps_worker processes on Fashion-MNIST, placement
// honoured by the servers, bad trainer flags and a diverging run.
#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/cluster_fixture.h"
#include "tests/job.h"
#include "worker/client/kv_client.h"
#include "worker/data/fashion_mnist.h"
#include "worker/train/trainer.h"

namespace ps {
namespace {

using testing::ChildProcess;
using ::testing::HasSubstr;
using testing::InProcessCluster;
using testing::Job;
using testing::JsonEvents;
using testing::JsonNumber;

bool HaveDataset() { return std::filesystem::exists(kDefaultFashionMnistDir); }
#define REQUIRE_DATASET()                                                                 \
  if (!HaveDataset())                                                                     \
  GTEST_SKIP() << "dataset-fashion-mnist is not installed at " << kDefaultFashionMnistDir \
               << " (scripts/install_deps.sh installs it)"

double DoneAccuracy(const std::string& out) {
  const std::vector<std::string> done = JsonEvents(out, "done");
  return done.empty() ? -1 : JsonNumber(done.back(), "test_accuracy");
}

TEST(TrainingTest, TwoWorkersTwoServersLearnFromTenThousandImagesInOneEpoch) {
  REQUIRE_DATASET();
  Job cluster;
  const absl::Status started =
      cluster.StartJob(2, 2, "ps_worker", {"--epochs=1", "--train_limit=10000", "--progress_every=100s"});
  ASSERT_TRUE(started.ok()) << started;
  cluster.ExpectAllExitZero(absl::Seconds(120));
  const double a0 = DoneAccuracy(cluster.workers()[0].stdout_text());
  const double a1 = DoneAccuracy(cluster.workers()[1].stdout_text());
  EXPECT_GE(a0, 0.75) << cluster.workers()[0].stdout_text();
  EXPECT_EQ(a0, a1) << "both workers evaluate the same final parameters";
}

TEST(TrainingTest, PipelinedAsyncWorkersLearnToo) {
  REQUIRE_DATASET();
  Job cluster;
  const absl::Status started = cluster.StartJob(
      1, 2, "ps_worker",
      {"--epochs=3", "--train_limit=10000", "--consistency=async", "--pipeline", "--progress_every=100s"});
  ASSERT_TRUE(started.ok()) << started;
  cluster.ExpectAllExitZero(absl::Seconds(120));
  const std::string out = cluster.workers()[0].stdout_text();
  EXPECT_THAT(out, HasSubstr("\"pipeline\":true"));
  EXPECT_GE(DoneAccuracy(out), 0.75) << out;
}

double DoneField(const std::string& out, const std::string& field) {
  const std::vector<std::string> done = JsonEvents(out, "done");
  return done.empty() ? -1 : JsonNumber(done.back(), field);
}

// A layer whose weight spans several slices is exchanged in pieces (its
// gradient pushed a slice at a time during the backward pass, its next
// parameters waited for a slice at a time in the forward pass): the same
// seed trains to the same model as with whole layers, up to the order of
// float sums, and to the very same model run after run, evaluation by
// evaluation. (The backward pass
// once computed the delta of the layer below after reporting the pieces,
// while their pulls were writing the next step's weights into the rows it
// read: pieces then differed from run to run by up to 0.4% accuracy.)
TEST(TrainingTest, LayersExchangedInPiecesTrainAsWholeLayersDo) {
  REQUIRE_DATASET();
  std::string outputs[3];
  const char* slices[3] = {"--slice_bytes=67108864", "--slice_bytes=262144", "--slice_bytes=262144"};
  for (int run = 0; run < 3; ++run) {
    Job cluster;
    const absl::Status started = cluster.StartJob(1, 1, "ps_worker",
                                                  {"--epochs=1", "--train_limit=4000", "--test_limit=2000",
                                                   "--eval_every=4", "--progress_every=100s", slices[run]});
    ASSERT_TRUE(started.ok()) << started;
    cluster.ExpectAllExitZero(absl::Seconds(120));
    outputs[run] = cluster.workers()[0].stdout_text();
  }
  EXPECT_THAT(outputs[0], HasSubstr("\"pieces\":\"\""));
  EXPECT_THAT(outputs[1], HasSubstr("\"pieces\":\"fc0.weight:7,fc1.weight:2\""));
  for (const std::string field : {"test_accuracy", "test_loss"}) {
    const double whole = DoneField(outputs[0], field), pieces = DoneField(outputs[1], field);
    ASSERT_GT(whole, 0) << field << " missing: " << outputs[0];
    EXPECT_NEAR(pieces, whole, 2e-3) << field;
    EXPECT_EQ(DoneField(outputs[2], field), pieces) << field << ": the same run in pieces twice differs";
  }
  // Every evaluation along the way too: each waits for all of the pieces
  // (it once read a layer whose pieces' pulls were still landing).
  const std::vector<std::string> evals[2] = {JsonEvents(outputs[1], "eval"), JsonEvents(outputs[2], "eval")};
  ASSERT_EQ(evals[0].size(), 16u) << outputs[1];
  ASSERT_EQ(evals[1].size(), evals[0].size()) << outputs[2];
  for (size_t i = 0; i < evals[0].size(); ++i) {
    for (const char* field : {"test_accuracy", "test_loss"}) {
      EXPECT_EQ(JsonNumber(evals[1][i], field), JsonNumber(evals[0][i], field)) << field << " at evaluation " << i;
    }
  }
  EXPECT_GE(DoneField(outputs[1], "test_accuracy"), 0.7);
}

TEST(TrainingTest, DivergingRunStopsNamingStepAndWorker) {
  REQUIRE_DATASET();
  Job cluster;
  const absl::Status started = cluster.StartJob(
      1, 1, "ps_worker", {"--optimizer=sgd", "--lr=1e30", "--lr_schedule=constant", "--train_limit=2000"});
  ASSERT_TRUE(started.ok()) << started;
  auto code = cluster.workers()[0].WaitExit(absl::Seconds(60));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 1);
  const std::string err = cluster.workers()[0].StderrText();
  EXPECT_THAT(err, HasSubstr("worker 0: loss is"));
  EXPECT_THAT(err, ::testing::ContainsRegex("step [0-9]+"));
}

struct FlagCase {
  std::vector<std::string> args;
  std::string names;
  bool needs_data = false;
};

class TrainerFlagTest : public ::testing::TestWithParam<FlagCase> {};

TEST_P(TrainerFlagTest, IsRefusedAtStartNamingTheFlag) {
  if (GetParam().needs_data) REQUIRE_DATASET();
  testing::ScopedTempDir temp;
  std::ofstream(temp.path() + "/bad_placement") << "fc7.weight 0\n";
  std::vector<std::string> args = {"--scheduler=127.0.0.1:1", "--register_timeout=5s"};
  for (std::string a : GetParam().args) {
    args.push_back(std::regex_replace(a, std::regex("TMP"), temp.path()));
  }
  auto p = ChildProcess::Start("ps_worker", args, temp.path() + "/stderr.log");
  ASSERT_TRUE(p.ok());
  auto code = p->WaitExit(absl::Seconds(30));
  ASSERT_TRUE(code.ok());
  EXPECT_NE(*code, 0);
  EXPECT_THAT(p->StderrText(), HasSubstr(GetParam().names));
}

INSTANTIATE_TEST_SUITE_P(
    Flags, TrainerFlagTest,
    ::testing::Values(FlagCase{{"--layers=784,abc,10"}, "layers: 'abc'"},
                      FlagCase{{"--layers=784,0,10"}, "layers: size 1 is 0"},
                      FlagCase{{"--layers=100,10"}, "first layer is 100 but the images have 784", true},
                      FlagCase{{"--batch_size=0"}, "batch_size"}, FlagCase{{"--optimizer=rmsprop"}, "rmsprop"},
                      FlagCase{{"--consistency=bsp"}, "consistency"}, FlagCase{{"--lr_schedule=warmup"}, "lr_schedule"},
                      FlagCase{{"--placement=TMP/missing_file"}, "placement"},
                      FlagCase{{"--placement=TMP/bad_placement"}, "no tensor named 'fc7.weight'", true},
                      FlagCase{{"--data_dir=TMP"}, "neither"}, FlagCase{{"--device=tpu"}, "tpu"},
                      FlagCase{{"--pipeline"}, "pipeline: computing on parameters one exchange old needs async"},
                      FlagCase{{"--pipeline", "--consistency=ssp:0"}, "not ssp:0"}));

// Model-parallel placement: every server holds exactly the tensors placed on
// it, as the servers themselves report.
class PlacementTest : public ::testing::Test {
 protected:
  // Registers the 784-512-256-10 model with `placement` on 3 servers and
  // returns, per server, the names of the tensors it holds (one per slice).
  std::vector<std::multiset<std::string>> Holdings(const std::string& placement) {
    auto cluster = InProcessCluster::Start(3, 1);
    EXPECT_TRUE(cluster.ok());
    KVClientOptions options;
    options.scheduler = (*cluster)->scheduler_endpoint();
    auto client = KVClient::Connect(options);
    EXPECT_TRUE(client.ok());
    ModelSpec model;
    const int sizes[] = {784, 512, 256, 10};
    for (int i = 0; i < 3; ++i) {
      model.tensors.push_back({absl::StrCat("fc", i, ".weight"), {sizes[i], sizes[i + 1]}, Initializer::He(i)});
      model.tensors.push_back({absl::StrCat("fc", i, ".bias"), {sizes[i + 1]}, Initializer::Zeros()});
    }
    auto spec = ParsePlacement(placement, model.tensors, 3, 1 << 20);
    EXPECT_TRUE(spec.ok()) << spec.status();
    model.placement = *spec;
    EXPECT_TRUE((*client)->RegisterModel(model).ok());
    std::vector<std::multiset<std::string>> held(3);
    for (int s = 0; s < 3; ++s) {
      auto stats = (*client)->GetServerStats(s);
      EXPECT_TRUE(stats.ok());
      for (uint32_t key : stats->held_keys) {
        const Slice& slice = (*client)->partition_map().slices()[key];
        EXPECT_EQ(slice.server, s);
        held[s].insert(model.tensors[slice.tensor].name);
      }
    }
    EXPECT_TRUE((*client)->Finish().ok());
    EXPECT_TRUE((*cluster)->Join(absl::Seconds(10)).ok());
    return held;
  }
  testing::ScopedTempDir temp_;
};

TEST_F(PlacementTest, LayerRulePutsEachLayerWholeOnItsServer) {
  auto held = Holdings("layer");
  EXPECT_EQ(held[0], (std::multiset<std::string>{"fc0.weight", "fc0.bias"}));
  EXPECT_EQ(held[1], (std::multiset<std::string>{"fc1.weight", "fc1.bias"}));
  EXPECT_EQ(held[2], (std::multiset<std::string>{"fc2.weight", "fc2.bias"}));
}

TEST_F(PlacementTest, FilePlacementIsHonouredExactlyAndTheRestIsBalanced) {
  const std::string file = temp_.path() + "/placement.txt";
  std::ofstream(file) << "fc0.weight 2\nfc1.weight 2\nfc2.weight 0\nfc2.bias 0\n";
  auto held = Holdings(file);
  // Explicit tensors live whole where the file says, however large.
  EXPECT_EQ(held[2].count("fc0.weight"), 1u);
  EXPECT_EQ(held[2].count("fc1.weight"), 1u);
  EXPECT_EQ(held[0].count("fc2.weight"), 1u);
  EXPECT_EQ(held[0].count("fc2.bias"), 1u);
  // The two small biases left go to the least loaded servers, 0 and 1.
  EXPECT_EQ(held[0].size() + held[1].size() + held[2].size(), 6u);
  EXPECT_EQ(held[2].size(), 2u);
}

TEST_F(PlacementTest, AutoSlicesLargeTensorsAcrossServers) {
  auto held = Holdings("auto");
  int servers_with_fc0 = 0;
  size_t slices = 0;
  for (const auto& h : held) {
    servers_with_fc0 += h.count("fc0.weight") > 0;
    slices += h.size();
  }
  EXPECT_EQ(servers_with_fc0, 2);  // 1.53 MiB: two slices of at most 1 MiB
  EXPECT_EQ(slices, 7u);           // 2 for fc0.weight, 1 for each of the 5 others
}

}  // namespace
}  // namespace ps
