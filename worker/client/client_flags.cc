#include "worker/client/client_flags.h"

#include "absl/flags/flag.h"
#include "common/metrics_flags.h"
#include "common/security_flags.h"
#include "common/shm_flags.h"

namespace {
const ps::KVClientOptions kDefaults;
double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }
}  // namespace

ABSL_FLAG(std::string, scheduler, "", "Scheduler address, HOST:PORT (required).");
ABSL_FLAG(int, rank, kDefaults.rank,
          "Take this worker rank: at formation, or rejoining a running job (a restarted worker); -1: any free "
          "rank.");
ABSL_FLAG(double, request_timeout_s, Seconds(kDefaults.request_timeout), "Seconds any one request may take.");
ABSL_FLAG(double, register_timeout_s, Seconds(kDefaults.register_timeout), "Seconds to wait for the cluster to form.");
ABSL_FLAG(double, heartbeat_interval_s, Seconds(kDefaults.heartbeat_interval),
          "Seconds between heartbeats to the scheduler.");
ABSL_FLAG(double, heartbeat_timeout_s, Seconds(kDefaults.heartbeat_timeout),
          "Seconds of scheduler silence after which the scheduler is presumed down (training goes on).");
ABSL_FLAG(double, scheduler_recovery_timeout_s, Seconds(kDefaults.scheduler_recovery_timeout),
          "Seconds a scheduler presumed down may take to come back (ps_scheduler --restore) before this "
          "worker stops.");
ABSL_FLAG(double, server_recovery_timeout_s, Seconds(kDefaults.server_recovery_timeout),
          "Seconds requests to a dead server wait for its restart before failing.");
ABSL_FLAG(bool, caller_io, kDefaults.caller_io,
          "Over sockets, callers send their requests and collect their replies on their own thread.");
ABSL_FLAG(int64_t, caller_spin_us, absl::ToInt64Microseconds(kDefaults.caller_spin),
          "With --caller_io, how long a waiting caller looks at its sockets before it sleeps (0: never).");

namespace ps {

KVClientOptions ClientOptionsFromFlags() {
  KVClientOptions c;
  c.scheduler = absl::GetFlag(FLAGS_scheduler);
  c.rank = absl::GetFlag(FLAGS_rank);
  c.request_timeout = absl::Seconds(absl::GetFlag(FLAGS_request_timeout_s));
  c.register_timeout = absl::Seconds(absl::GetFlag(FLAGS_register_timeout_s));
  c.heartbeat_interval = absl::Seconds(absl::GetFlag(FLAGS_heartbeat_interval_s));
  c.heartbeat_timeout = absl::Seconds(absl::GetFlag(FLAGS_heartbeat_timeout_s));
  c.scheduler_recovery_timeout = absl::Seconds(absl::GetFlag(FLAGS_scheduler_recovery_timeout_s));
  c.server_recovery_timeout = absl::Seconds(absl::GetFlag(FLAGS_server_recovery_timeout_s));
  c.caller_io = absl::GetFlag(FLAGS_caller_io);
  c.caller_spin = absl::Microseconds(absl::GetFlag(FLAGS_caller_spin_us));
  c.security = SecurityOptionsFromFlags();
  c.shm = ShmFromFlags();
  c.shm_spin = ShmSpinFromFlags();
  c.metrics = MetricsFromFlags();
  return c;
}

}  // namespace ps
