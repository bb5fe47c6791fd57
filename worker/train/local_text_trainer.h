#ifndef PS_WORKER_TRAIN_LOCAL_TEXT_TRAINER_H_
#define PS_WORKER_TRAIN_LOCAL_TEXT_TRAINER_H_

// Training the text classifier (worker/models/text_classifier.h) in one process,
// with its embedding rows in a LocalEmbeddingTable and Adagrad on every
// tensor: the reference that a distributed run through the parameter
// server's embedding tables is measured against, and the place to find
// hyperparameters. Not thread-safe.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/data/spam_corpus.h"
#include "worker/data/text_tokens.h"
#include "worker/models/local_embedding_table.h"
#include "worker/models/text_classifier.h"
#include "worker/train/text_examples.h"

namespace ps {

struct LocalTrainOptions {
  TextClassifierConfig model;
  int batch_size = 32;      // messages per step, >= 1
  float row_lr = 0.2f;      // Adagrad learning rate of the embedding rows, > 0
  float dense_lr = 0.05f;   // Adagrad learning rate of the dense tensors, > 0
  float eps = 1e-8f;        // Adagrad epsilon, > 0
  float init_scale = 0.1f;  // rows start uniform in [-init_scale, init_scale), >= 0
  uint64_t seed = 1;        // dense initialisation, row initialisation, shuffling
  // kInvalidArgument naming the field.
  absl::Status Validate() const;
};

class LocalTextTrainer {
 public:
  // kInvalidArgument when options.Validate() fails.
  static absl::StatusOr<std::unique_ptr<LocalTextTrainer>> Create(const LocalTrainOptions& options);
  LocalTextTrainer(const LocalTextTrainer&) = delete;
  LocalTextTrainer& operator=(const LocalTextTrainer&) = delete;

  // One pass over `train` in an order shuffled from (seed, epoch number), so
  // that a run is the same every time; returns the mean training loss.
  // kInvalidArgument for a label outside [0, 1].
  absl::StatusOr<double> TrainEpoch(const std::vector<LabeledTokens>& train);

  // The logit of each example, with the current parameters (rows never
  // trained read as their initial values).
  std::vector<float> Logits(const std::vector<LabeledTokens>& examples) const;

  // Loss, accuracy and AUC on `examples`.
  Evaluation Evaluate(const std::vector<LabeledTokens>& examples) const;

  int epochs_done() const { return epochs_done_; }
  const LocalEmbeddingTable& table() const { return table_; }

 private:
  LocalTextTrainer(const LocalTrainOptions& options, TextClassifier model);
  // One Adagrad step on the batch; returns its mean loss.
  absl::StatusOr<double> Step(const TokenBatch& batch, const std::vector<float>& labels);

  LocalTrainOptions options_;
  TextClassifier model_;
  LocalEmbeddingTable table_;
  DenseParams<float> dense_;
  DenseParams<float> dense_accum_;  // Adagrad state, shaped like dense_
  TextClassifierGrads<float> grads_;
  std::vector<float> rows_;  // the batch's rows, gathered from table_
  int epochs_done_ = 0;
};

}  // namespace ps

#endif  // PS_WORKER_TRAIN_LOCAL_TEXT_TRAINER_H_
