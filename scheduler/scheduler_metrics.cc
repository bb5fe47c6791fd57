#include "scheduler/scheduler_metrics.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "prometheus/metric_family.h"

namespace ps {

absl::Status SchedulerMetrics::Start(const MetricsOptions& options) {
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> e = MetricsEndpoint::StartForRole(options, "scheduler");
  if (!e.ok()) return e.status();
  endpoint_ = std::move(*e);
  return absl::OkStatus();
}

void SchedulerMetrics::Publish(const std::vector<NodeHealth>& nodes, uint64_t view_epoch,
                               const std::map<int, int>& slices_by_copies) {
  if (endpoint_ == nullptr) return;
  MetricsSnapshot m(endpoint_->labels());
  std::map<std::pair<std::string, std::string>, int> by_state;  // (role, state) -> nodes
  for (const char* role : {"server", "worker"}) {
    for (const char* state : {"alive", "dead", "done"}) by_state[{role, state}] = 0;
  }
  for (const NodeHealth& n : nodes) {
    const std::string role = n.role == Role::kServer ? "server" : "worker";
    const MetricLabels l = {
        {"node_role", role}, {"node_rank", absl::StrCat(n.rank)}, {"node_id", absl::StrCat(n.node_id)}};
    m.Gauge("ps_scheduler_node_heartbeat_age_seconds", "Time since the scheduler last heard from the node.",
            absl::ToDoubleSeconds(n.heartbeat_age), l);
    m.Gauge("ps_scheduler_node_alive", "1 while the node is alive; 0 once declared dead or replaced.", n.alive, l);
    m.Gauge("ps_scheduler_node_done", "1 once the worker said it is done.", n.done, l);
    if (n.role == Role::kServer) {
      m.Gauge("ps_scheduler_node_unreachable_workers",
              "Workers whose requests this server has not answered for their heartbeat timeout (a network cut).",
              n.unreachable_from, l);
    }
    ++by_state[{role, n.done ? "done" : n.alive ? "alive" : "dead"}];
  }
  for (const auto& [key, count] : by_state) {
    m.Gauge("ps_scheduler_nodes", "Nodes of the job by role and state.", count,
            {{"node_role", key.first}, {"state", key.second}});
  }
  m.Gauge("ps_scheduler_view_epoch", "Epoch of the cluster view (one more per change).", view_epoch);
  for (const auto& [copies, slices] : slices_by_copies) {
    m.Gauge("ps_scheduler_slices", "Slices by how many copies they have now (--replicas).", slices,
            {{"copies", absl::StrCat(copies)}});
  }
  endpoint_->Publish(m.Take(), absl::Now());
}

}  // namespace ps
