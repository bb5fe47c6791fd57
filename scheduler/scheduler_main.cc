// ps_scheduler: the one address every node of a job is told.
#include <fstream>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/strings/str_cat.h"
#include "common/base/events_flags.h"
#include "common/base/main_support.h"
#include "common/base/metrics_flags.h"
#include "common/net/security_flags.h"
#include "glog/logging.h"
#include "scheduler/drain_request.h"
#include "scheduler/restore_options.h"
#include "scheduler/scheduler.h"

namespace {
// The defaults below are SchedulerOptions' own.
const ps::SchedulerOptions kDefaults;
}  // namespace

ABSL_FLAG(std::string, host, "127.0.0.1", "Interface to listen on (0.0.0.0 for all).");
ABSL_FLAG(int, port, 0, "TCP port to listen on; 0 picks a free one (see --endpoint_file).");
ABSL_FLAG(std::string, bind, "", "Full endpoint to bind instead of --host/--port, e.g. ipc:///tmp/ps.sock.");
ABSL_FLAG(std::string, advertise_host, kDefaults.advertise_host, "Host announced when listening on 0.0.0.0.");
ABSL_FLAG(int, num_servers, kDefaults.num_servers, "Servers in the job.");
ABSL_FLAG(int, replicas, kDefaults.replicas, "Copies of every slice, on distinct servers (1 to --num_servers).");
ABSL_FLAG(bool, elastic, kDefaults.elastic,
          "With --replicas=1: track where each slice is, so that servers can join (ps_server --join) and drain "
          "(--drain, --drain_server) the running job; a move makes a second copy, then hands over.");
ABSL_FLAG(int, num_workers, kDefaults.num_workers, "Workers in the job.");
ABSL_FLAG(std::string, consistency, "",
          "The job's consistency (sync, async or ssp:K), as its launcher was given it: a worker registering a "
          "model with another mode is refused naming both. Empty: the model's own.");
ABSL_FLAG(absl::Duration, register_timeout, kDefaults.register_timeout,
          "How long to wait for every server and worker to register.");
ABSL_FLAG(absl::Duration, server_timeout, kDefaults.server_timeout,
          "How long servers may take to create slices or to stop.");
ABSL_FLAG(absl::Duration, heartbeat_timeout, kDefaults.heartbeat_timeout,
          "Silence after which a node is declared dead.");
ABSL_FLAG(std::string, endpoint_file, "", "If set, write the bound endpoint to this file once listening.");
ABSL_FLAG(std::string, state_file, kDefaults.state_file,
          "Keep the job's state in this file (rewritten atomically on every change) so that a restarted "
          "scheduler can take the job back with --restore; empty: in memory only.");
ABSL_FLAG(bool, restore, kDefaults.restore,
          "Take the job back from --state_file after a crash instead of forming a new one (with --port=0: "
          "binds the endpoint recorded there). Keeps the job's --num_servers, --num_workers, --replicas, "
          "--elastic and timeouts from the file: leave them out; one given that differs is refused.");

ABSL_FLAG(int, drain_server, -1,
          "Instead of running a scheduler: ask the running job's scheduler (--scheduler) to drain server R (its "
          "slices copied to the other servers, then it stops); exits 0 once it has left.");
ABSL_FLAG(std::string, scheduler, "", "With --drain_server: the running job's scheduler, HOST:PORT.");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Minutes(10), "With --drain_server: the longest to wait.");

namespace {

// --restore: the job's settings from the state file where the command line
// does not give them; a flag given that contradicts the job is refused.
absl::StatusOr<ps::SchedulerOptions> WithTheJobsSettings(const ps::SchedulerOptions& options) {
  absl::flat_hash_set<std::string> given;
  for (const std::string& flag : ps::RestoredFlags()) {
    if (absl::flags_internal::WasPresentOnCommandLine(flag)) given.insert(flag);
  }
  return ps::OptionsForRestore(options, given);
}

// --consistency: the job's mode; none when empty.
absl::StatusOr<std::optional<ps::Consistency>> JobConsistency() {
  const std::string mode = absl::GetFlag(FLAGS_consistency);
  if (mode.empty()) return std::nullopt;
  return ps::Consistency::Parse(mode);
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv,
               "ps_scheduler --num_servers=S --num_workers=W [--port=P]: runs a job's scheduler.\n"
               "ps_scheduler --drain_server=R --scheduler=HOST:PORT: a server leaves the running job.");
  if (const int drain = absl::GetFlag(FLAGS_drain_server); drain >= 0) {
    const absl::Status s = ps::RequestDrain(absl::GetFlag(FLAGS_scheduler), drain, ps::SecurityOptionsFromFlags(),
                                            absl::GetFlag(FLAGS_drain_timeout));
    if (s.ok()) std::printf("ps_scheduler: server %d drained and left the job\n", drain);
    return ps::ExitCode(s, "ps_scheduler --drain_server");
  }
  ps::SchedulerOptions options;
  options.bind = absl::GetFlag(FLAGS_bind).empty()
                     ? absl::StrCat("tcp://", absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port))
                     : absl::GetFlag(FLAGS_bind);
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  options.num_servers = absl::GetFlag(FLAGS_num_servers);
  options.replicas = absl::GetFlag(FLAGS_replicas);
  options.elastic = absl::GetFlag(FLAGS_elastic);
  options.num_workers = absl::GetFlag(FLAGS_num_workers);
  absl::StatusOr<std::optional<ps::Consistency>> consistency = JobConsistency();
  if (!consistency.ok()) return ps::ExitCode(consistency.status(), "ps_scheduler --consistency");
  options.consistency = *consistency;
  options.register_timeout = absl::GetFlag(FLAGS_register_timeout);
  options.server_timeout = absl::GetFlag(FLAGS_server_timeout);
  options.heartbeat_timeout = absl::GetFlag(FLAGS_heartbeat_timeout);
  options.state_file = absl::GetFlag(FLAGS_state_file);
  options.restore = absl::GetFlag(FLAGS_restore);
  options.security = ps::SecurityOptionsFromFlags();
  options.metrics = ps::MetricsFromFlags();
  if (absl::Status s = ps::OpenEventFileFromFlags(); !s.ok()) return ps::ExitCode(s, "ps_scheduler");
  if (options.restore && !options.state_file.empty()) {
    absl::StatusOr<ps::SchedulerOptions> restored = WithTheJobsSettings(options);
    if (!restored.ok()) return ps::ExitCode(restored.status(), "ps_scheduler --restore");
    options = *restored;
  }
  auto scheduler = ps::Scheduler::Create(options);
  if (!scheduler.ok()) return ps::ExitCode(scheduler.status(), "ps_scheduler");
  const std::string file = absl::GetFlag(FLAGS_endpoint_file);
  if (!file.empty()) {
    std::ofstream(file + ".tmp") << (*scheduler)->endpoint() << "\n";
    std::rename((file + ".tmp").c_str(), file.c_str());
  }
  std::printf("ps_scheduler listening on %s\n", (*scheduler)->endpoint().c_str());
  if (!(*scheduler)->metrics_url().empty()) {
    std::printf("ps_scheduler metrics at %s\n", (*scheduler)->metrics_url().c_str());
  }
  std::fflush(stdout);
  return ps::ExitCode((*scheduler)->Run(), "ps_scheduler");
}
