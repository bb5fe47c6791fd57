#ifndef PS_SERVER_SERVER_IMPL_H_
#define PS_SERVER_SERVER_IMPL_H_

// The server's inside, shared by server.cc (its life: registration, the
// scheduler's messages, views, checkpoints) and server_requests.cc (the
// workers' requests: pushes, pulls, replies, forwarding to backups) and by
// nothing else. One thread (Run's) owns all of it.

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
#include "server/counted_pulls.h"
#include "server/disk/table_disk.h"
#include "server/membership/membership.h"
#include "server/parked.h"
#include "server/push_sequencer.h"
#include "server/replication/replicator.h"
#include "server/replication/slice_seqs.h"
#include "server/server.h"
#include "server/server_metrics.h"
#include "server/shm_peers.h"
#include "server/store/slice_store.h"

namespace ps {

// The memory the tables may use: max_memory_bytes, or half the machine.
uint64_t ServerMemoryBudget(const ServerOptions& options);
// Where checkpoints go: checkpoint_dir, or restore_dir when only that is given.
std::string ServerCheckpointDir(const ServerOptions& options);

class Server::Impl {
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
        [this](uint32_t key) { return SumsSteps(key); },
        [this](uint32_t key) { return SumsSteps(key) && !replicator_.IsPrimary(key, membership_.rank()); });
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
  absl::Status Serve();
  absl::Status Restore();
  void OnView(const ClusterViewMsg& msg);
  void ApplyView(const ClusterViewMsg& view);  // the whole view (after NodeRuntime::TakeView)
  // Registers again with this node's id: the scheduler answers with the whole view.
  void Reregister();
  // Brings the store's active workers in line with the live ones.
  void ApplyLiveWorkers();
  // A checkpoint of this server (checkpointer_), now.
  void Checkpoint(const char* why) {
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
  void OnCreateSlices(uint64_t request_id, const CreateSlicesRequestMsg& create);
  absl::Status OnShutdown(uint64_t request_id, const ShutdownMsg& down);
  // A stop was requested (SIGTERM): stop now, or ask for a drain first
  // (ServerOptions::drain_on_stop) and stop once it is done or past due.
  absl::Status OnStopRequested();
  // The scheduler refused the drain this server asked for: asked again
  // later when the refusal may pass (slices moving; a restarted scheduler
  // not ready yet), else the error that stops this server.
  absl::Status OnDrainRefused(const ErrorMsg& m);
  // The keys a pull reads (dense slices and table shards).
  static std::vector<uint32_t> PullKeys(const PullRequestMsg& pull);
  // A worker's push: Replicator::CheckApply, and that this server leads
  // what its pull reads.
  absl::Status CheckLeads(const PushRequestMsg& push) const;
  // After a view changed the copies: waiting requests for slices led
  // elsewhere now are refused (MovedError: their workers send them there),
  // and slices this server keeps no copy of are dropped.
  void LetMovedSlicesGo();
  // The keys this server serves to workers now: MovedError (at the view's
  // epoch, or at a hand-over's) for one led elsewhere or being handed over.
  absl::Status CheckServes(const std::vector<uint32_t>& keys) const;
  // AddCopyRequestMsg::release_epoch: the primary stops forwarding a slice
  // to the released backup, or stops serving it (handing_over_); the
  // scheduler hears once every forward made before is settled.
  absl::Status StartRelease(uint64_t request_id, const AddCopyRequestMsg& release);
  void FinishReleases();
  // One copy of each slice (--elastic): asks the server that takes slice
  // `key` over to write a checkpoint once it applied every update forwarded
  // before, so that the slice this server drops is durable there (its
  // answer settles the token returned; 0: nothing asked).
  uint64_t AskDurable(uint32_t key);
  // OnReplicated's work: the reply, copy answer or error `settled` frees.
  void OnSettled(const Replicator::Settled& settled);
  // A backup refused, after acknowledging it, an update this primary
  // applied (`refused`, late): its copy of each slice of that update
  // differs, so it gets the slice's whole state again (a copy, as to a new
  // backup; its later updates follow it), unless a repair of that copy is
  // under way or kMaxRepairs were made (then it stays counted as diverged).
  void RepairCopies(const Replicator::Settled& refused);
  // The repair of backup `backup`'s copy of slice `key` settled.
  void OnRepaired(uint32_t key, int32_t backup, const absl::Status& status);
  // The copy `token` names (a scheduler's AddCopy, or a repair) settled.
  void OnCopySettled(uint64_t token, const absl::Status& status);
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
  void AnswerReadyPulls();
  // Dedupes by seq, applies, and answers (an Ack, or the pull riding on it).
  absl::Status ApplyPush(RawMessage& raw, int worker, uint64_t request_id, const PushRequestMsg& push);
  // Which slices of `push` lack it (numbered pushes are applied once):
  // none (nullopt), all (empty), or those marked (--replicas).
  std::optional<std::vector<bool>> Fresh(const PushRequestMsg& push, int worker);
  // Applies the `fresh` slices of a push (all when empty).
  absl::Status ApplyFresh(RawMessage& raw, int worker, const PushRequestMsg& push, const std::vector<bool>& fresh);
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
  // --replicas: forwarding to backups, and the replies waiting for them.
  Replicator replicator_{context_, security_, options_.shm};
  struct AwaitingBackups {
    zmq::message_t routing_id;
    int worker;
    uint64_t request_id;
    std::optional<PullRequestMsg> then_pull;
    // A pull's reply, ready, held until the backups read its table rows too.
    std::optional<PullReplyMsg> reply;
    std::vector<zmq::message_t> payloads;
  };
  absl::flat_hash_map<uint64_t, AwaitingBackups> awaiting_backups_;
  // Slices this primary hands over to another server (a move), each with
  // the view epoch that moves it; and the releases not answered yet: each
  // waits for the forwards made before it (tokens below before_token).
  absl::flat_hash_map<uint32_t, uint64_t> handing_over_;
  struct Release {
    uint64_t request_id = 0;
    uint64_t before_token = 0;
    uint64_t durable_token = 0;  // AskDurable's, waited for too (0: none)
  };
  std::vector<Release> releases_;
  bool one_copy_ = false;                       // RegisterReplyMsg::replicas < 2
  absl::flat_hash_set<uint64_t> durable_asks_;  // AskDurable tokens not answered yet
  uint64_t next_forward_ = 1;
  absl::flat_hash_map<uint32_t, int32_t> server_nodes_;  // the view's servers (node -> rank): who may forward
  // --replicas: which numbered pushes each slice holds (duplicates are
  // told apart per slice: server/replication/slice_seqs.h).
  SliceSeqs slice_seqs_;
  // The pulls whose table rows this server counted towards admission, as
  // primary or as a backup the rows were forwarded to.
  CountedPulls counted_pulls_;
  // A push (or a slice copy) that `refusal` turned away for its slices'
  // copies: held until this server has the newer view `epoch` its sender
  // acted on, else the refusal.
  absl::Status AwaitView(uint64_t epoch, RawMessage& raw, const absl::Status& refusal);
  // After a view: the held requests are handled again (one held again
  // keeps its first deadline).
  void RetryAwaitingView();
  // Those past their deadline: refused.
  void ExpireAwaitingView();
  struct AwaitingView {
    RawMessage raw;
    absl::Time deadline;
  };
  // A server's request from a node this server knows neither as a server
  // nor as a live worker: held for the newer view `epoch` its sender acted
  // on (a server that joined, or came back as a new node), else `refusal`.
  absl::Status AwaitUnknownPeer(const Envelope& env, uint64_t epoch, RawMessage& raw, const absl::Status& refusal) {
    return membership_.IsWorker(env.sender) ? refusal : AwaitView(epoch, raw, refusal);
  }
  // A primary's forward (--replicas): applied as that worker's push, in its
  // order, once this server's view names the sender the slices' primary.
  absl::Status OnForward(const Envelope& env, const PushRequestMsg& push, RawMessage& raw);
  std::deque<AwaitingView> awaiting_view_;
  // A primary's forward, applied as the worker's push (acknowledged first).
  // A worker's offer of a shared-memory channel, or a primary's (--replicas).
  absl::Status OnShmOffer(const Envelope& env, const RawMessage& raw);
  void ApplyForwarded(uint64_t request_id, int32_t primary, const PushRequestMsg& push, RawMessage& raw);
  // --replicas, the primary: sends the backups of `pull`'s table shards the
  // ids it reads (PushRequestMsg::pulled); returns the token its reply
  // waits for, 0 when nothing went.
  uint64_t ForwardPulledRows(int worker, const PullRequestMsg& pull);
  // A backup: reads the rows a pull read on the primary.
  absl::Status ReadPulledRows(const PushRequestMsg& pulled, const RawMessage& raw);

  // ---- sync steps forwarded as their sums (server/store/step_forwarding.h; server_steps.cc) ----
  // Whether slice `key`'s steps travel to its copies as sums.
  // (Jobs that keep one copy, --elastic, forward each push to a slice's new
  // copy during a move, as before.)
  bool SumsSteps(uint32_t key) const { return replicator_.replicated() && !one_copy_ && store_.ForwardsSteps(key); }
  // Whether some slice of `push` (a worker's, to this primary) sums its steps.
  bool HasSummedSlices(const PushRequestMsg& push) const;
  // ApplyPush for such a push: applies it, forwards its other slices as
  // before, and answers once every step it joined (or, re-sent, that holds
  // it) reached the backups, and the rest's forward too.
  absl::Status ApplySummedPush(RawMessage& raw, int worker, uint64_t request_id, const PushRequestMsg& push,
                               const std::optional<std::vector<bool>>& fresh);
  // Forwards the slices of `push` whose steps are not summed to their
  // backups, as the worker's push; the forward's token (0: nothing went).
  absl::StatusOr<uint64_t> ForwardUnsummed(int worker, const PushRequestMsg& push, RawMessage& raw);
  // Forwards the steps the store completed since the last call to the
  // backups of the slices this server leads (one message), then runs the
  // optimizer of those a push left due; the replies waiting for those steps
  // now wait for its acknowledgement. Called after every store change that
  // may complete a step.
  void ForwardCompletedSteps();
  // A backup: completes the forwarded steps with their sums. A step it
  // holds with another sum (K = 3 after a failover) is refused once the
  // rest applied, its slice named in *differ.
  absl::Status ApplyForwardedSteps(const PushRequestMsg& push, const RawMessage& raw, std::vector<uint32_t>* differ);
  // A view's first act: the last step of each slice this server leads since
  // it goes to the backups again (one may lack it: the old primary died
  // while forwarding it, with K = 3), before any step completes here.
  void ResendLastSteps();
  // After a view or a hand-over: replies waiting for steps of slices led
  // elsewhere now fail as moved, held (their workers re-send them, numbered
  // as they were, to the new primary, which applies each once); the steps
  // this server now leads that a worker left behind complete.
  void TakeOverSteps();
  // One of a push reply's waits ended (with `status`): answered after the last.
  void EndWait(uint64_t reply_id, const absl::Status& status);
  // Answers a push whose backups all have it: the error, the pull riding on it, or an Ack.
  void AnswerPush(AwaitingBackups& a, const absl::Status& status);
  struct PushReply {
    AwaitingBackups a;
    int waits = 0;
    absl::Status status;
  };
  std::map<uint64_t, PushReply> push_replies_;  // by id
  uint64_t next_push_reply_ = 1;
  // A forward's token -> the push replies waiting for it (a reply waiting
  // for two steps it carries is listed twice).
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> token_replies_;
  // Slice key -> the push replies waiting for its step in progress.
  absl::flat_hash_map<uint32_t, std::vector<uint64_t>> step_waiters_;
  // Slice key -> the workers its last completed step summed (what a new
  // primary forwards again), for the slices that sum their steps.
  absl::flat_hash_map<uint32_t, std::vector<int32_t>> last_step_workers_;
  absl::flat_hash_set<uint32_t> leading_;  // slices summing steps this server led at the last view
  // Slice key -> the token of its last step sent again (ResendLastSteps),
  // until the backups answer: re-sent pushes of that step wait for it.
  absl::flat_hash_map<uint32_t, uint64_t> resent_steps_;
  uint64_t steps_forwarded_ = 0;  // slice steps sent to backups as sums

  // Updates a backup refused that this primary applied (its copy differs),
  // and the forwarded pushes this primary refused itself (recent ones).
  uint64_t diverged_ = 0;
  // A backup that refused an update this primary applied gets a fresh copy
  // of the slice (RepairCopies): the (slice, backup) repairs in flight,
  // and how many were made (at most kMaxRepairs each).
  static constexpr int kMaxRepairs = 3;
  absl::flat_hash_set<std::pair<uint32_t, int32_t>> repairing_;
  absl::flat_hash_map<std::pair<uint32_t, int32_t>, int> repairs_made_;
  uint64_t copies_repaired_ = 0;
  absl::flat_hash_set<uint64_t> refused_here_;
  // Back to K copies: the scheduler asks this primary to copy a slice to a
  // server; a primary's copy arrives here (answered once it is held).
  void OnAddCopy(uint64_t request_id, const AddCopyRequestMsg& add);
  // A copy from a server that leads the slice only in a newer view than
  // this server's waits for that view (AwaitView).
  absl::Status OnSliceCopy(const Envelope& env, const SliceCopyMsg& copy, RawMessage& raw);
  struct CopyRequest {
    uint64_t request_id;  // the scheduler's
    uint32_t key;
    int32_t server;
    bool repair = false;  // RepairCopies' (no scheduler waits for it)
  };
  absl::flat_hash_map<uint64_t, CopyRequest> copy_requests_;  // by token
  // What the metrics say of the copies (none without replicas).
  std::optional<ReplicationStats> Replication() const;
  // Every backup answered a forwarded push (the worker's reply goes), or
  // the new copy answered (the scheduler hears).
  void OnReplicated(const Replicator::Settled& settled);
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

  // Who this server is, the job incarnation, the live workers, the drain.
  Membership membership_;
  std::deque<ParkedPull> parked_;
  std::deque<ParkedPush> parked_pushes_;
  StatsReplyMsg counters_;  // pulls, errors, bytes; the store keeps the rest
  ServerMetrics metrics_;

  // Registration, heartbeats, views, the scheduler's failure and return.
  NodeRuntime runtime_;
  PollSet poll_;
  // Sockets used since their last drain to empty (PollSet::AddSocketFd).
  bool router_unsettled_ = true, scheduler_unsettled_ = true;

  // Push sequence numbers and checkpoints (after the store, the metrics and
  // the sequencer, which the checkpointer borrows).
  PushSequencer seqs_;
  Checkpointer checkpointer_;
  ShmPeers shm_;  // workers on this host
};

}  // namespace ps

#endif  // PS_SERVER_SERVER_IMPL_H_
