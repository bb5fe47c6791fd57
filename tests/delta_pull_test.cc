// Delta pulls end to end without sockets: the server's state
// (server/store/delta_pull.h) answering pulls, the worker's (worker/client/
// delta_pulls.h) taking the replies; the worker holds what the server says
// it holds, bit for bit, and what is left out comes in later frames.
#include <cmath>
#include <random>

#include "common/wire/wire_frames.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/delta_pull.h"
#include "worker/client/delta_pulls.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kN = 5000;

class DeltaPullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_.tensors = {{"w", {kN}, Initializer::Zeros()}};
    model_.compression = *CompressionSpec::Parse("topk:0.05,pull=delta");
    model_.compress_min_bytes = 0;
    map_ = *PartitionMap::Build(model_.tensors, 1, model_.placement, 1);
    worker_ = std::make_unique<DeltaPulls>(model_, map_);
  }

  // One pull by the worker of the values at `version`: what the server
  // sends (frame or whole), delivered; returns the reply's metadata.
  SliceData Pull(uint64_t version, DeltaPulls& worker, std::vector<float>& out) {
    const DeltaReply reply = PullDelta(server_, version, values_, worker.Ask(0), model_.compression);
    SliceData meta{0, kN, version, 0, reply.base != 0, reply.base};
    const std::string bytes = reply.base != 0 ? *reply.frame
                                              : std::string(reinterpret_cast<const char*>(reply.whole.data()),
                                                            reply.whole.size() * sizeof(float));
    out.assign(kN, -1.0f);
    const absl::Status s = worker.Deliver(meta, bytes, absl::MakeSpan(out));
    EXPECT_TRUE(s.ok()) << s;
    return meta;
  }

  ModelSpec model_;
  PartitionMap map_;
  std::unique_ptr<DeltaPulls> worker_;
  DeltaPull server_;
  std::vector<float> values_ = std::vector<float>(kN, 0.0f);
};

TEST_F(DeltaPullTest, TheWorkerHoldsTheServersRefAndFramesCarryTheChangeAfterTheFirstPull) {
  ASSERT_TRUE(worker_->Has(0));
  std::mt19937 rng(7);
  std::normal_distribution<float> step(0.0f, 0.01f);
  std::vector<float> out;
  EXPECT_EQ(Pull(0, *worker_, out).base, 0u);  // nothing held: whole
  EXPECT_EQ(out, values_);
  for (uint64_t v = 1; v <= 30; ++v) {
    for (float& x : values_) x += step(rng);
    const SliceData meta = Pull(v, *worker_, out);
    // Version 1 is whole (the worker held version 0, which says "nothing");
    // from then on each reply is the frame from the version before.
    EXPECT_EQ(meta.base, v == 1 ? 0u : v - 1) << v;
    EXPECT_EQ(meta.compressed, v > 1);
    ASSERT_EQ(out, server_.ref) << "version " << v;  // bit for bit
    if (v > 1) {
      EXPECT_LT(server_.frame.size(), kN * sizeof(float) / 5);  // 5% of the values, with indices
    }
  }
  // The values stop moving: the frames carry what was left out until the
  // worker holds them (top 5% of what is left each time: 20 frames).
  for (uint64_t v = 31; v <= 52; ++v) Pull(v, *worker_, out);
  for (int64_t i = 0; i < kN; ++i) ASSERT_NEAR(out[i], values_[i], 1e-6f) << i;
}

TEST_F(DeltaPullTest, FramesKeepMoreValuesDuringTheWarmUpByTheSlicesVersion) {
  model_.compression = *CompressionSpec::Parse("topk:0.05,pull=delta,warmup=8");
  worker_ = std::make_unique<DeltaPulls>(model_, map_);
  std::mt19937 rng(3);
  std::normal_distribution<float> step(0.0f, 0.01f);
  std::vector<float> out;
  for (uint64_t v = 0; v <= 10; ++v) {
    for (float& x : values_) x += step(rng);
    const SliceData meta = Pull(v, *worker_, out);
    ASSERT_EQ(out, server_.ref) << "version " << v;
    if (v < 2) continue;
    // Versions 0 to 7 are the warm-up's (two a stage: 0.05^(1/5) kept, then ^(2/5), ...); 8 on keep 5%.
    ASSERT_EQ(meta.base, v - 1);
    uint64_t k = 0;
    std::memcpy(&k, server_.frame.data() + kCompressionHeaderBytes, sizeof(k));
    EXPECT_EQ(k, static_cast<uint64_t>(std::ceil(model_.compression.AtStep(static_cast<int64_t>(v)).ratio * kN))) << v;
    EXPECT_EQ(k, v < 8 ? static_cast<uint64_t>(std::ceil(std::pow(0.05, (v / 2 + 1) / 5.0) * kN)) : 250u) << v;
  }
}

TEST_F(DeltaPullTest, AWorkerThatMissedAVersionGetsItWholeAndTwoWorkersShareOneFrame) {
  DeltaPulls other(model_, map_);
  std::vector<float> out, other_out;
  Pull(1, *worker_, out);
  Pull(1, other, other_out);
  values_.assign(kN, 1.0f);
  EXPECT_EQ(Pull(2, *worker_, out).base, 1u);     // the frame from 1
  EXPECT_EQ(Pull(2, other, other_out).base, 1u);  // the same frame
  EXPECT_EQ(out, other_out);
  values_.assign(kN, 2.0f);
  EXPECT_EQ(Pull(3, *worker_, out).base, 2u);
  EXPECT_EQ(Pull(3, other, other_out).base, 2u);
  EXPECT_EQ(out, other_out);
  values_.assign(kN, 3.0f);
  Pull(4, *worker_, out);
  values_.assign(kN, 4.0f);
  EXPECT_EQ(Pull(5, *worker_, out).base, 4u);
  EXPECT_EQ(Pull(5, other, other_out).base, 0u);  // held 3; the frame is from 4: whole
  EXPECT_EQ(out, other_out);
  EXPECT_EQ(out, server_.ref);
}

TEST_F(DeltaPullTest, AFrameFromAVersionTheWorkerDoesNotHoldIsRefusedAndChangesNothing) {
  std::vector<float> out;
  Pull(1, *worker_, out);
  values_.assign(kN, 1.0f);
  Pull(2, *worker_, out);
  const std::vector<float> held = out;
  std::string frame;
  Compressor::Create(model_.compression)->Encode(values_, 0, &frame);
  out.assign(kN, -1.0f);
  const absl::Status s = worker_->Deliver(SliceData{0, kN, 9, 0, true, 7}, frame, absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("a frame from version 7 to 9, and this worker holds version 2"));
  // A frame of the version held already (a second pull in flight at once) gives the values held.
  EXPECT_TRUE(worker_->Deliver(SliceData{0, kN, 2, 0, true, 1}, frame, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, held);
  // A frame that does not decode.
  values_.assign(kN, 2.0f);
  EXPECT_EQ(worker_->Deliver(SliceData{0, kN, 3, 0, true, 2}, "garbage", absl::MakeSpan(out)).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(Pull(3, *worker_, out).base, 2u);  // and the next real one still applies
  EXPECT_EQ(out, server_.ref);
}

}  // namespace
}  // namespace ps
