#include "common/base/metrics_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(int, metrics_port, -1,
          "Serve Prometheus metrics at http://HOST:PORT/metrics (-1: off; 0: any free port, printed).");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1", "Interface the metrics are served on (0.0.0.0: all).");
ABSL_FLAG(absl::Duration, metrics_linger, absl::ZeroDuration(),
          "At exit, keep serving metrics until scraped once since the last publication, or this long (e.g. 30s): "
          "a job shorter than the scrape interval is still seen.");

namespace ps {

MetricsOptions MetricsFromFlags() {
  return {.port = absl::GetFlag(FLAGS_metrics_port),
          .host = absl::GetFlag(FLAGS_metrics_host),
          .linger = absl::GetFlag(FLAGS_metrics_linger)};
}

}  // namespace ps
