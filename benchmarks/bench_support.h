#ifndef PS_BENCHMARKS_BENCH_SUPPORT_H_
#define PS_BENCHMARKS_BENCH_SUPPORT_H_

// What the benchmarks share: forked child processes that report one line over
// a pipe, bind addresses, and a child running a scheduler and S servers.

#include <sys/types.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace ps::bench {

// How long a child may take to exit once told to, before SIGKILL.
inline constexpr absl::Duration kReapTimeout = absl::Seconds(10);

// Writes `line` and a newline to `fd`.
void WriteLine(int fd, const std::string& line);

// A forked child that reports one line (its endpoint, or "ERR reason") over a
// pipe. Not thread-safe. The destructor reaps the child, killing it when it
// does not exit within kReapTimeout, so a bench never hangs on a child.
class Child {
 public:
  // Forks; the child runs body(write_fd) and _exits with its result. The
  // parent must hold no ZeroMQ context and no thread at this point.
  static absl::StatusOr<std::unique_ptr<Child>> Fork(const std::function<int(int)>& body);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // The child's first line, or kDeadlineExceeded / kUnavailable.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);
  // Waits for the child to exit (SIGKILL after kReapTimeout). OK when it
  // exited with status 0.
  absl::Status Reap();

 private:
  Child(pid_t pid, int read_fd) : pid_(pid), read_fd_(read_fd) {}
  const pid_t pid_;
  const int read_fd_;
  bool reaped_ = false;
};

// Bind addresses: tcp on an ephemeral loopback port, ipc on a fresh socket
// file under /tmp that the destructor removes.
class Endpoints {
 public:
  explicit Endpoints(std::string transport) : transport_(std::move(transport)) {}
  ~Endpoints() {
    for (const std::string& path : files_) unlink(path.c_str());
  }
  Endpoints(const Endpoints&) = delete;
  Endpoints& operator=(const Endpoints&) = delete;

  std::string Next() {
    if (transport_ == "tcp") return "tcp://127.0.0.1:0";
    static int counter = 0;  // per process, so no two configurations share a file
    files_.push_back(absl::StrCat("/tmp/ps-bench-", getpid(), "-", counter++, ".sock"));
    return "ipc://" + files_.back();
  }

 private:
  const std::string transport_;
  std::vector<std::string> files_;
};

// Child body: one scheduler (main thread) for one worker and S servers (a
// thread each, `server_threads` update threads each; 0 = one per core).
// Reports the scheduler endpoint on `fd`; returns 0 when the job ended in order.
int RunClusterChild(const std::string& scheduler_bind, const std::vector<std::string>& server_binds,
                    int server_threads, int fd);

}  // namespace ps::bench

#endif  // PS_BENCHMARKS_BENCH_SUPPORT_H_
