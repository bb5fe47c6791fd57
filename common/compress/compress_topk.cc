// topk:R: the ceil(R n) values of largest magnitude (ties: the lower index
// first), sent with their indices in ascending order.
//
// Selection as deep gradient compression does it (Lin et al., ICLR 2018):
// a threshold from a sample of the magnitudes, one pass keeping the values
// at or above it, then an exact selection among those few. When fewer than
// k pass (the sample misjudged), the exact selection runs over all of them.
// Either way the result is the exact top k: every one of them is at or
// above a threshold that at least k values reach.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "common/compress/compressors_internal.h"

namespace ps::compress_internal {
namespace {

constexpr uint64_t kSample = 4096;

// A magnitude that somewhat more than k of the n values reach, estimated
// from a sample (0: keep everything, for small tensors).
float Threshold(absl::Span<const float> values, uint64_t k) {
  const uint64_t n = values.size(), size = std::min(kSample, n / 4);
  if (n < 1024) return 0.0f;
  std::mt19937_64 rng(n);
  std::vector<float> sample(size);
  for (float& s : sample) s = std::fabs(values[std::uniform_int_distribution<uint64_t>(0, n - 1)(rng)]);
  // Aim at 1.5 k expected above it, so that k pass nearly always.
  const double want = std::min(1.0, 1.5 * static_cast<double>(k) / static_cast<double>(n));
  const auto rank = static_cast<uint64_t>(want * static_cast<double>(size));
  if (rank >= size) return 0.0f;
  std::nth_element(sample.begin(), sample.begin() + static_cast<ptrdiff_t>(rank), sample.end(), std::greater<>());
  return sample[rank];
}

}  // namespace

void TopKCompressor::Encode(absl::Span<const float> values, uint64_t, std::string* out) const {
  const uint64_t n = values.size(), k = KeptOf(ratio_, n);
  const float threshold = Threshold(values, k);
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < n; ++i) {
    if (std::fabs(values[i]) >= threshold) order.push_back(i);
  }
  if (order.size() < k) {  // the sample misjudged: every value is a candidate
    order.resize(n);
    std::iota(order.begin(), order.end(), uint64_t{0});
  }
  const auto larger = [&](uint64_t a, uint64_t b) {
    const float x = std::fabs(values[a]), y = std::fabs(values[b]);
    return x > y || (x == y && a < b);
  };
  std::nth_element(order.begin(), order.begin() + static_cast<ptrdiff_t>(k), order.end(), larger);
  order.resize(k);
  std::sort(order.begin(), order.end());
  std::vector<float> kept(k);
  for (uint64_t i = 0; i < k; ++i) kept[i] = values[order[i]];
  AppendSparse(CompressionKind::kTopK, n, order, kept, out);
}

}  // namespace ps::compress_internal
