#ifndef PS_COMMON_BASE_MAIN_SUPPORT_H_
#define PS_COMMON_BASE_MAIN_SUPPORT_H_

// What every *_main.cc does first: parse flags (--help lists every flag the
// binary takes with its default, grouped by the file that defines it), set up
// logging to stderr.

#include <string>

#include "absl/status/status.h"

namespace ps {

// Parses argv with Abseil flags, starts glog and raises the soft limit of
// open files to the hard one (a scheduler or server holds a descriptor per
// connected node). Exits 1 with a message naming
// the flag on an unknown flag, a malformed value or a positional argument.
void InitMain(int argc, char** argv, const std::string& usage);

// The consistency a worker's main registers its model with: `flag` when not
// empty, else PS_CONSISTENCY (the job's mode, as scripts/ps_run and the other
// launchers hand it to every worker), else "sync". A main's own reading of
// the environment, as torchrun's scripts read theirs; libraries never do.
std::string WorkerConsistency(const std::string& flag);

// Logs `status` with `what` and returns the process exit code: 0 for OK, 1
// otherwise, 2 for invalid flags (kInvalidArgument from Validate()).
int ExitCode(const absl::Status& status, const std::string& what);

}  // namespace ps

#endif  // PS_COMMON_BASE_MAIN_SUPPORT_H_
