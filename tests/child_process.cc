#include "tests/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace ps::testing {

ChildProcess::ChildProcess(pid_t pid, int pidfd, int out_fd, std::string stderr_path)
    : pid_(pid), pidfd_(pidfd), out_fd_(out_fd), stderr_path_(std::move(stderr_path)) {}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_), pidfd_(other.pidfd_), out_fd_(other.out_fd_),
      stderr_path_(std::move(other.stderr_path_)), out_(std::move(other.out_)),
      exited_(other.exited_), exit_code_(other.exit_code_) {
  other.pid_ = -1;
  other.pidfd_ = -1;
  other.out_fd_ = -1;
}

ChildProcess::~ChildProcess() {
  Kill();
  if (pidfd_ >= 0) close(pidfd_);
  if (out_fd_ >= 0) close(out_fd_);
}

absl::StatusOr<ChildProcess> ChildProcess::Start(const std::string& binary,
                                                 const std::vector<std::string>& args,
                                                 const std::string& stderr_path) {
  const std::string path = absl::StrCat(PS_BIN_DIR, "/", binary);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  const int rc = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    return absl::InternalError(absl::StrCat("cannot start ", path, ": ", std::strerror(rc)));
  }
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    close(out[0]);
    return absl::InternalError("pidfd_open failed");
  }
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  return ChildProcess(pid, pidfd, out[0], stderr_path);
}

bool ChildProcess::Pump(absl::Time deadline) {
  pollfd fds[2] = {{out_fd_, POLLIN, 0}, {pidfd_, POLLIN, 0}};
  const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
  if (poll(fds, out_fd_ >= 0 ? 2 : 1, static_cast<int>(ms)) <= 0) return false;
  bool progress = false;
  char buf[4096];
  while (true) {
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n <= 0) break;
    out_.append(buf, n);
    progress = true;
  }
  if (fds[1].revents & POLLIN) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      // Drain what the child wrote before it went.
      while (true) {
        const ssize_t n = read(out_fd_, buf, sizeof(buf));
        if (n <= 0) break;
        out_.append(buf, n);
      }
      progress = true;
    }
  }
  return progress;
}

absl::StatusOr<std::string> ChildProcess::WaitForLine(const std::string& prefix, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    std::istringstream lines(out_);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
    }
    if (exited_) {
      return absl::UnavailableError(absl::StrCat("pid ", pid_, " exited (", exit_code_,
                                                 ") before printing '", prefix, "'"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("no line '", prefix, "' from pid ", pid_));
    }
    Pump(deadline);
  }
}

absl::StatusOr<int> ChildProcess::WaitExit(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!exited_) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("pid ", pid_, " still running after ",
                                                      absl::FormatDuration(timeout)));
    }
    Pump(deadline);
  }
  return exit_code_;
}

std::string ChildProcess::StderrText() const {
  std::ifstream in(stderr_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void ChildProcess::Kill() {
  if (pid_ <= 0 || exited_) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  exited_ = true;
  exit_code_ = 128 + SIGKILL;
}

}  // namespace ps::testing
