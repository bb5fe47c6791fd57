#ifndef PS_SCHEDULER_SCHEDULER_H_
#define PS_SCHEDULER_SCHEDULER_H_

// The scheduler of a job: the one address every node is told. It admits S
// servers and W workers, gives each a node id and a rank, sends everyone the
// cluster view, turns the model the workers register into a partition map and
// has the servers create their slices, runs named barriers, and ends the job
// in order once every worker is done. Control only: no tensor data passes
// through it.
//
// Failure detection: every node heartbeats the scheduler; a node silent for
// heartbeat_timeout is declared dead, logged, and a new cluster view (epoch
// + 1, the dead node ids listed) goes to everyone else. A dead worker leaves
// the barriers and the count of workers the job waits for; the job ends when
// every worker that is alive is done (and fails when none is). A node that
// registers naming the rank of a dead (or replaced) node takes that rank
// back: a restarted server gets its slices again (it restores them from its
// checkpoint), a restarted worker rejoins. A worker registering without a rank
// while the job runs takes the rank of a dead worker, if there is one.
//
// Thread-safety: Create() and Run() from one thread; endpoint() and
// RequestStop() from any thread.

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/metrics.h"
#include "common/model/model_spec.h"
#include "common/net/security_options.h"

namespace ps {

struct SchedulerOptions {
  // Where nodes reach the scheduler; port 0 picks an ephemeral port.
  std::string bind = "tcp://127.0.0.1:0";
  // Host announced when `bind` uses a wildcard host.
  std::string advertise_host = "127.0.0.1";
  int num_servers = 1;
  int num_workers = 1;
  // Copies of every slice (common/placement/replica_placement.h): 1 to num_servers.
  int replicas = 1;
  // With one copy of each slice: track where each slice is all the same
  // (views carry the copies), so that servers can join and drain the
  // running job. Always so with replicas >= 2.
  bool elastic = false;
  // The job's consistency as its launcher was told it (ps_run, local_cluster
  // --consistency): a model registered with another job-wide mode is refused
  // naming both, so that a script never trains in a mode nobody asked for.
  // nullopt: whatever the model says.
  std::optional<Consistency> consistency;
  // How long to wait for all S + W nodes to register.
  absl::Duration register_timeout = absl::Seconds(60);
  // How long servers may take to create their slices, and to acknowledge the
  // final shutdown.
  absl::Duration server_timeout = absl::Seconds(30);
  // The longest a barrier waits when the request names no timeout.
  absl::Duration default_barrier_timeout = absl::Seconds(120);
  // A node silent this long (no heartbeat, no request) is declared dead.
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  // Keys and input limits (common/net/security.h). Without keys, `bind` must be
  // loopback unless security.insecure.
  SecurityOptions security;
  // The time heartbeats and deadlines are read from (common/base/clock.h); null:
  // the wall clock. Tests pass a FakeClock.
  const Clock* clock = nullptr;
  // Where the scheduler keeps the job's state (incarnation, node ids and
  // ranks, done workers, the model), rewritten atomically on every change;
  // empty: kept in memory only, and a scheduler crash cannot be recovered.
  std::string state_file;
  // Take the job back from state_file after a crash instead of forming a new
  // one: same incarnation, node ids and ranks; the nodes, still running,
  // re-register and the job goes on. Binds the endpoint recorded there when
  // `bind` asks for port 0.
  bool restore = false;
  // Prometheus metrics (scheduler/scheduler_metrics.h lists them); off by default.
  MetricsOptions metrics;

  // kInvalidArgument naming the field.
  absl::Status Validate() const;
};

class Scheduler {
 public:
  // Binds the socket: kInvalidArgument for bad options, kUnavailable when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(const SchedulerOptions& options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const std::string& endpoint() const;
  // Where its metrics are served (http://HOST:PORT/metrics); empty when off.
  std::string metrics_url() const;

  // Runs the job. OK once every worker has said it is done and every server
  // has acknowledged the shutdown. kDeadlineExceeded naming who is missing
  // when the cluster does not form in time or a server does not answer;
  // kCancelled after RequestStop().
  absl::Status Run();

  void RequestStop();

 private:
  class Impl;
  explicit Scheduler(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps

#endif  // PS_SCHEDULER_SCHEDULER_H_
