// ps_serve: a read-only serving replica of a trained model, answering
// lookups of table rows and dense tensors (server/serving/serving_replica.h).

#include <signal.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/base/main_support.h"
#include "common/net/security_flags.h"
#include "server/serving/serving_follower.h"
#include "server/serving/serving_http.h"
#include "server/serving/serving_replica.h"

ABSL_FLAG(std::string, from, "",
          "What to serve: a job's checkpoint directory (DIR/server-<r>.ckpt) or an exported model file (.npz or "
          ".safetensors, as ps_export writes it). With --scheduler, what is served until the job's first round.");
ABSL_FLAG(std::string, scheduler, "",
          "Follow a running job: its scheduler (HOST:PORT). The replica keeps a copy of the job's whole model, "
          "the rows and slices that changed sent by the servers every --sync_interval, and serves on after the "
          "job ends (its final model).");
ABSL_FLAG(absl::Duration, sync_interval, absl::Seconds(1), "With --scheduler: how often a round is asked for.");
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
ps::ServingFollower* g_follower = nullptr;

// The model to serve first: --from's, or (following a job) none until its first round.
absl::StatusOr<std::unique_ptr<ps::ServingModel>> FirstModel(const std::string& from, const std::string& scheduler) {
  if (!from.empty()) return ps::ServingModel::Load(from);
  ps::ServingVersion version;
  version.source = "job at " + scheduler + " (no round yet)";
  return std::make_unique<ps::ServingModel>(absl::flat_hash_map<std::string, ps::ServingModel::Tensor>{},
                                            absl::flat_hash_map<std::string, ps::ServingModel::Table>{}, version);
}

absl::StatusOr<ps::ServingOptions> OptionsFromFlags() {
  ps::ServingOptions options;
  if (absl::GetFlag(FLAGS_from).empty() && absl::GetFlag(FLAGS_scheduler).empty()) {
    return absl::InvalidArgumentError(
        "--from or --scheduler: one is required (a checkpoint directory or a model file, or a running job to "
        "follow)");
  }
  if (absl::GetFlag(FLAGS_max_lookup_ids) < 1) return absl::InvalidArgumentError("max_lookup_ids: must be >= 1");
  options.max_lookup_ids = static_cast<uint64_t>(absl::GetFlag(FLAGS_max_lookup_ids));
  options.bind = absl::GetFlag(FLAGS_bind).empty()
                     ? absl::StrCat("tcp://", absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port))
                     : absl::GetFlag(FLAGS_bind);
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  options.security = ps::SecurityOptionsFromFlags();
  return options;
}

// The follower of --scheduler's job (null without one).
absl::StatusOr<std::unique_ptr<ps::ServingFollower>> FollowerFromFlags(const ps::ServingOptions& options,
                                                                       ps::ServingReplica* replica) {
  if (absl::GetFlag(FLAGS_scheduler).empty()) return nullptr;
  ps::FollowOptions follow;
  follow.scheduler = absl::GetFlag(FLAGS_scheduler);
  follow.sync_interval = absl::GetFlag(FLAGS_sync_interval);
  follow.security = options.security;
  return ps::ServingFollower::Create(follow, replica->mutable_model());
}

// Says where it listens (stdout, then --endpoint_file, written last: once it
// is there, so are the lines).
void Announce(const ps::ServingReplica& replica, const ps::ServingHttp* http) {
  const ps::ServingVersion version = replica.model().version();
  std::printf("ps_serve listening on %s, serving %s (step %llu)\n", replica.endpoint().c_str(), version.source.c_str(),
              static_cast<unsigned long long>(version.step));
  if (http != nullptr) std::printf("ps_serve http on %s\n", http->url().c_str());
  std::fflush(stdout);
  const std::string file = absl::GetFlag(FLAGS_endpoint_file);
  if (!file.empty()) {
    std::ofstream(file + ".tmp") << replica.endpoint() << "\n";
    std::rename((file + ".tmp").c_str(), file.c_str());
  }
}

// Serves until SIGTERM or SIGINT, following the job meanwhile.
absl::Status Serve(ps::ServingReplica* replica, ps::ServingFollower* follower) {
  g_replica = replica;
  g_follower = follower;
  struct sigaction stop {};
  stop.sa_handler = [](int) {
    g_replica->RequestStop();
    if (g_follower != nullptr) g_follower->RequestStop();
  };
  sigaction(SIGTERM, &stop, nullptr);
  sigaction(SIGINT, &stop, nullptr);
  std::thread following;
  if (follower != nullptr) following = std::thread([follower] { (void)follower->Run(); });
  const absl::Status served = replica->Run();
  if (follower != nullptr) {
    follower->RequestStop();
    following.join();
  }
  return served;
}

}  // namespace

int main(int argc, char** argv) {
  ps::InitMain(argc, argv,
               "ps_serve --from=DIR_OR_FILE | --scheduler=HOST:PORT: serves a trained model's rows and tensors, "
               "read-only; with --scheduler, kept at a running job's model.");
  absl::StatusOr<ps::ServingOptions> options = OptionsFromFlags();
  if (!options.ok()) return ps::ExitCode(options.status(), "ps_serve");
  auto first = FirstModel(absl::GetFlag(FLAGS_from), absl::GetFlag(FLAGS_scheduler));
  if (!first.ok()) return ps::ExitCode(first.status(), "ps_serve");
  auto replica = ps::ServingReplica::Start(*options, *std::move(first));
  if (!replica.ok()) return ps::ExitCode(replica.status(), "ps_serve");
  auto follower = FollowerFromFlags(*options, replica->get());
  if (!follower.ok()) return ps::ExitCode(follower.status(), "ps_serve");
  std::unique_ptr<ps::ServingHttp> http;
  if (absl::GetFlag(FLAGS_http_port) >= 0) {
    auto started =
        ps::ServingHttp::Start(&(*replica)->model(), absl::GetFlag(FLAGS_host), absl::GetFlag(FLAGS_http_port),
                               options->max_lookup_ids, options->security.insecure);
    if (!started.ok()) return ps::ExitCode(started.status(), "ps_serve");
    http = std::move(*started);
  }
  Announce(**replica, http.get());
  return ps::ExitCode(Serve(replica->get(), follower->get()), "ps_serve");
}
