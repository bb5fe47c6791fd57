#ifndef PS_SERVER_SERVER_IMPL_H_
#define PS_SERVER_SERVER_IMPL_H_

// The server's inside, shared by server.cc (its life: registration, the
// scheduler's messages, views, checkpoints) and server_requests.cc (the
// workers' requests: pushes, pulls, replies) and by nothing else. Who this
// server is and who its workers are: membership_ (server/membership/);
// its copies on other servers: replication_ (server/replication/), which
// asks what it needs of the server through ReplicaProtocol::Host. One
// thread (Run's) owns all of it.

#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/dispatch.h"
#include "common/base/status_macros.h"
#include "common/base/thread_pool.h"
#include "common/net/node_runtime.h"
#include "common/net/poll_set.h"
#include "common/net/transport.h"
#include "common/net/zap_handler.h"
#include "common/wire/codec.h"
#include "common/wire/messages.h"
#include "glog/logging.h"
#include "server/checkpointer.h"
#include "server/disk/table_disk.h"
#include "server/feed/serving_feed.h"
#include "server/membership/membership.h"
#include "server/parked.h"
#include "server/push_sequencer.h"
#include "server/replication/counted_pulls.h"
#include "server/replication/replica_protocol.h"
#include "server/server.h"
#include "server/server_metrics.h"
#include "server/shm_peers.h"
#include "server/store/slice_store.h"

namespace ps {

// The memory the tables may use: max_memory_bytes, or half the machine.
uint64_t ServerMemoryBudget(const ServerOptions& options);
// Where checkpoints go: checkpoint_dir, or restore_dir when only that is given.
std::string ServerCheckpointDir(const ServerOptions& options);

class Server::Impl : private ReplicaProtocol::Host {
 public:
  explicit Impl(const ServerOptions& options)
      : options_(options),
        pool_(options.num_threads),
        store_(&pool_, options.allow_nonfinite, ServerMemoryBudget(options)),
        runtime_({.scheduler = options.scheduler,
                  .register_timeout = options.register_timeout,
                  .heartbeat_interval = options.heartbeat_interval,
                  .heartbeat_timeout = options.heartbeat_timeout,
                  .scheduler_recovery_timeout = options.scheduler_recovery_timeout,
                  .goes_on = "Serving goes on",
                  .clock = options.clock}),
        replication_({.shm = options.shm,
                      .view_wait = options.default_pull_timeout,
                      .max_view_waiters = kMaxParkedPulls,
                      .fault = options.forward_fault},
                     context_, security_, &store_, &counted_pulls_, membership_, runtime_, this),
        seqs_(!ServerCheckpointDir(options).empty()),
        checkpointer_({.dir = ServerCheckpointDir(options),
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
    // --replicas, sync: steps travel to the backups as their sums (server/store/step_forwarding.h).
    store_.SetStepForwarding(
        [this](uint32_t key) { return replication_.SumsSteps(key); },
        [this](uint32_t key) { return replication_.SumsSteps(key) && !replication_.IsPrimary(key); });
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
    const std::string owner = absl::StrCat("the job of scheduler ", options_.scheduler, " checkpointing to '",
                                           ServerCheckpointDir(options_), "'");
    PS_ASSIGN_OR_RETURN(disk_, TableDisk::Open({.dir = options_.table_disk_dir,
                                                .max_bytes = options_.table_disk_max_bytes,
                                                .memory_bytes = options_.table_disk_memory_bytes,
                                                .direct_reads = options_.table_disk_direct_io},
                                               owner, !options_.restore_dir.empty()));
    store_.SetTableDisk(disk_.get());
    return absl::OkStatus();
  }
  int rank() const { return membership_.rank(); }  // -1: not registered yet
  absl::Status Serve();
  absl::Status Restore();
  void OnView(const ClusterViewMsg& msg);
  void ApplyView(const ClusterViewMsg& view);  // the whole view (after NodeRuntime::TakeView)
  // Registers again with this node's id: the scheduler answers with the whole view.
  void Reregister();
  // Brings the store's active workers in line with the live ones.
  void ApplyLiveWorkers() override;
  // A checkpoint of this server (checkpointer_), now.
  void Checkpoint(const char* why) override {
    checkpointer_.Write(why, membership_.CheckpointRank(), membership_.CheckpointIncarnation());
  }
  // What the node runtime says: no view by the registration deadline, or
  // the scheduler presumed dead; the status names this server.
  absl::Status CheckScheduler();
  void OnRegistered(const RegisterReplyMsg& reply);
  // Takes the job's incarnation from the first registration reply or view
  // that names it (Membership::AdoptIncarnation); a restored server whose
  // checkpoint is of another one starts a new incarnation.
  void AdoptIncarnation(uint64_t incarnation);
  // This job's workers as new nodes: the checkpoint came from another
  // incarnation of the job.
  void StartNewIncarnation();
  absl::Status Connect();
  absl::Status PollOnce();
  absl::Status OnSchedulerMessage(RawMessage raw);
  // A message read from the scheduler's socket: handled now, or held for
  // ServerOptions::scheduler_lag (tests); then those held whose time came.
  absl::Status FromScheduler(RawMessage raw);
  absl::Status HandleLaggingMessages();
  void OnCreateSlices(uint64_t request_id, const CreateSlicesRequestMsg& create);
  absl::Status OnShutdown(uint64_t request_id, const ShutdownMsg& down);
  // A stop was requested (SIGTERM): stop now, or ask for a drain first
  // (ServerOptions::drain_on_stop) and stop once it is done or past due.
  absl::Status OnStopRequested();
  // The scheduler refused the drain this server asked for: asked again
  // later when the refusal may pass (slices moving; a restarted scheduler
  // not ready yet), else the error that stops this server.
  absl::Status OnDrainRefused(const ErrorMsg& m);
  // After a view changed the copies: waiting requests for slices led
  // elsewhere now are refused (MovedError: their workers send them there),
  // and slices this server keeps no copy of are dropped.
  void LetMovedSlicesGo() override;
  // A refusal, or kUnauthenticated from a restarted scheduler (re-register).
  absl::Status OnSchedulerError(const ErrorMsg& err);
  void OnWorkerMessage(RawMessage raw);
  // Those a poll found waiting, in the order of request_order.h.
  void OnWorkerMessages(std::vector<RawMessage> batch);
  // `env` decoded from raw's header at `t0`.
  void OnWorkerMessage(RawMessage raw, absl::StatusOr<Envelope> env, int64_t t0);
  // A worker's push: where its slices are led now, then OnPush.
  absl::Status OnWorkerPush(const Envelope& env, RawMessage& raw, const PushRequestMsg& push);
  absl::Status HandleWorkerRequest(const Envelope& env, RawMessage& raw);
  // A worker's offer of a shared-memory channel, or a primary's (--replicas).
  absl::Status OnShmOffer(const Envelope& env, const RawMessage& raw);
  // A push from `worker`: applied now, or parked until its step is reached.
  absl::Status OnPush(uint64_t request_id, int worker, const PushRequestMsg& push, RawMessage& raw);
  StatsReplyMsg Stats() const;
  // `fresh` (--replicas): the slices of the push to apply, the others held already.
  // The payload of dense slice meta->key in a pull reply, as its
  // compression has it (float32, 16-bit, or a delta from `have`); fills
  // *meta's length and compression. `views`: float32 values may be sent
  // without a copy (see AnswerPull).
  // Thread-safe for distinct keys (AnswerPull runs them on the pool).
  zmq::message_t DenseReply(uint64_t have, bool views, SliceData* meta);
  // The compressed frames of `push` (those `fresh` marks, or all) decoded
  // into (*out)[i], on the pool's threads; the first refusal, in frame order.
  absl::Status DecodeCompressed(const PushRequestMsg& push, const std::vector<bool>* fresh, const RawMessage& raw,
                                std::vector<std::vector<float>>* out);
  // The rows `pull` of `worker` asks for, appended to *reply and *payloads
  // (float32 or 16-bit, as their table's compression says); counted towards
  // admission once per pull (counted_pulls_).
  void ReadRows(int worker, const PullRequestMsg& pull, PullReplyMsg* reply, std::vector<zmq::message_t>* payloads);
  absl::Status HandlePush(int worker, const PushRequestMsg& push, RawMessage& raw,
                          const std::vector<bool>* fresh = nullptr);
  // Answers `pull` now if it may be, else parks it until it may or its
  // deadline passes. Requires store_.CheckPull(pull) to be OK.
  // `after_push`: the pull of a push request, whose push was applied.
  void StartPull(zmq::message_t& routing_id, int worker, uint64_t request_id, const PullRequestMsg& pull,
                 bool after_push = false);
  void AnswerPull(const zmq::message_t& routing_id, int worker, uint64_t request_id, const PullRequestMsg& pull);
  void AnswerReadyPulls() override;
  // Dedupes by seq, applies, and answers (an Ack, or the pull riding on it).
  absl::Status ApplyPush(RawMessage& raw, int worker, uint64_t request_id, const PushRequestMsg& push);
  // Which slices of `push` lack it (numbered pushes are applied once):
  // none (nullopt), all (empty), or those marked (--replicas).
  std::optional<std::vector<bool>> Fresh(const PushRequestMsg& push, int worker) override;
  // Applies the `fresh` slices of a push (all when empty).
  absl::Status ApplyFresh(RawMessage& raw, int worker, const PushRequestMsg& push,
                          const std::vector<bool>& fresh) override;
  void ApplyParkedPushes();
  void ExpireParkedPulls();
  // `worker` >= 0: the reply tells that worker its durable seq.
  // `views`: the payloads point at live values (ShmPeers::Has).
  void Reply(const zmq::message_t& routing_id, uint64_t request_id, Body body,
             std::vector<zmq::message_t> payloads = {}, int worker = -1, bool views = false);
  void ReplyError(const zmq::message_t& routing_id, uint64_t request_id, const absl::Status& s, int worker = -1);
  void ToScheduler(uint64_t request_id, Body body) override;
  // The rest of ReplicaProtocol::Host (Fresh, ApplyFresh, AnswerReadyPulls,
  // ApplyLiveWorkers, LetMovedSlicesGo, Checkpoint and ToScheduler above).
  void ReplyTo(const zmq::message_t& routing_id, uint64_t request_id, Body body, std::vector<zmq::message_t> payloads,
               int worker) override {
    Reply(routing_id, request_id, std::move(body), std::move(payloads), worker);
  }
  void RefuseTo(const zmq::message_t& routing_id, uint64_t request_id, const absl::Status& status,
                int worker) override {
    ReplyError(routing_id, request_id, status, worker);
  }
  void PullAfterPush(zmq::message_t& routing_id, int worker, uint64_t request_id, const PullRequestMsg& pull) override {
    StartPull(routing_id, worker, request_id, pull, /*after_push=*/true);
  }
  bool CheckpointsEnabled() const override { return checkpointer_.enabled(); }
  void CountPush() override { checkpointer_.CountPush(); }
  void HandleAgain(RawMessage raw) override { OnWorkerMessage(std::move(raw)); }
  // A heartbeat to the scheduler when one is due (also from inside long
  // work: a large model's creation, a large checkpoint's write).
  void HeartbeatIfDue() {
    if (runtime_.HeartbeatDue()) ToScheduler(0, HeartbeatMsg{});
  }

  const ServerOptions options_;
  zmq::context_t context_;
  NodeSecurity security_;
  // The pulls whose table rows this server counted towards admission, as
  // primary or as a backup the rows were forwarded to.
  CountedPulls counted_pulls_;
  std::unique_ptr<ZapHandler> zap_;  // declared before the sockets: outlives them
  zmq::socket_t router_;
  zmq::socket_t scheduler_;
  std::string endpoint_;
  std::unique_ptr<TableDisk> disk_;  // the tables' disk tier, when options_.table_disk_dir
  ThreadPool pool_;
  SliceStore store_;
  std::atomic<bool> stop_{false};

  // Who this server is, the job incarnation, the live workers, the drain.
  Membership membership_;
  std::deque<ParkedPull> parked_;
  std::deque<ParkedPush> parked_pushes_;
  StatsReplyMsg counters_;  // pulls, errors, bytes; the store keeps the rest
  ServerMetrics metrics_;

  // Registration, heartbeats, views, the scheduler's failure and return.
  NodeRuntime runtime_;
  // Messages from the scheduler held for ServerOptions::scheduler_lag, in the order they came.
  struct Lagging {
    absl::Time due;
    RawMessage raw;
  };
  std::deque<Lagging> lagging_;
  PollSet poll_;
  // Sockets used since their last drain to empty (PollSet::AddSocketFd).
  bool router_unsettled_ = true, scheduler_unsettled_ = true;

  // --replicas: forwarding to backups, the replies waiting for them, the
  // copies (declared after what it borrows: the store, the membership, the
  // runtime; its links close before the context does).
  ReplicaProtocol replication_;
  // Push sequence numbers and checkpoints (after the store, the metrics and
  // the sequencer, which the checkpointer borrows).
  PushSequencer seqs_;
  Checkpointer checkpointer_;
  // Serving replicas following the job (server/feed/serving_feed.h): the
  // slices this server leads.
  ServingFeed feed_{&store_,
                    [this](uint32_t key) { return !replication_.replicated() || replication_.IsPrimary(key); }};
  void SendServing(const std::string& routing_id, uint64_t request_id, ServingReplyMsg reply,
                   std::vector<zmq::message_t> payloads) {
    Reply(zmq::message_t(routing_id.data(), routing_id.size()), request_id, std::move(reply), std::move(payloads));
  }
  ShmPeers shm_;  // workers on this host
};

}  // namespace ps

#endif  // PS_SERVER_SERVER_IMPL_H_
