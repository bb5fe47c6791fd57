#ifndef PS_BENCHMARKS_ZIPF_H_
#define PS_BENCHMARKS_ZIPF_H_

// Zipf-distributed ranks for the table benchmarks (table_bench,
// table_disk_bench): the id traffic of recommendation models.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

namespace ps::bench {

// Zipf(s) over ranks 1..n by rejection-inversion (Hormann and Derflinger,
// 1996): constant time per draw for any n, no table.
class ZipfSampler {
 public:
  ZipfSampler(uint64_t n, double s) : n_(static_cast<double>(n)), s_(s) {
    h_x1_ = H(1.5) - 1.0;
    h_n_ = H(n_ + 0.5);
    cut_ = 2.0 - HInverse(H(2.5) - std::pow(2.0, -s_));
  }

  template <typename Rng>
  uint64_t operator()(Rng& rng) {
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    while (true) {
      const double u = h_n_ + unit(rng) * (h_x1_ - h_n_);
      const double x = HInverse(u);
      const double k = std::clamp(std::round(x), 1.0, n_);
      if (k - x <= cut_ || u >= H(k + 0.5) - std::pow(k, -s_)) return static_cast<uint64_t>(k);
    }
  }

 private:
  // The integral of x^-s, shifted so that H(1) = 0, and its inverse.
  double H(double x) const { return (std::pow(x, 1.0 - s_) - 1.0) / (1.0 - s_); }
  double HInverse(double y) const { return std::pow(1.0 + y * (1.0 - s_), 1.0 / (1.0 - s_)); }

  double n_, s_, h_x1_, h_n_, cut_;
};

}  // namespace ps::bench

#endif  // PS_BENCHMARKS_ZIPF_H_
