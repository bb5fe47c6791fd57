#ifndef PS_COMMON_BASE_FILE_ERRORS_H_
#define PS_COMMON_BASE_FILE_ERRORS_H_

// What every file writer and reader of the project shares: errno as a
// Status naming the file, and the two steps of replacing a file atomically
// that surround the write (the directory made, then made durable after the
// rename). Used by durable_file (checkpoints, the scheduler's state), the
// model files (common/model_file) and the checkpoint scan (server/export).
// Free functions with no state: thread-safe.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// "`what` `path`: strerror(err)", with the canonical code of errno `err`.
absl::Status ErrnoError(int err, absl::string_view what, const std::string& path);

// The directory `path` goes in, created if missing ("." for a bare name);
// the code of errno naming it when it cannot be made.
absl::StatusOr<std::string> MakeParentDirectory(const std::string& path);

// Makes a rename in `dir` durable (fsync of the directory).
absl::Status FsyncDirectory(const std::string& dir);

}  // namespace ps

#endif  // PS_COMMON_BASE_FILE_ERRORS_H_
