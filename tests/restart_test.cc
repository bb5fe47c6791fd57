// Restarts with real binaries and SIGKILL: a whole job restarted
// from its servers' checkpoints loses no push and applies none twice; a
// scheduler killed and restarted with --restore takes the job back while the
// nodes keep going; --rank is honoured when the job forms, and a rank asked
// for twice is refused. Each test prints the times it measured as a JSON line.

#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/base/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/cluster_fixture.h"
#include "tests/job.h"

namespace ps::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kDense = 60000;

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Heartbeats well inside the 2 s timeout, even on a loaded machine, and how
// long a node waits for a scheduler presumed down to come back.
std::vector<std::string> LivenessFlags(int scheduler_recovery_s) {
  return {"--heartbeat_interval=0.2s", "--heartbeat_timeout=2s",
          absl::StrCat("--scheduler_recovery_timeout=", scheduler_recovery_s, "s")};
}

std::vector<std::string> CheckpointFlags(const Job& job) {
  return {"--checkpoint_dir=" + job.checkpoints(), "--checkpoint_every=0s", "--checkpoint_every_pushes=20"};
}

// Every worker computes `step_ms` per step, worker 0 twice that: both are
// still mid-run when their job is cut, and they drift apart in async mode.
std::vector<std::string> ExchangeFlags(const std::string& mode, int steps, int step_ms) {
  return {absl::StrCat("--steps=", steps),           "--consistency=" + mode,
          absl::StrCat("--dense_elements=", kDense), "--slice_bytes=65536",
          absl::StrCat("--step_ms=", step_ms),       "--slow_rank=0",
          absl::StrCat("--slow_step_ms=", step_ms)};
}

// The exact sums every worker's "exact_sum OK" line must show.
std::string WantSums(int workers, int steps) {
  const double sum = ExpectedDenseSum(workers, steps, kDense);
  return absl::StrFormat("dense_sum=%.1f expected_sum=%.1f", sum, sum);
}

// Waits until every worker's "exact_sum OK" line shows the exact sums; each exits 0.
void ExpectWorkersExact(Job& job, int workers, int steps) {
  for (int w = 0; w < workers; ++w) {
    auto line = job.workers()[w].WaitForLine("exact_sum OK ", absl::Seconds(120));
    ASSERT_TRUE(line.ok()) << "worker " << w << ": " << line.status() << "\n" << job.workers()[w].StderrText();
    EXPECT_THAT(*line, HasSubstr(WantSums(workers, steps)));
    ExpectExitZero(job.workers()[w], absl::StrCat("worker ", w), absl::Seconds(30));
  }
}

// Waits until every server wrote checkpoint `number`.
bool ServersCheckpointed(const Job& job, int number, absl::Duration timeout) {
  return WaitFor(
      [&] {
        for (const std::string& log : job.server_logs()) {
          if (job.Events(log, "checkpoint", {{"number", absl::StrCat(number)}}).empty()) return false;
        }
        return true;
      },
      timeout);
}

// ---- a whole job killed (its scheduler gone for good) and restarted ----------

class WholeJobRestartTest : public ::testing::TestWithParam<const char*> {};

TEST_P(WholeJobRestartTest, RestoredJobEndsWithExactSumsAndHonouredRanks) {
  constexpr int kWorkers = 2, kSteps = 400;
  // 10 ms a step on every worker and 20 ms on rank 0 (ExchangeFlags): 400
  // steps take rank 0 8 s, so the job is still mid-run when the nodes give up
  // 3 s after the kill, and the restarted run has steps to do.
  constexpr int kStepMs = 10;
  Job job;
  ASSERT_TRUE(job.StartScheduler(2, kWorkers).ok());
  const std::vector<std::string> live = LivenessFlags(/*scheduler_recovery_s=*/1);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(job.StartServer(i, Concat(CheckpointFlags(job), live)).ok());
  const std::vector<std::string> exchange = Concat(ExchangeFlags(GetParam(), kSteps, kStepMs), live);
  for (int w = 0; w < kWorkers; ++w) ASSERT_TRUE(job.StartWorker("ps_exact_sum", exchange).ok());
  ASSERT_TRUE(ServersCheckpointed(job, 3, absl::Seconds(60)));

  // The scheduler dies and never comes back: every node gives up on its own.
  const absl::Time killed = absl::Now();
  job.scheduler().Kill();
  for (auto* group : {&job.workers(), &job.servers()}) {
    for (ChildProcess& p : *group) {
      auto code = p.WaitExit(absl::Seconds(30));
      ASSERT_TRUE(code.ok()) << "still running 30 s after the scheduler died: " << code.status();
      EXPECT_NE(*code, 0);
      EXPECT_THAT(p.StderrText(), HasSubstr("presumed dead"));
    }
  }
  const absl::Duration stopped = absl::Now() - killed;

  // A new job from the checkpoints: servers and workers under their ranks.
  const absl::Time restarted = absl::Now();
  ASSERT_TRUE(job.StartScheduler(2, kWorkers).ok());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(job.StartServer(i, Concat({"--restore_dir=" + job.checkpoints(), absl::StrCat("--rank=", i),
                                           "--checkpoint_dir=" + job.checkpoints(), "--checkpoint_every=0s",
                                           "--checkpoint_every_pushes=20"},
                                          live))
                    .ok());
  }
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_TRUE(job.StartWorker("ps_exact_sum", Concat(exchange, {absl::StrCat("--rank=", w)})).ok());
  }
  int64_t start_step[kWorkers];
  int exact = 0;  // workers whose final sums are exact: nothing lost, nothing applied twice
  for (int w = 0; w < kWorkers; ++w) {
    ChildProcess& worker = job.workers()[kWorkers + w];
    auto line = worker.WaitForLine("exact_sum OK ", absl::Seconds(120));
    ASSERT_TRUE(line.ok()) << "restarted worker " << w << ": " << line.status() << "\n" << worker.StderrText();
    EXPECT_THAT(*line, StartsWith(absl::StrCat("rank=", w, " ")));  // --rank honoured
    EXPECT_THAT(*line, HasSubstr(WantSums(kWorkers, kSteps)));
    exact += line->find(WantSums(kWorkers, kSteps)) != std::string::npos;
    start_step[w] = IntField(*line, "start_step");
    EXPECT_GT(start_step[w], 0) << "the restarted job should resume, not start over: " << *line;
  }
  const absl::Duration rerun = absl::Now() - restarted;
  for (int w = 0; w < kWorkers; ++w) {
    ExpectExitZero(job.workers()[kWorkers + w], absl::StrCat("restarted worker ", w), absl::Seconds(30));
  }
  for (int i = 0; i < 2; ++i) {
    ExpectExitZero(job.servers()[2 + i], absl::StrCat("restored server ", i), absl::Seconds(30));
    const std::string restored = absl::StrCat("server", i, ".restart");
    EXPECT_EQ(job.Events(restored, "checkpoint_restored").size(), 1);
    EXPECT_EQ(job.Events(restored, "new_incarnation").size(), 1) << "every worker is new";
  }
  ExpectExitZero(job.scheduler(), "new scheduler", absl::Seconds(30));
  std::printf("%s\n", JsonLine()
                          .Add("test", "whole_job_restart")
                          .Add("mode", GetParam())
                          .Add("steps", kSteps)
                          .AddRaw("start_steps", absl::StrCat("[", start_step[0], ",", start_step[1], "]"))
                          .Add("kill_to_all_stopped_s", absl::ToDoubleSeconds(stopped), 3)
                          .Add("restarted_run_s", absl::ToDoubleSeconds(rerun), 3)
                          .Add("workers", kWorkers)
                          .Add("workers_with_exact_sums", exact)
                          .Str()
                          .c_str());
}

INSTANTIATE_TEST_SUITE_P(Modes, WholeJobRestartTest, ::testing::Values("sync", "async"),
                         [](const auto& info) { return std::string(info.param); });

// ---- the scheduler killed and restarted with --restore ---------------------------

// The flags of a server of the scheduler-restart tests: checkpoints, and
// the liveness that outlasts a scheduler's restart.
std::vector<std::string> RestartServerFlags(const Job& job) {
  return Concat(CheckpointFlags(job), LivenessFlags(/*scheduler_recovery_s=*/30));
}

// A job of `servers` servers (RestartServerFlags, then `server_flags`) and
// `workers` ps_exact_sum workers (`mode`, `steps` of 10 ms) under a
// scheduler of flags `scheduler`, training: every server has checkpointed
// twice.
void StartTrainingJob(Job& job, int servers, int workers, const std::vector<std::string>& scheduler,
                      const std::string& mode, int steps, const std::vector<std::string>& server_flags = {}) {
  ASSERT_TRUE(job.StartScheduler(servers, workers, scheduler).ok());
  for (int i = 0; i < servers; ++i) {
    ASSERT_TRUE(job.StartServer(i, Concat(RestartServerFlags(job), server_flags)).ok());
  }
  const std::vector<std::string> live = LivenessFlags(/*scheduler_recovery_s=*/30);
  for (int w = 0; w < workers; ++w) {
    ASSERT_TRUE(job.StartWorker("ps_exact_sum", Concat(ExchangeFlags(mode, steps, 10), live)).ok());
  }
  ASSERT_TRUE(ServersCheckpointed(job, 2, absl::Seconds(60)));
}

// --elastic (one copy of each slice), a state file; a server frozen for up
// to 10 s (with a move or a drain asked of it) is not declared dead meanwhile.
std::vector<std::string> ElasticSchedulerFlags(const Job& job) {
  return {"--state_file=" + job.dir() + "/sched.state", "--heartbeat_timeout=15s", "--elastic"};
}

class SchedulerRestartTest : public ::testing::TestWithParam<const char*> {};

TEST_P(SchedulerRestartTest, NodesKeepGoingAndTheRestoredSchedulerEndsTheJob) {
  constexpr int kWorkers = 2, kSteps = 300;
  Job job;
  const std::vector<std::string> scheduler = {"--state_file=" + job.dir() + "/sched.state", "--heartbeat_timeout=2s"};
  StartTrainingJob(job, 2, kWorkers, scheduler, GetParam(), kSteps);
  if (HasFatalFailure()) return;
  const std::string endpoint = job.endpoint();

  const absl::Time killed = absl::Now();
  job.scheduler().Kill();
  // Every node notices (so that every node must also see it come back).
  std::vector<std::string> nodes = job.server_logs();
  nodes.insert(nodes.end(), job.worker_logs().begin(), job.worker_logs().end());
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const std::string& log : nodes) {
          if (job.Events(log, "scheduler_down").empty()) return false;
        }
        return true;
      },
      absl::Seconds(20)))
      << "not every node presumed the scheduler down within 20 s";
  ASSERT_TRUE(job.StartScheduler(2, kWorkers, Concat(scheduler, {"--restore"})).ok());
  const absl::Duration outage = absl::Now() - killed;
  EXPECT_EQ(job.endpoint(), endpoint) << "the restored scheduler binds the endpoint of the state file";

  for (int w = 0; w < kWorkers; ++w) {
    auto line = job.workers()[w].WaitForLine("exact_sum OK ", absl::Seconds(120));
    ASSERT_TRUE(line.ok()) << "worker " << w << ": " << line.status() << "\n" << job.workers()[w].StderrText();
    EXPECT_THAT(*line, HasSubstr(WantSums(kWorkers, kSteps)));
    EXPECT_EQ(IntField(*line, "start_step"), 0);
  }
  // None of the nodes was restarted: they all finish normally.
  for (int w = 0; w < kWorkers; ++w) ExpectExitZero(job.workers()[w], absl::StrCat("worker ", w), absl::Seconds(30));
  for (int i = 0; i < 2; ++i) ExpectExitZero(job.servers()[i], absl::StrCat("server ", i), absl::Seconds(30));
  ExpectExitZero(job.scheduler(), "restored scheduler", absl::Seconds(30));
  const absl::Duration all_done = absl::Now() - killed;
  EXPECT_EQ(job.Events("scheduler.restart", "restored", {{"state_file", job.dir() + "/sched.state"}}).size(), 1);
  for (const std::string& log : nodes) EXPECT_GE(job.Events(log, "scheduler_back").size(), 1) << log;
  std::printf("%s\n", JsonLine()
                          .Add("test", "scheduler_restart")
                          .Add("mode", GetParam())
                          .Add("heartbeat_timeout_s", 2)
                          .Add("outage_s", absl::ToDoubleSeconds(outage), 3)
                          .Add("kill_to_all_done_s", absl::ToDoubleSeconds(all_done), 3)
                          .Add("nodes_restarted", 0)
                          .Str()
                          .c_str());
}

INSTANTIATE_TEST_SUITE_P(Modes, SchedulerRestartTest, ::testing::Values("sync", "async"),
                         [](const auto& info) { return std::string(info.param); });

// A drain asked of a scheduler that is then killed (stopped first, so that
// it never reads the request) goes on with the restored one: the server
// asks again once it has re-registered, its slices move, and it leaves
// with exit 0; every worker ends with exact sums.
TEST(SchedulerRestartTest, ADrainAskedOfAKilledSchedulerIsAskedAgainOfTheRestoredOne) {
  constexpr int kWorkers = 2, kSteps = 300;
  Job job;
  const std::vector<std::string> scheduler = {"--state_file=" + job.dir() + "/sched.state", "--heartbeat_timeout=2s",
                                              "--replicas=2"};
  StartTrainingJob(job, 3, kWorkers, scheduler, "sync", kSteps, {"--drain"});
  if (HasFatalFailure()) return;
  const int two = job.ServerWithRank(2);
  ASSERT_GE(two, 0);
  const std::string log = absl::StrCat("server", two);
  ASSERT_EQ(kill(job.scheduler().pid(), SIGSTOP), 0);
  ASSERT_EQ(kill(job.servers()[two].pid(), SIGTERM), 0);
  ASSERT_TRUE(job.WaitForEvents(log, "drain_asked", {{"again", "false"}}, 1, absl::Seconds(10)));
  job.scheduler().Kill();  // the request it never read is lost with it
  ASSERT_TRUE(job.StartScheduler(3, kWorkers, Concat(scheduler, {"--restore"})).ok());
  ExpectExitZero(job.servers()[two], "server 2 (drained through the restored scheduler)", absl::Seconds(60));
  EXPECT_EQ(job.Events(log, "drain_asked", {{"again", "true"}}).size(), 1);
  EXPECT_EQ(job.Events("scheduler.restart", "server_left", {{"rank", "2"}}).size(), 1);
  ExpectWorkersExact(job, kWorkers, kSteps);
  for (int i = 0; i < 3; ++i) {
    if (i != two) ExpectExitZero(job.servers()[i], absl::StrCat("server process ", i), absl::Seconds(30));
  }
  ExpectExitZero(job.scheduler(), "restored scheduler", absl::Seconds(30));
}

// --elastic, one server: a second joins and the scheduler is SIGKILLed with
// the first move under way (server 0, which must copy the slice, frozen
// until then), and restarted with --restore. The restored scheduler, which
// never heard the move's answer (server 0 copied the slice once thawed),
// plans the balance again once both servers are back and makes its moves;
// every worker ends with exact sums.
TEST(SchedulerRestartTest, MovesCutShortByTheSchedulersDeathAreMadeByTheRestoredOne) {
  constexpr int kWorkers = 2, kSteps = 300;
  Job job;
  const std::vector<std::string> scheduler = ElasticSchedulerFlags(job);
  StartTrainingJob(job, 1, kWorkers, scheduler, "sync", kSteps);
  if (HasFatalFailure()) return;
  ASSERT_EQ(kill(job.servers()[0].pid(), SIGSTOP), 0);
  ASSERT_TRUE(job.StartServer(1, Concat(RestartServerFlags(job), {"--join"})).ok());
  const bool planned = job.WaitForEvents("scheduler", "moves_planned", {}, 1, absl::Seconds(10));
  job.scheduler().Kill();
  ASSERT_EQ(kill(job.servers()[0].pid(), SIGCONT), 0);
  ASSERT_TRUE(planned) << job.Log("scheduler");
  ASSERT_TRUE(job.StartScheduler(1, kWorkers, Concat(scheduler, {"--restore"})).ok());
  ASSERT_TRUE(job.WaitForEvents("scheduler.restart", "slice_moved", {{"to_go", "0"}}, 1))
      << job.Log("scheduler.restart");
  EXPECT_EQ(job.Events("scheduler.restart", "moves_planned", {{"servers", "2"}}).size(), 1);
  // Every slice the plan moves is copied to server 1 (one of them may have
  // been copied already by the move the dead scheduler asked for).
  EXPECT_GE(job.Events(job.server_logs().back(), "copy_held").size(), 3) << job.Log(job.server_logs().back());
  ExpectWorkersExact(job, kWorkers, kSteps);
  for (int i = 0; i < 2; ++i) ExpectExitZero(job.servers()[i], absl::StrCat("server ", i), absl::Seconds(30));
  ExpectExitZero(job.scheduler(), "restored scheduler", absl::Seconds(30));
  // The model taken out of both servers' checkpoints (one copy of each slice): every push in it once.
  absl::StatusOr<double> exported = ExportedSum(job.checkpoints(), job.dir() + "/model.npz", "dense");
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(*exported, ExpectedDenseSum(kWorkers, kSteps, kDense));
}

// A replicated job's scheduler killed and restored as the docs show it
// (`ps_scheduler --restore --state_file=PATH`, the job's other flags left
// out) keeps the job's configuration: a restore that contradicts it
// (--replicas=1) is refused by name with exit 2 and changes nothing; the
// documented one keeps two copies of every slice, so a server may still
// join (a one-copy job refuses joins), and every worker ends exact.
TEST(SchedulerRestartTest, AReplicatedJobRestoredAsDocumentedKeepsItsCopiesAndTakesJoins) {
  constexpr int kWorkers = 2, kSteps = 400;
  Job job;
  const std::string state = "--state_file=" + job.dir() + "/sched.state";
  StartTrainingJob(job, 2, kWorkers, {state, "--heartbeat_timeout=2s", "--replicas=2"}, "sync", kSteps);
  if (HasFatalFailure()) return;
  job.scheduler().Kill();

  EXPECT_FALSE(job.StartScheduler(2, kWorkers, {state, "--restore", "--replicas=1"}).ok());
  absl::StatusOr<int> refused = job.scheduler().WaitExit(absl::Seconds(20));
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(*refused, 2);
  EXPECT_THAT(job.Log("scheduler.restart"),
              HasSubstr("--replicas=1 contradicts the job in " + job.dir() + "/sched.state, which has --replicas=2"));

  ASSERT_TRUE(job.StartScheduler(2, kWorkers, {state, "--restore"}).ok());
  const std::string restored = "scheduler.restart2";
  ASSERT_TRUE(job.WaitForEvents(restored, "restored", {}, 1, absl::Seconds(20)));
  EXPECT_EQ(job.Events(restored, "restored", {{"replicas", "2"}, {"elastic", "false"}}).size(), 1);
  ASSERT_TRUE(job.StartServer(2, Concat(RestartServerFlags(job), {"--join"})).ok());
  ASSERT_TRUE(job.WaitForEvents(restored, "server_joined", {{"rank", "2"}}, 1, absl::Seconds(30))) << job.Log(restored);
  ExpectWorkersExact(job, kWorkers, kSteps);
  for (int i = 0; i < 3; ++i) ExpectExitZero(job.servers()[i], absl::StrCat("server ", i), absl::Seconds(30));
  ExpectExitZero(job.scheduler(), "restored scheduler", absl::Seconds(30));
}

// An operator's drain (ps_scheduler --drain_server=1) under way when the
// scheduler is SIGKILLed (server 1, the one leaving, frozen until then so
// that its slices are still to move), and the scheduler restored: the drain
// tool asks the restored scheduler again, which drains the server; it
// leaves with exit 0, the tool exits 0, and every worker ends with exact
// sums.
TEST(SchedulerRestartTest, AnOperatorsDrainCutShortByTheSchedulersDeathIsMadeByTheRestoredOne) {
  constexpr int kWorkers = 2, kSteps = 300;
  Job job;
  const std::vector<std::string> scheduler = ElasticSchedulerFlags(job);
  StartTrainingJob(job, 2, kWorkers, scheduler, "sync", kSteps);
  if (HasFatalFailure()) return;
  const int one = job.ServerWithRank(1);
  ASSERT_GE(one, 0);
  ASSERT_EQ(kill(job.servers()[one].pid(), SIGSTOP), 0);
  absl::StatusOr<ChildProcess> drain =
      ChildProcess::Start("ps_scheduler", {"--drain_server=1", "--scheduler=" + job.endpoint(), "--drain_timeout=90s"},
                          job.dir() + "/drain.log");
  ASSERT_TRUE(drain.ok()) << drain.status();
  const bool asked = job.WaitForEvents("scheduler", "drain_started", {{"rank", "1"}}, 1, absl::Seconds(10));
  job.scheduler().Kill();
  ASSERT_EQ(kill(job.servers()[one].pid(), SIGCONT), 0);
  ASSERT_TRUE(asked) << job.Log("scheduler");
  ASSERT_TRUE(job.StartScheduler(2, kWorkers, Concat(scheduler, {"--restore"})).ok());
  const absl::StatusOr<int> code = drain->WaitExit(absl::Seconds(90));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << drain->stdout_text() << drain->StderrText();
  ExpectExitZero(job.servers()[one], "server 1 (drained through the restored scheduler)", absl::Seconds(30));
  EXPECT_EQ(job.Events("scheduler.restart", "server_left", {{"rank", "1"}}).size(), 1);
  ExpectWorkersExact(job, kWorkers, kSteps);
  ExpectExitZero(job.servers()[job.ServerWithRank(0)], "server 0", absl::Seconds(30));
  ExpectExitZero(job.scheduler(), "restored scheduler", absl::Seconds(30));
}

// ---- --rank at formation -----------------------------------------------------------

const std::vector<std::string> kSmallExchange = {"--steps=5", "--dense_elements=1000"};

// Waits until the scheduler took `n` registrations (servers and workers).
bool Registered(const Job& job, int n) {
  return job.WaitForEvents("scheduler", "registered", {}, n, absl::Seconds(30));
}

// A job of 1 server and 2 workers whose server has registered (its rank
// comes once the job has formed).
void StartSmallJob(Job& job) {
  ASSERT_TRUE(job.StartScheduler(1, 2).ok());
  ASSERT_TRUE(job.StartServer(0).ok());
  ASSERT_TRUE(Registered(job, 1)) << job.Log("scheduler");
}

TEST(RankAtFormationTest, WorkersGetTheRanksTheyAskFor) {
  Job job;
  StartSmallJob(job);
  // A registers first asking for rank 1; B, asking for none, gets rank 0.
  ASSERT_TRUE(job.StartWorker("ps_exact_sum", Concat(kSmallExchange, {"--rank=1"})).ok());
  ASSERT_TRUE(Registered(job, 2)) << job.Log("scheduler");
  ASSERT_TRUE(job.StartWorker("ps_exact_sum", kSmallExchange).ok());
  for (int w = 0; w < 2; ++w) {
    auto line = job.workers()[w].WaitForLine("exact_sum OK ", absl::Seconds(60));
    ASSERT_TRUE(line.ok()) << "worker " << w << ": " << line.status() << "\n" << job.workers()[w].StderrText();
    EXPECT_THAT(*line, StartsWith(w == 0 ? "rank=1 " : "rank=0 "));
    EXPECT_EQ(IntField(*line, "start_step"), 0);
  }
  for (int w = 0; w < 2; ++w) ExpectExitZero(job.workers()[w], absl::StrCat("worker ", w), absl::Seconds(30));
  ExpectExitZero(job.servers()[0], "server", absl::Seconds(30));
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
}

TEST(RankAtFormationTest, SecondWorkerAskingForATakenRankIsRefused) {
  Job job;
  StartSmallJob(job);
  ASSERT_TRUE(job.StartWorker("ps_exact_sum", Concat(kSmallExchange, {"--rank=0"})).ok());
  ASSERT_TRUE(Registered(job, 2)) << job.Log("scheduler");
  ASSERT_TRUE(job.StartWorker("ps_exact_sum", Concat(kSmallExchange, {"--rank=0"})).ok());
  auto code = job.workers()[1].WaitExit(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << "the second --rank=0 is still running: " << code.status();
  EXPECT_NE(*code, 0);
  EXPECT_THAT(job.workers()[1].StderrText(), HasSubstr("ALREADY_EXISTS"));
  EXPECT_THAT(job.workers()[1].StderrText(), HasSubstr("rank 0 is already taken"));
  // The job is still forming: a worker asking for the free rank completes it.
  ASSERT_TRUE(job.StartWorker("ps_exact_sum", Concat(kSmallExchange, {"--rank=1"})).ok());
  for (int w : {0, 2}) {
    auto line = job.workers()[w].WaitForLine("exact_sum OK ", absl::Seconds(60));
    ASSERT_TRUE(line.ok()) << "worker " << w << ": " << line.status() << "\n" << job.workers()[w].StderrText();
    EXPECT_THAT(*line, StartsWith(w == 0 ? "rank=0 " : "rank=1 "));
  }
  for (int w : {0, 2}) ExpectExitZero(job.workers()[w], absl::StrCat("worker ", w), absl::Seconds(30));
  ExpectExitZero(job.servers()[0], "server", absl::Seconds(30));
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
}

TEST(RankAtFormationTest, ServersGetTheRanksTheyAskForAndCannotRejoinWithoutACheckpoint) {
  // What a Kubernetes StatefulSet relies on: pod ordinal = server rank.
  Job job;
  ASSERT_TRUE(job.StartScheduler(2, 1).ok());
  ASSERT_TRUE(job.StartServer(0, {"--rank=1"}).ok());  // registers first, asks for rank 1
  ASSERT_TRUE(Registered(job, 1)) << job.Log("scheduler");
  ASSERT_TRUE(job.StartServer(1).ok());
  // Long enough (>= 10 s) for the refusal below to come while the job runs.
  ASSERT_TRUE(job.StartWorker("ps_exact_sum", {"--steps=1000", "--dense_elements=1000", "--step_ms=10"}).ok());
  ASSERT_TRUE(job.WaitForEvents("scheduler", "ranked", {{"role", "worker"}, {"rank", "0"}}, 1, absl::Seconds(30)))
      << job.Log("scheduler");
  // A third server asking for rank 0 of the running job, with no checkpoint,
  // is refused: its fresh slices would replace trained ones.
  ASSERT_TRUE(job.StartServer(2, {"--rank=0"}).ok());
  auto code = job.servers()[2].WaitExit(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << "the rank-0 server without a checkpoint is still running: " << code.status();
  EXPECT_NE(*code, 0);
  EXPECT_THAT(job.servers()[2].StderrText(), HasSubstr("cannot rejoin the running job without its checkpoint"));
  auto line = job.workers()[0].WaitForLine("exact_sum OK ", absl::Seconds(60));
  ASSERT_TRUE(line.ok()) << line.status() << "\n" << job.workers()[0].StderrText();
  ExpectExitZero(job.workers()[0], "worker", absl::Seconds(30));
  for (int i = 0; i < 2; ++i) ExpectExitZero(job.servers()[i], absl::StrCat("server ", i), absl::Seconds(30));
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
  EXPECT_EQ(job.Events("server0", "shutdown", {{"rank", "1"}}).size(), 1);
  EXPECT_EQ(job.Events("server1", "shutdown", {{"rank", "0"}}).size(), 1);
}

}  // namespace
}  // namespace ps::testing
