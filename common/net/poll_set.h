#ifndef PS_COMMON_NET_POLL_SET_H_
#define PS_COMMON_NET_POLL_SET_H_

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

#include <poll.h>

#include <algorithm>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/net/transport.h"
#include "zmq.hpp"

namespace ps {

class PollSet {
 public:
  void Clear();
  // Waits for `socket` to be readable; `socket` must outlive the next Wait.
  void Add(zmq::socket_t& socket, int tag);
  void AddFd(int fd, int tag);
  // Watches `socket` by its descriptor (ZMQ_FD), asking ZeroMQ nothing.
  // zmq_poll asks each socket's ZMQ_EVENTS before it sleeps and after it
  // wakes: two system calls per socket each time, which cost a microsecond
  // apiece on a VM. That is needed because the descriptor is edge-triggered:
  // it is raised when a command reaches the socket's mailbox, and any call
  // into the socket (a send, a receive) may consume that command while the
  // message it announces stays unread. Only a receive that finds nothing
  // re-arms it. So the caller keeps, per socket, whether it may hold a
  // message its descriptor will not announce (`unsettled`: after any send
  // on it, and after a drain that stopped before the socket was empty, see
  // DrainMessages' `unsettled`), and Wait reports such a socket ready without
  // sleeping. A socket starts unsettled.
  void AddSocketFd(zmq::socket_t& socket, int tag, bool unsettled);
  bool empty() const { return items_.empty(); }
  // Blocks until an item is readable or `timeout` passes (negative: zero).
  // A signal that interrupts it (EINTR) ends it early with nothing ready.
  // With only descriptors in the set it is one poll(2).
  void Wait(absl::Duration timeout);
  // The tags of the items the last Wait found readable, in the order added.
  absl::Span<const int> ready() const { return ready_; }
  bool IsReady(int tag) const;

 private:
  // False when a signal interrupted it.
  bool PollSockets(int timeout_ms);
  bool PollDescriptors(int timeout_ms);

  std::vector<zmq::pollitem_t> items_;
  std::vector<int> tags_;
  std::vector<bool> unsettled_;  // by item: reported ready without waiting
  bool has_sockets_ = false;     // zmq_poll items among them
  std::vector<pollfd> fds_;      // PollDescriptors' array
  std::vector<int> ready_;
};

// Receives, without blocking, up to `max` messages waiting on `socket` and
// hands each to `handle`, stopping when none is left, at the first message
// that cannot be received whole (ReceiveMessage's errors), or at the first
// error `handle` returns, which is returned. At the end `*unsettled` (when
// given) says whether the socket may still hold a message its descriptor
// will not announce (PollSet::AddSocketFd): false only when the drain
// stopped because nothing was left, a receive that re-armed the descriptor
// after every send `handle` made on the socket.
absl::Status DrainMessages(zmq::socket_t& socket, bool routed, int max,
                           absl::FunctionRef<absl::Status(RawMessage)> handle, bool* unsettled = nullptr);

}  // namespace ps

#endif  // PS_COMMON_NET_POLL_SET_H_
