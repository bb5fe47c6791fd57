// How a request leaves the client, in the order it goes: the callers'
// queue, the fence across a move, a request cut by the servers leading its
// slices now, a push numbered for its server (and kept to replay), held
// while the server is down, tracked in flight, and sent through the
// server's shared-memory channel or its socket.

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "worker/client/kv_client_internal.h"

namespace ps::client_internal {

size_t IoThread::SendQueued() {
  std::deque<Outgoing> batch = queue_.Take();
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
    SendToScheduler(out);
    return;
  }
  if (Fence(out)) return;  // behind an earlier request for its slices, which a move sends elsewhere
  if (routing_.Misrouted(out.envelope, out.target)) {  // built before a failover moved some of its slices
    SendSplit(out.target, std::move(out.envelope), std::move(out.payloads), std::move(out.destinations), out.timeout,
              out.op, /*numbered=*/false);
    return;
  }
  SendNew(out.target, std::move(out.envelope), std::move(out.payloads), std::move(out.destinations), out.timeout,
          out.op);
}

void IoThread::SendToScheduler(Outgoing& out) {
  const uint64_t id = in_flight_.NextId();
  out.envelope.request_id = id;
  out.envelope.incarnation = scheduler_.incarnation();
  // The envelope is kept: a restarted scheduler gets it again.
  in_flight_[id] = InFlight{out.op, out.target, Now() + out.timeout, {}, out.envelope, out.timeout};
  if (absl::Status s = SendOn(kSchedulerTarget, out.envelope); !s.ok()) Finish(id, s, nullptr);
}

void IoThread::SendNew(int target, Envelope envelope, std::vector<zmq::message_t> payloads,
                       std::vector<Destination> destinations, absl::Duration timeout, std::shared_ptr<Op> op) {
  ServerLink& link = links_[target];
  if (absl::Status refused = link.Refusal(target); !refused.ok()) {
    FailOp(op, refused);
    return;
  }
  if (auto* push = std::get_if<PushRequestMsg>(&envelope.body);
      push != nullptr && !push->slices.empty() && (link.replay.full() || !link.over_budget.empty())) {
    WaitForReplayBudget(target, Held{std::move(envelope), std::move(destinations), timeout, op, std::move(payloads)});
    return;
  }
  if (auto* push = std::get_if<PushRequestMsg>(&envelope.body)) {
    // The frames still alive here are this request's: the op holds none of
    // the caller's memory when they all own their bytes, and the copy kept
    // to re-send shares them.
    recovery_.replay_bytes.fetch_add(link.replay.Number(*push, payloads, client_internal::OwnsFrames(op)),
                                     std::memory_order_relaxed);
    push->view_epoch = routing_.epoch();
  }
  if (link.down) {
    link.Hold(Held{std::move(envelope), std::move(destinations), timeout, op, std::move(payloads)});
    ++recovery_.requests_held;
    return;
  }
  SendToServer(target, std::move(envelope), std::move(payloads), std::move(destinations), timeout, op);
}

void IoThread::SendSplit(int target, Envelope envelope, std::vector<zmq::message_t> payloads,
                         std::vector<Destination> destinations, absl::Duration timeout, std::shared_ptr<Op> op,
                         bool numbered, int fresh_at) {
  std::vector<RequestPart> parts =
      SplitByServer(std::move(envelope), std::move(payloads), std::move(destinations), target,
                    [&](uint32_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) { return routing_.Leader(key, target); });
  if (op) {
    absl::MutexLock lock(&op->mu);
    op->replies_pending += static_cast<int>(parts.size()) - 1;  // none: nothing was owed (an empty push)
  }
  for (RequestPart& part : parts) {
    if (auto* push = std::get_if<PushRequestMsg>(&part.envelope.body); push != nullptr && part.target == fresh_at) {
      push->origin = -1;
      push->seq = 0;
    }
    if (!numbered || part.target == fresh_at) {
      SendNew(part.target, std::move(part.envelope), std::move(part.payloads), std::move(part.destinations), timeout,
              op);
    } else if (links_[part.target].down) {
      links_[part.target].Hold(
          Held{std::move(part.envelope), std::move(part.destinations), timeout, op, std::move(part.payloads)});
    } else {
      SendToServer(part.target, std::move(part.envelope), std::move(part.payloads), std::move(part.destinations),
                   timeout, op);
    }
  }
}

uint64_t IoThread::SendToServer(int target, Envelope envelope, std::vector<zmq::message_t> payloads,
                                std::vector<Destination> destinations, absl::Duration timeout, std::shared_ptr<Op> op) {
  const uint64_t id = in_flight_.NextId();
  envelope.request_id = id;
  if (envelope.sender == 0) envelope.sender = scheduler_.node_id();
  envelope.incarnation = scheduler_.incarnation();
  InFlight& f = in_flight_[id] =
      InFlight{std::move(op), target, Now() + timeout, std::move(destinations), envelope, timeout};
  f.view_epoch = routing_.epoch();
  if (const auto* push = std::get_if<PushRequestMsg>(&envelope.body); push != nullptr) {
    // Shared, not copied: a part of another server's push may go again
    // should this one die too; one copy's, should its link be cut.
    std::vector<zmq::message_t>& keep = push->origin >= 0 ? f.relayed : f.resend;
    if (push->origin >= 0 || !routing_.replicated()) {
      keep.resize(payloads.size());
      for (size_t i = 0; i < payloads.size(); ++i) keep[i].copy(payloads[i]);
    }
  }
  metrics_.Sent(envelope.body, payloads);
  if (!links_[target].socket) {
    Finish(id, absl::UnavailableError(absl::StrCat("server ", target, " is unreachable (reconnect failed)")), nullptr);
    return id;
  }
  Transmit(target, id, envelope, std::move(payloads));
  return id;
}

void IoThread::Transmit(int target, uint64_t id, const Envelope& envelope, std::vector<zmq::message_t> payloads) {
  ServerLink& link = links_[target];
  if (link.ShmDue(Now())) OfferShm(target);
  if (link.shm_state == ShmState::kOffered) {
    link.awaiting_shm.push_back(Unsent{id, envelope, std::move(payloads)});
    return;
  }
  absl::Status s;
  if (link.shm_state == ShmState::kOn) {
    std::vector<zmq::message_t> shared(payloads.size());  // the same bytes, kept until the reply
    for (size_t i = 0; i < payloads.size(); ++i) shared[i].copy(payloads[i]);
    s = link.shm->Send(envelope, std::move(payloads));
    if (s.ok()) {
      InFlight& req = in_flight_.at(id);
      req.via_shm = true;
      req.shm_frames = std::move(shared);
      return;
    }
    CloseShm(target, s, /*retry=*/false);
    s = SendOn(target, envelope, std::move(shared));
  } else {
    s = SendOn(target, envelope, std::move(payloads));
  }
  if (!s.ok()) Finish(id, s, nullptr);
}

absl::Status IoThread::SendOn(int target, const Envelope& envelope, std::vector<zmq::message_t> payloads) {
  if (target != kSchedulerTarget) return links_.Send(target, envelope, std::move(payloads));
  return scheduler_.Send(envelope, std::move(payloads));
}

}  // namespace ps::client_internal

namespace ps::client_internal {

void IoThread::WaitForReplayBudget(int target, Held held) {
  ServerLink& link = links_[target];
  if (link.over_budget.empty()) {
    LOG(WARNING) << "client: server " << target << " (" << link.endpoint << "): " << link.replay.bytes() / (1 << 20)
                 << " MiB of pushes kept to re-send after a restart, the budget ("
                 << "max_replay_bytes " << link.replay.max_bytes() / (1 << 20)
                 << " MiB): its checkpoint lags; new pushes to it wait for the checkpoint they asked for, each up "
                    "to its request timeout";
  }
  const absl::Time deadline = Now() + held.timeout;
  link.over_budget.emplace_back(std::move(held), deadline);
}

void IoThread::SendOverBudget(int target, absl::Time now) {
  ServerLink& link = links_[target];
  while (!link.over_budget.empty() && link.over_budget.front().second <= now) {
    Held& h = link.over_budget.front().first;
    FailOp(h.op, absl::DeadlineExceededError(absl::StrCat(
                     "server ", target, " (", link.endpoint, "): no checkpoint freed the ",
                     link.replay.max_bytes() / (1 << 20), " MiB of pushes kept to re-send (max_replay_bytes) within ",
                     absl::FormatDuration(h.timeout), "; this push was not sent")));
    link.over_budget.pop_front();
  }
  if (link.over_budget.empty()) return;
  if (link.replay.full()) {
    // Nothing else may be in flight to it: a probe's answer carries what
    // its checkpoint holds (Envelope::durable_seq).
    if (now - link.budget_probed >= absl::Milliseconds(100)) {
      link.budget_probed = now;
      Probe(target);
    }
    return;
  }
  LOG(INFO) << "client: server " << target << ": a checkpoint freed the replay budget; " << link.over_budget.size()
            << " waiting pushes go";
  std::deque<std::pair<Held, absl::Time>> waiting = std::move(link.over_budget);
  link.over_budget.clear();
  for (auto& [h, deadline] : waiting) {
    SendNew(target, std::move(h.envelope), std::move(h.payloads), std::move(h.destinations), h.timeout, h.op);
  }
}

}  // namespace ps::client_internal
