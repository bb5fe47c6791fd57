#include "server/server.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/net/shm_channel.h"
#include "common/net/transport.h"

namespace ps {

absl::Status ServerOptions::Validate() const {
  if (scheduler.empty()) return absl::InvalidArgumentError("scheduler: required (HOST:PORT)");
  if (drain_timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("drain_timeout: must be positive");
  if (join && (rank >= 0 || !restore_dir.empty())) {
    return absl::InvalidArgumentError("join: a joining server takes a new rank; not with rank or restore_dir");
  }
  if (auto s = NormalizeEndpoint(scheduler); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler: ", s.status().message()));
  }
  if (auto s = NormalizeEndpoint(bind); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("bind: ", s.status().message()));
  }
  PS_RETURN_IF_ERROR(metrics.Validate());
  if (num_threads < 0 || num_threads > 256) {
    return absl::InvalidArgumentError(absl::StrCat("num_threads: ", num_threads, " not in [0, 256]"));
  }
  if (register_timeout <= absl::ZeroDuration() || default_pull_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("register_timeout and default_pull_timeout must be positive");
  }
  if (heartbeat_interval <= absl::ZeroDuration() || heartbeat_timeout <= heartbeat_interval) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heartbeat_timeout (", absl::FormatDuration(heartbeat_timeout), ") must exceed heartbeat_interval (",
        absl::FormatDuration(heartbeat_interval), "), which must be positive"));
  }
  if (scheduler_recovery_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("scheduler_recovery_timeout: negative");
  }
  if (checkpoint_every < absl::ZeroDuration()) return absl::InvalidArgumentError("checkpoint_every: negative");
  if (scheduler_lag < absl::ZeroDuration()) return absl::InvalidArgumentError("scheduler_lag: negative");
  if (shm && (shm_ring_bytes < kShmMinRingBytes || shm_ring_bytes > kShmMaxRingBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm_ring_bytes: ", shm_ring_bytes, " not in [", kShmMinRingBytes, ", ", kShmMaxRingBytes, "]"));
  }
  if (rank < -1) return absl::InvalidArgumentError(absl::StrCat("rank: ", rank));
  if (!table_disk_dir.empty() && table_disk_memory_bytes < (uint64_t{2} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("table_disk_memory_bytes: ", table_disk_memory_bytes, " is under the 2 MiB a store needs"));
  }
  if (!table_disk_dir.empty() && max_memory_bytes > 0 && table_disk_memory_bytes >= max_memory_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("table_disk_memory_bytes (", table_disk_memory_bytes >> 20,
                                                   " MiB) leaves nothing of max_memory (", max_memory_bytes >> 20,
                                                   " MiB) for the tables' rows"));
  }
  PS_RETURN_IF_ERROR(security.Validate(Role::kServer));
  PS_RETURN_IF_ERROR(security.CheckEndpoint(bind, "bind"));
  PS_RETURN_IF_ERROR(security.CheckEndpoint(scheduler, "scheduler"));
  return absl::OkStatus();
}

}  // namespace ps
