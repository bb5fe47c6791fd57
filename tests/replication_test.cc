// ps_scheduler --replicas: servers SIGKILLed in a running job with K = 2
// copies of every slice are never restarted; their slices fail over to
// their backups and are copied back to two copies, every worker ends with
// exact sums, and the surviving copies of each slice hold the same bytes. Each run prints what it measured (the
// longest step, which spans the failure) as a JSON line for the results.

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/hash.h"
#include "common/json.h"
#include "common/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/checkpoint.h"
#include "server/slice_store.h"
#include "server/table_shard.h"
#include "tests/job.h"

namespace ps::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kServers = 4, kWorkers = 2, kSteps = 800, kTableIds = 200;
constexpr int64_t kDense = 200000;
constexpr absl::Duration kHeartbeatTimeout = absl::Seconds(2);

// The number after "key=" in `line` as a double (-1 when missing).
double DoubleField(const std::string& line, const std::string& key) {
  const size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return -1;
  const size_t from = at + key.size() + 2;
  double v = -1;
  return absl::SimpleAtod(line.substr(from, line.find(' ', from) - from), &v) ? v : -1;
}

// Every slice held by both stores (a primary and its backup) holds the same
// values, optimizer state, version and clocks, and a table shard the same
// rows, bit for bit; returns how many slices were compared.
int ExpectSameCopies(const SliceStore& a, const SliceStore& b, const std::string& what) {
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
    }
    ++compared;
  }
  return compared;
}

class FailoverTest : public ::testing::TestWithParam<const char*> {};

// 4 servers, K = 2: server 1 is killed, the scheduler copies the slices that
// lost a copy onto the others, then server 2 is killed, and again. Nobody
// restarts anything; every worker ends with exact sums, and the last two
// servers hold every slice, the same bytes on both.
TEST_P(FailoverTest, TwoServersKilledOneAfterTheOtherWithExactSums) {
  const std::string mode = GetParam();
  Job job;
  ASSERT_TRUE(job.StartScheduler(
                     kServers, kWorkers,
                     {"--replicas=2", absl::StrCat("--heartbeat_timeout=", absl::FormatDuration(kHeartbeatTimeout))})
                  .ok());
  // Checkpoints only for the comparison at the end: each survivor writes
  // its final one, backup copies included; nobody restores from them.
  for (int i = 0; i < kServers; ++i) {
    ASSERT_TRUE(job.StartServer(i, {"--checkpoint_dir=" + job.checkpoints(), "--checkpoint_every=0s"}).ok());
  }
  ASSERT_TRUE(job.StartWorkers("ps_exact_sum", kWorkers,
                               {absl::StrCat("--steps=", kSteps), "--consistency=" + mode,
                                absl::StrCat("--dense_elements=", kDense), "--slice_bytes=200000",
                                absl::StrCat("--table_ids=", kTableIds), "--step_ms=10", "--progress_every=40"})
                  .ok());
  ASSERT_TRUE(job.workers()[0].WaitForLine("exact_sum steps=40", absl::Seconds(60)).ok())
      << job.workers()[0].StderrText();
  std::vector<int> killed;
  for (int rank : {1, 2}) {
    const int victim = job.ServerWithRank(rank);
    ASSERT_GE(victim, 0);
    // Still training: the failure lands mid-run.
    ASSERT_FALSE(job.workers()[0].WaitForLine("exact_sum OK ", absl::ZeroDuration()).ok()) << "the run ended early";
    job.servers()[victim].Kill();
    killed.push_back(victim);
    // Back to two copies of every slice before the next failure.
    const int lost = CountOf(job.Log("scheduler"), "copies again") + 1;
    ASSERT_TRUE(WaitFor([&] { return CountOf(job.Log("scheduler"), "copies again") >= lost; }, absl::Seconds(60)))
        << job.Log("scheduler");
    EXPECT_THAT(job.Log("scheduler"), HasSubstr(absl::StrCat("server ", rank, " lost: ")));
  }
  // Every push of every worker applied once: nothing lost with the servers,
  // nothing applied twice by the backups they reached before they died.
  const std::string want =
      absl::StrFormat("dense_sum=%.1f expected_sum=%.1f", ExpectedDenseSum(kWorkers, kSteps, kDense),
                      ExpectedDenseSum(kWorkers, kSteps, kDense));
  double longest_ms = 0;
  int exact = 0;
  for (int w = 0; w < kWorkers; ++w) {
    auto line = job.workers()[w].WaitForLine("exact_sum OK ", absl::Seconds(120));
    ASSERT_TRUE(line.ok()) << "worker " << w << ": " << line.status() << "\n" << job.workers()[w].StderrText();
    EXPECT_THAT(*line, HasSubstr(want));
    exact += line->find(want) != std::string::npos;
    EXPECT_EQ(IntField(*line, "servers_recovered"), 2) << *line;  // the two failovers
    longest_ms = std::max(longest_ms, DoubleField(*line, "longest_step_ms"));
  }
  EXPECT_GT(longest_ms, 0);
  for (int w = 0; w < kWorkers; ++w) ExpectExitZero(job.workers()[w], absl::StrCat("worker ", w), absl::Seconds(30));
  for (int s = 0; s < kServers; ++s) {
    if (std::find(killed.begin(), killed.end(), s) == killed.end()) {
      ExpectExitZero(job.servers()[s], absl::StrCat("server ", s), absl::Seconds(30));
    }
  }
  ExpectExitZero(job.scheduler(), "scheduler", absl::Seconds(30));
  // The survivors' final checkpoints: each holds every slice now, one as
  // its primary, the other as its backup, the same bytes.
  ThreadPool pool(1);
  SliceStore a(&pool, false, 0), b(&pool, false, 0);
  ASSERT_TRUE(LoadCheckpoint(job.checkpoints(), 0, &a).ok());
  ASSERT_TRUE(LoadCheckpoint(job.checkpoints(), 3, &b).ok());
  const int compared = ExpectSameCopies(a, b, "servers 0 and 3");
  EXPECT_EQ(compared, static_cast<int>(a.slice_list().size()));
  EXPECT_EQ(a.slice_list().size(), b.slice_list().size());
  std::printf("%s\n", JsonLine()
                          .Add("test", "failover")
                          .Add("mode", mode)
                          .Add("replicas", 2)
                          .Add("servers", kServers)
                          .Add("servers_killed", 2)
                          .Add("heartbeat_timeout_s", absl::ToDoubleSeconds(kHeartbeatTimeout), 1)
                          .Add("longest_step_s", longest_ms / 1000, 3)
                          .Add("workers_with_exact_sums", exact)
                          .Add("slices_compared", compared)
                          .Str()
                          .c_str());
}

INSTANTIATE_TEST_SUITE_P(Modes, FailoverTest, ::testing::Values("sync", "async"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace ps::testing
