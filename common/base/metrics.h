#ifndef PS_COMMON_BASE_METRICS_H_
#define PS_COMMON_BASE_METRICS_H_

// Prometheus metrics, served by every role (scheduler, server, worker) on
// http://HOST:PORT/metrics in Prometheus' text format when it is given a
// metrics port. prometheus-cpp provides the data model and the text format;
// the HTTP side is one thread here that answers GET /metrics and nothing
// else: prometheus-cpp's Exposer (civetweb 1.15) starts its threads with a
// fixed 100 KiB stack, which the static TLS of OpenBLAS and cuBLAS (200 KiB
// in ps_worker) does not fit in, so it cannot start in a worker at all.
//
// A role's state belongs to its one I/O thread, and its hot paths stay free
// of atomics: the thread keeps plain counters and Histograms and, at most
// once per `publish_interval`, builds the families (MetricsSnapshot) and
// Publish()es them; a scrape returns the latest published, so what Prometheus
// sees is at most that old.
//
//   auto endpoint = MetricsEndpoint::Start({.port = 0}, {{"role", "server"}});
//   loop: if (endpoint->PublishDue(now)) {
//           MetricsSnapshot m(endpoint->labels());
//           m.Counter("ps_server_pushes_total", "Pushes applied.", pushes);
//           endpoint->Publish(m.Take(), now);
//         }
//
// Thread-safety: SetLabel, labels(), PublishDue and Publish from the owning
// thread; scrapes are answered on the endpoint's own thread.

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace prometheus {
struct ClientMetric;
struct MetricFamily;
}  // namespace prometheus

namespace ps {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

struct MetricsOptions {
  // <0: no metrics; 0: any free port (the role logs and prints which).
  int port = -1;
  // The interface to listen on. Metrics carry no secret but do describe the
  // job; loopback unless the operator opens them (0.0.0.0 in a pod).
  std::string host = "127.0.0.1";
  absl::Duration publish_interval = absl::Seconds(1);
  // At exit, keep answering scrapes until one has come since the last
  // publication, or this long: a job shorter than Prometheus' scrape interval
  // is then still seen once, with the figures of its last publication (at
  // most publish_interval before the end). 0 (the default): exit at once.
  absl::Duration linger = absl::ZeroDuration();

  bool enabled() const { return port >= 0; }
  absl::Status Validate() const;  // kInvalidArgument naming the field
};

// A histogram one thread fills: counts per bucket (upper bounds ascending,
// the last bucket is everything above), their sum and number.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }  // bounds().size() + 1
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

// Bucket bounds for request and wait times: 10 us to 10 s, x ~3.16.
std::vector<double> LatencyBounds();

// Builds the families of one publication; every sample carries `labels`
// (the role's), then its own.
class MetricsSnapshot {
 public:
  explicit MetricsSnapshot(MetricLabels labels);
  ~MetricsSnapshot();
  MetricsSnapshot(MetricsSnapshot&&) noexcept;

  // A sample of the family `name` (made at its first sample; later samples
  // of it add label sets). Names follow Prometheus' conventions: counters
  // end in _total, units are base units (seconds, bytes).
  void Counter(const std::string& name, const std::string& help, double value, const MetricLabels& extra = {});
  void Gauge(const std::string& name, const std::string& help, double value, const MetricLabels& extra = {});
  void Histogram(const std::string& name, const std::string& help, const ps::Histogram& h,
                 const MetricLabels& extra = {});
  // A histogram from counts per bucket: counts[i] for values <= bounds[i]
  // (not cumulative), counts.back() above the last bound.
  void HistogramOf(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                   const std::vector<uint64_t>& counts, double sum, const MetricLabels& extra = {});

  std::vector<prometheus::MetricFamily> Take();

 private:
  prometheus::ClientMetric& Add(const std::string& name, const std::string& help, int type, const MetricLabels& extra);
  MetricLabels labels_;
  std::unique_ptr<std::vector<prometheus::MetricFamily>> families_;
};

class MetricsEndpoint {
 public:
  // Listens on options.host:options.port (an IPv4 address); kUnavailable
  // naming the address when it cannot (port taken, no such interface).
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const MetricsOptions& options, MetricLabels labels);
  // A role's endpoint, labelled role=`role`, its URL logged; null when
  // `options` are off.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> StartForRole(const MetricsOptions& options,
                                                                       const std::string& role);
  // Waits for a scrape first when the options asked to linger (see there).
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const { return port_; }
  // http://HOST:PORT/metrics
  std::string url() const;
  const MetricLabels& labels() const { return labels_; }
  // Sets (or adds) a label of every later publication, e.g. the rank once
  // the scheduler has assigned it.
  void SetLabel(const std::string& name, const std::string& value);

  // Whether publish_interval has passed since the last Publish.
  bool PublishDue(absl::Time now) const { return now - last_publish_ >= interval_; }
  void Publish(std::vector<prometheus::MetricFamily> families, absl::Time now);

 private:
  MetricsEndpoint() = default;
  void Serve();
  void Answer(int fd);

  int listen_fd_ = -1;
  int wake_fd_ = -1;  // written to stop Serve()
  std::thread thread_;
  std::string host_;
  int port_ = 0;
  MetricLabels labels_;
  absl::Duration interval_;
  absl::Duration linger_;
  mutable absl::Mutex mu_;
  std::vector<prometheus::MetricFamily> published_ ABSL_GUARDED_BY(mu_);
  bool scraped_since_publish_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_publish_ = absl::InfinitePast();  // the owning thread's
};

}  // namespace ps

#endif  // PS_COMMON_BASE_METRICS_H_
