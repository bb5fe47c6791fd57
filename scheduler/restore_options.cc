#include "scheduler/restore_options.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "scheduler/job_state.h"

namespace ps {
namespace {

std::string Ms(int64_t ms) { return absl::FormatDuration(absl::Milliseconds(ms)); }

// A job's settings as flag=value pairs, in RestoredFlags()'s order; without
// a configuration, the node counts alone.
std::vector<std::pair<std::string, std::string>> Settings(int servers, int workers,
                                                          const std::optional<JobConfig>& config) {
  std::vector<std::pair<std::string, std::string>> out = {{"num_servers", absl::StrCat(servers)},
                                                          {"num_workers", absl::StrCat(workers)}};
  if (!config.has_value()) return out;
  out.insert(out.end(), {{"replicas", absl::StrCat(config->replicas)},
                         {"elastic", config->elastic ? "true" : "false"},
                         {"heartbeat_timeout", Ms(config->heartbeat_timeout_ms)},
                         {"server_timeout", Ms(config->server_timeout_ms)},
                         {"register_timeout", Ms(config->register_timeout_ms)}});
  return out;
}

}  // namespace

const std::vector<std::string>& RestoredFlags() {
  static const auto* flags = new std::vector<std::string>{
      "num_servers", "num_workers", "replicas", "elastic", "heartbeat_timeout", "server_timeout", "register_timeout"};
  return *flags;
}

JobConfig JobConfigOf(const SchedulerOptions& o) {
  return JobConfig{o.replicas, o.elastic, absl::ToInt64Milliseconds(o.heartbeat_timeout),
                   absl::ToInt64Milliseconds(o.server_timeout), absl::ToInt64Milliseconds(o.register_timeout)};
}

absl::Status CheckSameJob(const SchedulerOptions& options, const JobState& state) {
  const auto job = Settings(state.num_servers, state.num_workers, state.config);
  const auto ours = Settings(options.num_servers, options.num_workers,
                             state.config.has_value() ? std::optional(JobConfigOf(options)) : std::nullopt);
  for (size_t i = 0; i < job.size(); ++i) {
    if (job[i].second == ours[i].second) continue;
    return absl::InvalidArgumentError(absl::StrCat("--", ours[i].first, "=", ours[i].second, " contradicts the job in ",
                                                   options.state_file, ", which has --", job[i].first, "=",
                                                   job[i].second, " (leave the flag out to keep the job's)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SchedulerOptions> OptionsForRestore(SchedulerOptions options,
                                                   const absl::flat_hash_set<std::string>& given) {
  PS_ASSIGN_OR_RETURN(const JobState state, ReadJobState(options.state_file));
  const auto take = [&given](const char* flag, auto& field, auto value) {
    if (!given.contains(flag)) field = value;
  };
  take("num_servers", options.num_servers, state.num_servers);
  take("num_workers", options.num_workers, state.num_workers);
  if (const auto& c = state.config; c.has_value()) {
    take("replicas", options.replicas, c->replicas);
    take("elastic", options.elastic, c->elastic);
    take("heartbeat_timeout", options.heartbeat_timeout, absl::Milliseconds(c->heartbeat_timeout_ms));
    take("server_timeout", options.server_timeout, absl::Milliseconds(c->server_timeout_ms));
    take("register_timeout", options.register_timeout, absl::Milliseconds(c->register_timeout_ms));
  }
  PS_RETURN_IF_ERROR(CheckSameJob(options, state));
  return options;
}

}  // namespace ps
