#include "worker/models/local_embedding_table.h"

#include <cmath>
#include <cstring>

#include "glog/logging.h"
#include "worker/data/text_tokens.h"

namespace ps {
namespace {

void AdagradLoop(float* __restrict w, float* __restrict h, const float* __restrict g, size_t n, float lr, float eps) {
  for (size_t i = 0; i < n; ++i) {
    const float hi = h[i] + g[i] * g[i];
    h[i] = hi;
    w[i] -= lr * g[i] / (std::sqrt(hi) + eps);
  }
}

}  // namespace

LocalEmbeddingTable::LocalEmbeddingTable(const LocalEmbeddingTableOptions& options) : options_(options) {
  CHECK_GE(options_.dim, 1);
}

void LocalEmbeddingTable::InitialRow(uint64_t id, absl::Span<float> out) const {
  DCHECK_EQ(out.size(), static_cast<size_t>(options_.dim));
  const uint64_t row_seed = SplitMix64Finalize(id ^ SplitMix64Finalize(options_.seed));
  for (size_t j = 0; j < out.size(); ++j) {
    const uint64_t bits = SplitMix64Finalize(row_seed + 0x9e3779b97f4a7c15ull * (j + 1));
    const float unit = static_cast<float>(bits >> 40) * 0x1.0p-24f;  // [0, 1)
    out[j] = (2 * unit - 1) * options_.init_scale;
  }
}

void LocalEmbeddingTable::Gather(absl::Span<const uint64_t> ids, absl::Span<float> out) const {
  const size_t dim = options_.dim;
  CHECK_EQ(out.size(), ids.size() * dim);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto it = slot_.find(ids[i]);
    if (it == slot_.end()) {
      InitialRow(ids[i], out.subspan(i * dim, dim));
    } else {
      std::memcpy(out.data() + i * dim, values_.data() + it->second * dim, dim * sizeof(float));
    }
  }
}

size_t LocalEmbeddingTable::RowOf(uint64_t id) {
  const size_t dim = options_.dim;
  const auto [it, inserted] = slot_.try_emplace(id, slot_.size());
  if (inserted) {
    values_.resize(values_.size() + dim);
    accum_.resize(accum_.size() + dim, 0.0f);
    InitialRow(id, absl::MakeSpan(values_).subspan(it->second * dim, dim));
  }
  return it->second;
}

void LocalEmbeddingTable::ApplyAdagrad(absl::Span<const uint64_t> ids, absl::Span<const float> grads) {
  const size_t dim = options_.dim;
  CHECK_EQ(grads.size(), ids.size() * dim);
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t row = RowOf(ids[i]);
    AdagradLoop(values_.data() + row * dim, accum_.data() + row * dim, grads.data() + i * dim, dim, options_.lr,
                options_.eps);
  }
}

void AdagradStep(absl::Span<float> w, absl::Span<float> h, absl::Span<const float> g, float lr, float eps) {
  CHECK_EQ(w.size(), h.size());
  CHECK_EQ(w.size(), g.size());
  AdagradLoop(w.data(), h.data(), g.data(), w.size(), lr, eps);
}

}  // namespace ps
