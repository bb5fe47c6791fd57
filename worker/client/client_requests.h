#ifndef PS_WORKER_CLIENT_CLIENT_REQUESTS_H_
#define PS_WORKER_CLIENT_CLIENT_REQUESTS_H_

// What KVClient's calls become on their way to the I/O thread (kv_client.cc
// builds them, kv_client_internal.h's IoThread sends them): the state of a
// ticket (Op), where pulled slices land (Destination), one request to one
// peer (Outgoing), the grouping of slices into requests (RequestBuilder),
// and the queue by which callers hand requests to the I/O thread
// (RequestQueue). Internal to worker/client.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/placement/partition_map.h"
#include "common/wire/messages.h"
#include "zmq.hpp"

namespace ps::client_internal {

// A request's target when it goes to the scheduler; a server's is its rank.
inline constexpr int kSchedulerTarget = -1;

// What a ticket stands for: one or more requests and the frames lent to
// ZeroMQ. Complete when every reply is in and ZeroMQ has let go of every
// frame, so the caller's buffers are free again.
struct Op {
  absl::Mutex mu;
  int replies_pending ABSL_GUARDED_BY(mu) = 0;
  int frames_held ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);
  Envelope reply ABSL_GUARDED_BY(mu);  // control requests: the reply

  bool Done() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return replies_pending == 0 && frames_held == 0; }
  void Fail(absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (status.ok()) status = std::move(s);
  }
};

// ZeroMQ calls this, on its own thread, when a frame lent from a caller's
// buffer is free again; `hint` is a heap shared_ptr<Op> it deletes.
void ReleaseFrame(void* data, void* hint);
// The same for a frame of memory lent with its owner (ConstTensorBuffer::
// owner): `hint` is a heap shared_ptr of the owner, deleted.
void ReleaseOwner(void* data, void* hint);
// Whether every frame of `op` owns its bytes (encoded, or lent with an
// owner): none is the caller's, so a copy kept to re-send may share them.
bool OwnsFrames(const std::shared_ptr<Op>& op);
// Ends one pending reply of `op` with `status`.
void FailOp(const std::shared_ptr<Op>& op, const absl::Status& status);

// Where one pulled slice lands in the caller's buffer. A table shard's rows
// (rows > 0) are scattered: reply row `local` goes to every `dst` listed
// with it.
struct Destination {
  uint32_t key = 0;
  uint64_t length = 0;  // from our own partition map or request, never from the reply
  float* data = nullptr;
  uint32_t rows = 0;
  uint32_t dim = 0;
  std::vector<std::pair<uint32_t, float*>> scatter;  // (local row, dst)
};

// One request to one peer, built on the caller's thread, sent by the I/O thread.
struct Outgoing {
  int target = kSchedulerTarget;
  Envelope envelope;
  std::vector<zmq::message_t> payloads;
  std::vector<Destination> destinations;  // pull: where each slice lands
  absl::Duration timeout;
  std::shared_ptr<Op> op;
};

// Groups slices into requests: one per server, or several when a server's
// slices exceed max_request_bytes, so that a large tensor travels as a
// pipeline (the server applies and answers one part while the next arrives).
// The pull of a slice rides on the request that pushes it.
class RequestBuilder {
 public:
  RequestBuilder(int num_servers, uint64_t max_bytes)
      : open_(num_servers, -1), bytes_(num_servers, 0), max_bytes_(max_bytes) {}

  // The request for `slice`: the one already carrying `key`, or the server's
  // open request if it has room, or a new one. Its priority is that of its
  // first tensor in the forward pass (Envelope::priority).
  Outgoing& For(const Slice& slice) {
    if (auto it = by_key_.find(slice.key); it != by_key_.end()) return requests_[it->second];
    const uint64_t bytes = slice.length * sizeof(float);
    int& open = open_[slice.server];
    const uint32_t priority = slice.table ? 0 : slice.tensor;
    if (open < 0 || (bytes_[slice.server] > 0 && bytes_[slice.server] + bytes > max_bytes_)) {
      open = static_cast<int>(requests_.size());
      requests_.emplace_back();
      requests_.back().target = slice.server;
      requests_.back().envelope.priority = priority;
      bytes_[slice.server] = 0;
    }
    bytes_[slice.server] += bytes;
    by_key_[slice.key] = open;
    Envelope& envelope = requests_[open].envelope;
    envelope.priority = std::min(envelope.priority, priority);
    return requests_[open];
  }
  // The requests built so far; the builder is spent afterwards.
  std::vector<Outgoing> Take() { return std::move(requests_); }

 private:
  std::vector<Outgoing> requests_;
  std::vector<int> open_;
  std::vector<uint64_t> bytes_;
  absl::flat_hash_map<uint32_t, int> by_key_;
  const uint64_t max_bytes_;
};

// The requests callers handed to the I/O thread, waiting to be sent.
// Thread-safe.
class RequestQueue {
 public:
  void Push(std::vector<Outgoing> requests) {
    {
      absl::MutexLock lock(&mu_);
      for (Outgoing& r : requests) queue_.push_back(std::move(r));
    }
    queued_.store(true, std::memory_order_release);
  }
  // Every request queued, in order; the queue is empty afterwards.
  std::deque<Outgoing> Take() {
    std::deque<Outgoing> batch;
    queued_.store(false, std::memory_order_release);
    absl::MutexLock lock(&mu_);
    batch.swap(queue_);
    return batch;
  }
  // Whether it may hold requests: a look without the lock.
  bool MayHold() const { return queued_.load(std::memory_order_acquire); }

 private:
  absl::Mutex mu_;
  std::deque<Outgoing> queue_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> queued_{false};
};

}  // namespace ps::client_internal

#endif  // PS_WORKER_CLIENT_CLIENT_REQUESTS_H_
