#include "worker/train/train_event.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/base/json.h"
#include "common/base/status_macros.h"
#include "worker/client/kv_client.h"

namespace ps {
namespace {

// The staleness histogram summed over servers, and its mean, p99 and buckets.
struct Staleness {
  std::vector<uint64_t> histogram;
  uint64_t total = 0;
  double mean = 0;
  uint64_t p99 = 0;  // the smallest s with at least 99% of the slice updates at or below it

  explicit Staleness(absl::Span<const ServerStats> servers) {
    for (const ServerStats& st : servers) {
      if (histogram.size() < st.staleness_histogram.size()) histogram.resize(st.staleness_histogram.size());
      for (size_t i = 0; i < st.staleness_histogram.size(); ++i) histogram[i] += st.staleness_histogram[i];
    }
    double sum = 0;
    for (size_t i = 0; i < histogram.size(); ++i) {
      total += histogram[i];
      sum += static_cast<double>(i) * histogram[i];
    }
    mean = total ? sum / total : 0;
    uint64_t seen = 0;
    for (size_t i = 0; i < histogram.size(); ++i) {
      seen += histogram[i];
      if (static_cast<double>(seen) >= 0.99 * static_cast<double>(total)) {
        p99 = i;
        break;
      }
    }
    while (!histogram.empty() && histogram.back() == 0) histogram.pop_back();
  }

  std::string Buckets() const {
    std::string buckets = "[";
    for (size_t i = 0; i < histogram.size(); ++i) absl::StrAppend(&buckets, i ? "," : "", histogram[i]);
    return buckets + "]";
  }
};

// The table fields, when some server holds a table shard.
void AddTableFields(absl::Span<const ServerStats> servers, TrainEvent* event) {
  ServerStats::Table sum;
  bool any = false;
  for (const ServerStats& st : servers) {
    for (const ServerStats::Table& t : st.tables) {
      any = true;
      sum.rows += t.rows + t.disk_rows;  // the disk tier's too
      sum.disk_rows += t.disk_rows;
      sum.bytes += t.bytes;
      sum.evictions += t.evictions;
      sum.admissions += t.admissions;
      sum.rows_pulled += t.rows_pulled;
      sum.rows_pushed += t.rows_pushed;
    }
  }
  if (!any) return;
  for (auto [name, value] : {std::pair<const char*, uint64_t>{"table_rows", sum.rows},
                             {"table_bytes", sum.bytes},
                             {"table_evictions", sum.evictions},
                             {"table_admissions", sum.admissions},
                             {"table_rows_pulled", sum.rows_pulled},
                             {"table_rows_pushed", sum.rows_pushed}}) {
    event->fields.emplace_back(name, absl::StrCat(value));
  }
  if (sum.disk_rows > 0) event->fields.emplace_back("table_disk_rows", absl::StrCat(sum.disk_rows));
}

}  // namespace

std::string EventNumber(double v) { return JsonSignificant(v, 6); }
std::string EventString(absl::string_view s) { return JsonQuote(s); }

std::string TrainEvent::ToJson() const {
  JsonLine line;
  line.Add("event", kind);
  for (const auto& [name, value] : fields) line.AddRaw(name, value);
  return line.Str();
}

TrainEvent ServerStatsEvent(int rank, absl::Span<const ServerStats> servers) {
  uint64_t updates = 0, pushes = 0, max = 0, waited_us = 0;
  for (const ServerStats& st : servers) {
    updates += st.updates_applied;
    pushes += st.pushes_applied;
    max = std::max(max, st.staleness_max);
    waited_us += st.waited_pull_micros;
  }
  const Staleness staleness(servers);
  TrainEvent event{"server_stats",
                   {{"rank", absl::StrCat(rank)},
                    {"servers", absl::StrCat(servers.size())},
                    {"pushes_applied", absl::StrCat(pushes)},
                    {"updates_applied", absl::StrCat(updates)},
                    {"slice_updates", absl::StrCat(staleness.total)},
                    {"staleness_mean", EventNumber(staleness.mean)},
                    {"staleness_p99", absl::StrCat(staleness.p99)},
                    {"staleness_max", absl::StrCat(max)},
                    {"staleness_histogram", staleness.Buckets()},
                    {"pulls_waited_s", EventNumber(waited_us / 1e6)}}};
  AddTableFields(servers, &event);
  return event;
}

absl::StatusOr<TrainEvent> CollectServerStatsEvent(KVClient* client) {
  std::vector<ServerStats> servers;
  for (int s = 0; s < client->num_servers(); ++s) {
    PS_ASSIGN_OR_RETURN(std::optional<ServerStats> st, client->LiveServerStats(s));
    if (st.has_value()) servers.push_back(*std::move(st));
  }
  TrainEvent event = ServerStatsEvent(client->rank(), servers);
  // Servers that died with --replicas: their backups' counters hold what they applied.
  const size_t failed_over = client->num_servers() - servers.size();
  if (failed_over > 0) event.fields.emplace_back("servers_failed_over", absl::StrCat(failed_over));
  return event;
}

absl::Status FinishRun(KVClient* client, const TrainEvent& done,
                       const std::function<void(const TrainEvent&)>& on_event) {
  if (on_event) on_event(done);
  if (on_event && client->rank() == 0) {
    PS_ASSIGN_OR_RETURN(TrainEvent stats, CollectServerStatsEvent(client));
    on_event(stats);
  }
  return client->Finish();
}

}  // namespace ps
