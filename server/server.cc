#include "server/server.h"

#include <unistd.h>

#include <cstring>
#include <deque>
#include <limits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/codec.h"
#include "common/dispatch.h"
#include "common/messages.h"
#include "common/node_runtime.h"
#include "common/poll_set.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "common/transport.h"
#include "common/zap_handler.h"
#include "glog/logging.h"
#include "server/checkpointer.h"
#include "server/parked.h"
#include "server/push_sequencer.h"
#include "server/replicator.h"
#include "server/server_metrics.h"
#include "server/shm_peers.h"
#include "server/slice_store.h"
#include "server/table_disk.h"

namespace ps {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(100);
uint64_t MemoryBudget(const ServerOptions& options) {
  if (options.max_memory_bytes > 0) return options.max_memory_bytes;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page / 2 : 0;
}

// Where checkpoints go: checkpoint_dir, or restore_dir when only that is given.
std::string CheckpointDir(const ServerOptions& options) {
  return options.checkpoint_dir.empty() ? options.restore_dir : options.checkpoint_dir;
}

}  // namespace

class Server::Impl {
 public:
  explicit Impl(const ServerOptions& options)
      : options_(options),
        pool_(options.num_threads),
        store_(&pool_, options.allow_nonfinite, MemoryBudget(options)),
        runtime_({.scheduler = options.scheduler,
                  .register_timeout = options.register_timeout,
                  .heartbeat_interval = options.heartbeat_interval,
                  .heartbeat_timeout = options.heartbeat_timeout,
                  .scheduler_recovery_timeout = options.scheduler_recovery_timeout,
                  .goes_on = "Serving goes on",
                  .clock = options.clock}),
        seqs_(!CheckpointDir(options).empty()),
        checkpointer_({.dir = CheckpointDir(options),
                       .every_pushes = options.checkpoint_every_pushes,
                       .every = options.checkpoint_every,
                       // Heartbeats go on while a large state is written.
                       .between = [this] { HeartbeatIfDue(); }},
                      &store_, &seqs_, &metrics_, ClockOr(options.clock)),
        shm_(options.shm ? options.shm_ring_bytes : 0,
             [this](const std::string& id, const Envelope& env, std::vector<zmq::message_t> payloads) {
               const zmq::message_t routing_id(id.data(), id.size());
               router_unsettled_ = true;
               return SendMessage(router_, &routing_id, env, std::move(payloads));
             }) {
    runtime_.set_name("server");
  }

  absl::Status Bind() {
    PS_ASSIGN_OR_RETURN(std::string bind, NormalizeEndpoint(options_.bind));
    PS_ASSIGN_OR_RETURN(security_, NodeSecurity::Load(options_.security, Role::kServer));
    PS_ASSIGN_OR_RETURN(zap_, StartZapHandler(context_, security_, "server"));
    PS_ASSIGN_OR_RETURN(router_,
                        BindRouter(context_, bind, options_.advertise_host, &endpoint_, security_, Traffic::kData));
    PS_RETURN_IF_ERROR(metrics_.Start(options_.metrics));
    PS_RETURN_IF_ERROR(OpenTableDisk());
    return shm_.Start();
  }

  const std::string& endpoint() const { return endpoint_; }
  std::string metrics_url() const { return metrics_.url(); }
  void RequestStop() { stop_.store(true); }
  absl::Status Run();

 private:
  absl::Status OpenTableDisk() {
    if (options_.table_disk_dir.empty()) return absl::OkStatus();
    const std::string owner =
        absl::StrCat("the job of scheduler ", options_.scheduler, " checkpointing to '", CheckpointDir(options_), "'");
    PS_ASSIGN_OR_RETURN(disk_, TableDisk::Open({.dir = options_.table_disk_dir,
                                                .max_bytes = options_.table_disk_max_bytes,
                                                .memory_bytes = options_.table_disk_memory_bytes,
                                                .direct_reads = options_.table_disk_direct_io},
                                               owner, !options_.restore_dir.empty()));
    store_.SetTableDisk(disk_.get());
    return absl::OkStatus();
  }
  absl::Status Serve();
  absl::Status Restore();
  void OnView(const ClusterViewMsg& view);
  // Brings the store's active workers in line with the live ones.
  void ApplyLiveWorkers();
  // A checkpoint of this server (checkpointer_), now.
  void Checkpoint(const char* why) { checkpointer_.Write(why, CheckpointRank(), CheckpointIncarnation()); }
  int CheckpointRank() const { return rank_ >= 0 ? rank_ : restored_rank_; }
  uint64_t CheckpointIncarnation() const { return incarnation_ != 0 ? incarnation_ : restored_incarnation_; }
  // What the node runtime says: no view by the registration deadline, or
  // the scheduler presumed dead; the status names this server.
  absl::Status CheckScheduler();
  void OnRegistered(const RegisterReplyMsg& reply);
  // Takes the job's incarnation from the first registration reply or view
  // that names it; a restored server whose checkpoint is of another one
  // starts a new incarnation.
  void AdoptIncarnation(uint64_t incarnation);
  // This job's workers as new nodes: the checkpoint came from another
  // incarnation of the job.
  void StartNewIncarnation();
  absl::Status Connect();
  absl::Status PollOnce();
  absl::Status OnSchedulerMessage(RawMessage raw);
  void OnCreateSlices(uint64_t request_id, const CreateSlicesRequestMsg& create);
  absl::Status OnShutdown(uint64_t request_id, const ShutdownMsg& down);
  // A refusal, or kUnauthenticated from a restarted scheduler (re-register).
  absl::Status OnSchedulerError(const ErrorMsg& err);
  void OnWorkerMessage(RawMessage raw);
  absl::Status HandleWorkerRequest(const Envelope& env, RawMessage& raw);
  // A push from `worker`: applied now, or parked until its step is reached.
  absl::Status OnPush(uint64_t request_id, int worker, const PushRequestMsg& push, RawMessage& raw);
  StatsReplyMsg Stats() const;
  // The rank of the worker that sent `env`: kPermissionDenied for a sender
  // that is not a live worker of this job or uses another's key,
  // kFailedPrecondition for a node of another job incarnation.
  absl::StatusOr<int> WorkerOf(const Envelope& env, const RawMessage& raw);
  absl::Status HandlePush(int worker, const PushRequestMsg& push, RawMessage& raw);
  // Answers `pull` now if it may be, else parks it until it may or its
  // deadline passes. Requires store_.CheckPull(pull) to be OK.
  void StartPull(zmq::message_t& routing_id, int worker, uint64_t request_id, const PullRequestMsg& pull);
  void AnswerPull(const zmq::message_t& routing_id, int worker, uint64_t request_id, const PullRequestMsg& pull);
  void AnswerReadyPulls();
  // Dedupes by seq, applies, and answers (an Ack, or the pull riding on it).
  absl::Status ApplyPush(RawMessage& raw, int worker, uint64_t request_id, const PushRequestMsg& push,
                         PushSequencer* seqs = nullptr);  // null: seqs_
  void ApplyParkedPushes();
  void ExpireParkedPulls();
  // `worker` >= 0: the reply tells that worker its durable seq.
  // `views`: the payloads point at live values (ShmPeers::Has).
  void Reply(const zmq::message_t& routing_id, uint64_t request_id, Body body,
             std::vector<zmq::message_t> payloads = {}, int worker = -1, bool views = false);
  void ReplyError(const zmq::message_t& routing_id, uint64_t request_id, const absl::Status& s, int worker = -1);
  void ToScheduler(uint64_t request_id, Body body);
  // A heartbeat to the scheduler when one is due (also from inside long
  // work: a large model's creation, a large checkpoint's write).
  void HeartbeatIfDue() {
    if (runtime_.HeartbeatDue()) ToScheduler(0, HeartbeatMsg{});
  }

  const ServerOptions options_;
  zmq::context_t context_;
  NodeSecurity security_;
  // --replicas (WIP): forwarding to backups, and the replies waiting for them.
  Replicator replicator_{context_, security_};
  struct AwaitingBackups {
    zmq::message_t routing_id;
    int worker;
    uint64_t request_id;
    std::optional<PullRequestMsg> then_pull;
  };
  absl::flat_hash_map<uint64_t, AwaitingBackups> awaiting_backups_;
  uint64_t next_forward_ = 1;
  absl::flat_hash_map<uint32_t, int32_t> server_nodes_;      // the view's servers (node -> rank): who may forward
  absl::flat_hash_map<int32_t, PushSequencer> backup_seqs_;  // forwarded pushes' numbers, by primary
  void OnReplicated(uint64_t token);
  absl::StatusOr<int32_t> ServerPeerRank(const Envelope& env) const {
    if (auto it = server_nodes_.find(env.sender); it != server_nodes_.end()) return it->second;
    return absl::PermissionDeniedError(absl::StrCat("node ", env.sender, " is not a server of this job: no forward"));
  }
  std::unique_ptr<ZapHandler> zap_;  // declared before the sockets: outlives them
  zmq::socket_t router_;
  zmq::socket_t scheduler_;
  std::string endpoint_;
  std::unique_ptr<TableDisk> disk_;  // the tables' disk tier, when options_.table_disk_dir
  ThreadPool pool_;
  SliceStore store_;
  std::atomic<bool> stop_{false};

  uint32_t node_id_ = 0;
  int rank_ = -1;
  bool shutdown_ = false;
  absl::flat_hash_map<uint32_t, int> worker_rank_;         // node id -> worker rank (live workers)
  absl::flat_hash_map<uint32_t, std::string> worker_key_;  // node id -> the key it registered with
  std::deque<ParkedPull> parked_;
  std::deque<ParkedPush> parked_pushes_;
  StatsReplyMsg counters_;  // pulls, errors, bytes; the store keeps the rest
  ServerMetrics metrics_;

  // Registration, heartbeats, views, the scheduler's failure and return.
  NodeRuntime runtime_;
  PollSet poll_;
  // Sockets used since their last drain to empty (PollSet::AddSocketFd).
  bool router_unsettled_ = true, scheduler_unsettled_ = true;
  uint64_t incarnation_ = 0;           // the job's, from the registration reply
  uint64_t restored_incarnation_ = 0;  // the checkpoint's (0: none, or format 1)
  std::vector<bool> worker_live_;      // by rank, from the latest view

  // Push sequence numbers and checkpoints (after the store, the metrics and
  // the sequencer, which the checkpointer borrows).
  PushSequencer seqs_;
  Checkpointer checkpointer_;
  int restored_rank_ = -1;   // >= 0: started from a checkpoint of this rank
  bool superseded_ = false;  // the scheduler refused this registered server
  ShmPeers shm_;             // workers on this host
};

absl::Status Server::Impl::Run() {
  if (!options_.restore_dir.empty()) PS_RETURN_IF_ERROR(Restore());
  absl::Status status = Serve();
  // Whatever ended the run, what this server holds goes to disk; unless
  // the scheduler refused it (declared dead, replaced): its rank's
  // checkpoint belongs to the replacement now.
  if (superseded_) {
    LOG(WARNING) << "server " << rank_ << ": no final checkpoint: the scheduler gave this rank to another server";
  } else if (store_.has_model() && checkpointer_.enabled() && (!status.ok() || checkpointer_.has_unsaved())) {
    // (An orderly shutdown wrote one already when the scheduler asked.)
    Checkpoint(status.ok() ? "orderly shutdown" : "final, before stopping");
  }
  return status;
}

absl::Status Server::Impl::Serve() {
  PS_RETURN_IF_ERROR(Connect());
  while (!shutdown_) {
    if (stop_.load()) return absl::CancelledError("server stopped by request");
    PS_RETURN_IF_ERROR(CheckScheduler());
    PS_RETURN_IF_ERROR(PollOnce());
    checkpointer_.MaybeWrite(CheckpointRank(), CheckpointIncarnation());
  }
  LOG(INFO) << "server " << rank_ << ": orderly shutdown";
  return absl::OkStatus();
}

absl::Status Server::Impl::CheckScheduler() {
  const absl::Status s =
      runtime_.Check(rank_ < 0 ? " (it never answered the registration)" : " (the cluster did not form)");
  if (s.ok()) return s;
  const absl::Status named(s.code(),
                           absl::StrCat(rank_ < 0 ? "server" : absl::StrCat("server ", rank_), ": ", s.message()));
  return rank_ < 0 && absl::IsDeadlineExceeded(s) ? AddKeyHint(named, security_) : named;
}

void Server::Impl::OnRegistered(const RegisterReplyMsg& reply) {
  if (node_id_ != 0) {  // re-registered with a restarted scheduler
    runtime_.Reregistered(absl::StrCat("re-registered as node ", reply.node_id));
    return;
  }
  node_id_ = reply.node_id;
  rank_ = reply.rank;
  runtime_.set_name(absl::StrCat("server ", rank_));
  metrics_.SetRank(rank_);
  AdoptIncarnation(reply.incarnation);
  LOG(INFO) << "server registered as rank " << rank_ << " (node " << node_id_ << ") of job incarnation "
            << IncarnationName(incarnation_);
}

void Server::Impl::AdoptIncarnation(uint64_t incarnation) {
  if (incarnation_ != 0 || incarnation == 0) return;
  incarnation_ = incarnation;
  if (restored_rank_ >= 0 && restored_incarnation_ != incarnation_) StartNewIncarnation();
}

void Server::Impl::StartNewIncarnation() {
  LOG(WARNING) << "server " << restored_rank_ << ": job incarnation " << IncarnationName(incarnation_)
               << "; the checkpoint was written by incarnation " << IncarnationName(restored_incarnation_)
               << ": every worker is new (push numbers start again; pushes for steps the checkpoint holds are "
                  "skipped)";
  seqs_.Forget();
  for (int w = 0; w < store_.num_workers(); ++w) store_.SkipStepsAlreadyApplied(w);
}

absl::Status Server::Impl::Restore() {
  int rank = options_.rank;
  if (rank < 0) {
    PS_ASSIGN_OR_RETURN(rank, OnlyCheckpointRank(options_.restore_dir));
  }
  PS_ASSIGN_OR_RETURN(const CheckpointInfo info, checkpointer_.Restore(options_.restore_dir, rank, &store_));
  restored_rank_ = rank;
  restored_incarnation_ = info.incarnation;
  return absl::OkStatus();
}

absl::Status Server::Impl::Connect() {
  PS_ASSIGN_OR_RETURN(std::string sched, NormalizeEndpoint(options_.scheduler));
  PS_ASSIGN_OR_RETURN(scheduler_,
                      ConnectDealer(context_, sched, security_, Traffic::kControl, security_.scheduler_public_key()));
  const int rank = restored_rank_ >= 0 ? restored_rank_ : options_.rank;
  ToScheduler(1, RegisterRequestMsg{Role::kServer, endpoint_, rank, security_.public_key(), 0, restored_rank_ >= 0});
  LOG(INFO) << "server at " << endpoint_ << " registering with " << sched
            << (restored_rank_ >= 0 ? absl::StrCat(" to take rank ", restored_rank_, " back") : "");
  runtime_.Registering();
  return absl::OkStatus();
}

absl::Status Server::Impl::PollOnce() {
  HeartbeatIfDue();
  absl::Duration wait = runtime_.PollTimeout(kPollInterval);
  for (const ParkedPull& p : parked_) wait = std::min(wait, p.deadline - runtime_.Now());
  wait = std::max(wait, absl::ZeroDuration());
  // Workers' messages wait in the socket until the first cluster view says
  // who they are (a restarted server can be reached before its view arrives).
  enum Tag { kWorkers, kScheduler, kShm, kBackups = 1 << 16 };
  poll_.Clear();
  if (runtime_.have_view()) {
    poll_.AddSocketFd(router_, kWorkers, router_unsettled_);
    shm_.AddToPoll(poll_, kShm);
    if (shm_.size() > 0 && SpinUntil(options_.shm_spin, [&] { return shm_.AnyIncoming(); })) {
      wait = absl::ZeroDuration();
    }
  }
  poll_.AddSocketFd(scheduler_, kScheduler, scheduler_unsettled_);
  replicator_.AddToPoll(poll_, kBackups);
  poll_.Wait(wait);
  std::vector<absl::Status> backup_errors;
  for (uint64_t token : replicator_.OnReady(poll_, kBackups, &backup_errors)) OnReplicated(token);
  for (const absl::Status& e : backup_errors) LOG(ERROR) << "server " << rank_ << ": " << e;
  if (poll_.IsReady(kScheduler)) {
    PS_RETURN_IF_ERROR(DrainMessages(
        scheduler_, /*routed=*/false, std::numeric_limits<int>::max(),
        [&](RawMessage raw) { return OnSchedulerMessage(std::move(raw)); }, &scheduler_unsettled_));
  }
  if (poll_.IsReady(kWorkers)) {
    // Bounded batch so the scheduler socket and deadlines are not starved.
    (void)DrainMessages(
        router_, /*routed=*/true, 64,
        [&](RawMessage raw) {
          OnWorkerMessage(std::move(raw));
          return absl::OkStatus();
        },
        &router_unsettled_);
  }
  if (runtime_.have_view()) shm_.OnReady(poll_, kShm, [&](RawMessage raw) { OnWorkerMessage(std::move(raw)); });
  ExpireParkedPulls();
  metrics_.MaybePublish([&] { return Stats(); }, shm_.size());
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
          [&](const ShutdownMsg& m) {
    return OnShutdown(id, m); },
          [&](const ErrorMsg& m) {
    return OnSchedulerError(m); },
          // Heartbeat acks, and what the scheduler never sends a server.
          [&]<typename M>(const M&)
            requires OneOf<M, AckMsg, RegisterRequestMsg, DefineModelRequestMsg, DefineModelReplyMsg,
                           BarrierRequestMsg, WorkerDoneMsg, PushRequestMsg, PullRequestMsg, PullReplyMsg,
                           StatsRequestMsg, StatsReplyMsg, HeartbeatMsg, ShmOfferMsg, ShmGrantMsg>
          { return absl::OkStatus();
}
,
}  // namespace ps
,
      env->body);
}

void Server::Impl::OnCreateSlices(uint64_t request_id, const CreateSlicesRequestMsg& create) {
  absl::Status s = CheckSlicesFit(create.slices, security_.max_frame_bytes());
  if (s.ok()) {  // heartbeats go on while a large model is initialised
    s = store_.Create(create.model, create.slices, create.num_workers, [&] { HeartbeatIfDue(); });
  }
  LOG(INFO) << "server " << rank_ << ": create " << create.slices.size() << " slices"
            << (restored_rank_ >= 0 ? " (held since the restore)" : "") << ": " << s;
  if (s.ok()) ApplyLiveWorkers();
  if (s.ok()) replicator_.SetCopies(create.slices, create.copies);
  ToScheduler(request_id, s.ok() ? Body(AckMsg{}) : Body(ErrorMsg{s.code(), std::string(s.message())}));
}

absl::Status Server::Impl::OnShutdown(uint64_t request_id, const ShutdownMsg& down) {
  // The last checkpoint first: once acknowledged, the job may be gone.
  if (store_.has_model() && checkpointer_.enabled()) Checkpoint("orderly shutdown");
  ToScheduler(request_id, AckMsg{});
  shutdown_ = true;
  if (down.reason.empty()) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat("scheduler ended the job: ", down.reason));
}

absl::Status Server::Impl::OnSchedulerError(const ErrorMsg& err) {
  if (err.code == absl::StatusCode::kUnauthenticated && node_id_ != 0) {
    // A restarted scheduler does not know this connection yet.
    if (runtime_.ReregisterDue()) {
      ToScheduler(1, RegisterRequestMsg{Role::kServer, endpoint_, rank_, security_.public_key(), node_id_});
    }
    return absl::OkStatus();
  }
  superseded_ = rank_ >= 0;
  return absl::Status(err.code, absl::StrCat("scheduler refused this server: ", err.message));
}

void Server::Impl::OnView(const ClusterViewMsg& view) {
  if (!runtime_.NewerView(view.epoch)) return;  // an older view
  // A restarted server gets the view that announces it before the answer to
  // its registration: it must know the incarnation before it reads workers.
  AdoptIncarnation(view.incarnation);
  replicator_.SetPeers(view);
  server_nodes_.clear();
  for (const NodeInfo& n : view.nodes) {
    if (n.role == Role::kServer) server_nodes_[n.node_id] = n.rank;
  }
  worker_rank_.clear();
  worker_live_.assign(std::max(view.num_workers, 0), false);
  std::vector<int> restarted;
  for (const NodeInfo& n : view.nodes) {
    if (n.role != Role::kWorker || n.rank < 0 || n.rank >= view.num_workers) continue;
    worker_rank_[n.node_id] = n.rank;
    worker_key_[n.node_id] = n.public_key;
    worker_live_[n.rank] = true;
    // A worker that restarted is a new node: its pushes are numbered afresh.
    if (seqs_.SetNode(n.rank, n.node_id)) {
      LOG(INFO) << "server " << rank_ << ": worker " << n.rank << " is node " << n.node_id
                << " now; its push numbers start again";
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
    AnswerReadyPulls();
    ApplyParkedPushes();
  }
  LOG(INFO) << "server " << rank_ << ": cluster view " << view.epoch << ": " << view.num_servers << " servers, "
            << worker_rank_.size() << " of " << view.num_workers << " workers live"
            << (view.dead.empty() ? "" : absl::StrCat(", ", view.dead.size(), " nodes dead"));
  ApplyLiveWorkers();
}

void Server::Impl::ApplyLiveWorkers() {
  if (!store_.has_model() || static_cast<int>(worker_live_.size()) != store_.num_workers()) return;
  bool changed = false;
  for (int w = 0; w < store_.num_workers(); ++w) {
    if (store_.IsWorkerActive(w) == worker_live_[w]) continue;
    LOG(WARNING) << "server " << rank_ << ": worker " << w
                 << (worker_live_[w] ? " rejoined; counted from its next step" : " is dead; steps complete without it");
    changed |= store_.SetWorkerActive(w, worker_live_[w]);
  }
  if (changed) {
    AnswerReadyPulls();
    ApplyParkedPushes();
  }
}

void Server::Impl::OnWorkerMessage(RawMessage raw) {
  const int64_t t0 = metrics_.Now();
  counters_.bytes_in += raw.header.size();
  for (const auto& p : raw.payloads) counters_.bytes_in += p.size();
  auto env = DecodeEnvelope(Bytes(raw.header));
  if (!env.ok()) {
    ReplyError(raw.routing_id, 0, env.status());
    return;
  }
  absl::Status s;
  if (env->version != kProtocolVersion) {
    s = absl::FailedPreconditionError(
        absl::StrCat("protocol version ", env->version, "; this server speaks ", kProtocolVersion));
  } else {
    s = HandleWorkerRequest(*env, raw);
  }
  if (!s.ok()) ReplyError(raw.routing_id, env->request_id, s);
  metrics_.ObserveRequest(env->body, t0);
}

StatsReplyMsg Server::Impl::Stats() const {
  StatsReplyMsg stats = store_.stats();
  stats.pulls_served = counters_.pulls_served;
  stats.errors_replied = counters_.errors_replied;
  stats.bytes_in = counters_.bytes_in;
  stats.bytes_out = counters_.bytes_out;
  stats.waited_pull_micros = counters_.waited_pull_micros;
  stats.duplicates_dropped = seqs_.duplicates();
  stats.tables = store_.TableStats();
  if (store_.has_model()) {
    for (int w = 0; w < store_.num_workers(); ++w) stats.worker_clocks.push_back(store_.WorkerClock(w));
    stats.max_version = store_.MaxVersion();
  }
  return stats;
}

absl::StatusOr<int> Server::Impl::WorkerOf(const Envelope& env, const RawMessage& raw) {
  auto it = worker_rank_.find(env.sender);
  if (it == worker_rank_.end()) {
    return absl::PermissionDeniedError(
        absl::StrCat("sender node ", env.sender, " is not a registered worker of this job"));
  }
  PS_RETURN_IF_ERROR(CheckSenderKey(env.sender, worker_key_[env.sender], raw.user_id));
  // Node ids are numbered per incarnation: a node of another one (a worker
  // of the job before a whole-job restart) is not the worker of that id now.
  // (0: a hand-made peer that states none; its sender id was checked above.)
  if (env.incarnation != 0 && env.incarnation != incarnation_) {
    return absl::FailedPreconditionError(
        absl::StrCat("request from node ", env.sender, " of job incarnation ", IncarnationName(env.incarnation),
                     "; this server serves incarnation ", IncarnationName(incarnation_)));
  }
  return it->second;
}

absl::Status Server::Impl::HandleWorkerRequest(const Envelope& env, RawMessage& raw) {
  return std::visit(
      Overloaded{
          [&](const StatsRequestMsg&) {
    Reply(raw.routing_id, env.request_id, Stats());
    return absl::OkStatus();
          },
          [&](const PushRequestMsg& push) -> absl::Status {
    if (push.for_worker >= 0) {  // a primary's forward (--replicas): applied as that worker's
      PS_ASSIGN_OR_RETURN(const int32_t primary, ServerPeerRank(env));
      // Numbered per (worker, primary): the worker numbers its pushes to each server apart.
      auto [it, made] = backup_seqs_.try_emplace(primary, /*keeps_checkpoints=*/false);
      return ApplyPush(raw, push.for_worker, env.request_id, push, &it->second);
    }
    PS_ASSIGN_OR_RETURN(const int worker, WorkerOf(env, raw));
    return OnPush(env.request_id, worker, push, raw);
          },
          [&](const ShmOfferMsg&) -> absl::Status {
    PS_ASSIGN_OR_RETURN(const int worker, WorkerOf(env, raw));
    PS_ASSIGN_OR_RETURN(ShmGrantMsg grant, shm_.Offer(raw));
    Reply(raw.routing_id, env.request_id, std::move(grant), {}, worker);
    return absl::OkStatus();
          },
          [&](const PullRequestMsg& pull) -> absl::Status {
    PS_ASSIGN_OR_RETURN(const int worker, WorkerOf(env, raw));
    PS_RETURN_IF_ERROR(store_.CheckPull(pull));
    StartPull(raw.routing_id, worker, env.request_id, pull);
    return absl::OkStatus();
          },
          [&]<typename M>(const M&) -> absl::Status
            requires OneOf<M, ErrorMsg, AckMsg, RegisterRequestMsg, RegisterReplyMsg, ClusterViewMsg,
                           DefineModelRequestMsg, DefineModelReplyMsg, CreateSlicesRequestMsg, BarrierRequestMsg,
                           WorkerDoneMsg, ShutdownMsg, PullReplyMsg, StatsReplyMsg, HeartbeatMsg, ShmGrantMsg>
          {
            PS_RETURN_IF_ERROR(WorkerOf(env, raw).status());
            return absl::InvalidArgumentError(absl::StrCat("a server does not take ", BodyName(env.body)));
}
,
},
      env.body);
}

absl::Status Server::Impl::OnPush(uint64_t request_id, int worker, const PushRequestMsg& push, RawMessage& raw) {
  // A bad pull part refuses the whole request before anything is applied.
  if (push.then_pull.has_value()) PS_RETURN_IF_ERROR(store_.CheckPull(*push.then_pull));
  if (push.want_checkpoint) checkpointer_.Want();
  // After a restart, workers re-send numbered sync pushes of several steps
  // back to back: one for a step its slices have not reached waits (as do
  // this worker's later pushes, to keep their order) until the other
  // workers' re-sent pushes complete the step before.
  const bool behind_own = std::any_of(parked_pushes_.begin(), parked_pushes_.end(),
                                      [&](const ParkedPush& p) { return p.worker == worker; });
  if (push.seq != 0 && (behind_own || store_.PushAhead(push))) {
    if (parked_pushes_.size() >= kMaxParkedPulls) {
      return absl::ResourceExhaustedError(
          absl::StrCat("server has ", parked_pushes_.size(), " pushes waiting for their step already; refusing more"));
    }
    const absl::Time now = runtime_.Now();
    parked_pushes_.push_back(
        ParkedPush{std::move(raw), worker, request_id, push, now, now + options_.default_pull_timeout});
    return absl::OkStatus();
  }
  PS_RETURN_IF_ERROR(ApplyPush(raw, worker, request_id, push));
  ApplyParkedPushes();
  return absl::OkStatus();
}

absl::Status Server::Impl::ApplyPush(RawMessage& raw, int worker, uint64_t request_id, const PushRequestMsg& push,
                                     PushSequencer* seqs) {
  if (seqs == nullptr) seqs = &seqs_;
  if (!seqs->Admit(worker, push.seq)) {
    // Re-sent after a restart, and already in the state: answered, not applied again.
    LOG_EVERY_N(INFO, 1000) << "server " << rank_ << ": push " << push.seq << " of worker " << worker
                            << " was applied before it was re-sent; dropped (" << seqs_.duplicates() << " such so far)";
  } else {
    const uint64_t skipped = store_.stats().slices_skipped;
    PS_RETURN_IF_ERROR(HandlePush(worker, push, raw));
    if (store_.stats().slices_skipped > skipped) {
      LOG_EVERY_N(INFO, 100) << "server " << rank_ << ": worker " << worker << "'s push for step " << push.clock
                             << " skipped " << store_.stats().slices_skipped - skipped
                             << " slices that hold that step from its previous node (" << store_.stats().slices_skipped
                             << " such so far)";
    }
    checkpointer_.CountPush();
    AnswerReadyPulls();
    // --replicas: every backup applies it before the worker hears of it.
    if (push.for_worker < 0) {
      if (const std::vector<int32_t> backups = replicator_.BackupsOf(push, rank_); !backups.empty()) {
        const uint64_t token = next_forward_++;
        PS_RETURN_IF_ERROR(replicator_.Forward(token, node_id_, worker, push, raw.payloads, backups));
        awaiting_backups_.emplace(token,
                                  AwaitingBackups{std::move(raw.routing_id), worker, request_id, push.then_pull});
        return absl::OkStatus();
      }
    }
  }
  if (push.then_pull.has_value()) {
    StartPull(raw.routing_id, worker, request_id, *push.then_pull);
  } else {
    Reply(raw.routing_id, request_id, AckMsg{}, {}, worker);
  }
  return absl::OkStatus();
}

void Server::Impl::OnReplicated(uint64_t token) {
  auto it = awaiting_backups_.find(token);
  if (it == awaiting_backups_.end()) return;
  AwaitingBackups a = std::move(it->second);
  awaiting_backups_.erase(it);
  if (a.then_pull.has_value()) {
    StartPull(a.routing_id, a.worker, a.request_id, *a.then_pull);
  } else {
    Reply(a.routing_id, a.request_id, AckMsg{}, {}, a.worker);
  }
}

void Server::Impl::ApplyParkedPushes() {
  for (bool progress = true; progress && !parked_pushes_.empty();) {
    progress = false;
    std::vector<int> blocked;  // workers whose oldest parked push must wait
    for (auto it = parked_pushes_.begin(); it != parked_pushes_.end();) {
      const bool ready =
          std::find(blocked.begin(), blocked.end(), it->worker) == blocked.end() && !store_.PushAhead(it->push);
      if (!ready) {
        blocked.push_back(it->worker);
        ++it;
        continue;
      }
      ParkedPush p = std::move(*it);
      it = parked_pushes_.erase(it);
      if (absl::Status s = ApplyPush(p.raw, p.worker, p.request_id, p.push); !s.ok()) {
        ReplyError(p.raw.routing_id, p.request_id, s, p.worker);
      }
      progress = true;
      break;  // the deque changed; start over
    }
  }
}

void Server::Impl::StartPull(zmq::message_t& routing_id, int worker, uint64_t request_id, const PullRequestMsg& pull) {
  if (store_.PullReady(pull)) {
    AnswerPull(routing_id, worker, request_id, pull);
    return;
  }
  if (parked_.size() >= kMaxParkedPulls) {
    ReplyError(routing_id, request_id,
               absl::ResourceExhaustedError(
                   absl::StrCat("server has ", parked_.size(), " pulls waiting already; refusing more")));
    return;
  }
  const absl::Duration timeout = pull.timeout_ms > 0 ? absl::Milliseconds(std::min<uint64_t>(pull.timeout_ms, 86400000))
                                                     : options_.default_pull_timeout;
  const absl::Time now = runtime_.Now();
  parked_.push_back(ParkedPull{std::move(routing_id), worker, request_id, pull, now, now + timeout});
}

absl::Status Server::Impl::HandlePush(int worker, const PushRequestMsg& push, RawMessage& raw) {
  std::vector<absl::Span<const float>> grads;
  std::vector<std::vector<float>> realigned;  // only for frames ZeroMQ left unaligned
  grads.reserve(raw.payloads.size());
  for (size_t i = 0; i < raw.payloads.size(); ++i) {
    const zmq::message_t& frame = raw.payloads[i];
    if (frame.size() % sizeof(float) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("payload frame ", i, " has ", frame.size(), " bytes, not a whole number of floats"));
    }
    const size_t n = frame.size() / sizeof(float);
    // (8: a table shard's frame starts with uint64 ids.)
    if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(uint64_t) != 0) {
      realigned.emplace_back(n);
      std::memcpy(realigned.back().data(), frame.data(), frame.size());
      grads.emplace_back(realigned.back());
    } else {
      grads.emplace_back(static_cast<const float*>(frame.data()), n);
    }
  }
  return store_.Push(worker, push, grads);
}

void Server::Impl::AnswerPull(const zmq::message_t& routing_id, int worker, uint64_t request_id,
                              const PullRequestMsg& pull) {
  PullReplyMsg reply;
  std::vector<zmq::message_t> payloads;
  reply.slices.reserve(pull.keys.size() + pull.rows.size());
  payloads.reserve(pull.keys.size() + pull.rows.size());
  // Over shared memory the values go straight into the ring (the channel
  // copies them as it sends); a socket needs a copy: the slice keeps
  // changing while ZeroMQ sends in the background.
  const bool views = shm_.Has(routing_id);
  for (uint32_t key : pull.keys) {
    absl::Span<const float> values = store_.Values(key);
    auto* data = const_cast<float*>(values.data());
    payloads.push_back(views ? zmq::message_t(data, values.size() * sizeof(float), nullptr, nullptr)
                             : zmq::message_t(data, values.size() * sizeof(float)));
    reply.slices.push_back(SliceData{key, values.size(), store_.Version(key)});
    counters_.bytes_out += values.size() * sizeof(float);
  }
  const size_t first_rows = payloads.size();
  for (const RowsRequest& rows : pull.rows) {
    const uint64_t floats = rows.ids.size() * static_cast<uint64_t>(store_.Table(rows.key)->dim());
    payloads.emplace_back(floats * sizeof(float));
    reply.slices.push_back(
        SliceData{rows.key, floats, store_.Version(rows.key), static_cast<uint32_t>(rows.ids.size())});
    counters_.bytes_out += floats * sizeof(float);
  }
  // Straight into the frames ZeroMQ sends; the shards (distinct: CheckPull)
  // on the pool's threads at once, so that one shard's disk reads overlap
  // another's (TableShard allows one thread per shard).
  auto read = [&](size_t i) {
    zmq::message_t& frame = payloads[first_rows + i];
    store_.Table(pull.rows[i].key)
        ->Read(pull.rows[i].ids, absl::MakeSpan(static_cast<float*>(frame.data()), frame.size() / sizeof(float)));
  };
  if (pull.rows.size() == 1) {
    read(0);
  } else if (pull.rows.size() > 1) {
    pool_.ParallelFor(pull.rows.size(), read);
  }
  ++counters_.pulls_served;
  Reply(routing_id, request_id, std::move(reply), std::move(payloads), worker, views);
}

void Server::Impl::AnswerReadyPulls() {
  const absl::Time now = runtime_.Now();
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (!store_.PullReady(it->request)) {
      ++it;
      continue;
    }
    counters_.waited_pull_micros += absl::ToInt64Microseconds(now - it->since);
    AnswerPull(it->routing_id, it->worker, it->request_id, it->request);
    it = parked_.erase(it);
  }
}

void Server::Impl::ExpireParkedPulls() {
  const absl::Time now = runtime_.Now();
  for (auto it = parked_pushes_.begin(); it != parked_pushes_.end();) {
    if (now < it->deadline) {
      ++it;
      continue;
    }
    ReplyError(it->raw.routing_id, it->request_id,
               absl::DeadlineExceededError(absl::StrCat("push ", it->push.seq, " for step ", it->push.clock, " waited ",
                                                        absl::FormatDuration(now - it->since),
                                                        " for its slices to reach that step")),
               it->worker);
    it = parked_pushes_.erase(it);
  }
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (now < it->deadline) {
      ++it;
      continue;
    }
    ReplyError(it->routing_id, it->request_id,
               absl::DeadlineExceededError(absl::StrCat("pull at clock ", it->request.clock, " waited ",
                                                        absl::FormatDuration(now - it->since), ": ",
                                                        store_.DescribeWait(it->request))),
               it->worker);
    it = parked_.erase(it);
  }
}

void Server::Impl::Reply(const zmq::message_t& routing_id, uint64_t request_id, Body body,
                         std::vector<zmq::message_t> payloads, int worker, bool views) {
  Envelope env{kProtocolVersion, request_id, node_id_, std::move(body), worker >= 0 ? seqs_.DurableSeq(worker) : 0};
  env.incarnation = incarnation_;
  if (shm_.Send(routing_id, env, payloads, views)) return;
  if (views) OwnPayloads(payloads);
  router_unsettled_ = true;
  if (absl::Status s = SendMessage(router_, &routing_id, env, std::move(payloads)); !s.ok()) {
    LOG(WARNING) << "server " << rank_ << ": reply " << request_id << " not sent: " << s;
  }
}

void Server::Impl::ReplyError(const zmq::message_t& routing_id, uint64_t request_id, const absl::Status& s,
                              int worker) {
  ++counters_.errors_replied;
  LOG(WARNING) << "server " << rank_ << ": request " << request_id << " refused: " << s;
  Reply(routing_id, request_id, ErrorMsg{s.code(), std::string(s.message())}, {}, worker);
}

void Server::Impl::ToScheduler(uint64_t request_id, Body body) {
  Envelope env{kProtocolVersion, request_id, node_id_, std::move(body)};
  env.incarnation = incarnation_;
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
