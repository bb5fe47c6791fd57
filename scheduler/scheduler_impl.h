#ifndef PS_SCHEDULER_SCHEDULER_IMPL_H_
#define PS_SCHEDULER_SCHEDULER_IMPL_H_

// The scheduler's inside, shared by scheduler.cc (registration, views,
// heartbeats, barriers, the end of the job) and scheduler_model.cc (the
// model and its slices on the servers, their copies, the state file) and by
// nothing else. One thread (Run's) owns all of it.

#include <atomic>
#include <deque>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/dispatch.h"
#include "common/base/status_macros.h"
#include "common/net/poll_set.h"
#include "common/net/transport.h"
#include "common/net/zap_handler.h"
#include "common/placement/partition_map.h"
#include "common/placement/rebalance.h"
#include "common/wire/codec.h"
#include "common/wire/messages.h"
#include "glog/logging.h"
#include "scheduler/barriers.h"
#include "scheduler/job_state.h"
#include "scheduler/ranks.h"
#include "scheduler/replica_set.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_metrics.h"
#include "scheduler/unreachable_servers.h"

namespace ps {
namespace scheduler_internal {

struct Node {
  uint32_t node_id = 0;
  Role role = Role::kWorker;
  int rank = 0;  // -1 while the cluster forms: given at formation
  std::string address;
  std::string identity;    // ZeroMQ routing id; empty: not connected since a restore
  std::string public_key;  // the CurveZMQ key it registered with; empty without keys
  bool done = false;
  bool alive = true;     // false once declared dead or replaced
  absl::Time last_seen;  // the last message from it
  // A server that registered while the job formed with its checkpoint: the
  // slices that holds (RegisterRequestMsg::held).
  bool restored = false;
  std::vector<SliceData> held;
  uint64_t view_sent = 0;  // the epoch of the last view sent to it (0: none)
};

enum class Phase { kForming, kRunning, kShuttingDown, kDone };

}  // namespace scheduler_internal

class Scheduler::Impl {
 public:
  using Node = scheduler_internal::Node;
  using Phase = scheduler_internal::Phase;
  explicit Impl(const SchedulerOptions& options) : options_(options), clock_(ClockOr(options.clock)) {}

  // Takes the job back from options_.state_file (before Bind).
  absl::Status Restore();
  // Logs and emits ("restored") that this scheduler took the job back.
  void SayRestored() const;

  absl::Status Bind() {
    PS_ASSIGN_OR_RETURN(std::string bind, NormalizeEndpoint(options_.bind));
    // A restored scheduler is where the running nodes look for it.
    if (restored_ && absl::EndsWith(bind, ":0")) bind = restored_endpoint_;
    PS_ASSIGN_OR_RETURN(security_, NodeSecurity::Load(options_.security, Role::kScheduler));
    PS_ASSIGN_OR_RETURN(zap_, StartZapHandler(context_, security_, "scheduler"));
    PS_ASSIGN_OR_RETURN(router_,
                        BindRouter(context_, bind, options_.advertise_host, &endpoint_, security_, Traffic::kControl));
    LOG(INFO) << "scheduler listening on " << endpoint_ << " for " << options_.num_servers << " servers and "
              << options_.num_workers << " workers";
    LOG(INFO) << "scheduler: job incarnation " << IncarnationName(incarnation_) << (restored_ ? " (restored)" : "");
    return metrics_.Start(options_.metrics);
  }
  const std::string& endpoint() const { return endpoint_; }
  std::string metrics_url() const { return metrics_.url(); }
  void RequestStop() { stop_.store(true); }
  absl::Status Run();

 private:
  void OnMessage(RawMessage raw);
  absl::Status Handle(const std::string& identity, const Envelope& env);
  // The live node that sent `env` (its last_seen now): kUnauthenticated for
  // a connection that has not registered, kFailedPrecondition for a node
  // declared dead. With `role`: also kFailedPrecondition before the cluster
  // formed, and kInvalidArgument naming the message when the sender is not
  // of that role (kScheduler: nobody may send it).
  // A serving replica asks for the model and the view (ServingKind::kSubscribe).
  absl::Status OnServingSubscribe(const std::string& identity, const Envelope& env, const ServingRequestMsg& m);
  absl::StatusOr<Node*> Sender(const std::string& identity, const Envelope& env,
                               std::optional<Role> role = std::nullopt);
  absl::Status OnRegister(const std::string& identity, const Envelope& env, const RegisterRequestMsg& m);
  // A registration while the cluster forms: the node gets its id now, its
  // rank (the one it asked for, or a free one) and its reply at formation.
  absl::Status OnForming(const std::string& identity, const RegisterRequestMsg& m);
  // Every node registered: gives out the ranks, answers, sends the view.
  void Form();
  // A running node re-registering under its id (this scheduler was
  // restarted, or its connection was): binds its new connection.
  absl::Status OnReconnect(const std::string& identity, const Envelope& env, const RegisterRequestMsg& m);
  // Writes options_.state_file (if any); a failure is logged, not fatal.
  void SaveState();
  ClusterViewMsg CurrentView() const;
  absl::Status OnDefineModel(const Node& worker, const Envelope& env, const ModelSpec& model);
  void OnServerAck(const Node& server, const Envelope& env);
  absl::Status OnBarrier(const Node& worker, const Envelope& env, const BarrierRequestMsg& m);
  void OnWorkerDone(Node& worker, const Envelope& env);
  // A registration naming a rank (or a worker filling a dead one's place)
  // while the job runs.
  absl::Status OnRejoin(const std::string& identity, const Envelope& env, const RegisterRequestMsg& m);
  void SendSlices(const Node& server);
  // --replicas, a whole job restarted from its checkpoints (a server
  // registered restored while it formed): each slice keeps the most
  // advanced copy the restored servers hold and gets its others again
  // (ReplicaSet::Seat). kFailedPrecondition naming the slices none holds.
  absl::Status SeatRestoredCopies();
  void CheckHeartbeats(absl::Time now);
  // --replicas: server `rank` is gone; each slice it held a copy of loses
  // it (a backup becomes the primary of those it led), except a last copy.
  void LoseServer(int rank);
  // --replicas: asks a primary for the next copy a slice lacks (one at a
  // time, so that training goes on), unless one is under way.
  void StartNextCopy();
  // Says (once per state) that the live servers can take no further copy.
  void SayCopiesStuck(const std::set<int32_t>& live);
  void OnCopyAnswer(const Envelope& env);
  // A server leaving the running job (scheduler_drain.cc): the request
  // checked (kPermissionDenied for a node asking for another server,
  // kFailedPrecondition for a job not running, one copy per slice, a drain
  // under way or too few servers left, kNotFound for no such live server),
  // then its slices copied; answered when it has left (or the drain failed).
  absl::Status CheckDrain(const std::string& identity, int32_t rank) const;
  absl::Status OnDrain(const std::string& identity, const Envelope& env, const DrainRequestMsg& m);
  // Once every slice has its copies elsewhere: tells the server to shut down.
  void MaybeFinishDrain();
  // The draining server answered its shutdown: it leaves the view. Whether
  // `env` was that answer.
  bool OnDrainedAck(const Node& server, const Envelope& env);
  // Answers the drain's requester and forgets the drain.
  void EndDrain(const absl::Status& status);
  // A server joins the running job (scheduler_moves.cc): a new rank, the
  // model without slices, then moves give it its share. kFailedPrecondition
  // for a job not running or with one copy of each slice,
  // kInvalidArgument for a rank or checkpoint asked for.
  absl::Status OnJoin(const std::string& identity, const Envelope& env, const RegisterRequestMsg& m);
  // Plans the moves that balance the job over its live servers
  // (PlanMoves) and starts them, one at a time, when rebalance_wanted_;
  // nothing while a copy, a move or a drain is under way or a slice lacks
  // a copy.
  void StartRebalance();
  // Restore(): the move whose old copy the last scheduler was releasing,
  // made (as when a release outlives its deadline: the view names the new copy).
  void FinishRestoredMove(const std::optional<JobStateMove>& releasing);
  void NextMove();
  // A move's step: the copy to its new server, or the release of its old one.
  void SendMoveStep(const SliceMove& move, bool release);
  void OnMoveAnswer(const Envelope& env);
  void CheckMoveDeadline(absl::Time now);
  // Server `rank` died: the planned moves go (planned again later).
  void ForgetMovesOf(int32_t rank);
  void MarkDead(Node& node, const std::string& why);
  // A worker's heartbeat named the servers it cannot reach
  // (scheduler_reachability.cc): said in the log and the events; with
  // several copies of each slice, such a server that the scheduler still
  // hears is fenced (declared dead, so that its slices fail over to their
  // copies) when the worker hears other servers and no slice has its last
  // copy there. With one copy the job waits for it, and says so.
  void OnUnreachableReport(const Node& worker, const std::vector<UnreachableServer>& report);
  // Whether server `rank` may be fenced for `u`; why not otherwise.
  absl::Status MayFence(int rank, const UnreachableServer& u) const;
  // Completes the barriers every live worker has entered.
  void CompleteBarriers();
  // Ends the job once every worker is done or dead (failing it when none is done).
  void MaybeFinishJob();
  int LiveWorkers() const;
  void BroadcastView();
  void StartCreatingSlices();
  void FinishModel(const absl::Status& status);
  void StartShutdown(const std::string& reason);
  absl::Status CheckDeadlines();
  std::string DescribeMissingNodes() const;
  std::vector<NodeHealth> NodesHealth() const;
  const Node* NodeByIdentity(const std::string& identity) const;
  void Send(const std::string& identity, uint64_t request_id, Body body);
  void SendError(const std::string& identity, uint64_t request_id, const absl::Status& s);

  const SchedulerOptions options_;
  const Clock* const clock_;
  zmq::context_t context_;
  NodeSecurity security_;
  std::unique_ptr<ZapHandler> zap_;  // declared before router_: outlives it
  zmq::socket_t router_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};

  Phase phase_ = Phase::kForming;
  absl::Time register_deadline_;
  // The job incarnation: random, or the state file's when restored.
  uint64_t incarnation_ = absl::Uniform<uint64_t>(absl::BitGen(), 1, std::numeric_limits<uint64_t>::max());
  uint32_t next_node_id_ = 1;
  bool restored_ = false;
  std::string restored_endpoint_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<std::string, size_t> by_identity_;
  int servers_ = 0;
  int workers_ = 0;
  // By rank: the index in nodes_ of the node that holds the rank now.
  std::vector<size_t> server_index_, worker_index_;
  UnreachableServers unreachable_;  // what the workers' heartbeats say they cannot reach
  absl::Time unreachable_warned_;
  uint64_t view_epoch_ = 0;
  // The last view broadcast as each role was sent it (ViewFor), the base of
  // the next change a node that got it is sent; [0] servers, [1] workers.
  ClusterViewMsg last_for_role_[2];
  absl::Status failure_;  // set when the job ends because every worker died

  // The model: none, being created on the servers, or ready.
  std::optional<ModelSpec> model_;
  PartitionMap map_;
  // Per slice key, the servers holding a copy, primary first (--replicas),
  // and the copy being made, if any.
  ReplicaSet replicas_;
  // Views and saved state carry the copies, and servers may join and drain.
  bool Tracked() const { return options_.replicas > 1 || options_.elastic; }
  // A live server that has not re-registered with this restarted scheduler
  // yet (nothing asked of it would be answered, and a plan made without it
  // would leave it out), or -1.
  int32_t ServerNotBack() const;
  struct CopyInFlight {
    ReplicaSet::Copy copy;
    uint64_t request_id = 0;
    absl::Time deadline;
  };
  std::optional<CopyInFlight> copying_;
  // (slice, server) pairs whose copy failed: tried again after the next
  // server loss (its primary may be another then), not before.
  std::set<std::pair<uint32_t, int32_t>> copy_failed_;
  // The live servers and the copies held when the scheduler last said that
  // no further copy could be made (said once per such state, and again
  // after a server loss).
  std::optional<std::pair<std::set<int32_t>, size_t>> copies_stuck_;
  // The server being drained, if any: who asked (the server itself, or an
  // operator's request), and the shutdown it was sent once its slices had
  // their copies elsewhere (0: not yet).
  struct Draining {
    int32_t rank = 0;
    std::string identity;
    uint64_t request_id = 0;
    bool self = false;
    uint64_t shutdown_id = 0;
  };
  std::optional<Draining> draining_;
  // Moves that balance the job after servers joined (scheduler_moves.cc):
  // those planned, and the one under way (its copy, or its release).
  std::deque<SliceMove> moves_;
  struct MoveInFlight {
    SliceMove move;
    uint64_t request_id = 0;
    bool releasing = false;
    absl::Time deadline;
  };
  std::optional<MoveInFlight> moving_;
  // Servers joined, or planned moves were dropped: balance again once every
  // slice has its copies (only then: a placed job is not moved about).
  bool rebalance_wanted_ = false;
  bool model_ready_ = false;
  // The requests (slice creation or shutdown) still unanswered, by request
  // id -> server rank. Only answers to these count: a late answer to an
  // earlier round is ignored.
  absl::flat_hash_map<uint64_t, int> awaiting_servers_;
  absl::Time servers_deadline_;
  std::vector<Waiter> model_waiters_;
  // Registrations answered at formation.
  struct PendingReply {
    std::string identity;
    uint64_t request_id = 0;
  };
  std::vector<PendingReply> pending_replies_;

  Barriers barriers_;
  uint64_t next_request_id_ = 1;
  SchedulerMetrics metrics_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_SCHEDULER_IMPL_H_
