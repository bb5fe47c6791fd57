// Soak with replicas: a 4-server, 3-worker async job of ps_exact_sum with
// ps_scheduler --replicas=2 runs for minutes while a seeded random
// generator, every 3 to 6 s, either SIGKILLs a server, freezes one (SIGSTOP
// past the heartbeat timeout, then SIGCONT: it must leave on its own), or
// SIGKILLs the scheduler. A lost server is never restarted from a
// checkpoint: its slices fail over to their backups, the scheduler copies
// them back to two, and a new server joins under its rank with nothing
// (ps_server --rank=r, no --restore_dir); the scheduler comes back with
// --restore --state_file. Each event waits until the job is whole again
// before the next. At the end every worker shows the exact sums (no push
// lost or applied twice) and every live process exits 0. Prints one JSON
// line: events by kind and the time each took to be undone.
//
// Reproduce a run's choices with PS_SOAK_SEED=<the seed it printed>;
// PS_SOAK_CONSISTENCY=sync (or ssp:K) runs the workers in that mode instead
// (sync: each step reaches the backups as its sum, server/store/step_forwarding.h).

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/base/json.h"
#include "common/base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/cluster_fixture.h"
#include "tests/job.h"

namespace ps::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kServers = 4, kWorkers = 3;
// 2000 steps of 40 ms emulated compute: about 1.5 minutes undisturbed on the
// 2-core test machine. Events stop after kEventPhase, well before the end.
constexpr int kSteps = 2000, kStepMs = 40;
constexpr int64_t kDense = 20000;
constexpr absl::Duration kEventPhase = absl::Seconds(60);
constexpr size_t kMinEvents = 5, kMaxEvents = 12;

enum class Event { kKillServer, kFreezeServer, kKillScheduler };
constexpr Event kEvents[] = {Event::kKillServer, Event::kFreezeServer, Event::kKillScheduler};

const char* EventName(Event e) {
  switch (e) {
    case Event::kKillServer: return "server_killed";
    case Event::kFreezeServer: return "server_frozen";
    case Event::kKillScheduler: return "scheduler_killed";
  }
  return "?";
}

struct EventRecord {
  Event event;
  int rank;
  absl::Duration undone;  // from the event until the job was whole again
};

class ReplicaSoakTest : public ::testing::Test {
 protected:
  ReplicaSoakTest() : seed_(SoakSeed()), rng_(seed_) {}

  std::string StateFile() const { return job_.dir() + "/sched.state"; }
  std::vector<std::string> SchedulerFlags() const {
    return {"--state_file=" + StateFile(), "--heartbeat_timeout=2s", "--replicas=2"};
  }
  static std::vector<std::string> ServerFlags(int rank) {
    std::vector<std::string> flags = SoakLiveness();
    if (rank >= 0) flags.push_back(absl::StrCat("--rank=", rank));  // a new server in a lost one's place
    return flags;
  }
  static std::string Consistency() {
    const char* mode = std::getenv("PS_SOAK_CONSISTENCY");
    return mode != nullptr && *mode != '\0' ? mode : "async";
  }
  static std::vector<std::string> WorkerFlags(int rank) {
    return SoakWorkerFlags(rank, kSteps, kDense, kStepMs, Consistency());
  }

  absl::Status StartJob();
  absl::StatusOr<absl::Duration> Apply(Event event, int rank);
  // A server lost (killed, or frozen and then gone on its own): the copies
  // made again, and a new server joined under its rank.
  absl::StatusOr<absl::Duration> ReplaceServer(Event event, int rank);
  absl::StatusOr<absl::Duration> RestartScheduler();
  void PrintSummary(const std::vector<EventRecord>& events, absl::Duration total, int exact) const;

  const uint32_t seed_;
  std::mt19937 rng_;
  Job job_;
  int server_index_[kServers] = {};  // rank -> index in job_.servers()
};

absl::Status ReplicaSoakTest::StartJob() {
  absl::Status s = job_.StartScheduler(kServers, kWorkers, SchedulerFlags());
  for (int i = 0; i < kServers && s.ok(); ++i) s = job_.StartServer(i, ServerFlags(-1));
  for (int w = 0; w < kWorkers && s.ok(); ++w) s = job_.StartWorker("ps_exact_sum", WorkerFlags(w));
  for (int r = 0; r < kServers && s.ok(); ++r) {
    server_index_[r] = job_.ServerWithRank(r);
    if (server_index_[r] < 0) s = absl::DeadlineExceededError(absl::StrCat("no server registered as rank ", r));
  }
  return s;
}

absl::StatusOr<absl::Duration> ReplicaSoakTest::ReplaceServer(Event event, int rank) {
  const Job::Fields server = {{"rank", absl::StrCat(rank)}};
  const int lost_before = job_.CountSchedulerEvents("server_lost", server);
  const int copies_before = job_.CountSchedulerEvents("copies_restored");
  const absl::Time begin = absl::Now();
  ChildProcess& victim = job_.servers()[server_index_[rank]];
  if (event == Event::kKillServer) {
    victim.Kill();
  } else if (kill(victim.pid(), SIGSTOP) != 0) {
    return absl::InternalError("SIGSTOP failed");
  }
  if (!job_.WaitForSchedulerEvents("server_lost", server, lost_before + 1, absl::Seconds(30))) {
    return absl::DeadlineExceededError(absl::StrCat("server ", rank, " not declared lost within 30 s"));
  }
  if (event == Event::kFreezeServer) {
    // Thawed after its replacement in the view: fenced, it leaves by itself.
    if (kill(victim.pid(), SIGCONT) != 0) return absl::InternalError("SIGCONT failed");
    absl::StatusOr<int> code = victim.WaitExit(absl::Seconds(30));
    if (!code.ok()) return absl::DeadlineExceededError("the thawed server did not leave within 30 s");
    if (*code == 0 || victim.StderrText().find("scheduler refused this server") == std::string::npos) {
      return absl::InternalError(absl::StrCat("the thawed server exited ", *code, " without saying it was refused"));
    }
  }
  // The copies it held are made again elsewhere (none to make when it held
  // none: a new server that had got no copy yet).
  if (job_.SlicesLackingAfterLoss(rank) > 0 && !job_.WaitForSchedulerEvents("copies_restored", {}, copies_before + 1)) {
    return absl::DeadlineExceededError("the copies were not made again within 60 s");
  }
  const Job::Fields rejoined = {{"role", "server"}, {"rank", absl::StrCat(rank)}};
  const int joined_before = job_.CountSchedulerEvents("rejoined", rejoined);
  PS_RETURN_IF_ERROR(job_.StartServer(rank, ServerFlags(rank)));
  server_index_[rank] = static_cast<int>(job_.servers().size()) - 1;
  if (!job_.WaitForSchedulerEvents("rejoined", rejoined, joined_before + 1, absl::Seconds(30))) {
    return absl::DeadlineExceededError(absl::StrCat("server ", rank, " did not rejoin within 30 s"));
  }
  return absl::Now() - begin;
}

// Back = a scheduler restored from the state file answers again: every
// node re-registered (the scheduler's "reconnected" events).
absl::StatusOr<absl::Duration> ReplicaSoakTest::RestartScheduler() {
  const int before = job_.CountSchedulerEvents("reconnected");
  const absl::Time begin = absl::Now();
  job_.scheduler().Kill();
  std::vector<std::string> flags = SchedulerFlags();
  flags.push_back("--restore");
  PS_RETURN_IF_ERROR(job_.StartScheduler(kServers, kWorkers, flags));
  if (!job_.WaitForSchedulerEvents("reconnected", {}, before + kServers + kWorkers, absl::Seconds(30))) {
    return absl::DeadlineExceededError("not every node reconnected to the restored scheduler within 30 s");
  }
  return absl::Now() - begin;
}

absl::StatusOr<absl::Duration> ReplicaSoakTest::Apply(Event event, int rank) {
  return event == Event::kKillScheduler ? RestartScheduler() : ReplaceServer(event, rank);
}

void ReplicaSoakTest::PrintSummary(const std::vector<EventRecord>& events, absl::Duration total, int exact) const {
  JsonLine by_kind;
  for (Event e : kEvents) {
    int n = 0;
    double sum = 0, worst = 0;
    for (const EventRecord& r : events) {
      if (r.event != e) continue;
      ++n;
      sum += absl::ToDoubleSeconds(r.undone);
      worst = std::max(worst, absl::ToDoubleSeconds(r.undone));
    }
    by_kind.AddRaw(
        EventName(e),
        JsonLine().Add("events", n).Add("mean_undone_s", n > 0 ? sum / n : 0.0, 3).Add("max_undone_s", worst, 3).Str());
  }
  std::printf("%s\n", JsonLine()
                          .Add("test", "replica_soak")
                          .Add("seed", seed_)
                          .Add("servers", kServers)
                          .Add("replicas", 2)
                          .Add("consistency", Consistency())
                          .Add("workers", kWorkers)
                          .Add("steps", kSteps)
                          .Add("events", events.size())
                          .AddRaw("by_kind", by_kind.Str())
                          .Add("total_s", absl::ToDoubleSeconds(total), 3)
                          .Add("workers_with_exact_sums", exact)
                          .Str()
                          .c_str());
  std::fflush(stdout);
}

TEST_F(ReplicaSoakTest, ServersLostAndReplacedAndSchedulerKillsLoseNoPush) {
  std::printf("replica soak seed %u (PS_SOAK_SEED=%u reproduces the choices)\n", seed_, seed_);
  const absl::Time begin = absl::Now();
  ASSERT_TRUE(StartJob().ok()) << job_.Log("scheduler");
  std::vector<EventRecord> events;
  std::vector<Event> bag;  // every kind once per round of three, in a random order
  std::uniform_int_distribution<int> pause_ms(3000, 6000);
  while (events.size() < kMaxEvents && absl::Now() - begin < kEventPhase && !job_.AnyWorkerExited()) {
    if (bag.empty()) {
      bag.assign(std::begin(kEvents), std::end(kEvents));
      std::shuffle(bag.begin(), bag.end(), rng_);
    }
    const Event event = bag.back();
    bag.pop_back();
    const int rank = std::uniform_int_distribution<int>(0, kServers - 1)(rng_);
    // The random time between events is the point of the test, not a wait
    // for something to happen.
    absl::SleepFor(absl::Milliseconds(pause_ms(rng_)));
    auto undone = Apply(event, rank);
    ASSERT_TRUE(undone.ok()) << "event " << events.size() + 1 << " (" << EventName(event) << ", server " << rank
                             << "): " << undone.status() << "\nlogs in " << job_.dir();
    events.push_back({event, rank, *undone});
    std::printf("event %zu: %s%s undone after %.3f s\n", events.size(), EventName(event),
                event == Event::kKillScheduler ? "" : absl::StrCat(" (server ", rank, ")").c_str(),
                absl::ToDoubleSeconds(*undone));
    std::fflush(stdout);
  }
  ASSERT_GE(events.size(), kMinEvents) << "the workers ended before enough events";
  const double sum = ExpectedDenseSum(kWorkers, kSteps, kDense);
  const std::string want = absl::StrFormat("dense_sum=%.1f expected_sum=%.1f", sum, sum);
  int exact = 0;
  for (int w = 0; w < kWorkers; ++w) {
    ChildProcess& p = job_.workers()[w];
    auto line = p.WaitForLine("exact_sum OK ", absl::Seconds(240));
    ASSERT_TRUE(line.ok()) << "worker " << w << ": " << line.status() << "\n" << p.StderrText();
    EXPECT_THAT(*line, HasSubstr(want));
    exact += line->find(want) != std::string::npos;
  }
  for (int w = 0; w < kWorkers; ++w) ExpectExitZero(job_.workers()[w], absl::StrCat("worker ", w), absl::Seconds(30));
  for (int r = 0; r < kServers; ++r) {
    ExpectExitZero(job_.servers()[server_index_[r]], absl::StrCat("server ", r), absl::Seconds(30));
  }
  ExpectExitZero(job_.scheduler(), "scheduler", absl::Seconds(30));
  PrintSummary(events, absl::Now() - begin, exact);
}

}  // namespace
}  // namespace ps::testing
