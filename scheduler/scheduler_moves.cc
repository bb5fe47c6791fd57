// Servers joining a running job (RegisterRequestMsg::join) and the moves
// that balance the job over its servers afterwards (common/placement/rebalance.h):
// also after a restart (--restore), once every live server is back: the
// moves its predecessor had planned, or had under way, died with it.
// each move copies a slice to its new server (the copy --replicas makes
// after a death), then releases the old copy: its primary stops forwarding
// to it, or, when the old copy is the primary, stops serving the slice
// (requests are refused as routed by an older view) and answers once every
// update forwarded before is settled; then a new view names the new copy.
// Nothing is applied twice or lost: an update reaches the new copy by the
// forwards until the hand-over, and the workers' later requests go there.

#include "absl/strings/str_cat.h"
#include "common/base/events.h"
#include "glog/logging.h"
#include "scheduler/scheduler_impl.h"

namespace ps {

absl::Status Scheduler::Impl::OnJoin(const std::string& identity, const Envelope& env, const RegisterRequestMsg& m) {
  if (m.role != Role::kServer) return absl::InvalidArgumentError("only a server joins a running job (--join)");
  if (phase_ != Phase::kRunning || !model_ready_) {
    return absl::FailedPreconditionError(
        "no running job to join: the job has not formed and placed its model yet (start the server without --join "
        "while the job forms), or it ends");
  }
  if (!Tracked()) {
    return absl::FailedPreconditionError(
        "joining a running job needs ps_scheduler --elastic (or --replicas >= 2): slices move to a new server as "
        "copies that take over, and this job does not track where its copies are");
  }
  if (m.rank >= 0 || m.restored) {
    return absl::InvalidArgumentError("a joining server takes a new rank: start it without --rank and --restore_dir");
  }
  const int rank = static_cast<int>(server_index_.size());
  const Node node{next_node_id_++, Role::kServer, rank, m.address, identity, m.public_key, false, true, clock_->Now()};
  server_index_.push_back(nodes_.size());
  by_identity_[identity] = nodes_.size();
  nodes_.push_back(node);
  ++servers_;
  LOG(WARNING) << "scheduler: server " << rank << " joined the running job as node " << node.node_id << " at "
               << m.address << "; slices move to it once it holds the model";
  EmitEvent("server_joined", JsonLine().Add("rank", rank).Add("node", node.node_id).Add("address", m.address));
  rebalance_wanted_ = true;
  // Moves planned for fewer servers are planned again with this one, once
  // the move under way is done (a drain's stay: they empty its server).
  if (!draining_.has_value()) moves_.clear();
  BroadcastView();  // the servers learn of it before it can reach them
  Send(identity, env.request_id, RegisterReplyMsg{node.node_id, rank, incarnation_, options_.replicas});
  SendSlices(nodes_.back());  // the model, no slice yet
  return absl::OkStatus();
}

int32_t Scheduler::Impl::ServerNotBack() const {
  for (size_t i : server_index_) {
    if (nodes_[i].alive && nodes_[i].identity.empty()) return nodes_[i].rank;
  }
  return -1;
}

void Scheduler::Impl::StartRebalance() {
  if (!rebalance_wanted_ || !Tracked() || !model_ready_ || phase_ != Phase::kRunning || moving_.has_value() ||
      draining_.has_value() || replicas_.Missing() > 0 || ServerNotBack() >= 0) {
    return;
  }
  std::set<int32_t> live;
  for (size_t i : server_index_) {
    if (nodes_[i].alive && !nodes_[i].identity.empty()) live.insert(nodes_[i].rank);
  }
  for (const std::vector<int32_t>& c : replicas_.copies()) {
    if (!c.empty() && !live.count(c[0])) return;  // a slice waits for its server's restart
  }
  rebalance_wanted_ = false;
  const std::vector<SliceMove> plan = PlanMoves(map_, replicas_.copies(), live);
  if (plan.empty()) return;
  moves_.assign(plan.begin(), plan.end());
  LOG(WARNING) << "scheduler: " << plan.size() << " slice copies move to balance the job over " << live.size()
               << " servers";
  EmitEvent("moves_planned", JsonLine().Add("moves", plan.size()).Add("servers", live.size()));
  NextMove();
}

void Scheduler::Impl::NextMove() {
  while (!moving_.has_value() && !copying_.has_value() && !moves_.empty()) {
    const SliceMove move = moves_.front();
    moves_.pop_front();
    if (!replicas_.Holds(move.key, move.from)) continue;  // a death changed it meanwhile
    const bool copied = replicas_.Holds(move.key, move.to);
    SendMoveStep(move, /*release=*/copied);
  }
}

void Scheduler::Impl::SendMoveStep(const SliceMove& move, bool release) {
  const int32_t primary = replicas_.copies()[move.key][0];
  const uint64_t id = next_request_id_++;
  moving_ = MoveInFlight{move, id, release, clock_->Now() + options_.server_timeout};
  // A release is saved before it is asked: a scheduler restored after it
  // finishes the move (FinishRestoredMove) as this one would have.
  if (release) SaveState();
  AddCopyRequestMsg request{move.key, release ? move.from : move.to, release ? view_epoch_ + 1 : 0};
  Send(nodes_[server_index_[primary]].identity, id, request);
}

void Scheduler::Impl::OnMoveAnswer(const Envelope& env) {
  const MoveInFlight m = *moving_;
  moving_.reset();
  if (const auto* err = std::get_if<ErrorMsg>(&env.body)) {
    LOG(ERROR) << "scheduler: slice " << m.move.key << " did not move from server " << m.move.from << " to server "
               << m.move.to << ": " << err->message;
    EmitEvent(
        "move_failed",
        JsonLine().Add("slice", m.move.key).Add("from", m.move.from).Add("to", m.move.to).Add("error", err->message));
    if (m.releasing) SaveState();  // no release to finish after a restart
  } else if (!m.releasing) {
    replicas_.Add(ReplicaSet::Copy{m.move.key, replicas_.copies()[m.move.key][0], m.move.to});
    BroadcastView();  // a copy more, until the old one is released
    SendMoveStep(m.move, /*release=*/true);
    return;
  } else {
    replicas_.Move(m.move.key, m.move.from, m.move.to);
    LOG(INFO) << "scheduler: slice " << m.move.key << " moved from server " << m.move.from << " to server " << m.move.to
              << " (" << moves_.size() << " moves to go)";
    EmitEvent(
        "slice_moved",
        JsonLine().Add("slice", m.move.key).Add("from", m.move.from).Add("to", m.move.to).Add("to_go", moves_.size()));
    BroadcastView();
  }
  NextMove();
  if (!moving_.has_value()) StartNextCopy();
  MaybeFinishDrain();
}

void Scheduler::Impl::CheckMoveDeadline(absl::Time now) {
  if (!moving_.has_value() || now <= moving_->deadline) return;
  const MoveInFlight m = *moving_;
  moving_.reset();
  moves_.clear();
  LOG(ERROR) << "scheduler: server " << replicas_.copies()[m.move.key][0] << " did not "
             << (m.releasing ? "release" : "copy") << " slice " << m.move.key << " within "
             << absl::FormatDuration(options_.server_timeout)
             << (m.releasing ? "; the new copy takes over anyway (the view names one primary)" : "; move abandoned");
  if (m.releasing) {
    replicas_.Move(m.move.key, m.move.from, m.move.to);
    BroadcastView();
  }
  StartNextCopy();
  MaybeFinishDrain();
}

void Scheduler::Impl::ForgetMovesOf(int32_t rank) {
  if (moves_.empty() && !moving_.has_value()) return;
  const bool involved = moving_.has_value() && (moving_->move.from == rank || moving_->move.to == rank ||
                                                replicas_.copies()[moving_->move.key][0] == rank);
  LOG(WARNING) << "scheduler: server " << rank << " is gone: the planned moves are dropped"
               << (involved ? ", the one under way abandoned" : "") << "; planned again once every slice has its "
               << options_.replicas << " copies";
  // The view that follows the death (its callers broadcast one) saves the
  // state without the move.
  if (involved) moving_.reset();
  moves_.clear();
  rebalance_wanted_ = true;
}

void Scheduler::Impl::FinishRestoredMove(const std::optional<JobStateMove>& releasing) {
  if (!releasing.has_value()) return;
  const JobStateMove& m = *releasing;
  if (!replicas_.Holds(m.key, m.from) || !replicas_.Holds(m.key, m.to)) return;
  replicas_.Move(m.key, m.from, m.to);
  // The epoch the release announced (or a later one, had views followed
  // it): the first view the nodes get names the new copy. Saved with the
  // next view; a restart before that does this again, alike.
  ++view_epoch_;
  LOG(WARNING) << "scheduler: slice " << m.key << " moved from server " << m.from << " to server " << m.to
               << ": the last scheduler was releasing its old copy (view " << view_epoch_ << " names the new one)";
  EmitEvent("slice_moved",
            JsonLine().Add("slice", m.key).Add("from", m.from).Add("to", m.to).Add("after_restore", true));
}

}  // namespace ps
