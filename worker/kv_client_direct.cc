// A caller's own I/O over sockets (KVClientOptions::caller_io): the caller
// sends what it queued, and collects its replies, on its own thread. Raw
// ZeroMQ costs one wake-up per message each way (the library's I/O thread
// and the application's); a client whose I/O thread did all of it added
// two more per round trip: the caller waking it to send, and it waking the
// caller on the reply.

#include <poll.h>

#include <algorithm>

#include "absl/time/clock.h"
#include "worker/kv_client_internal.h"

namespace ps {

std::vector<int> KVClient::IoThread::DirectRound() {
  caller_sent_.fetch_add(SendQueued(), std::memory_order_relaxed);
  for (size_t r = 0; r < servers_.size(); ++r) {
    caller_read_.fetch_add(Drain(static_cast<int>(r)), std::memory_order_relaxed);
  }
  // The scheduler's socket and a changed poll set are the I/O thread's.
  if (Readable(scheduler_) || poll_items_stale_) Wake();
  std::vector<int> fds;
  for (zmq::socket_t& s : servers_) {
    if (s) fds.push_back(s.get(zmq::sockopt::fd));
  }
  return fds;
}

bool KVClient::IoThread::SendDirect() {
  if (!Direct() || !io_mu_.TryLock()) return false;  // the I/O thread is at it: it sends them next
  if (!Direct()) {  // a channel came up, or the client stopped, meanwhile
    io_mu_.Unlock();
    return false;
  }
  (void)DirectRound();
  io_mu_.Unlock();
  return true;
}

void KVClient::IoThread::WaitDirect(absl::FunctionRef<bool()> done, absl::Time deadline) {
  if (!Direct()) return;
  // From its next round the I/O thread leaves the servers' sockets to the
  // callers, and looks again within kDriverRound of the last one leaving.
  drivers_.fetch_add(1, std::memory_order_acq_rel);
  while (!done()) {
    std::vector<int> fds;
    {
      absl::MutexLock io(&io_mu_);
      if (!Direct()) break;
      fds = DirectRound();
    }
    if (done()) break;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    // A reply wakes this thread through its socket's descriptor; an op
    // completed by another thread, through driver_wake_fd_. A bounded sleep
    // covers a signal another thread took between the round and the poll.
    std::vector<pollfd> items;
    items.push_back({driver_wake_fd_, POLLIN, 0});
    for (int fd : fds) items.push_back({fd, POLLIN, 0});
    const int ms = static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(left), 0, 1));
    if (poll(items.data(), items.size(), ms) > 0 && (items[0].revents & POLLIN) != 0) {
      uint64_t count;
      (void)!read(driver_wake_fd_, &count, sizeof(count));
    }
  }
  drivers_.fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace ps
