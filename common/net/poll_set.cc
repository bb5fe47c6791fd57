#include "common/net/poll_set.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <limits>
#include <utility>

#include "glog/logging.h"

namespace ps {

void PollSet::Clear() {
  items_.clear();
  tags_.clear();
  unsettled_.clear();
  has_sockets_ = false;
  ready_.clear();
}

void PollSet::Add(zmq::socket_t& socket, int tag) {
  items_.push_back({socket.handle(), 0, ZMQ_POLLIN, 0});
  tags_.push_back(tag);
  unsettled_.push_back(false);
  has_sockets_ = true;
}

void PollSet::AddFd(int fd, int tag) {
  items_.push_back({nullptr, fd, ZMQ_POLLIN, 0});
  tags_.push_back(tag);
  unsettled_.push_back(false);
}

void PollSet::AddSocketFd(zmq::socket_t& socket, int tag, bool unsettled) {
  AddFd(socket.get(zmq::sockopt::fd), tag);
  unsettled_.back() = unsettled;
}

void PollSet::Wait(absl::Duration timeout) {
  const bool any_unsettled = std::find(unsettled_.begin(), unsettled_.end(), true) != unsettled_.end();
  const int ms =
      any_unsettled
          ? 0
          : static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(std::max(timeout, absl::ZeroDuration())),
                                               std::numeric_limits<int>::max()));
  ready_.clear();
  // A signal handler ran (ps_server's SIGTERM sets its stop flag): nothing
  // is ready, and the caller's loop looks at its flag before it polls again.
  if (!(has_sockets_ ? PollSockets(ms) : PollDescriptors(ms))) return;
  for (size_t i = 0; i < items_.size(); ++i) {
    if ((items_[i].revents & ZMQ_POLLIN) != 0 || unsettled_[i]) ready_.push_back(tags_[i]);
  }
}

bool PollSet::PollSockets(int timeout_ms) {
  try {
    zmq::poll(items_.data(), items_.size(), std::chrono::milliseconds(timeout_ms));
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
    return false;
  }
  return true;
}

bool PollSet::PollDescriptors(int timeout_ms) {
  fds_.resize(items_.size());  // (kept between waits: no allocation per wait)
  for (size_t i = 0; i < items_.size(); ++i) fds_[i] = {items_[i].fd, POLLIN, 0};
  if (poll(fds_.data(), fds_.size(), timeout_ms) < 0) {
    PCHECK(errno == EINTR) << "poll";
    return false;
  }
  for (size_t i = 0; i < items_.size(); ++i) items_[i].revents = (fds_[i].revents & POLLIN) != 0 ? ZMQ_POLLIN : 0;
  return true;
}

bool PollSet::IsReady(int tag) const { return std::find(ready_.begin(), ready_.end(), tag) != ready_.end(); }

absl::Status DrainMessages(zmq::socket_t& socket, bool routed, int max,
                           absl::FunctionRef<absl::Status(RawMessage)> handle, bool* unsettled) {
  bool emptied = false;
  absl::Status status;
  for (int n = 0; n < max && status.ok(); ++n) {
    absl::StatusOr<RawMessage> raw = ReceiveMessage(socket, routed);
    if (!raw.ok()) {
      emptied = absl::IsUnavailable(raw.status());  // nothing waiting
      break;
    }
    status = handle(*std::move(raw));
  }
  if (unsettled != nullptr) *unsettled = !emptied;
  return status;
}

}  // namespace ps
