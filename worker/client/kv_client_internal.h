#ifndef PS_WORKER_CLIENT_KV_CLIENT_INTERNAL_H_
#define PS_WORKER_CLIENT_KV_CLIENT_INTERNAL_H_

// KVClient's inside, shared by its source files and by nothing else:
// KVClient::Impl (kv_client.cc: the API, building requests, tickets;
// kv_client_rows.cc: table rows; the requests themselves in
// client_requests.h) and, in namespace client_internal, the I/O thread: the
// loop over the links to the scheduler (scheduler_link.h: its socket, this
// node's identity, heartbeats) and to the servers (server_links.h: per
// server its socket, liveness, held requests, replay and channel), with
// where each slice goes (routing.h) and what is in flight (in_flight.h). Its
// code: the loop and replies (kv_client_io.cc), a request's way out
// (kv_client_send.cc), the fence across a move (kv_client_fence.cc),
// callers' own I/O (kv_client_direct.cc, caller_io.h), shared-memory
// channels (kv_client_shm.cc), and recovery (kv_client_recovery.cc:
// servers that die and come back, a scheduler that restarts: what is held,
// re-sent and in which order).

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/status_macros.h"
#include "common/net/node_runtime.h"
#include "common/net/poll_set.h"
#include "common/net/security.h"
#include "common/net/shm_channel.h"
#include "common/net/transport.h"
#include "common/wire/messages.h"
#include "worker/client/caller_io.h"
#include "worker/client/client_metrics.h"
#include "worker/client/client_requests.h"
#include "worker/client/delta_pulls.h"
#include "worker/client/in_flight.h"
#include "worker/client/kv_client.h"
#include "worker/client/push_compression.h"
#include "worker/client/push_replay.h"
#include "worker/client/request_split.h"
#include "worker/client/routing.h"
#include "worker/client/scheduler_link.h"
#include "worker/client/server_links.h"
#include "worker/client/server_reachability.h"

namespace ps {
namespace client_internal {

// Poll tags: a server's is its rank (kSchedulerTarget: client_requests.h).
inline constexpr int kWakeTag = -2;  // the eventfd callers write to wake the I/O thread
// How soon the I/O thread looks at the servers' sockets again after callers
// collected their own replies (IoThread::WaitDirect).
inline constexpr absl::Duration kDriverRound = absl::Milliseconds(2);
// A request refused as routed by an older view by a server whose own view is
// older than the request's (it has not heard of the change yet) goes to it
// again after this long.
inline constexpr absl::Duration kMovedRetry = absl::Milliseconds(5);

// Counters of the fault-tolerance machinery (ClientStats has them).
struct RecoveryStats {
  uint64_t pushes_resent = 0;  // re-sent to restarted servers
  uint64_t requests_held = 0;  // waited for a restarted server
  uint64_t replay_bytes = 0;   // kept now for re-sending
  uint64_t servers_recovered = 0;
  uint64_t requests_resent_off_shm = 0;    // in flight on a channel that closed
  uint64_t requests_rerouted = 0;          // refused as routed by an older view, sent again (a slice moved)
  uint64_t requests_fenced = 0;            // waited behind an earlier request for their slices in transit (a move)
  uint64_t servers_unreachable = 0;        // times a server its requests waited on answered nothing for the timeout
  uint64_t requests_resent_after_cut = 0;  // sent again on a new connection to such a server (one copy)
};
// The same, counted by whoever does I/O and read by any thread.
struct RecoveryCounters {
  std::atomic<uint64_t> pushes_resent{0};
  std::atomic<uint64_t> requests_held{0};
  std::atomic<uint64_t> replay_bytes{0};
  std::atomic<uint64_t> servers_recovered{0};
  std::atomic<uint64_t> requests_resent_off_shm{0};
  std::atomic<uint64_t> requests_rerouted{0};
  std::atomic<uint64_t> requests_fenced{0};
  std::atomic<uint64_t> servers_unreachable{0};
  std::atomic<uint64_t> requests_resent_after_cut{0};

  RecoveryStats Snapshot() const {
    return {pushes_resent.load(),     requests_held.load(),           replay_bytes.load(),
            servers_recovered.load(), requests_resent_off_shm.load(), requests_rerouted.load(),
            requests_fenced.load(),   servers_unreachable.load(),     requests_resent_after_cut.load()};
  }
};
// Where pull replies leave what they carry besides values: the version of
// each slice (by key, `num_versions` of them) and the deltas of the tensors
// whose pulls are deltas (null: none). KVClient::Impl's, borrowed for the
// client's lifetime.
struct PullSinks {
  std::atomic<uint64_t>* versions = nullptr;
  size_t num_versions = 0;
  DeltaPulls* delta_pulls = nullptr;
};

// Owns the ZeroMQ context and the links (every socket); runs the loop that
// sends queued requests, matches replies to them and expires the late ones.
// Thread-safe: callers enqueue and read under mu_ or atomics; the I/O state
// is io_mu_'s.
class IoThread {
 public:
  IoThread(std::string scheduler, const KVClientOptions& options)
      : options_(options),
        wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        scheduler_({.scheduler = std::move(scheduler),
                    .heartbeat_interval = options.heartbeat_interval,
                    .heartbeat_timeout = options.heartbeat_timeout,
                    .scheduler_recovery_timeout = options.scheduler_recovery_timeout,
                    .goes_on = "Training goes on",
                    .clock = options.clock}) {}
  ~IoThread() {
    stopping_.store(true, std::memory_order_release);
    Wake();
    if (thread_.joinable()) thread_.join();
    close(wake_fd_);
  }

  absl::Status Start() {
    if (wake_fd_ < 0 || !caller_io_.ok()) return absl::InternalError("eventfd failed");
    PS_ASSIGN_OR_RETURN(security_, NodeSecurity::Load(options_.security, Role::kWorker));
    {
      absl::MutexLock lock(&io_mu_);  // no other thread yet; the I/O state is io_mu_'s all the same
      PS_RETURN_IF_ERROR(scheduler_.Connect(context_, security_));
    }
    PS_RETURN_IF_ERROR(metrics_.Start(options_.metrics));
    thread_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

  // The keys this client runs with; valid after Start.
  const NodeSecurity& security() const { return security_; }

  void Enqueue(std::vector<Outgoing> requests) {
    queue_.Push(std::move(requests));
    if (!SendDirect()) Wake();
  }

  // The caller's own I/O over tcp (kv_client_direct.cc), which saves the two
  // thread hops of a request: the caller sends what it queued itself, and a
  // caller that waits collects replies itself instead of sleeping until the
  // I/O thread wakes it. Whoever does I/O holds io_mu_: the I/O thread
  // everywhere but in its poll, or a caller. Only without shared-memory
  // channels (those have the I/O thread's spinning loop) and once the
  // servers are known.
  bool SendDirect();
  // Collects replies until `done()` or `deadline` (real time).
  void WaitDirect(absl::FunctionRef<bool()> done, absl::Time deadline);

  // Waits for the cluster view; kDeadlineExceeded or the scheduler's reason
  // for ending the job.
  absl::StatusOr<ClusterViewMsg> AwaitView(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return view_.has_value() || !fatal_.ok(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
      return absl::DeadlineExceededError(absl::StrCat("no cluster view from scheduler ", options_.scheduler, " within ",
                                                      absl::FormatDuration(timeout),
                                                      " (the job has not got all its servers and workers)"));
    }
    if (!fatal_.ok()) return fatal_;
    return *view_;
  }

  // And the values delta pulls move on (null: none; borrowed likewise).
  void set_versions(std::atomic<uint64_t>* versions, size_t n, DeltaPulls* delta_pulls) {
    absl::MutexLock lock(&mu_);
    pull_sinks_ = {versions, n, delta_pulls};
  }

  // Heartbeats start once the node has an id; the rank and incarnation go
  // into a re-registration with a restarted scheduler.
  void set_identity(uint32_t id, int rank, uint64_t incarnation) {
    absl::MutexLock lock(&io_mu_);
    scheduler_.set_identity(id, rank, incarnation);
  }

  // The job keeps several copies of each slice (RegisterReplyMsg::replicas):
  // pushes are kept until answered, and a dead server's slices fail over.
  void set_replicated() {
    absl::MutexLock lock(&io_mu_);
    routing_.set_replicated();
    for (ServerLink& link : links_) link.replay.set_replicated();
  }

  int shm_servers() const { return shm_servers_.load(std::memory_order_relaxed); }
  // Servers of the latest view, those that joined the running job included.
  int servers() const { return servers_.load(std::memory_order_acquire); }
  ClientMetrics& metrics() { return metrics_; }
  // The latest cluster view (none before the first).
  std::optional<ClusterViewMsg> latest_view() {
    absl::MutexLock lock(&mu_);
    return view_;
  }

  CallerIoStats caller_io_stats() const { return caller_io_.stats(); }
  // --replicas: server `rank` died and backups lead its slices now (until a
  // new server joins under its rank).
  bool failed_over(int rank) {
    absl::MutexLock lock(&io_mu_);
    return rank >= 0 && rank < static_cast<int>(links_.size()) && links_[rank].failed_over;
  }
  RecoveryStats recovery_stats() const { return recovery_.Snapshot(); }

 private:
  // The client's clock (KVClientOptions::clock), for every deadline.
  absl::Time Now() const { return ClockOr(options_.clock)->Now(); }
  void Wake() {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }

  void Loop();
  // The loop's poll set: the wake-up, the scheduler, the servers' sockets
  // (not while callers collect their own replies) and channels; sockets by
  // their ZMQ_FD, which only says "look" (ZMQ_EVENTS): another thread may
  // use the socket meanwhile.
  void PollItems(PollSet& poll, bool servers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // After a poll (tags: kWakeTag, kSchedulerTarget, a server rank, a
  // channel): the wake-up is consumed, queued requests go out, the channels
  // that rang are read, then every socket that has input (the servers' with
  // `servers`).
  void ReadReady(absl::Span<const int> ready, bool servers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Reads the messages waiting on socket `target`, up to `max`, settling it
  // when none is left; returns how many.
  int Drain(int target, int max = 256) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Whether the scheduler's socket or (with `servers`) a server's may hold a
  // message its descriptor will not announce: a poll must not sleep.
  bool Unsettled(bool servers) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) {
    return scheduler_.unsettled() || (servers && ServersUnsettled());
  }
  bool ServersUnsettled() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) { return links_.AnyUnsettled(); }
  // Sends on server `target`'s socket (kSchedulerTarget: the scheduler's),
  // which is unsettled from then on.
  absl::Status SendOn(int target, const Envelope& envelope, std::vector<zmq::message_t> payloads = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // A caller's round of I/O: sends the queue, reads the servers' sockets
  // that are unsettled or whose descriptor fired (`fired`, by rank), and
  // wakes the I/O thread for what is its to do. It reads a socket to the
  // end, except that it stops once `done()` holds and nothing else is in
  // flight (the receive that finds nothing costs two system calls).
  // Returns the servers' ZMQ_FDs to sleep on, by rank (-1: closed).
  std::vector<int> DirectRound(const std::vector<bool>& fired, absl::FunctionRef<bool()> done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  bool Direct() const {
    return servers_known_.load(std::memory_order_acquire) && shm_servers_.load(std::memory_order_relaxed) == 0 &&
           options_.caller_io;
  }
  // Sends what callers queued; returns how many requests it took.
  size_t SendQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void Send(Outgoing& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void SendToScheduler(Outgoing& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // A new request to server `target`: numbered (a push), held while the
  // server is down, or sent.
  void SendNew(int target, Envelope envelope, std::vector<zmq::message_t> payloads,
               std::vector<Destination> destinations, absl::Duration timeout, std::shared_ptr<Op> op)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // The fence across a move (routing.h): whether `out` must wait behind an
  // earlier request for its slices (then routing_ keeps it); ReleaseFenced
  // sends, in order, those nothing holds back any more.
  bool Fence(Outgoing& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void ReleaseFenced() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // The keys of requests in flight by an older view to a live server that
  // no longer leads them (it may refuse them).
  absl::flat_hash_set<uint32_t> KeysOffRoute() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Cuts a request by the servers leading its slices now (request_split.h);
  // `op` owes one reply per part. Parts already numbered (`numbered`) go as
  // they are (held at a server that is down), others through SendNew; and
  // so do the parts for server `fresh_at` (>= 0): it refused the push whole,
  // so they are new there, numbered again.
  void SendSplit(int target, Envelope envelope, std::vector<zmq::message_t> payloads,
                 std::vector<Destination> destinations, absl::Duration timeout, std::shared_ptr<Op> op, bool numbered,
                 int fresh_at = -1) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // --replicas: server `target` died and backups lead its slices now: what
  // it was sent and never answered goes to them, numbered as it was for it
  // (PushRequestMsg::origin), first every push it may have lacked, in order.
  void FailOver(int target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, io_mu_);
  // FailOver's pushes: every copy kept for server `target` and not answered,
  // in order, as the `held` request of a caller where one waits (marked in
  // `sent`); returns how many.
  size_t FailOverPushes(int target, std::vector<Held>& held, std::vector<bool>& sent)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // A push numbered for server `target`, going to the leaders of its slices now.
  void NumberedFor(int target, Envelope& env) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // A held push whose copy is gone (its server had it): only the pull riding
  // on it is owed, which it becomes; false when nothing is (its caller's
  // reply is settled).
  bool OnlyPullOwed(Held& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void OnMessage(int target, RawMessage raw) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void OnUnsolicited(const Envelope& env) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void OnView(const ClusterViewMsg& msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, io_mu_);
  // Completes request `req` with the reply `env` of `peer`.
  void OnReply(const std::string& peer, Envelope& env, std::vector<zmq::message_t>& payloads, const InFlight& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // kDataLoss naming the slice for a reply that is not what `req` asked for
  // (keys, lengths, frame sizes, a compressed frame's declared count).
  static absl::Status CheckPullReply(const PullReplyMsg& reply, const std::vector<zmq::message_t>& payloads,
                                     const InFlight& req);
  absl::Status DeliverPull(const PullReplyMsg& reply, std::vector<zmq::message_t>& payloads, const InFlight& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void Finish(uint64_t request_id, const absl::Status& status, Envelope* reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void ExpireRequests() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Replaces the socket to server `target`, failing what was in flight to it.
  void ResetServer(int target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void FailAll(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void ConnectServers(const ClusterViewMsg& view) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, io_mu_);
  // A later view: servers that died or were replaced.
  void UpdateServers(const ClusterViewMsg& view) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, io_mu_);
  void MarkServerDown(int target, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, io_mu_);
  void RecoverServer(int target, const NodeInfo& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, io_mu_);
  // To a replacement server: every push its checkpoint may lack, in order,
  // then the `held` requests not among them.
  void ResendTo(int target, std::vector<Held> held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Sends a request to a live server socket, tracking it under a new id
  // (returned).
  uint64_t SendToServer(int target, Envelope envelope, std::vector<zmq::message_t> payloads,
                        std::vector<Destination> destinations, absl::Duration timeout, std::shared_ptr<Op> op)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void OnDurable(int target, uint64_t durable) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Server `target` refused request `id` as routed by an older view (`err`
  // carries its epoch): the request waits in routing_ to be routed again.
  // False when it cannot go again (not in flight, or its payload is gone):
  // the refusal is then its answer.
  bool OnMoved(int target, uint64_t id, const ErrorMsg& err) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Routes again the moved requests whose newer view came (or whose retry
  // time passed); fails those past their deadline.
  void RetryMoved() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Server `target` answered request `id`: a replicated job's copy of the
  // push goes (PushReplay::OnAcked).
  void OnAnswered(int target, uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Request `id` on its way to server `target`: through its shared-memory
  // channel, held while one is being set up, or through the socket. The
  // first request to a server asks it for a channel.
  void Transmit(int target, uint64_t id, const Envelope& envelope, std::vector<zmq::message_t> payloads)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void OfferShm(int target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // The server's answer to the offer (a grant, or why not).
  void OnShmAnswer(int target, const Envelope& env) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // The offer is settled: held requests go out.
  void ShmSettled(int target, std::unique_ptr<ShmChannel> channel, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void PollShm(int target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Drops server `target`'s channel; `retry`: ask again on the next request.
  // Unless the socket goes too (`why` cancelled), what was in flight on the
  // channel goes again through the socket: the server answers a pull again
  // and drops a push it applied already (by its sequence number).
  void CloseShm(int target, const absl::Status& why, bool retry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void ExpireShmOffers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // What CloseShm sends again through the socket.
  void ResendOffShm(int target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // How long the loop's next poll may sleep: zero when a channel or the
  // queue got something while it spun (requests in flight on shared memory).
  absl::Duration SpinBeforePoll(absl::Duration wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Heartbeats, and the scheduler presumed down or dead (SchedulerLink).
  // `now`: at once (the servers it cannot reach changed), else when due.
  void Heartbeat(bool now = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Servers this worker waits on that answer nothing (kv_client_reachability.cc):
  // probes them, says which it cannot reach, and with one copy of each
  // slice sends such a server its requests in flight again once it answers.
  void CheckReachability() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void Probe(int target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void OnUnreachable(int target, bool first) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void OnReachableAgain(int target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void ResendInFlight(int target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // A push while the copies kept to re-send fill their budget (the server's
  // checkpoint lags): it waits, in order, up to its timeout; SendOverBudget
  // sends what a checkpoint let go and fails what waited too long.
  void WaitForReplayBudget(int target, Held held) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void SendOverBudget(int target, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void PublishMetrics() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // kUnauthenticated from the scheduler: it was restarted and does not know
  // this connection. Re-registers under this node's id (once per interval).
  void Reregister() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // The restarted scheduler took this node back: the requests it never
  // answered go to it again.
  void OnReregistered(const Envelope& env) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Ends every request: the scheduler is gone or ended the job.
  void SetFatal(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void ReleaseServerSockets() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Closes server `target`'s socket (if open), dropping what is queued on it.
  void DropServerSocket(int target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);

  const KVClientOptions options_;
  const int wake_fd_;  // callers write to it to wake the I/O thread
  zmq::context_t context_;
  NodeSecurity security_;  // set by Start, then read only
  std::thread thread_;
  std::atomic<bool> stopping_{false};

  // Held by whoever does I/O (see SendDirect): the I/O thread, except while
  // it sleeps in poll, or a caller doing its own. It guards the I/O state.
  absl::Mutex io_mu_;
  SchedulerLink scheduler_ ABSL_GUARDED_BY(io_mu_);                   // connected by Start
  ServerLinks links_ ABSL_GUARDED_BY(io_mu_){&context_, &security_};  // by rank, from the first cluster view
  Routing routing_ ABSL_GUARDED_BY(io_mu_);                           // where each slice goes, and what a move holds
  InFlightRequests in_flight_ ABSL_GUARDED_BY(io_mu_);
  // A server silent for kTcpUserTimeout may have lost a connection and what it held: unreachable by then.
  ServerReachability reachability_ ABSL_GUARDED_BY(io_mu_){
      {options_.heartbeat_interval, std::min(options_.heartbeat_timeout, kTcpUserTimeout)}};
  absl::Time next_reachability_check_ ABSL_GUARDED_BY(io_mu_);
  bool poll_items_stale_ ABSL_GUARDED_BY(io_mu_) = false;
  // Why the client must stop (the scheduler ended the job or refused us, a
  // re-sent push was refused); SetFatal acts on it at the end of the loop's
  // round, outside any lock.
  absl::Status pending_fatal_ ABSL_GUARDED_BY(io_mu_);

  // What callers read or hand over without the I/O lock.
  absl::Mutex mu_;
  std::optional<ClusterViewMsg> view_ ABSL_GUARDED_BY(mu_);
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
  PullSinks pull_sinks_ ABSL_GUARDED_BY(mu_);
  RequestQueue queue_;  // callers' requests, to send
  CallerIo caller_io_;  // callers in WaitDirect, and what they did
  RecoveryCounters recovery_;
  std::atomic<int> shm_servers_{0};         // servers with a shared-memory channel, for shm_servers()
  std::atomic<int> servers_{0};             // links_.size(), for servers()
  std::atomic<bool> servers_known_{false};  // set once ConnectServers ran
  ClientMetrics metrics_;                   // counted by the I/O thread; Wait() observes from callers
};

}  // namespace client_internal

// The client behind KVClient's contract (kv_client.h says what each call
// does). Thread-safe as KVClient is: the model and the partition map are
// written by RegisterModel before any data call, tickets under tickets_mu_.
class KVClient::Impl {
 public:
  using Ticket = KVClient::Ticket;
  explicit Impl(const KVClientOptions& options) : options_(options) {}
  ~Impl();

  absl::Status Start();
  int rank() const { return rank_; }
  uint32_t node_id() const { return node_id_; }
  int num_workers() const { return num_workers_; }
  // The job's servers now (it may grow: ps_server --join).
  int num_servers() const { return io_ ? std::max(num_servers_, io_->servers()) : num_servers_; }
  const ModelSpec& model() const { return model_; }
  const PartitionMap& partition_map() const { return map_; }

  absl::Status RegisterModel(const ModelSpec& model);
  absl::StatusOr<int> TensorIndex(absl::string_view name) const;
  absl::StatusOr<int> TableIndex(absl::string_view name) const;
  Ticket Exchange(const StepRequest& request);
  absl::Status Wait(Ticket ticket);
  absl::StatusOr<bool> Ready(Ticket ticket, absl::Duration timeout);
  absl::Status Barrier(absl::string_view name, absl::Duration timeout);
  absl::StatusOr<int64_t> ResumeStep();
  absl::Status Finish();
  absl::StatusOr<ServerStats> GetServerStats(int rank);
  absl::StatusOr<std::optional<ServerStats>> LiveServerStats(int rank);
  absl::StatusOr<WorkerInfo> Worker(int rank) const;
  ClientStats stats() const;

 private:
  using Op = client_internal::Op;
  using Outgoing = client_internal::Outgoing;
  using RequestBuilder = client_internal::RequestBuilder;

  // Hands the requests of `op` to the I/O thread.
  void Submit(std::vector<Outgoing> requests, const std::shared_ptr<Op>& op);
  Ticket Track(std::shared_ptr<Op> op);
  Ticket Failed(absl::Status status);
  // The ticket's state, or kNotFound naming it.
  absl::StatusOr<std::shared_ptr<Op>> Find(Ticket ticket);
  // Waits for `op` until `deadline` (real time); whether it is complete.
  bool AwaitOp(const std::shared_ptr<Op>& op, absl::Time deadline);
  // kFailedPrecondition before RegisterModel; kNotFound for an unknown tensor
  // index; kInvalidArgument for a tensor listed twice, a wrong size or a
  // part that is not whole slices.
  template <typename Buffer>
  absl::Status CheckBuffers(absl::Span<const Buffer> buffers) const;
  // The keys of the slices that make up elements [offset, offset + size) of
  // `tensor`; empty when that is not whole slices (or lies outside it).
  absl::Span<const uint32_t> SlicesOf(int tensor, uint64_t offset, uint64_t size) const;
  // Add the slices of each tensor to the requests for the servers holding
  // them. A pull added after a push of the same slices rides on it.
  // Gradients of a tensor that compresses go as frames (compression_),
  // values to assign as they are.
  void AddPush(absl::Span<const ConstTensorBuffer> grads, int64_t step, bool assign, const std::shared_ptr<Op>& op,
               RequestBuilder& requests);
  void AddPull(absl::Span<const TensorBuffer> params, int64_t step, RequestBuilder& requests);
  // The same for table rows (kv_client_rows.cc); rows go after the dense
  // slices of each request. Errors as described for the table calls.
  absl::Status CheckRows(absl::Span<const ConstRowBuffer> grads, absl::Span<const RowBuffer> rows) const;
  absl::Status AddPushRows(absl::Span<const ConstRowBuffer> grads, int64_t step, bool assign, RequestBuilder& requests);
  absl::Status AddPullRows(absl::Span<const RowBuffer> rows, int64_t step, RequestBuilder& requests);
  // The pull riding on request `req`'s push, or its own pull, at `step`.
  PullRequestMsg& PullOf(Outgoing& req, int64_t step) const;
  // `assign`: the pushes carry values (PushRequestMsg::assign).
  Ticket SubmitRequests(RequestBuilder& requests, std::shared_ptr<Op> op, bool assign = false);
  // Registers with the scheduler, trying again while the send finds no
  // connection; kDeadlineExceeded once register_timeout has passed.
  absl::StatusOr<Envelope> Register();
  // Sends one control request and waits for its reply.
  absl::StatusOr<Envelope> Call(int target, Body body, absl::Duration timeout);

  const KVClientOptions options_;
  std::unique_ptr<client_internal::IoThread> io_;
  uint32_t node_id_ = 0;
  int rank_ = -1;
  int num_workers_ = 0;
  int num_servers_ = 0;
  ModelSpec model_;
  PartitionMap map_;
  // Per slice key: the version the last pull returned; sent with pushes so
  // servers can measure staleness.
  std::unique_ptr<std::atomic<uint64_t>[]> pulled_version_;
  std::vector<uint64_t> table_hash_;  // per table: TableHash(name)
  // The next number of a pull of table rows (PullRequestMsg::pull_id):
  // from a random start, so that a restarted worker's numbers are not its
  // predecessor's.
  std::atomic<uint64_t> next_pull_id_{absl::Uniform<uint64_t>(absl::BitGen(), 1, uint64_t{1} << 62)};
  std::unique_ptr<PushCompression> compression_;
  std::unique_ptr<DeltaPulls> delta_pulls_;  // null: no tensor's pulls are deltas

  absl::Mutex tickets_mu_;
  absl::flat_hash_map<Ticket, std::shared_ptr<Op>> tickets_ ABSL_GUARDED_BY(tickets_mu_);
  Ticket next_ticket_ ABSL_GUARDED_BY(tickets_mu_) = 1;
};

}  // namespace ps

#endif  // PS_WORKER_CLIENT_KV_CLIENT_INTERNAL_H_
