#include "worker/client/push_buffers.h"

#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

// An allocator that counts what is live.
struct Counting {
  std::shared_ptr<int> live = std::make_shared<int>(0);
  PushBufferPool Pool() const {
    return PushBufferPool(
        [live = live](size_t n) {
          ++*live;
          return new float[n];
        },
        [live = live](float* p) {
          --*live;
          delete[] p;
        });
  }
};

TEST(PushBufferPoolTest, AReleasedBufferIsTakenAgainInsteadOfANewOne) {
  Counting counting;
  PushBufferPool pool = counting.Pool();
  std::shared_ptr<float> a = pool.Take(100);
  float* const first = a.get();
  std::shared_ptr<float> held = a;  // a push still keeps it
  a.reset();
  std::shared_ptr<float> b = pool.Take(100);
  EXPECT_NE(b.get(), first);  // the held one is not handed out
  EXPECT_EQ(pool.allocated(), 2u);
  held.reset();  // the push let go
  std::shared_ptr<float> c = pool.Take(100);
  EXPECT_EQ(c.get(), first);
  EXPECT_EQ(pool.allocated(), 2u);
  std::shared_ptr<float> other = pool.Take(7);  // another size: a buffer of its own
  EXPECT_NE(other.get(), first);
  EXPECT_EQ(pool.allocated(), 3u);
  EXPECT_EQ(*counting.live, 3);
}

TEST(PushBufferPoolTest, BuffersOutliveThePoolAndAreFreedWhenReleased) {
  Counting counting;
  std::shared_ptr<float> kept;
  {
    PushBufferPool pool = counting.Pool();
    kept = pool.Take(10);
    pool.Take(10).reset();  // idle when the pool goes: freed with it
    EXPECT_EQ(*counting.live, 2);
  }
  EXPECT_EQ(*counting.live, 1);
  kept.get()[9] = 1.0f;  // still valid memory
  kept.reset();
  EXPECT_EQ(*counting.live, 0);
}

TEST(PushBufferPoolTest, BuffersComeBackFromOtherThreads) {
  PushBufferPool pool;
  std::vector<std::shared_ptr<float>> taken;
  for (int i = 0; i < 8; ++i) taken.push_back(pool.Take(1024));
  std::thread releaser([&] { taken.clear(); });
  releaser.join();
  std::set<float*> again;
  for (int i = 0; i < 8; ++i) taken.push_back(pool.Take(1024));
  for (const auto& p : taken) again.insert(p.get());
  EXPECT_EQ(again.size(), 8u);
  EXPECT_EQ(pool.allocated(), 8u);  // all eight reused
}

}  // namespace
}  // namespace ps
