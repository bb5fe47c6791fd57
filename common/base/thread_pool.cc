#include "common/base/thread_pool.h"

namespace ps {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (auto& t : workers_) t.join();
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t)>& body) {
  if (n == 0) return;
  if (n == 1 || workers_.empty()) {
    for (size_t i = 0; i < n; ++i) body(i);
    return;
  }
  absl::MutexLock call_lock(&call_mu_);
  RunLoop(n, body);
}

void ThreadPool::ParallelForOrAlone(size_t n, const std::function<void(size_t)>& body) {
  if (n > 1 && !workers_.empty() && call_mu_.TryLock()) {
    RunLoop(n, body);
    call_mu_.Unlock();
    return;
  }
  for (size_t i = 0; i < n; ++i) body(i);
}

void ThreadPool::RunLoop(size_t n, const std::function<void(size_t)>& body) {
  {
    absl::MutexLock lock(&mu_);
    body_ = &body;
    next_ = 0;
    end_ = n;
    unfinished_ = n;
    ++generation_;
  }
  RunIterations();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](size_t* unfinished) { return *unfinished == 0; }, &unfinished_));
  body_ = nullptr;
}

void ThreadPool::RunIterations() {
  while (true) {
    const std::function<void(size_t)>* body;
    size_t i;
    {
      absl::MutexLock lock(&mu_);
      if (body_ == nullptr || next_ >= end_) return;
      body = body_;
      i = next_++;
    }
    (*body)(i);
    absl::MutexLock lock(&mu_);
    --unfinished_;
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || (generation_ != seen && body_ != nullptr && next_ < end_);
      };
      mu_.Await(absl::Condition(&has_work));
      if (stop_) return;
      seen = generation_;
    }
    RunIterations();
  }
}

}  // namespace ps
