#include "worker/train/text_examples.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "common/base/hash.h"
#include "glog/logging.h"
#include "worker/train/binary_metrics.h"

namespace ps {
namespace {

// log(1 + e^z) - y z, without overflow for large |z|.
double LogisticLoss(double z, double y) { return std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z))) - y * z; }

}  // namespace

std::vector<LabeledTokens> TokenizeMessages(const std::vector<SpamMessage>& corpus, const std::vector<size_t>& indices,
                                            const TokenOptions& options) {
  std::vector<LabeledTokens> out;
  out.reserve(indices.size());
  for (size_t i : indices) {
    CHECK_LT(i, corpus.size());
    out.push_back({HashedTokens(corpus[i].text, options), static_cast<float>(corpus[i].label)});
  }
  return out;
}

// Fisher-Yates driven by a counter-based generator.
std::vector<size_t> ShuffledOrder(size_t n, uint64_t seed) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  for (size_t i = n; i > 1; --i) {
    const uint64_t r = SplitMix64Finalize(seed + 0x9e3779b97f4a7c15ull * i);
    std::swap(order[i - 1], order[r % i]);  // modulo bias < i / 2^64: irrelevant here
  }
  return order;
}

Evaluation EvaluateLogits(absl::Span<const float> logits, const std::vector<LabeledTokens>& examples) {
  CHECK_EQ(logits.size(), examples.size());
  std::vector<float> labels;
  labels.reserve(examples.size());
  double loss = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    labels.push_back(examples[i].label);
    loss += LogisticLoss(logits[i], examples[i].label);
  }
  Evaluation e;
  e.loss = examples.empty() ? 0 : loss / static_cast<double>(examples.size());
  e.accuracy = Accuracy(logits, labels);
  e.auc = RocAuc(logits, labels);
  return e;
}

}  // namespace ps
