#ifndef PS_COMMON_BASE_EVENTS_FLAGS_H_
#define PS_COMMON_BASE_EVENTS_FLAGS_H_

// The --events flag, defined once (in events_flags.cc) for the binaries that
// write structured events (common/base/events.h): the scheduler, the server
// and the workers. Only *_main.cc files call this.

#include "absl/status/status.h"

namespace ps {

// OpenEventFile(--events). Errors: the file cannot be opened.
absl::Status OpenEventFileFromFlags();

}  // namespace ps

#endif  // PS_COMMON_BASE_EVENTS_FLAGS_H_
