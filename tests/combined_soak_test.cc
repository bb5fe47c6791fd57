// The fault-tolerance features together, as a production job runs them: a
// sync job of ps_exact_sum workers (dense slices and table rows, shared
// memory on) under ps_scheduler --replicas=2 --state_file, its servers with
// checkpoints, a table disk tier each and --drain, while a seeded random
// generator, every 3 to 6 s, picks one of:
//   - a server SIGKILLed and never restarted: its slices fail over to their
//     backups, the copies are made again, and a new server joins
//     (ps_server --join, a new rank) in its place, as an autoscaler would;
//   - a server frozen past the heartbeat timeout (SIGSTOP, then SIGCONT: it
//     must leave on its own), replaced by a joining one the same way;
//   - the scheduler SIGKILLed and restored with the documented command,
//     `ps_scheduler --restore --state_file=PATH` (the job's --replicas and
//     timeouts left out: the restore takes them from the file);
//   - a server drained (SIGTERM with --drain: its slices move to the
//     others, it exits 0) and a joining one started in its place.
// Each event waits until the job is whole again (copies made again, moves
// done, every node back with the scheduler) before the next. At the end
// every worker shows exact sums (no push lost or applied twice), every live
// process exits 0, and one JSON line reports the events and the counters:
// slices failed over, copies made again, slices moved, joins, drains.
//
// PS_SOAK_SEED=<the seed it printed> reproduces a run's choices.

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <map>
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
#include "scheduler/job_state.h"
#include "tests/child_process.h"
#include "tests/cluster_fixture.h"
#include "tests/job.h"

namespace ps::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kServers = 3, kWorkers = 2;
// 3000 steps of 30 ms emulated compute: about two minutes undisturbed on a
// 2-core machine. Events stop after kEventPhase, well before the end.
constexpr int kSteps = 3000, kStepMs = 30;
constexpr int64_t kDense = 20000;
constexpr absl::Duration kEventPhase = absl::Seconds(75);
constexpr size_t kMinEvents = 6, kMaxEvents = 14;

enum class Event { kKillServer, kFreezeServer, kKillScheduler, kDrainServer };
constexpr Event kEvents[] = {Event::kKillServer, Event::kFreezeServer, Event::kKillScheduler, Event::kDrainServer};

const char* EventName(Event e) {
  switch (e) {
    case Event::kKillServer: return "server_killed";
    case Event::kFreezeServer: return "server_frozen";
    case Event::kKillScheduler: return "scheduler_restored";
    case Event::kDrainServer: return "server_drained";
  }
  return "?";
}

class CombinedSoakTest : public ::testing::Test {
 protected:
  CombinedSoakTest() : seed_(SoakSeed()), rng_(seed_) {}

  std::string StateFile() const { return job_.dir() + "/sched.state"; }
  std::vector<std::string> ServerFlags(bool join) {
    std::vector<std::string> flags = SoakLiveness();
    flags.insert(flags.end(), {"--checkpoint_dir=" + job_.checkpoints(), "--checkpoint_every=5s", "--drain",
                               absl::StrCat("--table_disk_dir=", job_.dir(), "/disk/start-", starts_++)});
    if (join) flags.push_back("--join");
    return flags;
  }
  static std::vector<std::string> WorkerFlags(int rank) {
    return SoakWorkerFlags(rank, kSteps, kDense, kStepMs, "sync");
  }

  absl::Status StartJob();
  absl::StatusOr<absl::Duration> Apply(Event event, int rank);
  // A server killed, frozen or drained, then a new one joined in its place.
  absl::StatusOr<absl::Duration> ReplaceServer(Event event, int rank);
  absl::Status LoseServer(Event event, int rank);
  absl::Status JoinServer();
  absl::StatusOr<absl::Duration> RestoreScheduler();
  // The schedulers' events `kind` (with fields `where`).
  int Count(const std::string& kind, const Job::Fields& where = {}) const {
    return job_.CountSchedulerEvents(kind, where);
  }
  // The sum of field `field` over the schedulers' events `kind`.
  int Sum(const std::string& kind, const std::string& field) const;
  // The state file's slices by their number of copies, as the job ends.
  std::map<size_t, int> SlicesByCopies() const;
  void PrintSummary(const std::map<Event, std::vector<absl::Duration>>& events, absl::Duration total, int exact) const;

  const uint32_t seed_;
  std::mt19937 rng_;
  Job job_;
  int starts_ = 0;
  std::map<int, int> live_;  // rank -> index in job_.servers()
};

int CombinedSoakTest::Sum(const std::string& kind, const std::string& field) const {
  int sum = 0;
  for (const std::string& e : job_.SchedulerEvents(kind)) sum += static_cast<int>(JsonNumber(e, field, 0));
  return sum;
}

std::map<size_t, int> CombinedSoakTest::SlicesByCopies() const {
  std::map<size_t, int> out;
  absl::StatusOr<JobState> state = ReadJobState(StateFile());
  if (!state.ok()) return out;
  for (const std::vector<int32_t>& copies : state->copies) ++out[copies.size()];
  return out;
}

absl::Status CombinedSoakTest::StartJob() {
  PS_RETURN_IF_ERROR(job_.StartScheduler(kServers, kWorkers,
                                         {"--state_file=" + StateFile(), "--heartbeat_timeout=2s", "--replicas=2"}));
  for (int i = 0; i < kServers; ++i) PS_RETURN_IF_ERROR(job_.StartServer(i, ServerFlags(false)));
  for (int w = 0; w < kWorkers; ++w) PS_RETURN_IF_ERROR(job_.StartWorker("ps_exact_sum", WorkerFlags(w)));
  for (int r = 0; r < kServers; ++r) {
    const int index = job_.ServerWithRank(r);
    if (index < 0) return absl::DeadlineExceededError(absl::StrCat("no server registered as rank ", r));
    live_[r] = index;
  }
  return absl::OkStatus();
}

absl::Status CombinedSoakTest::LoseServer(Event event, int rank) {
  ChildProcess& victim = job_.servers()[live_[rank]];
  live_.erase(rank);
  if (event == Event::kDrainServer) {
    if (kill(victim.pid(), SIGTERM) != 0) return absl::InternalError("SIGTERM failed");
    absl::StatusOr<int> code = victim.WaitExit(absl::Seconds(60));
    if (!code.ok() || *code != 0) {
      return absl::InternalError(absl::StrCat("drained server ", rank, " did not exit 0 within 60 s: ",
                                              code.ok() ? absl::StrCat("exit ", *code) : code.status().ToString()));
    }
    return absl::OkStatus();
  }
  const Job::Fields lost = {{"rank", absl::StrCat(rank)}};
  const int lost_before = Count("server_lost", lost), copies_before = Count("copies_restored");
  if (event == Event::kKillServer) {
    victim.Kill();
  } else if (kill(victim.pid(), SIGSTOP) != 0) {
    return absl::InternalError("SIGSTOP failed");
  }
  if (!job_.WaitForSchedulerEvents("server_lost", lost, lost_before + 1, absl::Seconds(30))) {
    return absl::DeadlineExceededError(absl::StrCat("server ", rank, " not declared lost within 30 s"));
  }
  if (event == Event::kFreezeServer) {
    if (kill(victim.pid(), SIGCONT) != 0) return absl::InternalError("SIGCONT failed");
    absl::StatusOr<int> code = victim.WaitExit(absl::Seconds(30));
    if (!code.ok() || *code == 0) return absl::InternalError("the thawed server did not leave with an error");
  }
  // Every slice back to two copies on the live servers (none to make when
  // it held none: a server that joined and got no copy yet).
  if (job_.SlicesLackingAfterLoss(rank) > 0 && !job_.WaitForSchedulerEvents("copies_restored", {}, copies_before + 1)) {
    return absl::DeadlineExceededError("the copies were not made again within 60 s");
  }
  return absl::OkStatus();
}

absl::Status CombinedSoakTest::JoinServer() {
  const int joined_before = Count("server_joined"), settled_before = Count("slice_moved", {{"to_go", "0"}});
  const int failed_before = Count("move_failed");
  PS_RETURN_IF_ERROR(job_.StartServer(starts_, ServerFlags(true)));
  const int index = static_cast<int>(job_.servers().size()) - 1;
  const std::string log = job_.server_logs().back();
  if (!job_.WaitForEvents(log, "registered", {}, 1, absl::Seconds(30)) || Count("server_joined") <= joined_before) {
    return absl::DeadlineExceededError("the joining server got no rank within 30 s");
  }
  const int rank = static_cast<int>(JsonNumber(job_.Events(log, "registered").front(), "rank"));
  live_[rank] = index;
  // Its share of the slices moved to it (or a move refused, counted).
  if (!WaitFor(
          [&] {
            return Count("slice_moved", {{"to_go", "0"}}) > settled_before || Count("move_failed") > failed_before;
          },
          absl::Seconds(90))) {
    return absl::DeadlineExceededError(absl::StrCat("the moves to joined server ", rank, " did not end in 90 s"));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> CombinedSoakTest::ReplaceServer(Event event, int rank) {
  const absl::Time begin = absl::Now();
  PS_RETURN_IF_ERROR(LoseServer(event, rank));
  PS_RETURN_IF_ERROR(JoinServer());
  return absl::Now() - begin;
}

// The documented command: the state file and --restore; Job adds only the
// node counts and --register_timeout, which agree with the job's.
absl::StatusOr<absl::Duration> CombinedSoakTest::RestoreScheduler() {
  const int before = Count("reconnected");
  const absl::Time begin = absl::Now();
  job_.scheduler().Kill();
  PS_RETURN_IF_ERROR(job_.StartScheduler(kServers, kWorkers, {"--state_file=" + StateFile(), "--restore"}));
  const int nodes = static_cast<int>(live_.size()) + kWorkers;
  if (!WaitFor([&] { return Count("reconnected") >= before + nodes; }, absl::Seconds(30))) {
    return absl::DeadlineExceededError("not every node reconnected to the restored scheduler within 30 s");
  }
  if (job_.Events(job_.scheduler_logs().back(), "restored", {{"replicas", "2"}}).empty()) {
    return absl::InternalError("the restored scheduler did not keep --replicas=2");
  }
  return absl::Now() - begin;
}

absl::StatusOr<absl::Duration> CombinedSoakTest::Apply(Event event, int rank) {
  return event == Event::kKillScheduler ? RestoreScheduler() : ReplaceServer(event, rank);
}

void CombinedSoakTest::PrintSummary(const std::map<Event, std::vector<absl::Duration>>& events, absl::Duration total,
                                    int exact) const {
  JsonLine by_kind, by_copies;
  for (const auto& [copies, slices] : SlicesByCopies()) by_copies.Add(absl::StrCat(copies), slices);
  int n_events = 0;
  for (const auto& [event, undone] : events) {
    double worst = 0;
    for (absl::Duration d : undone) worst = std::max(worst, absl::ToDoubleSeconds(d));
    by_kind.AddRaw(EventName(event), JsonLine().Add("events", undone.size()).Add("max_undone_s", worst, 3).Str());
    n_events += static_cast<int>(undone.size());
  }
  std::printf("%s\n", JsonLine()
                          .Add("test", "combined_soak")
                          .Add("seed", seed_)
                          .Add("replicas", 2)
                          .Add("events", n_events)
                          .AddRaw("by_kind", by_kind.Str())
                          .Add("servers_left", Count("server_lost"))
                          .Add("slices_promoted", Sum("server_lost", "promoted"))
                          .Add("slices_copied_again", Count("copy_made"))
                          .AddRaw("slices_by_copies_at_end", by_copies.Str())
                          .Add("slices_moved", Count("slice_moved"))
                          .Add("moves_refused", Count("move_failed"))
                          .Add("joins", Count("server_joined"))
                          .Add("drains", Count("server_left"))
                          .Add("live_servers_at_end", live_.size())
                          .Add("total_s", absl::ToDoubleSeconds(total), 3)
                          .Add("workers_with_exact_sums", exact)
                          .Str()
                          .c_str());
  std::fflush(stdout);
}

TEST_F(CombinedSoakTest, ReplicasJoinsDrainsFreezesAndRestoresTogetherLoseNoPush) {
  std::printf("combined soak seed %u (PS_SOAK_SEED=%u reproduces the choices)\n", seed_, seed_);
  const absl::Time begin = absl::Now();
  ASSERT_TRUE(StartJob().ok()) << job_.Log("scheduler");
  std::map<Event, std::vector<absl::Duration>> events;
  size_t done = 0;
  std::vector<Event> bag;  // every kind once per round of four, in a random order
  std::uniform_int_distribution<int> pause_ms(3000, 6000);
  while (done < kMaxEvents && absl::Now() - begin < kEventPhase && !job_.AnyWorkerExited()) {
    if (bag.empty()) {
      bag.assign(std::begin(kEvents), std::end(kEvents));
      std::shuffle(bag.begin(), bag.end(), rng_);
    }
    const Event event = bag.back();
    bag.pop_back();
    auto it = live_.begin();
    std::advance(it, std::uniform_int_distribution<int>(0, static_cast<int>(live_.size()) - 1)(rng_));
    const int rank = it->first;
    // The random time between events is the point of the test, not a wait
    // for something to happen.
    absl::SleepFor(absl::Milliseconds(pause_ms(rng_)));
    auto undone = Apply(event, rank);
    ASSERT_TRUE(undone.ok()) << "event " << done + 1 << " (" << EventName(event) << ", server " << rank
                             << "): " << undone.status() << "\nlogs in " << job_.dir();
    events[event].push_back(*undone);
    ++done;
    std::printf("event %zu: %s%s undone after %.3f s\n", done, EventName(event),
                event == Event::kKillScheduler ? "" : absl::StrCat(" (server ", rank, ")").c_str(),
                absl::ToDoubleSeconds(*undone));
    std::fflush(stdout);
  }
  ASSERT_GE(done, kMinEvents) << "the workers ended before enough events";
  const double sum = ExpectedDenseSum(kWorkers, kSteps, kDense);
  const std::string want = absl::StrFormat("dense_sum=%.1f expected_sum=%.1f", sum, sum);
  int exact = 0;
  for (int w = 0; w < kWorkers; ++w) {
    ChildProcess& p = job_.workers()[w];
    auto line = p.WaitForLine("exact_sum OK ", absl::Seconds(300));
    ASSERT_TRUE(line.ok()) << "worker " << w << ": " << line.status() << "\n" << p.StderrText();
    EXPECT_THAT(*line, HasSubstr(want));
    exact += line->find(want) != std::string::npos;
  }
  for (int w = 0; w < kWorkers; ++w) ExpectExitZero(job_.workers()[w], absl::StrCat("worker ", w), absl::Seconds(30));
  for (const auto& [rank, index] : live_) {
    ExpectExitZero(job_.servers()[index], absl::StrCat("server ", rank), absl::Seconds(30));
  }
  ExpectExitZero(job_.scheduler(), "scheduler", absl::Seconds(30));
  // As the job ends, every slice has its two copies.
  const std::map<size_t, int> by_copies = SlicesByCopies();
  EXPECT_EQ(by_copies.size(), 1u);
  EXPECT_TRUE(by_copies.count(2)) << "slices by copies: " << (by_copies.empty() ? -1 : by_copies.begin()->first);
  PrintSummary(events, absl::Now() - begin, exact);
}

}  // namespace
}  // namespace ps::testing
