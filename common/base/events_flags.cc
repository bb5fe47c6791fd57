#include "common/base/events_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "common/base/events.h"

ABSL_FLAG(std::string, events, "",
          "Append this node's structured events (one JSON line per change of the job's state: registered, "
          "server_lost, checkpoint, ...; see docs/metrics.md) to this file.");

namespace ps {

absl::Status OpenEventFileFromFlags() { return OpenEventFile(absl::GetFlag(FLAGS_events)); }

}  // namespace ps
