#ifndef PS_WORKER_CLIENT_KV_CLIENT_INTERNAL_H_
#define PS_WORKER_CLIENT_KV_CLIENT_INTERNAL_H_

// KVClient's inside, shared by its three source files and by nothing else:
// kv_client.cc (the API: building requests, tickets), kv_client_io.cc (the
// I/O thread: sockets, sending, replies, deadlines, heartbeats) and
// kv_client_recovery.cc (servers that die and come back, a scheduler that
// restarts: what is held, re-sent and in which order).

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
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "worker/client/client_metrics.h"
#include "common/messages.h"
#include "common/poll_set.h"
#include "common/node_runtime.h"
#include "common/security.h"
#include "common/shm_channel.h"
#include "common/status_macros.h"
#include "common/transport.h"
#include "worker/client/kv_client.h"
#include "worker/client/push_replay.h"

namespace ps {

// Poll tags: a server's is its rank.
inline constexpr int kSchedulerTarget = -1;
inline constexpr int kWakeTag = -2;  // the eventfd callers write to wake the I/O thread
// Server r's shared-memory channel: tag kShmTagBase - r.
inline constexpr int kShmTagBase = -3;
// How soon the I/O thread looks at the servers' sockets again after callers
// collected their own replies (KVClient::IoThread::WaitDirect).
inline constexpr absl::Duration kDriverRound = absl::Milliseconds(2);


// What a ticket stands for: one or more requests and the frames lent to
// ZeroMQ. Complete when every reply is in and ZeroMQ has let go of every
// frame, so the caller's buffers are free again.
struct KVClient::Op {
  absl::Mutex mu;
  int replies_pending ABSL_GUARDED_BY(mu) = 0;
  int frames_held ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);
  Envelope reply ABSL_GUARDED_BY(mu);  // control requests: the reply

  bool Done() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return replies_pending == 0 && frames_held == 0;
  }
  void Fail(absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (status.ok()) status = std::move(s);
  }
};

// Where one pulled slice lands in the caller's buffer. A table shard's rows
// (rows > 0) are scattered: reply row `local` goes to every `dst` listed
// with it.
struct Destination {
  uint32_t key = 0;
  uint64_t length = 0;  // from our own partition map or request, never from the reply
  float* data = nullptr;
  uint32_t rows = 0;
  uint32_t dim = 0;
  std::vector<std::pair<uint32_t, float*>> scatter;  // (local row, dst)
};

// One request to one peer, built on the caller's thread, sent by the I/O thread.
struct KVClient::Outgoing {
  int target = kSchedulerTarget;
  Envelope envelope;
  std::vector<zmq::message_t> payloads;
  std::vector<Destination> destinations;  // pull: where each slice lands
  absl::Duration timeout;
  std::shared_ptr<Op> op;
};

// Groups slices into requests: one per server, or several when a server's
// slices exceed max_request_bytes, so that a large tensor travels as a
// pipeline (the server applies and answers one part while the next arrives).
// The pull of a slice rides on the request that pushes it.
class KVClient::RequestBuilder {
 public:
  RequestBuilder(int num_servers, uint64_t max_bytes) : open_(num_servers, -1), bytes_(num_servers, 0), max_bytes_(max_bytes) {}

  // The request for `slice`: the one already carrying `key`, or the server's
  // open request if it has room, or a new one.
  Outgoing& For(const Slice& slice) {
    if (auto it = by_key_.find(slice.key); it != by_key_.end()) return requests_[it->second];
    const uint64_t bytes = slice.length * sizeof(float);
    int& open = open_[slice.server];
    if (open < 0 || (bytes_[slice.server] > 0 && bytes_[slice.server] + bytes > max_bytes_)) {
      open = static_cast<int>(requests_.size());
      requests_.emplace_back();
      requests_.back().target = slice.server;
      bytes_[slice.server] = 0;
    }
    bytes_[slice.server] += bytes;
    by_key_[slice.key] = open;
    return requests_[open];
  }
  // The requests built so far; the builder is spent afterwards.
  std::vector<Outgoing> Take() { return std::move(requests_); }

 private:
  std::vector<Outgoing> requests_;
  std::vector<int> open_;
  std::vector<uint64_t> bytes_;
  absl::flat_hash_map<uint32_t, int> by_key_;
  const uint64_t max_bytes_;
};

// Owns the ZeroMQ context and every socket; runs the loop that sends queued
// requests, matches replies to them and expires the late ones.
class KVClient::IoThread {
 public:
  IoThread(std::string scheduler, const KVClientOptions& options)
      : scheduler_endpoint_(std::move(scheduler)), options_(options),
        wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        driver_wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        runtime_({.scheduler = scheduler_endpoint_,
                  .heartbeat_interval = options.heartbeat_interval,
                  .heartbeat_timeout = options.heartbeat_timeout,
                  .scheduler_recovery_timeout = options.scheduler_recovery_timeout,
                  .goes_on = "Training goes on",
                  .clock = options.clock}) {
    runtime_.set_name("client");
  }
  ~IoThread() {
    stopping_.store(true, std::memory_order_release);
    Wake();
    if (thread_.joinable()) thread_.join();
    close(wake_fd_);
    close(driver_wake_fd_);
  }

  absl::Status Start() {
    if (wake_fd_ < 0 || driver_wake_fd_ < 0) return absl::InternalError("eventfd failed");
    PS_ASSIGN_OR_RETURN(security_, NodeSecurity::Load(options_.security, Role::kWorker));
    PS_ASSIGN_OR_RETURN(scheduler_, ConnectDealer(context_, scheduler_endpoint_, security_, Traffic::kControl,
                                                  security_.scheduler_public_key()));
    PS_RETURN_IF_ERROR(metrics_.Start(options_.metrics));
    runtime_.Registering();
    thread_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

  // The keys this client runs with; valid after Start.
  const NodeSecurity& security() const { return security_; }

  void Enqueue(std::vector<Outgoing> requests) {
    {
      absl::MutexLock lock(&mu_);
      for (auto& r : requests) queue_.push_back(std::move(r));
    }
    queued_.store(true, std::memory_order_release);
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
      return absl::DeadlineExceededError(absl::StrCat(
          "no cluster view from scheduler ", scheduler_endpoint_, " within ",
          absl::FormatDuration(timeout), " (the job has not got all its servers and workers)"));
    }
    if (!fatal_.ok()) return fatal_;
    return *view_;
  }

  void set_versions(std::atomic<uint64_t>* versions, size_t n) {
    absl::MutexLock lock(&mu_);
    versions_ = versions;
    num_versions_ = n;
  }

  // Heartbeats start once the node has an id; the rank and incarnation go
  // into a re-registration with a restarted scheduler.
  void set_identity(uint32_t id, int rank, uint64_t incarnation) {
    rank_.store(rank, std::memory_order_relaxed);
    incarnation_.store(incarnation, std::memory_order_relaxed);
    node_id_.store(id, std::memory_order_release);
  }

  int shm_servers() const { return shm_servers_.load(std::memory_order_relaxed); }
  ClientMetrics& metrics() { return metrics_; }
  // The latest cluster view (none before the first).
  std::optional<ClusterViewMsg> latest_view() {
    absl::MutexLock lock(&mu_);
    return view_;
  }

  CallerIoStats caller_io_stats() const {
    return {caller_sent_.load(std::memory_order_relaxed), caller_read_.load(std::memory_order_relaxed)};
  }
  RecoveryStats recovery_stats() {
    absl::MutexLock lock(&mu_);
    RecoveryStats r = recovery_;
    r.replay_bytes = replay_bytes_.load(std::memory_order_relaxed);
    return r;
  }

 private:
  struct InFlight {
    std::shared_ptr<Op> op;  // null: an internal re-send whose answer nobody waits for
    int target;
    absl::Time deadline;
    std::vector<Destination> destinations;
    Envelope envelope;        // servers: to send again after a restart (payload: the replay copy)
    absl::Duration timeout;
  };
  // A request held while its server is down.
  struct Held {
    Envelope envelope;
    std::vector<Destination> destinations;
    absl::Duration timeout;
    std::shared_ptr<Op> op;
    std::vector<zmq::message_t> payloads;  // empty: it was in flight (use the replay copy)
  };
  // A request sent while a shared-memory channel is being set up: it goes
  // once the channel is there (or is not), so that order is kept.
  struct Unsent {
    uint64_t id;
    Envelope envelope;
    std::vector<zmq::message_t> payloads;
  };
  enum class ShmState { kUntried, kOffered, kOn, kOff };
  // What the client knows of one server rank.
  struct ServerLink {
    uint32_t node_id = 0;
    bool down = false;          // declared dead; requests are held
    absl::Status gave_up;       // no replacement in time: requests fail with this
    absl::Time down_since;
    PushReplay replay;          // numbering, and the copies its checkpoint lacks
    std::vector<Held> held;
    // The same-host data plane (kv_client_shm.cc).
    ShmState shm_state = ShmState::kUntried;
    std::unique_ptr<ShmChannel> shm;  // kOn
    uint64_t shm_offer_id = 0;        // kOffered: the request
    absl::Time shm_offer_deadline;
    absl::Time shm_retry_at;          // kUntried after a busy server: ask again from then
    std::vector<Unsent> awaiting_shm;  // kOffered: sent after the answer
    // Its socket may hold a reply its descriptor will not announce: it was
    // used since a drain that emptied it (PollSet::AddSocketFd).
    bool unsettled = true;
  };

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
    return scheduler_unsettled_ || (servers && ServersUnsettled());
  }
  bool ServersUnsettled() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  bool& UnsettledFlag(int target) { return target == kSchedulerTarget ? scheduler_unsettled_ : links_[target].unsettled; }
  // Sends on server `target`'s socket (kSchedulerTarget: the scheduler's),
  // which is unsettled from then on.
  absl::Status SendOn(int target, const Envelope& envelope, std::vector<zmq::message_t> payloads = {});
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
  size_t SendQueued();
  void Send(Outgoing& out);
  void OnMessage(int target, RawMessage raw);
  void OnUnsolicited(const Envelope& env);
  void OnView(const ClusterViewMsg& view) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes request `req` with the reply `env` of `peer`.
  void OnReply(const std::string& peer, Envelope& env, std::vector<zmq::message_t>& payloads, const InFlight& req);
  absl::Status DeliverPull(const PullReplyMsg& reply, std::vector<zmq::message_t>& payloads,
                           const InFlight& req);
  void Finish(uint64_t request_id, const absl::Status& status, Envelope* reply);
  void ExpireRequests();
  // Replaces the socket to server `target`, failing what was in flight to it.
  void ResetServer(int target);
  void FailAll(const absl::Status& status);
  void ConnectServers(const ClusterViewMsg& view);
  // A DEALER to a server, a CURVE client of `public_key` when this node has
  // keys; kFailedPrecondition for plaintext off loopback (no --insecure).
  absl::StatusOr<zmq::socket_t> ConnectServer(const std::string& endpoint, const std::string& public_key);
  // A later view: servers that died or were replaced.
  void UpdateServers(const ClusterViewMsg& view) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkServerDown(int target, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecoverServer(int target, const NodeInfo& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // To a replacement server: every push its checkpoint may lack, in order,
  // then the `held` requests not among them.
  void ResendTo(int target, std::vector<Held> held);
  void FailHeld(ServerLink& link, const absl::Status& status);
  // Sends a request to a live server socket, tracking it under a new id.
  void SendToServer(int target, Envelope envelope, std::vector<zmq::message_t> payloads,
                    std::vector<Destination> destinations, absl::Duration timeout, std::shared_ptr<Op> op);
  void OnDurable(int target, uint64_t durable);
  // Request `id` on its way to server `target`: through its shared-memory
  // channel, held while one is being set up, or through the socket. The
  // first request to a server asks it for a channel.
  void Transmit(int target, uint64_t id, const Envelope& envelope, std::vector<zmq::message_t> payloads);
  void OfferShm(int target);
  // The server's answer to the offer (a grant, or why not).
  void OnShmAnswer(int target, const Envelope& env);
  // The offer is settled: held requests go out.
  void ShmSettled(int target, std::unique_ptr<ShmChannel> channel, const absl::Status& why);
  void PollShm(int target);
  // Drops server `target`'s channel; `retry`: ask again on the next request.
  void CloseShm(int target, const absl::Status& why, bool retry);
  void ExpireShmOffers();
  // How long the loop's next poll may sleep: zero when a channel or the
  // queue got something while it spun (requests in flight on shared memory).
  absl::Duration SpinBeforePoll(absl::Duration wait);
  // Heartbeats, and the scheduler presumed down or dead (the node runtime).
  void Heartbeat();
  void PublishMetrics();
  // kUnauthenticated from the scheduler: it was restarted and does not know
  // this connection. Re-registers under this node's id (once per interval).
  void Reregister();
  // The restarted scheduler took this node back: the requests it never
  // answered go to it again.
  void OnReregistered(const Envelope& env);
  // Ends every request: the scheduler is gone or ended the job.
  void SetFatal(const absl::Status& status);
  void ReleaseServerSockets();
  // Closes server `target`'s socket (if open), dropping what is queued on it.
  void DropServerSocket(int target);

  const std::string scheduler_endpoint_;
  const KVClientOptions options_;
  const int wake_fd_;
  // Rung when an op completes while callers wait in WaitDirect: one of them
  // may sleep on sockets another thread has just read.
  const int driver_wake_fd_;
  zmq::context_t context_;
  zmq::socket_t scheduler_;                // I/O thread only (after Start)
  std::vector<zmq::socket_t> servers_;     // I/O thread only, by rank
  std::vector<std::string> server_endpoints_;
  std::vector<std::string> server_keys_;   // by rank, from the cluster view
  NodeSecurity security_;                  // set by Start, then read only
  std::vector<ServerLink> links_;                      // I/O thread only, by rank
  std::atomic<uint32_t> node_id_{0};
  std::atomic<int> rank_{-1};
  std::atomic<uint64_t> incarnation_{0};
  NodeRuntime runtime_;                                // I/O thread only (after Start)
  uint64_t reregister_id_ = 0;                         // I/O thread only: the re-registration in flight
  // I/O thread only: why the client must stop (the scheduler ended the job or
  // refused us, a re-sent push was refused); SetFatal acts on it at the end
  // of the loop's round, outside any lock.
  absl::Status pending_fatal_;
  absl::flat_hash_map<uint64_t, InFlight> in_flight_;  // I/O thread only
  uint64_t next_request_id_ = 1;                       // I/O thread only
  bool poll_items_stale_ = false;                      // I/O thread only
  bool scheduler_unsettled_ = true;                    // I/O thread only: as ServerLink::unsettled
  std::thread thread_;
  std::atomic<bool> stopping_{false};

  absl::Mutex mu_;
  std::deque<Outgoing> queue_ ABSL_GUARDED_BY(mu_);
  std::optional<ClusterViewMsg> view_ ABSL_GUARDED_BY(mu_);
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t>* versions_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t num_versions_ ABSL_GUARDED_BY(mu_) = 0;
  RecoveryStats recovery_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> replay_bytes_{0};
  std::atomic<int> shm_servers_{0};
  std::atomic<bool> queued_{false};  // queue_ may hold requests (a look without the lock)
  // Held by whoever does I/O (see SendDirect); the I/O thread's state above
  // marked "I/O thread only" is read and written under it.
  absl::Mutex io_mu_;
  std::atomic<bool> servers_known_{false};  // set once ConnectServers ran
  std::atomic<int> drivers_{0};             // callers in WaitDirect
  std::atomic<uint64_t> caller_sent_{0}, caller_read_{0};  // caller_io_stats()
  std::thread::id io_thread_id_;
  ClientMetrics metrics_;  // counted by the I/O thread; Wait() observes from callers
};

}  // namespace ps

#endif  // PS_WORKER_CLIENT_KV_CLIENT_INTERNAL_H_
