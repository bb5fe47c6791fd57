#ifndef PS_WORKER_TRAIN_BINARY_METRICS_H_
#define PS_WORKER_TRAIN_BINARY_METRICS_H_

// Metrics of a binary classifier: accuracy and the exact area under the ROC
// curve. A label counts as positive when it is >= 0.5. Free functions with no
// state: thread-safe.

#include <optional>

#include "absl/types/span.h"

namespace ps {

// The fraction of examples with (logit > 0) == positive, i.e. predicted
// probability above 1/2. nullopt for no examples. Requires logits and labels
// of the same size (CHECKed).
std::optional<double> Accuracy(absl::Span<const float> logits, absl::Span<const float> labels);

// The ROC AUC of `scores` (any monotone score: logits or probabilities): the
// probability that a random positive scores above a random negative, a tie
// counting one half (the Mann-Whitney U statistic, by sorting: O(n log n)).
// nullopt when there are no positives, no negatives, or a NaN score. Requires
// scores and labels of the same size (CHECKed).
std::optional<double> RocAuc(absl::Span<const float> scores, absl::Span<const float> labels);

}  // namespace ps

#endif  // PS_WORKER_TRAIN_BINARY_METRICS_H_
