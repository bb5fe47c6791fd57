#include "benchmarks/bench_support.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"
#include "scheduler/scheduler.h"
#include "server/server.h"

namespace ps::bench {

void WriteLine(int fd, const std::string& line) {
  const std::string text = line + "\n";
  (void)!write(fd, text.data(), text.size());
}

absl::StatusOr<std::string> ReadLineFrom(int fd, absl::Duration timeout) {
  std::string line;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0 || poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30))) <= 0) {
      return absl::DeadlineExceededError(absl::StrCat("no line within ", absl::FormatDuration(timeout)));
    }
    // One byte at a time, so that nothing after the newline is consumed:
    // the lines are short and few.
    char c;
    if (read(fd, &c, 1) != 1) return absl::UnavailableError("end of file");
    if (c == '\n') return line;
    line.push_back(c);
  }
}

absl::Status EnterNetns(const std::string& name) {
  const std::string path = "/var/run/netns/" + name;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string why = absl::StrCat("network namespace ", name, " (", path, "): ", std::strerror(err),
                                         "; make it with scripts/netns.py up");
    return err == ENOENT ? absl::NotFoundError(why) : absl::PermissionDeniedError(why);
  }
  const int rc = setns(fd, CLONE_NEWNET);
  const int err = errno;
  close(fd);
  if (rc == 0) return absl::OkStatus();
  const std::string why = absl::StrCat("setns(", path, ", CLONE_NEWNET): ", std::strerror(err));
  return err == EPERM ? absl::PermissionDeniedError(why) : absl::InternalError(why);
}

absl::StatusOr<std::unique_ptr<Child>> ForkChild(const std::function<int(int, int)>& body) {
  PS_ASSIGN_OR_RETURN(Child child, Child::Fork(body, kReapTimeout));
  return std::make_unique<Child>(std::move(child));
}

absl::StatusOr<std::string> ReadLine(Child& child, absl::Duration timeout) {
  absl::StatusOr<std::string> line = child.ReadLine(timeout);
  if (!line.ok()) {
    const std::string what = absl::IsUnavailable(line.status()) ? "exited early" : "said nothing in time";
    return absl::Status(line.status().code(),
                        absl::StrCat("child ", child.pid(), " ", what, " (", line.status().message(), ")"));
  }
  if (line->rfind("ERR ", 0) == 0) return absl::UnavailableError(absl::StrCat("child: ", line->substr(4)));
  return line;
}

// Child: one scheduler (main thread) and S servers (a thread each). Returns
// the exit code: 0 when the job ended in order.
int RunClusterChild(const std::string& scheduler_bind, const std::vector<std::string>& server_binds, int server_threads,
                    int fd, int num_workers, const ps::ServerOptions& base) {
  ps::SchedulerOptions so;
  so.bind = scheduler_bind;
  so.num_servers = static_cast<int>(server_binds.size());
  so.num_workers = num_workers;
  auto scheduler = ps::Scheduler::Create(so);
  if (!scheduler.ok()) {
    WriteLine(fd, absl::StrCat("ERR scheduler: ", scheduler.status().ToString()));
    return 1;
  }
  std::vector<std::unique_ptr<ps::Server>> servers;
  for (const std::string& bind : server_binds) {
    ps::ServerOptions o = base;
    o.scheduler = (*scheduler)->endpoint();
    o.bind = bind;
    o.num_threads = server_threads;
    auto server = ps::Server::Create(o);
    if (!server.ok()) {
      WriteLine(fd, absl::StrCat("ERR server: ", server.status().ToString()));
      return 1;
    }
    servers.push_back(*std::move(server));
  }
  WriteLine(fd, (*scheduler)->endpoint());
  std::vector<std::thread> threads;
  for (auto& s : servers) {
    threads.emplace_back([&s] {
      if (absl::Status st = s->Run(); !st.ok()) LOG(ERROR) << "bench server: " << st;
    });
  }
  const absl::Status status = (*scheduler)->Run();
  if (!status.ok()) {
    LOG(ERROR) << "bench scheduler: " << status;
    for (auto& s : servers) s->RequestStop();
  }
  for (auto& t : threads) t.join();
  return status.ok() ? 0 : 1;
}

namespace {

// Reports `status` on `fd` as "ERR ..." and returns the exit code 1.
int Fail(int fd, const std::string& what, const absl::Status& status) {
  WriteLine(fd, absl::StrCat("ERR ", what, ": ", status.ToString()));
  return 1;
}

}  // namespace

int RunSchedulerChild(const std::string& netns, const std::string& bind, int num_servers, int num_workers,
                      const ps::SecurityOptions& security, int fd, int replicas, bool elastic) {
  if (!netns.empty()) {
    if (absl::Status s = EnterNetns(netns); !s.ok()) return Fail(fd, "scheduler", s);
  }
  ps::SchedulerOptions so;
  so.bind = bind;
  so.num_servers = num_servers;
  so.num_workers = num_workers;
  so.replicas = replicas;
  so.elastic = elastic;
  so.security = security;
  if (!netns.empty() && !security.has_keys()) AllowPlaintextInNetns(so);
  auto scheduler = ps::Scheduler::Create(so);
  if (!scheduler.ok()) return Fail(fd, "scheduler", scheduler.status());
  WriteLine(fd, (*scheduler)->endpoint());
  const absl::Status status = (*scheduler)->Run();
  if (!status.ok()) LOG(ERROR) << "bench scheduler: " << status;
  return status.ok() ? 0 : 1;
}

int RunServerChild(const std::string& netns, const std::string& scheduler, const std::string& bind,
                   const ps::SecurityOptions& security, int server_threads, int fd, const ps::ServerOptions& base) {
  if (!netns.empty()) {
    if (absl::Status s = EnterNetns(netns); !s.ok()) return Fail(fd, "server", s);
  }
  ps::ServerOptions o = base;
  o.scheduler = scheduler;
  o.bind = bind;
  o.num_threads = server_threads;
  o.security = security;
  if (!netns.empty() && !security.has_keys()) AllowPlaintextInNetns(o);
  auto server = ps::Server::Create(o);
  if (!server.ok()) return Fail(fd, "server", server.status());
  WriteLine(fd, (*server)->endpoint());
  const absl::Status status = (*server)->Run();
  if (!status.ok()) LOG(ERROR) << "bench server: " << status;
  return status.ok() ? 0 : 1;
}

// ---- children measuring on command ------------------------------------------

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Measurement::Percentile(double p) const {
  std::vector<double> sorted = latency_us;
  std::sort(sorted.begin(), sorted.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * sorted.size()));
  return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
}

std::string Command::ToString() const { return absl::StrCat(name, " ", bytes, " ", iters, " ", depth); }

absl::StatusOr<Command> Command::Parse(const std::string& line) {
  std::vector<std::string> parts = absl::StrSplit(line, ' ');
  Command c;
  if (parts.size() != 4 || !absl::SimpleAtoi(parts[1], &c.bytes) || !absl::SimpleAtoi(parts[2], &c.iters) ||
      !absl::SimpleAtoi(parts[3], &c.depth) || c.bytes <= 0 || c.iters <= 0 || c.depth <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad command '", line, "'"));
  }
  c.name = parts[0];
  return c;
}

namespace {

// A child's answer to a command.
struct Report {
  int iters = 0;
  int64_t start_ns = 0, end_ns = 0;
  double p50_us = 0, p99_us = 0;
};

int64_t Nanos(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::string FormatReport(const Measurement& m) {
  return absl::StrCat("ok ", m.iters, " ", Nanos(m.start), " ", Nanos(m.end), " ", m.Percentile(0.5), " ",
                      m.Percentile(0.99));
}

absl::StatusOr<Report> ParseReport(const std::string& line) {
  std::vector<std::string> parts = absl::StrSplit(line, ' ');
  Report r;
  if (parts.size() != 6 || parts[0] != "ok" || !absl::SimpleAtoi(parts[1], &r.iters) ||
      !absl::SimpleAtoi(parts[2], &r.start_ns) || !absl::SimpleAtoi(parts[3], &r.end_ns) ||
      !absl::SimpleAtod(parts[4], &r.p50_us) || !absl::SimpleAtod(parts[5], &r.p99_us) || r.end_ns <= r.start_ns) {
    return absl::DataLossError(absl::StrCat("bad report '", line, "'"));
  }
  return r;
}

// Runs one command line; the report line to answer, or the error.
absl::StatusOr<std::string> RunCommandLine(const std::string& line, const CommandRunner& run, const WarmHook& warm) {
  PS_ASSIGN_OR_RETURN(const Command command, Command::Parse(line));
  PS_ASSIGN_OR_RETURN(const Measurement m, run(command, warm));
  if (m.latency_us.empty()) return absl::InternalError("a measurement without iterations");
  return FormatReport(m);
}

}  // namespace

int ServeCommands(int out_fd, int in_fd, const CommandRunner& run, const std::function<absl::Status()>& end) {
  const WarmHook warm = [&]() -> absl::Status {
    WriteLine(out_fd, "warm");
    PS_ASSIGN_OR_RETURN(const std::string go, ReadLineFrom(in_fd, kCommandTimeout));
    if (go != "go") return absl::InvalidArgumentError(absl::StrCat("expected 'go', got '", go, "'"));
    return absl::OkStatus();
  };
  while (true) {
    absl::StatusOr<std::string> line = ReadLineFrom(in_fd, kCommandTimeout);
    if (!line.ok()) {
      LOG(ERROR) << "bench child: no command from the parent: " << line.status();
      return 1;
    }
    if (*line == "end") {
      const absl::Status status = end();
      WriteLine(out_fd, status.ok() ? std::string("done") : absl::StrCat("ERR ", status.ToString()));
      return status.ok() ? 0 : 1;
    }
    const absl::StatusOr<std::string> report = RunCommandLine(*line, run, warm);
    if (!report.ok()) {
      WriteLine(out_fd, absl::StrCat("ERR ", report.status().ToString()));
      return 1;
    }
    WriteLine(out_fd, *report);
  }
}

absl::StatusOr<Aggregate> RunTogether(const std::vector<Child*>& children, const Command& command) {
  for (Child* child : children) PS_RETURN_IF_ERROR(child->Send(command.ToString()));
  for (Child* child : children) {
    PS_ASSIGN_OR_RETURN(const std::string line, ReadLine(*child, kCommandTimeout));
    if (line != "warm") return absl::DataLossError(absl::StrCat("expected 'warm', got '", line, "'"));
  }
  for (Child* child : children) PS_RETURN_IF_ERROR(child->Send("go"));
  Aggregate a;
  int64_t first = INT64_MAX, last = INT64_MIN;
  std::vector<double> p50s;
  for (Child* child : children) {
    PS_ASSIGN_OR_RETURN(const std::string line, ReadLine(*child, kCommandTimeout));
    PS_ASSIGN_OR_RETURN(const Report r, ParseReport(line));
    a.iters += r.iters;
    first = std::min(first, r.start_ns);
    last = std::max(last, r.end_ns);
    p50s.push_back(r.p50_us);
    a.p99_us = std::max(a.p99_us, r.p99_us);
  }
  a.seconds = static_cast<double>(last - first) / 1e9;
  a.p50_us = Median(p50s);
  return a;
}

// ---- timing loops ------------------------------------------------------------

absl::StatusOr<Measurement> RunPipelined(int iters, int depth, const Step& issue, const Step& complete) {
  using Clock = std::chrono::steady_clock;
  Measurement m;
  m.iters = iters;
  m.latency_us.reserve(iters);
  std::vector<Clock::time_point> started(depth);
  m.start = Clock::now();
  for (int i = 0; i < iters + depth; ++i) {
    const int slot = i % depth;
    if (i >= depth) {
      PS_RETURN_IF_ERROR(complete(slot));
      m.latency_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - started[slot]).count());
    }
    if (i < iters) {
      started[slot] = Clock::now();
      PS_RETURN_IF_ERROR(issue(slot));
    }
  }
  m.end = Clock::now();
  CHECK_EQ(static_cast<int>(m.latency_us.size()), iters);
  return m;
}

int WarmupFor(int iters) { return std::clamp(iters / 10, 3, 50); }

absl::StatusOr<Measurement> WarmThenTime(int iters, int depth, const Step& issue, const Step& complete,
                                         const WarmHook& warm) {
  PS_RETURN_IF_ERROR(RunPipelined(WarmupFor(iters), depth, issue, complete).status());
  PS_RETURN_IF_ERROR(warm());
  return RunPipelined(iters, depth, issue, complete);
}

bool EnterOrReport(const std::string& ns, const std::string& who, int fd) {
  if (ns.empty()) return true;
  const absl::Status s = EnterNetns(ns);
  if (!s.ok()) WriteLine(fd, absl::StrCat("ERR ", who, ": ", s.ToString()));
  return s.ok();
}

absl::Status Expect(Child& child, const std::string& want, absl::Duration timeout) {
  PS_ASSIGN_OR_RETURN(const std::string line, ReadLine(child, timeout));
  if (line != want) return absl::DataLossError(absl::StrCat("expected '", want, "', got '", line, "'"));
  return absl::OkStatus();
}

// ---- where each process runs ---------------------------------------------------

Host HostAt(const std::string& prefix, const std::string& subnet, int index) {
  if (prefix.empty()) return {"", "127.0.0.1"};
  return {absl::StrCat(prefix, index), absl::StrCat(subnet, ".", index + 1)};
}

absl::Status CheckNamespaces(const std::string& prefix, int count) {
  if (prefix.empty()) return absl::OkStatus();
  for (int i = 0; i < count; ++i) {
    const std::string path = absl::StrCat("/var/run/netns/", prefix, i);
    if (access(path.c_str(), F_OK) != 0) {
      return absl::NotFoundError(absl::StrCat("--netns: no namespace ", prefix, i, " (", count,
                                              " needed); make them with: scripts/netns.py up --prefix ", prefix,
                                              " --hosts ", count));
    }
  }
  return absl::OkStatus();
}

}  // namespace ps::bench
