#ifndef PS_WORKER_TRAIN_TEXT_EXAMPLES_H_
#define PS_WORKER_TRAIN_TEXT_EXAMPLES_H_

// Labeled messages as the text classifier reads them (hashed token ids and a
// label), and what every trainer of it shares: tokenizing the corpus, the
// deterministic shuffle of an epoch, and the evaluation of logits against
// labels. Used by the local reference (worker/train/local_text_trainer.h) and the
// parameter-server worker (worker/train/spam_trainer.h), so that both measure the
// same way. Free functions with no state: thread-safe.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "worker/data/spam_corpus.h"
#include "worker/data/text_tokens.h"

namespace ps {

// One example: its token ids (HashedTokens) and its label in [0, 1].
struct LabeledTokens {
  std::vector<uint64_t> ids;
  float label = 0;
};

// HashedTokens of corpus[i] for each i in `indices`, with its label.
// Requires every index < corpus.size() (CHECKed).
std::vector<LabeledTokens> TokenizeMessages(const std::vector<SpamMessage>& corpus, const std::vector<size_t>& indices,
                                            const TokenOptions& options);

// A permutation of [0, n), a function of (n, seed) only: the same on every
// machine and standard library (std::shuffle's is unspecified).
std::vector<size_t> ShuffledOrder(size_t n, uint64_t seed);

// What an evaluation measures.
struct Evaluation {
  double loss = 0;                 // mean logistic loss
  std::optional<double> accuracy;  // nullopt for no examples
  std::optional<double> auc;       // nullopt without both classes
};

// The logistic loss, accuracy and ROC AUC of logits[i] against
// examples[i].label. Requires equal sizes (CHECKed).
Evaluation EvaluateLogits(absl::Span<const float> logits, const std::vector<LabeledTokens>& examples);

}  // namespace ps

#endif  // PS_WORKER_TRAIN_TEXT_EXAMPLES_H_
