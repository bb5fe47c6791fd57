// A caller's own I/O over sockets (KVClientOptions::caller_io): the caller
// sends what it queued, and collects its replies, on its own thread. Raw
// ZeroMQ costs one wake-up per message each way (the library's I/O thread
// and the application's); a client whose I/O thread did all of it added
// two more per round trip: the caller waking it to send, and it waking the
// caller on the reply.

#include <poll.h>

#include <algorithm>

#include "absl/time/clock.h"
#include "common/net/shm_channel.h"
#include "worker/client/kv_client_internal.h"

namespace ps::client_internal {

std::vector<int> IoThread::DirectRound(const std::vector<bool>& fired, absl::FunctionRef<bool()> done) {
  caller_io_.CountSent(SendQueued());
  std::vector<int> fds(links_.size(), -1);
  for (size_t r = 0; r < links_.size(); ++r) {
    const int target = static_cast<int>(r);
    if (links_[r].unsettled || (r < fired.size() && fired[r])) {
      // A message at a time once the caller's op may be done: its reply is
      // often the last one expected, and then the socket is left unsettled
      // rather than asked once more (the next send unsettles it anyway).
      int read = 0;
      while (links_[r].socket && !(done() && in_flight_.empty())) {
        const int n = Drain(target, 1);
        if (n == 0) break;  // emptied (settled), or a message it could not read
        read += n;
      }
      caller_io_.CountRead(read);
    }
    if (links_[r].socket) fds[r] = links_[r].socket.get(zmq::sockopt::fd);
  }
  ReleaseFenced();  // what the replies read let go
  // The scheduler's socket and a changed poll set are the I/O thread's.
  if (scheduler_.unsettled() || poll_items_stale_) Wake();
  return fds;
}

bool IoThread::SendDirect() {
  if (!Direct() || !io_mu_.TryLock()) return false;  // the I/O thread is at it: it sends them next
  if (!Direct()) {                                   // a channel came up, or the client stopped, meanwhile
    io_mu_.Unlock();
    return false;
  }
  // Sent sockets are drained to the end, which re-arms their descriptors
  // for the I/O thread's poll when no caller waits.
  (void)DirectRound({}, [] { return false; });
  io_mu_.Unlock();
  return true;
}

void IoThread::WaitDirect(absl::FunctionRef<bool()> done, absl::Time deadline) {
  if (!Direct()) return;
  // From its next round the I/O thread leaves the servers' sockets to the
  // callers, and looks again within kDriverRound of the last one leaving.
  caller_io_.Enter();
  std::vector<bool> fired;
  while (!done()) {
    std::vector<int> fds;
    bool settled = false;
    {
      absl::MutexLock io(&io_mu_);
      if (!Direct()) break;
      fds = DirectRound(fired, done);
      settled = !ServersUnsettled();
    }
    if (done()) break;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    // A reply wakes this thread through its socket's descriptor; an op
    // completed by another thread, through caller_io_. A bounded sleep
    // covers a signal another thread took between the round and the poll.
    std::vector<pollfd> items;
    items.push_back({caller_io_.wake_fd(), POLLIN, 0});
    for (int fd : fds) items.push_back({fd, POLLIN, 0});  // (poll skips a closed one's -1)
    int ms = settled ? static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(left), 0, 1)) : 0;
    if (ms > 0 && SpinUntil(options_.caller_spin, [&] { return poll(items.data(), items.size(), 0) > 0; })) ms = 0;
    if (poll(items.data(), items.size(), ms) > 0 && (items[0].revents & POLLIN) != 0) {
      caller_io_.Consume();
    }
    fired.assign(fds.size(), false);
    for (size_t r = 0; r < fds.size(); ++r) fired[r] = (items[r + 1].revents & POLLIN) != 0;
  }
  caller_io_.Leave();
}

}  // namespace ps::client_internal
