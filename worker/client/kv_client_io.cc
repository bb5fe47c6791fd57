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
  caller_io_.set_io_thread(std::this_thread::get_id());
  PollSet poll;
  size_t servers_polled = 0;
  bool servers_in_poll = false;
  io_mu_.Lock();  // let go only while it sleeps in poll
  absl::Time next_expiry_check = Now();
  while (!stopping_.load(std::memory_order_acquire)) {
    // While callers collect their own replies, their sockets are theirs to
    // watch: one wake-up per reply, on the thread that waits for it.
    const bool servers = caller_io_.none();
    if (poll.empty() || poll_items_stale_ || servers_polled != links_.size() || servers_in_poll != servers) {
      PollItems(poll, servers);
      servers_polled = links_.size();
      servers_in_poll = servers;
      poll_items_stale_ = false;
    }
    // Without the servers' sockets it looks again soon (callers may be gone).
    const absl::Duration idle = routing_.holding() ? kMovedRetry
                                : servers_in_poll  ? absl::Milliseconds(50)
                                                   : kDriverRound;
    // A socket's descriptor is edge-triggered: any use of the socket (a
    // send, here or by a caller) may take the signal of a message that then
    // waits unannounced, until a drain empties it (PollSet::AddSocketFd).
    const absl::Duration wait = Unsettled(servers) ? absl::ZeroDuration() : SpinBeforePoll(idle);
    io_mu_.Unlock();
    poll.Wait(wait);
    io_mu_.Lock();
    ReadReady(poll.ready(), caller_io_.none());
    RetryMoved();
    ReleaseFenced();
    // Deadlines are coarse (seconds); scanning every request on every wake-up
    // would cost more than it buys.
    const absl::Time now = Now();
    if (now >= next_expiry_check) {
      ExpireRequests();
      next_expiry_check = now + absl::Milliseconds(10);
    }
    CheckReachability();
    Heartbeat();
    if (metrics_.PublishDue()) PublishMetrics();
    if (!pending_fatal_.ok()) SetFatal(pending_fatal_);
  }
  FailAll(absl::CancelledError("client shut down"));
  // Closing with linger 0 drops unsent frames, so ZeroMQ lets go of caller buffers.
  links_.CloseAll();
  scheduler_.Close();
  servers_known_.store(false, std::memory_order_release);
  io_mu_.Unlock();
}

void IoThread::PollItems(PollSet& poll, bool servers) {
  poll.Clear();
  poll.AddFd(wake_fd_, kWakeTag);
  poll.AddFd(scheduler_.socket().get(zmq::sockopt::fd), kSchedulerTarget);
  links_.AddToPoll(poll, servers);
}

int IoThread::Drain(int target, int max) {
  // A cluster view handled before may have closed this server's socket.
  if (target != kSchedulerTarget && !links_[target].socket) return 0;
  zmq::socket_t& socket = target == kSchedulerTarget ? scheduler_.socket() : links_[target].socket;
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
  if (target == kSchedulerTarget) {
    scheduler_.set_unsettled(unsettled);
  } else if (links_[target].socket) {
    links_[target].unsettled = unsettled;
  }
  return read;
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
  if (scheduler_.unsettled() || fired(kSchedulerTarget)) Drain(kSchedulerTarget);
  if (!servers) return;
  for (size_t r = 0; r < links_.size(); ++r) {
    if (links_[r].unsettled || fired(static_cast<int>(r))) Drain(static_cast<int>(r));
  }
}

void IoThread::Heartbeat(bool now) {
  if (scheduler_.node_id() == 0) return;
  {
    absl::MutexLock lock(&mu_);
    if (!fatal_.ok()) return;
  }
  if (absl::Status s = scheduler_.runtime().Check(); !s.ok()) {
    SetFatal(s);
    return;
  }
  std::optional<Envelope> beat = scheduler_.HeartbeatDue(reachability_.Report(Now()), now);
  if (!beat.has_value()) return;
  if (absl::Status s = SendOn(kSchedulerTarget, *beat); !s.ok()) {
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
  for (ServerLink& link : links_) link.FailHeld(status);
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
    scheduler_.runtime().Heard();
    if (scheduler_.IsReregistration(env->request_id)) {
      OnReregistered(*env);
      return;
    }
    const auto* err = std::get_if<ErrorMsg>(&env->body);
    if (err != nullptr && err->code == absl::StatusCode::kUnauthenticated && scheduler_.node_id() != 0) {
      Reregister();  // the request it answers stays in flight and goes again
      return;
    }
  } else {
    if (reachability_.Heard(target, Now())) OnReachableAgain(target);
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
                  ShmOfferMsg, ShmGrantMsg, AddCopyRequestMsg, SliceCopyMsg, DrainRequestMsg, ServingRequestMsg,
                  ServingReplyMsg>([&](const auto&) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) {
            Finish(id, absl::DataLossError(absl::StrCat(peer, " answered request ", id, " with ", BodyName(env.body))),
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
                         AddCopyRequestMsg, SliceCopyMsg, DrainRequestMsg, ServingRequestMsg, ServingReplyMsg>(
                     [](const auto&) {}),
             },
             env.body);
}

void IoThread::OnView(const ClusterViewMsg& msg) {
  absl::StatusOr<const ClusterViewMsg*> taken = scheduler_.runtime().TakeView(msg);
  if (!taken.ok()) {  // a lost change: the answer to a registration brings the whole view
    LOG(WARNING) << "client: " << taken.status().message() << "; asking the scheduler for it whole";
    if (scheduler_.node_id() != 0) Reregister();
    return;
  }
  if (*taken == nullptr) return;  // an older view
  const ClusterViewMsg& view = **taken;
  if (routing_.TakeView(view)) {
    for (ServerLink& link : links_) link.replay.set_replicated();
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
  if (routing_.replicated()) {
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
  PullSinks sinks;
  {
    absl::MutexLock lock(&mu_);
    sinks = pull_sinks_;
  }
  DeltaPulls* const delta_pulls = sinks.delta_pulls;
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
    if (key < sinks.num_versions) sinks.versions[key].store(reply.slices[i].version, std::memory_order_relaxed);
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
    recovery_.replay_bytes.fetch_sub(links_[req.target].replay.Forget(push->seq), std::memory_order_relaxed);
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
  caller_io_.Completed();
}

void IoThread::ExpireRequests() {
  const absl::Time now = Now();
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
    links_[r].GiveUpIfOverdue(r, now, options_.server_recovery_timeout);
    if (!links_[r].over_budget.empty()) SendOverBudget(r, now);
  }
}

void IoThread::PublishMetrics() {
  const RecoveryStats r = recovery_stats();
  metrics_.Publish({.rank = scheduler_.rank(),
                    .replay_bytes = r.replay_bytes,
                    .requests_resent = r.pushes_resent,
                    .server_restarts = r.servers_recovered,
                    .shm_servers = shm_servers()});
}

void IoThread::FailAll(const absl::Status& status) {
  routing_.FailFenced(status);
  std::vector<uint64_t> ids;
  for (const auto& [id, req] : in_flight_) ids.push_back(id);
  for (uint64_t id : ids) Finish(id, status, nullptr);
  for (Outgoing& out : queue_.Take()) {
    absl::MutexLock op_lock(&out.op->mu);
    out.op->Fail(status);
    --out.op->replies_pending;
  }
}

}  // namespace ps::client_internal
