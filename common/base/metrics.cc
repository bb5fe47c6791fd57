#include "common/base/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace ps {

absl::Status MetricsOptions::Validate() const {
  if (port > 65535) return absl::InvalidArgumentError(absl::StrCat("metrics_port: ", port, " is not a TCP port"));
  if (enabled() && host.empty()) return absl::InvalidArgumentError("metrics_host: empty");
  if (publish_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("metrics publish_interval: must be positive");
  }
  if (linger < absl::ZeroDuration()) return absl::InvalidArgumentError("metrics_linger: must be >= 0");
  return absl::OkStatus();
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  ++counts_[it - bounds_.begin()];
  ++count_;
  sum_ += value;
}

std::vector<double> LatencyBounds() { return {1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10}; }

MetricsSnapshot::MetricsSnapshot(MetricLabels labels)
    : labels_(std::move(labels)), families_(std::make_unique<std::vector<prometheus::MetricFamily>>()) {}
MetricsSnapshot::~MetricsSnapshot() = default;
MetricsSnapshot::MetricsSnapshot(MetricsSnapshot&&) noexcept = default;

prometheus::ClientMetric& MetricsSnapshot::Add(const std::string& name, const std::string& help, int type,
                                               const MetricLabels& extra) {
  auto family = std::find_if(families_->begin(), families_->end(),
                             [&](const prometheus::MetricFamily& f) { return f.name == name; });
  if (family == families_->end()) {
    family = families_->insert(families_->end(),
                               prometheus::MetricFamily{name, help, static_cast<prometheus::MetricType>(type), {}});
  }
  prometheus::ClientMetric& m = family->metric.emplace_back();
  for (const auto& [k, v] : labels_) m.label.push_back({k, v});
  for (const auto& [k, v] : extra) m.label.push_back({k, v});
  return m;
}

void MetricsSnapshot::Counter(const std::string& name, const std::string& help, double value,
                              const MetricLabels& extra) {
  Add(name, help, static_cast<int>(prometheus::MetricType::Counter), extra).counter.value = value;
}

void MetricsSnapshot::Gauge(const std::string& name, const std::string& help, double value, const MetricLabels& extra) {
  Add(name, help, static_cast<int>(prometheus::MetricType::Gauge), extra).gauge.value = value;
}

void MetricsSnapshot::Histogram(const std::string& name, const std::string& help, const ps::Histogram& h,
                                const MetricLabels& extra) {
  HistogramOf(name, help, h.bounds(), h.counts(), h.sum(), extra);
}

void MetricsSnapshot::HistogramOf(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                                  const std::vector<uint64_t>& counts, double sum, const MetricLabels& extra) {
  auto& h = Add(name, help, static_cast<int>(prometheus::MetricType::Histogram), extra).histogram;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    const double le = i < bounds.size() ? bounds[i] : std::numeric_limits<double>::infinity();
    h.bucket.push_back({cumulative, le});
  }
  h.sample_count = cumulative;
  h.sample_sum = sum;
}

std::vector<prometheus::MetricFamily> MetricsSnapshot::Take() { return std::move(*families_); }

namespace {

constexpr size_t kMaxRequestBytes = 8 << 10;
constexpr absl::Duration kRequestDeadline = absl::Seconds(2);

// Reads one request's head (up to the blank line) within the deadline; empty
// when the client sends nothing usable in time, or too much.
std::string ReadRequestHead(int fd) {
  std::string head;
  const absl::Time deadline = absl::Now() + kRequestDeadline;
  char buf[1024];
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < kMaxRequestBytes) {
    pollfd p{fd, POLLIN, 0};
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0 || poll(&p, 1, static_cast<int>(ms)) <= 0) return "";
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return "";
    head.append(buf, n);
  }
  return head.find("\r\n\r\n") == std::string::npos ? "" : head;
}

// Writes within the deadline; a client that does not read is dropped.
void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  const absl::Time deadline = absl::Now() + kRequestDeadline;
  while (done < data.size()) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += n;
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return;
    pollfd p{fd, POLLOUT, 0};
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0 || poll(&p, 1, static_cast<int>(ms)) <= 0) return;
  }
}

std::string Response(const char* status, const std::string& type, const std::string& body, bool head_only) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type, "\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", head_only ? "" : body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const MetricsOptions& options,
                                                                        MetricLabels labels) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (!options.enabled()) return absl::InvalidArgumentError("metrics: no port given");
  const std::string address = absl::StrCat(options.host, ":", options.port);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(options.port));
  if (inet_pton(AF_INET, options.host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("metrics_host: '", options.host, "' is not an IPv4 address"));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int one = 1;
  if (fd < 0 || wake < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 16) != 0) {
    const int err = errno;
    if (fd >= 0) close(fd);
    if (wake >= 0) close(wake);
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", address, ": ", strerror(err)));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  e->listen_fd_ = fd;
  e->wake_fd_ = wake;
  e->host_ = options.host;
  e->port_ = ntohs(addr.sin_port);
  e->labels_ = std::move(labels);
  e->interval_ = options.publish_interval;
  e->linger_ = options.linger;
  e->thread_ = std::thread([raw = e.get()] { raw->Serve(); });
  return e;
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::StartForRole(const MetricsOptions& options,
                                                                               const std::string& role) {
  if (!options.enabled()) return nullptr;
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> e = Start(options, {{"role", role}});
  if (e.ok()) LOG(INFO) << role << ": metrics at " << (*e)->url();
  return e;
}

MetricsEndpoint::~MetricsEndpoint() {
  if (linger_ > absl::ZeroDuration()) {
    mu_.LockWhenWithTimeout(absl::Condition(&scraped_since_publish_), linger_);
    mu_.Unlock();
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(wake_fd_);
}

void MetricsEndpoint::Serve() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) return;
    if (p[1].revents != 0) return;
    if ((p[0].revents & POLLIN) == 0) continue;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (client < 0) continue;
    Answer(client);
    close(client);
  }
}

// GET (or HEAD) /metrics: the latest publication in the text format 0.0.4;
// anything else: 404 or 405. One connection at a time, closed after it.
void MetricsEndpoint::Answer(int fd) {
  const std::string head = ReadRequestHead(fd);
  if (head.empty()) return;
  const std::vector<std::string> parts = absl::StrSplit(head.substr(0, head.find("\r\n")), ' ');
  const bool get = parts.size() == 3 && parts[0] == "GET", head_only = parts.size() == 3 && parts[0] == "HEAD";
  if (!get && !head_only) {
    WriteAll(fd, Response("405 Method Not Allowed", "text/plain", "only GET /metrics\n", false));
    return;
  }
  if (parts[1] != "/metrics" && parts[1].rfind("/metrics?", 0) != 0) {
    WriteAll(fd, Response("404 Not Found", "text/plain", "metrics are at /metrics\n", head_only));
    return;
  }
  std::vector<prometheus::MetricFamily> families;
  {
    absl::MutexLock lock(&mu_);
    families = published_;
  }
  WriteAll(fd, Response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                        prometheus::TextSerializer().Serialize(families), head_only));
  absl::MutexLock lock(&mu_);
  scraped_since_publish_ = true;
}

std::string MetricsEndpoint::url() const { return absl::StrCat("http://", host_, ":", port_, "/metrics"); }

void MetricsEndpoint::SetLabel(const std::string& name, const std::string& value) {
  for (auto& [k, v] : labels_) {
    if (k == name) {
      v = value;
      return;
    }
  }
  labels_.emplace_back(name, value);
}

void MetricsEndpoint::Publish(std::vector<prometheus::MetricFamily> families, absl::Time now) {
  last_publish_ = now;
  absl::MutexLock lock(&mu_);
  published_ = std::move(families);
  scraped_since_publish_ = false;
}

}  // namespace ps
