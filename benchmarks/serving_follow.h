#ifndef PS_BENCHMARKS_SERVING_FOLLOW_H_
#define PS_BENCHMARKS_SERVING_FOLLOW_H_

// serving_bench's runs of replicas following a training job (one process:
// a scheduler and two servers on threads, one async worker pushing a table's
// rows and a one-element "probe" tensor each step, and serving replicas
// following it; server/serving/serving_follower.h).

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps {

struct FollowRun {
  absl::Duration interval = absl::Seconds(1);  // the replicas' --sync_interval
  int replicas = 2;
  double zipf_s = 0;  // 0: ids uniform
  uint64_t ids = 1000000;
  int dim = 16;
  int batch = 512;  // ids pushed per step
  absl::Duration duration = absl::Seconds(5);
};

struct FollowResult {
  double steps_per_s = 0;
  // From a push's completion to the probe's new value readable at the
  // first replica, in ms.
  double fresh_p50_ms = 0, fresh_p99_ms = 0;
  uint64_t fresh_samples = 0;
  // The rounds' mean payload bytes, and a full snapshot's of the model at the end.
  double round_bytes = 0, snapshot_bytes = 0;
  uint64_t rounds = 0;
};

absl::StatusOr<FollowResult> RunFollow(const FollowRun& run);

}  // namespace ps

#endif  // PS_BENCHMARKS_SERVING_FOLLOW_H_
