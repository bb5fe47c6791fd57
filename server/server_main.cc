// ps_server: holds the parameter slices placed on it.
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/main_support.h"
#include "server/server.h"

ABSL_FLAG(std::string, scheduler, "", "Scheduler address, HOST:PORT (required).");
ABSL_FLAG(std::string, host, "127.0.0.1", "Interface workers reach this server on (0.0.0.0 for all).");
ABSL_FLAG(int, port, 0, "TCP port; 0 picks a free one.");
ABSL_FLAG(std::string, bind, "", "Full endpoint to bind instead of --host/--port, e.g. ipc:///tmp/ps-s0.sock.");
ABSL_FLAG(std::string, advertise_host, "127.0.0.1", "Host announced to workers when listening on 0.0.0.0.");
ABSL_FLAG(int, num_threads, 0, "Threads applying updates to slices in parallel; 0: one per core.");
ABSL_FLAG(bool, allow_nonfinite, false, "Accept NaN/Inf in gradients (refused by default).");
ABSL_FLAG(int64_t, max_memory_mb, 0, "Memory budget for the model's slices; 0: half of the machine's memory.");
ABSL_FLAG(int, register_timeout_s, 90, "Seconds to wait for the scheduler and the cluster to form.");

int main(int argc, char** argv) {
  ps::InitMain(argc, argv, "ps_server --scheduler=HOST:PORT: serves parameter slices.");
  ps::ServerOptions options;
  options.scheduler = absl::GetFlag(FLAGS_scheduler);
  options.bind = absl::GetFlag(FLAGS_bind).empty()
                     ? absl::StrCat("tcp://", absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port))
                     : absl::GetFlag(FLAGS_bind);
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  options.num_threads = absl::GetFlag(FLAGS_num_threads);
  options.allow_nonfinite = absl::GetFlag(FLAGS_allow_nonfinite);
  if (absl::GetFlag(FLAGS_max_memory_mb) < 0) {
    return ps::ExitCode(absl::InvalidArgumentError("max_memory_mb: must be >= 0"), "ps_server");
  }
  options.max_memory_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_max_memory_mb)) << 20;
  options.register_timeout = absl::Seconds(absl::GetFlag(FLAGS_register_timeout_s));
  auto server = ps::Server::Create(options);
  if (!server.ok()) return ps::ExitCode(server.status(), "ps_server");
  std::printf("ps_server listening on %s\n", (*server)->endpoint().c_str());
  std::fflush(stdout);
  return ps::ExitCode((*server)->Run(), "ps_server");
}
