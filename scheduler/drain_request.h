#ifndef PS_SCHEDULER_DRAIN_REQUEST_H_
#define PS_SCHEDULER_DRAIN_REQUEST_H_

// An operator's request that a server leave a running job
// (ps_scheduler --drain_server=R --scheduler=HOST:PORT): sends the job's
// scheduler a DrainRequestMsg and waits for its answer, which comes once
// the server has left (its slices copied to the others and failed over).
// Unanswered, it asks again every 2 s (a scheduler that died with the drain
// under way, restored with --restore, takes it up); answered "not now"
// (UNAVAILABLE), a second later.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/net/security_options.h"

namespace ps {

// OK once server `rank` has left the job; the scheduler's error otherwise
// (no such live server, one copy per slice, another drain under way, ...),
// or kDeadlineExceeded naming `timeout` when no answer came within it (a
// scheduler that is not there, or a drain still copying).
absl::Status RequestDrain(const std::string& scheduler, int32_t rank, const SecurityOptions& security,
                          absl::Duration timeout);

}  // namespace ps

#endif  // PS_SCHEDULER_DRAIN_REQUEST_H_
