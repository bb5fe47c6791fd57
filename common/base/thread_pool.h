#ifndef PS_COMMON_BASE_THREAD_POOL_H_
#define PS_COMMON_BASE_THREAD_POOL_H_

// A fixed set of threads that run the iterations of a ParallelFor.
//
// Thread-safe: ParallelFor may be called from any thread, but calls are
// serialised (one loop at a time), which is what a server's single request
// thread needs. The calling thread takes part in the loop.

#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps {

class ThreadPool {
 public:
  // `num_threads` threads in all, counting the caller of ParallelFor;
  // 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs body(i) for every i in [0, n) and returns when all have finished.
  // Iterations run in any order on any of the threads.
  void ParallelFor(size_t n, const std::function<void(size_t)>& body);
  // ParallelFor, unless another caller's loop holds the pool: then every
  // iteration runs on the calling thread, in order, rather than waiting
  // for that loop to end (callers that each have work of their own).
  void ParallelForOrAlone(size_t n, const std::function<void(size_t)>& body);

 private:
  // One loop over the threads; the caller holds call_mu_.
  void RunLoop(size_t n, const std::function<void(size_t)>& body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(call_mu_);
  void WorkerLoop();
  // Claims and runs iterations of the current loop until none are left.
  void RunIterations();

  absl::Mutex call_mu_;  // serialises ParallelFor calls
  absl::Mutex mu_;
  const std::function<void(size_t)>* body_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  size_t end_ ABSL_GUARDED_BY(mu_) = 0;
  size_t unfinished_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace ps

#endif  // PS_COMMON_BASE_THREAD_POOL_H_
