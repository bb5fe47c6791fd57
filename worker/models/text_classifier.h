#ifndef PS_WORKER_MODELS_TEXT_CLASSIFIER_H_
#define PS_WORKER_MODELS_TEXT_CLASSIFIER_H_

// A fastText-style binary text classifier: the maths only (CPU, plain loops
// the compiler vectorises), no server, no optimiser.
//
// A message is a bag of token ids (worker/data/text_tokens.h). Each id has an
// embedding row of `dim` floats, which a caller pulls from an embedding table
// keyed by id. The model mean-pools a message's rows (one term per
// occurrence; a message without tokens pools to zeros), then
//   hidden == 0:  logit = out_w . pooled + out_b
//   hidden  > 0:  h = ReLU(hidden_w pooled + hidden_b),  logit = out_w . h + out_b
// and the loss is the logistic loss of the logit against a label in [0, 1],
// averaged over the batch. Gradients are those of that mean: for the dense
// tensors, and one row per unique id of the batch, summed over every
// occurrence in every message.
//
// Thread-safety: a TextClassifier has no mutable state; its const methods
// may be called from several threads at once (with different outputs).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ps {

struct TextClassifierConfig {
  int dim = 32;    // embedding width, in [1, 4096]
  int hidden = 0;  // 0 for a linear head; otherwise the ReLU layer's width, in [1, 4096]
  // kInvalidArgument naming the field when out of range.
  absl::Status Validate() const;
};

// A batch of messages in CSR form over the batch's unique ids: what a caller
// pulls rows for (ids()) and what the model reads (offsets(), index()).
// Not thread-safe.
class TokenBatch {
 public:
  TokenBatch() = default;

  // Appends a message given as its token ids.
  void Add(absl::Span<const uint64_t> tokens);
  // Empties the batch, keeping its memory.
  void Clear();

  size_t messages() const { return offsets_.size() - 1; }
  // U: each id of the batch once, in order of first appearance.
  const std::vector<uint64_t>& ids() const { return ids_; }
  // Message m's tokens are index()[offsets()[m] .. offsets()[m + 1]), each
  // an index into ids(). messages() + 1 entries, starting at 0.
  const std::vector<uint32_t>& offsets() const { return offsets_; }
  const std::vector<uint32_t>& index() const { return index_; }

 private:
  std::vector<uint64_t> ids_;
  std::vector<uint32_t> offsets_ = {0};
  std::vector<uint32_t> index_;
  absl::flat_hash_map<uint64_t, uint32_t> slot_;  // id -> its index in ids_
};

// The dense parameters, or their gradients. Row-major.
template <typename T>
struct DenseParams {
  std::vector<T> hidden_w;  // [hidden x dim]; empty when hidden == 0
  std::vector<T> hidden_b;  // [hidden]
  std::vector<T> out_w;     // [hidden, or dim when hidden == 0]
  std::vector<T> out_b;     // [1]
};

template <typename T>
struct TextClassifierGrads {
  std::vector<T> rows;  // [ids().size() x dim], row i for batch.ids()[i]
  DenseParams<T> dense;
};

// T is float for training, double for gradient checks. Copyable.
template <typename T>
class BasicTextClassifier {
 public:
  // kInvalidArgument when config.Validate() fails.
  static absl::StatusOr<BasicTextClassifier> Create(const TextClassifierConfig& config);

  const TextClassifierConfig& config() const { return config_; }

  // Dense parameters for a fresh model, a function of `seed` only: hidden_w
  // He-uniform (bound sqrt(6 / dim)), out_w uniform with bound
  // sqrt(3 / fan_in), biases zero.
  DenseParams<T> InitDense(uint64_t seed) const;
  // Dense parameters of the right shapes, all zero.
  DenseParams<T> ZeroDense() const;

  // The logit of each message. `rows` holds batch.ids().size() rows of dim
  // values. kInvalidArgument when rows, dense or logits have the wrong size.
  absl::Status Logits(const TokenBatch& batch, absl::Span<const T> rows, const DenseParams<T>& dense,
                      absl::Span<T> logits) const;

  // The mean logistic loss over the batch's messages (0 for an empty batch)
  // and its gradients, which overwrite *grads (resized as needed). With
  // `logits` non-null, also writes each message's logit there (resized).
  // `labels` has one value in [0, 1] per message (1 = positive).
  // kInvalidArgument when a size is wrong or a label is outside [0, 1].
  absl::StatusOr<double> LossAndGradients(const TokenBatch& batch, absl::Span<const T> rows,
                                          const DenseParams<T>& dense, absl::Span<const float> labels,
                                          TextClassifierGrads<T>* grads, std::vector<T>* logits = nullptr) const;

 private:
  explicit BasicTextClassifier(const TextClassifierConfig& config) : config_(config) {}

  absl::Status CheckShapes(const TokenBatch& batch, absl::Span<const T> rows, const DenseParams<T>& dense) const;
  size_t head_width() const;

  TextClassifierConfig config_;
};

using TextClassifier = BasicTextClassifier<float>;

extern template class BasicTextClassifier<float>;
extern template class BasicTextClassifier<double>;

}  // namespace ps

#endif  // PS_WORKER_MODELS_TEXT_CLASSIFIER_H_
