#ifndef PS_BENCHMARKS_BENCH_SUPPORT_H_
#define PS_BENCHMARKS_BENCH_SUPPORT_H_

// What the benchmarks share: forked child processes that report lines over a
// pipe (and, when forked with ForkDuplex, read the parent's commands from
// another), bind addresses, entering a network namespace, and child bodies
// that run a scheduler and servers.

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

// Reads one line (without its newline) from `fd`. kDeadlineExceeded when none
// is complete within `timeout`; kUnavailable at end of file.
absl::StatusOr<std::string> ReadLineFrom(int fd, absl::Duration timeout);

// Moves the calling thread, and the threads and sockets it creates from now
// on, into the network namespace /var/run/netns/<name> (as `ip netns exec`
// does; see scripts/netns.py). Call it in a forked child before creating any
// thread or socket. kNotFound when there is no such namespace,
// kPermissionDenied without CAP_SYS_ADMIN, kInternal otherwise.
absl::Status EnterNetns(const std::string& name);

// The namespaces of scripts/netns.py are a private emulated network: nodes
// there talk plaintext, as they may on loopback. Sets `security.insecure` on
// a role's Options where this build has that field (the requires-expression
// keeps this compiling for Options without it).
template <typename Options>
void AllowPlaintextInNetns(Options& options) {
  if constexpr (requires(Options& o) { o.security.insecure = true; }) options.security.insecure = true;
}

// A forked child that reports one line (its endpoint, or "ERR reason") over a
// pipe. Not thread-safe. The destructor reaps the child, killing it when it
// does not exit within kReapTimeout, so a bench never hangs on a child.
class Child {
 public:
  // Forks; the child runs body(write_fd) and _exits with its result. The
  // parent must hold no ZeroMQ context and no thread at this point.
  static absl::StatusOr<std::unique_ptr<Child>> Fork(const std::function<int(int)>& body);
  // The same with a second pipe the other way: the child runs
  // body(write_fd, read_fd) and reads the lines the parent Send()s on read_fd.
  static absl::StatusOr<std::unique_ptr<Child>> ForkDuplex(const std::function<int(int, int)>& body);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }

  // The child's next line, or kDeadlineExceeded / kUnavailable (also when the
  // line is "ERR reason": the reason is in the message).
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);
  // Sends `line` to a child made by ForkDuplex. kFailedPrecondition for a
  // child made by Fork; kUnavailable when the child is gone.
  absl::Status Send(const std::string& line);
  // SIGKILL now (for error paths; the destructor still reaps).
  void Kill();
  // Waits for the child to exit (SIGKILL after kReapTimeout). OK when it
  // exited with status 0.
  absl::Status Reap();

 private:
  Child(pid_t pid, int read_fd, int write_fd) : pid_(pid), read_fd_(read_fd), write_fd_(write_fd) {}
  const pid_t pid_;
  const int read_fd_;
  const int write_fd_;  // -1 for a child made by Fork
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

  // tcp: an ephemeral port on `tcp_host`.
  std::string Next(const std::string& tcp_host = "127.0.0.1") {
    if (transport_ == "tcp") return absl::StrCat("tcp://", tcp_host, ":0");
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

// Child body: a scheduler alone, for S servers and W workers in other
// processes. Enters network namespace `netns` first unless it is empty.
// Reports its endpoint (or "ERR reason") on `fd`; returns 0 when the job
// ended in order.
int RunSchedulerChild(const std::string& netns, const std::string& bind, int num_servers, int num_workers,
                      int fd);

// Child body: one server (`server_threads` update threads; 0 = one per core)
// registering with `scheduler`. Enters `netns` first unless it is empty.
// Reports its endpoint (or "ERR reason") on `fd`; returns 0 when the
// scheduler ended the job in order.
int RunServerChild(const std::string& netns, const std::string& scheduler, const std::string& bind,
                   int server_threads, int fd);

}  // namespace ps::bench

#endif  // PS_BENCHMARKS_BENCH_SUPPORT_H_
