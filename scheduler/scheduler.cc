#include "scheduler/scheduler.h"

#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/dispatch.h"
#include "common/base/events.h"
#include "common/wire/cluster_view.h"
#include "common/wire/codec.h"
#include "glog/logging.h"
#include "scheduler/scheduler_impl.h"

namespace ps {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

}  // namespace

using scheduler_internal::Node;
using scheduler_internal::Phase;

absl::Status Scheduler::Impl::Run() {
  register_deadline_ = clock_->Now() + options_.register_timeout;
  // Restored nodes have heartbeat_timeout from now to reconnect.
  for (Node& n : nodes_) n.last_seen = clock_->Now();
  PollSet poll;
  poll.Add(router_, 0);
  while (phase_ != Phase::kDone) {
    if (stop_.load()) return absl::CancelledError("scheduler stopped by request");
    poll.Wait(kPollInterval);
    if (!poll.ready().empty()) {
      (void)DrainMessages(router_, /*routed=*/true, 256, [&](RawMessage raw) {
        OnMessage(std::move(raw));
        return absl::OkStatus();
      });
    }
    PS_RETURN_IF_ERROR(CheckDeadlines());
    if (metrics_.PublishDue()) metrics_.Publish(NodesHealth(), view_epoch_, replicas_.ByCopies());
  }
  if (!failure_.ok()) return failure_;
  LOG(INFO) << "scheduler: all workers done, all servers stopped; job finished";
  return absl::OkStatus();
}

void Scheduler::Impl::OnMessage(RawMessage raw) {
  const std::string identity(static_cast<const char*>(raw.routing_id.data()), raw.routing_id.size());
  auto env = DecodeEnvelope(Bytes(raw.header));
  if (!env.ok()) {
    SendError(identity, 0, env.status());
    return;
  }
  if (env->version != kProtocolVersion) {
    SendError(identity, env->request_id,
              absl::FailedPreconditionError(
                  absl::StrCat("protocol version ", env->version, "; this scheduler speaks ", kProtocolVersion)));
    return;
  }
  if (auto* reg = std::get_if<RegisterRequestMsg>(&env->body)) {
    // The node's key is the one its connection authenticated with.
    if (absl::Status s = AdoptAuthenticatedKey(reg->public_key, raw.user_id); !s.ok()) {
      SendError(identity, env->request_id, s);
      return;
    }
  }
  if (absl::Status s = Handle(identity, *env); !s.ok()) SendError(identity, env->request_id, s);
}

absl::Status Scheduler::Impl::Handle(const std::string& identity, const Envelope& env) {
  return std::visit(
      Overloaded{
          [&](const RegisterRequestMsg& m) { return OnRegister(identity, env, m); },
          [&](const HeartbeatMsg& m) -> absl::Status {
            PS_ASSIGN_OR_RETURN(Node * node, Sender(identity, env));
            Send(identity, env.request_id, AckMsg{});
            if (node->role == Role::kWorker && phase_ == Phase::kRunning) {
              OnUnreachableReport(*node, m.unreachable);
            }
            return absl::OkStatus();
          },
          [&](const DefineModelRequestMsg& m) -> absl::Status {
            PS_ASSIGN_OR_RETURN(Node * worker, Sender(identity, env, Role::kWorker));
            return OnDefineModel(*worker, env, m.model);
          },
          [&](const BarrierRequestMsg& m) -> absl::Status {
            PS_ASSIGN_OR_RETURN(Node * worker, Sender(identity, env, Role::kWorker));
            return OnBarrier(*worker, env, m);
          },
          [&](const DrainRequestMsg& m) { return OnDrain(identity, env, m); },
          [&](const ServingRequestMsg& m) { return OnServingSubscribe(identity, env, m); },
          [&](const WorkerDoneMsg&) -> absl::Status {
            PS_ASSIGN_OR_RETURN(Node * worker, Sender(identity, env, Role::kWorker));
            OnWorkerDone(*worker, env);
            return absl::OkStatus();
          },
          OnlyFor<AckMsg, ErrorMsg>([&](const auto&) -> absl::Status {
            PS_ASSIGN_OR_RETURN(Node * server, Sender(identity, env, Role::kServer));
            OnServerAck(*server, env);
            return absl::OkStatus();
          }),
          OnlyFor<RegisterReplyMsg, ClusterViewMsg, DefineModelReplyMsg, CreateSlicesRequestMsg, ShutdownMsg,
                  PushRequestMsg, PullRequestMsg, PullReplyMsg, StatsRequestMsg, StatsReplyMsg, ShmOfferMsg,
                  ShmGrantMsg, AddCopyRequestMsg, SliceCopyMsg, ServingReplyMsg>(
              [&](const auto&) { return Sender(identity, env, Role::kScheduler).status(); }),
      },
      env.body);
}

absl::Status Scheduler::Impl::OnServingSubscribe(const std::string& identity, const Envelope& env,
                                                 const ServingRequestMsg& m) {
  // A serving replica (ps_serve --scheduler) reads the job, it is not one of
  // its nodes: no registration, nothing waits on it. The socket's keys
  // admitted it; it asks again whenever it has lost track.
  if (m.kind != ServingKind::kSubscribe) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the scheduler answers a serving replica's subscribe, not a serving ",
        m.kind == ServingKind::kRound ? "round (asked of a server)" : "read (asked of a replica: ps_serve)"));
  }
  if (phase_ != Phase::kRunning || !model_ready_) {
    return absl::UnavailableError(phase_ == Phase::kRunning ? "the job's model is not placed yet: ask again"
                                                            : "the job is not running (forming or ending)");
  }
  Send(identity, env.request_id, DefineModelReplyMsg{*model_, map_.slices(), map_.num_servers()});
  Send(identity, env.request_id, ViewFor(CurrentView(), Role::kWorker));
  return absl::OkStatus();
}

absl::StatusOr<Node*> Scheduler::Impl::Sender(const std::string& identity, const Envelope& env,
                                              std::optional<Role> role) {
  auto it = by_identity_.find(identity);
  if (it == by_identity_.end()) {
    // A running node whose scheduler was restarted lands here first; it
    // re-registers under its id on this answer.
    return absl::UnauthenticatedError(
        absl::StrCat(BodyName(env.body),
                     " from a node that has not registered with this scheduler (it may have been restarted:"
                     " register again)"));
  }
  Node& node = nodes_[it->second];
  if (!node.alive) {
    return absl::FailedPreconditionError(
        absl::StrCat(RoleName(node.role), " ", node.rank, " (node ", node.node_id,
                     ") was declared dead or replaced; restart it with --rank=", node.rank, " to rejoin"));
  }
  node.last_seen = clock_->Now();
  if (!role.has_value()) return &node;  // heartbeats count while the cluster forms
  if (phase_ == Phase::kForming) {
    return absl::FailedPreconditionError(absl::StrCat(BodyName(env.body), " before the cluster has formed"));
  }
  if (node.role != *role) {
    return absl::InvalidArgumentError(
        absl::StrCat("the scheduler does not take ", BodyName(env.body), " from a ", RoleName(node.role)));
  }
  return &node;
}

absl::Status Scheduler::Impl::OnRegister(const std::string& identity, const Envelope& env,
                                         const RegisterRequestMsg& m) {
  if (const Node* known = NodeByIdentity(identity)) {  // a retry of the same registration
    // While forming, the answer comes at formation.
    if (known->rank >= 0)
      Send(identity, env.request_id, RegisterReplyMsg{known->node_id, known->rank, incarnation_, options_.replicas});
    return absl::OkStatus();
  }
  if (m.role == Role::kScheduler) return absl::InvalidArgumentError("a scheduler cannot register");
  if (m.role == Role::kServer && m.address.empty()) {
    return absl::InvalidArgumentError("server registered without an address");
  }
  if (m.node_id != 0) return OnReconnect(identity, env, m);
  if (m.join) return OnJoin(identity, env, m);
  if (phase_ == Phase::kRunning) return OnRejoin(identity, env, m);
  if (phase_ != Phase::kForming) {
    return absl::FailedPreconditionError("the job is ending; it takes no new nodes");
  }
  PS_RETURN_IF_ERROR(OnForming(identity, m));
  // The reply waits for formation, so that ranks asked for can be honoured
  // whatever order the nodes arrive in.
  pending_replies_.push_back(PendingReply{identity, env.request_id});
  if (servers_ == options_.num_servers && workers_ == options_.num_workers) Form();
  return absl::OkStatus();
}

absl::Status Scheduler::Impl::OnForming(const std::string& identity, const RegisterRequestMsg& m) {
  const bool server = m.role == Role::kServer;
  int& count = server ? servers_ : workers_;
  const int want = server ? options_.num_servers : options_.num_workers;
  if (count >= want) {
    return absl::ResourceExhaustedError(absl::StrCat("the job already has its ", want, " ", RoleName(m.role), "s"));
  }
  if (m.rank >= want) {
    return absl::InvalidArgumentError(
        absl::StrCat(RoleName(m.role), " rank ", m.rank, " does not exist: ranks go from 0 to ", want - 1));
  }
  for (const Node& n : nodes_) {
    if (m.rank >= 0 && n.role == m.role && n.rank == m.rank) {
      return absl::AlreadyExistsError(absl::StrCat(RoleName(m.role), " rank ", m.rank, " is already taken by node ",
                                                   n.node_id, n.address.empty() ? "" : " at " + n.address,
                                                   "; every node needs its own --rank"));
    }
  }
  ++count;
  Node node{next_node_id_++, m.role, m.rank, m.address, identity, m.public_key, false, true, clock_->Now()};
  node.restored = server && m.restored;
  if (node.restored) node.held = m.held;
  by_identity_[identity] = nodes_.size();
  nodes_.push_back(node);
  LOG(INFO) << "scheduler: " << RoleName(m.role) << " registered (node " << node.node_id
            << (m.rank >= 0 ? absl::StrCat(", asks for rank ", m.rank) : "") << (server ? ", " + m.address : "") << ")";
  EmitEvent("registered", JsonLine().Add("role", RoleName(m.role)).Add("node", node.node_id).Add("asked_rank", m.rank));
  return absl::OkStatus();
}

void Scheduler::Impl::Form() {
  server_index_.assign(options_.num_servers, 0);
  worker_index_.assign(options_.num_workers, 0);
  for (const Role role : {Role::kServer, Role::kWorker}) {
    std::vector<size_t> of_role;  // indices in nodes_, in registration order
    std::vector<int> asked;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].role != role) continue;
      of_role.push_back(i);
      asked.push_back(nodes_[i].rank);
    }
    const std::vector<int> given = GiveRanks(asked);
    for (size_t j = 0; j < of_role.size(); ++j) {
      Node& n = nodes_[of_role[j]];
      n.rank = given[j];
      (role == Role::kServer ? server_index_ : worker_index_)[n.rank] = of_role[j];
      LOG(INFO) << "scheduler: " << RoleName(n.role) << " " << n.rank << " is node " << n.node_id;
      EmitEvent("ranked", JsonLine().Add("role", RoleName(n.role)).Add("rank", n.rank).Add("node", n.node_id));
    }
  }
  for (const PendingReply& p : pending_replies_) {
    const Node& n = *NodeByIdentity(p.identity);
    Send(p.identity, p.request_id, RegisterReplyMsg{n.node_id, n.rank, incarnation_, options_.replicas});
  }
  pending_replies_.clear();
  const absl::Time now = clock_->Now();
  for (Node& n : nodes_) n.last_seen = now;
  BroadcastView();
}

absl::Status Scheduler::Impl::OnReconnect(const std::string& identity, const Envelope& env,
                                          const RegisterRequestMsg& m) {
  if (env.incarnation != incarnation_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", m.node_id, " belongs to job incarnation ", IncarnationName(env.incarnation), "; this scheduler runs ",
        IncarnationName(incarnation_), " (a new job: restart the node, or the scheduler with --restore)"));
  }
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const Node& n) { return n.node_id == m.node_id; });
  if (it == nodes_.end() || it->role != m.role || it->rank != m.rank) {
    return absl::FailedPreconditionError(
        absl::StrCat("no ", RoleName(m.role), " ", m.rank, " with node id ", m.node_id, " in this job"));
  }
  if (!it->public_key.empty() && it->public_key != m.public_key) {
    return absl::PermissionDeniedError(absl::StrCat("node ", m.node_id, " registered with another key"));
  }
  if (!it->alive) {
    return absl::FailedPreconditionError(
        absl::StrCat(RoleName(it->role), " ", it->rank, " (node ", it->node_id,
                     ") was declared dead or replaced; restart it with --rank=", it->rank, " to rejoin"));
  }
  if (!it->identity.empty()) by_identity_.erase(it->identity);
  it->identity = identity;
  it->last_seen = clock_->Now();
  by_identity_[identity] = static_cast<size_t>(it - nodes_.begin());
  LOG(INFO) << "scheduler: " << RoleName(it->role) << " " << it->rank << " (node " << it->node_id << ") reconnected";
  EmitEvent("reconnected", JsonLine().Add("role", RoleName(it->role)).Add("rank", it->rank).Add("node", it->node_id));
  Send(identity, env.request_id, RegisterReplyMsg{it->node_id, it->rank, incarnation_, options_.replicas});
  Send(identity, 0, ViewFor(CurrentView(), it->role));  // the whole view, whatever it had
  it->view_sent = view_epoch_;
  // A job whose workers were all done when the old scheduler died ends once
  // its servers can be told.
  const bool all_back = std::none_of(nodes_.begin(), nodes_.end(),
                                     [](const Node& n) { return n.alive && !n.done && n.identity.empty(); });
  if (all_back) MaybeFinishJob();
  return absl::OkStatus();
}

absl::Status Scheduler::Impl::OnRejoin(const std::string& identity, const Envelope& env, const RegisterRequestMsg& m) {
  const bool server = m.role == Role::kServer;
  std::vector<size_t>& index = server ? server_index_ : worker_index_;
  int rank = m.rank;
  if (rank < 0 && !server) {  // a new worker fills the place of a dead one
    for (size_t r = 0; r < index.size() && rank < 0; ++r) {
      if (!nodes_[index[r]].alive && !nodes_[index[r]].done) rank = static_cast<int>(r);
    }
  }
  if (rank < 0 || rank >= static_cast<int>(index.size())) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the job already has its ", index.size(), " ", RoleName(m.role), "s",
                     rank < 0 ? " and none has died" : absl::StrCat("; rank ", rank, " does not exist")));
  }
  // With replicas, a server that comes back without its checkpoint joins as
  // a new one: its slices' other copies lead them, and it gets copies of
  // those that lack one; unless it held a slice's last copy.
  const bool fresh_ok = Tracked() && model_ready_ && replicas_.LastCopiesOn(rank) == 0;
  if (server && !m.restored && !fresh_ok) {
    return absl::FailedPreconditionError(
        absl::StrCat("server rank ", rank,
                     " cannot rejoin the running job without its checkpoint: its slices would start "
                     "again from their initial values; restart it with --restore_dir"));
  }
  Node& old = nodes_[index[rank]];
  if (old.done) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", rank, " has already finished its work"));
  }
  if (old.alive) MarkDead(old, "replaced by a new registration for its rank");
  const Node node{next_node_id_++, m.role, rank, m.address, identity, m.public_key, false, true, clock_->Now()};
  index[rank] = nodes_.size();
  by_identity_[identity] = nodes_.size();
  nodes_.push_back(node);
  LOG(WARNING) << "scheduler: " << RoleName(m.role) << " " << rank << " rejoined as node " << node.node_id
               << (server ? " at " + m.address : "") << " (replacing node " << old.node_id << ")";
  EmitEvent("rejoined", JsonLine()
                            .Add("role", RoleName(m.role))
                            .Add("rank", rank)
                            .Add("node", node.node_id)
                            .Add("replaced_node", old.node_id));
  // The view first: the servers learn of the new node before it can reach them.
  BroadcastView();
  Send(identity, env.request_id, RegisterReplyMsg{node.node_id, rank, incarnation_, options_.replicas});
  if (server && model_ready_) SendSlices(nodes_.back());
  return absl::OkStatus();
}

void Scheduler::Impl::CheckHeartbeats(absl::Time now) {
  bool changed = false;
  for (Node& n : nodes_) {
    if (!n.alive || n.done || now - n.last_seen <= options_.heartbeat_timeout) continue;
    MarkDead(n, absl::StrCat("silent for ", absl::FormatDuration(now - n.last_seen), " (heartbeat timeout ",
                             absl::FormatDuration(options_.heartbeat_timeout), ")"));
    changed = true;
  }
  if (!changed) return;
  BroadcastView();
  CompleteBarriers();
  MaybeFinishJob();
}

void Scheduler::Impl::MarkDead(Node& node, const std::string& why) {
  node.alive = false;
  LOG(WARNING) << "scheduler: " << RoleName(node.role) << " " << node.rank << " (node " << node.node_id
               << (node.address.empty() ? "" : ", " + node.address) << ") declared dead at "
               << absl::FormatTime("%H:%M:%E3S", clock_->Now(), absl::LocalTimeZone()) << ": " << why;
  EmitEvent(
      "node_dead",
      JsonLine().Add("role", RoleName(node.role)).Add("rank", node.rank).Add("node", node.node_id).Add("why", why));
  if (node.role == Role::kWorker) unreachable_.ForgetWorker(node.rank);
  // A dead server owes no answer any more (a shutdown or a slice creation).
  if (node.role == Role::kServer) {
    unreachable_.ForgetServer(node.rank);
    if (draining_.has_value() && draining_->rank == node.rank) {
      EndDrain(absl::AbortedError(absl::StrCat("server ", node.rank, " died while being drained: ", why,
                                               "; its slices failed over to their copies")));
    }
    LoseServer(node.rank);
    ForgetMovesOf(node.rank);
    absl::erase_if(awaiting_servers_, [&](const auto& entry) { return entry.second == node.rank; });
    if (phase_ == Phase::kShuttingDown && awaiting_servers_.empty()) phase_ = Phase::kDone;
  }
  barriers_.Forget(node.identity);
}

void Scheduler::Impl::CompleteBarriers() {
  const int live = LiveWorkers();
  for (const auto& [name, arrivals] : barriers_.Complete(live)) {
    LOG(INFO) << "scheduler: barrier '" << name << "' complete with the " << live << " live workers";
    for (const Waiter& w : arrivals) Send(w.identity, w.request_id, AckMsg{});
  }
}

int Scheduler::Impl::LiveWorkers() const {
  int live = 0;
  for (size_t i : worker_index_) live += nodes_[i].alive ? 1 : 0;
  return live;
}

void Scheduler::Impl::MaybeFinishJob() {
  if (phase_ != Phase::kRunning) return;
  int done = 0;
  std::vector<int> dead;
  for (size_t i : worker_index_) {
    const Node& n = nodes_[i];
    if (n.done) {
      ++done;
    } else if (!n.alive) {
      dead.push_back(n.rank);
    } else {
      return;  // someone still works
    }
  }
  const std::string dead_list = absl::StrCat("[", absl::StrJoin(dead, ","), "]");
  if (done > 0) {
    if (!dead.empty()) LOG(WARNING) << "scheduler: ending the job without the dead workers " << dead_list;
    EmitEvent("job_ending", JsonLine().AddRaw("dead_workers", dead_list));
    StartShutdown("");
    return;
  }
  failure_ = absl::AbortedError(absl::StrCat("every worker died (", dead_list, "); ending the job"));
  LOG(ERROR) << "scheduler: " << failure_.message();
  EmitEvent("job_failed", JsonLine().AddRaw("dead_workers", dead_list).Add("why", failure_.message()));
  StartShutdown(std::string(failure_.message()));
}

ClusterViewMsg Scheduler::Impl::CurrentView() const {
  ClusterViewMsg view{static_cast<int>(server_index_.size()), options_.num_workers, {}};
  view.epoch = view_epoch_;
  view.incarnation = incarnation_;
  for (const std::vector<size_t>* index : {&server_index_, &worker_index_}) {
    for (size_t i : *index) {
      const Node& n = nodes_[i];
      if (n.alive) view.nodes.push_back(NodeInfo{n.node_id, n.role, n.rank, n.address, n.public_key});
    }
  }
  for (const Node& n : nodes_) {
    if (!n.alive) view.dead.push_back(n.node_id);
  }
  if (Tracked()) view.copies = replicas_.copies();
  return view;
}

void Scheduler::Impl::BroadcastView() {
  ++view_epoch_;
  SaveState();  // before anyone sees the epoch: a restored scheduler never reuses it
  const ClusterViewMsg view = CurrentView();
  // Once per role: the whole view, and the change from the one sent last.
  ClusterViewMsg whole[2], change[2];
  for (const Role role : {Role::kServer, Role::kWorker}) {
    const int r = role == Role::kWorker;
    whole[r] = ViewFor(view, role);
    change[r] = ViewDelta(last_for_role_[r], whole[r]);
  }
  int sent = 0;
  for (Node& n : nodes_) {
    if (!n.alive || n.done || n.identity.empty()) continue;
    const int r = n.role == Role::kWorker;
    const bool holds_base = n.view_sent != 0 && n.view_sent == last_for_role_[r].epoch;
    Send(n.identity, 0, holds_base ? change[r] : whole[r]);
    n.view_sent = view.epoch;
    ++sent;
  }
  last_for_role_[0] = std::move(whole[0]);
  last_for_role_[1] = std::move(whole[1]);
  if (phase_ == Phase::kForming) {
    phase_ = Phase::kRunning;
    LOG(INFO) << "scheduler: cluster formed, view sent to " << sent << " nodes";
  } else {
    LOG(INFO) << "scheduler: cluster view " << view.epoch << " (" << view.nodes.size() << " live nodes, "
              << view.dead.size() << " dead) sent to " << sent << " nodes";
  }
}

absl::Status Scheduler::Impl::OnBarrier(const Node& worker, const Envelope& env, const BarrierRequestMsg& m) {
  const absl::Duration timeout = m.timeout_ms > 0 ? absl::Milliseconds(m.timeout_ms) : options_.default_barrier_timeout;
  PS_ASSIGN_OR_RETURN(
      std::vector<Waiter> done,
      barriers_.Arrive(m.name, Waiter{worker.identity, env.request_id, worker.rank, clock_->Now() + timeout},
                       LiveWorkers()));
  for (const Waiter& w : done) Send(w.identity, w.request_id, AckMsg{});
  return absl::OkStatus();
}

void Scheduler::Impl::OnWorkerDone(Node& worker, const Envelope& env) {
  worker.done = true;
  SaveState();
  Send(worker.identity, env.request_id, AckMsg{});
  LOG(INFO) << "scheduler: worker " << worker.rank << " done";
  MaybeFinishJob();
}

void Scheduler::Impl::StartShutdown(const std::string& reason) {
  if (draining_.has_value()) {
    EndDrain(absl::AbortedError(absl::StrCat("the job ended before server ", draining_->rank, " left")));
  }
  phase_ = Phase::kShuttingDown;
  awaiting_servers_.clear();
  servers_deadline_ = clock_->Now() + options_.server_timeout;
  for (size_t i : server_index_) {
    const Node& n = nodes_[i];
    if (!n.alive) continue;
    awaiting_servers_[next_request_id_] = n.rank;
    Send(n.identity, next_request_id_++, ShutdownMsg{reason});
  }
  // Workers still alive (a failed job) are told as well; they owe no answer.
  for (size_t i : worker_index_) {
    const Node& n = nodes_[i];
    if (n.alive && !n.done && !reason.empty()) Send(n.identity, 0, ShutdownMsg{reason});
  }
  if (awaiting_servers_.empty()) phase_ = Phase::kDone;
}

absl::Status Scheduler::Impl::CheckDeadlines() {
  const absl::Time now = clock_->Now();
  if (phase_ == Phase::kRunning || phase_ == Phase::kShuttingDown) CheckHeartbeats(now);
  if (phase_ == Phase::kForming && now > register_deadline_) {
    const std::string missing = DescribeMissingNodes();
    for (const Node& n : nodes_) Send(n.identity, 0, ShutdownMsg{"cluster did not form: " + missing});
    return absl::DeadlineExceededError(
        absl::StrCat("cluster did not form within ", absl::FormatDuration(options_.register_timeout), ": ", missing));
  }
  if (!awaiting_servers_.empty() && now > servers_deadline_) {
    std::set<int> silent;
    for (const auto& [id, rank] : awaiting_servers_) silent.insert(rank);
    const std::string what = absl::StrCat("servers [", absl::StrJoin(silent, ","), "] did not answer within ",
                                          absl::FormatDuration(options_.server_timeout));
    if (phase_ == Phase::kShuttingDown) return absl::DeadlineExceededError("shutdown: " + what);
    if (model_ready_) {  // a restarted server did not take its slices back
      awaiting_servers_.clear();
      LOG(ERROR) << "scheduler: restarted " << what;
      StartShutdown("a restarted server did not take its slices back: " + what);
    } else {
      FinishModel(absl::DeadlineExceededError("creating slices: " + what));
    }
  }
  for (const auto& [w, error] : barriers_.Expire(now, options_.num_workers)) SendError(w.identity, w.request_id, error);
  CheckMoveDeadline(now);
  if (copying_.has_value() && now > copying_->deadline) {
    LOG(ERROR) << "scheduler: server " << copying_->copy.primary << " did not copy slice " << copying_->copy.key
               << " to server " << copying_->copy.target << " within " << absl::FormatDuration(options_.server_timeout);
    copy_failed_.insert({copying_->copy.key, copying_->copy.target});
    copying_.reset();
  }
  StartNextCopy();
  return absl::OkStatus();
}

std::string Scheduler::Impl::DescribeMissingNodes() const {
  std::vector<std::string> servers;
  for (const Node& n : nodes_) {
    if (n.role == Role::kServer) servers.push_back(n.address);
  }
  return absl::StrCat("have ", servers_, " of ", options_.num_servers, " servers [", absl::StrJoin(servers, ", "),
                      "] and ", workers_, " of ", options_.num_workers, " workers; missing ",
                      options_.num_servers - servers_, " server(s) and ", options_.num_workers - workers_,
                      " worker(s)");
}

std::vector<NodeHealth> Scheduler::Impl::NodesHealth() const {
  std::vector<NodeHealth> health;
  for (const Node& n : nodes_) {
    const int cut =
        n.role == Role::kServer && n.alive ? static_cast<int>(unreachable_.WorkersCutFrom(n.rank).size()) : 0;
    health.push_back({n.role, n.rank, n.node_id, n.alive, n.done, clock_->Now() - n.last_seen, cut});
  }
  return health;
}

const Node* Scheduler::Impl::NodeByIdentity(const std::string& identity) const {
  auto it = by_identity_.find(identity);
  return it == by_identity_.end() ? nullptr : &nodes_[it->second];
}

void Scheduler::Impl::Send(const std::string& identity, uint64_t request_id, Body body) {
  if (identity.empty()) return;  // restored, not reconnected yet: nowhere to send
  zmq::message_t id(identity.data(), identity.size());
  Envelope env{kProtocolVersion, request_id, 0, std::move(body)};
  env.incarnation = incarnation_;
  if (absl::Status s = SendMessage(router_, &id, env); !s.ok()) {
    LOG(WARNING) << "scheduler: " << s;
  }
}

void Scheduler::Impl::SendError(const std::string& identity, uint64_t request_id, const absl::Status& s) {
  LOG(WARNING) << "scheduler: request " << request_id << " refused: " << s;
  Send(identity, request_id, ErrorMsg{s.code(), std::string(s.message())});
}

Scheduler::Scheduler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Scheduler::~Scheduler() = default;

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerOptions& options) {
  PS_RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>(options);
  if (options.restore) PS_RETURN_IF_ERROR(impl->Restore());
  PS_RETURN_IF_ERROR(impl->Bind());
  return std::unique_ptr<Scheduler>(new Scheduler(std::move(impl)));
}

const std::string& Scheduler::endpoint() const { return impl_->endpoint(); }
std::string Scheduler::metrics_url() const { return impl_->metrics_url(); }
absl::Status Scheduler::Run() { return impl_->Run(); }
void Scheduler::RequestStop() { impl_->RequestStop(); }

}  // namespace ps
