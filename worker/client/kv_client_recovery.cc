// The client's side of recovery: a server declared dead holds its requests
// until its replacement, which gets the pushes its checkpoint may lack
// first, in order; a restarted scheduler gets this node back under its id.

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/base/dispatch.h"
#include "common/wire/codec.h"
#include "glog/logging.h"
#include "worker/client/kv_client_internal.h"

namespace ps::client_internal {

void IoThread::OnDurable(int target, uint64_t durable) {
  const uint64_t freed = links_[target].replay.OnDurable(durable);
  recovery_.replay_bytes.fetch_sub(freed, std::memory_order_relaxed);
  if (freed > 0 && !links_[target].over_budget.empty()) SendOverBudget(target, Now());
}

void IoThread::OnAnswered(int target, uint64_t id) {
  auto it = in_flight_.find(id);
  if (it == in_flight_.end() || it->second.target != target) return;
  const auto* push = std::get_if<PushRequestMsg>(&it->second.envelope.body);
  if (push == nullptr || push->seq == 0 || push->origin >= 0) return;
  recovery_.replay_bytes.fetch_sub(links_[target].replay.OnAcked(push->seq), std::memory_order_relaxed);
}

bool IoThread::OnlyPullOwed(Held& h) {
  auto* push = std::get_if<PushRequestMsg>(&h.envelope.body);
  if (push == nullptr || push->seq == 0 || !h.payloads.empty()) return true;
  if (!push->then_pull.has_value()) {
    absl::MutexLock lock(&h.op->mu);
    --h.op->replies_pending;  // applied and kept before its server died
    return false;
  }
  PullRequestMsg pull = *push->then_pull;
  h.envelope.body = std::move(pull);
  return true;
}

size_t IoThread::FailOverPushes(int target, std::vector<Held>& held, std::vector<bool>& sent) {
  ServerLink& link = links_[target];
  // seq -> index in held, for the pushes numbered for this server (a part
  // of another server's push, re-sent here after an earlier failover, keeps
  // that server's numbering: its seq says nothing of this server's).
  std::map<uint64_t, size_t> held_push;
  for (size_t i = 0; i < held.size(); ++i) {
    const auto* push = std::get_if<PushRequestMsg>(&held[i].envelope.body);
    if (push != nullptr && push->seq != 0 && push->origin < 0) held_push[push->seq] = i;
  }
  size_t resent = 0;
  for (const auto& [seq, copy] : link.replay.kept()) {
    if (copy.acked) continue;
    Held h{Envelope{kProtocolVersion, 0, 0, copy.push}, {}, options_.request_timeout, nullptr, copy.Frames()};
    if (auto it = held_push.find(seq); it != held_push.end()) {  // a caller waits for it
      Held& waiting = held[it->second];
      h.envelope = std::move(waiting.envelope);
      if (!waiting.payloads.empty()) h.payloads = std::move(waiting.payloads);
      h.destinations = std::move(waiting.destinations);
      h.timeout = waiting.timeout;
      h.op = waiting.op;
      sent[it->second] = true;
    }
    NumberedFor(target, h.envelope);
    SendSplit(target, std::move(h.envelope), std::move(h.payloads), std::move(h.destinations), h.timeout, h.op,
              /*numbered=*/true);
    ++resent;
  }
  recovery_.replay_bytes.fetch_sub(link.replay.Clear(), std::memory_order_relaxed);
  return resent;
}

void IoThread::NumberedFor(int target, Envelope& env) {
  if (auto* push = std::get_if<PushRequestMsg>(&env.body); push != nullptr && push->seq != 0) {
    // The new leaders tell duplicates by the numbering it had: this
    // server's, or the one a part re-sent here after an earlier failover kept.
    if (push->origin < 0) push->origin = target;
    push->view_epoch = routing_.epoch();
  }
}

bool IoThread::OnMoved(int target, uint64_t id, const ErrorMsg& err) {
  auto it = in_flight_.find(id);
  if (it == in_flight_.end() || it->second.target != target) return false;
  InFlight& f = it->second;
  std::vector<zmq::message_t> payloads;
  auto* push = std::get_if<PushRequestMsg>(&f.envelope.body);
  if (push != nullptr && err.push_applied) {
    // Applied (and answered as such to the replay): only its pull goes again.
    if (!push->then_pull.has_value()) return false;
    if (push->seq != 0 && push->origin < 0) {
      recovery_.replay_bytes.fetch_sub(links_[target].replay.OnAcked(push->seq), std::memory_order_relaxed);
    }
    PullRequestMsg pull = *std::move(push->then_pull);
    f.envelope.body = std::move(pull);
    push = nullptr;
  }
  if (push != nullptr && !push->slices.empty()) {
    if (f.via_shm) {
      payloads = std::move(f.shm_frames);
    } else if (push->origin >= 0) {
      payloads = std::move(f.relayed);
    } else if (auto kept = links_[target].replay.kept().find(push->seq); kept != links_[target].replay.kept().end()) {
      payloads = kept->second.Frames();
    } else {
      return false;
    }
  }
  if (push != nullptr && push->origin < 0 && push->seq != 0 && (f.replayed || err.push_held)) {
    // Re-sent after a restart, refused by the restarted server (its slice
    // moved meanwhile): maybe applied before the crash, and moved with the
    // slice; it keeps this server's numbering, by which the new one knows.
    // So too a push held in a step in progress of a slice that moved on
    // (--replicas): its new primary may hold it, or not.
    push->origin = target;
    recovery_.replay_bytes.fetch_sub(links_[target].replay.OnAcked(push->seq), std::memory_order_relaxed);
  } else if (push != nullptr && push->origin < 0 && push->seq != 0) {
    // Refused before it was applied anywhere: a new push wherever it goes
    // now, numbered there (this server's numbering forgets it).
    recovery_.replay_bytes.fetch_sub(links_[target].replay.Forget(push->seq), std::memory_order_relaxed);
    push->seq = 0;
  }
  const absl::Time now = Now();
  routing_.AddMoved(
      Moved{Held{std::move(f.envelope), std::move(f.destinations), f.timeout, std::move(f.op), std::move(payloads)},
            target, err.view_epoch, f.view_epoch, now + kMovedRetry, f.deadline,
            absl::Status(err.code, absl::StrCat("server ", target, ": ", err.message)), f.replayed});
  in_flight_.erase(it);
  return true;
}

void IoThread::RetryMoved() {
  for (Moved& m : routing_.TakeMovedDue(Now())) {
    const auto* push = std::get_if<PushRequestMsg>(&m.held.envelope.body);
    const bool numbered = push != nullptr && push->seq != 0;  // a part relayed in another server's numbering
    ++recovery_.requests_rerouted;
    // A push re-sent after its server restarted, refused whole there (a
    // slice moved): its parts for that server are new to it.
    SendSplit(m.target, std::move(m.held.envelope), std::move(m.held.payloads), std::move(m.held.destinations),
              m.held.timeout, m.held.op, numbered, m.replayed ? m.target : -1);
  }
}

void IoThread::FailOver(int target) {
  ServerLink& link = links_[target];
  link.failed_over = true;
  std::vector<Held> held = link.TakeHeld();
  // Every push it never answered, in order: a backup may lack what it
  // applied last; a caller still waiting gets its answer through its parts.
  std::vector<bool> sent(held.size(), false);
  const size_t resent = FailOverPushes(target, held, sent);
  // Then the rest, in order: pulls, and pushes answered meanwhile of which
  // only the pull riding on them is owed.
  for (size_t i = 0; i < held.size(); ++i) {
    Held& h = held[i];
    if (sent[i] || !OnlyPullOwed(h)) continue;
    NumberedFor(target, h.envelope);
    SendSplit(target, std::move(h.envelope), std::move(h.payloads), std::move(h.destinations), h.timeout, h.op,
              /*numbered=*/true);
  }
  recovery_.pushes_resent += resent;
  ++recovery_.servers_recovered;
  LOG(WARNING) << "client: server " << target << "'s slices failed over to their backups: re-sent " << resent
               << " pushes it had not answered and " << held.size() << " requests held for it";
}

void IoThread::Reregister() {
  std::optional<Envelope> env =
      scheduler_.Reregistration(in_flight_.NextId(), options_.advertise, security_.public_key());
  if (!env.has_value()) return;
  if (absl::Status s = SendOn(kSchedulerTarget, *env); !s.ok()) {
    LOG(WARNING) << "client: re-registration not sent: " << s;
  }
}

void IoThread::OnReregistered(const Envelope& env) {
  scheduler_.Reregistered();
  if (auto* err = std::get_if<ErrorMsg>(&env.body)) {
    if (pending_fatal_.ok()) {
      pending_fatal_ =
          absl::Status(err->code, absl::StrCat("the restarted scheduler refused this worker: ", err->message));
    }
    return;
  }
  const std::vector<uint64_t> ids = in_flight_.To(kSchedulerTarget);
  for (uint64_t request : ids) {
    if (absl::Status s = SendOn(kSchedulerTarget, in_flight_[request].envelope); !s.ok()) {
      Finish(request, s, nullptr);
    }
  }
  scheduler_.runtime().Reregistered(absl::StrCat("re-registered as node ", scheduler_.node_id(), ", re-sent ",
                                                 ids.size(), " requests it had not answered"));
}

void IoThread::ReleaseServerSockets() {
  for (size_t r = 0; r < links_.size(); ++r) DropServerSocket(static_cast<int>(r));
}

void IoThread::DropServerSocket(int target) {
  // Frames queued for a server that may be gone would stay lent to ZeroMQ,
  // and the callers' tickets would never complete: linger 0 drops them.
  links_.CloseSocket(target);
  CloseShm(target, absl::CancelledError("socket dropped"), /*retry=*/true);
  poll_items_stale_ = true;
}

void IoThread::MarkServerDown(int target, const std::string& why) {
  ServerLink& link = links_[target];
  if (!link.MarkDown(Now())) return;
  // In flight to it: held, in the order they were sent, to go again to its replacement.
  const std::vector<uint64_t> ids = in_flight_.To(target);
  for (uint64_t id : ids) {
    auto node = in_flight_.extract(id);
    InFlight& f = node.mapped();
    // An internal re-send needs no holding: its replay copy goes again;
    // unless it is a part of another server's push (no replay copy here).
    if (f.op || !f.relayed.empty()) {
      link.Hold(Held{std::move(f.envelope), std::move(f.destinations), f.timeout, f.op, std::move(f.relayed)});
    }
  }
  recovery_.requests_held += ids.size();
  DropServerSocket(target);
  LOG(WARNING) << "client: server " << target << " (" << links_[target].endpoint << ") " << why << "; "
               << link.held.size() << " requests wait up to " << absl::FormatDuration(options_.server_recovery_timeout)
               << " for its replacement, " << link.replay.kept().size() << " pushes kept to re-send";
  if (!link.replay.keeps()) {
    link.gave_up = absl::UnavailableError(
        absl::StrCat("server ", target, " (", links_[target].endpoint, ") ", why,
                     "; it keeps no checkpoints (start ps_server with --checkpoint_dir), so its state is lost"));
    link.FailHeld(link.gave_up);
  }
}

void IoThread::RecoverServer(int target, const NodeInfo& node) {
  ServerLink& link = links_[target];
  if (absl::Status s = links_.Redial(target, node.address, node.public_key); !s.ok()) {
    LOG(ERROR) << "client: cannot connect to the replacement of server " << target << ": " << s;
    return;  // stays down; the held requests fail at the recovery deadline
  }
  link.node_id = node.node_id;
  link.down = false;
  link.failed_over = false;  // a new server under the rank (--replicas): it may lead slices later
  poll_items_stale_ = true;
  const absl::Duration outage = Now() - link.down_since;
  std::vector<Held> held = link.TakeHeld();
  const size_t num_held = held.size();
  ResendTo(target, std::move(held));
  recovery_.pushes_resent += link.replay.kept().size();
  ++recovery_.servers_recovered;
  LOG(WARNING) << "client: server " << target << " is back at " << node.address << " (node " << node.node_id
               << ") after " << absl::FormatDuration(outage) << ": re-sent " << link.replay.kept().size()
               << " pushes its checkpoint may lack and " << num_held << " held requests";
}

void IoThread::UpdateServers(const ClusterViewMsg& view) {
  if (view.num_servers > static_cast<int>(links_.size())) {
    if (absl::Status s = links_.Grow(view, options_.max_replay_bytes, routing_.replicated()); !s.ok()) {
      SetFatal(s);
      return;
    }
    poll_items_stale_ = true;
    servers_.store(static_cast<int>(links_.size()), std::memory_order_release);
    LOG(INFO) << "client: " << view.num_servers << " servers now (servers joined the job)";
  }
  for (int r = 0; r < static_cast<int>(links_.size()); ++r) {
    const NodeInfo* node = nullptr;
    for (const NodeInfo& n : view.nodes) {
      if (n.role == Role::kServer && n.rank == r) node = &n;
    }
    ServerLink& link = links_[r];
    if (node == nullptr) {
      MarkServerDown(r, "was declared dead by the scheduler");
      // --replicas: nothing waits for a restart where backups lead all its slices now.
      if (routing_.replicated() && routing_.moves() && !routing_.LeadsAny(r) && !link.failed_over) FailOver(r);
    } else if (node->node_id != link.node_id) {
      MarkServerDown(r, "was replaced by a restarted server");
      if (link.gave_up.ok()) RecoverServer(r, *node);
    }
  }
}

void IoThread::ResetServer(int target) {
  if (!links_[target].socket) return;  // already reset in this round
  // Everything else in flight to this server dies with its socket: fail it
  // now rather than let each request wait out its own deadline.
  for (uint64_t id : in_flight_.To(target)) {
    Finish(id,
           absl::UnavailableError(absl::StrCat("server ", target, " (", links_[target].endpoint,
                                               "): connection reset after a request to it expired")),
           nullptr);
  }
  DropServerSocket(target);  // the server may be gone with our frames still queued
  const ServerLink& link = links_[target];
  if (absl::Status s = links_.Redial(target, link.endpoint, link.public_key); !s.ok()) {
    LOG(ERROR) << "client: cannot reconnect to server " << target << ": " << s;
  }
  poll_items_stale_ = true;
}

void IoThread::ResendTo(int target, std::vector<Held> held) {
  ServerLink& link = links_[target];
  // seq -> index in held, for the pushes numbered for this server (a part
  // of another server's push, re-sent here after an earlier failover, keeps
  // that server's numbering: its seq says nothing of this server's).
  std::map<uint64_t, size_t> held_push;
  for (size_t i = 0; i < held.size(); ++i) {
    const auto* push = std::get_if<PushRequestMsg>(&held[i].envelope.body);
    if (push != nullptr && push->seq != 0 && push->origin < 0) held_push[push->seq] = i;
  }
  // Every push its checkpoint may lack, in order (it drops those it has);
  // a push that a caller still waits for goes as that caller's request.
  std::vector<bool> sent(held.size(), false);
  for (const auto& [seq, copy] : link.replay.kept()) {
    auto it = held_push.find(seq);
    uint64_t id = 0;
    if (it == held_push.end()) {
      id = SendToServer(target, Envelope{kProtocolVersion, 0, 0, copy.push}, copy.Frames(), {},
                        options_.request_timeout, nullptr);
    } else {
      Held& h = held[it->second];
      id = SendToServer(target, std::move(h.envelope), h.payloads.empty() ? copy.Frames() : std::move(h.payloads),
                        std::move(h.destinations), h.timeout, h.op);
      sent[it->second] = true;
    }
    if (auto f = in_flight_.find(id); f != in_flight_.end()) f->second.replayed = true;
  }
  // Then the rest, in order: pulls, stats, and pushes its checkpoint holds
  // (no copy left), of which only the pull riding on them is still owed.
  for (size_t i = 0; i < held.size(); ++i) {
    Held& h = held[i];
    if (sent[i] || !OnlyPullOwed(h)) continue;
    SendToServer(target, std::move(h.envelope), std::move(h.payloads), std::move(h.destinations), h.timeout, h.op);
  }
}

}  // namespace ps::client_internal
