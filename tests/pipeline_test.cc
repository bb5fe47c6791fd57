// Model parallelism across workers with real binaries: a group of
// two pipeline stages follows the loss curve of one worker holding the whole
// model, a stage killed with SIGKILL ends its own group with an error
// naming it while the other group finishes (sync, no hang), and a stage that
// comes back is refused with the reason.

#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/job.h"

namespace ps::testing {
namespace {

using ::testing::HasSubstr;

// The (test_loss, train_loss) of every mid-run "eval" event in `events`, in order.
std::vector<std::pair<double, double>> Curve(const std::string& events) {
  static const std::regex re(
      R"re(\{"event":"eval","rank":0,[^\n]*"train_loss":([-0-9.e]+),"test_accuracy":[-0-9.e]+,"test_loss":([-0-9.e]+),"final":false)re");
  std::vector<std::pair<double, double>> out;
  for (auto it = std::sregex_iterator(events.begin(), events.end(), re); it != std::sregex_iterator(); ++it) {
    double train = 0, test = 0;
    if (absl::SimpleAtod((*it)[1].str(), &train) && absl::SimpleAtod((*it)[2].str(), &test)) {
      out.push_back({test, train});
    }
  }
  return out;
}

double DoneAccuracy(const std::string& events) {
  static const std::regex re(R"re(\{"event":"done".*"test_accuracy":([0-9.]+))re");
  std::smatch m;
  double accuracy = -1;
  if (std::regex_search(events, m, re)) (void)absl::SimpleAtod(m[1].str(), &accuracy);
  return accuracy;
}

// One epoch of 8192 images, evaluated every 16 steps, by `workers` workers
// of `stages` stages; returns rank 0's stdout.
std::string TrainOneEpoch(int workers, int stages) {
  Job job;
  EXPECT_TRUE(job.StartScheduler(1, workers).ok());
  EXPECT_TRUE(job.StartServer(0).ok());
  for (int w = 0; w < workers; ++w) {
    EXPECT_TRUE(job.StartWorker("ps_worker", {absl::StrCat("--rank=", w), absl::StrCat("--stages=", stages),
                                              "--micro_batches=4", "--epochs=1", "--train_limit=8192",
                                              "--test_limit=2000", "--eval_every=16", "--seed=3"})
                    .ok());
  }
  job.ExpectAllExitZero();
  return job.workers()[0].stdout_text();
}

TEST(PipelineTest, TwoStagesFollowTheLossCurveOfOneWorkerHoldingTheWholeModel) {
  const std::string whole = TrainOneEpoch(1, 1);
  const std::string staged = TrainOneEpoch(2, 2);
  const auto a = Curve(whole), b = Curve(staged);
  ASSERT_EQ(a.size(), 7u) << whole;  // steps 16, 32, ..., 112 of 128
  ASSERT_EQ(b.size(), a.size()) << staged;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    // Same seed, data, order and updates: only the float sums of the
    // micro-batches differ. Stated tolerance: 0.01 in loss.
    EXPECT_NEAR(b[i].first, a[i].first, 0.01) << "test loss at evaluation " << i;
    EXPECT_NEAR(b[i].second, a[i].second, 0.01) << "train loss at evaluation " << i;
    worst = std::max({worst, std::abs(b[i].first - a[i].first), std::abs(b[i].second - a[i].second)});
  }
  EXPECT_GT(DoneAccuracy(staged), 0.7);
  EXPECT_NEAR(DoneAccuracy(staged), DoneAccuracy(whole), 0.01);
  std::printf("%s\n", JsonLine()
                          .Add("test", "pipeline_loss_curve")
                          .Add("evaluations", static_cast<int>(a.size()))
                          .Add("max_loss_difference", worst, 5)
                          .Add("accuracy_one_stage", DoneAccuracy(whole), 4)
                          .Add("accuracy_two_stages", DoneAccuracy(staged), 4)
                          .Str()
                          .c_str());
}

TEST(PipelineTest, ADeadStageEndsItsGroupNamingItAndTheOtherGroupFinishes) {
  Job job;
  ASSERT_TRUE(job.StartScheduler(1, 4, {"--heartbeat_timeout=2s"}).ok());
  ASSERT_TRUE(job.StartServer(0, {"--heartbeat_interval=0.2s"}).ok());
  for (int w = 0; w < 4; ++w) {
    ASSERT_TRUE(
        job.StartWorker("ps_worker", {absl::StrCat("--rank=", w), "--stages=2", "--epochs=3", "--train_limit=12000",
                                      "--test_limit=1000", "--progress_every=0.05s", "--heartbeat_interval=0.2s"})
            .ok());
  }
  // Stage 1 of group 0 has trained a few steps: kill it.
  ASSERT_TRUE(job.workers()[1].WaitForLine("{\"event\":\"progress\",\"rank\":1,", absl::Seconds(60)).ok())
      << job.workers()[1].StderrText();
  const absl::Time killed = absl::Now();
  job.workers()[1].Kill();
  // Its predecessor stops with an error naming it (no hang: the view says
  // it is gone once the scheduler declares it dead).
  absl::StatusOr<int> code = job.workers()[0].WaitExit(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << "stage 0 of group 0 still runs 30 s after its successor died";
  EXPECT_NE(*code, 0);
  EXPECT_THAT(job.workers()[0].StderrText(),
              HasSubstr("stage 1 of group 0 (worker 1) left the job; stage 0 of group 0 (worker 0) cannot go on"));
  const double failed_after = absl::ToDoubleSeconds(absl::Now() - killed);
  // Group 1 trains to the end; in sync its stages' steps complete without
  // the dead group's pushes.
  for (int w : {2, 3}) ExpectExitZero(job.workers()[w], absl::StrCat("worker ", w), absl::Seconds(90));
  for (int w : {2, 3}) EXPECT_GT(DoneAccuracy(job.workers()[w].stdout_text()), 0.7) << "worker " << w;
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(20));
  ExpectExitZero(job.servers()[0], "server 0", absl::Seconds(20));
  EXPECT_EQ(job.CountSchedulerEvents("job_ending", {{"dead_workers", "[0,1]"}}), 1);
  std::printf("%s\n", JsonLine()
                          .Add("test", "pipeline_stage_killed")
                          .Add("kill_to_group_failed_s", failed_after, 3)
                          .Add("survivors_accuracy", DoneAccuracy(job.workers()[2].stdout_text()), 4)
                          .Str()
                          .c_str());
}

TEST(PipelineTest, AStageThatHasPushedCannotRejoinAndSaysWhy) {
  Job job;
  ASSERT_TRUE(job.StartScheduler(1, 2, {"--heartbeat_timeout=2s"}).ok());
  ASSERT_TRUE(job.StartServer(0, {"--heartbeat_interval=0.2s"}).ok());
  const std::vector<std::string> flags = {"--stages=2",
                                          "--epochs=20",
                                          "--train_limit=4096",
                                          "--test_limit=500",
                                          "--progress_every=0.05s",
                                          "--heartbeat_interval=0.2s"};
  for (int w = 0; w < 2; ++w) {
    std::vector<std::string> f = flags;
    f.push_back(absl::StrCat("--rank=", w));
    ASSERT_TRUE(job.StartWorker("ps_worker", f).ok());
  }
  ASSERT_TRUE(job.workers()[1].WaitForLine("{\"event\":\"progress\",\"rank\":1,", absl::Seconds(60)).ok())
      << job.workers()[1].StderrText();
  job.workers()[1].Kill();
  ASSERT_TRUE(job.WaitForSchedulerEvents("node_dead", {{"role", "worker"}}, 1, absl::Seconds(20)));
  // Worker 1 comes back as rank 1: it has pushed steps of this job, so it is
  // refused with the reason (its group's steps would not agree), not left to
  // fail later on mismatched messages.
  std::vector<std::string> again = flags;
  again.push_back("--rank=1");
  ASSERT_TRUE(job.StartWorker("ps_worker", again).ok());
  absl::StatusOr<int> code = job.workers()[2].WaitExit(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << "the restarted stage still runs after 60 s";
  EXPECT_NE(*code, 0);
  EXPECT_THAT(job.workers()[2].StderrText(), HasSubstr("stage 1 of group 0 (worker 1) has pushed up to step"));
  EXPECT_THAT(job.workers()[2].StderrText(), HasSubstr("a pipeline stage cannot rejoin a running job"));
}

}  // namespace
}  // namespace ps::testing
