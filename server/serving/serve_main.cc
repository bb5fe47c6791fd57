// ps_serve: a read-only serving replica of a trained model, answering
// lookups of table rows and dense tensors (server/serving/serving_replica.h).

#include <signal.h>

#include <cstdio>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/base/main_support.h"
#include "common/net/security_flags.h"
#include "server/serving/serving_http.h"
#include "server/serving/serving_replica.h"

ABSL_FLAG(std::string, from, "",
          "What to serve (required): a job's checkpoint directory (DIR/server-<r>.ckpt) or an exported model "
          "file (.npz or .safetensors, as ps_export writes it).");
ABSL_FLAG(std::string, host, "127.0.0.1", "Interface clients reach the replica on (0.0.0.0 for all).");
ABSL_FLAG(int, port, 0, "TCP port; 0 picks a free one (see --endpoint_file).");
ABSL_FLAG(std::string, bind, "", "Full endpoint to bind instead of --host/--port, e.g. ipc:///tmp/ps-serve.sock.");
ABSL_FLAG(std::string, advertise_host, "127.0.0.1",
          "With a wildcard --host: the address clients are told to use in --endpoint_file.");
ABSL_FLAG(std::string, endpoint_file, "", "If set, write the bound endpoint to this file once listening.");
ABSL_FLAG(int64_t, max_lookup_ids, 100000, "The most ids one lookup may ask for; more are refused.");
ABSL_FLAG(int, http_port, -1,
          "Also answer HTTP/JSON on --host at this port (GET /v1/version, /v1/tables/NAME/rows?ids=1,2,3, "
          "/v1/dense/NAME); 0 picks a free one, -1: no HTTP.");

namespace {

ps::ServingReplica* g_replica = nullptr;

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv, "ps_serve --from=DIR_OR_FILE: serves a trained model's rows and tensors, read-only.");
  ps::ServingOptions options;
  options.from = absl::GetFlag(FLAGS_from);
  if (options.from.empty()) {
    return ps::ExitCode(absl::InvalidArgumentError("--from: required (a checkpoint directory or a model file)"),
                        "ps_serve");
  }
  if (absl::GetFlag(FLAGS_max_lookup_ids) < 1) {
    return ps::ExitCode(absl::InvalidArgumentError("max_lookup_ids: must be >= 1"), "ps_serve");
  }
  options.max_lookup_ids = static_cast<uint64_t>(absl::GetFlag(FLAGS_max_lookup_ids));
  options.bind = absl::GetFlag(FLAGS_bind).empty()
                     ? absl::StrCat("tcp://", absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port))
                     : absl::GetFlag(FLAGS_bind);
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  options.security = ps::SecurityOptionsFromFlags();
  auto replica = ps::ServingReplica::Start(options);
  if (!replica.ok()) return ps::ExitCode(replica.status(), "ps_serve");
  std::unique_ptr<ps::ServingHttp> http;
  if (absl::GetFlag(FLAGS_http_port) >= 0) {
    auto started =
        ps::ServingHttp::Start(&(*replica)->model(), absl::GetFlag(FLAGS_host), absl::GetFlag(FLAGS_http_port),
                               options.max_lookup_ids, options.security.insecure);
    if (!started.ok()) return ps::ExitCode(started.status(), "ps_serve");
    http = std::move(*started);
  }
  const ps::ServingVersion version = (*replica)->model().version();
  std::printf("ps_serve listening on %s, serving %s (step %llu)\n", (*replica)->endpoint().c_str(),
              version.source.c_str(), static_cast<unsigned long long>(version.step));
  if (http != nullptr) std::printf("ps_serve http on %s\n", http->url().c_str());
  std::fflush(stdout);
  // Written last: once it is there, so are the lines above.
  const std::string file = absl::GetFlag(FLAGS_endpoint_file);
  if (!file.empty()) {
    std::ofstream(file + ".tmp") << (*replica)->endpoint() << "\n";
    std::rename((file + ".tmp").c_str(), file.c_str());
  }
  g_replica = replica->get();
  struct sigaction stop {};
  stop.sa_handler = [](int) { g_replica->RequestStop(); };
  sigaction(SIGTERM, &stop, nullptr);
  sigaction(SIGINT, &stop, nullptr);
  return ps::ExitCode((*replica)->Run(), "ps_serve");
}
