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
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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

namespace {

// Forks; in the child, runs body() and _exits with its result.
absl::StatusOr<pid_t> ForkRunning(const std::function<int()>& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a crashed parent must not leave a cluster behind
    // _exit, not exit: no atexit handlers or static destructors of the
    // parent's copy run here, and stdout buffers are not flushed twice.
    _exit(body());
  }
  return pid;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Child>> Child::Fork(const std::function<int(int)>& body) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  auto pid = ForkRunning([&] {
    close(out[0]);
    return body(out[1]);
  });
  close(out[1]);
  if (!pid.ok()) {
    close(out[0]);
    return pid.status();
  }
  return std::unique_ptr<Child>(new Child(*pid, out[0], -1));
}

absl::StatusOr<std::unique_ptr<Child>> Child::ForkDuplex(const std::function<int(int, int)>& body) {
  int out[2], in[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  if (pipe2(in, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  auto pid = ForkRunning([&] {
    close(out[0]);
    close(in[1]);
    return body(out[1], in[0]);
  });
  close(out[1]);
  close(in[0]);
  if (!pid.ok()) {
    close(out[0]);
    close(in[1]);
    return pid.status();
  }
  return std::unique_ptr<Child>(new Child(*pid, out[0], in[1]));
}

Child::~Child() {
  if (absl::Status s = Reap(); !s.ok()) LOG(WARNING) << s;
  close(read_fd_);
  if (write_fd_ >= 0) close(write_fd_);
}

absl::StatusOr<std::string> Child::ReadLine(absl::Duration timeout) {
  absl::StatusOr<std::string> line = ReadLineFrom(read_fd_, timeout);
  if (!line.ok()) {
    const std::string what = absl::IsUnavailable(line.status()) ? "exited early" : "said nothing in time";
    return absl::Status(line.status().code(),
                        absl::StrCat("child ", pid_, " ", what, " (", line.status().message(), ")"));
  }
  if (line->rfind("ERR ", 0) == 0) return absl::UnavailableError(absl::StrCat("child: ", line->substr(4)));
  return line;
}

absl::Status Child::Send(const std::string& line) {
  if (write_fd_ < 0) return absl::FailedPreconditionError("child has no input pipe (use ForkDuplex)");
  const std::string text = line + "\n";
  // A child that exited closes its end: EPIPE, not SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  if (write(write_fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    return absl::UnavailableError(absl::StrCat("child ", pid_, ": write: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void Child::Kill() {
  if (!reaped_) kill(pid_, SIGKILL);
}

absl::Status Child::Reap() {
  if (reaped_) return absl::OkStatus();
  int status = 0;
  const absl::Time deadline = absl::Now() + kReapTimeout;
  bool killed = false;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (!killed && absl::Now() > deadline) {
      kill(pid_, SIGKILL);
      killed = true;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  reaped_ = true;
  if (killed) {
    return absl::DeadlineExceededError(
        absl::StrCat("child ", pid_, " killed after ", absl::FormatDuration(kReapTimeout)));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("child ", pid_, " ended with wait status ", status));
}


// Child: one scheduler (main thread) and S servers (a thread each). Returns
// the exit code: 0 when the job ended in order.
int RunClusterChild(const std::string& scheduler_bind, const std::vector<std::string>& server_binds,
                    int server_threads, int fd) {
  ps::SchedulerOptions so;
  so.bind = scheduler_bind;
  so.num_servers = static_cast<int>(server_binds.size());
  so.num_workers = 1;
  auto scheduler = ps::Scheduler::Create(so);
  if (!scheduler.ok()) {
    WriteLine(fd, absl::StrCat("ERR scheduler: ", scheduler.status().ToString()));
    return 1;
  }
  std::vector<std::unique_ptr<ps::Server>> servers;
  for (const std::string& bind : server_binds) {
    ps::ServerOptions o;
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
                      int fd) {
  if (!netns.empty()) {
    if (absl::Status s = EnterNetns(netns); !s.ok()) return Fail(fd, "scheduler", s);
  }
  ps::SchedulerOptions so;
  so.bind = bind;
  so.num_servers = num_servers;
  so.num_workers = num_workers;
  if (!netns.empty()) AllowPlaintextInNetns(so);
  auto scheduler = ps::Scheduler::Create(so);
  if (!scheduler.ok()) return Fail(fd, "scheduler", scheduler.status());
  WriteLine(fd, (*scheduler)->endpoint());
  const absl::Status status = (*scheduler)->Run();
  if (!status.ok()) LOG(ERROR) << "bench scheduler: " << status;
  return status.ok() ? 0 : 1;
}

int RunServerChild(const std::string& netns, const std::string& scheduler, const std::string& bind,
                   int server_threads, int fd) {
  if (!netns.empty()) {
    if (absl::Status s = EnterNetns(netns); !s.ok()) return Fail(fd, "server", s);
  }
  ps::ServerOptions o;
  o.scheduler = scheduler;
  o.bind = bind;
  o.num_threads = server_threads;
  if (!netns.empty()) AllowPlaintextInNetns(o);
  auto server = ps::Server::Create(o);
  if (!server.ok()) return Fail(fd, "server", server.status());
  WriteLine(fd, (*server)->endpoint());
  const absl::Status status = (*server)->Run();
  if (!status.ok()) LOG(ERROR) << "bench server: " << status;
  return status.ok() ? 0 : 1;
}

}  // namespace ps::bench
