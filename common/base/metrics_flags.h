#ifndef PS_COMMON_BASE_METRICS_FLAGS_H_
#define PS_COMMON_BASE_METRICS_FLAGS_H_

// The metrics flags, defined once (in metrics_flags.cc) for every role's
// binary:
//
//   --metrics_port   serve Prometheus metrics on this port (-1: off, the
//                    default; 0: any free port, printed)
//   --metrics_host   the interface to serve them on (default 127.0.0.1)
//   --metrics_linger at exit, serve until scraped once more, or this long
//
// Only *_main.cc files call this; libraries take the options.

#include "common/base/metrics.h"

namespace ps {

MetricsOptions MetricsFromFlags();

}  // namespace ps

#endif  // PS_COMMON_BASE_METRICS_FLAGS_H_
