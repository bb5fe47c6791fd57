// ps_scheduler --replicas: servers SIGKILLed in a running job with K = 2
// copies of every slice are never restarted; their slices fail over to
// their backups and are copied back to two copies, every worker ends with
// exact sums, and the surviving copies of each slice hold the same bytes
// (table shards with their admission sketches: the table admits a row once
// it was pulled three times). Each run prints what it measured (the longest
// step, which spans the failure) as a JSON line for the results.

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "common/base/hash.h"
#include "common/base/json.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "server/store/checkpoint.h"
#include "server/store/slice_store.h"
#include "server/store/table_shard.h"
#include "tests/job.h"

namespace ps::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kServers = 4, kWorkers = 2, kSteps = 800, kTableIds = 200;
constexpr int64_t kDense = 200000;
constexpr absl::Duration kHeartbeatTimeout = absl::Seconds(2);

// Every slice held by both stores (a primary and its backup) holds the same
// values, optimizer state, version and clocks, and a table shard the same
// rows, bit for bit; returns how many slices were compared.
// Shards whose admission sketch or counters differed where the caller
// allowed it (Sameness::kRowsAndValues).
int g_sketches_differ = 0;

// What two copies must share: everything, or (moves) the values, rows,
// versions and clocks, the admission sketch and counters allowed to differ
// by a pull around a hand-over (docs/fault-tolerance.md,
// Limits), counted in g_sketches_differ.
enum class Sameness { kAll, kRowsAndValues };

// The counters that differ between two copies of a table shard, named with
// both values; or that they are alike (then the sketch or a pending sum
// differs). For the log of a test that allows a difference.
std::string CountersDiffer(const TableStatsMsg& a, const TableStatsMsg& b) {
  std::string out;
  const auto add = [&](const char* name, uint64_t x, uint64_t y) {
    if (x != y) absl::StrAppend(&out, " ", name, " ", x, " and ", y, ";");
  };
  add("rows", a.rows, b.rows);
  add("admissions", a.admissions, b.admissions);
  add("rejections", a.rejections, b.rejections);
  add("evictions", a.evictions, b.evictions);
  add("gradients_dropped", a.gradients_dropped, b.gradients_dropped);
  add("rows_pulled", a.rows_pulled, b.rows_pulled);
  add("rows_pushed", a.rows_pushed, b.rows_pushed);
  return out.empty() ? " the counters alike (the sketch or a pending sum differs)" : out;
}

int ExpectSameCopies(const SliceStore& a, const SliceStore& b, const std::string& what,
                     Sameness same = Sameness::kAll) {
  int compared = 0;
  for (const Slice& slice : a.slice_list()) {
    bool in_b = false;
    for (const Slice& other : b.slice_list()) in_b |= other.key == slice.key;
    if (!in_b) continue;
    const SliceState& x = a.State(slice.key);
    const SliceState& y = b.State(slice.key);
    const std::string name = absl::StrCat(what, ", slice ", slice.key);
    EXPECT_EQ(x.values, y.values) << name;
    EXPECT_EQ(x.optimizer_state, y.optimizer_state) << name;
    EXPECT_EQ(x.version, y.version) << name;
    EXPECT_EQ(x.optimizer_steps, y.optimizer_steps) << name;
    EXPECT_EQ(x.worker_clock, y.worker_clock) << name;
    EXPECT_EQ(x.table == nullptr, y.table == nullptr) << name;
    if (x.table != nullptr && y.table != nullptr) {
      int rows = 0;
      for (uint64_t i = 0; i < kTableIds; ++i) {
        const uint64_t id = Mix64(i + 1);  // ps_exact_sum's ids
        EXPECT_EQ(x.table->RowOf(id), y.table->RowOf(id)) << name << ", row " << id;
        rows += x.table->RowOf(id).has_value() ? 1 : 0;
      }
      EXPECT_GT(rows, 0) << name;
      // The whole shard: rows, the admission sketch (pulls count; the
      // primary forwards the rows each pull read), the counters.
      std::string ex, ey;
      x.table->Encode(&ex);
      y.table->Encode(&ey);
      if (same == Sameness::kRowsAndValues && ex != ey) {
        ++g_sketches_differ;
        std::printf("%s: the table shard's sketch or counters differ (rows and values the same):%s\n", name.c_str(),
                    CountersDiffer(x.table->Stats(), y.table->Stats()).c_str());
      } else {
        EXPECT_TRUE(ex == ey) << name << ": the table shard's state differs (" << ex.size() << " and " << ey.size()
                              << " bytes)";
      }
    }
    ++compared;
  }
  return compared;
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<std::string> SchedulerFlags(int replicas = 2, bool elastic = false) {
  return {absl::StrCat("--replicas=", replicas), absl::StrCat("--elastic=", elastic),
          absl::StrCat("--heartbeat_timeout=", absl::FormatDuration(kHeartbeatTimeout))};
}
std::vector<std::string> ServerFlags(const Job& job) {
  return {"--checkpoint_dir=" + job.checkpoints(), "--checkpoint_every=0s"};
}
std::vector<std::string> WorkerFlags(const std::string& mode) {
  return {absl::StrCat("--steps=", kSteps),
          "--consistency=" + mode,
          absl::StrCat("--dense_elements=", kDense),
          "--slice_bytes=200000",
          absl::StrCat("--table_ids=", kTableIds),
          "--step_ms=10",
          "--admit_after=3",  // rows exist once pulled 3 times: pulls change the table too
          "--progress_every=40"};
}

// A job of `servers` servers with K = `replicas` copies of every slice (a 2 s
// heartbeat timeout) and kWorkers ps_exact_sum workers in `mode`, 40 steps
// into its run. The servers checkpoint only for the comparison at the end:
// each survivor writes its final checkpoint, backup copies included; nobody
// restores from them.
// `live`: more flags for the servers and workers; `server_flags` for the
// servers, `worker_flags` for the workers; `elastic`: ps_scheduler --elastic.
void StartRunningJob(Job& job, int servers, const std::string& mode, const std::vector<std::string>& live = {},
                     const std::vector<std::string>& server_flags = {}, int replicas = 2,
                     const std::vector<std::string>& worker_flags = {}, bool elastic = false) {
  ASSERT_TRUE(job.StartScheduler(servers, kWorkers, SchedulerFlags(replicas, elastic)).ok());
  for (int i = 0; i < servers; ++i) {
    ASSERT_TRUE(job.StartServer(i, Concat(ServerFlags(job), Concat(live, server_flags))).ok());
  }
  ASSERT_TRUE(job.StartWorkers("ps_exact_sum", kWorkers, Concat(WorkerFlags(mode), Concat(live, worker_flags))).ok());
  ASSERT_TRUE(job.workers()[0].WaitForLine("exact_sum steps=40", absl::Seconds(60)).ok())
      << job.workers()[0].StderrText();
}

// The server losses after which some slice had no other copy and waited
// for its server's restart.
int LossesLeavingSlicesAlone(const Job& job) {
  int n = 0;
  for (const std::string& lost : job.SchedulerEvents("server_lost")) n += JsonNumber(lost, "waiting") > 0 ? 1 : 0;
  return n;
}

// Waits until every slice has its two copies again, the `n`th time.
void ExpectCopiesAgain(Job& job, int n) {
  ASSERT_TRUE(job.WaitForSchedulerEvents("copies_restored", {}, n)) << job.Log("scheduler");
}

// Every push of every worker applied once: nothing lost with a server,
// nothing applied twice by the backups it reached before it died. Each
// worker's client counted `failovers`. Returns the longest step any worker
// saw (ms) and how many workers had exact sums.
// `first`: the index of the first of the kWorkers workers in job.workers().
std::pair<double, int> ExpectExactSums(Job& job, int failovers, int first = 0) {
  const std::string want =
      absl::StrFormat("dense_sum=%.1f expected_sum=%.1f", ExpectedDenseSum(kWorkers, kSteps, kDense),
                      ExpectedDenseSum(kWorkers, kSteps, kDense));
  double longest_ms = 0;
  int exact = 0;
  for (int w = 0; w < kWorkers; ++w) {
    ChildProcess& worker = job.workers()[first + w];
    auto line = worker.WaitForLine("exact_sum OK ", absl::Seconds(120));
    EXPECT_TRUE(line.ok()) << "worker " << w << ": " << line.status() << "\n" << worker.StderrText();
    if (!line.ok()) continue;
    EXPECT_THAT(*line, HasSubstr(want));
    exact += line->find(want) != std::string::npos;
    EXPECT_EQ(IntField(*line, "servers_recovered"), failovers) << *line;
    longest_ms = std::max(longest_ms, DoubleField(*line, "longest_step_ms"));
  }
  for (int w = 0; w < kWorkers; ++w) {
    ExpectExitZero(job.workers()[first + w], absl::StrCat("worker ", w), absl::Seconds(30));
  }
  return {longest_ms, exact};
}

// The final checkpoints of servers `a` and `b`: every slice both hold (one
// as its primary, the other as its backup) has the same bytes on both.
int ExpectSameCheckpointedCopies(Job& job, int a, int b, Sameness same = Sameness::kAll) {
  ThreadPool pool(1);
  SliceStore x(&pool, false, 0), y(&pool, false, 0);
  EXPECT_TRUE(LoadCheckpoint(job.checkpoints(), a, &x).ok());
  EXPECT_TRUE(LoadCheckpoint(job.checkpoints(), b, &y).ok());
  if (!x.has_model() || !y.has_model()) return 0;
  return ExpectSameCopies(x, y, absl::StrCat("servers ", a, " and ", b), same);
}

// Servers a, b and c, each slice on two of them: compared once; returns how
// many slices were.
int ExpectSameCopiesOnThree(Job& job, int a, int b, int c, Sameness same = Sameness::kAll) {
  return ExpectSameCheckpointedCopies(job, a, b, same) + ExpectSameCheckpointedCopies(job, a, c, same) +
         ExpectSameCheckpointedCopies(job, b, c, same);
}

// The model exported from the job's checkpoints (ps_export takes one copy
// of each slice): every push of every worker in it once.
void ExpectExactExport(Job& job) {
  absl::StatusOr<double> exported_sum = ExportedSum(job.checkpoints(), job.dir() + "/model.npz", "dense");
  ASSERT_TRUE(exported_sum.ok()) << exported_sum.status();
  EXPECT_EQ(*exported_sum, ExpectedDenseSum(kWorkers, kSteps, kDense));
}

// `sketches_differing` >= 0: the table shards whose copies' admission
// sketches differed (Sameness::kRowsAndValues), printed too.
void PrintResult(const std::string& test, const std::string& mode, int servers, double longest_ms, int exact,
                 int compared, int replicas = 2, int sketches_differing = -1) {
  JsonLine line;
  line.Add("test", test)
      .Add("mode", mode)
      .Add("replicas", replicas)
      .Add("servers", servers)
      .Add("heartbeat_timeout_s", absl::ToDoubleSeconds(kHeartbeatTimeout), 1)
      .Add("longest_step_s", longest_ms / 1000, 3)
      .Add("workers_with_exact_sums", exact)
      .Add("slices_compared", compared);
  if (sketches_differing >= 0) line.Add("shard_sketches_differing", sketches_differing);
  std::printf("%s\n", line.Str().c_str());
}

class FailoverTest : public ::testing::TestWithParam<const char*> {};

// 4 servers, K = 2: server 1 is killed, the scheduler copies the slices that
// lost a copy onto the others, then server 2 is killed, and again. Nobody
// restarts anything; every worker ends with exact sums, and the last two
// servers hold every slice, the same bytes on both.
TEST_P(FailoverTest, TwoServersKilledOneAfterTheOtherWithExactSums) {
  const std::string mode = GetParam();
  Job job;
  StartRunningJob(job, kServers, mode);
  if (HasFatalFailure()) return;
  std::vector<int> killed;
  for (int rank : {1, 2}) {
    const int victim = job.ServerWithRank(rank);
    ASSERT_GE(victim, 0);
    // Still training: the failure lands mid-run.
    ASSERT_FALSE(job.workers()[0].WaitForLine("exact_sum OK ", absl::ZeroDuration()).ok()) << "the run ended early";
    job.servers()[victim].Kill();
    killed.push_back(victim);
    ExpectCopiesAgain(job, static_cast<int>(killed.size()));  // before the next failure
    EXPECT_GE(job.CountSchedulerEvents("server_lost", {{"rank", absl::StrCat(rank)}}), 1);
  }
  const auto [longest_ms, exact] = ExpectExactSums(job, 2);
  for (int s = 0; s < kServers; ++s) {
    if (std::find(killed.begin(), killed.end(), s) == killed.end()) {
      ExpectExitZero(job.servers()[s], absl::StrCat("server ", s), absl::Seconds(30));
    }
  }
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
  // The survivors each hold every slice now, the same bytes.
  const int compared = ExpectSameCheckpointedCopies(job, 0, 3);
  // clock, dense in 4 slices (of 200,000 bytes), bias, and the table's 4 shards
  EXPECT_EQ(compared, 10);
  // The trained model out of the survivors' checkpoints (ps_export takes one
  // copy of each slice): every push of every worker in it once.
  ExpectExactExport(job);
  PrintResult("failover_two_kills", mode, kServers, longest_ms, exact, compared);
}

// Top-k pushes with K = 2: a primary forwards the workers'
// compressed frames to its backup, which decodes the same values. Server 1
// is killed; the survivors' copies are the same bytes and every worker ends
// with the sums its simulation of every worker's compressor says.
TEST_P(FailoverTest, CompressedPushesReachEveryCopyAlikeThroughAFailover) {
  const std::string mode = GetParam();
  Job job;
  StartRunningJob(job, kServers, mode, {}, {}, 2, {"--compression=topk:0.1,pull=none"});
  if (HasFatalFailure()) return;
  const int victim = job.ServerWithRank(1);
  ASSERT_GE(victim, 0);
  job.servers()[victim].Kill();
  ExpectCopiesAgain(job, 1);
  int exact = 0;
  double expected = 0, longest_ms = 0;
  for (int w = 0; w < kWorkers; ++w) {
    auto line = job.workers()[w].WaitForLine("exact_sum OK ", absl::Seconds(120));
    ASSERT_TRUE(line.ok()) << "worker " << w << ": " << line.status() << "\n" << job.workers()[w].StderrText();
    expected = DoubleField(*line, "expected_sum");
    EXPECT_LT(expected, ExpectedDenseSum(kWorkers, kSteps, kDense)) << *line;  // the last residuals
    EXPECT_EQ(DoubleField(*line, "dense_sum"), expected) << *line;
    exact += DoubleField(*line, "dense_sum") == expected;
    longest_ms = std::max(longest_ms, DoubleField(*line, "longest_step_ms"));
    ExpectExitZero(job.workers()[w], absl::StrCat("worker ", w), absl::Seconds(30));
  }
  for (int s = 0; s < kServers; ++s) {
    if (s != victim) ExpectExitZero(job.servers()[s], absl::StrCat("server ", s), absl::Seconds(30));
  }
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
  const int compared = ExpectSameCopiesOnThree(job, 0, 2, 3);
  EXPECT_EQ(compared, 10);  // clock, dense in 4 slices, bias, 4 table shards: each on two survivors
  absl::StatusOr<double> exported_sum = ExportedSum(job.checkpoints(), job.dir() + "/model.npz", "dense");
  ASSERT_TRUE(exported_sum.ok()) << exported_sum.status();
  EXPECT_EQ(*exported_sum, expected);
  PrintResult("failover_compressed_topk", mode, kServers, longest_ms, exact, compared);
}

// 4 servers, K = 3: servers 1 and 2 are killed at once. Every slice keeps
// a copy, the survivors copy what they can (two live servers: two copies
// each), and every worker ends with exact sums, the survivors' copies the
// same bytes.
TEST_P(FailoverTest, ThreeCopiesSurviveTwoServersKilledAtOnce) {
  const std::string mode = GetParam();
  Job job;
  StartRunningJob(job, kServers, mode, {}, {}, /*replicas=*/3);
  if (HasFatalFailure()) return;
  const int one = job.ServerWithRank(1), two = job.ServerWithRank(2);
  ASSERT_GE(one, 0);
  ASSERT_GE(two, 0);
  job.servers()[one].Kill();
  job.servers()[two].Kill();
  // Every copy the two survivors can take made before the job ends (K = 3
  // stays out of reach): each slice on both.
  EXPECT_TRUE(job.WaitForSchedulerEvents("copies_stuck", {{"live_servers", "2"}}, 1)) << job.Log("scheduler");
  const auto [longest_ms, exact] = ExpectExactSums(job, 2);
  EXPECT_EQ(job.CountSchedulerEvents("server_lost", {{"rank", "1"}}), 1);
  EXPECT_EQ(job.CountSchedulerEvents("server_lost", {{"rank", "2"}}), 1);
  EXPECT_EQ(LossesLeavingSlicesAlone(job), 0);
  for (int s : {0, 3}) {
    ExpectExitZero(job.servers()[job.ServerWithRank(s)], absl::StrCat("server ", s), absl::Seconds(30));
  }
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
  const int compared = ExpectSameCheckpointedCopies(job, 0, 3);
  EXPECT_EQ(compared, 10);  // clock, dense in 4 slices, bias, and the table's 4 shards
  PrintResult("failover_two_at_once", mode, kServers, longest_ms, exact, compared, 3);
}

// 3 servers, K = 2: server 1 is frozen (SIGSTOP) past the heartbeat
// timeout, replaced by its backups, then thawed (SIGCONT). It is fenced:
// the backups refuse what it forwards, the scheduler refuses it, and it
// leaves with an error naming why; the job ends with exact sums.
TEST_P(FailoverTest, AFrozenServerIsFencedAndLeaves) {
  const std::string mode = GetParam();
  constexpr int kThree = 3;
  Job job;
  StartRunningJob(job, kThree, mode);
  if (HasFatalFailure()) return;
  const int victim = job.ServerWithRank(1);
  ASSERT_GE(victim, 0);
  ASSERT_EQ(kill(job.servers()[victim].pid(), SIGSTOP), 0);
  ExpectCopiesAgain(job, 1);
  ASSERT_EQ(kill(job.servers()[victim].pid(), SIGCONT), 0);
  absl::StatusOr<int> code = job.servers()[victim].WaitExit(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_NE(*code, 0);
  EXPECT_THAT(job.servers()[victim].StderrText(), HasSubstr("scheduler refused this server"));
  const auto [longest_ms, exact] = ExpectExactSums(job, 1);
  for (int s = 0; s < kThree; ++s) {
    if (s != victim) ExpectExitZero(job.servers()[s], absl::StrCat("server ", s), absl::Seconds(30));
  }
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
  const int compared = ExpectSameCheckpointedCopies(job, 0, 2);
  EXPECT_GT(compared, 0);
  PrintResult("failover_freeze", mode, kThree, longest_ms, exact, compared);
}

// 3 servers, K = 2: server 1 is killed and its slices copied to the
// others, then the scheduler dies for good and every node gives up. The
// whole job restarts from the checkpoints, server 1's disk lost with it:
// servers 0 and 2 come back with theirs, a new server takes rank 1. Each
// slice keeps its most advanced copy (the checkpoints were written at
// different moments), the others are made again from it, and the workers
// resume where the checkpoints stand: exact sums, and every slice's two
// copies the same bytes at the end.
TEST_P(FailoverTest, AWholeJobRestartsFromTheCheckpointsOfTwoServersOfThree) {
  const std::string mode = GetParam();
  constexpr int kThree = 3;
  const std::vector<std::string> live = {"--heartbeat_interval=0.2s", "--scheduler_recovery_timeout=1s"};
  const std::vector<std::string> checkpoints = {"--checkpoint_every_pushes=20"};
  Job job;
  StartRunningJob(job, kThree, mode, live, checkpoints);
  if (HasFatalFailure()) return;
  const int victim = job.ServerWithRank(1);
  ASSERT_GE(victim, 0);
  job.servers()[victim].Kill();
  ExpectCopiesAgain(job, 1);
  job.scheduler().Kill();
  for (auto* group : {&job.workers(), &job.servers()}) {
    for (size_t i = 0; i < group->size(); ++i) {
      if (group == &job.servers() && static_cast<int>(i) == victim) continue;
      absl::StatusOr<int> code = (*group)[i].WaitExit(absl::Seconds(30));
      ASSERT_TRUE(code.ok()) << "still running 30 s after the scheduler died: " << code.status();
      EXPECT_THAT((*group)[i].StderrText(), HasSubstr("presumed dead"));
    }
  }
  ASSERT_EQ(std::remove(CheckpointPath(job.checkpoints(), 1).c_str()), 0) << "server 1's disk is lost";

  ASSERT_TRUE(job.StartScheduler(kThree, kWorkers, SchedulerFlags()).ok());
  for (int rank = 0; rank < kThree; ++rank) {
    std::vector<std::string> flags = Concat(ServerFlags(job), Concat(live, {absl::StrCat("--rank=", rank)}));
    flags = Concat(flags, checkpoints);
    if (rank != 1) flags.push_back("--restore_dir=" + job.checkpoints());
    ASSERT_TRUE(job.StartServer(rank, flags).ok());
  }
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_TRUE(
        job.StartWorker("ps_exact_sum", Concat(WorkerFlags(mode), Concat(live, {absl::StrCat("--rank=", w)}))).ok());
  }
  const auto [longest_ms, exact] = ExpectExactSums(job, 0, kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    absl::StatusOr<std::string> line = job.workers()[kWorkers + w].WaitForLine("exact_sum OK ", absl::ZeroDuration());
    ASSERT_TRUE(line.ok()) << line.status();
    EXPECT_GT(IntField(*line, "start_step"), 40) << "the restarted job resumes where its checkpoints stand: " << *line;
  }
  const std::string scheduler = job.scheduler_logs().back();
  EXPECT_EQ(job.Events(scheduler, "job_restarts", {{"servers_restored", "2"}, {"servers", "3"}}).size(), 1);
  EXPECT_EQ(job.Events(scheduler, "copies_restored", {{"replicas", "2"}}).size(), 1);
  for (int s = kThree; s < 2 * kThree; ++s) {
    ExpectExitZero(job.servers()[s], absl::StrCat("restarted server ", s - kThree), absl::Seconds(30));
  }
  ExpectExitZero(job.scheduler(), "new scheduler", absl::Seconds(30));
  // Each slice is on two of the three servers: compared once, same bytes.
  const int compared = ExpectSameCopiesOnThree(job, 0, 1, 2);
  EXPECT_EQ(compared, 9);  // clock, dense in 4 slices, bias, and the table's 3 shards
  ExpectExactExport(job);
  PrintResult("whole_job_restart", mode, kThree, longest_ms, exact, compared);
}

// Trains the MLP (sync, 2 ps_worker on 3 servers, K = 2); with `kill`,
// server 1 is SIGKILLed once rank 0 is 20 steps in. Returns rank 0's
// output; both workers must exit 0 (rank 0 asks every server for its
// counters at the end: a dead one's backups answer for it).
std::string TrainMlp(bool kill) {
  Job job;
  EXPECT_TRUE(job.StartScheduler(3, 2, SchedulerFlags()).ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(job.StartServer(i, {"--heartbeat_interval=0.2s"}).ok());
  for (int w = 0; w < 2; ++w) {
    EXPECT_TRUE(job.StartWorker("ps_worker",
                                {"--epochs=2", "--train_limit=12000", "--test_limit=2000", absl::StrCat("--rank=", w),
                                 "--progress_every=0.05s", "--heartbeat_interval=0.2s"})
                    .ok());
  }
  if (kill) {
    bool started = false;
    for (absl::Time deadline = absl::Now() + absl::Seconds(60); !started;) {
      absl::StatusOr<std::string> line = job.workers()[0].ReadLine(deadline - absl::Now());
      if (!line.ok()) break;
      started = JsonField(*line, "event") == "\"progress\"" && JsonNumber(*line, "step") >= 20;
    }
    EXPECT_TRUE(started) << job.workers()[0].StderrText();
    const int victim = job.ServerWithRank(1);
    EXPECT_GE(victim, 0);
    if (victim >= 0) job.servers()[victim].Kill();
  }
  for (int w = 0; w < 2; ++w) ExpectExitZero(job.workers()[w], absl::StrCat("worker ", w), absl::Seconds(120));
  if (kill) {
    EXPECT_GE(job.CountSchedulerEvents("copies_restored"), 1);
  }
  return job.workers()[0].stdout_text();
}

// The operator's drain command against the job (ps_scheduler
// --drain_server): its exit code (-1: it did not end) and what it printed.
std::pair<int, std::string> Drain(Job& job, int rank) {
  absl::StatusOr<ChildProcess> p = ChildProcess::Start(
      "ps_scheduler", {absl::StrCat("--drain_server=", rank), "--scheduler=" + job.endpoint(), "--drain_timeout=60s"},
      absl::StrCat(job.dir(), "/drain", rank, ".log"));
  if (!p.ok()) return {-1, std::string(p.status().message())};
  const absl::StatusOr<int> code = p->WaitExit(absl::Seconds(90));
  return {code.ok() ? *code : -1, p->stdout_text() + p->StderrText()};
}

// 4 servers, K = 2, the table in 8 shards: server 1 leaves on SIGTERM
// (ps_server --drain), then server 2 on the operator's command. Each exits
// 0 once its slices have their two copies on the others, and no step waits
// for a heartbeat timeout; every worker ends with exact sums, and the last
// two servers hold every slice: the same values, rows, versions and clocks
// (admission sketches may differ by a pull around a hand-over: counted and
// printed, docs/fault-tolerance.md). Drains that cannot be are
// refused with their reason: a server that left, the last two servers of K = 2.
TEST_P(FailoverTest, TwoServersDrainedWhileTrainingLeaveWithExactSums) {
  const std::string mode = GetParam();
  Job job;
  StartRunningJob(job, kServers, mode, {}, {"--drain"}, 2, {"--table_shards=8"});
  if (HasFatalFailure()) return;
  const int one = job.ServerWithRank(1), two = job.ServerWithRank(2);
  ASSERT_GE(one, 0);
  ASSERT_GE(two, 0);
  ASSERT_EQ(kill(job.servers()[one].pid(), SIGTERM), 0);
  ExpectExitZero(job.servers()[one], "server 1 (drained on SIGTERM)", absl::Seconds(60));
  ASSERT_FALSE(job.workers()[0].WaitForLine("exact_sum OK ", absl::ZeroDuration()).ok()) << "the run ended early";
  const auto [code, out] = Drain(job, 2);
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("server 2 drained and left the job"));
  ExpectExitZero(job.servers()[two], "server 2 (drained by the operator)", absl::Seconds(30));
  const auto [gone, gone_out] = Drain(job, 2);
  EXPECT_EQ(gone, 1) << gone_out;
  EXPECT_THAT(gone_out, HasSubstr("NOT_FOUND: no live server 2 in this job of 4 servers"));
  const auto [last, last_out] = Drain(job, 0);
  EXPECT_EQ(last, 1) << last_out;
  EXPECT_THAT(last_out, HasSubstr("draining server 0 would leave 1 live servers for 2 copies of every slice"));
  const auto [longest_ms, exact] = ExpectExactSums(job, 2);
  EXPECT_LT(longest_ms, absl::ToDoubleMilliseconds(kHeartbeatTimeout)) << "a step waited as for a dead server";
  EXPECT_EQ(job.CountSchedulerEvents("server_left"), 2);
  EXPECT_EQ(job.CountSchedulerEvents("node_dead"), 0);
  for (int s : {0, 3}) {
    ExpectExitZero(job.servers()[job.ServerWithRank(s)], absl::StrCat("server ", s), absl::Seconds(30));
  }
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
  // A hand-over may leave two copies' admission sketches differing by a
  // pull (docs/fault-tolerance.md): counted and printed; values, rows, versions and
  // clocks must be the same.
  g_sketches_differ = 0;
  const int compared = ExpectSameCheckpointedCopies(job, 0, 3, Sameness::kRowsAndValues);
  EXPECT_EQ(compared, 14);  // clock, dense in 4 slices, bias, and the table's 8 shards
  ExpectExactExport(job);
  PrintResult("drain_two", mode, kServers, longest_ms, exact, compared, 2, g_sketches_differ);
}

// A server on a thread of this process, for what ServerOptions offers
// tests and ps_server no flag (ServerOptions::scheduler_lag). Asked to stop
// and joined when it goes away. Not thread-safe.
class ServerThread {
 public:
  static absl::StatusOr<std::unique_ptr<ServerThread>> Start(const ServerOptions& options) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<Server> server, Server::Create(options));
    return std::unique_ptr<ServerThread>(new ServerThread(std::move(server)));
  }
  ~ServerThread() {
    server_->RequestStop();
    thread_.join();
  }
  // Run's status once it returned within `timeout`; kDeadlineExceeded otherwise.
  absl::Status Wait(absl::Duration timeout) {
    if (!done_.WaitForNotificationWithTimeout(timeout)) {
      return absl::DeadlineExceededError(absl::StrCat("the server still runs after ", absl::FormatDuration(timeout)));
    }
    return status_;
  }

 private:
  explicit ServerThread(std::unique_ptr<Server> server)
      : server_(std::move(server)), thread_([this] {
          status_ = server_->Run();
          done_.Notify();
        }) {}

  std::unique_ptr<Server> server_;
  absl::Status status_;  // Run's, written before done_ is notified
  absl::Notification done_;
  std::thread thread_;  // last: it starts once the rest is built
};

// 3 servers, K = 2, the table in 8 shards; servers 0 and 2 hear the
// scheduler 300 ms late (ServerOptions::scheduler_lag), as over a slow
// link. Server 1 drains while the workers train: each slice it leads moves
// its lead to one of them, and the workers learn of each move first. A
// worker's push of a moved slice waits at its new server for the view that
// moves it, and the push of that server's own slices the worker numbered
// after it in the same step waits behind it: a server takes each worker's
// pushes in the order it numbered them, or the first would pass for a
// re-send of a push applied already and be dropped (in sync, a step that
// never completes). Every push lands once: exact sums, and both survivors
// hold the same copies.
TEST_P(FailoverTest, PushesThatWaitForTheViewOfAMoveKeepTheirOrder) {
  const std::string mode = GetParam();
  constexpr int kThree = 3;
  Job job;
  ASSERT_TRUE(job.StartScheduler(kThree, kWorkers, SchedulerFlags()).ok());
  ASSERT_TRUE(job.StartServer(1, Concat(ServerFlags(job), {"--rank=1", "--drain"})).ok());
  std::unique_ptr<ServerThread> lagging[2];
  for (int i = 0; i < 2; ++i) {
    ServerOptions options;
    options.scheduler = job.endpoint();
    options.rank = 2 * i;  // ranks 0 and 2
    options.num_threads = 1;
    options.checkpoint_dir = job.checkpoints();
    options.checkpoint_every = absl::ZeroDuration();
    options.scheduler_lag = absl::Milliseconds(300);
    absl::StatusOr<std::unique_ptr<ServerThread>> server = ServerThread::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    lagging[i] = *std::move(server);
  }
  ASSERT_TRUE(job.StartWorkers("ps_exact_sum", kWorkers, Concat(WorkerFlags(mode), {"--table_shards=8"})).ok());
  ASSERT_TRUE(job.workers()[0].WaitForLine("exact_sum steps=40", absl::Seconds(60)).ok())
      << job.workers()[0].StderrText();
  ASSERT_EQ(kill(job.servers()[0].pid(), SIGTERM), 0);
  ExpectExitZero(job.servers()[0], "server 1 (drained on SIGTERM)", absl::Seconds(60));
  const auto [longest_ms, exact] = ExpectExactSums(job, 1);
  EXPECT_EQ(exact, kWorkers);
  EXPECT_EQ(job.CountSchedulerEvents("server_left"), 1);
  EXPECT_EQ(job.CountSchedulerEvents("node_dead"), 0);
  for (std::unique_ptr<ServerThread>& server : lagging) EXPECT_TRUE(server->Wait(absl::Seconds(30)).ok());
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
  g_sketches_differ = 0;
  const int compared = ExpectSameCheckpointedCopies(job, 0, 2, Sameness::kRowsAndValues);
  EXPECT_EQ(compared, 14);  // clock, dense in 4 slices, bias, and the table's 8 shards
  ExpectExactExport(job);
  PrintResult("drain_to_lagging_servers", mode, kThree, longest_ms, exact, compared, 2, g_sketches_differ);
}

// The slice copies the scheduler moved to balance the job over `servers`
// servers (its log line), or -1.
int MovesOver(const Job& job, int servers) {
  const std::vector<std::string> planned = job.SchedulerEvents("moves_planned", {{"servers", absl::StrCat(servers)}});
  return planned.empty() ? -1 : static_cast<int>(JsonNumber(planned.front(), "moves"));
}

// The joins moved about 1/S of the job's `copies` to the S-th server, for S
// = `first` (the servers after the first join) and the next; prints what
// they moved and what the workers saw as a JSON line for the results.
void ExpectJoinMoves(Job& job, const std::string& test, const std::string& mode, int copies, int first,
                     double longest_ms, int exact, int compared) {
  JsonLine line;
  line.Add("test", test).Add("mode", mode);
  for (int s : {first, first + 1}) {
    const int moved = MovesOver(job, s);
    EXPECT_NEAR(moved, copies / static_cast<double>(s), 3) << job.Log("scheduler");
    line.Add(absl::StrCat("copies_moved_to_", s, "_servers"), moved)
        .Add(absl::StrCat("fraction_moved_to_", s), moved / static_cast<double>(copies), 3);
  }
  int rerouted = 0, fenced = 0;
  for (int w = 0; w < kWorkers; ++w) {
    const std::string done = *job.workers()[w].WaitForLine("exact_sum OK ", absl::ZeroDuration());
    rerouted += static_cast<int>(IntField(done, "requests_rerouted"));
    fenced += static_cast<int>(IntField(done, "requests_fenced"));
  }
  std::printf("%s\n", line.Add("requests_rerouted", rerouted)
                          .Add("requests_fenced", fenced)
                          .Add("shard_sketches_differing", g_sketches_differ)
                          .Add("longest_step_s", longest_ms / 1000, 3)
                          .Add("workers_with_exact_sums", exact)
                          .Add("slices_compared", compared)
                          .Str()
                          .c_str());
}

// 2 servers, K = 2, the table in 16 shards: servers 2 and 3 join while the
// job trains (ps_server --join) and take their share of the copies, moved
// one at a time (copied, then handed over by the old primary); then server
// 0 is drained. Every worker ends with exact sums, some of its requests
// having been refused by a server a slice had just left and sent again
// where it went; the three survivors hold every slice twice: the same
// values, rows, versions and clocks (an admission sketch may differ by a
// pull around a hand-over: counted and printed, docs/fault-tolerance.md).
// Rows are admitted on their third pull, as in the other tests: a worker's
// requests for a slice reach it in the order made, also those routed again
// after a move (ps_exact_sum has one exchange in flight at a time; a
// prefetching worker's would pass each other but for the client's fence,
// tests/client_fence_test.cc), so no push finds its row not admitted yet.
TEST_P(FailoverTest, TwoServersJoinAndOneDrainsWhileTrainingWithExactSums) {
  const std::string mode = GetParam();
  Job job;
  StartRunningJob(job, 2, mode, {}, {"--drain"}, 2, {"--table_shards=16"});
  if (HasFatalFailure()) return;
  for (int rank : {2, 3}) {
    ASSERT_TRUE(job.StartServer(rank, Concat(ServerFlags(job), {"--join", "--drain"})).ok());
    ASSERT_TRUE(job.WaitForSchedulerEvents("slice_moved", {{"to_go", "0"}}, rank - 1)) << job.Log("scheduler");
  }
  ASSERT_FALSE(job.workers()[0].WaitForLine("exact_sum OK ", absl::ZeroDuration()).ok()) << "the run ended early";
  const auto [code, out] = Drain(job, 0);
  EXPECT_EQ(code, 0) << out;
  const auto [longest_ms, exact] = ExpectExactSums(job, 1);
  EXPECT_EQ(job.CountSchedulerEvents("server_joined", {{"rank", "3"}}), 1);
  EXPECT_EQ(job.CountSchedulerEvents("server_left"), 1);
  EXPECT_EQ(job.CountSchedulerEvents("node_dead"), 0);
  for (int s : {1, 2, 3}) {
    ExpectExitZero(job.servers()[job.ServerWithRank(s)], absl::StrCat("server ", s), absl::Seconds(30));
  }
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
  // Each slice has its two copies on two of the three survivors: compared once.
  g_sketches_differ = 0;
  const int compared = ExpectSameCopiesOnThree(job, 1, 2, 3, Sameness::kRowsAndValues);
  EXPECT_EQ(compared, 22);  // clock, dense in 4 slices, bias, and the table's 16 shards
  ExpectExactExport(job);
  // 44 copies: a third of them move to the third server, a quarter to the fourth.
  ExpectJoinMoves(job, "join_two_drain_one", mode, 44, 3, longest_ms, exact, compared);
}

// 1 server, one copy of each slice (ps_scheduler --elastic), the table in
// 16 shards: server 0 may not drain (the last one); servers 1 and 2 join
// while the job trains and take their share of the slices (each move makes
// a second copy, then hands over); then server 0 is drained. Every worker
// ends with exact sums, no step waits near a second, and the export from
// the two survivors' checkpoints holds every push once.
TEST_P(FailoverTest, OneServerGrowsToThreeAndTheFirstDrainsWithOneCopyEach) {
  const std::string mode = GetParam();
  Job job;
  StartRunningJob(job, 1, mode, {}, {"--drain"}, 1, {"--table_shards=16"}, /*elastic=*/true);
  if (HasFatalFailure()) return;
  const auto [last, last_out] = Drain(job, 0);
  EXPECT_EQ(last, 1) << last_out;
  EXPECT_THAT(last_out, HasSubstr("draining server 0 would leave 0 live servers for 1 copies of every slice"));
  for (int rank : {1, 2}) {
    ASSERT_TRUE(job.StartServer(rank, Concat(ServerFlags(job), {"--join", "--drain"})).ok());
    ASSERT_TRUE(job.WaitForSchedulerEvents("slice_moved", {{"to_go", "0"}}, rank)) << job.Log("scheduler");
  }
  ASSERT_FALSE(job.workers()[0].WaitForLine("exact_sum OK ", absl::ZeroDuration()).ok()) << "the run ended early";
  const auto [code, out] = Drain(job, 0);
  EXPECT_EQ(code, 0) << out;
  const auto [longest_ms, exact] = ExpectExactSums(job, 1);
  EXPECT_LT(longest_ms, 1000) << "a step stalled a second or more during a move";
  EXPECT_EQ(job.CountSchedulerEvents("server_left"), 1);
  EXPECT_EQ(job.CountSchedulerEvents("node_dead"), 0);
  for (int s : {1, 2}) {
    ExpectExitZero(job.servers()[job.ServerWithRank(s)], absl::StrCat("server ", s), absl::Seconds(30));
  }
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
  ExpectExactExport(job);
  // 22 slices: half of them move to the second server, a third to the third.
  ExpectJoinMoves(job, "grow_1_to_3_drain_first_k1", mode, 22, 2, longest_ms, exact, 0);
}

// 3 servers, K = 2: a server joins and is SIGKILLed while slices move to
// it; another joins and an old server is SIGKILLed while slices move to
// the newcomer. Each death drops the moves planned (the one under way is
// abandoned, or its old copy fails over), the slices get their two copies
// back, and the moves are planned again: never a slice without a copy or
// with two primaries, and every worker ends with exact sums.
TEST_P(FailoverTest, AMoveInterruptedByTheDeathOfEitherSideLosesNothing) {
  const std::string mode = GetParam();
  Job job;
  StartRunningJob(job, 3, mode, {}, {}, 2, {"--table_shards=16", "--admit_after=1"});
  if (HasFatalFailure()) return;
  // The new side dies mid-move.
  ASSERT_TRUE(job.StartServer(3, Concat(ServerFlags(job), {"--join"})).ok());
  ASSERT_TRUE(job.WaitForSchedulerEvents("slice_moved", {{"to", "3"}}, 1)) << job.Log("scheduler");
  job.servers()[3].Kill();
  ExpectCopiesAgain(job, 1);
  // The old side dies mid-move.
  ASSERT_TRUE(job.StartServer(4, Concat(ServerFlags(job), {"--join"})).ok());
  ASSERT_TRUE(job.WaitForSchedulerEvents("server_joined", {{"rank", "4"}}, 1));
  const int zero = job.ServerWithRank(0);
  ASSERT_GE(zero, 0);
  job.servers()[zero].Kill();
  const auto [longest_ms, exact] = ExpectExactSums(job, 2);
  EXPECT_EQ(exact, kWorkers);
  EXPECT_EQ(job.CountSchedulerEvents("server_lost", {{"rank", "3"}}), 1);
  EXPECT_EQ(job.CountSchedulerEvents("server_lost", {{"rank", "0"}}), 1);
  EXPECT_EQ(LossesLeavingSlicesAlone(job), 0);
  for (int s : {1, 2, 4}) {
    ExpectExitZero(job.servers()[job.ServerWithRank(s)], absl::StrCat("server ", s), absl::Seconds(30));
  }
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
  ExpectExactExport(job);
  PrintResult("move_interrupted", mode, 3, longest_ms, exact, 0);
}

// 2 servers, one copy of each slice (--elastic), checkpoints every second:
// a server joins and is SIGKILLed once a slice moved to it; another joins
// and server 0 is SIGKILLed while slices move from it to the newcomer. Each
// death rolls back the move under way (its slice stays with its old
// server, alone); each dead server is restarted from its checkpoint (with
// one copy, what it held alone waits for it) and the workers re-send what
// the checkpoint lacks. Every worker ends with exact sums.
TEST_P(FailoverTest, OneCopyEachAMoveInterruptedByEitherSidesDeathRollsBack) {
  const std::string mode = GetParam();
  Job job;
  const std::vector<std::string> every_second = {"--checkpoint_every=1s"};
  StartRunningJob(job, 2, mode, {}, every_second, 1, {"--table_shards=16", "--admit_after=1"}, /*elastic=*/true);
  if (HasFatalFailure()) return;
  std::set<int> killed;  // indexes in job.servers()
  const auto restart = [&](int rank, int index) {
    killed.insert(index);
    job.servers()[index].Kill();
    ASSERT_TRUE(job.WaitForSchedulerEvents("server_lost", {{"rank", absl::StrCat(rank)}}, 1, absl::Seconds(30)))
        << job.Log("scheduler");
    ASSERT_TRUE(job.StartServer(rank, Concat(Concat(ServerFlags(job), every_second),
                                             {"--restore_dir=" + job.checkpoints(), absl::StrCat("--rank=", rank)}))
                    .ok());
  };
  // The new side dies mid-move.
  ASSERT_TRUE(job.StartServer(2, Concat(Concat(ServerFlags(job), every_second), {"--join"})).ok());
  ASSERT_TRUE(job.WaitForSchedulerEvents("slice_moved", {{"to", "2"}}, 1)) << job.Log("scheduler");
  restart(2, static_cast<int>(job.servers().size()) - 1);
  if (HasFatalFailure()) return;
  // The old side dies mid-move.
  ASSERT_TRUE(job.StartServer(3, Concat(Concat(ServerFlags(job), every_second), {"--join"})).ok());
  ASSERT_TRUE(job.WaitForSchedulerEvents("slice_moved", {{"to", "3"}}, 1)) << job.Log("scheduler");
  restart(0, job.ServerWithRank(0));
  if (HasFatalFailure()) return;
  const auto [longest_ms, exact] = ExpectExactSums(job, 2);
  EXPECT_EQ(exact, kWorkers);
  EXPECT_GT(LossesLeavingSlicesAlone(job), 0) << "no slice waited for its only server's restart";
  for (int i = 0; i < static_cast<int>(job.servers().size()); ++i) {
    if (!killed.count(i)) ExpectExitZero(job.servers()[i], absl::StrCat("server process ", i), absl::Seconds(30));
  }
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
  ExpectExactExport(job);
  PrintResult("move_interrupted_k1", mode, 2, longest_ms, exact, 0, 1);
}

// A server asking to join with a rank it wants, or to a job that is not
// running: refused, naming why.
TEST(JoinTest, AJoinWithARankOrToAFormingJobIsRefused) {
  Job job;
  ASSERT_TRUE(job.StartScheduler(2, 1, SchedulerFlags()).ok());
  ASSERT_TRUE(job.StartServer(0, {"--join", "--rank=3"}).ok());
  absl::StatusOr<int> code = job.servers()[0].WaitExit(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_NE(*code, 0);
  EXPECT_THAT(job.servers()[0].StderrText(), HasSubstr("a joining server takes a new rank"));
  ASSERT_TRUE(job.StartServer(1, {"--join"}).ok());
  code = job.servers()[1].WaitExit(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_NE(*code, 0);
  EXPECT_THAT(job.servers()[1].StderrText(), HasSubstr("no running job to join"));
}

// With one copy of each slice there is nowhere to hand a server's slices
// over to: the drain is refused with that reason and the job goes on.
TEST(DrainTest, OneCopyOfEachSliceRefusesADrainAndTheJobGoesOn) {
  Job job;
  StartRunningJob(job, 2, "sync", {}, {}, /*replicas=*/1);
  if (HasFatalFailure()) return;
  const auto [code, out] = Drain(job, 1);
  EXPECT_EQ(code, 1) << out;
  EXPECT_THAT(out, HasSubstr("draining server 1 needs ps_scheduler --elastic (or --replicas >= 2)"));
  ExpectExactSums(job, 0);
  job.ExpectAllExitZero();
}

// A training job goes on through a server's death (K = 2) to the accuracy
// of an undisturbed run, and its workers end well: rank 0's final
// server_stats event counts the survivors and says one server failed over.
TEST(FailoverTrainingTest, TheMlpTrainsThroughAServerKillToTheUndisturbedAccuracy) {
  const std::string undisturbed = TrainMlp(false);
  const std::string killed = TrainMlp(true);
  ASSERT_GT(FinalAccuracy(undisturbed), 0.7) << undisturbed;
  EXPECT_NEAR(FinalAccuracy(killed), FinalAccuracy(undisturbed), 0.005);
  const std::vector<std::string> stats = JsonEvents(killed, "server_stats");
  ASSERT_EQ(stats.size(), 1u) << killed;
  EXPECT_EQ(JsonField(stats[0], "servers"), "2") << stats[0];
  EXPECT_EQ(JsonField(stats[0], "servers_failed_over"), "1") << stats[0];
  EXPECT_EQ(JsonField(JsonEvents(undisturbed, "server_stats").at(0), "servers_failed_over"), std::nullopt);
  std::printf("%s\n", JsonLine()
                          .Add("test", "mlp_through_a_server_kill")
                          .Add("undisturbed_accuracy", FinalAccuracy(undisturbed), 4)
                          .Add("killed_accuracy", FinalAccuracy(killed), 4)
                          .Str()
                          .c_str());
}

INSTANTIATE_TEST_SUITE_P(Modes, FailoverTest, ::testing::Values("sync", "async"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace ps::testing
