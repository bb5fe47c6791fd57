#include "tests/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

extern char** environ;

namespace ps::testing {
namespace {

// A pidfd for `pid`, or -1 (and the child killed and reaped).
int OpenPidfd(pid_t pid) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  return pidfd;
}

}  // namespace

ChildProcess::ChildProcess(pid_t pid, int pidfd, int out_fd, int in_fd, std::string stderr_path, absl::Duration grace)
    : pid_(pid), pidfd_(pidfd), out_fd_(out_fd), in_fd_(in_fd), stderr_path_(std::move(stderr_path)), grace_(grace) {
  fcntl(out_fd_, F_SETFL, O_NONBLOCK);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_),
      pidfd_(other.pidfd_),
      out_fd_(other.out_fd_),
      in_fd_(other.in_fd_),
      stderr_path_(std::move(other.stderr_path_)),
      grace_(other.grace_),
      out_(std::move(other.out_)),
      consumed_(other.consumed_),
      exited_(other.exited_),
      exit_code_(other.exit_code_) {
  other.pid_ = -1;
  other.pidfd_ = -1;
  other.out_fd_ = -1;
  other.in_fd_ = -1;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !exited_ && grace_ > absl::ZeroDuration()) {
    if (absl::Status s = Reap(grace_); !s.ok()) LOG(WARNING) << s;
  }
  Kill();
  for (int fd : {pidfd_, out_fd_, in_fd_}) {
    if (fd >= 0) close(fd);
  }
}

absl::StatusOr<ChildProcess> ChildProcess::Start(const std::string& binary, const std::vector<std::string>& args,
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
  const int pidfd = OpenPidfd(pid);
  if (pidfd < 0) {
    close(out[0]);
    return absl::InternalError("pidfd_open failed");
  }
  return ChildProcess(pid, pidfd, out[0], -1, stderr_path, absl::ZeroDuration());
}

absl::StatusOr<ChildProcess> ChildProcess::Fork(const std::function<int(int, int)>& body, absl::Duration grace) {
  int out[2], in[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  if (pipe2(in, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a crashed parent must not leave its children behind
    close(out[0]);
    close(in[1]);
    // _exit, not exit: no atexit handlers or static destructors of the
    // parent's copy run here, and stdout buffers are not flushed twice.
    _exit(body(out[1], in[0]));
  }
  const int fork_errno = errno;
  close(out[1]);
  close(in[0]);
  const int pidfd = pid < 0 ? -1 : OpenPidfd(pid);
  if (pidfd < 0) {
    close(out[0]);
    close(in[1]);
    return absl::InternalError(pid < 0 ? absl::StrCat("fork: ", std::strerror(fork_errno)) : "pidfd_open failed");
  }
  return ChildProcess(pid, pidfd, out[0], in[1], "", grace);
}

void ChildProcess::Drain() {
  char buf[4096];
  while (true) {
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n <= 0) break;
    out_.append(buf, n);
  }
}

bool ChildProcess::Pump(absl::Time deadline) {
  pollfd fds[2] = {{out_fd_, POLLIN, 0}, {pidfd_, POLLIN, 0}};
  const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
  if (poll(fds, 2, static_cast<int>(std::min<int64_t>(ms, 1 << 30))) <= 0) return false;
  const size_t before = out_.size();
  Drain();
  bool progress = out_.size() > before;
  if (fds[1].revents & POLLIN) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      Drain();  // what the child wrote before it went
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
      return absl::UnavailableError(
          absl::StrCat("pid ", pid_, " exited (", exit_code_, ") before printing '", prefix, "'"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("no line '", prefix, "' from pid ", pid_));
    }
    Pump(deadline);
  }
}

absl::StatusOr<std::string> ChildProcess::ReadLine(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const size_t end = out_.find('\n', consumed_);
    if (end != std::string::npos) {
      std::string line = out_.substr(consumed_, end - consumed_);
      consumed_ = end + 1;
      return line;
    }
    if (exited_) {
      return absl::UnavailableError(absl::StrCat("pid ", pid_, " exited (", exit_code_, ") without another line"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no line from pid ", pid_, " within ", absl::FormatDuration(timeout)));
    }
    Pump(deadline);
  }
}

absl::Status ChildProcess::Send(const std::string& line) {
  if (in_fd_ < 0) return absl::FailedPreconditionError("a started program reads no lines (use Fork)");
  const std::string text = line + "\n";
  // A child that exited closes its end: EPIPE, not SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  if (write(in_fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    return absl::UnavailableError(absl::StrCat("pid ", pid_, ": write: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ChildProcess::WaitExit(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!exited_) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("pid ", pid_, " still running after ", absl::FormatDuration(timeout)));
    }
    Pump(deadline);
  }
  return exit_code_;
}

absl::Status ChildProcess::Reap(absl::Duration timeout) {
  absl::StatusOr<int> code = WaitExit(timeout);
  if (!code.ok()) {
    Kill();
    return absl::DeadlineExceededError(absl::StrCat("pid ", pid_, " killed after ", absl::FormatDuration(timeout)));
  }
  if (*code == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("pid ", pid_, " ended with exit code ", *code));
}

std::string ChildProcess::StderrText() const {
  if (stderr_path_.empty()) return "";
  std::ifstream in(stderr_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ChildProcess::Threads() const {
  if (pid_ <= 0 || exited_) return "";
  std::error_code error;
  std::string out;
  const std::string task = absl::StrCat("/proc/", pid_, "/task");
  for (const auto& entry : std::filesystem::directory_iterator(task, error)) {
    auto first_line = [&](const char* file) {
      std::ifstream in(entry.path() / file);
      std::string line;
      std::getline(in, line);
      return line;
    };
    absl::StrAppend(&out, entry.path().filename().string(), " ", first_line("comm"), ": waits in ", first_line("wchan"),
                    ", syscall ", first_line("syscall"), "\n");
  }
  return out;
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
