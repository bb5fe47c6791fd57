#ifndef PS_TESTS_CHILD_PROCESS_H_
#define PS_TESTS_CHILD_PROCESS_H_

// A program started by a test: stdout captured through a pipe, stderr to a
// file, and always stopped, by its own pid, when the object goes away (also
// when the test fails). Not thread-safe.

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps::testing {

class ChildProcess {
 public:
  // Starts `binary` (a name in PS_BIN_DIR) with `args`. stderr goes to
  // `stderr_path`.
  static absl::StatusOr<ChildProcess> Start(const std::string& binary,
                                            const std::vector<std::string>& args,
                                            const std::string& stderr_path);
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ~ChildProcess();  // SIGKILL and reap if still running

  pid_t pid() const { return pid_; }
  // Waits until stdout holds a line starting with `prefix`; returns the rest
  // of that line. kDeadlineExceeded, or kUnavailable when the child exits.
  absl::StatusOr<std::string> WaitForLine(const std::string& prefix, absl::Duration timeout);
  // Waits for exit; returns the exit code (128+signal when killed).
  // kDeadlineExceeded when still running at the deadline.
  absl::StatusOr<int> WaitExit(absl::Duration timeout);
  const std::string& stdout_text() const { return out_; }
  std::string StderrText() const;
  void Kill();

 private:
  ChildProcess(pid_t pid, int pidfd, int out_fd, std::string stderr_path);
  // Reads what is there; waits at most until `deadline` for the child to
  // write or exit. Returns false when the deadline passed with nothing new.
  bool Pump(absl::Time deadline);

  pid_t pid_ = -1;
  int pidfd_ = -1;
  int out_fd_ = -1;
  std::string stderr_path_;
  std::string out_;
  bool exited_ = false;
  int exit_code_ = -1;
};

}  // namespace ps::testing

#endif  // PS_TESTS_CHILD_PROCESS_H_
