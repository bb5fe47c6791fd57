#include "worker/train/binary_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <vector>

#include "glog/logging.h"

namespace ps {

std::optional<double> Accuracy(absl::Span<const float> logits, absl::Span<const float> labels) {
  CHECK_EQ(logits.size(), labels.size());
  if (logits.empty()) return std::nullopt;
  size_t right = 0;
  for (size_t i = 0; i < logits.size(); ++i) right += (logits[i] > 0) == (labels[i] >= 0.5f);
  return static_cast<double>(right) / static_cast<double>(logits.size());
}

std::optional<double> RocAuc(absl::Span<const float> scores, absl::Span<const float> labels) {
  CHECK_EQ(scores.size(), labels.size());
  if (std::any_of(scores.begin(), scores.end(), [](float s) { return std::isnan(s); })) {
    return std::nullopt;
  }
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Sum of the (1-based) ranks of the positives, a tied group sharing the
  // mean of its ranks.
  double positive_rank_sum = 0;
  size_t positives = 0;
  for (size_t start = 0; start < order.size();) {
    size_t end = start + 1;
    while (end < order.size() && scores[order[end]] == scores[order[start]]) ++end;
    const double mean_rank = (static_cast<double>(start + 1) + static_cast<double>(end)) / 2;
    for (size_t k = start; k < end; ++k) {
      if (labels[order[k]] >= 0.5f) {
        positive_rank_sum += mean_rank;
        ++positives;
      }
    }
    start = end;
  }
  const size_t negatives = scores.size() - positives;
  if (positives == 0 || negatives == 0) return std::nullopt;
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * static_cast<double>(negatives));
}

}  // namespace ps
