// Servers the workers cannot reach while this scheduler still hears them (a
// network cut between workers and a server): the workers' heartbeats say
// which (worker/client/server_reachability.h). With several copies of each
// slice such a server is handled like a dead one, so that training goes on
// within about a heartbeat timeout: declared dead (fenced: its heartbeats
// are refused from then on, and it stops), its slices led by their backups
// in a new view. With one copy the job can only wait for it; the log, the
// events and the metrics say so.

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/events.h"
#include "glog/logging.h"
#include "scheduler/scheduler_impl.h"

namespace ps {
namespace {

// How often the scheduler repeats that the job waits for a server the
// workers cannot reach.
constexpr absl::Duration kStillUnreachableEvery = absl::Seconds(5);

}  // namespace

absl::Status Scheduler::Impl::MayFence(int rank, const UnreachableServer& u) const {
  if (options_.replicas < 2) {
    return absl::FailedPreconditionError(
        "one copy of each slice (--replicas=1): nowhere to fail its slices over, the job waits for it");
  }
  if (!u.hears_others) {
    return absl::FailedPreconditionError(
        "the worker hears no other server either (its own network, not this server's): not fenced");
  }
  if (const int last = replicas_.LastCopiesOn(rank); last > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(last, " slices have their last copy there: not fenced, the job waits for it"));
  }
  return absl::OkStatus();
}

void Scheduler::Impl::OnUnreachableReport(const Node& worker, const std::vector<UnreachableServer>& report) {
  const UnreachableServers::Change change = unreachable_.Update(worker.rank, report);
  const absl::Time now = clock_->Now();
  bool fenced = false;
  for (const UnreachableServer& u : change.lost) {
    if (u.server < 0 || u.server >= static_cast<int>(server_index_.size())) continue;
    Node& server = nodes_[server_index_[u.server]];
    if (!server.alive) continue;
    const absl::Status may = MayFence(u.server, u);
    LOG(WARNING) << "scheduler: worker " << worker.rank << " cannot reach server " << u.server << " (" << server.address
                 << "): no answer for " << u.silent_ms << " ms, while this scheduler last heard it "
                 << absl::FormatDuration(absl::Trunc(now - server.last_seen, absl::Milliseconds(1))) << " ago; "
                 << (may.ok() ? "fencing it: its slices fail over to their copies" : may.message());
    EmitEvent("server_unreachable", JsonLine()
                                        .Add("rank", u.server)
                                        .Add("worker", worker.rank)
                                        .Add("silent_ms", u.silent_ms)
                                        .Add("hears_others", u.hears_others)
                                        .Add("fenced", may.ok()));
    if (!may.ok()) continue;
    MarkDead(server, absl::StrCat("unreachable from worker ", worker.rank, " for ", u.silent_ms,
                                  " ms while it still reached the scheduler: fenced, its slices fail over"));
    fenced = true;
  }
  for (int rank : change.back) {
    LOG(WARNING) << "scheduler: worker " << worker.rank << " reaches server " << rank << " again";
    EmitEvent("server_reachable", JsonLine().Add("rank", rank).Add("worker", worker.rank));
  }
  if (fenced) {
    BroadcastView();
    CompleteBarriers();
    MaybeFinishJob();
    return;
  }
  if (!change.lost.empty() || now - unreachable_warned_ < kStillUnreachableEvery) return;
  for (int rank : unreachable_.Servers()) {
    unreachable_warned_ = now;
    LOG(WARNING) << "scheduler: server " << rank << " is still unreachable from workers ["
                 << absl::StrJoin(unreachable_.WorkersCutFrom(rank), ",") << "]; the job waits for it";
  }
}

}  // namespace ps
