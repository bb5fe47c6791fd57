#include "worker/kv_client.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/codec.h"
#include "common/dispatch.h"
#include "common/node_runtime.h"
#include "common/status_macros.h"
#include "common/transport.h"
#include "glog/logging.h"
#include "worker/push_replay.h"

namespace ps {
namespace {

constexpr int kSchedulerTarget = -1;
// A server that answers a pull with an error of its own (naming what the
// pull waited for) should win over our local timer by this much.
constexpr absl::Duration kReplyGrace = absl::Seconds(2);
// ZeroMQ's reconnect interval: how often a registration that found no
// connection is tried again.
constexpr absl::Duration kRegisterRetry = absl::Milliseconds(100);

}  // namespace

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

// Where one pulled slice lands in the caller's buffer.
struct Destination {
  uint32_t key;
  uint64_t length;  // from our own partition map, never from the reply
  float* data;
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

void KVClient::ReleaseFrame(void* /*data*/, void* hint) {
  auto* op = static_cast<std::shared_ptr<Op>*>(hint);
  {
    absl::MutexLock lock(&(*op)->mu);
    --(*op)->frames_held;
  }
  delete op;
}

void KVClient::FailOp(const std::shared_ptr<Op>& op, const absl::Status& status) {
  absl::MutexLock lock(&op->mu);
  op->Fail(status);
  --op->replies_pending;
}

// Owns the ZeroMQ context and every socket; runs the loop that sends queued
// requests, matches replies to them and expires the late ones.
class KVClient::IoThread {
 public:
  IoThread(std::string scheduler, const KVClientOptions& options)
      : scheduler_endpoint_(std::move(scheduler)), options_(options),
        wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
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
  }

  absl::Status Start() {
    if (wake_fd_ < 0) return absl::InternalError("eventfd failed");
    PS_ASSIGN_OR_RETURN(security_, NodeSecurity::Load(options_.security, Role::kWorker));
    PS_ASSIGN_OR_RETURN(scheduler_, ConnectDealer(context_, scheduler_endpoint_, security_, Traffic::kControl,
                                                  security_.scheduler_public_key()));
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
    Wake();
  }

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
  // What the client knows of one server rank.
  struct ServerLink {
    uint32_t node_id = 0;
    bool down = false;          // declared dead; requests are held
    absl::Status gave_up;       // no replacement in time: requests fail with this
    absl::Time down_since;
    PushReplay replay;          // numbering, and the copies its checkpoint lacks
    std::vector<Held> held;
  };

  void Wake() {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }

  void Loop();
  void SendQueued();
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
  void FailHeld(ServerLink& link, const absl::Status& status);
  // Sends a request to a live server socket, tracking it under a new id.
  void SendToServer(int target, Envelope envelope, std::vector<zmq::message_t> payloads,
                    std::vector<Destination> destinations, absl::Duration timeout, std::shared_ptr<Op> op);
  void OnDurable(int target, uint64_t durable);
  // Heartbeats, and the scheduler presumed down or dead (the node runtime).
  void Heartbeat();
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
};

void KVClient::IoThread::Loop() {
  std::vector<zmq::pollitem_t> items;
  std::vector<int> item_target;  // items[i] is the socket of item_target[i]
  size_t servers_polled = 0;
  absl::Time next_expiry_check = runtime_.Now();
  while (!stopping_.load(std::memory_order_acquire)) {
    if (items.empty() || poll_items_stale_ || servers_polled != servers_.size()) {
      items = {{nullptr, wake_fd_, ZMQ_POLLIN, 0}, {scheduler_.handle(), 0, ZMQ_POLLIN, 0}};
      item_target = {kSchedulerTarget, kSchedulerTarget};
      for (size_t r = 0; r < servers_.size(); ++r) {
        if (!servers_[r]) continue;  // closed: its reconnection failed
        items.push_back({servers_[r].handle(), 0, ZMQ_POLLIN, 0});
        item_target.push_back(static_cast<int>(r));
      }
      servers_polled = servers_.size();
      poll_items_stale_ = false;
    }
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(50));
    if (items[0].revents & ZMQ_POLLIN) {
      uint64_t count;
      (void)!read(wake_fd_, &count, sizeof(count));
    }
    SendQueued();
    const size_t polled = items.size();  // a new cluster view may add sockets below
    for (size_t i = 1; i < polled; ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      const int target = item_target[i];
      // A cluster view handled above may have closed this server's socket.
      if (target != kSchedulerTarget && !servers_[target]) continue;
      zmq::socket_t& socket = target == kSchedulerTarget ? scheduler_ : servers_[target];
      for (int n = 0; n < 256; ++n) {
        auto raw = ReceiveMessage(socket, /*routed=*/false);
        if (!raw.ok()) break;
        OnMessage(target, *std::move(raw));
      }
    }
    // Deadlines are coarse (seconds); scanning every request on every wake-up
    // would cost more than it buys.
    const absl::Time now = runtime_.Now();
    if (now >= next_expiry_check) {
      ExpireRequests();
      next_expiry_check = now + absl::Milliseconds(10);
    }
    Heartbeat();
    if (!pending_fatal_.ok()) SetFatal(pending_fatal_);
  }
  FailAll(absl::CancelledError("client shut down"));
  // Closing with linger 0 drops unsent frames, so ZeroMQ lets go of caller buffers.
  scheduler_.set(zmq::sockopt::linger, 0);
  for (auto& s : servers_) {
    if (s) s.set(zmq::sockopt::linger, 0);  // closed ones: a server that died
  }
  servers_.clear();
  scheduler_.close();
}

void KVClient::IoThread::SendQueued() {
  std::deque<Outgoing> batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(queue_);
  }
  for (Outgoing& out : batch) Send(out);
}

void KVClient::IoThread::Send(Outgoing& out) {
  const bool to_server = out.target != kSchedulerTarget;
  if (to_server && (out.target < 0 || out.target >= static_cast<int>(servers_.size()))) {
    FailOp(out.op, absl::FailedPreconditionError(absl::StrCat("no server ", out.target, " in the cluster view")));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (!fatal_.ok()) {
      FailOp(out.op, fatal_);
      return;
    }
  }
  if (!to_server) {
    const uint64_t id = next_request_id_++;
    out.envelope.request_id = id;
    out.envelope.incarnation = incarnation_.load(std::memory_order_relaxed);
    // The envelope is kept: a restarted scheduler gets it again.
    in_flight_[id] = InFlight{out.op, out.target, runtime_.Now() + out.timeout, {}, out.envelope, out.timeout};
    if (absl::Status s = SendMessage(scheduler_, nullptr, out.envelope); !s.ok()) Finish(id, s, nullptr);
    return;
  }
  ServerLink& link = links_[out.target];
  if (!link.gave_up.ok()) {
    FailOp(out.op, link.gave_up);
    return;
  }
  if (auto* push = std::get_if<PushRequestMsg>(&out.envelope.body)) {
    replay_bytes_.fetch_add(link.replay.Number(*push, out.payloads), std::memory_order_relaxed);
  }
  if (link.down) {
    link.held.push_back(
        Held{std::move(out.envelope), std::move(out.destinations), out.timeout, out.op, std::move(out.payloads)});
    absl::MutexLock lock(&mu_);
    ++recovery_.requests_held;
    return;
  }
  SendToServer(out.target, std::move(out.envelope), std::move(out.payloads), std::move(out.destinations),
               out.timeout, out.op);
}

void KVClient::IoThread::SendToServer(int target, Envelope envelope, std::vector<zmq::message_t> payloads,
                                      std::vector<Destination> destinations, absl::Duration timeout,
                                      std::shared_ptr<Op> op) {
  const uint64_t id = next_request_id_++;
  envelope.request_id = id;
  if (envelope.sender == 0) envelope.sender = node_id_.load(std::memory_order_acquire);
  envelope.incarnation = incarnation_.load(std::memory_order_relaxed);
  in_flight_[id] = InFlight{std::move(op), target, runtime_.Now() + timeout, std::move(destinations), envelope, timeout};
  zmq::socket_t& socket = servers_[target];
  if (!socket) {
    Finish(id, absl::UnavailableError(absl::StrCat("server ", target, " is unreachable (reconnect failed)")),
           nullptr);
    return;
  }
  if (absl::Status s = SendMessage(socket, nullptr, envelope, std::move(payloads)); !s.ok()) {
    Finish(id, s, nullptr);
  }
}

void KVClient::IoThread::OnDurable(int target, uint64_t durable) {
  replay_bytes_.fetch_sub(links_[target].replay.OnDurable(durable), std::memory_order_relaxed);
}

void KVClient::IoThread::Heartbeat() {
  const uint32_t id = node_id_.load(std::memory_order_acquire);
  if (id == 0) return;
  {
    absl::MutexLock lock(&mu_);
    if (!fatal_.ok()) return;
  }
  if (absl::Status s = runtime_.Check(); !s.ok()) {
    SetFatal(s);
    return;
  }
  if (!runtime_.HeartbeatDue()) return;
  Envelope beat{kProtocolVersion, 0, id, HeartbeatMsg{}};
  beat.incarnation = incarnation_.load(std::memory_order_relaxed);
  if (absl::Status s = SendMessage(scheduler_, nullptr, beat); !s.ok()) {
    LOG(WARNING) << "client: heartbeat not sent: " << s;
  }
}

void KVClient::IoThread::Reregister() {
  if (!runtime_.ReregisterDue()) return;
  reregister_id_ = next_request_id_++;
  const uint32_t id = node_id_.load(std::memory_order_acquire);
  Envelope env{kProtocolVersion, reregister_id_, id,
               RegisterRequestMsg{Role::kWorker, "", rank_.load(std::memory_order_relaxed), security_.public_key(), id}};
  env.incarnation = incarnation_.load(std::memory_order_relaxed);
  if (absl::Status s = SendMessage(scheduler_, nullptr, env); !s.ok()) {
    LOG(WARNING) << "client: re-registration not sent: " << s;
  }
}

void KVClient::IoThread::OnReregistered(const Envelope& env) {
  reregister_id_ = 0;
  if (auto* err = std::get_if<ErrorMsg>(&env.body)) {
    if (pending_fatal_.ok()) {
      pending_fatal_ = absl::Status(err->code, absl::StrCat("the restarted scheduler refused this worker: ",
                                                            err->message));
    }
    return;
  }
  std::vector<uint64_t> ids;
  for (const auto& [request, req] : in_flight_) {
    if (req.target == kSchedulerTarget) ids.push_back(request);
  }
  std::sort(ids.begin(), ids.end());
  for (uint64_t request : ids) {
    if (absl::Status s = SendMessage(scheduler_, nullptr, in_flight_[request].envelope); !s.ok()) {
      Finish(request, s, nullptr);
    }
  }
  runtime_.Reregistered(absl::StrCat("re-registered as node ", node_id_.load(), ", re-sent ", ids.size(),
                                    " requests it had not answered"));
}

void KVClient::IoThread::SetFatal(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (!fatal_.ok()) return;
    fatal_ = status;
  }
  LOG(ERROR) << "client: " << status;
  for (ServerLink& link : links_) FailHeld(link, status);
  FailAll(status);
  ReleaseServerSockets();
}

void KVClient::IoThread::ReleaseServerSockets() {
  for (size_t r = 0; r < servers_.size(); ++r) DropServerSocket(static_cast<int>(r));
}

void KVClient::IoThread::DropServerSocket(int target) {
  // Frames queued for a server that may be gone would stay lent to ZeroMQ,
  // and the callers' tickets would never complete: linger 0 drops them.
  zmq::socket_t& s = servers_[target];
  if (s) {
    s.set(zmq::sockopt::linger, 0);
    s.close();
  }
  poll_items_stale_ = true;
}

void KVClient::IoThread::FailHeld(ServerLink& link, const absl::Status& status) {
  for (Held& h : link.held) {
    if (h.op) FailOp(h.op, status);
  }
  link.held.clear();
}

void KVClient::IoThread::MarkServerDown(int target, const std::string& why) {
  ServerLink& link = links_[target];
  if (link.down) return;
  link.down = true;
  link.down_since = runtime_.Now();
  // In flight to it: held, in the order they were sent, to go again to its replacement.
  std::vector<uint64_t> ids;
  for (const auto& [id, req] : in_flight_) {
    if (req.target == target) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) {
    auto node = in_flight_.extract(id);
    InFlight& f = node.mapped();
    // An internal re-send needs no holding: its replay copy goes again.
    if (f.op) link.held.push_back(Held{std::move(f.envelope), std::move(f.destinations), f.timeout, f.op, {}});
  }
  recovery_.requests_held += ids.size();
  DropServerSocket(target);
  LOG(WARNING) << "client: server " << target << " (" << server_endpoints_[target] << ") " << why << "; "
               << link.held.size() << " requests wait up to "
               << absl::FormatDuration(options_.server_recovery_timeout) << " for its replacement, "
               << link.replay.kept().size() << " pushes kept to re-send";
  if (!link.replay.keeps()) {
    link.gave_up = absl::UnavailableError(absl::StrCat(
        "server ", target, " (", server_endpoints_[target], ") ", why,
        "; it keeps no checkpoints (start ps_server with --checkpoint_dir), so its state is lost"));
    FailHeld(link, link.gave_up);
  }
}

void KVClient::IoThread::RecoverServer(int target, const NodeInfo& node) {
  ServerLink& link = links_[target];
  auto fresh = ConnectServer(node.address, node.public_key);
  if (!fresh.ok()) {
    LOG(ERROR) << "client: cannot connect to the replacement of server " << target << ": " << fresh.status();
    return;  // stays down; the held requests fail at the recovery deadline
  }
  servers_[target] = *std::move(fresh);
  server_endpoints_[target] = node.address;
  server_keys_[target] = node.public_key;
  link.node_id = node.node_id;
  link.down = false;
  poll_items_stale_ = true;
  const absl::Duration outage = runtime_.Now() - link.down_since;
  std::vector<Held> held = std::move(link.held);
  link.held.clear();
  std::map<uint64_t, size_t> held_push;  // seq -> index in held
  for (size_t i = 0; i < held.size(); ++i) {
    if (auto* push = std::get_if<PushRequestMsg>(&held[i].envelope.body); push != nullptr && push->seq != 0) {
      held_push[push->seq] = i;
    }
  }
  // Every push its checkpoint may lack, in order (it drops those it has);
  // a push that a caller still waits for goes as that caller's request.
  std::vector<bool> sent(held.size(), false);
  for (const auto& [seq, copy] : link.replay.kept()) {
    auto it = held_push.find(seq);
    if (it == held_push.end()) {
      SendToServer(target, Envelope{kProtocolVersion, 0, 0, copy.push}, copy.Frames(), {},
                   options_.request_timeout, nullptr);
      continue;
    }
    Held& h = held[it->second];
    SendToServer(target, std::move(h.envelope), h.payloads.empty() ? copy.Frames() : std::move(h.payloads),
                 std::move(h.destinations), h.timeout, h.op);
    sent[it->second] = true;
  }
  // Then the rest, in order: pulls, stats, and pushes its checkpoint holds
  // (no copy left), of which only the pull riding on them is still owed.
  for (size_t i = 0; i < held.size(); ++i) {
    if (sent[i]) continue;
    Held& h = held[i];
    auto* push = std::get_if<PushRequestMsg>(&h.envelope.body);
    if (push != nullptr && push->seq != 0 && h.payloads.empty()) {
      if (!push->then_pull.has_value()) {
        absl::MutexLock lock(&h.op->mu);
        --h.op->replies_pending;  // applied and saved before the server died
        continue;
      }
      PullRequestMsg pull = *push->then_pull;
      h.envelope.body = std::move(pull);
    }
    SendToServer(target, std::move(h.envelope), std::move(h.payloads), std::move(h.destinations), h.timeout, h.op);
  }
  recovery_.pushes_resent += link.replay.kept().size();
  ++recovery_.servers_recovered;
  LOG(WARNING) << "client: server " << target << " is back at " << node.address << " (node " << node.node_id
               << ") after " << absl::FormatDuration(outage) << ": re-sent " << link.replay.kept().size()
               << " pushes its checkpoint may lack and " << held.size() << " held requests";
}

void KVClient::IoThread::OnMessage(int target, RawMessage raw) {
  auto env = DecodeEnvelope(Bytes(raw.header));
  const std::string peer = target == kSchedulerTarget ? "scheduler" : absl::StrCat("server ", target);
  if (!env.ok()) {
    LOG(ERROR) << "client: undecodable message from " << peer << ": " << env.status();
    return;
  }
  if (target == kSchedulerTarget) {
    runtime_.Heard();
    if (reregister_id_ != 0 && env->request_id == reregister_id_) {
      OnReregistered(*env);
      return;
    }
    const auto* err = std::get_if<ErrorMsg>(&env->body);
    if (err != nullptr && err->code == absl::StatusCode::kUnauthenticated &&
        node_id_.load(std::memory_order_acquire) != 0) {
      Reregister();  // the request it answers stays in flight and goes again
      return;
    }
  } else {
    OnDurable(target, env->durable_seq);
  }
  if (env->request_id == 0) {
    if (target == kSchedulerTarget) {
      OnUnsolicited(*env);
    } else if (auto* err = std::get_if<ErrorMsg>(&env->body)) {
      // A server could not even read the request it answers.
      LOG(ERROR) << "client: " << peer << " refused a request it could not decode: " << err->message;
    }
    return;
  }
  auto it = in_flight_.find(env->request_id);
  if (it == in_flight_.end()) return;  // answered after it expired
  if (it->second.target != target) {
    LOG(ERROR) << "client: " << peer << " answered request " << env->request_id
               << " that was sent elsewhere; ignored";
    return;
  }
  OnReply(peer, *env, raw.payloads, it->second);
}

void KVClient::IoThread::OnReply(const std::string& peer, Envelope& env, std::vector<zmq::message_t>& payloads,
                                 const InFlight& req) {
  const uint64_t id = env.request_id;
  std::visit(
      Overloaded{
          [&](const ErrorMsg& err) {
            Finish(id, absl::Status(err.code, absl::StrCat(peer, ": ", err.message)), nullptr);
          },
          [&](const PullReplyMsg& pull) { Finish(id, DeliverPull(pull, payloads, req), nullptr); },
          // Answers whose body the caller reads (Call).
          [&]<typename M>(const M&) requires OneOf<M, AckMsg, RegisterReplyMsg, DefineModelReplyMsg, StatsReplyMsg> {
            if (req.destinations.empty()) {
              Finish(id, absl::OkStatus(), &env);
            } else {
              Finish(id, absl::DataLossError(absl::StrCat(peer, " answered a pull with ", BodyName(env.body))),
                     nullptr);
            }
          },
          [&]<typename M>(const M&)
            requires OneOf<M, RegisterRequestMsg, ClusterViewMsg, DefineModelRequestMsg, CreateSlicesRequestMsg,
                           BarrierRequestMsg, WorkerDoneMsg, ShutdownMsg, PushRequestMsg, PullRequestMsg,
                           StatsRequestMsg, HeartbeatMsg>
          {
            Finish(id, absl::DataLossError(absl::StrCat(peer, " answered request ", id, " with ", BodyName(env.body))),
                   nullptr);
          },
      },
      env.body);
}

void KVClient::IoThread::OnUnsolicited(const Envelope& env) {
  absl::MutexLock lock(&mu_);
  std::visit(
      Overloaded{
          [&](const ClusterViewMsg& view) { OnView(view); },  // mu_ is held
          [&](const ShutdownMsg& down) {
            if (pending_fatal_.ok()) {
              pending_fatal_ = absl::AbortedError(absl::StrCat("scheduler ended the job: ", down.reason));
            }
          },
          [&](const ErrorMsg& err) {
            // Refusals of heartbeats (this node was declared dead) end the client.
            if (pending_fatal_.ok()) pending_fatal_ = absl::Status(err.code, absl::StrCat("scheduler: ", err.message));
          },
          // Nothing else comes unasked; heartbeats are not answered with a request id.
          [&]<typename M>(const M&)
            requires OneOf<M, AckMsg, RegisterRequestMsg, RegisterReplyMsg, DefineModelRequestMsg, DefineModelReplyMsg,
                           CreateSlicesRequestMsg, BarrierRequestMsg, WorkerDoneMsg, PushRequestMsg, PullRequestMsg,
                           PullReplyMsg, StatsRequestMsg, StatsReplyMsg, HeartbeatMsg>
          {},
      },
      env.body);
}

void KVClient::IoThread::OnView(const ClusterViewMsg& view) {
  if (!runtime_.NewerView(view.epoch)) return;  // an older view
  if (view_.has_value()) {
    UpdateServers(view);
  } else {
    ConnectServers(view);
  }
  view_ = view;
}

void KVClient::IoThread::UpdateServers(const ClusterViewMsg& view) {
  for (int r = 0; r < static_cast<int>(links_.size()); ++r) {
    const NodeInfo* node = nullptr;
    for (const NodeInfo& n : view.nodes) {
      if (n.role == Role::kServer && n.rank == r) node = &n;
    }
    ServerLink& link = links_[r];
    if (node == nullptr) {
      MarkServerDown(r, "was declared dead by the scheduler");
    } else if (node->node_id != link.node_id) {
      MarkServerDown(r, "was replaced by a restarted server");
      if (link.gave_up.ok()) RecoverServer(r, *node);
    }
  }
}

void KVClient::IoThread::ConnectServers(const ClusterViewMsg& view) {
  servers_.clear();
  server_endpoints_.assign(view.num_servers, "");
  server_keys_.assign(view.num_servers, "");
  links_.clear();
  links_.resize(view.num_servers);
  for (ServerLink& link : links_) link.replay = PushReplay(options_.max_replay_bytes);
  for (const NodeInfo& n : view.nodes) {
    if (n.role == Role::kServer && n.rank >= 0 && n.rank < view.num_servers) {
      server_endpoints_[n.rank] = n.address;
      server_keys_[n.rank] = n.public_key;
      links_[n.rank].node_id = n.node_id;
    }
  }
  for (size_t r = 0; r < server_endpoints_.size(); ++r) {
    auto socket = ConnectServer(server_endpoints_[r], server_keys_[r]);
    if (!socket.ok()) {
      fatal_ = socket.status();
      return;
    }
    servers_.push_back(*std::move(socket));
  }
}

absl::StatusOr<zmq::socket_t> KVClient::IoThread::ConnectServer(const std::string& endpoint,
                                                                const std::string& public_key) {
  PS_RETURN_IF_ERROR(security_.CheckEndpoint(endpoint, "server"));
  return ConnectDealer(context_, endpoint, security_, Traffic::kData, public_key);
}

absl::Status KVClient::IoThread::DeliverPull(const PullReplyMsg& reply,
                                             std::vector<zmq::message_t>& payloads,
                                             const InFlight& req) {
  if (reply.slices.size() != req.destinations.size() || payloads.size() != reply.slices.size()) {
    return absl::DataLossError(absl::StrCat("pull reply carries ", reply.slices.size(), " slices in ",
                                            payloads.size(), " frames; asked for ",
                                            req.destinations.size()));
  }
  for (size_t i = 0; i < reply.slices.size(); ++i) {
    const SliceData& meta = reply.slices[i];
    const Destination& d = req.destinations[i];
    if (meta.key != d.key || meta.length != d.length || payloads[i].size() != d.length * sizeof(float)) {
      return absl::DataLossError(absl::StrCat("pull reply slice ", i, " is key ", meta.key, " of ",
                                              meta.length, " floats in ", payloads[i].size(),
                                              " bytes; expected key ", d.key, " of ", d.length));
    }
  }
  std::atomic<uint64_t>* versions;
  size_t num_versions;
  {
    absl::MutexLock lock(&mu_);
    versions = versions_;
    num_versions = num_versions_;
  }
  for (size_t i = 0; i < reply.slices.size(); ++i) {
    std::memcpy(req.destinations[i].data, payloads[i].data(), payloads[i].size());
    const uint32_t key = reply.slices[i].key;
    if (key < num_versions) versions[key].store(reply.slices[i].version, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

void KVClient::IoThread::Finish(uint64_t request_id, const absl::Status& status, Envelope* reply) {
  auto it = in_flight_.find(request_id);
  if (it == in_flight_.end()) return;
  std::shared_ptr<Op> op = std::move(it->second.op);
  in_flight_.erase(it);
  if (op == nullptr) {  // an internal re-send
    // Refused: an update the job needs is lost. Fail loudly (after this
    // round of the loop), never on silently.
    if (!status.ok() && pending_fatal_.ok()) {
      pending_fatal_ = absl::DataLossError(absl::StrCat("a push re-sent after a server restart was refused: ",
                                                      status.message()));
    }
    return;
  }
  absl::MutexLock lock(&op->mu);
  if (!status.ok()) op->Fail(status);
  if (reply != nullptr) op->reply = std::move(*reply);
  --op->replies_pending;
}

void KVClient::IoThread::ExpireRequests() {
  const absl::Time now = runtime_.Now();
  std::vector<std::pair<uint64_t, int>> expired;
  for (const auto& [id, req] : in_flight_) {
    if (now >= req.deadline) expired.emplace_back(id, req.target);
  }
  std::vector<int> reset;
  for (const auto& [id, target] : expired) {
    const std::string peer = target == kSchedulerTarget ? "scheduler" : absl::StrCat("server ", target);
    Finish(id, absl::DeadlineExceededError(absl::StrCat("request ", id, " to ", peer, " got no reply in time")),
           nullptr);
    if (target != kSchedulerTarget) reset.push_back(target);
  }
  for (int target : reset) ResetServer(target);
  for (int r = 0; r < static_cast<int>(links_.size()); ++r) {
    ServerLink& link = links_[r];
    if (!link.down || !link.gave_up.ok() || now - link.down_since <= options_.server_recovery_timeout) continue;
    link.gave_up = absl::UnavailableError(absl::StrCat(
        "server ", r, " (", server_endpoints_[r], ") died ", absl::FormatDuration(now - link.down_since),
        " ago and no replacement registered within ", absl::FormatDuration(options_.server_recovery_timeout),
        " (restart it with ps_server --restore_dir)"));
    LOG(ERROR) << "client: " << link.gave_up;
    FailHeld(link, link.gave_up);
  }
}

void KVClient::IoThread::ResetServer(int target) {
  if (!servers_[target]) return;  // already reset in this round
  // Everything else in flight to this server dies with its socket: fail it
  // now rather than let each request wait out its own deadline.
  std::vector<uint64_t> ids;
  for (const auto& [id, req] : in_flight_) {
    if (req.target == target) ids.push_back(id);
  }
  for (uint64_t id : ids) {
    Finish(id, absl::UnavailableError(absl::StrCat("server ", target, " (", server_endpoints_[target],
                                                   "): connection reset after a request to it expired")),
           nullptr);
  }
  DropServerSocket(target);  // the server may be gone with our frames still queued
  auto fresh = ConnectServer(server_endpoints_[target], server_keys_[target]);
  if (fresh.ok()) {
    servers_[target] = *std::move(fresh);
  } else {
    LOG(ERROR) << "client: cannot reconnect to server " << target << ": " << fresh.status();
  }
  poll_items_stale_ = true;
}

void KVClient::IoThread::FailAll(const absl::Status& status) {
  std::vector<uint64_t> ids;
  for (const auto& [id, req] : in_flight_) ids.push_back(id);
  for (uint64_t id : ids) Finish(id, status, nullptr);
  absl::MutexLock lock(&mu_);
  for (Outgoing& out : queue_) {
    absl::MutexLock op_lock(&out.op->mu);
    out.op->Fail(status);
    --out.op->replies_pending;
  }
  queue_.clear();
}

// ---- KVClient ---------------------------------------------------------------

absl::Status KVClientOptions::Validate() const {
  if (scheduler.empty()) return absl::InvalidArgumentError("scheduler: required (HOST:PORT)");
  if (auto s = NormalizeEndpoint(scheduler); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler: ", s.status().message()));
  }
  if (register_timeout <= absl::ZeroDuration() || request_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("register_timeout and request_timeout must be positive");
  }
  if (heartbeat_interval <= absl::ZeroDuration() || heartbeat_timeout <= heartbeat_interval) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heartbeat_timeout (", absl::FormatDuration(heartbeat_timeout), ") must exceed heartbeat_interval (",
        absl::FormatDuration(heartbeat_interval), "), which must be positive"));
  }
  if (server_recovery_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("server_recovery_timeout must be positive");
  }
  if (scheduler_recovery_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("scheduler_recovery_timeout: negative");
  }
  if (rank < -1) return absl::InvalidArgumentError(absl::StrCat("rank: ", rank, " (use -1 for any)"));
  PS_RETURN_IF_ERROR(security.Validate(Role::kWorker));
  PS_RETURN_IF_ERROR(security.CheckEndpoint(scheduler, "scheduler"));
  return absl::OkStatus();
}

KVClient::KVClient(const KVClientOptions& options) : options_(options) {}

KVClient::~KVClient() { io_.reset(); }

absl::StatusOr<std::unique_ptr<KVClient>> KVClient::Connect(const KVClientOptions& options) {
  PS_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<KVClient> client(new KVClient(options));
  PS_RETURN_IF_ERROR(client->Start());
  return client;
}

absl::Status KVClient::Start() {
  PS_ASSIGN_OR_RETURN(std::string endpoint, NormalizeEndpoint(options_.scheduler));
  io_ = std::make_unique<IoThread>(endpoint, options_);
  PS_RETURN_IF_ERROR(io_->Start());
  PS_ASSIGN_OR_RETURN(Envelope reply, AddKeyHint(Register(), io_->security()));
  auto* registered = std::get_if<RegisterReplyMsg>(&reply.body);
  if (registered == nullptr) {
    return absl::DataLossError(absl::StrCat("scheduler answered registration with ", BodyName(reply.body)));
  }
  node_id_ = registered->node_id;
  rank_ = registered->rank;
  io_->set_identity(node_id_, rank_, registered->incarnation);
  PS_ASSIGN_OR_RETURN(ClusterViewMsg view, io_->AwaitView(options_.register_timeout));
  num_workers_ = view.num_workers;
  num_servers_ = view.num_servers;
  LOG(INFO) << "worker " << rank_ << " joined: " << num_servers_ << " servers, " << num_workers_ << " workers";
  return absl::OkStatus();
}

absl::StatusOr<Envelope> KVClient::Register() {
  const absl::Time deadline = absl::Now() + options_.register_timeout;
  while (true) {
    absl::StatusOr<Envelope> reply = Call(kSchedulerTarget, RegisterRequestMsg{Role::kWorker, "", options_.rank},
                                          std::max(deadline - absl::Now(), absl::Milliseconds(1)));
    // kUnavailable: the send found no connection (a handshake the scheduler
    // refused, or no scheduler listening yet). ZeroMQ keeps reconnecting, so
    // try again, at its reconnect interval, until the deadline.
    if (reply.ok() || reply.status().code() != absl::StatusCode::kUnavailable) return reply;
    if (absl::Now() + kRegisterRetry >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("no answer from the scheduler within ",
                                                      absl::FormatDuration(options_.register_timeout), " (",
                                                      reply.status().message(), ")"));
    }
    absl::SleepFor(kRegisterRetry);
  }
}

absl::StatusOr<Envelope> KVClient::Call(int target, Body body, absl::Duration timeout) {
  auto op = std::make_shared<Op>();
  std::vector<Outgoing> out(1);
  out[0].target = target;
  out[0].envelope = Envelope{kProtocolVersion, 0, node_id_, std::move(body)};
  out[0].timeout = timeout;
  Submit(std::move(out), op);
  absl::MutexLock lock(&op->mu);
  op->mu.Await(absl::Condition(op.get(), &Op::Done));
  if (!op->status.ok()) return op->status;
  return std::move(op->reply);
}

void KVClient::Submit(std::vector<Outgoing> requests, const std::shared_ptr<Op>& op) {
  {
    absl::MutexLock lock(&op->mu);
    op->replies_pending += static_cast<int>(requests.size());
  }
  for (Outgoing& r : requests) r.op = op;
  io_->Enqueue(std::move(requests));
}

KVClient::Ticket KVClient::Track(std::shared_ptr<Op> op) {
  absl::MutexLock lock(&tickets_mu_);
  const Ticket t = next_ticket_++;
  tickets_.emplace(t, std::move(op));
  return t;
}

KVClient::Ticket KVClient::Failed(absl::Status status) {
  auto op = std::make_shared<Op>();
  {
    absl::MutexLock lock(&op->mu);
    op->status = std::move(status);
  }
  return Track(std::move(op));
}

absl::Status KVClient::RegisterModel(const ModelSpec& model) {
  PS_RETURN_IF_ERROR(model.Validate());
  PS_ASSIGN_OR_RETURN(Envelope reply, Call(kSchedulerTarget, DefineModelRequestMsg{model},
                                           options_.request_timeout));
  auto* defined = std::get_if<DefineModelReplyMsg>(&reply.body);
  if (defined == nullptr) {
    return absl::DataLossError(absl::StrCat("scheduler answered the model with ", BodyName(reply.body)));
  }
  PS_ASSIGN_OR_RETURN(map_, PartitionMap::FromSlices(defined->model.tensors, num_servers_,
                                                     defined->slices));
  PS_RETURN_IF_ERROR(CheckSlicesFit(map_.slices(), options_.security.max_frame_bytes));
  model_ = defined->model;
  pulled_version_ = std::make_unique<std::atomic<uint64_t>[]>(map_.slices().size());
  for (size_t i = 0; i < map_.slices().size(); ++i) pulled_version_[i].store(0);
  io_->set_versions(pulled_version_.get(), map_.slices().size());
  return absl::OkStatus();
}

absl::StatusOr<int> KVClient::TensorIndex(absl::string_view name) const {
  for (size_t i = 0; i < model_.tensors.size(); ++i) {
    if (model_.tensors[i].name == name) return static_cast<int>(i);
  }
  return absl::NotFoundError(absl::StrCat("no tensor named '", name, "' in the registered model"));
}

template <typename Buffer>
absl::Status KVClient::CheckBuffers(absl::Span<const Buffer> buffers) const {
  if (pulled_version_ == nullptr) return absl::FailedPreconditionError("no model registered yet");
  std::vector<bool> seen(model_.tensors.size(), false);
  for (const Buffer& buffer : buffers) {
    const int t = buffer.tensor;
    if (t < 0 || t >= static_cast<int>(model_.tensors.size())) {
      return absl::NotFoundError(absl::StrCat("tensor index ", t, " not in the model"));
    }
    const TensorSpec& spec = model_.tensors[t];
    if (seen[t]) return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name, "' listed twice"));
    seen[t] = true;
    if (static_cast<int64_t>(buffer.data.size()) != spec.NumElements()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name, "' has ", spec.NumElements(),
                                                     " elements; buffer has ", buffer.data.size()));
    }
  }
  return absl::OkStatus();
}

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

void KVClient::AddPush(absl::Span<const TensorBuffer> grads, int64_t clock, const std::shared_ptr<Op>& op,
                       RequestBuilder& requests) {
  for (const TensorBuffer& g : grads) {
    for (uint32_t key : map_.SlicesOfTensor(g.tensor)) {
      const Slice& slice = map_.slices()[key];
      Outgoing& out = requests.For(slice);
      if (!std::holds_alternative<PushRequestMsg>(out.envelope.body)) {
        out.envelope.body = PushRequestMsg{clock, {}, std::nullopt};
      }
      std::get<PushRequestMsg>(out.envelope.body)
          .slices.push_back(SliceData{key, slice.length, pulled_version_[key].load(std::memory_order_relaxed)});
      {
        absl::MutexLock lock(&op->mu);
        ++op->frames_held;
      }
      out.payloads.emplace_back(const_cast<float*>(g.data.data() + slice.offset),
                                slice.length * sizeof(float), &ReleaseFrame, new std::shared_ptr<Op>(op));
    }
  }
}

void KVClient::AddPull(absl::Span<const MutableTensorBuffer> out, int64_t clock, RequestBuilder& requests) {
  const uint64_t timeout_ms = absl::ToInt64Milliseconds(options_.request_timeout);
  for (const MutableTensorBuffer& o : out) {
    for (uint32_t key : map_.SlicesOfTensor(o.tensor)) {
      const Slice& slice = map_.slices()[key];
      Outgoing& req = requests.For(slice);
      PullRequestMsg* pull = nullptr;
      if (auto* push = std::get_if<PushRequestMsg>(&req.envelope.body)) {
        if (!push->then_pull.has_value()) push->then_pull = PullRequestMsg{clock, {}, timeout_ms};
        pull = &*push->then_pull;
      } else {
        if (!std::holds_alternative<PullRequestMsg>(req.envelope.body)) {
          req.envelope.body = PullRequestMsg{clock, {}, timeout_ms};
        }
        pull = &std::get<PullRequestMsg>(req.envelope.body);
      }
      pull->keys.push_back(key);
      req.destinations.push_back(Destination{key, slice.length, o.data.data() + slice.offset});
    }
  }
}

KVClient::Ticket KVClient::SubmitRequests(RequestBuilder& builder, std::shared_ptr<Op> op) {
  std::vector<Outgoing> requests = builder.Take();
  for (Outgoing& out : requests) {
    out.envelope.sender = node_id_;
    // A server answers a pull that waits too long with an error naming what
    // it waited for; give that answer time to arrive before our own timer.
    out.timeout = options_.request_timeout + (out.destinations.empty() ? absl::ZeroDuration() : kReplyGrace);
  }
  Submit(std::move(requests), op);
  return Track(std::move(op));
}

KVClient::Ticket KVClient::Push(absl::Span<const TensorBuffer> grads, int64_t clock) {
  if (absl::Status s = CheckBuffers(grads); !s.ok()) return Failed(s);
  auto op = std::make_shared<Op>();
  RequestBuilder requests(num_servers_, options_.max_request_bytes);
  AddPush(grads, clock, op, requests);
  return SubmitRequests(requests, std::move(op));
}

KVClient::Ticket KVClient::Pull(absl::Span<const MutableTensorBuffer> out, int64_t clock) {
  if (absl::Status s = CheckBuffers(out); !s.ok()) return Failed(s);
  RequestBuilder requests(num_servers_, options_.max_request_bytes);
  AddPull(out, clock, requests);
  return SubmitRequests(requests, std::make_shared<Op>());
}

KVClient::Ticket KVClient::PushPullAsync(absl::Span<const TensorBuffer> grads,
                                         absl::Span<const MutableTensorBuffer> out, int64_t clock,
                                         int64_t pull_clock) {
  if (absl::Status s = CheckBuffers(grads); !s.ok()) return Failed(s);
  if (absl::Status s = CheckBuffers(out); !s.ok()) return Failed(s);
  auto op = std::make_shared<Op>();
  RequestBuilder requests(num_servers_, options_.max_request_bytes);
  AddPush(grads, clock, op, requests);
  AddPull(out, pull_clock, requests);
  return SubmitRequests(requests, std::move(op));
}

absl::Status KVClient::Wait(Ticket ticket, absl::Duration timeout) {
  std::shared_ptr<Op> op;
  {
    absl::MutexLock lock(&tickets_mu_);
    auto it = tickets_.find(ticket);
    if (it == tickets_.end()) return absl::NotFoundError(absl::StrCat("unknown ticket ", ticket));
    op = it->second;
  }
  {
    absl::MutexLock lock(&op->mu);
    if (!op->mu.AwaitWithTimeout(absl::Condition(op.get(), &Op::Done), timeout)) {
      return absl::DeadlineExceededError(absl::StrCat("ticket ", ticket, " not complete after ",
                                                      absl::FormatDuration(timeout)));
    }
  }
  absl::MutexLock lock(&tickets_mu_);
  tickets_.erase(ticket);
  absl::MutexLock op_lock(&op->mu);
  return op->status;
}

absl::Status KVClient::PushPull(absl::Span<const TensorBuffer> grads,
                                absl::Span<const MutableTensorBuffer> out, int64_t clock) {
  return Wait(PushPullAsync(grads, out, clock));
}

absl::Status KVClient::Barrier(absl::string_view name, absl::Duration timeout) {
  BarrierRequestMsg req{std::string(name), static_cast<uint64_t>(absl::ToInt64Milliseconds(timeout))};
  return Call(kSchedulerTarget, std::move(req), timeout + kReplyGrace).status();
}

absl::StatusOr<StatsReplyMsg> KVClient::ServerStats(int rank) {
  if (rank < 0 || rank >= num_servers_) {
    return absl::InvalidArgumentError(absl::StrCat("server rank ", rank, " not in [0, ", num_servers_, ")"));
  }
  PS_ASSIGN_OR_RETURN(Envelope reply, Call(rank, StatsRequestMsg{}, options_.request_timeout));
  auto* stats = std::get_if<StatsReplyMsg>(&reply.body);
  if (stats == nullptr) return absl::DataLossError("server answered stats with " + std::string(BodyName(reply.body)));
  return *stats;
}

absl::StatusOr<int64_t> KVClient::ResumeClock() {
  int64_t clock = std::numeric_limits<int64_t>::max();
  for (int s = 0; s < num_servers_; ++s) {
    PS_ASSIGN_OR_RETURN(StatsReplyMsg stats, ServerStats(s));
    if (rank_ >= static_cast<int>(stats.worker_clocks.size())) {
      return absl::DataLossError(absl::StrCat("server ", s, " reports clocks of ", stats.worker_clocks.size(),
                                              " workers; this is worker ", rank_));
    }
    clock = std::min(clock, stats.worker_clocks[rank_]);
  }
  return num_servers_ > 0 ? clock : 0;
}

KVClient::RecoveryStats KVClient::recovery_stats() const { return io_->recovery_stats(); }

absl::Status KVClient::Finish() {
  return Call(kSchedulerTarget, WorkerDoneMsg{}, options_.request_timeout).status();
}

}  // namespace ps
