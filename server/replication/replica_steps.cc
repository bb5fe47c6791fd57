// A server's side of forwarding sync steps as their sums
// (server/store/step_forwarding.h): a primary's push replies that wait for the
// steps they joined, the steps forwarded as they complete, a backup
// completing them, and what a view that moves a slice's lead changes.

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/wire/codec.h"
#include "glog/logging.h"
#include "server/replication/replica_protocol.h"
#include "server/store/step_forwarding.h"

namespace ps {

bool ReplicaProtocol::HasSummedSlices(const PushRequestMsg& push) const {
  if (push.assign || !replicator_.replicated() || !store_.has_model()) return false;
  return std::any_of(push.slices.begin(), push.slices.end(), [&](const SliceData& s) { return SumsSteps(s.key); });
}

absl::StatusOr<uint64_t> ReplicaProtocol::ForwardUnsummed(int worker, const PushRequestMsg& push, RawMessage& raw) {
  PushRequestMsg rest = push;
  rest.slices.clear();
  std::vector<zmq::message_t> rest_frames;
  for (size_t i = 0; i < push.slices.size() && i < raw.payloads.size(); ++i) {
    if (SumsSteps(push.slices[i].key)) continue;
    rest.slices.push_back(push.slices[i]);
    rest_frames.emplace_back().copy(raw.payloads[i]);  // shares the frame
  }
  const std::vector<int32_t> backups = replicator_.BackupsOf(rest, self_.rank());
  if (backups.empty()) return 0;
  const uint64_t token = next_forward_++;
  PS_RETURN_IF_ERROR(replicator_.Forward(token, self_.node_id(), self_.rank(), runtime_.view_epoch(), worker, rest,
                                         rest_frames, backups));
  return token;
}

absl::Status ReplicaProtocol::ApplySummedPush(RawMessage& raw, int worker, uint64_t request_id,
                                              const PushRequestMsg& push,
                                              const std::optional<std::vector<bool>>& fresh) {
  // The other slices go first, as before (a re-sent push too: a primary
  // that died may have reached some backups and not others); a forward that
  // cannot go refuses the push before anything is applied.
  PS_ASSIGN_OR_RETURN(const uint64_t rest_token, ForwardUnsummed(worker, push, raw));
  // The reply waits for the step in progress of each summed slice this push
  // joins (not one it skips) or, re-sent, is held in; re-sent for a step
  // completed already, for the last step a new primary sent its backups
  // again, while that is unanswered.
  const uint64_t id = next_push_reply_++;
  PushReply& reply = push_replies_[id];
  reply.a =
      AwaitingBackups{zmq::message_t(raw.routing_id.data(), raw.routing_id.size()), worker, request_id, push.then_pull};
  reply.waits = 1;  // ended below: the reply is not answered while this runs
  std::vector<uint32_t> waited;
  for (size_t i = 0; i < push.slices.size(); ++i) {
    const uint32_t key = push.slices[i].key;
    if (!SumsSteps(key)) continue;
    const bool joins = fresh.has_value() && (fresh->empty() || (*fresh)[i]);
    if (joins ? !store_.Skips(key, worker, push.clock) : store_.InStep(key, worker, push.clock)) {
      waited.push_back(key);
      step_waiters_[key].push_back(id);
      ++reply.waits;
    } else if (auto resent = resent_steps_.find(key); !joins && resent != resent_steps_.end()) {
      token_replies_[resent->second].push_back(id);
      ++reply.waits;
    }
  }
  if (rest_token != 0) {
    token_replies_[rest_token].push_back(id);
    ++reply.waits;
  }
  if (fresh.has_value()) {
    if (absl::Status s = host_.ApplyFresh(raw, worker, push, *fresh); !s.ok()) {
      // Refused whole, nothing applied (no step completed); the backups
      // refuse the rest alike.
      for (uint32_t key : waited) std::erase(step_waiters_[key], id);
      for (auto& [token, ids] : token_replies_) std::erase(ids, id);
      if (rest_token != 0) NoteRefusedHere(rest_token);
      push_replies_.erase(id);
      return s;
    }
  }
  EndWait(id, absl::OkStatus());  // answered now unless it waits for something
  return absl::OkStatus();
}

void ReplicaProtocol::ForwardCompletedSteps() {
  // The steps a push completed wait for their optimizer (CompleteDueSteps, below).
  std::vector<SliceStore::CompletedStep> steps = store_.TakeCompletedSteps();
  if (steps.empty()) return;
  PushRequestMsg forward;
  forward.step_sum = true;
  std::vector<zmq::message_t> frames;
  std::vector<uint64_t> waiting;  // replies now waiting for this forward
  for (SliceStore::CompletedStep& step : steps) {
    last_step_workers_[step.key] = step.workers;
    auto w = step_waiters_.find(step.key);
    std::vector<uint64_t> waiters = w == step_waiters_.end() ? std::vector<uint64_t>() : std::move(w->second);
    if (w != step_waiters_.end()) step_waiters_.erase(w);
    if (replicator_.BackupsOfKey(step.key, self_.rank())
            .empty()) {  // no backup (or not the primary): nobody to wait for
      for (uint64_t id : waiters) EndWait(id, absl::OkStatus());
      continue;
    }
    forward.clock = std::max<int64_t>(forward.clock, static_cast<int64_t>(step.step));
    std::vector<OriginSeq> seqs = slice_seqs_.Of(step.key);
    AppendStep(std::move(step), seqs, &forward, &frames);
    waiting.insert(waiting.end(), waiters.begin(), waiters.end());
  }
  if (forward.slices.empty()) {
    store_.CompleteDueSteps();
    return;
  }
  const uint64_t token = next_forward_++;
  absl::Status s = replicator_.Forward(token, self_.node_id(), self_.rank(), runtime_.view_epoch(), 0, forward, frames,
                                       replicator_.BackupsOf(forward, self_.rank()));
  // The sums are on their way (or copied into the backups' rings): the
  // optimizer runs here while the backups take them.
  store_.CompleteDueSteps();
  if (s.ok()) steps_forwarded_ += forward.slices.size();
  if (!s.ok()) LOG(ERROR) << "server " << self_.rank() << ": completed steps could not reach every backup: " << s;
  if (s.ok() && !waiting.empty()) {
    std::vector<uint64_t>& list = token_replies_[token];
    list.insert(list.end(), waiting.begin(), waiting.end());
  } else {
    for (uint64_t id : waiting) EndWait(id, s);
  }
}

void ReplicaProtocol::EndWait(uint64_t reply_id, const absl::Status& status) {
  auto it = push_replies_.find(reply_id);
  if (it == push_replies_.end()) return;
  PushReply& r = it->second;
  if (!status.ok() && r.status.ok()) r.status = status;
  if (--r.waits > 0) return;
  PushReply done = std::move(r);
  push_replies_.erase(it);
  AnswerPush(done.a, done.status);
}

void ReplicaProtocol::AnswerPush(AwaitingBackups& a, const absl::Status& status) {
  if (!status.ok()) {
    host_.RefuseTo(a.routing_id, a.request_id, status, a.worker);
  } else if (a.then_pull.has_value()) {
    host_.PullAfterPush(a.routing_id, a.worker, a.request_id, *a.then_pull);
  } else {
    host_.ReplyTo(a.routing_id, a.request_id, AckMsg{}, {}, a.worker);
  }
}

absl::Status ReplicaProtocol::ApplyForwardedSteps(const PushRequestMsg& push, const RawMessage& raw,
                                                  std::vector<uint32_t>* differ) {
  PS_ASSIGN_OR_RETURN(std::vector<ForwardedStep> steps, DecodeSteps(push, raw.payloads));
  // K = 3 after a failover: this copy may hold the dead primary's sum of a
  // step the new one summed again in another order (last bits). Refused once
  // the rest applied: the primary then sends this server a fresh copy.
  for (const ForwardedStep& f : steps) {
    auto last = last_step_workers_.find(f.step.key);
    if (last != last_step_workers_.end() && store_.HoldsStepWithAnotherSum(f.step, last->second)) {
      differ->push_back(f.step.key);
    }
  }
  // All or none: a refused slice's step leaves the others unapplied too.
  std::vector<SliceStore::CompletedStep> sums;
  std::vector<std::vector<int32_t>> workers;  // each step's, kept (the sums move)
  for (ForwardedStep& f : steps) {
    workers.push_back(f.step.workers);
    sums.push_back(std::move(f.step));
  }
  PS_ASSIGN_OR_RETURN(const std::vector<bool> applied, store_.ApplySteps(std::move(sums)));
  for (size_t i = 0; i < steps.size(); ++i) {
    const uint32_t key = steps[i].step.key;  // a moved step keeps its key
    slice_seqs_.Merge(key, steps[i].seqs);
    if (applied[i]) last_step_workers_[key] = std::move(workers[i]);
  }
  host_.CountPush();
  if (differ->empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the last step of slices [", absl::StrJoin(*differ, ","),
                   "] is held here with another sum (summed again in another order after a failover)"));
}

void ReplicaProtocol::ResendLastSteps() {
  if (!replicator_.replicated() || !store_.has_model()) return;
  PushRequestMsg again;
  again.step_sum = true;
  std::vector<zmq::message_t> frames;
  absl::flat_hash_set<uint32_t> leading;
  for (uint32_t key : store_.stats().held_keys) {
    if (!SumsSteps(key) || !replicator_.IsPrimary(key, self_.rank())) continue;
    leading.insert(key);
    const SliceState& s = store_.State(key);
    auto last = last_step_workers_.find(key);
    if (leading_.contains(key) || s.version == 0 || s.arrived != 0 || last == last_step_workers_.end()) continue;
    // The last step's sum (a step in progress would have replaced it).
    SliceStore::CompletedStep step{key, s.version - 1, last->second, {}};
    if (!step.workers.empty()) step.sum = s.sum;
    if (!step.workers.empty() && step.sum.size() != s.values.size()) continue;  // not kept (a copy's image)
    AppendStep(std::move(step), slice_seqs_.Of(key), &again, &frames);
  }
  leading_ = std::move(leading);
  const std::vector<int32_t> backups = replicator_.BackupsOf(again, self_.rank());
  if (backups.empty()) return;
  const uint64_t token = next_forward_++;
  if (absl::Status s =
          replicator_.Forward(token, self_.node_id(), self_.rank(), runtime_.view_epoch(), 0, again, frames, backups);
      !s.ok()) {
    LOG(WARNING) << "server " << self_.rank()
                 << ": the last steps of the slices it leads now did not reach every backup: " << s;
    return;
  }
  // Re-sent pushes of those steps are answered once the backups have them.
  for (const SliceData& d : again.slices) resent_steps_[d.key] = token;
  token_replies_[token];
}

void ReplicaProtocol::TakeOverSteps() {
  if (!replicator_.replicated() || !store_.has_model()) return;
  // Replies waiting for steps of slices led elsewhere now (or handed over):
  // their workers send them again, numbered as they were, to the slice's
  // new primary, which holds some of them (a copy's image) and applies the rest.
  for (auto it = step_waiters_.begin(); it != step_waiters_.end();) {
    if (replicator_.IsPrimary(it->first, self_.rank()) && !handing_over_.contains(it->first)) {
      ++it;
      continue;
    }
    const absl::Status moved =
        MovedHeldError(absl::StrCat("slice ", it->first, " is led by another server now, which completes its step"),
                       runtime_.view_epoch());
    const std::vector<uint64_t> waiters = std::move(it->second);
    step_waiters_.erase(it++);
    for (uint64_t id : waiters) EndWait(id, moved);
  }
  // Steps that waited only for workers who left while this server followed.
  if (store_.Resettle()) host_.AnswerReadyPulls();
  ForwardCompletedSteps();
}

}  // namespace ps
