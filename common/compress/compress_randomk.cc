// randomk:R: ceil(R n) distinct indices drawn uniformly (Floyd's algorithm,
// seeded by the caller), sent ascending with their values as they are.
#include <algorithm>
#include <random>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/compress/compressors_internal.h"

namespace ps::compress_internal {

void RandomKCompressor::Encode(absl::Span<const float> values, uint64_t seed, std::string* out) const {
  const uint64_t n = values.size(), k = KeptOf(ratio_, n);
  std::mt19937_64 rng(seed);
  absl::flat_hash_set<uint64_t> drawn;
  drawn.reserve(k);
  for (uint64_t j = n - k; j < n; ++j) {
    const uint64_t t = std::uniform_int_distribution<uint64_t>(0, j)(rng);
    drawn.insert(drawn.contains(t) ? j : t);
  }
  std::vector<uint64_t> indices(drawn.begin(), drawn.end());
  std::sort(indices.begin(), indices.end());
  std::vector<float> kept(k);
  for (uint64_t i = 0; i < k; ++i) kept[i] = values[indices[i]];
  AppendSparse(CompressionKind::kRandomK, n, indices, kept, out);
}

}  // namespace ps::compress_internal
