#include "server/checkpointer.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/base/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/slice_store_testing.h"

namespace ps {
namespace {

// A store of one slice, a sequencer and a fake clock; each test asks
// MaybeWrite and reads back the number of the checkpoint on disk.
class CheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("checkpointer_test_", ::getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
    const ModelSpec model = testing::OneSlice(ConsistencyMode::kAsync);
    ASSERT_TRUE(store_.Create(model, testing::SlicesOf(model), 1).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  Checkpointer Make(uint64_t every_pushes, absl::Duration every) {
    return Checkpointer({.dir = dir_, .every_pushes = every_pushes, .every = every}, &store_, &seqs_, &metrics_,
                        &clock_);
  }
  // What the server's loop does now and then; the test then waits for the
  // file a write started.
  static void Tick(Checkpointer& c) {
    c.MaybeWrite(0, 7);
    c.Flush();
  }
  // The number of the checkpoint on disk; 0 for none.
  uint64_t OnDisk() {
    ThreadPool pool(1);
    SliceStore fresh(&pool, false);
    absl::StatusOr<CheckpointInfo> info = LoadCheckpoint(dir_, 0, &fresh);
    return info.ok() ? info->number : 0;
  }

  ThreadPool pool_{1};
  SliceStore store_{&pool_, false};
  PushSequencer seqs_{true};
  ServerMetrics metrics_;
  FakeClock clock_;
  std::string dir_;
};

TEST_F(CheckpointerTest, NothingNewIsNothingWritten) {
  Checkpointer c = Make(1, absl::Seconds(1));
  Tick(c);
  EXPECT_EQ(OnDisk(), 0u);
}

TEST_F(CheckpointerTest, WritesByPushCount) {
  Checkpointer c = Make(3, absl::ZeroDuration());
  for (int i = 0; i < 2; ++i) c.CountPush();
  Tick(c);
  EXPECT_EQ(OnDisk(), 0u) << "2 pushes of 3";
  c.CountPush();
  Tick(c);
  EXPECT_EQ(OnDisk(), 1u);
  EXPECT_FALSE(c.has_unsaved());
}

TEST_F(CheckpointerTest, WritesByIntervalTheFirstAtOnce) {
  Checkpointer c = Make(0, absl::Seconds(30));
  c.CountPush();
  Tick(c);
  EXPECT_EQ(OnDisk(), 1u) << "none written yet counts as long ago";
  c.CountPush();
  clock_.Advance(absl::Seconds(29));
  Tick(c);
  EXPECT_EQ(OnDisk(), 1u);
  clock_.Advance(absl::Seconds(1));
  Tick(c);
  EXPECT_EQ(OnDisk(), 2u);
}

TEST_F(CheckpointerTest, AWorkersWishIsWrittenAtOnce) {
  Checkpointer c = Make(1000, absl::Hours(1));
  c.CountPush();
  clock_.Advance(absl::Seconds(1));
  c.Write("first", 0, 7);
  c.CountPush();
  Tick(c);
  EXPECT_EQ(OnDisk(), 1u);
  c.Want();
  Tick(c);
  EXPECT_EQ(OnDisk(), 2u);
}

TEST_F(CheckpointerTest, RestoreCountsOnFromTheNumberOnDisk) {
  {
    Checkpointer c = Make(1, absl::ZeroDuration());
    for (int i = 0; i < 3; ++i) {
      c.CountPush();
      Tick(c);
    }
  }
  ASSERT_EQ(OnDisk(), 3u);
  ThreadPool pool(1);
  SliceStore fresh(&pool, false);
  PushSequencer seqs(true);
  Checkpointer c({.dir = dir_, .every_pushes = 1}, &fresh, &seqs, &metrics_, &clock_);
  absl::StatusOr<CheckpointInfo> info = c.Restore(dir_, 0, &fresh);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->incarnation, 7u);
  c.CountPush();
  Tick(c);
  EXPECT_EQ(OnDisk(), 4u);
  SliceStore empty(&pool, false);
  EXPECT_EQ(c.Restore(dir_, 5, &empty).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointerTest, AWorkersWishWaitsLongEnoughSinceTheLastWrite) {
  // Each slice the encoding reads takes the loop 10 ms of the fake clock.
  Checkpointer c({.dir = dir_, .every = absl::Hours(1), .between = [&] { clock_.Advance(absl::Milliseconds(10)); }},
                 &store_, &seqs_, &metrics_, &clock_);
  c.CountPush();
  c.Write("first", 0, 7);
  ASSERT_EQ(OnDisk(), 1u);
  c.CountPush();
  c.Want();
  clock_.Advance(Checkpointer::kWantedGap * absl::Milliseconds(10) - absl::Milliseconds(1));
  Tick(c);
  EXPECT_EQ(OnDisk(), 1u) << "the last one took 10 ms";
  clock_.Advance(absl::Milliseconds(1));
  Tick(c);
  EXPECT_EQ(OnDisk(), 2u);
}

TEST_F(CheckpointerTest, PushesAppliedWhileTheFileIsWrittenAreNotDurable) {
  Checkpointer c = Make(1, absl::ZeroDuration());
  ASSERT_FALSE(seqs_.SetNode(0, 11));
  ASSERT_TRUE(seqs_.Admit(0, 1));
  c.CountPush();
  c.MaybeWrite(0, 7);              // holds push 1
  ASSERT_TRUE(seqs_.Admit(0, 2));  // served meanwhile
  c.CountPush();
  c.Flush();
  EXPECT_EQ(OnDisk(), 1u);
  EXPECT_EQ(seqs_.DurableSeq(0), 1u);
  EXPECT_TRUE(c.has_unsaved());
  Tick(c);
  EXPECT_EQ(OnDisk(), 2u);
  EXPECT_EQ(seqs_.DurableSeq(0), 2u);
}

}  // namespace
}  // namespace ps
