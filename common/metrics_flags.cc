#include "common/metrics_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(int, metrics_port, -1,
          "Serve Prometheus metrics at http://HOST:PORT/metrics (-1: off; 0: any free port, printed).");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1", "Interface the metrics are served on (0.0.0.0: all).");

namespace ps {

MetricsOptions MetricsFromFlags() {
  return {.port = absl::GetFlag(FLAGS_metrics_port), .host = absl::GetFlag(FLAGS_metrics_host)};
}

}  // namespace ps
