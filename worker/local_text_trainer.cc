#include "worker/local_text_trainer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "worker/binary_metrics.h"

namespace ps {
namespace {

constexpr size_t kEvalBatch = 256;

// Fisher-Yates driven by a counter-based generator: the same permutation on
// every machine and standard library (std::shuffle's is unspecified).
std::vector<size_t> ShuffledOrder(size_t n, uint64_t seed) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  for (size_t i = n; i > 1; --i) {
    const uint64_t r = SplitMix64Finalize(seed + 0x9e3779b97f4a7c15ull * i);
    std::swap(order[i - 1], order[r % i]);  // modulo bias < i / 2^64: irrelevant here
  }
  return order;
}

LocalEmbeddingTableOptions TableOptions(const LocalTrainOptions& o) {
  return LocalEmbeddingTableOptions{.dim = o.model.dim,
                                    .init_scale = o.init_scale,
                                    .seed = o.seed,
                                    .lr = o.row_lr,
                                    .eps = o.eps};
}

double LogisticLoss(double z, double y) {
  return std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z))) - y * z;
}

}  // namespace

std::vector<LabeledTokens> TokenizeMessages(const std::vector<SpamMessage>& corpus,
                                            const std::vector<size_t>& indices,
                                            const TokenOptions& options) {
  std::vector<LabeledTokens> out;
  out.reserve(indices.size());
  for (size_t i : indices) {
    CHECK_LT(i, corpus.size());
    out.push_back({HashedTokens(corpus[i].text, options), static_cast<float>(corpus[i].label)});
  }
  return out;
}

absl::Status LocalTrainOptions::Validate() const {
  PS_RETURN_IF_ERROR(model.Validate());
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size ", batch_size, " < 1"));
  }
  if (!(row_lr > 0) || !(dense_lr > 0) || !(eps > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("row_lr ", row_lr, ", dense_lr ", dense_lr,
                                                   ", eps ", eps, ": each must be > 0"));
  }
  if (!(init_scale >= 0) || !std::isfinite(init_scale)) {
    return absl::InvalidArgumentError(absl::StrCat("init_scale ", init_scale, " must be >= 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LocalTextTrainer>> LocalTextTrainer::Create(
    const LocalTrainOptions& options) {
  PS_RETURN_IF_ERROR(options.Validate());
  PS_ASSIGN_OR_RETURN(TextClassifier model, TextClassifier::Create(options.model));
  return std::unique_ptr<LocalTextTrainer>(new LocalTextTrainer(options, std::move(model)));
}

LocalTextTrainer::LocalTextTrainer(const LocalTrainOptions& options, TextClassifier model)
    : options_(options),
      model_(std::move(model)),
      table_(TableOptions(options)),
      dense_(model_.InitDense(options.seed)),
      dense_accum_(model_.ZeroDense()) {}

absl::StatusOr<double> LocalTextTrainer::Step(const TokenBatch& batch,
                                              const std::vector<float>& labels) {
  rows_.resize(batch.ids().size() * options_.model.dim);
  table_.Gather(batch.ids(), absl::MakeSpan(rows_));
  PS_ASSIGN_OR_RETURN(const double loss,
                      model_.LossAndGradients(batch, rows_, dense_, labels, &grads_));
  table_.ApplyAdagrad(batch.ids(), grads_.rows);
  const float lr = options_.dense_lr, eps = options_.eps;
  AdagradStep(absl::MakeSpan(dense_.hidden_w), absl::MakeSpan(dense_accum_.hidden_w),
              grads_.dense.hidden_w, lr, eps);
  AdagradStep(absl::MakeSpan(dense_.hidden_b), absl::MakeSpan(dense_accum_.hidden_b),
              grads_.dense.hidden_b, lr, eps);
  AdagradStep(absl::MakeSpan(dense_.out_w), absl::MakeSpan(dense_accum_.out_w), grads_.dense.out_w,
              lr, eps);
  AdagradStep(absl::MakeSpan(dense_.out_b), absl::MakeSpan(dense_accum_.out_b), grads_.dense.out_b,
              lr, eps);
  return loss;
}

absl::StatusOr<double> LocalTextTrainer::TrainEpoch(const std::vector<LabeledTokens>& train) {
  const uint64_t epoch_seed = SplitMix64Finalize(options_.seed + 0x100000001ull * (epochs_done_ + 1));
  const std::vector<size_t> order = ShuffledOrder(train.size(), epoch_seed);
  TokenBatch batch;
  std::vector<float> labels;
  double loss_sum = 0;
  for (size_t start = 0; start < order.size(); start += options_.batch_size) {
    const size_t end = std::min(order.size(), start + options_.batch_size);
    batch.Clear();
    labels.clear();
    for (size_t k = start; k < end; ++k) {
      batch.Add(train[order[k]].ids);
      labels.push_back(train[order[k]].label);
    }
    PS_ASSIGN_OR_RETURN(const double loss, Step(batch, labels));
    loss_sum += loss * static_cast<double>(end - start);
  }
  ++epochs_done_;
  return train.empty() ? 0.0 : loss_sum / static_cast<double>(train.size());
}

std::vector<float> LocalTextTrainer::Logits(const std::vector<LabeledTokens>& examples) const {
  std::vector<float> logits(examples.size());
  TokenBatch batch;
  std::vector<float> rows;
  for (size_t start = 0; start < examples.size(); start += kEvalBatch) {
    const size_t end = std::min(examples.size(), start + kEvalBatch);
    batch.Clear();
    for (size_t k = start; k < end; ++k) batch.Add(examples[k].ids);
    rows.resize(batch.ids().size() * options_.model.dim);
    table_.Gather(batch.ids(), absl::MakeSpan(rows));
    const absl::Status s =
        model_.Logits(batch, rows, dense_, absl::MakeSpan(logits).subspan(start, end - start));
    CHECK(s.ok()) << s;  // the shapes are this class's own
  }
  return logits;
}

Evaluation LocalTextTrainer::Evaluate(const std::vector<LabeledTokens>& examples) const {
  const std::vector<float> logits = Logits(examples);
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
