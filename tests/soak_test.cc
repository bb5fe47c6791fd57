// Soak: a 2-server, 3-worker async job of ps_exact_sum runs for minutes while
// a seeded random generator, every 3 to 6 s, SIGKILLs one process of any role
// (scheduler, server of rank r, worker of rank r) and restarts it the way an
// operator would (ps_scheduler --restore --state_file, ps_server --restore_dir
// --rank=r, the worker with --rank=r), waiting until it is back before the
// next kill. At the end every worker shows the exact sums (no push lost or
// applied twice) and every live process exits 0. Prints one JSON line: kills
// by role and the time from each kill until the process was back.
//
// Reproduce a run's choices with PS_SOAK_SEED=<the seed it printed>.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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

constexpr int kServers = 2, kWorkers = 3;
// 3000 steps of 40 ms emulated compute: about 2.5 minutes undisturbed on the
// 2-core test machine. Kills stop after kKillPhase, well before the end.
constexpr int kSteps = 3000, kStepMs = 40;
constexpr int64_t kDense = 20000;
constexpr absl::Duration kKillPhase = absl::Seconds(100);
constexpr size_t kMinKills = 10, kMaxKills = 20;

enum class Role { kScheduler, kServer, kWorker };
constexpr Role kRoles[] = {Role::kScheduler, Role::kServer, Role::kWorker};

const char* RoleName(Role role) {
  switch (role) {
    case Role::kScheduler: return "scheduler";
    case Role::kServer: return "server";
    case Role::kWorker: return "worker";
  }
  return "?";
}

struct KillRecord {
  Role role;
  int rank;
  absl::Duration kill_to_back;
};

// Whether `p` has exited (reaped), looking for at most 1 ms.
bool Exited(ChildProcess& p) { return p.WaitExit(absl::Milliseconds(1)).ok(); }

class SoakTest : public ::testing::Test {
 protected:
  SoakTest() : seed_(SoakSeed()), rng_(seed_) {}

  std::string StateFile() const { return job_.dir() + "/sched.state"; }
  std::vector<std::string> SchedulerFlags() const { return {"--state_file=" + StateFile(), "--heartbeat_timeout=2s"}; }
  std::vector<std::string> ServerFlags(bool restore, int rank) const;
  static std::vector<std::string> WorkerFlags(int rank);

  absl::Status StartJob();
  // Kill one process and restart it; how long until it was back.
  absl::StatusOr<absl::Duration> KillAndRestart(Role role, int rank);
  absl::StatusOr<absl::Duration> RestartScheduler();
  absl::StatusOr<absl::Duration> RestartServer(int rank);
  absl::StatusOr<absl::Duration> RestartWorker(int rank);

  // Logs of the processes now serving each rank.
  std::vector<std::string> LiveNodeLogs();
  bool AnyWorkerExited();
  // `exact`: the workers whose final sums were exact.
  void PrintSummary(const std::vector<KillRecord>& kills, absl::Duration total, int exact) const;

  const uint32_t seed_;
  std::mt19937 rng_;
  Job job_;
  int server_index_[kServers] = {};  // rank -> index in job_.servers()
  int worker_index_[kWorkers] = {};  // rank -> index in job_.workers()
};

std::vector<std::string> SoakTest::ServerFlags(bool restore, int rank) const {
  std::vector<std::string> flags = {"--checkpoint_dir=" + job_.checkpoints(), "--checkpoint_every_pushes=20",
                                    "--checkpoint_every=0s"};
  if (restore) flags.insert(flags.end(), {"--restore_dir=" + job_.checkpoints(), absl::StrCat("--rank=", rank)});
  const auto live = SoakLiveness();
  flags.insert(flags.end(), live.begin(), live.end());
  return flags;
}

std::vector<std::string> SoakTest::WorkerFlags(int rank) {
  std::vector<std::string> flags = {absl::StrCat("--steps=", kSteps),
                                    "--consistency=async",
                                    absl::StrCat("--dense_elements=", kDense),
                                    "--slice_bytes=16384",
                                    absl::StrCat("--step_ms=", kStepMs),
                                    "--server_recovery_timeout=60s",
                                    absl::StrCat("--rank=", rank)};
  const auto live = SoakLiveness();
  flags.insert(flags.end(), live.begin(), live.end());
  return flags;
}

absl::Status SoakTest::StartJob() {
  absl::Status s = job_.StartScheduler(kServers, kWorkers, SchedulerFlags());
  for (int i = 0; i < kServers && s.ok(); ++i) s = job_.StartServer(i, ServerFlags(false, i));
  for (int w = 0; w < kWorkers && s.ok(); ++w) {
    s = job_.StartWorker("ps_exact_sum", WorkerFlags(w));
    worker_index_[w] = w;
  }
  for (int r = 0; r < kServers && s.ok(); ++r) {
    server_index_[r] = job_.ServerWithRank(r);
    if (server_index_[r] < 0) s = absl::DeadlineExceededError(absl::StrCat("no server registered as rank ", r));
  }
  return s;
}

std::vector<std::string> SoakTest::LiveNodeLogs() {
  std::vector<std::string> logs;
  for (int r = 0; r < kServers; ++r) logs.push_back(job_.server_logs()[server_index_[r]]);
  for (int w = 0; w < kWorkers; ++w) {
    ChildProcess& p = job_.workers()[worker_index_[w]];
    if (!Exited(p)) logs.push_back(job_.worker_logs()[worker_index_[w]]);
  }
  return logs;
}

bool SoakTest::AnyWorkerExited() {
  for (int w = 0; w < kWorkers; ++w) {
    if (Exited(job_.workers()[worker_index_[w]])) return true;
  }
  return false;
}

// True once every process in `logs` wrote more events `kind` than `before` counted.
bool AllEventedMore(const Job& job, const std::vector<std::string>& logs, const std::vector<int>& before,
                    const std::string& kind, absl::Duration timeout) {
  return WaitFor(
      [&] {
        for (size_t i = 0; i < logs.size(); ++i) {
          if (static_cast<int>(job.Events(logs[i], kind).size()) <= before[i]) return false;
        }
        return true;
      },
      timeout);
}

// Back = every live node said "scheduler_back" once more. The restart waits
// until every node presumed the scheduler down, so that each of them has a
// comeback to see.
absl::StatusOr<absl::Duration> SoakTest::RestartScheduler() {
  const std::vector<std::string> nodes = LiveNodeLogs();
  std::vector<int> down(nodes.size()), back(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    down[i] = static_cast<int>(job_.Events(nodes[i], "scheduler_down").size());
    back[i] = static_cast<int>(job_.Events(nodes[i], "scheduler_back").size());
  }
  const absl::Time killed = absl::Now();
  job_.scheduler().Kill();
  if (!AllEventedMore(job_, nodes, down, "scheduler_down", absl::Seconds(20))) {
    return absl::DeadlineExceededError("not every node presumed the scheduler down within 20 s of the kill");
  }
  std::vector<std::string> flags = SchedulerFlags();
  flags.push_back("--restore");
  absl::Status s = job_.StartScheduler(kServers, kWorkers, flags);
  if (!s.ok()) return s;
  if (!AllEventedMore(job_, nodes, back, "scheduler_back", absl::Seconds(30))) {
    return absl::DeadlineExceededError(
        absl::StrCat("not every node saw the scheduler back within 30 s; logs: ", absl::StrJoin(nodes, ", ")));
  }
  return absl::Now() - killed;
}

// Back = the scheduler took server `rank` back once more ("rejoined").
absl::StatusOr<absl::Duration> SoakTest::RestartServer(int rank) {
  const Job::Fields server = {{"role", "server"}, {"rank", absl::StrCat(rank)}};
  const int before = job_.CountSchedulerEvents("rejoined", server);
  const absl::Time killed = absl::Now();
  job_.servers()[server_index_[rank]].Kill();
  absl::Status s = job_.StartServer(rank, ServerFlags(true, rank));
  if (!s.ok()) return s;
  server_index_[rank] = static_cast<int>(job_.servers().size()) - 1;
  if (!job_.WaitForSchedulerEvents("rejoined", server, before + 1)) {
    return absl::DeadlineExceededError(absl::StrCat("server ", rank, " did not rejoin within 60 s of the kill"));
  }
  return absl::Now() - killed;
}

// Back = the new process joined under its rank.
absl::StatusOr<absl::Duration> SoakTest::RestartWorker(int rank) {
  const absl::Time killed = absl::Now();
  job_.workers()[worker_index_[rank]].Kill();
  absl::Status s = job_.StartWorker("ps_exact_sum", WorkerFlags(rank));
  if (!s.ok()) return s;
  worker_index_[rank] = static_cast<int>(job_.workers().size()) - 1;
  const std::string log = job_.worker_logs()[worker_index_[rank]];
  if (!job_.WaitForEvents(log, "joined", {{"rank", absl::StrCat(rank)}}, 1)) {
    return absl::DeadlineExceededError(absl::StrCat("worker ", rank, " did not join (", log, ") within 60 s"));
  }
  return absl::Now() - killed;
}

absl::StatusOr<absl::Duration> SoakTest::KillAndRestart(Role role, int rank) {
  switch (role) {
    case Role::kScheduler: return RestartScheduler();
    case Role::kServer: return RestartServer(rank);
    case Role::kWorker: return RestartWorker(rank);
  }
  return absl::InternalError("unknown role");
}

void SoakTest::PrintSummary(const std::vector<KillRecord>& kills, absl::Duration total, int exact) const {
  // What the job takes at the least without any kill: every step's emulated
  // compute. The rest of the run, shared out over the kills, bounds what a
  // kill costs (start-up and the final barrier included, so it overstates).
  const double floor_s = kSteps * kStepMs / 1000.0;
  JsonLine by_role;
  double sum = 0, worst = 0;
  for (Role role : kRoles) {
    int n = 0;
    double role_sum = 0, role_max = 0;
    for (const KillRecord& k : kills) {
      if (k.role != role) continue;
      const double s = absl::ToDoubleSeconds(k.kill_to_back);
      ++n;
      role_sum += s;
      role_max = std::max(role_max, s);
    }
    sum += role_sum;
    worst = std::max(worst, role_max);
    by_role.AddRaw(RoleName(role), JsonLine()
                                       .Add("kills", n)
                                       .Add("mean_kill_to_back_s", n > 0 ? role_sum / n : 0.0, 3)
                                       .Add("max_kill_to_back_s", role_max, 3)
                                       .Str());
  }
  std::printf("%s\n", JsonLine()
                          .Add("test", "soak")
                          .Add("seed", seed_)
                          .Add("servers", kServers)
                          .Add("workers", kWorkers)
                          .Add("steps", kSteps)
                          .Add("step_ms", kStepMs)
                          .Add("kills", kills.size())
                          .AddRaw("by_role", by_role.Str())
                          .Add("mean_kill_to_back_s", kills.empty() ? 0.0 : sum / kills.size(), 3)
                          .Add("max_kill_to_back_s", worst, 3)
                          .Add("total_s", absl::ToDoubleSeconds(total), 3)
                          .Add("compute_floor_s", floor_s, 3)
                          .Add("time_lost_per_kill_s",
                               kills.empty() ? 0.0 : (absl::ToDoubleSeconds(total) - floor_s) / kills.size(), 3)
                          .Add("workers_with_exact_sums", exact)
                          .Str()
                          .c_str());
  std::fflush(stdout);
}

TEST_F(SoakTest, RandomKillsOfEveryRoleLoseNoPush) {
  std::printf("soak seed %u (PS_SOAK_SEED=%u reproduces the choices)\n", seed_, seed_);
  const absl::Time begin = absl::Now();
  ASSERT_TRUE(StartJob().ok()) << job_.Log("scheduler");
  std::vector<KillRecord> kills;
  std::vector<Role> bag;  // every role once per round of three kills, in a random order
  std::uniform_int_distribution<int> pause_ms(3000, 6000);
  while (kills.size() < kMaxKills && absl::Now() - begin < kKillPhase && !AnyWorkerExited()) {
    if (bag.empty()) {
      bag.assign(std::begin(kRoles), std::end(kRoles));
      std::shuffle(bag.begin(), bag.end(), rng_);
    }
    const Role role = bag.back();
    bag.pop_back();
    const int ranks = role == Role::kScheduler ? 1 : role == Role::kServer ? kServers : kWorkers;
    const int rank = std::uniform_int_distribution<int>(0, ranks - 1)(rng_);
    // The random time between kills is the point of the test, not a wait for
    // something to happen.
    absl::SleepFor(absl::Milliseconds(pause_ms(rng_)));
    auto back = KillAndRestart(role, rank);
    ASSERT_TRUE(back.ok()) << "kill " << kills.size() + 1 << " (" << RoleName(role) << " " << rank
                           << "): " << back.status() << "\nlogs in " << job_.dir();
    kills.push_back({role, rank, *back});
    std::printf("kill %zu: %s %d back after %.3f s\n", kills.size(), RoleName(role), rank,
                absl::ToDoubleSeconds(*back));
    std::fflush(stdout);
  }
  ASSERT_GE(kills.size(), kMinKills) << "the workers ended before enough kills";
  for (Role role : kRoles) {
    EXPECT_TRUE(std::any_of(kills.begin(), kills.end(), [&](const KillRecord& k) { return k.role == role; }))
        << "no " << RoleName(role) << " was killed";
  }

  const double sum = ExpectedDenseSum(kWorkers, kSteps, kDense);
  const std::string want = absl::StrFormat("dense_sum=%.1f expected_sum=%.1f", sum, sum);
  int exact = 0;  // workers whose final sums are exact: nothing lost, nothing applied twice
  for (int w = 0; w < kWorkers; ++w) {
    ChildProcess& p = job_.workers()[worker_index_[w]];
    auto line = p.WaitForLine("exact_sum OK ", absl::Seconds(240));
    ASSERT_TRUE(line.ok()) << "worker " << w << ": " << line.status() << "\n" << p.StderrText();
    EXPECT_THAT(*line, HasSubstr(absl::StrCat("rank=", w, " ")));
    EXPECT_THAT(*line, HasSubstr(want));
    exact += line->find(want) != std::string::npos;
  }
  for (int w = 0; w < kWorkers; ++w) {
    ExpectExitZero(job_.workers()[worker_index_[w]], absl::StrCat("worker ", w), absl::Seconds(30));
  }
  for (int r = 0; r < kServers; ++r) {
    ExpectExitZero(job_.servers()[server_index_[r]], absl::StrCat("server ", r), absl::Seconds(30));
  }
  ExpectExitZero(job_.scheduler(), "scheduler", absl::Seconds(30));
  PrintSummary(kills, absl::Now() - begin, exact);
}

}  // namespace
}  // namespace ps::testing
