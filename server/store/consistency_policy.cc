#include "server/store/consistency_policy.h"

namespace ps {

std::unique_ptr<ConsistencyPolicy> ConsistencyPolicy::Create(const Consistency& consistency) {
  switch (consistency.mode) {
    case ConsistencyMode::kSync: return internal::NewSyncPolicy();
    case ConsistencyMode::kAsync: return internal::NewAsyncPolicy();
    case ConsistencyMode::kSsp: return internal::NewSspPolicy(consistency.staleness);
  }
  return internal::NewAsyncPolicy();  // unreachable: ModelSpec::Validate checks the mode
}

absl::Status ConsistencyPolicy::CheckPush(const SliceState&, int, int64_t, absl::FunctionRef<std::string()>) const {
  return absl::OkStatus();
}

}  // namespace ps
