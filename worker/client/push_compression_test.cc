// The worker's compression threads (worker/client/push_compression.h): a
// push's frames are the same bytes whatever the number of threads, step
// after step (each slice's error feedback and randomk's draw belong to the
// slice), also while two callers push at once.

#include "worker/client/push_compression.h"

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

struct Fixture {
  ModelSpec model;
  PartitionMap map;
};

// Tensors "a" (topk) and "b" (randomk), cut into 64 KiB slices over 2 servers.
Fixture TwoTensors() {
  Fixture f;
  f.model.tensors = {{"a", {200000}, Initializer::Zeros()}, {"b", {100000}, Initializer::Zeros()}};
  f.model.tensors[0].compression = *CompressionSpec::Parse("topk:0.01");
  f.model.tensors[1].compression = *CompressionSpec::Parse("randomk:0.05");
  f.model.compress_min_bytes = 0;
  f.model.placement.slice_bytes = 64 << 10;
  f.map = *PartitionMap::Build(f.model.tensors, 2, f.model.placement);
  return f;
}

// The jobs of tensor `t`'s slices over `grad`.
std::vector<PushCompression::Job> JobsOf(const PartitionMap& map, int t, const std::vector<float>& grad) {
  std::vector<PushCompression::Job> jobs;
  for (uint32_t key : map.SlicesOfTensor(t)) {
    const Slice& s = map.slices()[key];
    jobs.push_back({key, absl::MakeConstSpan(grad).subspan(s.offset, s.length)});
  }
  return jobs;
}

std::vector<std::string> Bytes(const std::vector<zmq::message_t>& frames) {
  std::vector<std::string> out;
  for (const zmq::message_t& f : frames) out.emplace_back(static_cast<const char*>(f.data()), f.size());
  return out;
}

std::vector<float> Gradient(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(n);
  for (float& v : g) v = normal(rng);
  return g;
}

TEST(PushCompressionTest, FramesAreTheSameBytesAtOneAndThreeThreads) {
  const Fixture f = TwoTensors();
  ASSERT_GT(f.map.SlicesOfTensor(0).size(), 10u);
  PushCompression alone(f.model, f.map, 1), pooled(f.model, f.map, 3);
  for (int64_t step = 0; step < 4; ++step) {
    const std::vector<float> a = Gradient(200000, 2 * step), b = Gradient(100000, 2 * step + 1);
    std::vector<PushCompression::Job> jobs = JobsOf(f.map, 0, a), of_b = JobsOf(f.map, 1, b);
    jobs.insert(jobs.end(), of_b.begin(), of_b.end());
    const std::vector<std::string> want = Bytes(alone.EncodeAll(jobs, 1, step));
    EXPECT_EQ(Bytes(pooled.EncodeAll(jobs, 1, step)), want) << "step " << step;
    EXPECT_EQ(want.size(), jobs.size());
  }
}

// Two callers at once: one's push runs over the threads, the other's on its
// own thread meanwhile (ThreadPool::ParallelForOrAlone); both frames exact.
TEST(PushCompressionTest, TwoCallersAtOnceGetTheSameFramesAsOneAtATime) {
  const Fixture f = TwoTensors();
  PushCompression alone(f.model, f.map, 1), pooled(f.model, f.map, 3);
  for (int64_t step = 0; step < 4; ++step) {
    const std::vector<float> a = Gradient(200000, 10 + step), b = Gradient(100000, 20 + step);
    const std::vector<PushCompression::Job> jobs_a = JobsOf(f.map, 0, a), jobs_b = JobsOf(f.map, 1, b);
    const std::vector<std::string> want_a = Bytes(alone.EncodeAll(jobs_a, 0, step));
    const std::vector<std::string> want_b = Bytes(alone.EncodeAll(jobs_b, 0, step));
    std::vector<std::string> got_a, got_b;
    std::thread other([&] { got_b = Bytes(pooled.EncodeAll(jobs_b, 0, step)); });
    got_a = Bytes(pooled.EncodeAll(jobs_a, 0, step));
    other.join();
    EXPECT_EQ(got_a, want_a) << "step " << step;
    EXPECT_EQ(got_b, want_b) << "step " << step;
  }
}

}  // namespace
}  // namespace ps
