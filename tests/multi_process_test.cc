// Real binaries as separate processes on 127.0.0.1 with ephemeral ports:
// 1 scheduler, 2 servers, 4 workers pushing integer gradients with SGD lr=1.
// Every process is stopped by its pid when the test ends, pass or fail.
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/cluster_fixture.h"
#include "tests/job.h"

namespace ps {
namespace {

using testing::ChildProcess;
using testing::ExpectedDenseSum;
using ::testing::HasSubstr;
using testing::Job;

struct WorkerReport {
  double dense_sum = -1;
  std::string clocks;
  int max_lag = -1;
};

// Parses "exact_sum OK rank=.. dense_sum=X expected_sum=.. clocks=[..] max_lag_seen=K".
bool ParseReport(const std::string& out, WorkerReport* r) {
  std::smatch m;
  static const std::regex re(R"(exact_sum OK .* dense_sum=([0-9.]+) .* clocks=\[([0-9,]*)\] max_lag_seen=(\d+))");
  if (!std::regex_search(out, m, re)) return false;
  r->dense_sum = std::stod(m[1]);
  r->clocks = m[2];
  r->max_lag = std::stoi(m[3]);
  return true;
}

// (consistency, data plane): "shm" (the default where servers share the
// host), "tcp" (workers --shm=false) or "server_off" (servers --shm=false:
// the workers ask, are refused, and stay on their sockets).
size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class ExactSumTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(ExactSumTest, FourWorkersTwoServersEndWithTheExactSum) {
  constexpr int kSteps = 20, kWorkers = 4;
  constexpr int64_t kN = 200000;
  const auto& [mode, plane] = GetParam();
  Job cluster;
  // Each worker checks every pull itself (sync: exactly t steps applied) and
  // exits non-zero naming the first wrong value.
  std::vector<std::string> worker_flags = {"--consistency=" + mode, absl::StrCat("--steps=", kSteps),
                                           absl::StrCat("--dense_elements=", kN), "--slice_bytes=262144"};
  if (plane == "tcp") worker_flags.push_back("--shm=false");
  absl::Status started = cluster.StartScheduler(2, kWorkers);
  for (int i = 0; started.ok() && i < 2; ++i) {
    started = cluster.StartServer(
        i, plane == "server_off" ? std::vector<std::string>{"--shm=false"} : std::vector<std::string>{});
  }
  if (started.ok()) started = cluster.StartWorkers("ps_exact_sum", kWorkers, worker_flags);
  ASSERT_TRUE(started.ok()) << started;
  cluster.ExpectAllExitZero();
  const double expected = ExpectedDenseSum(kWorkers, kSteps, kN);
  for (auto& w : cluster.workers()) {
    WorkerReport r;
    ASSERT_TRUE(ParseReport(w.stdout_text(), &r)) << w.stdout_text();
    EXPECT_EQ(r.dense_sum, expected);
    EXPECT_EQ(r.clocks, "20,20,20,20");
    if (mode == "sync") {
      EXPECT_EQ(r.max_lag, 0);
    }
    // The worker's log says which plane each of the two servers is on.
    const std::string log = w.StderrText();
    EXPECT_EQ(Count(log, "messages go through shared memory"), plane == "shm" ? 2 : 0) << log;
    EXPECT_EQ(Count(log, "shared memory is off on this server"), plane == "server_off" ? 2 : 0) << log;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ExactSumTest,
                         ::testing::Combine(::testing::Values("sync", "async"),
                                            ::testing::Values("shm", "tcp", "server_off")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST(IpcTest, SameJobOverIpcSocketsEndsWithTheExactSum) {
  Job cluster;
  // Every endpoint an ipc:// socket file in the test's directory.
  const absl::Status started = cluster.StartScheduler(2, 2, {"--bind=ipc://" + cluster.dir() + "/scheduler.sock"});
  ASSERT_TRUE(started.ok()) << started;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cluster.StartServer(i, {absl::StrCat("--bind=ipc://", cluster.dir(), "/server", i, ".sock")}).ok());
  }
  EXPECT_THAT(cluster.endpoint(), ::testing::StartsWith("ipc://"));
  ASSERT_TRUE(cluster.StartWorkers("ps_exact_sum", 2, {"--steps=10", "--dense_elements=100000"}).ok());
  cluster.ExpectAllExitZero();
  for (auto& w : cluster.workers()) {
    WorkerReport r;
    ASSERT_TRUE(ParseReport(w.stdout_text(), &r)) << w.stdout_text();
    EXPECT_EQ(r.dense_sum, ExpectedDenseSum(2, 10, 100000));
  }
}

// A worker that reads its replies more slowly than its server writes them
// loses its shared-memory channel (the server keeps at most four rings of
// replies waiting: 4 MiB with 1 MiB rings, against 32 MB pulls). What was in
// flight on the channel goes again through the socket: no request is lost
// (the pushes the server had applied are dropped by sequence number).
TEST(ShmTest, AChannelClosedUnderLoadLosesNoRequest) {
  Job cluster;
  ASSERT_TRUE(cluster.StartScheduler(1, 1).ok());
  ASSERT_TRUE(cluster.StartServer(0, {"--shm_ring_mb=1"}).ok());
  ASSERT_TRUE(cluster.StartWorkers("ps_exact_sum", 1, {"--steps=4", "--dense_elements=8000000"}).ok());
  cluster.ExpectAllExitZero();
  auto line = cluster.workers()[0].WaitForLine("exact_sum OK ", absl::Seconds(1));
  ASSERT_TRUE(line.ok()) << cluster.workers()[0].stdout_text();
  EXPECT_THAT(*line, ::testing::HasSubstr(absl::StrFormat("dense_sum=%.1f", ExpectedDenseSum(1, 4, 8000000))));
  EXPECT_GT(testing::IntField(*line, "requests_resent_off_shm"), 0) << *line;
  EXPECT_EQ(testing::IntField(*line, "shm_servers"), 0) << "the channel was closed and not asked for again";
}

TEST(StalenessTest, Ssp2NeverReadsAValueMoreThanTwoStepsStale) {
  Job cluster;
  // Worker 0 is a straggler, so the others run into the bound.
  const absl::Status started = cluster.StartJob(
      2, 4, "ps_exact_sum",
      {"--consistency=ssp:2", "--steps=15", "--dense_elements=50000", "--slow_rank=0", "--slow_step_ms=20"});
  ASSERT_TRUE(started.ok()) << started;
  cluster.ExpectAllExitZero();
  int max_lag = 0;
  for (auto& w : cluster.workers()) {
    WorkerReport r;
    ASSERT_TRUE(ParseReport(w.stdout_text(), &r)) << w.stdout_text();
    EXPECT_LE(r.max_lag, 2);
    max_lag = std::max(max_lag, r.max_lag);
    EXPECT_EQ(r.dense_sum, ExpectedDenseSum(4, 15, 50000));
  }
  EXPECT_EQ(max_lag, 2) << "the fast workers never reached the staleness bound";
}

TEST(FormingTest, SchedulerNamesTheMissingNodesAndEveryoneExits) {
  Job cluster;
  const absl::Status started = cluster.StartScheduler(1, 2, {"--register_timeout=1s"});
  ASSERT_TRUE(started.ok()) << started;
  ASSERT_TRUE(cluster.StartServer(0).ok());
  auto code = cluster.scheduler().WaitExit(absl::Seconds(20));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(cluster.scheduler().StderrText(), HasSubstr("missing 0 server(s) and 2 worker(s)"));
  auto server_code = cluster.servers()[0].WaitExit(absl::Seconds(20));
  ASSERT_TRUE(server_code.ok());
  EXPECT_EQ(*server_code, 1);
  EXPECT_THAT(cluster.servers()[0].StderrText(), HasSubstr("scheduler ended the job"));
}

struct FlagCase {
  std::string binary;
  std::vector<std::string> args;
  std::string names;
};

class BadFlagTest : public ::testing::TestWithParam<FlagCase> {};

TEST_P(BadFlagTest, IsRefusedAtStartNamingTheFlag) {
  testing::ScopedTempDir temp;
  const std::string dir = temp.path();
  auto p = ChildProcess::Start(GetParam().binary, GetParam().args, dir + "/stderr.log");
  ASSERT_TRUE(p.ok());
  auto code = p->WaitExit(absl::Seconds(20));
  ASSERT_TRUE(code.ok());
  EXPECT_NE(*code, 0);
  EXPECT_THAT(p->StderrText(), HasSubstr(GetParam().names));
}

INSTANTIATE_TEST_SUITE_P(
    Flags, BadFlagTest,
    ::testing::Values(
        FlagCase{"ps_scheduler", {"--num_workers=abc"}, "num_workers"},
        FlagCase{"ps_scheduler", {"--num_servers=0"}, "num_servers"},
        FlagCase{"ps_scheduler", {"--port=70000"}, "port"}, FlagCase{"ps_server", {}, "scheduler: required"},
        FlagCase{"ps_server", {"--scheduler=127.0.0.1:1", "--num_threads=-3"}, "num_threads"},
        FlagCase{"ps_server", {"--scheduler=127.0.0.1:1", "--shm_ring_mb=0"}, "shm_ring_mb: 0"},
        // The tables' disk tier: a directory that cannot be one, a negative bound, a
        // store cache that leaves the rows nothing.
        FlagCase{"ps_server",
                 {"--scheduler=127.0.0.1:1", "--table_disk_dir=/proc/self/no/such/dir"},
                 "--table_disk_dir /proc/self/no/such/dir: cannot make it"},
        FlagCase{"ps_server", {"--scheduler=127.0.0.1:1", "--table_disk_dir=/dev/null"}, "--table_disk_dir /dev/null"},
        FlagCase{"ps_server", {"--scheduler=127.0.0.1:1", "--table_disk_max_gb=-1"}, "table_disk_max_gb"},
        FlagCase{"ps_server",
                 {"--scheduler=127.0.0.1:1", "--table_disk_dir=/tmp", "--max_memory_mb=16", "--table_disk_cache_mb=16"},
                 "leaves nothing of max_memory"},
        FlagCase{"ps_exact_sum", {"--scheduler=127.0.0.1:1", "--shm=maybe"}, "shm"},
        FlagCase{"ps_server", {"--scheduler=nonsense"}, "scheduler"},
        FlagCase{"ps_exact_sum", {"--scheduler=127.0.0.1:1", "--consistency=ssp:x"}, "consistency"},
        FlagCase{"ps_exact_sum", {"--scheduler=127.0.0.1:1", "--steps=0"}, "steps"},
        FlagCase{"ps_exact_sum", {"--no_such_flag=1"}, "no_such_flag"}));

TEST(HelpTest, EveryBinaryListsItsFlagsWithDefaults) {
  testing::ScopedTempDir temp;
  const std::string dir = temp.path();
  for (const std::string binary : {"ps_scheduler", "ps_server", "ps_exact_sum"}) {
    auto p = ChildProcess::Start(binary, {"--help"}, dir + "/help.log");
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE(p->WaitExit(absl::Seconds(20)).ok());
    const std::string help = p->stdout_text() + p->StderrText();
    EXPECT_THAT(help, HasSubstr(binary == "ps_scheduler" ? "--num_workers" : "--scheduler")) << binary;
    EXPECT_THAT(help, HasSubstr("default:")) << binary;
  }
}

}  // namespace
}  // namespace ps
