#include "common/net/node_runtime.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/events.h"
#include "common/base/status_macros.h"
#include "common/wire/cluster_view.h"
#include "glog/logging.h"

namespace ps {

NodeRuntime::NodeRuntime(NodeRuntimeOptions options)
    : options_(std::move(options)), clock_(ClockOr(options_.clock)), last_heard_(clock_->Now()) {}

void NodeRuntime::Registering() {
  const absl::Time now = Now();
  if (options_.register_timeout > absl::ZeroDuration()) register_deadline_ = now + options_.register_timeout;
  next_heartbeat_ = now + options_.heartbeat_interval;
  last_heard_ = now;
}

bool NodeRuntime::NewerView(uint64_t epoch) {
  if (have_view_ && epoch <= view_epoch_) return false;
  have_view_ = true;
  view_epoch_ = epoch;
  return true;
}

absl::StatusOr<const ClusterViewMsg*> NodeRuntime::TakeView(ClusterViewMsg view) {
  if (have_view_ && view.epoch <= view_epoch_) return nullptr;
  if (view.base_epoch == 0) {
    view_ = std::move(view);
  } else if (!view_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a change to cluster view ", view.base_epoch, " reached a node holding none"));
  } else {
    PS_RETURN_IF_ERROR(MergeView(*view_, view));
  }
  NewerView(view_->epoch);
  return &*view_;
}

absl::Status NodeRuntime::Check(absl::string_view no_view_detail) {
  const absl::Time now = Now();
  if (!have_view_) {
    if (now <= register_deadline_) return absl::OkStatus();
    return absl::DeadlineExceededError(absl::StrCat("no cluster view from scheduler ", options_.scheduler, " within ",
                                                    absl::FormatDuration(options_.register_timeout), no_view_detail));
  }
  const absl::Duration silent = now - last_heard_;
  if (silent > options_.heartbeat_timeout + options_.scheduler_recovery_timeout) {
    return absl::UnavailableError(absl::StrCat(
        "scheduler ", options_.scheduler, " silent for ", absl::FormatDuration(silent), " (heartbeat timeout ",
        absl::FormatDuration(options_.heartbeat_timeout), " + scheduler recovery timeout ",
        absl::FormatDuration(options_.scheduler_recovery_timeout), "); presumed dead, stopping"));
  }
  if (silent > options_.heartbeat_timeout && !scheduler_down_) {
    scheduler_down_ = true;
    LOG(WARNING) << name_ << ": scheduler " << options_.scheduler << " silent for " << absl::FormatDuration(silent)
                 << "; presumed down. " << options_.goes_on << "; waiting up to "
                 << absl::FormatDuration(options_.scheduler_recovery_timeout) << " for it to come back";
    EmitEvent("scheduler_down", JsonLine().Add("name", name_).Add("silent_s", absl::ToDoubleSeconds(silent), 3));
  }
  return absl::OkStatus();
}

bool NodeRuntime::HeartbeatDue() {
  const absl::Time now = Now();
  if (now < next_heartbeat_) return false;
  next_heartbeat_ = now + options_.heartbeat_interval;
  return true;
}

bool NodeRuntime::ReregisterDue() {
  const absl::Time now = Now();
  if (reregister_pending_ && now - last_reregister_ < options_.heartbeat_interval) return false;
  reregister_pending_ = true;
  last_reregister_ = now;
  return true;
}

void NodeRuntime::Reregistered(absl::string_view detail) {
  reregister_pending_ = false;
  scheduler_down_ = false;
  LOG(WARNING) << name_ << ": scheduler is back; " << detail;
  EmitEvent("scheduler_back", JsonLine().Add("name", name_));
}

absl::Duration NodeRuntime::PollTimeout(absl::Duration max) const {
  return std::clamp(next_heartbeat_ - Now(), absl::ZeroDuration(), max);
}

}  // namespace ps
