#include "worker/models/text_classifier.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "worker/data/text_tokens.h"

namespace ps {
namespace {

constexpr int kMaxWidth = 4096;

// log(1 + e^z) without overflow for large |z|.
double Softplus(double z) { return std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z))); }

double Sigmoid(double z) {
  if (z >= 0) return 1.0 / (1.0 + std::exp(-z));
  const double e = std::exp(z);
  return e / (1.0 + e);
}

// A uniform value in [-bound, bound) from a counter-based stream: the k-th
// draw of stream `seed` is the same on every machine.
template <typename T>
T UniformAt(uint64_t seed, uint64_t k, double bound) {
  const uint64_t bits = SplitMix64Finalize(seed * 0x9e3779b97f4a7c15ull + k + 1);
  const double unit = static_cast<double>(bits >> 11) * 0x1.0p-53;  // [0, 1)
  return static_cast<T>((2 * unit - 1) * bound);
}

// out[0..n) += scale * x[0..n)
template <typename T>
void Axpy(size_t n, T scale, const T* __restrict x, T* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] += scale * x[i];
}

template <typename T>
T Dot(size_t n, const T* __restrict a, const T* __restrict b) {
  T sum = 0;
  for (size_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// pooled[m] = the mean of message m's rows (zeros for no tokens).
template <typename T>
void MeanPool(const TokenBatch& batch, absl::Span<const T> rows, size_t dim, std::vector<T>* pooled) {
  pooled->assign(batch.messages() * dim, T{0});
  const std::vector<uint32_t>& off = batch.offsets();
  for (size_t m = 0; m < batch.messages(); ++m) {
    T* out = pooled->data() + m * dim;
    for (uint32_t t = off[m]; t < off[m + 1]; ++t) {
      Axpy(dim, T{1}, rows.data() + size_t{batch.index()[t]} * dim, out);
    }
    const uint32_t n = off[m + 1] - off[m];
    if (n > 0) {
      const T inv = T{1} / static_cast<T>(n);
      for (size_t i = 0; i < dim; ++i) out[i] *= inv;
    }
  }
}

// grad_rows[u] += dpooled[m] / n_m for every occurrence u of message m.
template <typename T>
void ScatterToRows(const TokenBatch& batch, const std::vector<T>& dpooled, size_t dim, std::vector<T>* grad_rows) {
  grad_rows->assign(batch.ids().size() * dim, T{0});
  const std::vector<uint32_t>& off = batch.offsets();
  for (size_t m = 0; m < batch.messages(); ++m) {
    const uint32_t n = off[m + 1] - off[m];
    if (n == 0) continue;
    const T scale = T{1} / static_cast<T>(n);
    for (uint32_t t = off[m]; t < off[m + 1]; ++t) {
      Axpy(dim, scale, dpooled.data() + m * dim, grad_rows->data() + size_t{batch.index()[t]} * dim);
    }
  }
}

// act[m] = ReLU(hidden_w pooled[m] + hidden_b).
template <typename T>
void HiddenForward(const DenseParams<T>& dense, const std::vector<T>& pooled, size_t messages, size_t dim,
                   size_t hidden, std::vector<T>* act) {
  act->resize(messages * hidden);
  for (size_t m = 0; m < messages; ++m) {
    const T* p = pooled.data() + m * dim;
    for (size_t j = 0; j < hidden; ++j) {
      const T v = Dot(dim, dense.hidden_w.data() + j * dim, p) + dense.hidden_b[j];
      (*act)[m * hidden + j] = v > 0 ? v : T{0};
    }
  }
}

// The gradients of the hidden layer for message m, from d(loss)/d(act[m]) =
// dz * out_w; writes d(loss)/d(pooled[m]) into dp.
template <typename T>
void HiddenBackward(const DenseParams<T>& dense, const T* pooled, const T* act, T dz, size_t dim, size_t hidden,
                    DenseParams<T>* grad, T* dp) {
  for (size_t j = 0; j < hidden; ++j) {
    if (act[j] <= 0) continue;  // ReLU: no gradient where the unit is off
    const T dh = dz * dense.out_w[j];
    grad->hidden_b[j] += dh;
    Axpy(dim, dh, pooled, grad->hidden_w.data() + j * dim);
    Axpy(dim, dh, dense.hidden_w.data() + j * dim, dp);
  }
}

}  // namespace

absl::Status TextClassifierConfig::Validate() const {
  if (dim < 1 || dim > kMaxWidth) {
    return absl::InvalidArgumentError(absl::StrCat("dim ", dim, " not in [1, ", kMaxWidth, "]"));
  }
  if (hidden < 0 || hidden > kMaxWidth) {
    return absl::InvalidArgumentError(absl::StrCat("hidden ", hidden, " not in [0, ", kMaxWidth, "]"));
  }
  return absl::OkStatus();
}

void TokenBatch::Add(absl::Span<const uint64_t> tokens) {
  CHECK_LE(index_.size() + tokens.size(), size_t{std::numeric_limits<uint32_t>::max()}) << "batch too large";
  for (uint64_t id : tokens) {
    auto [it, inserted] = slot_.try_emplace(id, static_cast<uint32_t>(ids_.size()));
    if (inserted) ids_.push_back(id);
    index_.push_back(it->second);
  }
  offsets_.push_back(static_cast<uint32_t>(index_.size()));
}

void TokenBatch::Clear() {
  ids_.clear();
  offsets_.assign(1, 0);
  index_.clear();
  slot_.clear();
}

template <typename T>
absl::StatusOr<BasicTextClassifier<T>> BasicTextClassifier<T>::Create(const TextClassifierConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  return BasicTextClassifier(config);
}

template <typename T>
size_t BasicTextClassifier<T>::head_width() const {
  return static_cast<size_t>(config_.hidden > 0 ? config_.hidden : config_.dim);
}

template <typename T>
DenseParams<T> BasicTextClassifier<T>::ZeroDense() const {
  const size_t dim = config_.dim, hidden = config_.hidden;
  DenseParams<T> d;
  d.hidden_w.assign(hidden * dim, T{0});
  d.hidden_b.assign(hidden, T{0});
  d.out_w.assign(head_width(), T{0});
  d.out_b.assign(1, T{0});
  return d;
}

template <typename T>
DenseParams<T> BasicTextClassifier<T>::InitDense(uint64_t seed) const {
  DenseParams<T> d = ZeroDense();
  const double hidden_bound = std::sqrt(6.0 / config_.dim);
  for (size_t i = 0; i < d.hidden_w.size(); ++i) d.hidden_w[i] = UniformAt<T>(seed, i, hidden_bound);
  const double out_bound = std::sqrt(3.0 / static_cast<double>(head_width()));
  const uint64_t out_seed = SplitMix64Finalize(seed ^ 0x6f7574ull);  // "out"
  for (size_t i = 0; i < d.out_w.size(); ++i) d.out_w[i] = UniformAt<T>(out_seed, i, out_bound);
  return d;
}

template <typename T>
absl::Status BasicTextClassifier<T>::CheckShapes(const TokenBatch& batch, absl::Span<const T> rows,
                                                 const DenseParams<T>& dense) const {
  const size_t dim = config_.dim, hidden = config_.hidden;
  if (rows.size() != batch.ids().size() * dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows: ", rows.size(), " values for ", batch.ids().size(), " ids of dim ", dim));
  }
  if (dense.hidden_w.size() != hidden * dim || dense.hidden_b.size() != hidden || dense.out_w.size() != head_width() ||
      dense.out_b.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("dense parameters of sizes ", dense.hidden_w.size(), "/",
                                                   dense.hidden_b.size(), "/", dense.out_w.size(), "/",
                                                   dense.out_b.size(), " for dim ", dim, ", hidden ", hidden));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status BasicTextClassifier<T>::Logits(const TokenBatch& batch, absl::Span<const T> rows,
                                            const DenseParams<T>& dense, absl::Span<T> logits) const {
  if (absl::Status s = CheckShapes(batch, rows, dense); !s.ok()) return s;
  if (logits.size() != batch.messages()) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits: ", logits.size(), " values for ", batch.messages(), " messages"));
  }
  const size_t dim = config_.dim, hidden = config_.hidden, width = head_width();
  std::vector<T> pooled, act;
  MeanPool(batch, rows, dim, &pooled);
  if (hidden > 0) HiddenForward(dense, pooled, batch.messages(), dim, hidden, &act);
  const std::vector<T>& head = hidden > 0 ? act : pooled;
  for (size_t m = 0; m < batch.messages(); ++m) {
    logits[m] = Dot(width, dense.out_w.data(), head.data() + m * width) + dense.out_b[0];
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<double> BasicTextClassifier<T>::LossAndGradients(const TokenBatch& batch, absl::Span<const T> rows,
                                                                const DenseParams<T>& dense,
                                                                absl::Span<const float> labels,
                                                                TextClassifierGrads<T>* grads,
                                                                std::vector<T>* logits) const {
  if (absl::Status s = CheckShapes(batch, rows, dense); !s.ok()) return s;
  const size_t b = batch.messages();
  if (labels.size() != b) {
    return absl::InvalidArgumentError(absl::StrCat("labels: ", labels.size(), " for ", b, " messages"));
  }
  for (float y : labels) {
    if (!(y >= 0 && y <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("label ", y, " not in [0, 1]"));
    }
  }
  const size_t dim = config_.dim, hidden = config_.hidden, width = head_width();
  std::vector<T> pooled, act;
  MeanPool(batch, rows, dim, &pooled);
  if (hidden > 0) HiddenForward(dense, pooled, b, dim, hidden, &act);
  const std::vector<T>& head = hidden > 0 ? act : pooled;
  grads->dense = ZeroDense();
  std::vector<T> dpooled(b * dim, T{0});
  if (logits != nullptr) logits->resize(b);
  double loss = 0;
  for (size_t m = 0; m < b; ++m) {
    const T* a = head.data() + m * width;
    const double z = Dot(width, dense.out_w.data(), a) + dense.out_b[0];
    if (logits != nullptr) (*logits)[m] = static_cast<T>(z);
    loss += Softplus(z) - labels[m] * z;
    // d(mean loss)/dz = (sigmoid(z) - y) / b
    const T dz = static_cast<T>((Sigmoid(z) - labels[m]) / static_cast<double>(b));
    grads->dense.out_b[0] += dz;
    Axpy(width, dz, a, grads->dense.out_w.data());
    T* dp = dpooled.data() + m * dim;
    if (hidden > 0) {
      HiddenBackward(dense, pooled.data() + m * dim, a, dz, dim, hidden, &grads->dense, dp);
    } else {
      Axpy(dim, dz, dense.out_w.data(), dp);
    }
  }
  ScatterToRows(batch, dpooled, dim, &grads->rows);
  return b == 0 ? 0.0 : loss / static_cast<double>(b);
}

template class BasicTextClassifier<float>;
template class BasicTextClassifier<double>;

}  // namespace ps
