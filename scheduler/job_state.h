#ifndef PS_SCHEDULER_JOB_STATE_H_
#define PS_SCHEDULER_JOB_STATE_H_

// The scheduler's state file: what a scheduler restarted with --restore needs
// to take a running job back (JobState, common/wire/messages.h). A framed file
// (common/base/durable_file.h) with magic "PSSCHED\n" and format version
// kJobStateFormat, whose body is EncodeJobState's Cap'n Proto message
// (schemas/ps.capnp JobState); replaced atomically on every write.
//
// Free functions with no shared state: thread-safe (for different paths).

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/wire/messages.h"

namespace ps {

// Format 2 adds the job's configuration (JobState::config); a file of
// format 1 is still read, without it.
inline constexpr uint32_t kJobStateFormat = 2;

// Writes `state` to `path` atomically. Errors as WriteFramedFile's (the code
// of errno, naming the path).
absl::Status WriteJobState(const std::string& path, const JobState& state);

// Reads and checks a state file. kNotFound when there is none; kDataLoss
// naming the path and the problem for a file that is not a state file, is
// truncated, corrupt or does not decode, or holds values that cannot be
// (incarnation 0, no endpoint, node counts out of range, a node whose rank
// is out of range or whose id is not below next_node_id, a configuration
// with replicas outside [1, num_servers] or a timeout not positive); the code of errno
// for a failing read.
absl::StatusOr<JobState> ReadJobState(const std::string& path);

}  // namespace ps

#endif  // PS_SCHEDULER_JOB_STATE_H_
