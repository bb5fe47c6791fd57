#include "worker/train/local_text_trainer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"

namespace ps {
namespace {

constexpr size_t kEvalBatch = 256;

LocalEmbeddingTableOptions TableOptions(const LocalTrainOptions& o) {
  return LocalEmbeddingTableOptions{
      .dim = o.model.dim, .init_scale = o.init_scale, .seed = o.seed, .lr = o.row_lr, .eps = o.eps};
}

}  // namespace

absl::Status LocalTrainOptions::Validate() const {
  PS_RETURN_IF_ERROR(model.Validate());
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size ", batch_size, " < 1"));
  }
  if (!(row_lr > 0) || !(dense_lr > 0) || !(eps > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("row_lr ", row_lr, ", dense_lr ", dense_lr, ", eps ", eps, ": each must be > 0"));
  }
  if (!(init_scale >= 0) || !std::isfinite(init_scale)) {
    return absl::InvalidArgumentError(absl::StrCat("init_scale ", init_scale, " must be >= 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LocalTextTrainer>> LocalTextTrainer::Create(const LocalTrainOptions& options) {
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

absl::StatusOr<double> LocalTextTrainer::Step(const TokenBatch& batch, const std::vector<float>& labels) {
  rows_.resize(batch.ids().size() * options_.model.dim);
  table_.Gather(batch.ids(), absl::MakeSpan(rows_));
  PS_ASSIGN_OR_RETURN(const double loss, model_.LossAndGradients(batch, rows_, dense_, labels, &grads_));
  table_.ApplyAdagrad(batch.ids(), grads_.rows);
  const float lr = options_.dense_lr, eps = options_.eps;
  AdagradStep(absl::MakeSpan(dense_.hidden_w), absl::MakeSpan(dense_accum_.hidden_w), grads_.dense.hidden_w, lr, eps);
  AdagradStep(absl::MakeSpan(dense_.hidden_b), absl::MakeSpan(dense_accum_.hidden_b), grads_.dense.hidden_b, lr, eps);
  AdagradStep(absl::MakeSpan(dense_.out_w), absl::MakeSpan(dense_accum_.out_w), grads_.dense.out_w, lr, eps);
  AdagradStep(absl::MakeSpan(dense_.out_b), absl::MakeSpan(dense_accum_.out_b), grads_.dense.out_b, lr, eps);
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
    const absl::Status s = model_.Logits(batch, rows, dense_, absl::MakeSpan(logits).subspan(start, end - start));
    CHECK(s.ok()) << s;  // the shapes are this class's own
  }
  return logits;
}

Evaluation LocalTextTrainer::Evaluate(const std::vector<LabeledTokens>& examples) const {
  return EvaluateLogits(Logits(examples), examples);
}

}  // namespace ps
