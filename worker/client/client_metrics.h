#ifndef PS_WORKER_CLIENT_CLIENT_METRICS_H_
#define PS_WORKER_CLIENT_CLIENT_METRICS_H_

// A worker's Prometheus metrics (common/base/metrics.h), kept by its KVClient:
//
//   ps_worker_requests_total{op="push|pull|pushpull|other"}   sent to servers
//   ps_worker_request_errors_total{op}       answered with an error or expired
//   ps_worker_request_seconds{op}            from sending to the answer
//   ps_worker_sent_bytes_total, _received_bytes_total   tensor payload bytes
//   ps_worker_wait_seconds                   time each Wait() blocked: in sync
//                                            training, the wait at the sync
//                                            barrier for the other workers
//   ps_worker_replay_bytes                   pushes kept for re-sending
//   ps_worker_requests_resent_total, _server_restarts_total
//   ps_worker_shm_servers                    servers reached through shared memory
//
// Labels: role="worker", rank. The I/O thread counts and publishes; Wait()
// observes from the caller's thread (under a mutex).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/metrics.h"
#include "common/wire/messages.h"
#include "zmq.hpp"

namespace ps {

class ClientMetrics {
 public:
  ClientMetrics();
  ~ClientMetrics();

  // Starts serving when options are enabled; otherwise every call is a no-op.
  absl::Status Start(const MetricsOptions& options);
  bool enabled() const { return endpoint_ != nullptr; }
  std::string url() const { return enabled() ? endpoint_->url() : ""; }

  // The I/O thread's.
  // Each call is a no-op (no clock read, no byte count) when off.
  void Sent(const Body& body, const std::vector<zmq::message_t>& payloads);
  void Received(const std::vector<zmq::message_t>& payloads);
  // A request ended: `sent` is when it went out, on `clock`.
  void Finished(const Body& body, const Clock& clock, absl::Time sent, bool ok);
  struct State {
    int rank = -1;
    uint64_t replay_bytes = 0;
    uint64_t requests_resent = 0;
    uint64_t server_restarts = 0;
    int shm_servers = 0;
  };
  bool PublishDue() const { return enabled() && endpoint_->PublishDue(absl::Now()); }
  void Publish(const State& state);

  // Any thread. WaitStart is 0 when off; ObserveWait(WaitStart()) after the wait.
  int64_t WaitStart() const;
  void ObserveWait(int64_t start);

 private:
  enum Op { kPush, kPull, kPushPull, kOther, kOps };
  static Op OpOf(const Body& body);

  std::unique_ptr<MetricsEndpoint> endpoint_;
  std::vector<Histogram> seconds_;  // by Op
  uint64_t requests_[kOps] = {}, errors_[kOps] = {};
  uint64_t sent_bytes_ = 0, received_bytes_ = 0;
  absl::Mutex wait_mu_;
  Histogram waits_ ABSL_GUARDED_BY(wait_mu_);
};

}  // namespace ps

#endif  // PS_WORKER_CLIENT_CLIENT_METRICS_H_
