#include "server/membership/membership.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/net/security.h"

namespace ps {

bool Membership::AdoptIncarnation(uint64_t incarnation) {
  if (incarnation_ != 0 || incarnation == 0) return false;
  incarnation_ = incarnation;
  return restored_rank_ >= 0 && restored_incarnation_ != incarnation_;
}

void Membership::ClearWorkers(int num_workers) {
  worker_rank_.clear();
  worker_live_.assign(std::max(num_workers, 0), false);
}

void Membership::AddWorker(uint32_t node_id, int rank, const std::string& public_key) {
  worker_rank_[node_id] = rank;
  worker_key_[node_id] = public_key;
  worker_live_[rank] = true;
}

absl::StatusOr<int> Membership::WorkerOf(const Envelope& env, const RawMessage& raw) const {
  auto it = worker_rank_.find(env.sender);
  if (it == worker_rank_.end()) {
    return absl::PermissionDeniedError(
        absl::StrCat("sender node ", env.sender, " is not a registered worker of this job"));
  }
  auto key = worker_key_.find(env.sender);
  PS_RETURN_IF_ERROR(CheckSenderKey(env.sender, key == worker_key_.end() ? "" : key->second, raw.user_id));
  // Node ids are numbered per incarnation: a node of another one (a worker
  // of the job before a whole-job restart) is not the worker of that id now.
  // (0: a hand-made peer that states none; its sender id was checked above.)
  if (env.incarnation != 0 && env.incarnation != incarnation_) {
    return absl::FailedPreconditionError(
        absl::StrCat("request from node ", env.sender, " of job incarnation ", IncarnationName(env.incarnation),
                     "; this server serves incarnation ", IncarnationName(incarnation_)));
  }
  return it->second;
}

Membership::DrainStep Membership::OnStop(absl::Time now, absl::Duration timeout) {
  if (drain_deadline_ == absl::InfiniteFuture()) {
    drain_deadline_ = now + timeout;
    return DrainStep::kAsk;
  }
  if (now >= drain_again_at_ && now <= drain_deadline_) {
    drain_again_at_ = absl::InfiniteFuture();
    return DrainStep::kAskAgain;
  }
  return now > drain_deadline_ ? DrainStep::kExpired : DrainStep::kWait;
}

bool Membership::DrainRefusalPasses(absl::StatusCode code, absl::Time now, absl::Duration again) {
  const bool passes =
      code == absl::StatusCode::kUnavailable || (drain_reasked_ && code == absl::StatusCode::kFailedPrecondition);
  if (!passes || now > drain_deadline_) return false;
  drain_again_at_ = now + again;
  return true;
}

bool Membership::ReaskDrain() {
  if (drain_deadline_ == absl::InfiniteFuture() || left_) return false;
  drain_reasked_ = true;
  return true;
}

}  // namespace ps
