#include "worker/client/push_buffers.h"

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace ps {

struct PushBufferPool::State {
  std::function<float*(size_t)> alloc;
  std::function<void(float*)> free;
  absl::Mutex mu;
  bool open ABSL_GUARDED_BY(mu) = true;  // false: the pool is gone, buffers are freed as they come back
  absl::flat_hash_map<size_t, std::vector<float*>> idle ABSL_GUARDED_BY(mu);  // by size
  size_t allocated ABSL_GUARDED_BY(mu) = 0;

  // A buffer's last reference went (on any thread).
  void Return(float* p, size_t n) {
    {
      absl::MutexLock lock(&mu);
      if (open) {
        idle[n].push_back(p);
        return;
      }
      --allocated;
    }
    free(p);
  }
};

PushBufferPool::PushBufferPool()
    : PushBufferPool([](size_t n) { return new float[n]; }, [](float* p) { delete[] p; }) {}

PushBufferPool::PushBufferPool(std::function<float*(size_t)> alloc, std::function<void(float*)> free)
    : state_(std::make_shared<State>()) {
  state_->alloc = std::move(alloc);
  state_->free = std::move(free);
}

PushBufferPool::~PushBufferPool() {
  std::vector<float*> idle;
  {
    absl::MutexLock lock(&state_->mu);
    state_->open = false;
    for (auto& [n, buffers] : state_->idle) idle.insert(idle.end(), buffers.begin(), buffers.end());
    state_->idle.clear();
    state_->allocated -= idle.size();
  }
  for (float* p : idle) state_->free(p);
}

std::shared_ptr<float> PushBufferPool::Take(size_t n) {
  float* p = nullptr;
  {
    absl::MutexLock lock(&state_->mu);
    std::vector<float*>& idle = state_->idle[n];
    if (!idle.empty()) {
      p = idle.back();
      idle.pop_back();
    } else {
      ++state_->allocated;
    }
  }
  if (p == nullptr) p = state_->alloc(n);
  // The deleter holds the state, so a buffer may outlive the pool.
  return std::shared_ptr<float>(p, [state = state_, n](float* q) { state->Return(q, n); });
}

size_t PushBufferPool::allocated() const {
  absl::MutexLock lock(&state_->mu);
  return state_->allocated;
}

}  // namespace ps
