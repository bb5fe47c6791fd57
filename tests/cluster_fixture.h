#ifndef PS_TESTS_CLUSTER_FIXTURE_H_
#define PS_TESTS_CLUSTER_FIXTURE_H_

// A scheduler and S servers running on threads of the test process, on
// ephemeral 127.0.0.1 ports, configured through their Options structs: the
// in-process harness of the tests (tests/job.h is the multi-process one).
// Stopped and joined on destruction. Not thread-safe.

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/net/security_options.h"
#include "scheduler/scheduler.h"
#include "server/server.h"

namespace ps::testing {

struct InProcessClusterOptions {
  int num_servers = 1;
  int num_workers = 1;
  // The scheduler's; each server waits 5 s longer (the scheduler reports first).
  absl::Duration register_timeout = absl::Seconds(30);
  int server_threads = 2;
  int replicas = 1;                                      // ps_scheduler --replicas
  absl::Duration heartbeat_timeout = absl::Seconds(5);   // the scheduler's
  absl::Duration heartbeat_interval = absl::Seconds(1);  // the servers'
  // The servers' ServerOptions::default_pull_timeout (also how long a request
  // acting on a newer cluster view waits for it).
  absl::Duration default_pull_timeout = absl::Seconds(60);
  // Server i's ServerOptions::forward_fault (none when the list is shorter).
  std::vector<std::function<absl::Status(const PushRequestMsg&)>> forward_faults;
  // The scheduler's keys and limits, and server i's (none when the list is
  // shorter): common/net/security_options.h.
  SecurityOptions scheduler_security;
  std::vector<SecurityOptions> server_security;
  // The servers' ServerOptions::checkpoint_dir (empty: none).
  std::string checkpoint_dir;
};

class InProcessCluster {
 public:
  // Starts the scheduler and the servers. Errors: the roles' Create.
  static absl::StatusOr<std::unique_ptr<InProcessCluster>> Start(const InProcessClusterOptions& options);
  // Starts the scheduler and `num_servers` servers for `num_workers` workers.
  static absl::StatusOr<std::unique_ptr<InProcessCluster>> Start(int num_servers, int num_workers,
                                                                 absl::Duration register_timeout = absl::Seconds(30));
  ~InProcessCluster();

  const std::string& scheduler_endpoint() const { return scheduler_->endpoint(); }
  const std::string& server_endpoint(int i) const { return servers_[i]->endpoint(); }
  // Makes server i stop serving, as if it died, and waits until its Run has
  // returned (kCancelled); kDeadlineExceeded if it does not within `timeout`.
  absl::Status StopServer(int i, absl::Duration timeout);
  // Waits for every thread to finish on its own (the job ended) and returns
  // the scheduler's status, or kDeadlineExceeded.
  absl::Status Join(absl::Duration timeout);

 private:
  InProcessCluster() = default;

  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status scheduler_status_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> server_status_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> server_done_ ABSL_GUARDED_BY(mu_);
};

// What the exact-sum worker's "dense" tensor must sum to after `steps` steps of
// `workers` workers: every element of every integer gradient it pushed,
// computed here independently of worker/exact_sum/exact_sum_check.cc.
double ExpectedDenseSum(int workers, int steps, int64_t n);

// A fresh directory under $TMPDIR (or /tmp) for one test's files; removed
// when the test passed, kept (and its path printed) when it failed.
class ScopedTempDir {
 public:
  ScopedTempDir();
  ~ScopedTempDir();
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_CLUSTER_FIXTURE_H_
