#include "worker/client/push_replay.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;

std::vector<zmq::message_t> Payload(size_t bytes, char fill) {
  std::vector<zmq::message_t> frames;
  const std::string data(bytes, fill);
  frames.emplace_back(data.data(), data.size());
  return frames;
}

uint64_t Number(PushReplay& replay, PushRequestMsg& push, std::vector<zmq::message_t> frames) {
  return replay.Number(push, frames);
}

std::vector<uint64_t> KeptSeqs(const PushReplay& r) {
  std::vector<uint64_t> seqs;
  for (const auto& [seq, copy] : r.kept()) seqs.push_back(seq);
  return seqs;
}

TEST(PushReplayTest, NumbersAndKeepsUntilTheCheckpointHoldsThem) {
  PushReplay replay(1 << 20);
  for (int i = 0; i < 4; ++i) {
    PushRequestMsg push{i, {SliceData{3, 25, 0}}, PullRequestMsg{i + 1, {3}, 0}};
    EXPECT_EQ(Number(replay, push, Payload(100, 'a' + i)), 100u);
    EXPECT_EQ(push.seq, static_cast<uint64_t>(i + 1));
  }
  EXPECT_EQ(replay.bytes(), 400u);
  EXPECT_THAT(KeptSeqs(replay), ElementsAre(1, 2, 3, 4));
  // The copy holds the push without the pull that rode on it, and its payload.
  const KeptPush& third = replay.kept().at(3);
  EXPECT_FALSE(third.push.then_pull.has_value());
  EXPECT_EQ(third.push.clock, 2);
  std::vector<zmq::message_t> frames = third.Frames();
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(std::string(static_cast<const char*>(frames[0].data()), frames[0].size()), std::string(100, 'c'));
  EXPECT_EQ(replay.OnDurable(2), 200u);
  EXPECT_THAT(KeptSeqs(replay), ElementsAre(3, 4));
  EXPECT_EQ(replay.OnDurable(1), 0u);  // an older reply changes nothing
  EXPECT_THAT(KeptSeqs(replay), ElementsAre(3, 4));
  EXPECT_EQ(replay.OnDurable(0), 0u);
}

TEST(PushReplayTest, AsksForACheckpointOncePastAQuarterAgainAfterEachCheckpoint) {
  PushReplay replay(1000);
  std::vector<bool> asked;
  const auto push_one = [&](int64_t clock) {
    PushRequestMsg push{clock, {}, std::nullopt};
    Number(replay, push, Payload(100, 'x'));
    EXPECT_FALSE(replay.kept().at(push.seq).push.want_checkpoint);  // never re-sent asking
    asked.push_back(push.want_checkpoint);
  };
  for (int i = 0; i < 5; ++i) push_one(i);
  EXPECT_THAT(asked, ElementsAre(false, false, true, false, false));  // 300 > 250, once
  // A checkpoint answered, but the pushes sent while it was written are
  // still past a quarter: the next push asks again, once.
  replay.OnDurable(2);
  asked.clear();
  for (int i = 5; i < 7; ++i) push_one(i);
  EXPECT_THAT(asked, ElementsAre(true, false));
  replay.OnDurable(7);  // nothing kept
  asked.clear();
  for (int i = 7; i < 10; ++i) push_one(i);
  EXPECT_THAT(asked, ElementsAre(false, false, true));
}

TEST(PushReplayTest, ReplicatedAsksAgainAfterEachCheckpointAndIsFullAtTheBudget) {
  PushReplay replay(1000);
  replay.set_replicated();
  std::vector<bool> asked;
  const auto push_one = [&](int64_t clock) {
    PushRequestMsg push{clock, {SliceData{3, 25, 0}}};
    Number(replay, push, Payload(100, 'x'));
    asked.push_back(push.want_checkpoint);
    return push.seq;
  };
  for (int i = 0; i < 3; ++i) replay.OnAcked(push_one(i));
  EXPECT_THAT(asked, ElementsAre(false, false, true));  // 300 > 250
  EXPECT_EQ(replay.OnDurable(3), 300u);                 // answered and in the checkpoint
  asked.clear();
  for (int i = 3; i < 6; ++i) replay.OnAcked(push_one(i));
  EXPECT_THAT(asked, ElementsAre(false, false, true));  // asked again: checkpoints do not stop at one
  EXPECT_FALSE(replay.full());
  for (int i = 6; i < 13; ++i) push_one(i);
  EXPECT_TRUE(replay.full());  // 1000 bytes kept: new pushes wait for a checkpoint
  replay.OnDurable(13);
  EXPECT_FALSE(replay.full());  // what was answered went; the rest waits for its answers
}

TEST(PushReplayTest, AServerWithoutCheckpointsGetsNumbersButNoCopies) {
  PushReplay replay(1 << 20);
  PushRequestMsg first{0, {}, std::nullopt};
  Number(replay, first, Payload(100, 'x'));
  EXPECT_EQ(replay.OnDurable(kNothingToKeep), 100u);
  EXPECT_FALSE(replay.keeps());
  PushRequestMsg second{1, {}, std::nullopt};
  EXPECT_EQ(Number(replay, second, Payload(100, 'x')), 0u);
  EXPECT_EQ(second.seq, 2u);
  EXPECT_TRUE(replay.kept().empty());
  EXPECT_EQ(replay.OnDurable(kNothingToKeep), 0u);
}

TEST(PushReplayTest, ReplicatedKeepsUntilAnsweredEvenWithoutCheckpoints) {
  PushReplay replay(1 << 20);
  replay.set_replicated();
  for (int i = 0; i < 3; ++i) {
    PushRequestMsg push{i, {SliceData{3, 25, 0}}};
    Number(replay, push, Payload(100, 'a'));
  }
  // No checkpoints: copies still kept (a backup promoted may need them), each
  // until its push is answered, in whatever order answers come.
  EXPECT_EQ(replay.OnDurable(kNothingToKeep), 0u);
  EXPECT_TRUE(replay.keeps());
  EXPECT_EQ(replay.OnAcked(2), 100u);
  EXPECT_THAT(KeptSeqs(replay), ElementsAre(1, 3));
  EXPECT_EQ(replay.OnAcked(2), 0u);  // answered twice: nothing more
  EXPECT_EQ(replay.Clear(), 200u);
  EXPECT_TRUE(replay.kept().empty());
}

TEST(PushReplayTest, ReplicatedWithCheckpointsKeepsUntilAnsweredAndDurable) {
  PushReplay replay(1 << 20);
  replay.set_replicated();
  for (int i = 0; i < 3; ++i) {
    PushRequestMsg push{i, {SliceData{3, 25, 0}}};
    Number(replay, push, Payload(100, 'a'));
  }
  EXPECT_EQ(replay.OnAcked(1), 0u);      // answered, not in a checkpoint yet
  EXPECT_EQ(replay.OnDurable(2), 100u);  // 1 goes; 2 is durable but not answered
  EXPECT_THAT(KeptSeqs(replay), ElementsAre(2, 3));
  EXPECT_EQ(replay.OnAcked(2), 100u);
  EXPECT_EQ(replay.OnAcked(3), 0u);
  EXPECT_THAT(KeptSeqs(replay), ElementsAre(3));
}

TEST(PushReplayTest, ReplicatedWithoutCheckpointsSharesTheCallersFramesUntilAnswered) {
  PushReplay replay(1 << 20);
  replay.set_replicated();
  PushRequestMsg first{0, {SliceData{3, 25, 0}}};
  Number(replay, first, Payload(100, 'a'));  // before the server said: a copy
  replay.OnDurable(kNothingToKeep);
  // The caller's buffer, lent to ZeroMQ: free again once nothing holds it.
  static int freed = 0;
  std::string buffer(100, 'z');
  PushRequestMsg push{1, {SliceData{3, 25, 0}}};
  {
    std::vector<zmq::message_t> frames;
    frames.emplace_back(
        buffer.data(), buffer.size(), [](void*, void*) { ++freed; }, nullptr);
    EXPECT_EQ(replay.Number(push, frames), 100u);
  }
  EXPECT_EQ(freed, 0);  // the kept push holds it: re-sent from it after a failover
  std::vector<zmq::message_t> again = replay.kept().at(push.seq).Frames();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].data(), buffer.data());  // shared, not copied
  again.clear();
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(replay.OnAcked(push.seq), 100u);
  EXPECT_EQ(freed, 1);
  // A push that fails lets go of its frames too.
  PushRequestMsg failed{2, {SliceData{3, 25, 0}}};
  {
    std::vector<zmq::message_t> frames;
    frames.emplace_back(
        buffer.data(), buffer.size(), [](void*, void*) { ++freed; }, nullptr);
    replay.Number(failed, frames);
  }
  EXPECT_EQ(replay.Forget(failed.seq), 100u);
  EXPECT_EQ(freed, 2);
  EXPECT_THAT(KeptSeqs(replay), ElementsAre(first.seq));
}

TEST(PushReplayTest, FramesThatOwnTheirBytesAreSharedNotCopied) {
  PushReplay replay(1 << 20);
  auto* owned = new std::string(64, 'o');
  bool freed = false;
  struct Hint {
    std::string* bytes;
    bool* freed;
  };
  std::vector<zmq::message_t> frames;
  frames.emplace_back(
      owned->data(), owned->size(),
      [](void*, void* hint) {
        auto* h = static_cast<Hint*>(hint);
        *h->freed = true;
        delete h->bytes;
        delete h;
      },
      new Hint{owned, &freed});
  PushRequestMsg push{0, {SliceData{3, 16, 0}}, std::nullopt};
  EXPECT_EQ(replay.Number(push, frames, /*owned=*/true), 64u);
  frames.clear();  // sent: the kept copy alone holds the bytes now
  EXPECT_FALSE(freed);
  // The kept frame is the same memory, not a copy of it.
  std::vector<zmq::message_t> again = replay.kept().at(1).Frames();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].data(), static_cast<const void*>(owned->data()));
  again.clear();
  EXPECT_FALSE(freed);
  EXPECT_EQ(replay.OnDurable(1), 64u);
  EXPECT_TRUE(freed);  // the checkpoint holds it: the memory goes back
}

TEST(PushReplayTest, TheCallersFramesAreCopied) {
  PushReplay replay(1 << 20);
  std::string callers(32, 'c');
  std::vector<zmq::message_t> frames;
  frames.emplace_back(
      callers.data(), callers.size(), [](void*, void*) {}, nullptr);  // borrowed
  PushRequestMsg push{0, {SliceData{3, 8, 0}}, std::nullopt};
  EXPECT_EQ(replay.Number(push, frames, /*owned=*/false), 32u);
  callers.assign(32, 'x');  // the caller writes its buffer again
  std::vector<zmq::message_t> again = replay.kept().at(1).Frames();
  EXPECT_EQ(std::string(static_cast<const char*>(again[0].data()), again[0].size()), std::string(32, 'c'));
}

}  // namespace
}  // namespace ps
