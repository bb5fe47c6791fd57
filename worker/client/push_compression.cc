#include "worker/client/push_compression.h"

#include <algorithm>

#include <string>

#include "common/wire/wire_frames.h"
#include "glog/logging.h"

namespace ps {

PushCompression::PushCompression(const ModelSpec& model, const PartitionMap& map, int threads)
    : slices_(map.slices().size()) {
  for (const Slice& slice : map.slices()) {
    if (slice.table) continue;
    const CompressionSpec spec = model.TensorCompression(slice.tensor);
    if (spec.kind == CompressionKind::kNone) continue;
    auto state = std::make_unique<SliceState>();
    state->spec = spec;
    for (int stage = 0; stage <= kWarmupStages; ++stage) {
      state->stages.push_back(Compressor::Create(spec.AtStage(stage)));
    }
    if (DefaultPull(spec.kind) != spec.kind) {  // the lossy ones beyond rounding
      absl::MutexLock lock(&state->mu);
      state->feedback.emplace(slice.length);
    }
    slices_[slice.key] = std::move(state);
  }
  for (size_t t = 0; t < model.tables.size(); ++t) {
    const CompressionSpec spec = model.TableCompression(t);
    rows_.push_back(spec.kind == CompressionKind::kNone ? nullptr : Compressor::Create(spec));
    sorts_ids_.push_back(spec.compresses() && !spec.raw_ids);
  }
  const bool any = std::any_of(slices_.begin(), slices_.end(), [](const auto& s) { return s != nullptr; });
  if (any && threads > 1) pool_ = std::make_unique<ThreadPool>(threads);
}

std::vector<zmq::message_t> PushCompression::EncodeAll(absl::Span<const Job> jobs, int worker, int64_t step) {
  std::vector<zmq::message_t> frames(jobs.size());
  const auto encode = [&](size_t i) { frames[i] = Encode(jobs[i].key, jobs[i].values, worker, step); };
  if (pool_ != nullptr) {
    pool_->ParallelForOrAlone(jobs.size(), encode);  // another caller's push in the pool: this one alone
  } else {
    for (size_t i = 0; i < jobs.size(); ++i) encode(i);
  }
  return frames;
}

zmq::message_t PushCompression::Encode(uint32_t key, absl::Span<const float> values, int worker, int64_t step) {
  SliceState& state = *slices_[key];
  const Compressor& compressor = *state.stages[state.spec.StageAt(step)];
  std::string frame;
  frame.reserve(compressor.FrameBytes(values.size()));
  const uint64_t seed = CompressionSeed(worker, step, key);
  absl::MutexLock lock(&state.mu);
  if (state.feedback.has_value()) {
    // The sizes match: the client checked the buffer against the slice.
    const absl::Status s = state.feedback->Encode(compressor, values, seed, &frame);
    CHECK(s.ok()) << s;
  } else {
    compressor.Encode(values, seed, &frame);
  }
  return OwnedFrame(std::move(frame));
}

}  // namespace ps
