#ifndef PS_SCHEDULER_SCHEDULER_METRICS_H_
#define PS_SCHEDULER_SCHEDULER_METRICS_H_

// The scheduler's Prometheus metrics (common/base/metrics.h), one sample per node
// of the job, labelled node_role, node_rank and node_id:
//
//   ps_scheduler_node_heartbeat_age_seconds  since the node was last heard
//   ps_scheduler_node_alive                  1, or 0 once declared dead/replaced
//   ps_scheduler_node_done                   1 once a worker said it is done
//   ps_scheduler_node_unreachable_workers    a server: workers that cannot reach it now
//   ps_scheduler_nodes{node_role, state="alive|dead|done"}
//   ps_scheduler_view_epoch                  the cluster view's epoch
//   ps_scheduler_slices{copies}              --replicas: slices by how many copies they have now
//
// Labels: role="scheduler". Not thread-safe: the scheduler's loop owns it.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/metrics.h"
#include "common/wire/messages.h"

namespace ps {

struct NodeHealth {
  Role role = Role::kWorker;
  int rank = -1;
  uint32_t node_id = 0;
  bool alive = true;
  bool done = false;
  absl::Duration heartbeat_age;
  int unreachable_from = 0;  // a server: workers that say they cannot reach it
};

class SchedulerMetrics {
 public:
  // Starts serving when options are enabled; otherwise every call is a no-op.
  absl::Status Start(const MetricsOptions& options);
  std::string url() const { return endpoint_ != nullptr ? endpoint_->url() : ""; }
  bool PublishDue() const { return endpoint_ != nullptr && endpoint_->PublishDue(absl::Now()); }
  // `slices_by_copies`: copies -> slices with that many (--replicas; empty without).
  void Publish(const std::vector<NodeHealth>& nodes, uint64_t view_epoch, const std::map<int, int>& slices_by_copies);

 private:
  std::unique_ptr<MetricsEndpoint> endpoint_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_SCHEDULER_METRICS_H_
