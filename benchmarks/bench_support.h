#ifndef PS_BENCHMARKS_BENCH_SUPPORT_H_
#define PS_BENCHMARKS_BENCH_SUPPORT_H_

// What the benchmarks share: forked child processes that report lines over a
// pipe and read the parent's commands from another, bind addresses, entering a network namespace, child bodies that
// run a scheduler and servers, and children that measure on the parent's
// command, several at once.

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/net/security.h"
#include "server/server.h"
#include "tests/child_process.h"

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
  if constexpr (requires(Options & o) { o.security.insecure = true; }) options.security.insecure = true;
}

// A forked child (tests/child_process.h, shared with the tests) that reports
// lines over a pipe and reads the parent's commands from another. A line
// "ERR reason" is its error report (ReadLine below).
using Child = ::ps::testing::ChildProcess;

// Forks a child running body(write_fd, read_fd) whose destruction waits
// kReapTimeout for it to exit before SIGKILL, so a bench never hangs on a
// child. The parent must hold no ZeroMQ context and no thread at this point.
absl::StatusOr<std::unique_ptr<Child>> ForkChild(const std::function<int(int, int)>& body);

// The child's next line, or kDeadlineExceeded / kUnavailable (also when the
// line is "ERR reason": the reason is in the message).
absl::StatusOr<std::string> ReadLine(Child& child, absl::Duration timeout);

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

// Child body: one scheduler (main thread) for `num_workers` workers and S
// servers (a thread each, `server_threads` update threads each; 0 = one per
// core; `base`: their other options, e.g. a checkpoint directory). Reports the scheduler endpoint on `fd`;
// returns 0 when the job ended in order.
int RunClusterChild(const std::string& scheduler_bind, const std::vector<std::string>& server_binds, int server_threads,
                    int fd, int num_workers = 1, const ps::ServerOptions& base = ps::ServerOptions());

// Child body: a scheduler alone, for S servers and W workers in other
// processes. Enters network namespace `netns` first unless it is empty.
// Reports its endpoint (or "ERR reason") on `fd`; returns 0 when the job
// ended in order. `replicas`: copies of every slice (ps_scheduler --replicas);
// `elastic`: ps_scheduler --elastic.
int RunSchedulerChild(const std::string& netns, const std::string& bind, int num_servers, int num_workers,
                      const ps::SecurityOptions& security, int fd, int replicas = 1, bool elastic = false);

// Child body: one server (`server_threads` update threads; 0 = one per core)
// registering with `scheduler`. Enters `netns` first unless it is empty.
// Reports its endpoint (or "ERR reason") on `fd`; returns 0 when the
// scheduler ended the job in order.
// `base`: the other options (a memory budget, a table disk directory).
int RunServerChild(const std::string& netns, const std::string& scheduler, const std::string& bind,
                   const ps::SecurityOptions& security, int server_threads, int fd,
                   const ps::ServerOptions& base = ps::ServerOptions());

// ---- children measuring on command ------------------------------------------
//
// The parent sends a child "NAME BYTES ITERS DEPTH" (a Command). The child
// warms up, answers "warm" and waits for "go"; then it runs the timed phase
// and answers "ok ITERS START_NS END_NS P50_US P99_US", with steady-clock
// times, which every process on this machine shares. "end" ends the child's
// loop (answer "done"); any failure is answered "ERR reason". RunTogether
// sends "go" only when every child is warm, so their timed phases overlap.

// How long one command may run, and a child may wait for the next one.
inline constexpr absl::Duration kCommandTimeout = absl::Minutes(10);

// Per-iteration latencies and the bounds of a timed phase.
struct Measurement {
  int iters = 0;
  std::chrono::steady_clock::time_point start, end;
  std::vector<double> latency_us;

  // Nearest-rank percentile, p in (0, 1]; requires latency_us not empty.
  double Percentile(double p) const;
};

struct Command {
  std::string name;
  int64_t bytes = 0;
  int iters = 0;
  int depth = 1;  // operations in flight

  std::string ToString() const;
  // kInvalidArgument for a line that is not "NAME BYTES ITERS DEPTH" with
  // positive numbers.
  static absl::StatusOr<Command> Parse(const std::string& line);
};

// What a child calls between warm-up and the timed phase: answers "warm" and
// waits for "go".
using WarmHook = std::function<absl::Status()>;
using CommandRunner = std::function<absl::StatusOr<Measurement>(const Command&, const WarmHook&)>;

// A child's command loop on its pipes: runs each command with `run` and
// answers its report, until "end", which runs `end`. Returns the child's exit
// code (0 after "end" succeeded).
int ServeCommands(int out_fd, int in_fd, const CommandRunner& run, const std::function<absl::Status()>& end);

// One command run by several children at once: iterations summed, seconds
// from the first start to the last end; latency the median of their p50s
// and the largest of their p99s.
struct Aggregate {
  int iters = 0;
  double seconds = 0;
  double p50_us = 0, p99_us = 0;

  double Gbps(double bytes_per_iter) const { return bytes_per_iter * iters / seconds / 1e9; }
};

// Sends `command` to every child (made by ForkChild), tells all of them
// "go" once all are warm, and combines their reports. A child's error
// (kUnavailable with its reason), kDeadlineExceeded after kCommandTimeout, or
// kDataLoss for an answer out of protocol.
absl::StatusOr<Aggregate> RunTogether(const std::vector<Child*>& children, const Command& command);

// The median of `v` (not empty).
double Median(std::vector<double> v);

// ---- timing loops, in the children -------------------------------------------

using Step = std::function<absl::Status(int)>;

// Runs `iters` operations with up to `depth` in flight. issue(slot) starts an
// operation on slot `slot`; complete(slot) waits for the oldest one (which is
// on that slot). Latency is from issue to completion.
absl::StatusOr<Measurement> RunPipelined(int iters, int depth, const Step& issue, const Step& complete);

// Warm-up iterations before a timed run of `iters`.
int WarmupFor(int iters);

// Warm-up run, the hook, then the timed run.
absl::StatusOr<Measurement> WarmThenTime(int iters, int depth, const Step& issue, const Step& complete,
                                         const WarmHook& warm);

// Enters `ns` (unless empty); on failure reports "ERR" on `fd` and returns false.
bool EnterOrReport(const std::string& ns, const std::string& who, int fd);

// The child's next line must be `want`: kDataLoss naming both otherwise.
absl::Status Expect(Child& child, const std::string& want, absl::Duration timeout);

// ---- where each process runs -----------------------------------------------------

// A process's network namespace ("" = this process's own) and the address it
// binds tcp sockets on.
struct Host {
  std::string ns;
  std::string ip;
};

// Host `index` of the namespaces PREFIX0, PREFIX1, ... that scripts/netns.py
// makes (PREFIXi has SUBNET.i+1), or loopback when `prefix` is empty.
Host HostAt(const std::string& prefix, const std::string& subnet, int index);

// kNotFound naming the first of namespaces PREFIX0 .. PREFIX(count-1) that is
// missing and how to make them; OK for an empty prefix.
absl::Status CheckNamespaces(const std::string& prefix, int count);

}  // namespace ps::bench

#endif  // PS_BENCHMARKS_BENCH_SUPPORT_H_
