#include "common/base/main_support.h"

#include <malloc.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "glog/logging.h"

namespace ps {
namespace {

// ZeroMQ receives every message into a fresh malloc() buffer. Left to its
// defaults, glibc serves buffers of a megabyte or more with mmap() and
// returns them on free(), so every received tensor slice costs page faults
// and zeroing of fresh pages (several percent of a training step's CPU time
// here). Keeping them in the heap lets the next message reuse the pages.
void KeepLargeBuffersInTheHeap() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

// A scheduler or a server holds one descriptor per node connected to it
// (and ZeroMQ a few of its own): the usual soft limit of 1024 open files
// would end a job near a thousand nodes. Raised to the hard limit.
void RaiseOpenFileLimit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur >= files.rlim_max) return;
  files.rlim_cur = files.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &files) != 0) std::perror("setrlimit(RLIMIT_NOFILE)");
}

// Flags are grouped in --help by the file that defines them, named from the
// repository's root (worker/client/client_flags.cc: the client's;
// common/net/security_flags.cc: CurveZMQ; the binary's own main), so --help
// lists every flag the binary takes; Abseil's own stay under --helpfull.
std::string FlagFile(absl::string_view file) {
  absl::ConsumePrefix(&file, PS_SOURCE_DIR);
  return std::string(file);
}

bool IsProjectFlagFile(absl::string_view file) {
  return !absl::StartsWith(file, "/") && !absl::StrContains(file, "absl/");
}

}  // namespace

void InitMain(int argc, char** argv, const std::string& usage) {
  absl::FlagsUsageConfig config;
  config.contains_help_flags = IsProjectFlagFile;
  config.contains_helpshort_flags = IsProjectFlagFile;
  config.normalize_filename = FlagFile;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "%s: unexpected argument '%s' (flags are --name=value; see --help)\n", argv[0], rest[1]);
    std::exit(2);
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  KeepLargeBuffersInTheHeap();
  RaiseOpenFileLimit();
}

std::string WorkerConsistency(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* job = std::getenv("PS_CONSISTENCY");
  return job != nullptr && *job != '\0' ? job : "sync";
}

int ExitCode(const absl::Status& status, const std::string& what) {
  if (status.ok()) return 0;
  LOG(ERROR) << what << ": " << status;
  std::fprintf(stderr, "%s: %s\n", what.c_str(), status.ToString().c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace ps
