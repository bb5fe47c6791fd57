#include "common/net/shm_handshake.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"

namespace ps {
namespace {

constexpr absl::Duration kServeTimeout = absl::Seconds(2);
constexpr char kAccepted = 'Y';
constexpr char kRefused = 'N';
constexpr char kAdopted = 'K';  // worker -> acceptor: the region is mapped, the channel in use

absl::StatusOr<std::string> RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (getrandom(out.data(), n, 0) != static_cast<ssize_t>(n)) {
    return absl::InternalError(absl::StrCat("getrandom: ", strerror(errno)));
  }
  return out;
}

// The address of the abstract socket `name` (no filesystem entry).
socklen_t AbstractAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(addr->sun_path) - 1);
  std::memcpy(addr->sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

void SetTimeouts(int fd, absl::Duration timeout) {
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// The uid of the process at the other end of `fd`.
absl::StatusOr<uid_t> PeerUid(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::UnavailableError(absl::StrCat("SO_PEERCRED: ", strerror(errno)));
  }
  return cred.uid;
}

// `n` bytes by `deadline` (a peer trickling bytes does not restart the
// socket's timeout each time).
bool ReadExactly(int fd, char* out, size_t n, absl::Time deadline) {
  for (size_t got = 0; got < n;) {
    if (absl::Now() >= deadline) return false;
    const ssize_t r = recv(fd, out + got, n - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

// One byte with three descriptors (SCM_RIGHTS).
bool SendFds(int fd, char byte, const int (&fds)[3]) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(fds))] = {};
  iovec iov{&byte, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(fds));
  std::memcpy(CMSG_DATA(c), fds, sizeof(fds));
  return sendmsg(fd, &msg, MSG_NOSIGNAL) == 1;
}

// Receives one byte and up to three descriptors; any more are closed. The
// byte read count (recvmsg's result), or -1 for a truncated control part.
ssize_t ReceiveFds(int fd, char* byte, int (&fds)[3]) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(fds))] = {};
  iovec iov{byte, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  size_t count = 0;
  for (cmsghdr* c = n < 0 ? nullptr : CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
      int got;
      std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (count < 3) {
        fds[count++] = got;
      } else {
        close(got);
      }
    }
  }
  return n >= 0 && (msg.msg_flags & MSG_CTRUNC) != 0 ? -1 : n;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmAcceptor>> ShmAcceptor::Start(uint64_t ring_bytes) {
  PS_ASSIGN_OR_RETURN(std::string nonce, RandomBytes(8));
  const std::string name = absl::StrCat("ps-shm-", getpid(), "-", absl::BytesToHexString(nonce));
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr;
  const socklen_t len = AbstractAddress(name, &addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 64) != 0) {
    const std::string why = strerror(errno);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("shared-memory handshake socket @", name, ": ", why));
  }
  const int ready = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), stop = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ready < 0 || stop < 0) {
    const std::string why = strerror(errno);
    for (int f : {fd, ready, stop}) {
      if (f >= 0) close(f);
    }
    return absl::ResourceExhaustedError(absl::StrCat("shared-memory acceptor: eventfd: ", why));
  }
  return std::unique_ptr<ShmAcceptor>(new ShmAcceptor(fd, name, ring_bytes, ready, stop));
}

ShmAcceptor::ShmAcceptor(int listen_fd, std::string name, uint64_t ring_bytes, int ready_fd, int stop_fd)
    : listen_fd_(listen_fd), name_(std::move(name)), ring_bytes_(ring_bytes), ready_fd_(ready_fd), stop_fd_(stop_fd) {
  thread_ = std::thread([this] { Loop(); });
}

ShmAcceptor::~ShmAcceptor() {
  const uint64_t one = 1;
  (void)!write(stop_fd_, &one, sizeof(one));
  thread_.join();
  close(listen_fd_);
  close(ready_fd_);
  close(stop_fd_);
}

absl::StatusOr<ShmGrantMsg> ShmAcceptor::Offer(const std::string& routing_id, const std::string& user_id) {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    // Offers never fetched (a worker that died in between) lapse.
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.expires < now) {
        pending_.erase(it++);
      } else {
        ++it;
      }
    }
    if (pending_.size() >= kShmMaxPendingOffers) {
      return absl::ResourceExhaustedError(absl::StrCat(pending_.size(),
                                                       " shared-memory channels offered and not "
                                                       "fetched yet; this server grants no more until they are"));
    }
  }
  PS_ASSIGN_OR_RETURN(std::string token, RandomBytes(kShmTokenBytes));
  absl::MutexLock lock(&mu_);
  pending_[token] = Pending{routing_id, user_id, now + kShmOfferTtl};
  // The region is made when the token comes back (Serve): an offer to a
  // worker on another host, which never fetches it, costs nothing.
  return ShmGrantMsg{name_, token, ShmChannel::RingBytes(ring_bytes_)};
}

std::vector<ShmAcceptor::Ready> ShmAcceptor::TakeReady() {
  uint64_t count;
  (void)!read(ready_fd_, &count, sizeof(count));
  absl::MutexLock lock(&mu_);
  return std::exchange(ready_, {});
}

void ShmAcceptor::Loop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LOG(ERROR) << "shm acceptor: poll: " << strerror(errno);
      return;
    }
    if (fds[1].revents != 0) return;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) Serve(fd);
  }
}

std::optional<ShmAcceptor::Pending> ShmAcceptor::Redeem(int fd, std::string* why) {
  absl::StatusOr<uid_t> uid = PeerUid(fd);
  if (!uid.ok() || *uid != geteuid()) {
    *why = !uid.ok() ? std::string(uid.status().message()) : absl::StrCat("uid ", *uid, ", not ours");
    return std::nullopt;
  }
  std::string token(kShmTokenBytes, '\0');
  std::optional<Pending> granted;
  if (ReadExactly(fd, token.data(), token.size(), absl::Now() + kServeTimeout)) {
    absl::MutexLock lock(&mu_);
    if (auto it = pending_.find(token); it != pending_.end()) {
      if (it->second.expires >= absl::Now()) granted = std::move(it->second);
      pending_.erase(it);
    }
  }
  if (!granted.has_value()) *why = "no valid token";
  return granted;
}

void ShmAcceptor::Refuse(int fd, const std::string& why, bool answer) {
  ++refused_;
  LOG(WARNING) << "shm acceptor: " << why;
  if (answer) (void)!send(fd, &kRefused, 1, MSG_NOSIGNAL);
  close(fd);
}

void ShmAcceptor::Serve(int fd) {
  SetTimeouts(fd, kServeTimeout);
  std::string why;
  std::optional<Pending> granted = Redeem(fd, &why);
  if (!granted.has_value()) return Refuse(fd, absl::StrCat("refused a connection (", why, ")"), true);
  absl::StatusOr<std::unique_ptr<ShmChannel>> channel = ShmChannel::Create(ring_bytes_);
  if (!channel.ok()) {
    return Refuse(fd, absl::StrCat("no region for a granted channel: ", channel.status().ToString()), true);
  }
  const ShmFds fds = (*channel)->fds();
  if (!SendFds(fd, kAccepted, {fds.memfd, fds.to_server, fds.to_client})) {
    return Refuse(fd, absl::StrCat("handing the channel over failed: ", strerror(errno)), false);
  }
  // The worker confirms it adopted the region: one that gave up meanwhile
  // (its deadline passed) closes instead, and the channel is dropped here,
  // so no reply ever goes into a ring nobody reads.
  char ack = 0;
  if (recv(fd, &ack, 1, 0) != 1 || ack != kAdopted) {
    return Refuse(fd, "the worker did not adopt the channel it fetched; dropped", false);
  }
  (*channel)->set_peer_socket(fd);
  ++handed_over_;
  {
    absl::MutexLock lock(&mu_);
    ready_.push_back(Ready{*std::move(channel), std::move(granted->routing_id), std::move(granted->user_id)});
  }
  const uint64_t one = 1;
  (void)!write(ready_fd_, &one, sizeof(one));
}

absl::StatusOr<std::unique_ptr<ShmChannel>> FetchShmChannel(const ShmGrantMsg& grant, absl::Duration timeout) {
  if (grant.token.size() != kShmTokenBytes || grant.socket_name.empty() || grant.socket_name.size() > 100) {
    return absl::DataLossError("the server's shared-memory grant is malformed");
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  auto fail = [fd](absl::Status s) {
    close(fd);
    return s;
  };
  SetTimeouts(fd, timeout);
  sockaddr_un addr;
  const socklen_t len = AbstractAddress(grant.socket_name, &addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return fail(absl::UnavailableError(absl::StrCat("@", grant.socket_name, " is not reachable from here (",
                                                    strerror(errno), "): the server is on another host")));
  }
  absl::StatusOr<uid_t> uid = PeerUid(fd);
  if (!uid.ok()) return fail(uid.status());
  if (*uid != geteuid()) {
    return fail(absl::PermissionDeniedError(
        absl::StrCat("@", grant.socket_name, " is served by uid ", *uid, ", not this process's ", geteuid())));
  }
  if (send(fd, grant.token.data(), grant.token.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(grant.token.size())) {
    return fail(absl::UnavailableError(absl::StrCat("sending the token: ", strerror(errno))));
  }
  int fds[3] = {-1, -1, -1};
  char byte = 0;
  const ssize_t n = ReceiveFds(fd, &byte, fds);
  if (n != 1 || byte != kAccepted || fds[2] < 0) {
    for (int f : fds) {
      if (f >= 0) close(f);
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return fail(absl::DeadlineExceededError(
          absl::StrCat("no answer on @", grant.socket_name, " within ", absl::FormatDuration(timeout))));
    }
    return fail(absl::UnavailableError(absl::StrCat("@", grant.socket_name, " refused the token")));
  }
  absl::StatusOr<std::unique_ptr<ShmChannel>> channel =
      ShmChannel::Adopt(ShmFds{fds[0], fds[1], fds[2]}, grant.ring_bytes);
  if (!channel.ok()) return fail(channel.status());
  if (send(fd, &kAdopted, 1, MSG_NOSIGNAL) != 1) {
    return fail(absl::UnavailableError(absl::StrCat("confirming the channel: ", strerror(errno))));
  }
  (*channel)->set_peer_socket(fd);
  return channel;
}

absl::StatusOr<std::unique_ptr<ShmChannel>> ChannelFromAnswer(const Envelope& answer, absl::Duration timeout) {
  if (const auto* grant = std::get_if<ShmGrantMsg>(&answer.body)) return FetchShmChannel(*grant, timeout);
  if (const auto* err = std::get_if<ErrorMsg>(&answer.body)) return absl::Status(err->code, err->message);
  return absl::DataLossError(absl::StrCat("the offer of shared memory was answered with ", BodyName(answer.body)));
}

}  // namespace ps
