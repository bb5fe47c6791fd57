#include "worker/client/client_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/base/metrics_flags.h"
#include "common/net/security_flags.h"
#include "common/net/shm_flags.h"

namespace {
const ps::KVClientOptions kDefaults;
}  // namespace

ABSL_FLAG(std::string, scheduler, "", "Scheduler address, HOST:PORT (required).");
ABSL_FLAG(int, rank, kDefaults.rank,
          "Take this worker rank: at formation, or rejoining a running job (a restarted worker); -1: any free "
          "rank.");
ABSL_FLAG(absl::Duration, request_timeout, kDefaults.request_timeout, "How long any one request may take (e.g. 60s).");
ABSL_FLAG(absl::Duration, register_timeout, kDefaults.register_timeout, "How long to wait for the cluster to form.");
ABSL_FLAG(absl::Duration, heartbeat_interval, kDefaults.heartbeat_interval,
          "Time between heartbeats to the scheduler.");
ABSL_FLAG(absl::Duration, heartbeat_timeout, kDefaults.heartbeat_timeout,
          "Scheduler silence after which the scheduler is presumed down (training goes on).");
ABSL_FLAG(absl::Duration, scheduler_recovery_timeout, kDefaults.scheduler_recovery_timeout,
          "How long a scheduler presumed down may take to come back (ps_scheduler --restore) before this "
          "worker stops.");
ABSL_FLAG(absl::Duration, server_recovery_timeout, kDefaults.server_recovery_timeout,
          "How long requests to a dead server wait for its restart before failing.");
ABSL_FLAG(bool, caller_io, kDefaults.caller_io,
          "Over sockets, callers send their requests and collect their replies on their own thread.");
ABSL_FLAG(absl::Duration, caller_spin, kDefaults.caller_spin,
          "With --caller_io, how long a waiting caller looks at its sockets before it sleeps (0: never).");
ABSL_FLAG(int, compress_threads, kDefaults.compress_threads,
          "Threads that compress a push's gradients, one slice each, the caller's counted (0: half the cores, at most "
          "4).");

ABSL_FLAG(std::string, compression, "none",
          "How pushes (and pulls) travel: none, fp16, bf16, topk:R, randomk:R or onebit, optionally followed by "
          ",pull=none|fp16|bf16|delta (default: pulls 16-bit for every kind but none) and, after topk and randomk, "
          ",warmup=N (more values kept for the first N steps; delta pulls count the slice's versions), and ,ids=raw "
          "(tables' ids not delta coded). Every worker must agree.");
ABSL_FLAG(int64_t, compress_min_bytes, ps::ModelSpec().compress_min_bytes,
          "Tensors of fewer bytes than this travel uncompressed.");

namespace ps {

absl::Status CompressionFromFlags(CompressionSpec* compression, uint64_t* min_bytes) {
  absl::StatusOr<CompressionSpec> spec = CompressionSpec::Parse(absl::GetFlag(FLAGS_compression));
  if (!spec.ok()) return absl::InvalidArgumentError(absl::StrCat("--compression: ", spec.status().message()));
  if (absl::GetFlag(FLAGS_compress_min_bytes) < 0) {
    return absl::InvalidArgumentError("--compress_min_bytes: must be >= 0");
  }
  *compression = *spec;
  *min_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_compress_min_bytes));
  return absl::OkStatus();
}

KVClientOptions ClientOptionsFromFlags() {
  KVClientOptions c;
  c.scheduler = absl::GetFlag(FLAGS_scheduler);
  c.rank = absl::GetFlag(FLAGS_rank);
  c.request_timeout = absl::GetFlag(FLAGS_request_timeout);
  c.register_timeout = absl::GetFlag(FLAGS_register_timeout);
  c.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  c.heartbeat_timeout = absl::GetFlag(FLAGS_heartbeat_timeout);
  c.scheduler_recovery_timeout = absl::GetFlag(FLAGS_scheduler_recovery_timeout);
  c.server_recovery_timeout = absl::GetFlag(FLAGS_server_recovery_timeout);
  c.caller_io = absl::GetFlag(FLAGS_caller_io);
  c.caller_spin = absl::GetFlag(FLAGS_caller_spin);
  c.compress_threads = absl::GetFlag(FLAGS_compress_threads);
  c.security = SecurityOptionsFromFlags();
  c.shm = ShmFromFlags();
  c.shm_spin = ShmSpinFromFlags();
  c.metrics = MetricsFromFlags();
  return c;
}

}  // namespace ps
