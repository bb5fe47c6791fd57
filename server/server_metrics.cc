#include "server/server_metrics.h"

#include <chrono>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "prometheus/metric_family.h"

namespace ps {
namespace {

// Staleness: one bucket per small value, then powers of two; the stats keep
// one counter per value (the last: that value and more).
const std::vector<double> kStalenessBounds = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128};

void StalenessHistogram(MetricsSnapshot& m, const std::vector<uint64_t>& per_value) {
  std::vector<uint64_t> counts(kStalenessBounds.size() + 1, 0);
  double sum = 0;  // the last counter's values are counted at its lower bound
  for (size_t s = 0; s < per_value.size(); ++s) {
    const auto it = std::lower_bound(kStalenessBounds.begin(), kStalenessBounds.end(), static_cast<double>(s));
    counts[it - kStalenessBounds.begin()] += per_value[s];
    sum += static_cast<double>(s) * per_value[s];
  }
  m.HistogramOf("ps_server_staleness", "Staleness (steps behind) of each slice update applied.", kStalenessBounds,
                counts, sum);
}

void TableMetrics(MetricsSnapshot& m, const TableStatsMsg& t) {
  const MetricLabels l = {{"table", absl::StrCat(t.table)}};
  m.Gauge("ps_server_table_rows", "Embedding rows held.", t.rows, l);
  m.Gauge("ps_server_table_bytes", "Bytes the embedding rows and their optimizer state take.", t.bytes, l);
  m.Counter("ps_server_table_evictions_total", "Rows evicted at the memory budget.", t.evictions, l);
  m.Counter("ps_server_table_admissions_total", "Rows admitted.", t.admissions, l);
  m.Counter("ps_server_table_rejections_total", "Rows refused admission.", t.rejections, l);
  m.Counter("ps_server_table_rows_pulled_total", "Rows pulled.", t.rows_pulled, l);
  m.Counter("ps_server_table_rows_pushed_total", "Row gradients pushed.", t.rows_pushed, l);
}

void StatsMetrics(MetricsSnapshot& m, const StatsReplyMsg& s) {
  m.Counter("ps_server_pushes_total", "Pushes applied to the parameters.", s.pushes_applied);
  m.Counter("ps_server_updates_total", "Optimizer steps applied (sync: one per step and slice).", s.updates_applied);
  m.Counter("ps_server_pulls_total", "Pulls answered.", s.pulls_served);
  m.Counter("ps_server_errors_total", "Requests answered with an error.", s.errors_replied);
  m.Counter("ps_server_received_bytes_total", "Bytes of worker requests received.", s.bytes_in);
  m.Counter("ps_server_sent_bytes_total", "Bytes of replies sent.", s.bytes_out);
  m.Counter("ps_server_pull_wait_seconds_total",
            "Time pulls waited for their sync step or ssp clock (the sync barrier), summed over pulls.",
            s.waited_pull_micros * 1e-6);
  m.Counter("ps_server_duplicates_dropped_total", "Re-sent pushes dropped by sequence number.", s.duplicates_dropped);
  m.Counter("ps_server_slices_skipped_total", "Pushed slices skipped: their step was applied before a restart.",
            s.slices_skipped);
  m.Gauge("ps_server_slices", "Slices held.", s.slices_held);
  m.Gauge("ps_server_max_version", "The highest slice version.", s.max_version);
  for (size_t w = 0; w < s.worker_clocks.size(); ++w) {
    m.Gauge("ps_server_worker_clock", "One past the last step each worker pushed to every slice here.",
            s.worker_clocks[w], {{"worker", absl::StrCat(w)}});
  }
  StalenessHistogram(m, s.staleness_histogram);
  for (const TableStatsMsg& t : s.tables) TableMetrics(m, t);
}

}  // namespace

ServerMetrics::ServerMetrics()
    : push_seconds_(LatencyBounds()),
      pull_seconds_(LatencyBounds()),
      other_seconds_(LatencyBounds()),
      checkpoint_seconds_(LatencyBounds()) {}
ServerMetrics::~ServerMetrics() = default;

absl::Status ServerMetrics::Start(const MetricsOptions& options) {
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> e = MetricsEndpoint::StartForRole(options, "server");
  if (!e.ok()) return e.status();
  endpoint_ = std::move(*e);
  return absl::OkStatus();
}

std::string ServerMetrics::url() const { return enabled() ? endpoint_->url() : ""; }

void ServerMetrics::SetRank(int rank) {
  if (enabled()) endpoint_->SetLabel("rank", absl::StrCat(rank));
}

int64_t ServerMetrics::Now() const {
  return enabled() ? std::chrono::steady_clock::now().time_since_epoch().count() : 0;
}

void ServerMetrics::ObserveRequest(const Body& body, int64_t start) {
  if (!enabled()) return;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::duration(Now() - start)).count();
  if (std::holds_alternative<PushRequestMsg>(body)) {
    push_seconds_.Observe(seconds);
  } else if (std::holds_alternative<PullRequestMsg>(body)) {
    pull_seconds_.Observe(seconds);
  } else {
    other_seconds_.Observe(seconds);
  }
}

void ServerMetrics::ObserveCheckpoint(absl::Duration took, bool ok) {
  if (!enabled()) return;
  ++(ok ? checkpoints_ : checkpoint_failures_);
  if (ok) checkpoint_seconds_.Observe(absl::ToDoubleSeconds(took));
}

void ServerMetrics::MaybePublish(absl::FunctionRef<StatsReplyMsg()> stats, size_t shm_channels,
                                 absl::FunctionRef<std::optional<ReplicationStats>()> replication) {
  if (!enabled()) return;
  const absl::Time now = absl::Now();
  if (!endpoint_->PublishDue(now)) return;
  MetricsSnapshot m(endpoint_->labels());
  StatsMetrics(m, stats());
  if (const std::optional<ReplicationStats> r = replication(); r.has_value()) {
    m.Gauge("ps_server_slices_led", "Slices this server is the primary of (--replicas).", r->led);
    m.Gauge("ps_server_slice_backups", "Copies this server holds of slices other servers lead.", r->backups);
    for (const auto& [rank, n] : r->unacknowledged) {
      m.Gauge("ps_server_backup_unacknowledged", "Updates forwarded to a backup and not acknowledged yet.", n,
              {{"backup", absl::StrCat(rank)}});
    }
    m.Counter("ps_server_forwards_refused_total", "Forwarded updates a backup refused.", r->refused);
    m.Counter("ps_server_backup_diverged_total",
              "Updates this primary applied that a backup could not: its copy differs (logged).", r->diverged);
    m.Counter("ps_server_copies_repaired_total",
              "Fresh copies of a slice this primary sent a backup whose copy differed, and the backup took.",
              r->repaired);
    m.Counter("ps_server_steps_forwarded_total",
              "Sync steps of slices this primary forwarded to their backups as the step's sum.", r->steps_forwarded);
  }
  const char* help = "Time the server's loop spent on each worker request (a pull that waits: until it waits).";
  m.Histogram("ps_server_request_seconds", help, push_seconds_, {{"op", "push"}});
  m.Histogram("ps_server_request_seconds", help, pull_seconds_, {{"op", "pull"}});
  m.Histogram("ps_server_request_seconds", help, other_seconds_, {{"op", "other"}});
  m.Counter("ps_server_checkpoints_total", "Checkpoints written by this process.", checkpoints_);
  m.Counter("ps_server_checkpoint_failures_total", "Checkpoints that failed.", checkpoint_failures_);
  m.Histogram("ps_server_checkpoint_seconds", "Time each checkpoint took.", checkpoint_seconds_);
  m.Gauge("ps_server_shm_channels", "Workers exchanging with this server through shared memory.", shm_channels);
  endpoint_->Publish(m.Take(), now);
}

}  // namespace ps
