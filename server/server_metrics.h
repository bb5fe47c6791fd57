#ifndef PS_SERVER_SERVER_METRICS_H_
#define PS_SERVER_SERVER_METRICS_H_

// A server's Prometheus metrics (common/base/metrics.h). The loop times each
// worker request and checkpoint here; everything else is read from the
// server's stats (the same counters a StatsRequest answers) when a
// publication is due:
//
//   ps_server_pushes_total, _updates_total, _pulls_total, _errors_total
//   ps_server_received_bytes_total, _sent_bytes_total
//   ps_server_request_seconds{op="push|pull|other"}  service time in the loop
//   ps_server_pull_wait_seconds_total  time pulls waited for a sync step or
//                                      an ssp clock (the sync barrier)
//   ps_server_staleness                staleness of each applied slice update
//   ps_server_checkpoints_total, _checkpoint_failures_total, _checkpoint_seconds
//   ps_server_duplicates_dropped_total, _slices_skipped_total (replay)
//   ps_server_slices, _shm_channels, _worker_clock{worker}
//   ps_server_table_rows{table}, _table_bytes, _table_evictions_total, ...
//
// Labels: role="server", rank (once the scheduler assigned it).
// Not thread-safe: the server's loop owns it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/metrics.h"
#include "common/wire/messages.h"
#include "server/replication/replicator.h"

namespace ps {

class ServerMetrics {
 public:
  ServerMetrics();
  ~ServerMetrics();

  // Starts serving when options are enabled; otherwise every call is a no-op.
  absl::Status Start(const MetricsOptions& options);
  bool enabled() const { return endpoint_ != nullptr; }
  std::string url() const;
  void SetRank(int rank);

  // A monotonic time stamp for ObserveRequest (0 when off).
  int64_t Now() const;
  void ObserveRequest(const Body& body, int64_t start);
  void ObserveCheckpoint(absl::Duration took, bool ok);

  // Publishes when due: `stats` and `shm_channels` are read only then.
  // `replication`: with --replicas, what the server's copies are.
  void MaybePublish(absl::FunctionRef<StatsReplyMsg()> stats, size_t shm_channels,
                    absl::FunctionRef<std::optional<ReplicationStats>()> replication);

 private:
  std::unique_ptr<MetricsEndpoint> endpoint_;
  Histogram push_seconds_, pull_seconds_, other_seconds_, checkpoint_seconds_;
  uint64_t checkpoints_ = 0, checkpoint_failures_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_SERVER_METRICS_H_
