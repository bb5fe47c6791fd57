#ifndef PS_SERVER_STORE_COUNT_MIN_SKETCH_H_
#define PS_SERVER_STORE_COUNT_MIN_SKETCH_H_

// How often each 64-bit id has been seen, in fixed memory: a count-min sketch
// (Cormode and Muthukrishnan, 2005) of kDepth rows of `width` saturating
// 16-bit counters, with conservative update (an increment raises only the
// counters that hold the current minimum), which keeps over-counting from
// collisions low. The estimate never undercounts: an id seen N times reads
// at least min(N, 65535). Used by a table's admission filter. Not
// thread-safe.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/base/hash.h"

namespace ps {

class CountMinSketch {
 public:
  static constexpr int kDepth = 4;

  // `width` counters per row, a power of two >= 64 (rounded up otherwise).
  explicit CountMinSketch(uint32_t width = 1u << 18) {
    width_ = 64;
    while (width_ < width) width_ <<= 1;
    counters_.assign(static_cast<size_t>(kDepth) * width_, 0);
  }

  // Counts one more sighting of `id`; returns the new estimate.
  uint32_t Add(uint64_t id) {
    size_t cell[kDepth];
    uint16_t low = UINT16_MAX;
    for (int d = 0; d < kDepth; ++d) {
      cell[d] = Cell(d, id);
      low = std::min(low, counters_[cell[d]]);
    }
    if (low == UINT16_MAX) return low;
    for (size_t c : cell) {
      if (counters_[c] == low) ++counters_[c];
    }
    return static_cast<uint32_t>(low) + 1;
  }

  // The estimated number of sightings of `id`.
  uint32_t Estimate(uint64_t id) const {
    uint16_t low = UINT16_MAX;
    for (int d = 0; d < kDepth; ++d) low = std::min(low, counters_[Cell(d, id)]);
    return low;
  }

  uint32_t width() const { return width_; }
  uint64_t bytes() const { return counters_.size() * sizeof(uint16_t); }
  // The counters, row by row, for checkpoints; Restore takes them back.
  absl::Span<const uint16_t> counters() const { return counters_; }
  // Requires counters.size() == kDepth * width().
  void Restore(absl::Span<const uint16_t> counters) { counters_.assign(counters.begin(), counters.end()); }

 private:
  size_t Cell(int d, uint64_t id) const {
    // One independent hash per row: the id mixed with a per-row salt.
    const uint64_t h = Mix64(id ^ (0x6a09e667f3bcc909ULL * static_cast<uint64_t>(d + 1)));
    return static_cast<size_t>(d) * width_ + (h & (width_ - 1));
  }

  uint32_t width_ = 64;
  std::vector<uint16_t> counters_;
};

}  // namespace ps

#endif  // PS_SERVER_STORE_COUNT_MIN_SKETCH_H_
