#include "benchmarks/bench_support.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

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

absl::StatusOr<std::unique_ptr<Child>> Child::Fork(const std::function<int(int)>& body) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    close(fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a crashed parent must not leave a cluster behind
    // _exit, not exit: no atexit handlers or static destructors of the
    // parent's copy run here, and stdout buffers are not flushed twice.
    _exit(body(fds[1]));
  }
  close(fds[1]);
  return std::unique_ptr<Child>(new Child(pid, fds[0]));
}

Child::~Child() {
  if (absl::Status s = Reap(); !s.ok()) LOG(WARNING) << s;
  close(read_fd_);
}

absl::StatusOr<std::string> Child::ReadLine(absl::Duration timeout) {
  std::string line;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    pollfd p{read_fd_, POLLIN, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (ms <= 0 || poll(&p, 1, ms) <= 0) {
      return absl::DeadlineExceededError(absl::StrCat("child ", pid_, " said nothing within ",
                                                      absl::FormatDuration(timeout)));
    }
    char c;
    if (read(read_fd_, &c, 1) != 1) {
      return absl::UnavailableError(absl::StrCat("child ", pid_, " exited early"));
    }
    if (c == '\n') break;
    line.push_back(c);
  }
  if (line.rfind("ERR ", 0) == 0) return absl::UnavailableError(absl::StrCat("child: ", line.substr(4)));
  return line;
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

}  // namespace ps::bench
