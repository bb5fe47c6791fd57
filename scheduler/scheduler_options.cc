#include "scheduler/scheduler.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/net/transport.h"

namespace ps {

absl::Status SchedulerOptions::Validate() const {
  if (auto s = NormalizeEndpoint(bind); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("bind/port: ", s.status().message()));
  }
  if (num_servers < 1 || num_servers > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("num_servers: ", num_servers, " not in [1, 4096]"));
  }
  if (replicas < 1 || replicas > num_servers) {
    return absl::InvalidArgumentError(absl::StrCat("replicas: ", replicas, " not in [1, ", num_servers,
                                                   "] (the servers: no server holds two copies of a slice)"));
  }
  if (num_workers < 1 || num_workers > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("num_workers: ", num_workers, " not in [1, 65536]"));
  }
  if (register_timeout <= absl::ZeroDuration() || server_timeout <= absl::ZeroDuration() ||
      default_barrier_timeout <= absl::ZeroDuration() || heartbeat_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeouts must be positive");
  }
  if (restore && state_file.empty()) return absl::InvalidArgumentError("restore: needs a state_file to restore from");
  PS_RETURN_IF_ERROR(metrics.Validate());
  PS_RETURN_IF_ERROR(security.Validate(Role::kScheduler));
  PS_RETURN_IF_ERROR(security.CheckEndpoint(bind, "bind"));
  return absl::OkStatus();
}

}  // namespace ps
