#ifndef PS_COMMON_POLL_SET_H_
#define PS_COMMON_POLL_SET_H_

// The poll step of every role's loop: the sockets (and file descriptors) a
// node waits on, each named by a tag of the caller's, and draining what a
// readable socket holds in bounded batches, so that one busy peer cannot
// starve the others or the loop's deadlines.
//
//   PollSet poll;
//   poll.Add(scheduler, kScheduler);
//   poll.Wait(runtime.PollTimeout(kPollInterval));
//   for (int tag : poll.ready()) DrainMessages(socket_of(tag), false, 256, handle);
//
// Not thread-safe: the loop's thread owns it (like the sockets).

#include <algorithm>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/transport.h"
#include "zmq.hpp"

namespace ps {

class PollSet {
 public:
  void Clear();
  // Waits for `socket` to be readable; `socket` must outlive the next Wait.
  void Add(zmq::socket_t& socket, int tag);
  void AddFd(int fd, int tag);
  bool empty() const { return items_.empty(); }
  // Blocks until an item is readable or `timeout` passes (negative: zero).
  // A signal that interrupts it (EINTR) ends it early with nothing ready.
  void Wait(absl::Duration timeout);
  // The tags of the items the last Wait found readable, in the order added.
  absl::Span<const int> ready() const { return ready_; }
  bool IsReady(int tag) const;

 private:
  std::vector<zmq::pollitem_t> items_;
  std::vector<int> tags_;
  std::vector<int> ready_;
};

// Receives, without blocking, up to `max` messages waiting on `socket` and
// hands each to `handle`, stopping when none is left, at the first message
// that cannot be received whole (ReceiveMessage's errors), or at the first
// error `handle` returns, which is returned.
absl::Status DrainMessages(zmq::socket_t& socket, bool routed, int max,
                           absl::FunctionRef<absl::Status(RawMessage)> handle);

}  // namespace ps

#endif  // PS_COMMON_POLL_SET_H_
