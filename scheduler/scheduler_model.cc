// The scheduler's side of the model: its definition, its slices created on
// the servers (and given back to a restarted one), their copies with
// --replicas (lost with a server, made again one at a time), and the state
// file that lets a restarted scheduler take the job back.

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/events.h"
#include "glog/logging.h"
#include "scheduler/restore_options.h"
#include "scheduler/scheduler_impl.h"

namespace ps {

using scheduler_internal::Node;
using scheduler_internal::Phase;

// The restarted server holds its checkpoint already; creating the same model
// is then a no-op on its side, and it answers once it can serve.
void Scheduler::Impl::SendSlices(const Node& server) {
  CreateSlicesRequestMsg req{*model_, {}, options_.num_workers, {}};
  for (const Slice& s : map_.slices()) {
    if (!replicas_.Holds(s.key, server.rank)) continue;
    req.slices.push_back(s);
    if (Tracked()) req.copies.push_back(replicas_.copies()[s.key]);
  }
  if (awaiting_servers_.empty()) servers_deadline_ = clock_->Now() + options_.server_timeout;
  awaiting_servers_[next_request_id_] = server.rank;
  Send(server.identity, next_request_id_++, std::move(req));
}

absl::Status Scheduler::Impl::SeatRestoredCopies() {
  std::map<int32_t, std::vector<SliceData>> held;
  for (size_t i : server_index_) {
    if (nodes_[i].restored) held[nodes_[i].rank] = nodes_[i].held;
  }
  if (held.empty()) return absl::OkStatus();  // a new job
  PS_RETURN_IF_ERROR(replicas_.Seat(held));
  LOG(WARNING) << "scheduler: the job restarts from the checkpoints of " << held.size() << " of "
               << options_.num_servers << " servers: each slice keeps its most advanced copy (checkpoints are "
               << "written at different moments); " << replicas_.Missing() << " slices get their other copies again";
  EmitEvent("job_restarts", JsonLine()
                                .Add("servers_restored", held.size())
                                .Add("servers", options_.num_servers)
                                .Add("lacking", replicas_.Missing()));
  return absl::OkStatus();
}

void Scheduler::Impl::LoseServer(int rank) {
  if (!Tracked()) return;
  const auto [promoted, last] = replicas_.Lose(rank);
  copy_failed_.clear();   // their primaries may have changed
  copies_stuck_.reset();  // said again for the servers left, even if they were stuck so before
  if (copying_.has_value() && (copying_->copy.primary == rank || copying_->copy.target == rank)) {
    LOG(WARNING) << "scheduler: the copy of slice " << copying_->copy.key << " to server " << copying_->copy.target
                 << " is abandoned: server " << rank << " died";
    copying_.reset();
  }
  LOG(WARNING) << "scheduler: server " << rank << " lost: " << promoted << " slices now served by their backups"
               << (last > 0 ? absl::StrCat(", ", last, " had no other copy and wait for its restart") : "") << "; "
               << replicas_.Missing() << " slices lack a copy";
  EmitEvent(
      "server_lost",
      JsonLine().Add("rank", rank).Add("promoted", promoted).Add("waiting", last).Add("lacking", replicas_.Missing()));
}

void Scheduler::Impl::StartNextCopy() {
  if (!Tracked() || !model_ready_ || phase_ != Phase::kRunning || copying_.has_value() || moving_.has_value()) {
    return;
  }
  std::set<int32_t> live;
  for (size_t i : server_index_) {
    if (nodes_[i].alive && !nodes_[i].identity.empty()) live.insert(nodes_[i].rank);
  }
  const std::optional<ReplicaSet::Copy> next = replicas_.NextCopy(live, copy_failed_);
  if (!next.has_value()) {
    if (replicas_.Missing() > 0) SayCopiesStuck(live);
    MaybeFinishDrain();
    if (replicas_.Missing() == 0) StartRebalance();
    return;
  }
  const uint64_t id = next_request_id_++;
  copying_ = CopyInFlight{*next, id, clock_->Now() + options_.server_timeout};
  LOG(INFO) << "scheduler: copying slice " << next->key << " from server " << next->primary << " to server "
            << next->target << " (" << replicas_.Missing() << " slices lack a copy)";
  EmitEvent("copy_started", JsonLine()
                                .Add("slice", next->key)
                                .Add("from", next->primary)
                                .Add("to", next->target)
                                .Add("lacking", replicas_.Missing()));
  Send(nodes_[server_index_[next->primary]].identity, id, AddCopyRequestMsg{next->key, next->target});
}

void Scheduler::Impl::SayCopiesStuck(const std::set<int32_t>& live) {
  size_t held = 0;
  for (const std::vector<int32_t>& c : replicas_.copies()) held += c.size();
  std::pair<std::set<int32_t>, size_t> now{live, held};
  if (copies_stuck_ == now) return;
  copies_stuck_ = std::move(now);
  std::vector<std::string> short_slices;  // named, the first 20
  for (size_t key = 0; key < replicas_.copies().size() && short_slices.size() < 20; ++key) {
    const size_t n = replicas_.copies()[key].size();
    if (n < static_cast<size_t>(options_.replicas)) short_slices.push_back(absl::StrCat(key, " (", n, ")"));
  }
  LOG(WARNING) << "scheduler: no further copy can be made with " << live.size() << " live servers ("
               << copy_failed_.size()
               << " copies failed, tried again after the next server loss): " << replicas_.Missing()
               << " slices keep fewer than " << options_.replicas
               << " copies; slice (copies): " << absl::StrJoin(short_slices, ", ")
               << (static_cast<size_t>(replicas_.Missing()) > short_slices.size() ? ", ..." : "");
  EmitEvent("copies_stuck", JsonLine()
                                .Add("live_servers", live.size())
                                .Add("lacking", replicas_.Missing())
                                .Add("replicas", options_.replicas));
}

void Scheduler::Impl::OnCopyAnswer(const Envelope& env) {
  const ReplicaSet::Copy copy = copying_->copy;
  copying_.reset();
  if (const auto* err = std::get_if<ErrorMsg>(&env.body)) {
    copy_failed_.insert({copy.key, copy.target});
    LOG(ERROR) << "scheduler: slice " << copy.key << " could not be copied to server " << copy.target << ": "
               << err->message;
  } else {
    replicas_.Add(copy);
    LOG(INFO) << "scheduler: slice " << copy.key << " has a copy on server " << copy.target << " again";
    EmitEvent("copy_made",
              JsonLine().Add("slice", copy.key).Add("to", copy.target).Add("lacking", replicas_.Missing()));
    if (replicas_.Missing() == 0) {
      LOG(INFO) << "scheduler: every slice has its " << options_.replicas << " copies again";
      EmitEvent("copies_restored", JsonLine().Add("replicas", options_.replicas));
    }
    BroadcastView();  // saves the state, the new copy in it
  }
  StartNextCopy();
}

void Scheduler::Impl::SaveState() {
  if (options_.state_file.empty()) return;
  JobState state{incarnation_, endpoint_, options_.num_servers, options_.num_workers, next_node_id_, view_epoch_};
  for (const Node& n : nodes_) {
    if (n.rank < 0) continue;  // still forming
    state.nodes.push_back(JobStateNode{NodeInfo{n.node_id, n.role, n.rank, n.address, n.public_key}, n.done, n.alive});
  }
  if (model_ready_) state.model = *model_;
  if (model_ready_ && Tracked()) state.copies = replicas_.copies();
  if (moving_.has_value() && moving_->releasing) {
    state.releasing = JobStateMove{moving_->move.key, moving_->move.from, moving_->move.to};
  }
  state.config = JobConfigOf(options_);
  if (absl::Status s = WriteJobState(options_.state_file, state); !s.ok()) {
    LOG(ERROR) << "scheduler: state not saved (a restart could not take the job back): " << s;
  }
}

absl::Status Scheduler::Impl::Restore() {
  PS_ASSIGN_OR_RETURN(JobState state, ReadJobState(options_.state_file));
  // The same job or none: a restore under another configuration (one copy
  // of a replicated job) would degrade it without a word.
  PS_RETURN_IF_ERROR(CheckSameJob(options_, state));
  if (!state.config.has_value()) {
    LOG(WARNING) << "scheduler: " << options_.state_file << " is of format 1 and records no configuration: "
                 << "the flags give it (--replicas=" << options_.replicas << ", --elastic=" << options_.elastic << ")";
  }
  incarnation_ = state.incarnation;
  next_node_id_ = state.next_node_id;
  view_epoch_ = state.view_epoch;
  restored_endpoint_ = state.endpoint;
  int ranks = state.num_servers;  // and the servers that joined the running job
  for (const JobStateNode& saved : state.nodes) {
    if (saved.info.role == Role::kServer) ranks = std::max(ranks, saved.info.rank + 1);
  }
  server_index_.assign(ranks, 0);
  worker_index_.assign(state.num_workers, 0);
  for (const JobStateNode& saved : state.nodes) {
    const NodeInfo& i = saved.info;
    // Nodes are saved in the order they joined: the last of a rank holds it.
    (i.role == Role::kServer ? server_index_ : worker_index_)[i.rank] = nodes_.size();
    nodes_.push_back(Node{i.node_id, i.role, i.rank, i.address, "", i.public_key, saved.done, saved.alive});
  }
  servers_ = ranks;
  workers_ = options_.num_workers;
  if (state.model.has_value()) {
    PS_ASSIGN_OR_RETURN(map_, PartitionMap::Build(state.model->tensors, options_.num_servers, state.model->placement,
                                                  static_cast<int>(state.model->tables.size())));
    PS_RETURN_IF_ERROR(replicas_.Place(map_, options_.replicas));
    if (!state.copies.empty()) replicas_.Restore(state.copies);  // as failovers and copies left them
    model_ = state.model;
    model_ready_ = true;
    // Moves planned or under way died with the last scheduler: the balance
    // is planned again once every live server is back (StartRebalance).
    rebalance_wanted_ = true;
    FinishRestoredMove(state.releasing);
  }
  phase_ = Phase::kRunning;
  restored_ = true;
  SayRestored();
  return absl::OkStatus();
}

void Scheduler::Impl::SayRestored() const {
  LOG(WARNING) << "scheduler: took the job back from " << options_.state_file << " (incarnation "
               << IncarnationName(incarnation_) << ", " << nodes_.size() << " nodes, view epoch " << view_epoch_
               << (model_ready_ ? ", model held by the servers" : ", no model yet")
               << "; --replicas=" << options_.replicas << " --elastic=" << (options_.elastic ? "true" : "false") << ")";
  EmitEvent("restored", JsonLine()
                            .Add("state_file", options_.state_file)
                            .Add("incarnation", IncarnationName(incarnation_))
                            .Add("nodes", nodes_.size())
                            .Add("view_epoch", view_epoch_)
                            .Add("model", model_ready_)
                            .Add("replicas", options_.replicas)
                            .Add("elastic", options_.elastic));
}

absl::Status Scheduler::Impl::OnDefineModel(const Node& worker, const Envelope& env, const ModelSpec& model) {
  if (options_.consistency.has_value() && !(model.consistency == *options_.consistency)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker ", worker.rank, " registered a model with consistency ", model.consistency.ToString(),
        ", but the job runs with consistency ", options_.consistency->ToString(),
        " (ps_scheduler --consistency, as the launcher's --consistency set it): register the job's mode, or leave "
        "it out to take PS_CONSISTENCY"));
  }
  if (model_.has_value() && !(*model_ == model)) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", worker.rank, " registered a model that differs from the one already registered (",
                     model_->tensors.size(), " tensors, consistency ", model_->consistency.ToString(), ")"));
  }
  if (!model_.has_value()) {
    PS_RETURN_IF_ERROR(model.ValidateFor(options_.num_workers));
    PS_ASSIGN_OR_RETURN(map_, PartitionMap::Build(model.tensors, options_.num_servers, model.placement,
                                                  static_cast<int>(model.tables.size())));
    PS_RETURN_IF_ERROR(replicas_.Place(map_, options_.replicas));
    if (Tracked()) PS_RETURN_IF_ERROR(SeatRestoredCopies());
    model_ = model;
    LOG(INFO) << "scheduler: model of " << model.tensors.size() << " tensors and " << model.tables.size()
              << " tables, consistency " << model.consistency.ToString() << ", placed:\n"
              << map_.Describe(model.tensors);
    StartCreatingSlices();
  }
  if (model_ready_) {
    Send(worker.identity, env.request_id, DefineModelReplyMsg{*model_, map_.slices(), map_.num_servers()});
  } else {
    model_waiters_.push_back(Waiter{worker.identity, env.request_id, worker.rank, servers_deadline_});
  }
  return absl::OkStatus();
}

void Scheduler::Impl::StartCreatingSlices() {
  awaiting_servers_.clear();
  for (size_t i : server_index_) {
    if (nodes_[i].alive) SendSlices(nodes_[i]);
  }
}

void Scheduler::Impl::OnServerAck(const Node& server, const Envelope& env) {
  if (OnDrainedAck(server, env)) return;
  if (moving_.has_value() && env.request_id == moving_->request_id) {
    OnMoveAnswer(env);
    return;
  }
  if (copying_.has_value() && env.request_id == copying_->request_id && server.rank == copying_->copy.primary) {
    OnCopyAnswer(env);
    return;
  }
  auto it = awaiting_servers_.find(env.request_id);
  if (it == awaiting_servers_.end() || it->second != server.rank) {
    LOG(WARNING) << "scheduler: ignoring a late or unexpected answer " << env.request_id << " from server "
                 << server.rank;
    return;
  }
  awaiting_servers_.erase(it);
  if (model_ready_ && phase_ == Phase::kRunning) {  // a restarted server took its slices back, or not
    if (auto* err = std::get_if<ErrorMsg>(&env.body)) {
      LOG(ERROR) << "scheduler: restarted server " << server.rank << " could not take its slices: " << err->message;
      StartShutdown(absl::StrCat("restarted server ", server.rank, " could not take its slices: ", err->message));
    } else {
      LOG(INFO) << "scheduler: restarted server " << server.rank << " serves its slices again";
      StartRebalance();  // a new server (or one back without slices) takes its share
    }
    return;
  }
  if (auto* err = std::get_if<ErrorMsg>(&env.body)) {
    FinishModel(
        absl::Status(err->code, absl::StrCat("server ", server.rank, " could not create its slices: ", err->message)));
    return;
  }
  if (!awaiting_servers_.empty()) return;
  if (phase_ == Phase::kShuttingDown) {
    phase_ = Phase::kDone;
  } else if (!model_ready_) {
    FinishModel(absl::OkStatus());
  }
}

void Scheduler::Impl::FinishModel(const absl::Status& status) {
  model_ready_ = status.ok();
  awaiting_servers_.clear();
  if (model_ready_) {
    LOG(INFO) << "scheduler: model held by every server";
    EmitEvent("model_held");
    // --replicas: every slice's copies in a view before any worker pushes (a
    // restarted job's primaries are where the most advanced copies were).
    // The view goes first on each worker's connection, so it is applied
    // before the model's reply.
    if (Tracked()) {
      BroadcastView();  // saves the state
    } else {
      SaveState();
    }
  }
  for (const Waiter& w : model_waiters_) {
    if (status.ok()) {
      Send(w.identity, w.request_id, DefineModelReplyMsg{*model_, map_.slices(), map_.num_servers()});
    } else {
      SendError(w.identity, w.request_id, status);
    }
  }
  model_waiters_.clear();
  if (!status.ok()) {
    LOG(ERROR) << "scheduler: " << status;
    model_.reset();  // a later definition may try again
  }
}

}  // namespace ps
