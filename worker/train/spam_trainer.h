#ifndef PS_WORKER_TRAIN_SPAM_TRAINER_H_
#define PS_WORKER_TRAIN_SPAM_TRAINER_H_

// The training loop of one data-parallel worker of the spam classifier: the
// text classifier of worker/models/text_classifier.h with its token embeddings in
// the servers' embedding table "tokens" and its head in dense tensors
// ("head.out_w", "head.out_b"; with a hidden layer also "head.hidden_w",
// "head.hidden_b"), all trained by the servers with Adagrad (the table with
// its own rate, row_lr; the dense tensors with the model's, dense_lr).
//
// Data. Every worker reads the corpus and splits it 80/20 by IsTestMessage;
// worker r of W trains on TrainingShard(corpus, r, W). Shards differ in size
// by at most one message, and in sync mode every worker must run the same
// steps, so every worker trains each epoch on the first
// floor(training messages / W) messages of its shard in that epoch's
// shuffled order: the minimum shard length. A worker with one more message
// leaves out a different one each epoch, as the order is reshuffled.
//
// A step. The rows of step t's batch were pulled by the exchange of step
// t-1. The worker computes its batch's mean loss and gradients, then one
// KVClient::Exchange pushes the dense gradients and the batch's row
// gradients at clock t, and pulls the dense tensors and the rows of step
// t+1's batch (known in advance: an epoch's order depends only on the seed,
// the epoch and the rank) for pull_clock t+1: one round trip per server and
// step. In sync mode that pull waits until every worker's step t is applied.
//
// Gradient scale. In sync mode a server applies the mean over workers of
// the pushed gradients: the gradient of the mean loss over the step's
// W x batch_size messages. In async mode each push is applied as it comes:
// the gradient of one worker's batch mean. Adagrad divides each step by the
// root of the summed squared gradients, so the size of its steps does not
// depend on that scale, and the same rates serve both modes (those of the
// local reference, worker/train/local_text_trainer.h, at its batch of 32).
//
// Request sizes. One request may carry at most max_ids_per_request distinct
// ids for a server, and a frame at most client.security.max_frame_bytes.
// Each message keeps the ids of its first tokens only, up to
// MaxDistinctIdsPerMessage, so that no batch can exceed either limit,
// whatever the number of servers (on the SpamAssassin corpus, with batch 32
// and dim 32, 52 of its 6046 messages have more distinct ids than that).
// Evaluation pulls the test messages' rows in chunks of at most
// max_ids_per_request distinct ids.
//
// Evaluation. Rank 0 evaluates on the test split at the end of every epoch
// but the last, and, once every worker is done (a barrier), on the final
// parameters: accuracy, mean logistic loss and ROC AUC.
//
// Not thread-safe: one TrainSpam call per worker (process or thread).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/model/model_spec.h"
#include "worker/client/kv_client.h"
#include "worker/data/spam_corpus.h"
#include "worker/data/text_tokens.h"
#include "worker/models/text_classifier.h"
#include "worker/train/text_examples.h"
#include "worker/train/train_event.h"

namespace ps {

// The most distinct ids of one table shard a request may carry: the
// servers' SliceStore::kMaxRowsPerRequest (tests/spam_training_test.cc
// checks that the two agree).
inline constexpr size_t kMaxIdsPerRequest = size_t{1} << 17;

inline constexpr char kTokenTable[] = "tokens";
inline constexpr char kHiddenWeights[] = "head.hidden_w";  // [hidden x dim], flat
inline constexpr char kHiddenBias[] = "head.hidden_b";     // [hidden]
inline constexpr char kOutWeights[] = "head.out_w";        // [hidden, or dim without one]
inline constexpr char kOutBias[] = "head.out_b";           // [1]

struct SpamTrainerOptions {
  KVClientOptions client;
  // The corpus: ReadSpamCorpus(data_dir), or, when `corpus` is set, that one
  // (borrowed: it must outlive TrainSpam; tests use small corpora).
  std::string data_dir = kDefaultSpamDir;
  const std::vector<SpamMessage>* corpus = nullptr;
  TokenOptions tokens;
  TextClassifierConfig model;  // dim 32, no hidden layer
  Consistency consistency;
  // How the dense tensors and the rows travel (ModelSpec::compression).
  CompressionSpec compression;
  uint64_t compress_min_bytes = ModelSpec().compress_min_bytes;
  int epochs = 3;            // in [1, 100000]
  int batch_size = 32;       // messages per step and worker, in [1, 65536]
  float row_lr = 0.2f;       // Adagrad rate of the rows, > 0
  float dense_lr = 0.05f;    // Adagrad rate of the dense tensors, > 0
  float eps = 1e-8f;         // Adagrad epsilon of both, > 0
  float init_scale = 0.1f;   // rows start uniform in [-init_scale, init_scale), > 0
  uint32_t admit_after = 0;  // TableSpec::admit_after
  uint64_t seed = 1;         // initial values and shuffling
  // Where the dense tensors go: "auto", "layer" or a file (ParsePlacement).
  std::string placement = "auto";
  uint64_t slice_bytes = 1 << 20;
  // Shards of the table (PlacementSpec::table_shards; 0: one per server).
  int64_t table_shards = 0;
  // Distinct ids per request and server, in [1, kMaxIdsPerRequest]: lower
  // only to exercise the chunking.
  size_t max_ids_per_request = kMaxIdsPerRequest;
  absl::Duration progress_every = absl::Seconds(1);  // > 0
  // How long a worker that has finished waits for the others.
  absl::Duration finish_timeout = absl::Minutes(30);

  // kInvalidArgument naming the field.
  absl::Status Validate() const;
};

struct SpamTrainResult {
  // Rank 0: the evaluation of the final parameters on the test split.
  bool evaluated = false;
  Evaluation eval;
  int64_t samples = 0;  // messages trained by this worker
  int64_t steps = 0;
  double wall_s = 0;  // from the first step to the end of the last
  double wait_s = 0;  // of which blocked on the servers
  double eval_s = 0;  // of which evaluating (rank 0)
};

// The model every worker registers (dense tensors, the table, Adagrad,
// the consistency model, the placement for `num_servers`). Errors:
// ParsePlacement's.
absl::StatusOr<ModelSpec> SpamModelSpec(const SpamTrainerOptions& options, int num_servers);

// How many distinct ids a message may keep so that any batch fits in one
// request: min(max_ids_per_request, max_frame_bytes / (8 + 4 dim)) /
// batch_size, at least 1 (a frame of pushed rows holds each id and its row).
// Requires a valid `options`.
size_t MaxDistinctIdsPerMessage(const SpamTrainerOptions& options);

// Cuts `ids` to its longest prefix with at most `max_distinct` distinct ids.
void KeepDistinctPrefix(size_t max_distinct, std::vector<uint64_t>* ids);

// Steps every worker runs per epoch: ceil(floor(train_messages / workers) /
// batch_size); 0 when there are fewer messages than workers.
int64_t SpamStepsPerEpoch(int64_t train_messages, int num_workers, int batch_size);

// Splits `examples` into consecutive ranges [first, second) whose distinct
// ids number at most `max_ids` (a message alone over it gets a range of its
// own). Covers every example, in order.
std::vector<std::pair<size_t, size_t>> IdChunks(const std::vector<LabeledTokens>& examples, size_t max_ids);

// Reads the corpus, connects, registers the model, trains, has rank 0
// evaluate, and tells the scheduler this worker is done; rank 0 then also
// reports the servers' statistics (a "server_stats" event with the table's
// rows). `on_event` receives the events of worker/train/train_event.h (may be
// empty). Errors: the corpus reader's, the client's; kInvalidArgument for
// options or a job with fewer training messages than workers;
// kFailedPrecondition for a worker rejoining a running job (not supported);
// kInternal("step S ... loss is NaN") when training diverges.
absl::StatusOr<SpamTrainResult> TrainSpam(const SpamTrainerOptions& options,
                                          const std::function<void(const TrainEvent&)>& on_event);

}  // namespace ps

#endif  // PS_WORKER_TRAIN_SPAM_TRAINER_H_
