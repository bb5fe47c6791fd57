#include "worker/train/push_pool_memory.h"

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/client/push_buffers.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// An allocator that gives `budget` buffers, then fails as cudaHostAlloc
// does when pinned memory runs out; counts what it gave and took back.
struct PinnedMemory {
  int budget = 0;
  int live = 0;
  absl::StatusOr<float*> Alloc(size_t n) {
    if (budget == 0) {
      return absl::ResourceExhaustedError(
          "GPU 0: pinned host memory: cudaHostAlloc of 4096 bytes failed: cudaErrorMemoryAllocation: out of memory");
    }
    --budget;
    ++live;
    return new float[n]();
  }
  void Free(float* p) {
    --live;
    delete[] p;
  }
};

TEST(PushPoolMemoryTest, ABufferThePinnedAllocatorCannotGiveIsAnErrorNamingItAndComesFromTheHeap) {
  PinnedMemory pinned{.budget = 1};
  PushPoolMemory memory([&](size_t n) { return pinned.Alloc(n); }, [&](float* p) { pinned.Free(p); });
  float* first = memory.Alloc(1024);
  EXPECT_TRUE(memory.failure().ok()) << memory.failure();
  float* second = memory.Alloc(1024);  // the budget is spent
  ASSERT_NE(second, nullptr);
  second[1023] = 1.0f;  // usable memory, all of it
  const absl::Status failure = memory.failure();
  EXPECT_EQ(failure.code(), absl::StatusCode::kResourceExhausted) << failure;
  EXPECT_THAT(failure.message(), HasSubstr("no host buffer for a step's gradients to push (1024 floats, 4096 bytes)"));
  EXPECT_THAT(failure.message(), HasSubstr("cudaHostAlloc of 4096 bytes failed"));
  memory.Alloc(8);  // the first failure is the one kept
  EXPECT_THAT(memory.failure().message(), HasSubstr("(1024 floats, 4096 bytes)"));
  EXPECT_EQ(pinned.live, 1);
  memory.Free(second);  // to the heap, not to the pinned allocator
  EXPECT_EQ(pinned.live, 1);
  memory.Free(first);
  EXPECT_EQ(pinned.live, 0);
}

// Through the pool a trainer uses: its buffers come back to where they
// came from, also after the pool is gone.
TEST(PushPoolMemoryTest, APoolsBuffersGoBackToWhereTheyCameFrom) {
  PinnedMemory pinned{.budget = 2};
  std::shared_ptr<float> kept;
  {
    auto memory =
        std::make_shared<PushPoolMemory>([&](size_t n) { return pinned.Alloc(n); }, [&](float* p) { pinned.Free(p); });
    PushBufferPool pool([memory](size_t n) { return memory->Alloc(n); }, [memory](float* p) { memory->Free(p); });
    std::vector<std::shared_ptr<float>> taken;
    for (int i = 0; i < 3; ++i) taken.push_back(pool.Take(16));
    EXPECT_EQ(memory->failure().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(pinned.live, 2);
    kept = taken[0];  // a push still holds it when the pool goes
  }
  EXPECT_EQ(pinned.live, 1);
  kept.reset();
  EXPECT_EQ(pinned.live, 0);
}

}  // namespace
}  // namespace ps
