// A server leaving a running job (DrainRequestMsg): every copy it holds
// moves to the other servers (scheduler_moves.cc: copied, then released by
// its primary, or handed over where it is the primary), then it is told to
// shut down, holding nothing the job needs, and leaves the view.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/events.h"
#include "glog/logging.h"
#include "scheduler/scheduler_impl.h"

namespace ps {

absl::Status Scheduler::Impl::CheckDrain(const std::string& identity, int32_t rank) const {
  if (const Node* asker = NodeByIdentity(identity); asker != nullptr && asker->rank != rank) {
    return absl::PermissionDeniedError(absl::StrCat(RoleName(asker->role), " ", asker->rank, " may not drain server ",
                                                    rank, "; a server drains only itself"));
  }
  if (phase_ != Phase::kRunning || !model_ready_) {
    return absl::FailedPreconditionError(absl::StrCat("no running job to drain server ", rank,
                                                      " from: the job has not formed and placed its model, or ends"));
  }
  if (!Tracked()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "draining server ", rank,
        " needs ps_scheduler --elastic (or --replicas >= 2): this job does not track where its copies are"));
  }
  if (rank < 0 || rank >= static_cast<int>(server_index_.size()) || !nodes_[server_index_[rank]].alive) {
    return absl::NotFoundError(
        absl::StrCat("no live server ", rank, " in this job of ", server_index_.size(), " servers"));
  }
  if (draining_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("server ", draining_->rank, " is being drained; one drain at a time"));
  }
  if (const int32_t absent = ServerNotBack(); absent >= 0) {
    return absl::UnavailableError(absl::StrCat("server ", absent,
                                               " has not reconnected to this restarted scheduler yet; drain server ",
                                               rank, " once it has (ask again)"));
  }
  int others = 0;
  for (size_t i : server_index_) others += nodes_[i].alive && nodes_[i].rank != rank ? 1 : 0;
  if (others < options_.replicas) {
    return absl::FailedPreconditionError(absl::StrCat("draining server ", rank, " would leave ", others,
                                                      " live servers for ", options_.replicas,
                                                      " copies of every slice"));
  }
  return absl::OkStatus();
}

absl::Status Scheduler::Impl::OnDrain(const std::string& identity, const Envelope& env, const DrainRequestMsg& m) {
  if (draining_.has_value() && !draining_->self && draining_->rank == m.server &&
      identity != nodes_[server_index_[m.server]].identity) {
    // An operator asking again (ps_scheduler --drain_server re-asks while it
    // waits): the same drain, answered to the latest ask.
    draining_->identity = identity;
    draining_->request_id = env.request_id;
    return absl::OkStatus();
  }
  PS_RETURN_IF_ERROR(CheckDrain(identity, m.server));
  const Node& server = nodes_[server_index_[m.server]];
  if (moving_.has_value() || copying_.has_value()) {
    return absl::UnavailableError(absl::StrCat("slices are moving or being copied now; drain server ", m.server,
                                               " once that is done (ask again)"));
  }
  draining_ = Draining{m.server, identity, env.request_id, identity == server.identity};
  replicas_.set_leaving(m.server);  // no new copy goes there
  std::set<int32_t> stay;
  for (size_t i : server_index_) {
    if (nodes_[i].alive && nodes_[i].rank != m.server) stay.insert(nodes_[i].rank);
  }
  const std::vector<SliceMove> plan = PlanMoves(map_, replicas_.copies(), stay);
  moves_.assign(plan.begin(), plan.end());
  LOG(WARNING) << "scheduler: draining server " << m.server << " (asked by "
               << (draining_->self ? "itself" : "an operator") << "): " << plan.size()
               << " slice copies move to the other servers first";
  EmitEvent("drain_started",
            JsonLine().Add("rank", m.server).Add("by_itself", draining_->self).Add("moves", plan.size()));
  NextMove();
  MaybeFinishDrain();
  return absl::OkStatus();
}

void Scheduler::Impl::MaybeFinishDrain() {
  if (!draining_.has_value() || copying_.has_value() || moving_.has_value() || !moves_.empty() ||
      draining_->shutdown_id != 0) {
    return;
  }
  int left = 0;
  for (const std::vector<int32_t>& c : replicas_.copies()) {
    left += std::find(c.begin(), c.end(), draining_->rank) != c.end() ? 1 : 0;
  }
  if (left > 0) {  // a move failed, or a death dropped the plan
    EndDrain(
        absl::AbortedError(absl::StrCat("server ", draining_->rank, " still holds ", left,
                                        " slice copies that could not move (see the scheduler's log); ask again")));
    return;
  }
  draining_->shutdown_id = next_request_id_++;
  LOG(INFO) << "scheduler: every slice copy of server " << draining_->rank
            << " moved to the other servers; telling it to shut down";
  Send(nodes_[server_index_[draining_->rank]].identity, draining_->shutdown_id, ShutdownMsg{"", /*left=*/true});
}

bool Scheduler::Impl::OnDrainedAck(const Node& server, const Envelope& env) {
  if (!draining_.has_value() || env.request_id == 0 || env.request_id != draining_->shutdown_id ||
      server.rank != draining_->rank) {
    return false;
  }
  Node& node = nodes_[server_index_[server.rank]];
  node.alive = false;
  LoseServer(server.rank);
  LOG(WARNING) << "scheduler: server " << server.rank << " (node " << node.node_id << ") drained and left";
  EmitEvent("server_left", JsonLine().Add("rank", server.rank).Add("node", node.node_id));
  EndDrain(absl::OkStatus());
  BroadcastView();
  return true;
}

void Scheduler::Impl::EndDrain(const absl::Status& status) {
  if (!status.ok()) LOG(ERROR) << "scheduler: drain of server " << draining_->rank << " failed: " << status;
  if (!draining_->self) {
    if (status.ok()) {
      Send(draining_->identity, draining_->request_id, AckMsg{});
    } else {
      SendError(draining_->identity, draining_->request_id, status);
    }
  } else if (!status.ok()) {
    SendError(nodes_[server_index_[draining_->rank]].identity, draining_->request_id, status);
  }
  replicas_.set_leaving(std::nullopt);
  draining_.reset();
}

}  // namespace ps
