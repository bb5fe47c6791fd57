#include "common/poll_set.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <utility>

namespace ps {

void PollSet::Clear() {
  items_.clear();
  tags_.clear();
  ready_.clear();
}

void PollSet::Add(zmq::socket_t& socket, int tag) {
  items_.push_back({socket.handle(), 0, ZMQ_POLLIN, 0});
  tags_.push_back(tag);
}

void PollSet::AddFd(int fd, int tag) {
  items_.push_back({nullptr, fd, ZMQ_POLLIN, 0});
  tags_.push_back(tag);
}

void PollSet::Wait(absl::Duration timeout) {
  const int64_t ms = absl::ToInt64Milliseconds(std::max(timeout, absl::ZeroDuration()));
  try {
    zmq::poll(items_.data(), items_.size(), std::chrono::milliseconds(ms));
  } catch (const zmq::error_t& e) {
    // A signal handler ran (ps_server's SIGTERM sets its stop flag): nothing
    // is ready, and the caller's loop looks at its flag before it polls again.
    if (e.num() != EINTR) throw;
    for (zmq::pollitem_t& item : items_) item.revents = 0;
  }
  ready_.clear();
  for (size_t i = 0; i < items_.size(); ++i) {
    if (items_[i].revents & ZMQ_POLLIN) ready_.push_back(tags_[i]);
  }
}

bool PollSet::IsReady(int tag) const { return std::find(ready_.begin(), ready_.end(), tag) != ready_.end(); }

absl::Status DrainMessages(zmq::socket_t& socket, bool routed, int max,
                           absl::FunctionRef<absl::Status(RawMessage)> handle) {
  for (int n = 0; n < max; ++n) {
    absl::StatusOr<RawMessage> raw = ReceiveMessage(socket, routed);
    if (!raw.ok()) break;
    if (absl::Status s = handle(*std::move(raw)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace ps
