#ifndef PS_WORKER_MODELS_LOCAL_EMBEDDING_TABLE_H_
#define PS_WORKER_MODELS_LOCAL_EMBEDDING_TABLE_H_

// An embedding table in one process's memory: rows of `dim` floats keyed by
// any 64-bit id, created on first update, trained with Adagrad row by row.
// It stands in for a parameter server's embedding table when a model is
// trained locally (worker/train/local_text_trainer.h), and fixes what such a table
// is expected to compute:
//   - a row never updated reads as its initial value, uniform in
//     [-init_scale, init_scale) and a function of (seed, id, column) only;
//   - an update applies, element by element, h += g^2, w -= lr g / (sqrt(h) + eps),
//     the Adagrad of server/optim/adagrad.cc, to the rows it names and no others.
// Not thread-safe.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace ps {

struct LocalEmbeddingTableOptions {
  int dim = 32;             // >= 1
  float init_scale = 0.1f;  // >= 0; 0 starts every row at zero
  uint64_t seed = 1;
  float lr = 0.1f;  // Adagrad learning rate, > 0
  float eps = 1e-8f;
};

class LocalEmbeddingTable {
 public:
  // Requires options.dim >= 1 (CHECKed: the caller validates its options).
  explicit LocalEmbeddingTable(const LocalEmbeddingTableOptions& options);
  LocalEmbeddingTable(const LocalEmbeddingTable&) = delete;
  LocalEmbeddingTable& operator=(const LocalEmbeddingTable&) = delete;

  int dim() const { return options_.dim; }
  // Rows updated at least once.
  size_t size() const { return slot_.size(); }

  // out[i * dim .. (i + 1) * dim) = the row of ids[i]. Requires out.size()
  // == ids.size() * dim (CHECKed).
  void Gather(absl::Span<const uint64_t> ids, absl::Span<float> out) const;

  // One Adagrad step for each row: grads[i * dim ..) is the gradient of the
  // row of ids[i]. Ids must be distinct (as TokenBatch::ids() are); requires
  // grads.size() == ids.size() * dim (CHECKed).
  void ApplyAdagrad(absl::Span<const uint64_t> ids, absl::Span<const float> grads);

  // The initial value of the row of `id`, into out (dim values).
  void InitialRow(uint64_t id, absl::Span<float> out) const;

 private:
  // The index of id's row in values_ / accum_, created on first use.
  size_t RowOf(uint64_t id);

  LocalEmbeddingTableOptions options_;
  absl::flat_hash_map<uint64_t, size_t> slot_;
  std::vector<float> values_;  // [rows x dim]
  std::vector<float> accum_;   // Adagrad's sum of squared gradients, [rows x dim]
};

// Adagrad on a dense tensor, as above: h += g^2, w -= lr g / (sqrt(h) + eps).
// Requires equal sizes (CHECKed).
void AdagradStep(absl::Span<float> w, absl::Span<float> h, absl::Span<const float> g, float lr, float eps);

}  // namespace ps

#endif  // PS_WORKER_MODELS_LOCAL_EMBEDDING_TABLE_H_
