#include "worker/client/client_metrics.h"

#include <chrono>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "prometheus/metric_family.h"

namespace ps {

ClientMetrics::ClientMetrics() : seconds_(kOps, Histogram(LatencyBounds())), waits_(LatencyBounds()) {}
ClientMetrics::~ClientMetrics() = default;

absl::Status ClientMetrics::Start(const MetricsOptions& options) {
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> e = MetricsEndpoint::StartForRole(options, "worker");
  if (!e.ok()) return e.status();
  endpoint_ = std::move(*e);
  return absl::OkStatus();
}

ClientMetrics::Op ClientMetrics::OpOf(const Body& body) {
  if (const auto* push = std::get_if<PushRequestMsg>(&body)) return push->then_pull ? kPushPull : kPush;
  return std::holds_alternative<PullRequestMsg>(body) ? kPull : kOther;
}

namespace {

uint64_t PayloadBytes(const std::vector<zmq::message_t>& payloads) {
  uint64_t bytes = 0;
  for (const zmq::message_t& p : payloads) bytes += p.size();
  return bytes;
}

}  // namespace

void ClientMetrics::Sent(const Body& body, const std::vector<zmq::message_t>& payloads) {
  if (!enabled()) return;
  ++requests_[OpOf(body)];
  sent_bytes_ += PayloadBytes(payloads);
}

void ClientMetrics::Received(const std::vector<zmq::message_t>& payloads) {
  if (enabled()) received_bytes_ += PayloadBytes(payloads);
}

void ClientMetrics::Finished(const Body& body, const Clock& clock, absl::Time sent, bool ok) {
  if (!enabled()) return;
  const Op op = OpOf(body);
  seconds_[op].Observe(absl::ToDoubleSeconds(clock.Now() - sent));
  if (!ok) ++errors_[op];
}

int64_t ClientMetrics::WaitStart() const {
  return enabled() ? std::chrono::steady_clock::now().time_since_epoch().count() : 0;
}

void ClientMetrics::ObserveWait(int64_t start) {
  if (!enabled()) return;
  const std::chrono::steady_clock::duration waited(std::chrono::steady_clock::now().time_since_epoch().count() - start);
  absl::MutexLock lock(&wait_mu_);
  waits_.Observe(std::chrono::duration<double>(waited).count());
}

void ClientMetrics::Publish(const State& state) {
  if (!enabled()) return;
  MetricLabels labels = endpoint_->labels();
  labels.emplace_back("rank", absl::StrCat(state.rank));
  MetricsSnapshot m(std::move(labels));
  const char* names[kOps] = {"push", "pull", "pushpull", "other"};
  for (int op = 0; op < kOps; ++op) {
    const MetricLabels l = {{"op", names[op]}};
    m.Counter("ps_worker_requests_total", "Requests sent to servers.", requests_[op], l);
    m.Counter("ps_worker_request_errors_total", "Requests answered with an error or expired.", errors_[op], l);
    m.Histogram("ps_worker_request_seconds", "Time from sending a request to its answer.", seconds_[op], l);
  }
  m.Counter("ps_worker_sent_bytes_total", "Tensor payload bytes sent to servers.", sent_bytes_);
  m.Counter("ps_worker_received_bytes_total", "Tensor payload bytes received from servers.", received_bytes_);
  {
    absl::MutexLock lock(&wait_mu_);
    m.Histogram("ps_worker_wait_seconds",
                "Time each Wait() blocked; in sync training mostly the wait at the sync barrier for the other "
                "workers' pushes.",
                waits_);
  }
  m.Gauge("ps_worker_replay_bytes", "Bytes of pushes kept to re-send after a server restart.", state.replay_bytes);
  m.Counter("ps_worker_requests_resent_total", "Requests re-sent after a server restart.", state.requests_resent);
  m.Counter("ps_worker_server_restarts_total", "Server restarts this worker recovered from.", state.server_restarts);
  m.Gauge("ps_worker_shm_servers", "Servers reached through shared memory.", state.shm_servers);
  endpoint_->Publish(m.Take(), absl::Now());
}

}  // namespace ps
