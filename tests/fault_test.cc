// Faults with real binaries and SIGKILL: a server killed and restarted from
// its checkpoint loses no push and applies none twice; a dead worker does not
// hang a sync job; a dead scheduler that never comes back stops everyone,
// servers saving a final checkpoint; training survives a server restart; a
// server initialising a large model is not taken for dead. Each
// test prints the times it measured (detection, recovery) as a JSON line for
// the results page. The shared pieces (Job, WaitFor, ...) are in tests/job.h.

#include <poll.h>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
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

// ---- a server killed with SIGKILL and restarted from its checkpoint ----------

// The run: 2 servers, 2 workers, a dense tensor of kN elements (and, with
// the disk tier, a table of 40,000 rows on servers whose memory holds a
// fraction of them: the rest on disk, read back every step).
struct RestartRun {
  const char* mode;
  int64_t dense = 200000;
  bool disk_tier = false;
  // The workers' --compression: their sums are those of their simulated
  // compressors (ps_exact_sum checks), the same as a run without the kill.
  const char* compression = "none";
};

// The servers' flags beyond the checkpoint ones: with the disk tier, a
// 3 MiB budget of which 2 go to the store, and a directory per server
// process (the restarted server takes the one of the server it replaces).
std::vector<std::string> DiskTierFlags(const Job& job, const RestartRun& run, int server) {
  if (!run.disk_tier) return {};
  return {"--max_memory_mb=3", "--table_disk_cache_mb=2",
          absl::StrCat("--table_disk_dir=", job.dir(), "/disk", server)};
}

void ExpectExactSumsAcrossAServerRestart(const RestartRun& run) {
  constexpr int kWorkers = 2, kSteps = 150;
  const int64_t kN = run.dense;
  Job job;
  ASSERT_TRUE(job.StartScheduler(2, kWorkers).ok());
  // A checkpoint every 25 pushes: a kill leaves up to 24 pushes the
  // checkpoint lacks, which the workers must re-send.
  const std::vector<std::string> ckpt = {"--checkpoint_dir=" + job.checkpoints(), "--checkpoint_every_pushes=25",
                                         "--checkpoint_every=0s"};
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> flags = ckpt;
    for (const std::string& f : DiskTierFlags(job, run, i)) flags.push_back(f);
    ASSERT_TRUE(job.StartServer(i, flags).ok());
  }
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_TRUE(
        job.StartWorker("ps_exact_sum",
                        {absl::StrCat("--steps=", kSteps), "--consistency=" + std::string(run.mode),
                         absl::StrCat("--dense_elements=", kN), "--slow_rank=0", "--slow_step_ms=15",
                         "--server_recovery_timeout=60s", absl::StrCat("--table_ids=", run.disk_tier ? 40000 : 200),
                         absl::StrCat("--compression=", run.compression)})
            .ok());
  }
  // Kill the server of rank 1 once it has written two checkpoints.
  const int victim = job.ServerWithRank(1);
  ASSERT_GE(victim, 0);
  const std::string victim_log = absl::StrCat("server", victim);
  ASSERT_TRUE(job.WaitForEvents(victim_log, "checkpoint", {{"number", "2"}}, 1)) << job.Log(victim_log);
  const absl::Time killed = absl::Now();
  job.servers()[victim].Kill();
  std::vector<std::string> restart = {"--restore_dir=" + job.checkpoints(), "--rank=1", "--checkpoint_every_pushes=25",
                                      "--checkpoint_every=0s"};
  for (const std::string& f : DiskTierFlags(job, run, victim)) restart.push_back(f);  // the victim's store
  ASSERT_TRUE(job.StartServer(1, restart).ok());
  // Every worker ends with the exact sum of every push of every worker, and
  // every pull saw what the consistency model promises (ps_exact_sum checks).
  const bool compressed = std::string(run.compression) != "none";
  const std::string want = absl::StrFormat("dense_sum=%.1f expected_sum=%.1f", ExpectedDenseSum(kWorkers, kSteps, kN),
                                           ExpectedDenseSum(kWorkers, kSteps, kN));
  double expected = ExpectedDenseSum(kWorkers, kSteps, kN);  // compressed: what the workers simulated
  int exact = 0;  // workers whose final sums are exact: nothing lost, nothing applied twice
  int64_t resent = 0;
  for (int w = 0; w < kWorkers; ++w) {
    auto line = job.workers()[w].WaitForLine("exact_sum OK ", absl::Seconds(120));
    ASSERT_TRUE(line.ok()) << "worker " << w << ": " << line.status() << "\n" << job.workers()[w].StderrText();
    if (compressed) {
      // Less than the uncompressed sum by the last residuals, and exactly what the simulation says.
      expected = DoubleField(*line, "expected_sum");
      EXPECT_LT(expected, ExpectedDenseSum(kWorkers, kSteps, kN)) << *line;
      EXPECT_EQ(DoubleField(*line, "dense_sum"), expected) << *line;
      exact += DoubleField(*line, "dense_sum") == expected;
    } else {
      EXPECT_THAT(*line, HasSubstr(want));
      exact += line->find(want) != std::string::npos;
    }
    // The client's own counters: server 1 came back to this worker once (its
    // replacement, restored from the checkpoint, rejoined under rank 1), and
    // the replay went through shared memory again, both servers being on a
    // channel at the end.
    EXPECT_EQ(IntField(*line, "servers_recovered"), 1) << *line;
    EXPECT_EQ(IntField(*line, "shm_servers"), 2) << *line;
    resent += std::max<int64_t>(IntField(*line, "pushes_resent"), 0);
    // With the disk tier, thousands of trained rows ended on disk (40,000
    // rows pulled every step, about 16,000 fit each server), and were exact
    // all the same.
    if (run.disk_tier) {
      EXPECT_GT(IntField(*line, "table_disk_rows"), 1000) << *line;
    }
  }
  // Pushes after the last checkpoint were re-sent (and those it held
  // dropped): the kill came after two checkpoints, in the middle of the run.
  EXPECT_GT(resent, 0);
  const absl::Duration recovered = absl::Now() - killed;
  for (int w = 0; w < kWorkers; ++w) ExpectExitZero(job.workers()[w], absl::StrCat("worker ", w), absl::Seconds(30));
  ExpectExitZero(job.servers()[1 - victim], "server 0", absl::Seconds(30));
  ExpectExitZero(job.servers()[2], "restarted server 1", absl::Seconds(30));
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
  // The trained model out of the final checkpoints, the restored server's
  // among them: its dense tensor holds every push of every worker once.
  absl::StatusOr<double> exported_sum = ExportedSum(job.checkpoints(), job.dir() + "/model.npz", "dense");
  ASSERT_TRUE(exported_sum.ok()) << exported_sum.status();
  EXPECT_EQ(*exported_sum, expected);
  std::printf("%s\n", JsonLine()
                          .Add("test", run.disk_tier ? "server_restart_disk_tier" : "server_restart")
                          .Add("mode", run.mode)
                          .Add("compression", run.compression)
                          .Add("kill_to_all_workers_done_s", absl::ToDoubleSeconds(recovered), 3)
                          .Add("pushes_resent", resent)
                          .Add("workers", kWorkers)
                          .Add("workers_with_exact_sums", exact)
                          .Str()
                          .c_str());
}

class ServerRestartTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ServerRestartTest, ExactSumWithNoPushLostOrAppliedTwice) { ExpectExactSumsAcrossAServerRestart({GetParam()}); }

// The same with the tables' disk tier: the checkpoint's snapshot of it
// restores the rows that were on disk, and the re-sent pushes apply to them
// once.
TEST_P(ServerRestartTest, ExactSumWithTheTableOnDisk) {
  ExpectExactSumsAcrossAServerRestart({.mode = GetParam(), .dense = 1000, .disk_tier = true});
}

// Pushes compressed to the top 10% with error feedback: the
// re-sent pushes are the frames the workers kept, decoded alike.
TEST_P(ServerRestartTest, ExactSumWithTopKPushes) {
  ExpectExactSumsAcrossAServerRestart({.mode = GetParam(), .compression = "topk:0.1,pull=none"});
}

INSTANTIATE_TEST_SUITE_P(Modes, ServerRestartTest, ::testing::Values("async", "sync"),
                         [](const auto& info) { return std::string(info.param); });

// --replicas=2 with the tables' disk tier: 3 servers whose memory holds a
// fraction of a 40,000-row table; server 1 is SIGKILLed and never
// restarted. The shards that lost a copy are copied again with their rows
// on disk (each shard keeps its own log there), every worker ends with
// exact sums, and the survivors' checkpoints export every row of the table
// (the exporter checks each shard's disk rows against its count).
TEST_P(ServerRestartTest, ReplicasCopyTableShardsWithTheirDiskRows) {
  constexpr int kWorkers = 2, kSteps = 150;
  constexpr int64_t kN = 1000;
  const RestartRun run{.mode = GetParam(), .dense = kN, .disk_tier = true};
  Job job;
  ASSERT_TRUE(job.StartScheduler(3, kWorkers, {"--replicas=2", "--heartbeat_timeout=2s"}).ok());
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> flags = {"--checkpoint_dir=" + job.checkpoints(), "--checkpoint_every=0s"};
    for (const std::string& f : DiskTierFlags(job, run, i)) flags.push_back(f);
    ASSERT_TRUE(job.StartServer(i, flags).ok());
  }
  ASSERT_TRUE(job.StartWorkers("ps_exact_sum", kWorkers,
                               {absl::StrCat("--steps=", kSteps), "--consistency=" + std::string(run.mode),
                                absl::StrCat("--dense_elements=", kN), "--slow_rank=0", "--slow_step_ms=15",
                                "--table_ids=40000", "--progress_every=20"})
                  .ok());
  const absl::StatusOr<std::string> forty = job.workers()[0].WaitForLine("exact_sum steps=40", absl::Seconds(120));
  ASSERT_TRUE(forty.ok()) << forty.status() << "\n" << job.workers()[0].StderrText();
  const int victim = job.ServerWithRank(1);
  ASSERT_GE(victim, 0);
  job.servers()[victim].Kill();
  ASSERT_TRUE(job.WaitForSchedulerEvents("copies_restored", {}, 1)) << job.Log("scheduler");
  const std::string want = absl::StrFormat("dense_sum=%.1f expected_sum=%.1f", ExpectedDenseSum(kWorkers, kSteps, kN),
                                           ExpectedDenseSum(kWorkers, kSteps, kN));
  for (int w = 0; w < kWorkers; ++w) {
    auto line = job.workers()[w].WaitForLine("exact_sum OK ", absl::Seconds(120));
    ASSERT_TRUE(line.ok()) << "worker " << w << ": " << line.status() << "\n" << job.workers()[w].StderrText();
    EXPECT_THAT(*line, HasSubstr(want));
    EXPECT_GT(IntField(*line, "table_disk_rows"), 1000) << *line;
    ExpectExitZero(job.workers()[w], absl::StrCat("worker ", w), absl::Seconds(30));
  }
  // A copy carried rows from the disk tier (a primary says what it sent).
  int64_t most = 0;
  for (int s = 0; s < 3; ++s) {
    if (s == victim) continue;
    for (const std::string& sent : job.Events(absl::StrCat("server", s), "copy_sent")) {
      most = std::max(most, static_cast<int64_t>(JsonNumber(sent, "disk_bytes")));
    }
    ExpectExitZero(job.servers()[s], absl::StrCat("server ", s), absl::Seconds(30));
  }
  EXPECT_GT(most, 0) << "no copy carried rows from the disk tier";
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
  absl::StatusOr<double> exported_sum = ExportedSum(job.checkpoints(), job.dir() + "/model.npz", "dense");
  ASSERT_TRUE(exported_sum.ok()) << exported_sum.status();
  EXPECT_EQ(*exported_sum, ExpectedDenseSum(kWorkers, kSteps, kN));
  std::printf("%s\n", JsonLine()
                          .Add("test", "replicas_disk_tier_copy")
                          .Add("mode", run.mode)
                          .Add("largest_disk_rows_copied_bytes", most)
                          .Add("workers", kWorkers)
                          .Str()
                          .c_str());
}

// A server that dies and is never restarted: the workers' requests fail after
// --server_recovery_timeout with a message naming it, and the whole job
// stops instead of hanging.
TEST(ServerLostTest, WorkersFailNamingTheServerAfterTheRecoveryDeadline) {
  Job job;
  ASSERT_TRUE(job.StartScheduler(2, 2, {"--heartbeat_timeout=2s"}).ok());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(job.StartServer(i, {"--checkpoint_dir=" + job.checkpoints(), "--heartbeat_interval=0.2s"}).ok());
  }
  for (int w = 0; w < 2; ++w) {
    ASSERT_TRUE(job.StartWorker("ps_exact_sum", {"--steps=100000", "--consistency=async", "--dense_elements=100000",
                                                 "--server_recovery_timeout=3s"})
                    .ok());
  }
  const int victim = job.ServerWithRank(1);
  ASSERT_GE(victim, 0);
  // Once the servers acknowledged the model: a server killed before its
  // acknowledgement fails the model's creation instead, after --server_timeout.
  ASSERT_TRUE(job.WaitForSchedulerEvents("model_held", {}, 1));
  const absl::Time killed = absl::Now();
  job.servers()[victim].Kill();
  for (int w = 0; w < 2; ++w) {
    auto code = job.workers()[w].WaitExit(absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << "worker " << w << " still running 30 s after its server died";
    EXPECT_NE(*code, 0);
    const std::string err = job.workers()[w].StderrText();
    EXPECT_THAT(err, HasSubstr("server 1 ("));
    EXPECT_THAT(err, HasSubstr("no replacement registered within 3s"));
  }
  const absl::Duration failed = absl::Now() - killed;
  // Detection (2 s) plus the recovery deadline (3 s), and no more than a few seconds after.
  EXPECT_GE(failed, absl::Seconds(4));
  EXPECT_LE(failed, absl::Seconds(15));
  // The scheduler ends the job (every worker died); the live server stops too.
  for (ChildProcess* p : {&job.scheduler(), &job.servers()[1 - victim]}) {
    auto code = p->WaitExit(absl::Seconds(20));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_NE(*code, 0);
  }
  EXPECT_EQ(job.CountSchedulerEvents("job_failed"), 1);
  std::printf("%s\n", JsonLine()
                          .Add("test", "server_lost")
                          .Add("heartbeat_timeout_s", 2)
                          .Add("server_recovery_timeout_s", 3)
                          .Add("kill_to_workers_failed_s", absl::ToDoubleSeconds(failed), 3)
                          .Str()
                          .c_str());
}

// ---- sync with a worker killed -------------------------------------------------

// How many shared-memory channels (memfd regions) process `pid` maps.
int ShmMappings(pid_t pid) {
  std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find("memfd:ps-shm") != std::string::npos;
  return n;
}

// ---- a server initialising a large model keeps sending heartbeats -----------

TEST(LargeModelTest, AServerInitialisingItIsNotTakenForDead) {
  Job job;
  // 100M floats (800 MB with the step sum) take the server well over the
  // scheduler's 1 s heartbeat timeout to initialise (2-3 s here).
  ASSERT_TRUE(job.StartScheduler(1, 1, {"--heartbeat_timeout=1s"}).ok());
  ASSERT_TRUE(job.StartServer(0, {"--heartbeat_interval=0.2s"}).ok());
  ASSERT_TRUE(job.StartWorker("ps_exact_sum", {"--steps=1", "--dense_elements=100000000", "--heartbeat_interval=0.2s",
                                               "--request_timeout=120s"})
                  .ok());
  auto line = job.workers()[0].WaitForLine("exact_sum OK ", absl::Seconds(120));
  EXPECT_TRUE(line.ok()) << job.workers()[0].StderrText() << job.Log("scheduler");
  job.ExpectAllExitZero();
  EXPECT_EQ(job.Events("server0", "slices_created", {{"status", "OK"}}).size(), 1);
  EXPECT_EQ(job.CountSchedulerEvents("node_dead"), 0);
}

TEST(WorkerDeathTest, SyncJobFinishesWithoutTheDeadWorker) {
  Job job;
  ASSERT_TRUE(job.StartScheduler(2, 3, {"--heartbeat_timeout=2s"}).ok());
  // Heartbeats well inside the scheduler's 2 s timeout, even on a loaded machine.
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(job.StartServer(i, {"--heartbeat_interval=0.2s"}).ok());
  for (int w = 0; w < 3; ++w) {
    ASSERT_TRUE(job.StartWorker("ps_worker", {"--epochs=2", "--train_limit=6000", "--test_limit=1000",
                                              "--progress_every=0.05s", "--heartbeat_interval=0.2s"})
                    .ok());
  }
  auto progress = job.workers()[2].WaitForLine("{\"event\":\"progress\",\"rank\":", absl::Seconds(60));
  ASSERT_TRUE(progress.ok()) << job.workers()[2].StderrText();
  const std::string victim_rank = progress->substr(0, progress->find(','));  // ranks follow registration
  // Every worker has pushed: each has its shared-memory channel with server 0.
  const pid_t server0 = job.servers()[0].pid();
  EXPECT_EQ(ShmMappings(server0), 3);
  const absl::Time killed = absl::Now();
  job.workers()[2].Kill();
  // The dead worker's channel goes with it: server 0 sees its end of the
  // handshake socket close and unmaps the region (nothing is left behind).
  int mapped = ShmMappings(server0);
  for (const absl::Time deadline = killed + absl::Seconds(10); mapped > 2 && absl::Now() < deadline;) {
    ::poll(nullptr, 0, 20);  // paces the look at /proc; the deadline bounds it
    mapped = ShmMappings(server0);
  }
  EXPECT_LE(mapped, 2) << "server 0 still maps the dead worker's shared-memory region";
  for (int w = 0; w < 2; ++w) ExpectExitZero(job.workers()[w], absl::StrCat("worker ", w), absl::Seconds(60));
  const absl::Duration finished = absl::Now() - killed;
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(20));
  for (int i = 0; i < 2; ++i) ExpectExitZero(job.servers()[i], absl::StrCat("server ", i), absl::Seconds(20));
  const std::vector<std::string> dead = job.SchedulerEvents("node_dead");
  ASSERT_EQ(dead.size(), 1);
  EXPECT_EQ(JsonField(dead[0], "role"), "\"worker\"");
  EXPECT_EQ(JsonField(dead[0], "rank"), victim_rank);
  EXPECT_EQ(job.CountSchedulerEvents("job_ending", {{"dead_workers", absl::StrCat("[", victim_rank, "]")}}), 1);
  const Job::Fields gone = {{"worker", absl::StrCat(victim_rank)}, {"live", "false"}};
  EXPECT_EQ(job.Events("server0", "worker_live", gone).size() + job.Events("server1", "worker_live", gone).size(), 2)
      << "each server completes the steps without the dead worker";
  // Both survivors trained to the end and evaluated the same final model.
  for (int w = 0; w < 2; ++w) EXPECT_THAT(job.workers()[w].stdout_text(), HasSubstr("\"event\":\"done\""));
  // Detection: the time of the scheduler's event.
  const double detect = JsonNumber(dead[0], "time") - absl::ToDoubleSeconds(killed - absl::UnixEpoch());
  EXPECT_GE(detect, 1.7);  // never before the 2 s timeout less one 0.2 s heartbeat interval ...
  EXPECT_LE(detect, 5.0);  // ... and soon after it
  std::printf("%s\n", JsonLine()
                          .Add("test", "sync_worker_killed")
                          .Add("heartbeat_timeout_s", 2)
                          .Add("kill_to_declared_dead_s", detect, 3)
                          .Add("kill_to_survivors_done_s", absl::ToDoubleSeconds(finished), 3)
                          .Add("hang", false)
                          .Str()
                          .c_str());
}

// ---- a worker killed and restarted: it rejoins and continues its shard -------------

class WorkerRestartTest : public ::testing::TestWithParam<const char*> {};

// The rank in `worker`'s first progress line at step `min_step` or later: by
// then its first pushes have been applied everywhere, so a kill cannot land
// before any did (the first progress line may come at step 1, its push
// still in flight).
absl::StatusOr<std::string> RankOnceAtStep(ChildProcess& worker, int min_step, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<std::string> line = worker.ReadLine(deadline - absl::Now());
    if (!line.ok()) return line.status();
    if (JsonField(*line, "event") == "\"progress\"" && JsonNumber(*line, "step") >= min_step) {
      return JsonField(*line, "rank").value_or("?");
    }
  }
}

// The next `event` line of `worker` (any field order).
absl::StatusOr<std::string> NextEvent(ChildProcess& worker, const std::string& event, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<std::string> line = worker.ReadLine(deadline - absl::Now());
    if (!line.ok()) return line.status();
    if (JsonField(*line, "event") == "\"" + event + "\"") return line;
  }
}

TEST_P(WorkerRestartTest, RestartedWorkerRejoinsAndResumesWhereItsPushesEnded) {
  Job job;
  ASSERT_TRUE(job.StartScheduler(2, 2).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(job.StartServer(i).ok());
  const std::vector<std::string> flags = {"--epochs=3", "--train_limit=6000", "--test_limit=1000",
                                          "--consistency=" + std::string(GetParam()), "--progress_every=0.05s"};
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(job.StartWorker("ps_worker", flags).ok());
  absl::StatusOr<std::string> progress = RankOnceAtStep(job.workers()[1], 3, absl::Seconds(60));
  ASSERT_TRUE(progress.ok()) << progress.status() << "\n" << job.workers()[1].StderrText();
  const std::string rank = *progress;
  job.workers()[1].Kill();
  std::vector<std::string> again = flags;
  again.push_back("--rank=" + rank);
  ASSERT_TRUE(job.StartWorker("ps_worker", again).ok());
  ChildProcess& restarted = job.workers()[2];
  absl::StatusOr<std::string> start = NextEvent(restarted, "start", absl::Seconds(60));
  ASSERT_TRUE(start.ok()) << restarted.StderrText();
  EXPECT_EQ(JsonField(*start, "rank"), rank) << *start;
  const int start_step = static_cast<int>(JsonNumber(*start, "start_step"));
  EXPECT_GT(start_step, 0) << "the restarted worker should continue, not start over";
  ExpectExitZero(restarted, "restarted worker", absl::Seconds(90));
  ExpectExitZero(job.workers()[0], "worker", absl::Seconds(30));
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(20));
  for (int i = 0; i < 2; ++i) ExpectExitZero(job.servers()[i], absl::StrCat("server ", i), absl::Seconds(20));
  // It trained only the steps it had not pushed: 3 epochs of 47 steps in all.
  const std::vector<std::string> done = JsonEvents(restarted.stdout_text(), "done");
  ASSERT_EQ(done.size(), 1u) << restarted.stdout_text();
  EXPECT_EQ(JsonNumber(done[0], "steps"), 3 * 47);
  std::printf("%s\n", JsonLine()
                          .Add("test", "worker_restart")
                          .Add("mode", GetParam())
                          .Add("resumed_at_step", start_step)
                          .Add("total_steps", 3 * 47)
                          .Str()
                          .c_str());
}

INSTANTIATE_TEST_SUITE_P(Modes, WorkerRestartTest, ::testing::Values("async", "sync"),
                         [](const auto& info) { return std::string(info.param); });

// ---- the scheduler killed --------------------------------------------------------

// Nodes keep training while the scheduler is down and wait
// --scheduler_recovery_timeout for it to come back (ps_scheduler --restore);
// one that never does stops them all.
TEST(SchedulerDeathTest, WorkersAndServersStopAndServersSaveACheckpoint) {
  Job job;
  ASSERT_TRUE(job.StartScheduler(2, 2).ok());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(
        job.StartServer(i, {"--checkpoint_dir=" + job.checkpoints(), "--checkpoint_every=0s",
                            "--heartbeat_interval=0.3s", "--heartbeat_timeout=3s", "--scheduler_recovery_timeout=2s"})
            .ok());
  }
  for (int w = 0; w < 2; ++w) {
    ASSERT_TRUE(job.StartWorker("ps_worker", {"--epochs=50", "--train_limit=6000", "--test_limit=500",
                                              "--progress_every=0.05s", "--heartbeat_interval=0.3s",
                                              "--heartbeat_timeout=3s", "--scheduler_recovery_timeout=2s"})
                    .ok());
  }
  for (int w = 0; w < 2; ++w) {
    ASSERT_TRUE(job.workers()[w].WaitForLine("{\"event\":\"progress\"", absl::Seconds(60)).ok());
  }
  const absl::Time killed = absl::Now();
  job.scheduler().Kill();
  for (auto* group : {&job.workers(), &job.servers()}) {
    for (size_t i = 0; i < group->size(); ++i) {
      ChildProcess& p = (*group)[i];
      const std::string who = absl::StrCat(group == &job.workers() ? "worker " : "server ", i);
      auto code = p.WaitExit(absl::Seconds(20));
      ASSERT_TRUE(code.ok()) << who << " still running 20 s after the scheduler died: " << code.status()
                             << "\nits threads:\n"
                             << p.Threads() << "its log:\n"
                             << p.StderrText();
      EXPECT_NE(*code, 0);
      EXPECT_THAT(p.StderrText(), HasSubstr("presumed dead"));
    }
  }
  const absl::Duration stopped = absl::Now() - killed;
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(Exists(absl::StrCat(job.checkpoints(), "/server-", i, ".ckpt"))) << i;
    EXPECT_EQ(job.Events(absl::StrCat("server", i), "checkpoint", {{"why", "final, before stopping"}}).size(), 1);
  }
  std::printf("%s\n", JsonLine()
                          .Add("test", "scheduler_killed")
                          .Add("heartbeat_timeout_s", 3)
                          .Add("scheduler_recovery_timeout_s", 2)
                          .Add("kill_to_all_stopped_s", absl::ToDoubleSeconds(stopped), 3)
                          .Str()
                          .c_str());
}

// ---- training through a server restart ---------------------------------------------

// Trains 2 workers x 2 servers (sync) and returns rank 0's final accuracy;
// with `restart`, kills server 1 mid-run and restarts it from its checkpoint.
double TrainAndMaybeRestart(bool restart, int* restored) {
  Job job;
  const std::vector<std::string> ckpt = {"--checkpoint_dir=" + job.checkpoints(), "--checkpoint_every_pushes=40",
                                         "--checkpoint_every=0s"};
  EXPECT_TRUE(job.StartScheduler(2, 2).ok());
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(job.StartServer(i, ckpt).ok());
  for (int w = 0; w < 2; ++w) {
    EXPECT_TRUE(job.StartWorker("ps_worker",
                                {"--epochs=2", "--train_limit=12000", "--test_limit=2000", "--progress_every=0.05s"})
                    .ok());
  }
  if (restart) {
    const int victim = job.ServerWithRank(1);
    EXPECT_GE(victim, 0);
    EXPECT_TRUE(job.WaitForEvents(absl::StrCat("server", victim), "checkpoint", {{"number", "2"}}, 1));
    job.servers()[victim].Kill();
    EXPECT_TRUE(job.StartServer(1, {"--restore_dir=" + job.checkpoints(), "--rank=1", "--checkpoint_every=0s"}).ok());
  }
  for (int w = 0; w < 2; ++w) {
    auto code = job.workers()[w].WaitExit(absl::Seconds(120));
    EXPECT_TRUE(code.ok() && *code == 0) << job.workers()[w].StderrText();
  }
  if (restart) *restored = static_cast<int>(job.Events("server1.restart", "checkpoint_restored").size());
  return FinalAccuracy(job.workers()[0].stdout_text() + job.workers()[1].stdout_text());
}

TEST(TrainingRestartTest, AccuracyWithinOnePointOfAnUndisturbedRun) {
  int restored = 0;
  const double undisturbed = TrainAndMaybeRestart(false, nullptr);
  const double restarted = TrainAndMaybeRestart(true, &restored);
  ASSERT_GT(undisturbed, 0.7);
  EXPECT_EQ(restored, 1) << "the restarted server did not restore its checkpoint";
  EXPECT_NEAR(restarted, undisturbed, 0.01);
  std::printf("%s\n", JsonLine()
                          .Add("test", "training_server_restart")
                          .Add("undisturbed_accuracy", undisturbed, 4)
                          .Add("restarted_accuracy", restarted, 4)
                          .Str()
                          .c_str());
}

}  // namespace
}  // namespace ps::testing
