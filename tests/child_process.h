#ifndef PS_TESTS_CHILD_PROCESS_H_
#define PS_TESTS_CHILD_PROCESS_H_

// A child process of a test or a benchmark, always stopped by its own pid
// when the object goes away (also when the test failed). Two kinds:
//   - Start: a program of this build (PS_BIN_DIR); its stdout is captured
//     through a pipe, its stderr goes to a file.
//   - Fork: a copy of the caller running a function, which writes its lines to
//     a pipe (and may read the lines the parent Send()s from another).
// Either way its lines can be waited for by prefix (WaitForLine) or read one
// after the other (ReadLine); every wait has a deadline. Part of ps_testing,
// the library tests and benchmarks share. Not thread-safe.

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps::testing {

class ChildProcess {
 public:
  // Starts `binary` (a name in PS_BIN_DIR) with `args`. stderr goes to
  // `stderr_path`. Destruction kills it at once.
  static absl::StatusOr<ChildProcess> Start(const std::string& binary, const std::vector<std::string>& args,
                                            const std::string& stderr_path);
  // Forks; the child runs body(write_fd, read_fd) and _exits with what it
  // returns (no atexit handlers, no static destructors), and is SIGKILLed if
  // this process dies. Its stdout and stderr stay this process's. The caller
  // must hold no thread and no ZeroMQ context at this point. Destruction
  // gives the child `grace` to exit on its own before SIGKILL.
  static absl::StatusOr<ChildProcess> Fork(const std::function<int(int write_fd, int read_fd)>& body,
                                           absl::Duration grace = absl::ZeroDuration());
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ~ChildProcess();  // Reap(grace), SIGKILL and reap if still running

  pid_t pid() const { return pid_; }
  // Waits until the output holds a line starting with `prefix` (searching
  // from the first line, whatever ReadLine consumed); returns the rest of that
  // line. kDeadlineExceeded, or kUnavailable when the child exits first.
  absl::StatusOr<std::string> WaitForLine(const std::string& prefix, absl::Duration timeout);
  // The next line (without its newline) after those ReadLine returned.
  // kDeadlineExceeded when none is complete within `timeout`; kUnavailable
  // when the child exited without one.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);
  // Sends `line` and a newline to a forked child's read_fd.
  // kFailedPrecondition for a started program; kUnavailable when it is gone.
  absl::Status Send(const std::string& line);
  // Waits for exit; returns the exit code (128+signal when killed).
  // kDeadlineExceeded when still running at the deadline.
  absl::StatusOr<int> WaitExit(absl::Duration timeout);
  // Waits up to `timeout` for the child to exit, then SIGKILLs it. OK when it
  // exited with 0; kDeadlineExceeded when it had to be killed; kInternal for
  // another exit code.
  absl::Status Reap(absl::Duration timeout);
  // Everything the child wrote to its stdout (Start) or pipe (Fork) so far.
  const std::string& stdout_text() const { return out_; }
  // The stderr file of a started program ("" for a forked child).
  std::string StderrText() const;
  // While it runs, a line per thread: its id and name, the kernel function
  // it waits in and its system call (/proc/PID/task/*), for a test to say
  // where a process that should have exited is stuck.
  std::string Threads() const;
  // SIGKILL and reap, if still running.
  void Kill();

 private:
  ChildProcess(pid_t pid, int pidfd, int out_fd, int in_fd, std::string stderr_path, absl::Duration grace);
  // Reads what is there; waits at most until `deadline` for the child to
  // write or exit. Returns false when the deadline passed with nothing new.
  bool Pump(absl::Time deadline);
  void Drain();

  pid_t pid_ = -1;
  int pidfd_ = -1;
  int out_fd_ = -1;
  int in_fd_ = -1;  // -1 for a started program
  std::string stderr_path_;
  absl::Duration grace_;
  std::string out_;
  size_t consumed_ = 0;  // bytes of out_ that ReadLine returned
  bool exited_ = false;
  int exit_code_ = -1;
};

}  // namespace ps::testing

#endif  // PS_TESTS_CHILD_PROCESS_H_
