#ifndef PS_WORKER_CLIENT_CALLER_IO_H_
#define PS_WORKER_CLIENT_CALLER_IO_H_

// What the I/O thread shares with the callers that do their own I/O
// (KVClientOptions::caller_io, kv_client_direct.cc): how many of them
// collect their replies on their own thread now, the descriptor that wakes
// them when another thread completed an op, and what they did.
//
// Thread-safe.

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <thread>

namespace ps::client_internal {

// What callers did on their own thread (KVClientOptions::caller_io).
struct CallerIoStats {
  uint64_t requests_sent = 0;
  uint64_t messages_read = 0;
};

class CallerIo {
 public:
  CallerIo() : wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~CallerIo() {
    if (wake_fd_ >= 0) close(wake_fd_);
  }
  CallerIo(const CallerIo&) = delete;
  CallerIo& operator=(const CallerIo&) = delete;

  // False when the descriptor could not be made.
  bool ok() const { return wake_fd_ >= 0; }
  // Rung by Completed; a caller that waits polls it beside its sockets.
  int wake_fd() const { return wake_fd_; }
  // Empties the descriptor after it rang.
  void Consume() const {
    uint64_t count;
    (void)!read(wake_fd_, &count, sizeof(count));
  }

  // A caller starts or stops collecting its own replies (WaitDirect).
  void Enter() { drivers_.fetch_add(1, std::memory_order_acq_rel); }
  void Leave() { drivers_.fetch_sub(1, std::memory_order_acq_rel); }
  // Whether none does: the servers' sockets are the I/O thread's to watch.
  bool none() const { return drivers_.load(std::memory_order_acquire) == 0; }
  // The I/O thread names itself, once, before any caller does its own I/O.
  void set_io_thread(std::thread::id id) { io_thread_ = id; }
  // An op completed on the calling thread: a caller may sleep on a socket
  // whose signal this thread took, so they are woken; one that completes its
  // own op needs no ring.
  void Completed() const {
    const int drivers = drivers_.load(std::memory_order_acquire);
    if (drivers > 1 || (drivers == 1 && std::this_thread::get_id() == io_thread_)) {
      const uint64_t one = 1;
      (void)!write(wake_fd_, &one, sizeof(one));
    }
  }

  void CountSent(uint64_t requests) { sent_.fetch_add(requests, std::memory_order_relaxed); }
  void CountRead(uint64_t messages) { read_.fetch_add(messages, std::memory_order_relaxed); }
  CallerIoStats stats() const { return {sent_.load(std::memory_order_relaxed), read_.load(std::memory_order_relaxed)}; }

 private:
  const int wake_fd_;
  std::atomic<int> drivers_{0};
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> read_{0};
  std::thread::id io_thread_;
};

}  // namespace ps::client_internal

#endif  // PS_WORKER_CLIENT_CALLER_IO_H_
