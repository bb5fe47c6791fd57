#include "server/server.h"

#include <unistd.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/base/dispatch.h"
#include "common/base/events.h"
#include "common/wire/codec.h"
#include "glog/logging.h"
#include "server/server_impl.h"

namespace ps {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

}  // namespace

uint64_t ServerMemoryBudget(const ServerOptions& options) {
  if (options.max_memory_bytes > 0) return options.max_memory_bytes;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page / 2 : 0;
}

// Where checkpoints go: checkpoint_dir, or restore_dir when only that is given.
std::string ServerCheckpointDir(const ServerOptions& options) {
  return options.checkpoint_dir.empty() ? options.restore_dir : options.checkpoint_dir;
}

absl::Status Server::Impl::Run() {
  if (!options_.restore_dir.empty()) PS_RETURN_IF_ERROR(Restore());
  absl::Status status = Serve();
  // Whatever ended the run, what this server holds goes to disk; unless
  // the scheduler refused it (declared dead, replaced): its rank's
  // checkpoint belongs to the replacement now.
  if (membership_.superseded()) {
    LOG(WARNING) << "server " << rank() << ": no final checkpoint: the scheduler gave this rank to another server";
  } else if (membership_.left()) {
    LOG(INFO) << "server " << rank() << ": no final checkpoint: drained, it left the job";
  } else if (store_.has_model() && checkpointer_.enabled() && (!status.ok() || checkpointer_.has_unsaved())) {
    // (An orderly shutdown wrote one already when the scheduler asked.)
    Checkpoint(status.ok() ? "orderly shutdown" : "final, before stopping");
  }
  return status;
}

absl::Status Server::Impl::Serve() {
  PS_RETURN_IF_ERROR(Connect());
  while (!membership_.shutdown()) {
    if (stop_.load()) PS_RETURN_IF_ERROR(OnStopRequested());
    PS_RETURN_IF_ERROR(CheckScheduler());
    PS_RETURN_IF_ERROR(PollOnce());
    if (!membership_.left()) {
      checkpointer_.MaybeWrite(membership_.CheckpointRank(), membership_.CheckpointIncarnation());
    }
  }
  LOG(INFO) << "server " << rank() << ": orderly shutdown";
  EmitEvent("shutdown", JsonLine().Add("rank", rank()));
  return absl::OkStatus();
}

absl::Status Server::Impl::OnStopRequested() {
  if (!options_.drain_on_stop || rank() < 0) return absl::CancelledError("server stopped by request");
  const Membership::DrainStep step = membership_.OnStop(runtime_.Now(), options_.drain_timeout);
  if (step == Membership::DrainStep::kExpired) {
    return absl::DeadlineExceededError(
        absl::StrCat("server ", rank(), " was not drained within ", absl::FormatDuration(options_.drain_timeout)));
  }
  if (step == Membership::DrainStep::kAsk) {
    LOG(WARNING) << "server " << rank() << ": asked to stop: asking the scheduler to drain it first";
    EmitEvent("drain_asked", JsonLine().Add("rank", rank()).Add("again", false));
  }
  if (step != Membership::DrainStep::kWait) ToScheduler(Membership::kDrainRequestId, DrainRequestMsg{rank()});
  return absl::OkStatus();
}

absl::Status Server::Impl::OnDrainRefused(const ErrorMsg& m) {
  if (!membership_.DrainRefusalPasses(m.code, runtime_.Now(), absl::Seconds(1))) {
    return absl::Status(m.code, absl::StrCat("the scheduler did not drain server ", rank(), ": ", m.message));
  }
  LOG(WARNING) << "server " << rank() << ": the scheduler cannot drain it yet (" << m.message
               << "); asking again in 1s";
  return absl::OkStatus();
}

absl::Status Server::Impl::CheckScheduler() {
  const absl::Status s =
      runtime_.Check(rank() < 0 ? " (it never answered the registration)" : " (the cluster did not form)");
  if (s.ok()) return s;
  const absl::Status named(s.code(),
                           absl::StrCat(rank() < 0 ? "server" : absl::StrCat("server ", rank()), ": ", s.message()));
  return rank() < 0 && absl::IsDeadlineExceeded(s) ? AddKeyHint(named, security_) : named;
}

void Server::Impl::OnRegistered(const RegisterReplyMsg& reply) {
  if (membership_.registered()) {  // re-registered with a restarted scheduler
    runtime_.Reregistered(absl::StrCat("re-registered as node ", reply.node_id));
    if (membership_.ReaskDrain()) {
      // It does not know the drain under way: asked again, from where it stands.
      LOG(WARNING) << "server " << rank() << ": asking the restarted scheduler to drain it again";
      ToScheduler(Membership::kDrainRequestId, DrainRequestMsg{rank()});
      EmitEvent("drain_asked", JsonLine().Add("rank", rank()).Add("again", true));
    }
    return;
  }
  membership_.Register(reply.node_id, reply.rank);
  replication_.set_one_copy(reply.replicas < 2);
  runtime_.set_name(absl::StrCat("server ", rank()));
  metrics_.SetRank(rank());
  AdoptIncarnation(reply.incarnation);
  LOG(INFO) << "server registered as rank " << rank() << " (node " << membership_.node_id() << ") of job incarnation "
            << IncarnationName(membership_.incarnation());
  EmitEvent("registered", JsonLine()
                              .Add("rank", rank())
                              .Add("node", membership_.node_id())
                              .Add("incarnation", IncarnationName(membership_.incarnation())));
}

void Server::Impl::AdoptIncarnation(uint64_t incarnation) {
  if (membership_.AdoptIncarnation(incarnation)) StartNewIncarnation();
}

void Server::Impl::StartNewIncarnation() {
  LOG(WARNING) << "server " << membership_.restored_rank() << ": job incarnation "
               << IncarnationName(membership_.incarnation()) << "; the checkpoint was written by incarnation "
               << IncarnationName(membership_.restored_incarnation())
               << ": every worker is new (push numbers start again; pushes for steps the checkpoint holds are "
                  "skipped)";
  EmitEvent("new_incarnation", JsonLine()
                                   .Add("rank", membership_.restored_rank())
                                   .Add("incarnation", IncarnationName(membership_.incarnation()))
                                   .Add("checkpoint_incarnation", IncarnationName(membership_.restored_incarnation())));
  seqs_.Forget();
  for (uint32_t key : store_.stats().held_keys) replication_.slice_seqs().Set(key, {});
  for (int w = 0; w < store_.num_workers(); ++w) store_.SkipStepsAlreadyApplied(w);
}

absl::Status Server::Impl::Restore() {
  int rank = options_.rank;
  if (rank < 0) {
    PS_ASSIGN_OR_RETURN(rank, OnlyCheckpointRank(options_.restore_dir));
  }
  PS_ASSIGN_OR_RETURN(const CheckpointInfo info, checkpointer_.Restore(options_.restore_dir, rank, &store_));
  membership_.Restored(rank, info.incarnation);
  // Every push this server numbered up to the checkpoint is in the slices
  // it holds: so says each slice's record, which a copy of it carries (a
  // move right after the restart must not let a re-sent push apply twice).
  std::vector<OriginSeq> held;
  for (const WorkerSeq& w : info.seqs) held.push_back(OriginSeq{rank, w.rank, w.last_seq});
  for (uint32_t key : store_.stats().held_keys) replication_.slice_seqs().Set(key, held);
  return absl::OkStatus();
}

absl::Status Server::Impl::Connect() {
  PS_ASSIGN_OR_RETURN(std::string sched, NormalizeEndpoint(options_.scheduler));
  PS_ASSIGN_OR_RETURN(scheduler_,
                      ConnectDealer(context_, sched, security_, Traffic::kControl, security_.scheduler_public_key()));
  const int rank = membership_.restored() ? membership_.restored_rank() : options_.rank;
  RegisterRequestMsg reg{Role::kServer, endpoint_, rank, security_.public_key(), 0, membership_.restored()};
  if (membership_.restored()) reg.held = store_.Held();
  reg.join = options_.join;
  ToScheduler(1, std::move(reg));
  LOG(INFO) << "server at " << endpoint_ << " registering with " << sched
            << (membership_.restored() ? absl::StrCat(" to take rank ", membership_.restored_rank(), " back") : "");
  runtime_.Registering();
  return absl::OkStatus();
}

absl::Status Server::Impl::PollOnce() {
  HeartbeatIfDue();
  absl::Duration wait = runtime_.PollTimeout(kPollInterval);
  for (const ParkedPull& p : parked_) wait = std::min(wait, p.deadline - runtime_.Now());
  if (!lagging_.empty()) wait = std::min(wait, lagging_.front().due - runtime_.Now());
  wait = std::min(wait, feed_.NextDeadline() - runtime_.Now());
  wait = std::max(wait, absl::ZeroDuration());
  // Workers' messages wait in the socket until the first cluster view says
  // who they are (a restarted server can be reached before its view arrives).
  enum Tag { kWorkers, kScheduler, kShm, kBackups = 1 << 16 };
  poll_.Clear();
  if (runtime_.have_view()) {
    poll_.AddSocketFd(router_, kWorkers, router_unsettled_);
    shm_.AddToPoll(poll_, kShm);
    // Spins for the workers' channels and the backups' answers alike.
    if ((shm_.size() > 0 || replication_.shm_links() > 0) &&
        SpinUntil(options_.shm_spin, [&] { return shm_.AnyIncoming() || replication_.AnyIncoming(); })) {
      wait = absl::ZeroDuration();
    }
  }
  poll_.AddSocketFd(scheduler_, kScheduler, scheduler_unsettled_);
  replication_.AddToPoll(poll_, kBackups);
  poll_.Wait(wait);
  replication_.OnReady(poll_, kBackups);
  if (poll_.IsReady(kScheduler)) {
    PS_RETURN_IF_ERROR(DrainMessages(
        scheduler_, /*routed=*/false, std::numeric_limits<int>::max(),
        [&](RawMessage raw) { return FromScheduler(std::move(raw)); }, &scheduler_unsettled_));
  }
  PS_RETURN_IF_ERROR(HandleLaggingMessages());
  // What the workers sent, served by priority (request_order.h).
  std::vector<RawMessage> batch;
  if (poll_.IsReady(kWorkers)) {
    // Bounded batch so the scheduler socket and deadlines are not starved.
    (void)DrainMessages(
        router_, /*routed=*/true, 64,
        [&](RawMessage raw) {
          batch.push_back(std::move(raw));
          return absl::OkStatus();
        },
        &router_unsettled_);
  }
  if (runtime_.have_view()) shm_.OnReady(poll_, kShm, [&](RawMessage raw) { batch.push_back(std::move(raw)); });
  OnWorkerMessages(std::move(batch));
  feed_.Poll(runtime_.Now(), [this](auto&&... a) { SendServing(std::forward<decltype(a)>(a)...); });
  ExpireParkedPulls();
  replication_.ExpireAwaitingView();
  metrics_.MaybePublish([&] { return Stats(); }, shm_.size(), [&] { return replication_.Stats(); });
  return absl::OkStatus();
}

absl::Status Server::Impl::FromScheduler(RawMessage raw) {
  if (options_.scheduler_lag <= absl::ZeroDuration()) return OnSchedulerMessage(std::move(raw));
  lagging_.push_back(Lagging{runtime_.Now() + options_.scheduler_lag, std::move(raw)});
  return absl::OkStatus();
}

absl::Status Server::Impl::HandleLaggingMessages() {
  while (!lagging_.empty() && lagging_.front().due <= runtime_.Now() && !membership_.shutdown()) {
    RawMessage raw = std::move(lagging_.front().raw);
    lagging_.pop_front();
    PS_RETURN_IF_ERROR(OnSchedulerMessage(std::move(raw)));
  }
  return absl::OkStatus();
}

absl::Status Server::Impl::OnSchedulerMessage(RawMessage raw) {
  auto env = DecodeEnvelope(Bytes(raw.header));
  if (!env.ok()) {
    LOG(ERROR) << "server: bad message from scheduler: " << env.status();
    return absl::OkStatus();
  }
  runtime_.Heard();
  const uint64_t id = env->request_id;
  return std::visit(
      Overloaded{
          [&](const RegisterReplyMsg& m) {
            OnRegistered(m);
            return absl::OkStatus();
          },
          [&](const ClusterViewMsg& m) {
            OnView(m);
            return absl::OkStatus();
          },
          [&](const CreateSlicesRequestMsg& m) {
            OnCreateSlices(id, m);
            return absl::OkStatus();
          },
          [&](const ShutdownMsg& m) { return OnShutdown(id, m); },
          [&](const AddCopyRequestMsg& m) {
            replication_.OnAddCopy(id, m);
            return absl::OkStatus();
          },
          [&](const ErrorMsg& m) {
            if (id == Membership::kDrainRequestId && membership_.draining()) return OnDrainRefused(m);
            return OnSchedulerError(m);
          },
          // Heartbeat acks, and what the scheduler never sends a server.
          OnlyFor<AckMsg, RegisterRequestMsg, DefineModelRequestMsg, DefineModelReplyMsg, BarrierRequestMsg,
                  WorkerDoneMsg, PushRequestMsg, PullRequestMsg, PullReplyMsg, StatsRequestMsg, StatsReplyMsg,
                  HeartbeatMsg, ShmOfferMsg, ShmGrantMsg, SliceCopyMsg, DrainRequestMsg, ServingRequestMsg,
                  ServingReplyMsg>([&](const auto&) { return absl::OkStatus(); }),
      },
      env->body);
}

void Server::Impl::OnCreateSlices(uint64_t request_id, const CreateSlicesRequestMsg& create) {
  absl::Status s = CheckSlicesFit(create.slices, security_.max_frame_bytes());
  const uint32_t held_before = store_.stats().slices_held;
  if (s.ok() && store_.has_model() && !create.copies.empty()) {
    // --replicas: the job keeps these copies here; a restored server drops
    // the others (made again from more advanced copies).
    s = store_.Retain(create.model, create.slices, create.num_workers);
    if (s.ok() && held_before > create.slices.size()) {
      LOG(WARNING) << "server " << rank() << ": dropped " << held_before - create.slices.size()
                   << " slice copies of the checkpoint: the job keeps them elsewhere and copies them back";
    }
  } else if (s.ok()) {  // heartbeats go on while a large model is initialised
    s = store_.Create(create.model, create.slices, create.num_workers, [&] { HeartbeatIfDue(); });
  }
  std::string held;
  for (size_t i = 0; i < create.copies.size() && i < create.slices.size(); ++i) {
    absl::StrAppend(&held, i == 0 ? "" : " ", create.slices[i].key, create.copies[i][0] == rank() ? "" : "'");
  }
  LOG(INFO) << "server " << rank() << ": create " << create.slices.size() << " slices"
            << (held.empty() ? "" : absl::StrCat(" (keys ", held, "; ' marks a backup copy)"))
            << (membership_.restored() ? " (held since the restore)" : "") << ": " << s;
  EmitEvent("slices_created", JsonLine()
                                  .Add("rank", rank())
                                  .Add("slices", create.slices.size())
                                  .Add("consistency", create.model.consistency.ToString())
                                  .Add("status", s.ToString()));
  if (s.ok()) ApplyLiveWorkers();
  if (s.ok()) replication_.SetCopies(create.slices, create.copies);
  ToScheduler(request_id, s.ok() ? Body(AckMsg{}) : Body(ErrorMsg{s.code(), std::string(s.message())}));
}

absl::Status Server::Impl::OnShutdown(uint64_t request_id, const ShutdownMsg& down) {
  if (down.left) {
    // Drained: the job keeps every slice on the other servers. A checkpoint
    // of this rank would only offer stale copies to an export or a restart.
    membership_.set_left();
    if (checkpointer_.enabled()) checkpointer_.Remove(membership_.CheckpointRank());
    LOG(WARNING) << "server " << rank() << ": drained: left the job, which keeps its slices on the other servers";
  } else if (store_.has_model() && checkpointer_.enabled()) {
    // The last checkpoint first: once acknowledged, the job may be gone.
    Checkpoint("orderly shutdown");
  }
  // The replicas following the job get the model as it ends.
  if (!down.left) feed_.Flush(runtime_.Now(), [this](auto&&... a) { SendServing(std::forward<decltype(a)>(a)...); });
  ToScheduler(request_id, AckMsg{});
  membership_.set_shutdown();
  if (down.reason.empty()) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat("scheduler ended the job: ", down.reason));
}

absl::Status Server::Impl::OnSchedulerError(const ErrorMsg& err) {
  if (err.code == absl::StatusCode::kUnauthenticated && membership_.registered()) {
    // A restarted scheduler does not know this connection yet.
    Reregister();
    return absl::OkStatus();
  }
  membership_.set_superseded(rank() >= 0);
  return absl::Status(err.code, absl::StrCat("scheduler refused this server: ", err.message));
}

void Server::Impl::Reregister() {
  if (runtime_.ReregisterDue()) {
    ToScheduler(1, RegisterRequestMsg{Role::kServer, endpoint_, rank(), security_.public_key(), membership_.node_id()});
  }
}

void Server::Impl::OnView(const ClusterViewMsg& msg) {
  absl::StatusOr<const ClusterViewMsg*> view = runtime_.TakeView(msg);
  if (!view.ok()) {  // a lost change: the answer to a registration brings the whole view
    LOG(WARNING) << "server " << rank() << ": " << view.status().message() << "; asking the scheduler for it whole";
    if (membership_.registered()) Reregister();
    return;
  }
  if (*view != nullptr) ApplyView(**view);  // else an older view
}

void Server::Impl::ApplyView(const ClusterViewMsg& view) {
  // A restarted server gets the view that announces it before the answer to
  // its registration: it must know the incarnation before it reads workers.
  AdoptIncarnation(view.incarnation);
  replication_.OnView(view);
  membership_.ClearWorkers(view.num_workers);
  std::vector<int> restarted;
  for (const NodeInfo& n : view.nodes) {
    if (n.role != Role::kWorker || n.rank < 0 || n.rank >= view.num_workers) continue;
    membership_.AddWorker(n.node_id, n.rank, n.public_key);
    // A worker that restarted is a new node: its pushes are numbered afresh.
    if (seqs_.SetNode(n.rank, n.node_id)) {
      LOG(INFO) << "server " << rank() << ": worker " << n.rank << " is node " << n.node_id
                << " now; its push numbers start again";
      EmitEvent("worker_restarted", JsonLine().Add("rank", rank()).Add("worker", n.rank).Add("node", n.node_id));
      restarted.push_back(n.rank);
    }
  }
  // A worker restarted before anyone declared it dead: it leaves and joins
  // again, so that it is counted from its next step like any joiner.
  bool changed = false;
  if (store_.has_model()) {
    for (int w : restarted) {
      if (w >= store_.num_workers()) continue;
      store_.SkipStepsAlreadyApplied(w);
      if (!store_.IsWorkerActive(w)) continue;
      changed |= store_.SetWorkerActive(w, false);
      changed |= store_.SetWorkerActive(w, true);
    }
  }
  if (changed) {
    replication_.ForwardCompletedSteps();
    AnswerReadyPulls();
    ApplyParkedPushes();
  }
  LOG(INFO) << "server " << rank() << ": cluster view " << view.epoch << ": " << view.num_servers << " servers, "
            << membership_.live_workers() << " of " << view.num_workers << " workers live"
            << (view.dead.empty() ? "" : absl::StrCat(", ", view.dead.size(), " nodes dead"));
  ApplyLiveWorkers();
  replication_.RetryAwaitingView();
  LetMovedSlicesGo();
}

void Server::Impl::ApplyLiveWorkers() {
  const std::vector<bool>& live = membership_.worker_live();
  if (!store_.has_model() || static_cast<int>(live.size()) != store_.num_workers()) return;
  bool changed = false;
  for (int w = 0; w < store_.num_workers(); ++w) {
    if (store_.IsWorkerActive(w) == live[w]) continue;
    LOG(WARNING) << "server " << rank() << ": worker " << w
                 << (live[w] ? " rejoined; counted from its next step" : " is dead; steps complete without it");
    changed |= store_.SetWorkerActive(w, live[w]);
    EmitEvent("worker_live", JsonLine().Add("rank", rank()).Add("worker", w).Add("live", static_cast<bool>(live[w])));
  }
  replication_.ForwardCompletedSteps();
  if (changed) {
    AnswerReadyPulls();
    ApplyParkedPushes();
  }
}

void Server::Impl::LetMovedSlicesGo() {
  // Not before the registration's reply: a restored server's view may come
  // first, and it keeps what its rank holds.
  if (!replication_.replicated() || !store_.has_model() || rank() < 0) return;
  // Waiting requests for slices led elsewhere now: their workers send them there.
  for (auto it = parked_.begin(); it != parked_.end();) {
    const absl::Status s = replication_.CheckServes(ReplicaProtocol::PullKeys(it->request));
    if (s.ok()) {
      ++it;
      continue;
    }
    ReplyError(it->routing_id, it->request_id, it->after_push ? MovedError(s.message(), MovedEpoch(s), true) : s,
               it->worker);
    it = parked_.erase(it);
  }
  for (auto it = parked_pushes_.begin(); it != parked_pushes_.end();) {
    const absl::Status s = replication_.CheckLeads(it->push);
    if (s.ok()) {
      ++it;
      continue;
    }
    ReplyError(it->raw.routing_id, it->request_id, s, it->worker);
    it = parked_pushes_.erase(it);
  }
  replication_.TakeOverSteps();
  replication_.DropMovedSlices();
}

void Server::Impl::ToScheduler(uint64_t request_id, Body body) {
  Envelope env{kProtocolVersion, request_id, membership_.node_id(), std::move(body)};
  env.incarnation = membership_.incarnation();
  scheduler_unsettled_ = true;
  if (absl::Status s = SendMessage(scheduler_, nullptr, env); !s.ok()) {
    LOG(ERROR) << "server: message to scheduler not sent: " << s;
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

absl::StatusOr<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  PS_RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>(options);
  PS_RETURN_IF_ERROR(impl->Bind());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

const std::string& Server::endpoint() const { return impl_->endpoint(); }
std::string Server::metrics_url() const { return impl_->metrics_url(); }
absl::Status Server::Run() { return impl_->Run(); }
void Server::RequestStop() { impl_->RequestStop(); }

}  // namespace ps
