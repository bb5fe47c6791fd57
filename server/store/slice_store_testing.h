#ifndef PS_SERVER_STORE_SLICE_STORE_TESTING_H_
#define PS_SERVER_STORE_SLICE_STORE_TESTING_H_

// Tests only: models, slices and pushes for the tests of SliceStore
// (server/store/slice_store_test.cc) and of its checkpoint codec
// (server/store/checkpoint_codec_test.cc). Thread-safe (no state).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/initializer.h"
#include "common/model/model_spec.h"
#include "common/placement/partition_map.h"
#include "common/wire/messages.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/slice_store.h"

namespace ps::testing {

inline OptimizerConfig Sgd(float lr = 1.0f) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kSgd;
  c.learning_rate = lr;
  return c;
}

inline ModelSpec Model(std::vector<TensorSpec> tensors, ConsistencyMode mode, int32_t staleness = 0,
                       OptimizerConfig opt = Sgd(), uint64_t slice_bytes = 1 << 20) {
  ModelSpec m;
  m.tensors = std::move(tensors);
  m.optimizer = opt;
  m.consistency = Consistency{mode, staleness};
  m.placement.slice_bytes = slice_bytes;
  return m;
}

// "w": 6 elements, all 10, one slice (key 0).
inline ModelSpec OneSlice(ConsistencyMode mode, int32_t staleness = 0, OptimizerConfig opt = Sgd()) {
  return Model({TensorSpec{"w", {6}, Initializer::Constant(10.0f)}}, mode, staleness, opt);
}

// The slices of `model` that `server` of `num_servers` holds.
inline std::vector<Slice> SlicesOf(const ModelSpec& model, int num_servers = 1, int server = 0) {
  absl::StatusOr<PartitionMap> map =
      PartitionMap::Build(model.tensors, num_servers, model.placement, static_cast<int>(model.tables.size()));
  EXPECT_TRUE(map.ok()) << map.status();
  if (!map.ok()) return {};
  std::vector<Slice> out;
  for (const Slice& s : map->slices()) {
    if (s.server == server) out.push_back(s);
  }
  return out;
}

inline std::vector<float> Values(const SliceStore& store, uint32_t key) {
  absl::Span<const float> v = store.Values(key);
  return std::vector<float>(v.begin(), v.end());
}

// The values Create gives `slice`.
inline std::vector<float> Initial(const ModelSpec& model, const Slice& slice) {
  std::vector<float> v(slice.length);
  FillInitialValues(model.tensors[slice.tensor], slice.offset, absl::MakeSpan(v));
  return v;
}

// One slice of a push: its key, gradient and the version it was computed from.
struct Grad {
  uint32_t key;
  std::vector<float> values;
  uint64_t version = 0;
};

inline absl::Status Push(SliceStore& store, int worker, int64_t clock, const std::vector<Grad>& grads) {
  PushRequestMsg push{clock, {}};
  std::vector<absl::Span<const float>> payloads;
  for (const Grad& g : grads) {
    push.slices.push_back(SliceData{g.key, g.values.size(), g.version});
    payloads.push_back(g.values);
  }
  return store.Push(worker, push, payloads);
}

inline void ExpectCode(const absl::Status& s, absl::StatusCode code, const std::string& substring) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(substring));
}

inline std::vector<float> Filled(size_t n, float v) { return std::vector<float>(n, v); }

}  // namespace ps::testing

#endif  // PS_SERVER_STORE_SLICE_STORE_TESTING_H_
