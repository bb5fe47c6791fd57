// The client's I/O thread: sockets, sending, replies, deadlines, heartbeats.

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/base/dispatch.h"
#include "common/net/poll_set.h"
#include "common/wire/codec.h"
#include "common/wire/wire_frames.h"
#include "glog/logging.h"
#include "worker/client/kv_client_internal.h"

namespace ps::client_internal {

void IoThread::Loop() {
  io_thread_id_ = std::this_thread::get_id();
  PollSet poll;
  size_t servers_polled = 0;
  bool servers_in_poll = false;
  io_mu_.Lock();  // let go only while it sleeps in poll
  absl::Time next_expiry_check = runtime_.Now();
  while (!stopping_.load(std::memory_order_acquire)) {
    // While callers collect their own replies, their sockets are theirs to
    // watch: one wake-up per reply, on the thread that waits for it.
    const bool servers = drivers_.load(std::memory_order_acquire) == 0;
    if (poll.empty() || poll_items_stale_ || servers_polled != links_.size() || servers_in_poll != servers) {
      PollItems(poll, servers);
      servers_polled = links_.size();
      servers_in_poll = servers;
      poll_items_stale_ = false;
    }
    // Without the servers' sockets it looks again soon (callers may be gone).
    const absl::Duration idle = !moved_.empty() || !fenced_.empty() ? kMovedRetry
                                : servers_in_poll                   ? absl::Milliseconds(50)
                                                                    : kDriverRound;
    // A socket's descriptor is edge-triggered: any use of the socket (a
    // send, here or by a caller) may take the signal of a message that then
    // waits unannounced, until a drain empties it (PollSet::AddSocketFd).
    const absl::Duration wait = Unsettled(servers) ? absl::ZeroDuration() : SpinBeforePoll(idle);
    io_mu_.Unlock();
    poll.Wait(wait);
    io_mu_.Lock();
    ReadReady(poll.ready(), drivers_.load(std::memory_order_acquire) == 0);
    RetryMoved();
    ReleaseFenced();
    // Deadlines are coarse (seconds); scanning every request on every wake-up
    // would cost more than it buys.
    const absl::Time now = runtime_.Now();
    if (now >= next_expiry_check) {
      ExpireRequests();
      next_expiry_check = now + absl::Milliseconds(10);
    }
    Heartbeat();
    if (metrics_.PublishDue()) PublishMetrics();
    if (!pending_fatal_.ok()) SetFatal(pending_fatal_);
  }
  FailAll(absl::CancelledError("client shut down"));
  // Closing with linger 0 drops unsent frames, so ZeroMQ lets go of caller buffers.
  scheduler_.set(zmq::sockopt::linger, 0);
  links_.CloseAll();
  scheduler_.close();
  servers_known_.store(false, std::memory_order_release);
  io_mu_.Unlock();
}

void IoThread::PollItems(PollSet& poll, bool servers) {
  poll.Clear();
  poll.AddFd(wake_fd_, kWakeTag);
  poll.AddFd(scheduler_.get(zmq::sockopt::fd), kSchedulerTarget);
  links_.AddToPoll(poll, servers);
}

int IoThread::Drain(int target, int max) {
  // A cluster view handled before may have closed this server's socket.
  if (target != kSchedulerTarget && !links_[target].socket) return 0;
  zmq::socket_t& socket = target == kSchedulerTarget ? scheduler_ : links_[target].socket;
  int read = 0;
  bool unsettled = true;
  (void)DrainMessages(
      socket, /*routed=*/false, max,
      [&](RawMessage raw) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) {
        ++read;
        OnMessage(target, std::move(raw));
        return absl::OkStatus();
      },
      &unsettled);
  // (A message handled may have replaced the socket, or sent on it.)
  if (target == kSchedulerTarget || links_[target].socket) UnsettledFlag(target) = unsettled;
  return read;
}

absl::Status IoThread::SendOn(int target, const Envelope& envelope, std::vector<zmq::message_t> payloads) {
  if (target != kSchedulerTarget) return links_.Send(target, envelope, std::move(payloads));
  scheduler_unsettled_ = true;
  return SendMessage(scheduler_, nullptr, envelope, std::move(payloads));
}

void IoThread::ReadReady(absl::Span<const int> ready, bool servers) {
  if (!ready.empty() && ready.front() == kWakeTag) {
    uint64_t count;
    (void)!read(wake_fd_, &count, sizeof(count));
  }
  SendQueued();
  int last = kWakeTag;
  for (int target : ready) {
    if (target == last) continue;  // a channel's two descriptors
    last = target;
    if (target <= kShmTagBase) PollShm(kShmTagBase - target);
  }
  const auto fired = [&](int tag) { return std::find(ready.begin(), ready.end(), tag) != ready.end(); };
  if (scheduler_unsettled_ || fired(kSchedulerTarget)) Drain(kSchedulerTarget);
  if (!servers) return;
  for (size_t r = 0; r < links_.size(); ++r) {
    if (links_[r].unsettled || fired(static_cast<int>(r))) Drain(static_cast<int>(r));
  }
}

size_t IoThread::SendQueued() {
  std::deque<Outgoing> batch;
  queued_.store(false, std::memory_order_release);
  {
    absl::MutexLock lock(&mu_);
    batch.swap(queue_);
  }
  for (Outgoing& out : batch) Send(out);
  return batch.size();
}

void IoThread::Send(Outgoing& out) {
  const bool to_server = out.target != kSchedulerTarget;
  if (to_server && (out.target < 0 || out.target >= static_cast<int>(links_.size()))) {
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
    if (absl::Status s = SendOn(kSchedulerTarget, out.envelope); !s.ok()) Finish(id, s, nullptr);
    return;
  }
  if (Fence(out)) return;                     // behind an earlier request for its slices, which a move sends elsewhere
  if (Misrouted(out.envelope, out.target)) {  // built before a failover moved some of its slices
    SendSplit(out.target, std::move(out.envelope), std::move(out.payloads), std::move(out.destinations), out.timeout,
              out.op, /*numbered=*/false);
    return;
  }
  SendNew(out.target, std::move(out.envelope), std::move(out.payloads), std::move(out.destinations), out.timeout,
          out.op);
}

void IoThread::SendNew(int target, Envelope envelope, std::vector<zmq::message_t> payloads,
                       std::vector<Destination> destinations, absl::Duration timeout, std::shared_ptr<Op> op) {
  ServerLink& link = links_[target];
  if (!link.gave_up.ok()) {
    FailOp(op, link.gave_up);
    return;
  }
  if (link.failed_over) {  // what still goes to it is not for a slice (stats)
    FailOp(op, absl::UnavailableError(absl::StrCat("server ", target, " (", link.endpoint,
                                                   ") died; backups serve its slices now (--replicas)")));
    return;
  }
  if (auto* push = std::get_if<PushRequestMsg>(&envelope.body)) {
    // The frames still alive here are this request's: the op holds none of
    // the caller's memory when they all own their bytes, and the copy kept
    // to re-send shares them.
    replay_bytes_.fetch_add(link.replay.Number(*push, payloads, client_internal::OwnsFrames(op)),
                            std::memory_order_relaxed);
    push->view_epoch = view_epoch_;
  }
  if (link.down) {
    link.held.push_back(Held{std::move(envelope), std::move(destinations), timeout, op, std::move(payloads)});
    absl::MutexLock lock(&mu_);
    ++recovery_.requests_held;
    return;
  }
  SendToServer(target, std::move(envelope), std::move(payloads), std::move(destinations), timeout, op);
}

uint64_t IoThread::SendToServer(int target, Envelope envelope, std::vector<zmq::message_t> payloads,
                                std::vector<Destination> destinations, absl::Duration timeout, std::shared_ptr<Op> op) {
  const uint64_t id = next_request_id_++;
  envelope.request_id = id;
  if (envelope.sender == 0) envelope.sender = node_id_.load(std::memory_order_acquire);
  envelope.incarnation = incarnation_.load(std::memory_order_relaxed);
  InFlight& f = in_flight_[id] =
      InFlight{std::move(op), target, runtime_.Now() + timeout, std::move(destinations), envelope, timeout};
  f.view_epoch = view_epoch_;
  if (const auto* push = std::get_if<PushRequestMsg>(&envelope.body); push != nullptr && push->origin >= 0) {
    f.relayed.resize(payloads.size());
    for (size_t i = 0; i < payloads.size(); ++i) f.relayed[i].copy(payloads[i]);  // shared, not copied
  }
  metrics_.Sent(envelope.body, payloads);
  if (!links_[target].socket) {
    Finish(id, absl::UnavailableError(absl::StrCat("server ", target, " is unreachable (reconnect failed)")), nullptr);
    return id;
  }
  Transmit(target, id, envelope, std::move(payloads));
  return id;
}

void IoThread::Heartbeat() {
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
  if (absl::Status s = SendOn(kSchedulerTarget, beat); !s.ok()) {
    LOG(WARNING) << "client: heartbeat not sent: " << s;
  }
}

void IoThread::SetFatal(const absl::Status& status) {
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

void IoThread::OnMessage(int target, RawMessage raw) {
  metrics_.Received(raw.payloads);
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
    if (const auto* err = std::get_if<ErrorMsg>(&env->body);
        err != nullptr && err->view_epoch != 0 && OnMoved(target, env->request_id, *err)) {
      return;
    }
    OnAnswered(target, env->request_id);
    if (env->request_id != 0 && env->request_id == links_[target].shm_offer_id) {
      OnShmAnswer(target, *env);
      return;
    }
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
    LOG(ERROR) << "client: " << peer << " answered request " << env->request_id << " that was sent elsewhere; ignored";
    return;
  }
  OnReply(peer, *env, raw.payloads, it->second);
}

void IoThread::OnReply(const std::string& peer, Envelope& env, std::vector<zmq::message_t>& payloads,
                       const InFlight& req) {
  const uint64_t id = env.request_id;
  std::visit(
      Overloaded{
          [&](const ErrorMsg& err) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) {
            Finish(id, absl::Status(err.code, absl::StrCat(peer, ": ", err.message)), nullptr);
          },
          [&](const PullReplyMsg& pull)
              ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) { Finish(id, DeliverPull(pull, payloads, req), nullptr); },
          // Answers whose body the caller reads (Call).
          OnlyFor<AckMsg, RegisterReplyMsg, DefineModelReplyMsg, StatsReplyMsg>(
              [&](const auto&) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) {
                if (req.destinations.empty()) {
                  Finish(id, absl::OkStatus(), &env);
                } else {
                  Finish(id, absl::DataLossError(absl::StrCat(peer, " answered a pull with ", BodyName(env.body))),
                         nullptr);
                }
              }),
          OnlyFor<RegisterRequestMsg, ClusterViewMsg, DefineModelRequestMsg, CreateSlicesRequestMsg, BarrierRequestMsg,
                  WorkerDoneMsg, ShutdownMsg, PushRequestMsg, PullRequestMsg, StatsRequestMsg, HeartbeatMsg,
                  ShmOfferMsg, ShmGrantMsg, AddCopyRequestMsg, SliceCopyMsg, DrainRequestMsg>(
              [&](const auto&) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) {
                Finish(id,
                       absl::DataLossError(absl::StrCat(peer, " answered request ", id, " with ", BodyName(env.body))),
                       nullptr);
              }),
      },
      env.body);
}

void IoThread::OnUnsolicited(const Envelope& env) {
  absl::MutexLock lock(&mu_);
  std::visit(Overloaded{
                 [&](const ClusterViewMsg& view) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_, io_mu_) { OnView(view); },
                 [&](const ShutdownMsg& down) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) {
                   if (pending_fatal_.ok()) {
                     pending_fatal_ = absl::AbortedError(absl::StrCat("scheduler ended the job: ", down.reason));
                   }
                 },
                 [&](const ErrorMsg& err) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) {
                   // Refusals of heartbeats (this node was declared dead) end the client.
                   if (pending_fatal_.ok())
                     pending_fatal_ = absl::Status(err.code, absl::StrCat("scheduler: ", err.message));
                 },
                 // Nothing else comes unasked; heartbeats are not answered with a request id.
                 OnlyFor<AckMsg, RegisterRequestMsg, RegisterReplyMsg, DefineModelRequestMsg, DefineModelReplyMsg,
                         CreateSlicesRequestMsg, BarrierRequestMsg, WorkerDoneMsg, PushRequestMsg, PullRequestMsg,
                         PullReplyMsg, StatsRequestMsg, StatsReplyMsg, HeartbeatMsg, ShmOfferMsg, ShmGrantMsg,
                         AddCopyRequestMsg, SliceCopyMsg, DrainRequestMsg>([](const auto&) {}),
             },
             env.body);
}

void IoThread::OnView(const ClusterViewMsg& msg) {
  absl::StatusOr<const ClusterViewMsg*> taken = runtime_.TakeView(msg);
  if (!taken.ok()) {  // a lost change: the answer to a registration brings the whole view
    LOG(WARNING) << "client: " << taken.status().message() << "; asking the scheduler for it whole";
    if (node_id_.load(std::memory_order_acquire) != 0) Reregister();
    return;
  }
  if (*taken == nullptr) return;  // an older view
  const ClusterViewMsg& view = **taken;
  view_epoch_ = view.epoch;
  if (!view.copies.empty()) {
    copies_ = view.copies;
    if (!replicated_) {  // --elastic with one copy each: a move re-routes pushes as a failover does
      replicated_ = true;
      for (ServerLink& link : links_) link.replay.set_replicated();
    }
  }
  if (view_.has_value()) {
    UpdateServers(view);
  } else {
    ConnectServers(view);
  }
  view_ = view;
}

void IoThread::ConnectServers(const ClusterViewMsg& view) {
  if (absl::Status s = links_.Connect(view, options_.max_replay_bytes); !s.ok()) {
    fatal_ = s;
    return;
  }
  if (replicated_) {
    for (ServerLink& link : links_) link.replay.set_replicated();
  }
  servers_.store(static_cast<int>(links_.size()), std::memory_order_release);
  servers_known_.store(true, std::memory_order_release);
}

absl::Status IoThread::CheckPullReply(const PullReplyMsg& reply, const std::vector<zmq::message_t>& payloads,
                                      const InFlight& req) {
  if (reply.slices.size() != req.destinations.size() || payloads.size() != reply.slices.size()) {
    return absl::DataLossError(absl::StrCat("pull reply carries ", reply.slices.size(), " slices in ", payloads.size(),
                                            " frames; asked for ", req.destinations.size()));
  }
  for (size_t i = 0; i < reply.slices.size(); ++i) {
    const SliceData& meta = reply.slices[i];
    const Destination& d = req.destinations[i];
    // A compressed frame's own header must declare the values asked for.
    const absl::StatusOr<std::pair<CompressionKind, uint64_t>> header =
        meta.compressed ? FrameHeader(AsView(payloads[i])) : std::pair<CompressionKind, uint64_t>{};
    const bool fits =
        meta.compressed ? header.ok() && header->second == d.length : payloads[i].size() == d.length * sizeof(float);
    if (meta.key != d.key || meta.length != d.length || meta.rows != d.rows || !fits) {
      return absl::DataLossError(absl::StrCat("pull reply slice ", i, " is key ", meta.key, " of ", meta.length,
                                              " floats (", meta.rows, " rows) in ", payloads[i].size(), " bytes",
                                              meta.compressed ? " compressed" : "", "; expected key ", d.key, " of ",
                                              d.length, " (", d.rows, " rows)"));
    }
  }
  return absl::OkStatus();
}

absl::Status IoThread::DeliverPull(const PullReplyMsg& reply, std::vector<zmq::message_t>& payloads,
                                   const InFlight& req) {
  PS_RETURN_IF_ERROR(CheckPullReply(reply, payloads, req));
  std::atomic<uint64_t>* versions;
  size_t num_versions;
  DeltaPulls* delta_pulls;
  {
    absl::MutexLock lock(&mu_);
    versions = versions_;
    num_versions = num_versions_;
    delta_pulls = delta_pulls_;
  }
  std::vector<float> decoded;  // a compressed frame of rows, before they scatter
  for (size_t i = 0; i < reply.slices.size(); ++i) {
    const Destination& d = req.destinations[i];
    const char* rows = static_cast<const char*>(payloads[i].data());
    if (d.rows == 0 && delta_pulls != nullptr && delta_pulls->Has(d.key)) {
      PS_RETURN_IF_ERROR(delta_pulls->Deliver(reply.slices[i], AsView(payloads[i]), absl::MakeSpan(d.data, d.length)));
    } else if (reply.slices[i].compressed) {
      decoded.resize(d.rows == 0 ? 0 : d.length);
      const absl::Status s =
          DecodeFrame(AsView(payloads[i]), d.rows == 0 ? absl::MakeSpan(d.data, d.length) : absl::MakeSpan(decoded));
      if (!s.ok()) return absl::DataLossError(absl::StrCat("pull reply slice ", i, ": ", s.message()));
      rows = reinterpret_cast<const char*>(decoded.data());
    } else if (d.rows == 0) {
      std::memcpy(d.data, payloads[i].data(), payloads[i].size());
    }
    if (d.rows != 0) {
      const size_t row_bytes = d.dim * sizeof(float);
      for (const auto& [local, dst] : d.scatter) std::memcpy(dst, rows + local * row_bytes, row_bytes);
    }
    const uint32_t key = reply.slices[i].key;
    if (key < num_versions) versions[key].store(reply.slices[i].version, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

void IoThread::Finish(uint64_t request_id, const absl::Status& status, Envelope* reply) {
  auto it = in_flight_.find(request_id);
  if (it == in_flight_.end()) return;
  const InFlight& req = it->second;  // sent at its deadline less its timeout
  metrics_.Finished(req.envelope.body, *ClockOr(options_.clock), req.deadline - req.timeout, status.ok());
  // A failed push keeps no copy that may share its caller's frames: the
  // caller is told, and its buffers are free again.
  if (const auto* push = std::get_if<PushRequestMsg>(&req.envelope.body);
      !status.ok() && push != nullptr && push->seq != 0 && push->origin < 0 && req.target >= 0) {
    replay_bytes_.fetch_sub(links_[req.target].replay.Forget(push->seq), std::memory_order_relaxed);
  }
  std::shared_ptr<Op> op = std::move(it->second.op);
  in_flight_.erase(it);
  if (op == nullptr) {  // an internal re-send
    // Refused: an update the job needs is lost. Fail loudly (after this
    // round of the loop), never on silently.
    if (!status.ok() && pending_fatal_.ok()) {
      pending_fatal_ =
          absl::DataLossError(absl::StrCat("a push re-sent after a server restart was refused: ", status.message()));
    }
    return;
  }
  {
    absl::MutexLock lock(&op->mu);
    if (!status.ok()) op->Fail(status);
    if (reply != nullptr) op->reply = std::move(*reply);
    --op->replies_pending;
  }
  // A caller in WaitDirect may sleep on a socket whose signal this thread
  // took; one that completes its own op needs no ring.
  const int drivers = drivers_.load(std::memory_order_acquire);
  if (drivers > 1 || (drivers == 1 && std::this_thread::get_id() == io_thread_id_)) {
    const uint64_t one = 1;
    (void)!write(driver_wake_fd_, &one, sizeof(one));
  }
}

void IoThread::ExpireRequests() {
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
  ExpireShmOffers();
  for (int r = 0; r < static_cast<int>(links_.size()); ++r) {
    ServerLink& link = links_[r];
    if (!link.down || link.failed_over || !link.gave_up.ok() ||
        now - link.down_since <= options_.server_recovery_timeout) {
      continue;
    }
    link.gave_up = absl::UnavailableError(absl::StrCat(
        "server ", r, " (", links_[r].endpoint, ") died ", absl::FormatDuration(now - link.down_since),
        " ago and no replacement registered within ", absl::FormatDuration(options_.server_recovery_timeout),
        " (restart it with ps_server --restore_dir)"));
    LOG(ERROR) << "client: " << link.gave_up;
    FailHeld(link, link.gave_up);
  }
}

void IoThread::PublishMetrics() {
  const RecoveryStats r = recovery_stats();
  metrics_.Publish({.rank = rank_.load(std::memory_order_relaxed),
                    .replay_bytes = r.replay_bytes,
                    .requests_resent = r.pushes_resent,
                    .server_restarts = r.servers_recovered,
                    .shm_servers = shm_servers()});
}

void IoThread::FailAll(const absl::Status& status) {
  for (Fenced& f : fenced_) FailOp(f.out.op, status);
  fenced_.clear();
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

}  // namespace ps::client_internal
