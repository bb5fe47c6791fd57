#ifndef PS_TESTS_FUZZ_FUZZ_MODEL_H_
#define PS_TESTS_FUZZ_FUZZ_MODEL_H_

// The small model push_fuzzer's slice store holds, shared with the seed
// generator so that seeds push payloads of the right lengths. Header-only.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_spec.h"
#include "common/placement/partition_map.h"

namespace ps::fuzz {

inline constexpr int kFuzzWorkers = 2;
inline constexpr int kFuzzTableDim = 2;
inline constexpr uint32_t kFuzzTableKey = 4;

struct FuzzModel {
  ModelSpec spec;
  std::vector<Slice> slices;
};

// "a" [3] whole and "b" [40] cut into three slices (keys 0-3), and table
// "t" of dim 2 whose rows are admitted on their second pull (key 4, the
// one server's shard). `selector` (the first byte of a framed input) picks
// the consistency mode from bits 1-2 and the optimizer from bits 3-5.
inline absl::StatusOr<FuzzModel> MakeFuzzModel(uint8_t selector) {
  FuzzModel m;
  m.spec.tensors = {{"a", {3}, Initializer::Constant(1.0f)}, {"b", {40}, Initializer::Zeros()}};
  m.spec.placement.slice_bytes = 64;
  m.spec.consistency.mode = static_cast<ConsistencyMode>((selector >> 1) % 3);
  m.spec.consistency.staleness = 1;
  m.spec.optimizer.kind = static_cast<OptimizerKind>((selector >> 3) % 5);
  m.spec.optimizer.learning_rate = 0.5f;
  m.spec.tables = {TableSpec{"t", kFuzzTableDim, Initializer::Uniform(-1, 1, 3), std::nullopt, 2}};
  absl::StatusOr<PartitionMap> map = PartitionMap::Build(m.spec.tensors, 1, m.spec.placement, 1);
  if (!map.ok()) return map.status();
  m.slices = map->slices();
  return m;
}

}  // namespace ps::fuzz

#endif  // PS_TESTS_FUZZ_FUZZ_MODEL_H_
