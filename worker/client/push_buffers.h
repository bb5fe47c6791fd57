#ifndef PS_WORKER_CLIENT_PUSH_BUFFERS_H_
#define PS_WORKER_CLIENT_PUSH_BUFFERS_H_

// Gradient memory a caller lends to its pushes instead of the client copying
// it: a push of a ConstTensorBuffer whose `owner` is one of these buffers
// keeps a reference, not the bytes, for as long as the push may have to be
// sent again (until a checkpoint of its server holds it, or its replicas
// answered), and the buffer comes back to the pool when the last reference
// goes. A trainer takes a fresh buffer for each step's gradients, so the
// push path copies nothing and, once the pool has grown to the number of
// steps in flight, allocates nothing either.
//
// Thread-safe: buffers come back on the client's threads.

#include <cstddef>
#include <functional>
#include <memory>

namespace ps {

class PushBufferPool {
 public:
  // Memory comes from `alloc(n)` (never nullptr) and goes back through
  // `free`; both must stay usable until the last buffer is released, which
  // may be after the pool is gone (the client that holds them is closed).
  // The default: new float[n].
  PushBufferPool();
  PushBufferPool(std::function<float*(size_t)> alloc, std::function<void(float*)> free);
  ~PushBufferPool();
  PushBufferPool(const PushBufferPool&) = delete;
  PushBufferPool& operator=(const PushBufferPool&) = delete;

  // A buffer of `n` floats that nobody holds: one released earlier, or new.
  // Its contents are whatever was last written there.
  std::shared_ptr<float> Take(size_t n);

  // Buffers allocated so far (held or free): how many steps the pushes keep.
  size_t allocated() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace ps

#endif  // PS_WORKER_CLIENT_PUSH_BUFFERS_H_
