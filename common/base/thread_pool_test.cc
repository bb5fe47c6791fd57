#include "common/base/thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(ThreadPoolTest, ParallelForRunsEveryIndexExactlyOnce) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.num_threads(), 4);
  for (size_t n : {0u, 1u, 2u, 7u, 1000u}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, [&](size_t i) { hits[i].fetch_add(1); });
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPoolTest, ReturnsOnlyAfterEveryIterationFinished) {
  ThreadPool pool(3);
  std::atomic<int> done{0};
  pool.ParallelFor(64, [&](size_t) {
    std::this_thread::yield();
    done.fetch_add(1);
  });
  EXPECT_EQ(done.load(), 64);
}

TEST(ThreadPoolTest, UsesMoreThanOneThread) {
  ThreadPool pool(2);
  std::atomic<int> inside{0}, most{0};
  // Each iteration waits (bounded) for a second one to be inside at once.
  pool.ParallelFor(2, [&](size_t) {
    const int now = inside.fetch_add(1) + 1;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    for (int spin = 0; spin < 50000000 && most.load() < 2; ++spin) std::this_thread::yield();
    inside.fetch_sub(1);
  });
  EXPECT_EQ(most.load(), 2);
}

TEST(ThreadPoolTest, CallsFromSeveralThreadsAreSerialisedAndAllComplete) {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] { pool.ParallelFor(100, [&](size_t) { total.fetch_add(1); }); });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 400);
}

// While another caller's loop holds the pool, ParallelForOrAlone runs its
// own iterations on the calling thread instead of waiting for that loop.
TEST(ThreadPoolTest, ParallelForOrAloneRunsOnTheCallerWhileAnotherLoopHoldsThePool) {
  ThreadPool pool(3);
  absl::Notification started, release;
  std::thread holder([&] {
    pool.ParallelFor(2, [&](size_t i) {
      if (i == 0) started.Notify();
      release.WaitForNotification();
    });
  });
  started.WaitForNotification();
  std::vector<std::thread::id> ran(5);
  pool.ParallelForOrAlone(5, [&](size_t i) { ran[i] = std::this_thread::get_id(); });
  EXPECT_EQ(ran, std::vector<std::thread::id>(5, std::this_thread::get_id()));
  release.Notify();
  holder.join();
  // With the pool free again: every index once.
  std::vector<std::atomic<int>> hits(64);
  pool.ParallelForOrAlone(64, [&](size_t i) { hits[i].fetch_add(1); });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

}  // namespace
}  // namespace ps
