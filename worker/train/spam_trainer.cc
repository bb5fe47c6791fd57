#include "worker/train/spam_trainer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"
#include "worker/train/trainer.h"  // ParsePlacement

namespace ps {
namespace {

constexpr int kMaxServers = 4096;

std::string Int(int64_t v) { return absl::StrCat(v); }

// The messages one worker trains on and, on rank 0, those it evaluates on.
struct SpamData {
  std::vector<LabeledTokens> shard;
  std::vector<LabeledTokens> test;
  int64_t test_messages = 0;  // in the test split (every rank knows)
  int64_t per_epoch = 0;      // messages each worker trains on per epoch
  int64_t steps_per_epoch = 0;
  size_t max_ids_per_message = 0;
};

// One step's messages, their labels and the rows of their ids.
struct Batch {
  TokenBatch tokens;
  std::vector<float> labels;
  std::vector<float> rows;  // tokens.ids().size() x dim
};

// The dense tensors of the model as (name, member) pairs, in model order.
std::vector<std::pair<const char*, std::vector<float> DenseParams<float>::*>> DenseMembers(int hidden) {
  std::vector<std::pair<const char*, std::vector<float> DenseParams<float>::*>> members;
  if (hidden > 0) {
    members.emplace_back(kHiddenWeights, &DenseParams<float>::hidden_w);
    members.emplace_back(kHiddenBias, &DenseParams<float>::hidden_b);
  }
  members.emplace_back(kOutWeights, &DenseParams<float>::out_w);
  members.emplace_back(kOutBias, &DenseParams<float>::out_b);
  return members;
}

OptimizerConfig Adagrad(float lr, float eps) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdagrad;
  c.learning_rate = lr;
  c.epsilon = eps;
  return c;
}

// The dense tensors' initial values: those of TextClassifier::InitDense, in
// distribution (He-uniform hidden layer, out_w uniform with bound
// sqrt(3 / fan_in), zero biases).
std::vector<TensorSpec> DenseTensors(const SpamTrainerOptions& o) {
  const int dim = o.model.dim, hidden = o.model.hidden;
  const int fan_in = hidden > 0 ? hidden : dim;
  const float out_bound = std::sqrt(3.0f / fan_in);
  std::vector<TensorSpec> tensors;
  if (hidden > 0) {
    const float bound = std::sqrt(6.0f / dim);
    tensors.push_back({kHiddenWeights, {int64_t{hidden} * dim}, Initializer::Uniform(-bound, bound, o.seed)});
    tensors.push_back({kHiddenBias, {hidden}, Initializer::Zeros()});
  }
  tensors.push_back({kOutWeights, {fan_in}, Initializer::Uniform(-out_bound, out_bound, o.seed)});
  tensors.push_back({kOutBias, {1}, Initializer::Zeros()});
  return tensors;
}

class SpamRun {
 public:
  SpamRun(const SpamTrainerOptions& options, KVClient* client, TextClassifier model, SpamData data,
          const std::function<void(const TrainEvent&)>& on_event);
  SpamRun(const SpamRun&) = delete;
  SpamRun& operator=(const SpamRun&) = delete;

  absl::StatusOr<SpamTrainResult> Go();

 private:
  // Fills `batch` with the messages of global step `step`.
  void Prepare(int64_t step, Batch* batch);
  // Computes step `step` on batches_[step % 2] and exchanges with the servers.
  absl::Status Step(int64_t step);
  // Sends the exchange and waits for it, counting the wait.
  absl::Status Send(const StepRequest& exchange);
  std::vector<ConstTensorBuffer> DenseGrads() const;
  std::vector<TensorBuffer> DenseOut(DenseParams<float>& params) const;
  // Rank 0: evaluates the parameters of step `clock` on the test split.
  absl::StatusOr<Evaluation> Evaluate(int64_t clock);
  absl::StatusOr<Evaluation> EvaluateAndEmit(int epoch, int64_t clock, bool final);
  void Emit(const std::string& kind, std::vector<std::pair<std::string, std::string>> fields);
  void MaybeReportProgress(int epoch, int64_t steps_done, bool force);
  double EpochLoss() const { return epoch_count_ ? epoch_loss_ / epoch_count_ : 0; }

  const SpamTrainerOptions& o_;
  KVClient* const client_;
  const TextClassifier model_;
  const SpamData data_;
  const std::function<void(const TrainEvent&)>& on_event_;
  const int64_t total_steps_;
  const std::vector<std::pair<size_t, size_t>> eval_chunks_;
  int table_ = 0;
  std::vector<int> tensor_index_;  // per DenseMembers entry
  Batch batches_[2];
  DenseParams<float> dense_;
  TextClassifierGrads<float> grads_;
  std::vector<float> logits_;
  int order_epoch_ = -1;
  std::vector<size_t> order_;  // the shard's order in epoch order_epoch_
  int64_t samples_ = 0;
  double epoch_loss_ = 0;
  int64_t epoch_count_ = 0, epoch_correct_ = 0;
  absl::Time start_, last_progress_;
  absl::Duration waited_, evaluating_;
};

SpamRun::SpamRun(const SpamTrainerOptions& options, KVClient* client, TextClassifier model, SpamData data,
                 const std::function<void(const TrainEvent&)>& on_event)
    : o_(options),
      client_(client),
      model_(std::move(model)),
      data_(std::move(data)),
      on_event_(on_event),
      total_steps_(data_.steps_per_epoch * options.epochs),
      eval_chunks_(IdChunks(data_.test, options.max_ids_per_request)),
      dense_(model_.ZeroDense()) {
  // RegisterModel has returned: the names are the model's (CHECKed: ours).
  const absl::StatusOr<int> table = client_->TableIndex(kTokenTable);
  CHECK(table.ok()) << table.status();
  table_ = *table;
  for (const auto& [name, member] : DenseMembers(o_.model.hidden)) {
    const absl::StatusOr<int> index = client_->TensorIndex(name);
    CHECK(index.ok()) << index.status();
    tensor_index_.push_back(*index);
  }
}

void SpamRun::Emit(const std::string& kind, std::vector<std::pair<std::string, std::string>> fields) {
  if (!on_event_) return;
  fields.insert(fields.begin(), {"rank", Int(client_->rank())});
  on_event_(TrainEvent{kind, std::move(fields)});
}

void SpamRun::Prepare(int64_t step, Batch* batch) {
  const int epoch = static_cast<int>(step / data_.steps_per_epoch) + 1;
  if (epoch != order_epoch_) {
    const uint64_t seed = SplitMix64Finalize(o_.seed * 0x100000001b3ull + epoch * 7919 + client_->rank());
    order_ = ShuffledOrder(data_.shard.size(), seed);
    order_epoch_ = epoch;
  }
  const int64_t first = (step % data_.steps_per_epoch) * o_.batch_size;
  const int64_t end = std::min<int64_t>(first + o_.batch_size, data_.per_epoch);
  batch->tokens.Clear();
  batch->labels.clear();
  for (int64_t k = first; k < end; ++k) {
    const LabeledTokens& ex = data_.shard[order_[k]];
    batch->tokens.Add(ex.ids);
    batch->labels.push_back(ex.label);
  }
  batch->rows.resize(batch->tokens.ids().size() * static_cast<size_t>(o_.model.dim));
}

std::vector<ConstTensorBuffer> SpamRun::DenseGrads() const {
  std::vector<ConstTensorBuffer> out;
  const auto members = DenseMembers(o_.model.hidden);
  for (size_t i = 0; i < members.size(); ++i) out.push_back({tensor_index_[i], grads_.dense.*members[i].second});
  return out;
}

std::vector<TensorBuffer> SpamRun::DenseOut(DenseParams<float>& params) const {
  std::vector<TensorBuffer> out;
  const auto members = DenseMembers(o_.model.hidden);
  for (size_t i = 0; i < members.size(); ++i) {
    out.push_back({tensor_index_[i], absl::MakeSpan(params.*members[i].second)});
  }
  return out;
}

absl::Status SpamRun::Send(const StepRequest& exchange) {
  const absl::Time t0 = absl::Now();
  const absl::Status status = client_->Wait(client_->Exchange(exchange));
  waited_ += absl::Now() - t0;
  return status;
}

absl::Status SpamRun::Step(int64_t step) {
  Batch& cur = batches_[step % 2];
  Batch& next = batches_[(step + 1) % 2];
  PS_ASSIGN_OR_RETURN(const double loss,
                      model_.LossAndGradients(cur.tokens, cur.rows, dense_, cur.labels, &grads_, &logits_));
  if (!std::isfinite(loss)) {
    return absl::InternalError(absl::StrCat("step ", step, " worker ", client_->rank(), ": loss is ", loss,
                                            "; stopping instead of pushing garbage (lower --row_lr, --dense_lr)"));
  }
  const int64_t n = static_cast<int64_t>(cur.labels.size());
  for (int64_t i = 0; i < n; ++i) epoch_correct_ += (logits_[i] > 0) == (cur.labels[i] >= 0.5f);
  epoch_loss_ += loss * n;
  epoch_count_ += n;
  samples_ += n;
  const bool last = step + 1 == total_steps_;
  if (!last) Prepare(step + 1, &next);
  const std::vector<ConstTensorBuffer> grads = DenseGrads();
  const std::vector<TensorBuffer> out = DenseOut(dense_);
  const ConstRowBuffer row_grads[] = {{table_, cur.tokens.ids(), grads_.rows}};
  const RowBuffer rows_out[] = {{table_, next.tokens.ids(), absl::MakeSpan(next.rows)}};
  return Send({.push = grads,
               .push_rows = row_grads,
               .step = step,
               .pull = out,
               .pull_rows = last ? absl::Span<const RowBuffer>() : absl::Span<const RowBuffer>(rows_out),
               .pull_step = step + 1});
}

absl::StatusOr<Evaluation> SpamRun::Evaluate(int64_t clock) {
  std::vector<float> logits(data_.test.size());
  DenseParams<float> dense = model_.ZeroDense();
  const std::vector<TensorBuffer> dense_out = DenseOut(dense);
  TokenBatch batch;
  std::vector<float> rows;
  bool first = true;
  for (const auto& [begin, end] : eval_chunks_) {
    batch.Clear();
    for (size_t i = begin; i < end; ++i) batch.Add(data_.test[i].ids);
    rows.resize(batch.ids().size() * static_cast<size_t>(o_.model.dim));
    const RowBuffer rows_out[] = {{table_, batch.ids(), absl::MakeSpan(rows)}};
    // The dense tensors ride on the first chunk's pull.
    PS_RETURN_IF_ERROR(client_->Wait(
        client_->Exchange({.pull = first ? absl::Span<const TensorBuffer>(dense_out) : absl::Span<const TensorBuffer>(),
                           .pull_rows = rows_out,
                           .pull_step = clock})));
    first = false;
    PS_RETURN_IF_ERROR(model_.Logits(batch, rows, dense, absl::MakeSpan(logits).subspan(begin, end - begin)));
  }
  return EvaluateLogits(logits, data_.test);
}

absl::StatusOr<Evaluation> SpamRun::EvaluateAndEmit(int epoch, int64_t clock, bool final) {
  const absl::Time t0 = absl::Now();
  PS_ASSIGN_OR_RETURN(const Evaluation e, Evaluate(clock));
  evaluating_ += absl::Now() - t0;
  auto opt = [](const std::optional<double>& v) -> std::string { return v ? EventNumber(*v) : "null"; };
  Emit("eval", {{"epoch", Int(epoch)},
                {"step", Int(clock)},
                {"elapsed_s", EventNumber(absl::ToDoubleSeconds(absl::Now() - start_))},
                {"train_loss", EventNumber(EpochLoss())},
                {"test_accuracy", opt(e.accuracy)},
                {"test_loss", EventNumber(e.loss)},
                {"test_auc", opt(e.auc)},
                {"final", final ? "true" : "false"}});
  return e;
}

void SpamRun::MaybeReportProgress(int epoch, int64_t steps_done, bool force) {
  const absl::Time now = absl::Now();
  if (!force && now - last_progress_ < o_.progress_every) return;
  last_progress_ = now;
  const double elapsed = absl::ToDoubleSeconds(now - start_);
  const double rate = elapsed > 0 ? samples_ / elapsed : 0;
  const double eta = steps_done > 0 ? elapsed * (total_steps_ - steps_done) / steps_done : 0;
  Emit("progress", {{"epoch", Int(epoch)},
                    {"epochs", Int(o_.epochs)},
                    {"step", Int(steps_done)},
                    {"total_steps", Int(total_steps_)},
                    {"loss", EventNumber(EpochLoss())},
                    {"train_accuracy", EventNumber(epoch_count_ ? double(epoch_correct_) / epoch_count_ : 0)},
                    {"samples_per_s", EventNumber(rate)},
                    {"elapsed_s", EventNumber(elapsed)},
                    {"eta_s", EventNumber(eta)},
                    {"wait_s", EventNumber(absl::ToDoubleSeconds(waited_))}});
}

absl::StatusOr<SpamTrainResult> SpamRun::Go() {
  start_ = last_progress_ = absl::Now();
  Prepare(0, &batches_[0]);
  const RowBuffer first_rows[] = {{table_, batches_[0].tokens.ids(), absl::MakeSpan(batches_[0].rows)}};
  const std::vector<TensorBuffer> out = DenseOut(dense_);
  PS_RETURN_IF_ERROR(Send({.pull = out, .pull_rows = first_rows, .pull_step = 0}));
  for (int64_t step = 0; step < total_steps_; ++step) {
    const int epoch = static_cast<int>(step / data_.steps_per_epoch) + 1;
    if (step % data_.steps_per_epoch == 0) epoch_loss_ = epoch_count_ = epoch_correct_ = 0;
    PS_RETURN_IF_ERROR(Step(step));
    const bool epoch_end = (step + 1) % data_.steps_per_epoch == 0;
    MaybeReportProgress(epoch, step + 1, epoch_end);
    if (epoch_end && epoch < o_.epochs && client_->rank() == 0) {
      PS_RETURN_IF_ERROR(EvaluateAndEmit(epoch, step + 1, false).status());
    }
  }
  SpamTrainResult r;
  r.wall_s = absl::ToDoubleSeconds(absl::Now() - start_);
  r.samples = samples_;
  r.steps = total_steps_;
  // Every worker's last push is in: the final parameters, the same for all.
  PS_RETURN_IF_ERROR(client_->Barrier("train-done", o_.finish_timeout));
  if (client_->rank() == 0) {
    PS_ASSIGN_OR_RETURN(r.eval, EvaluateAndEmit(o_.epochs, total_steps_, true));
    r.evaluated = true;
  }
  r.wait_s = absl::ToDoubleSeconds(waited_);
  r.eval_s = absl::ToDoubleSeconds(evaluating_);
  return r;
}

// This worker's messages, tokenized and cut to the request limits.
absl::StatusOr<SpamData> LoadData(const SpamTrainerOptions& o, const std::vector<SpamMessage>& corpus, int rank,
                                  int workers) {
  SpamData d;
  const std::vector<size_t> test = TestMessages(corpus);
  d.test_messages = static_cast<int64_t>(test.size());
  const int64_t train_messages = static_cast<int64_t>(corpus.size() - test.size());
  d.steps_per_epoch = SpamStepsPerEpoch(train_messages, workers, o.batch_size);
  if (d.steps_per_epoch == 0) {
    return absl::InvalidArgumentError(absl::StrCat("the corpus has ", train_messages,
                                                   " training messages, fewer than the job's ", workers, " workers"));
  }
  d.per_epoch = train_messages / workers;
  PS_ASSIGN_OR_RETURN(const std::vector<size_t> shard, TrainingShard(corpus, rank, workers));
  d.shard = TokenizeMessages(corpus, shard, o.tokens);
  if (rank == 0) d.test = TokenizeMessages(corpus, test, o.tokens);
  d.max_ids_per_message = MaxDistinctIdsPerMessage(o);
  for (auto* set : {&d.shard, &d.test}) {
    for (LabeledTokens& ex : *set) KeepDistinctPrefix(d.max_ids_per_message, &ex.ids);
  }
  return d;
}

int64_t DenseParameters(const ModelSpec& model) {
  int64_t n = 0;
  for (const TensorSpec& t : model.tensors) n += t.NumElements();
  return n;
}

TrainEvent StartEvent(const SpamTrainerOptions& o, const KVClient& client, const SpamData& d) {
  const std::string placement = client.partition_map().Describe(client.model().tensors);
  return TrainEvent{"start",
                    {{"rank", Int(client.rank())},
                     {"workers", Int(client.num_workers())},
                     {"servers", Int(client.num_servers())},
                     {"parameters", Int(DenseParameters(client.model()))},
                     {"table", EventString(kTokenTable)},
                     {"dim", Int(o.model.dim)},
                     {"hidden", Int(o.model.hidden)},
                     {"shard", Int(static_cast<int64_t>(d.shard.size()))},
                     {"messages_per_epoch", Int(d.per_epoch)},
                     {"test_messages", Int(d.test_messages)},
                     {"max_ids_per_message", Int(static_cast<int64_t>(d.max_ids_per_message))},
                     {"steps_per_epoch", Int(d.steps_per_epoch)},
                     {"epochs", Int(o.epochs)},
                     {"total_steps", Int(d.steps_per_epoch * o.epochs)},
                     {"start_step", "0"},
                     {"consistency", EventString(o.consistency.ToString())},
                     {"compression", EventString(o.compression.ToString())},
                     {"device", EventString("cpu")},
                     {"placement", EventString(absl::StrReplaceAll(placement, {{"\n", "; "}}))}}};
}

TrainEvent DoneEvent(int rank, const SpamTrainResult& r) {
  TrainEvent e{"done", {{"rank", Int(rank)}}};
  if (r.evaluated) {
    auto opt = [](const std::optional<double>& v) -> std::string { return v ? EventNumber(*v) : "null"; };
    e.fields.insert(e.fields.end(), {{"test_accuracy", opt(r.eval.accuracy)},
                                     {"test_loss", EventNumber(r.eval.loss)},
                                     {"test_auc", opt(r.eval.auc)}});
  }
  e.fields.insert(e.fields.end(), {{"samples", Int(r.samples)},
                                   {"steps", Int(r.steps)},
                                   {"wall_s", EventNumber(r.wall_s)},
                                   {"samples_per_s", EventNumber(r.wall_s > 0 ? r.samples / r.wall_s : 0)},
                                   {"wait_s", EventNumber(r.wait_s)},
                                   {"eval_s", EventNumber(r.eval_s)}});
  return e;
}

// Connects and registers the model; refuses to rejoin a running job.
absl::StatusOr<std::unique_ptr<KVClient>> Join(const SpamTrainerOptions& options) {
  // A bad placement is refused before anything connects.
  PS_RETURN_IF_ERROR(SpamModelSpec(options, kMaxServers).status());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<KVClient> client, KVClient::Connect(options.client));
  PS_ASSIGN_OR_RETURN(const ModelSpec model, SpamModelSpec(options, client->num_servers()));
  PS_RETURN_IF_ERROR(client->RegisterModel(model));
  PS_ASSIGN_OR_RETURN(const int64_t resume, client->ResumeStep());
  if (resume != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", client->rank(), " would resume at step ", resume,
        ": the spam trainer cannot rejoin a running job (its data order and evaluation state are not restored)"));
  }
  return client;
}

absl::StatusOr<SpamTrainResult> TrainWithCorpus(const SpamTrainerOptions& options,
                                                const std::vector<SpamMessage>& corpus,
                                                const std::function<void(const TrainEvent&)>& on_event) {
  PS_ASSIGN_OR_RETURN(TextClassifier model, TextClassifier::Create(options.model));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<KVClient> client, Join(options));
  PS_ASSIGN_OR_RETURN(SpamData data, LoadData(options, corpus, client->rank(), client->num_workers()));
  if (on_event) on_event(StartEvent(options, *client, data));
  SpamRun run(options, client.get(), std::move(model), std::move(data), on_event);
  PS_ASSIGN_OR_RETURN(const SpamTrainResult result, run.Go());
  PS_RETURN_IF_ERROR(FinishRun(client.get(), DoneEvent(client->rank(), result), on_event));
  return result;
}

}  // namespace

absl::Status SpamTrainerOptions::Validate() const {
  PS_RETURN_IF_ERROR(model.Validate());
  if (epochs < 1 || epochs > 100000) return absl::InvalidArgumentError(absl::StrCat("epochs: ", epochs));
  if (batch_size < 1 || batch_size > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size: ", batch_size, " not in [1, 65536]"));
  }
  for (auto [name, v] : {std::pair<const char*, float>{"row_lr", row_lr},
                         {"dense_lr", dense_lr},
                         {"eps", eps},
                         {"init_scale", init_scale}}) {
    if (!(v > 0) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", v, " must be positive and finite"));
    }
  }
  if (max_ids_per_request < 1 || max_ids_per_request > kMaxIdsPerRequest) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_ids_per_request: ", max_ids_per_request, " not in [1, ", kMaxIdsPerRequest, "]"));
  }
  if (tokens.max_tokens < 1) return absl::InvalidArgumentError("tokens.max_tokens: must be >= 1");
  if (progress_every <= absl::ZeroDuration()) return absl::InvalidArgumentError("progress_every: must be positive");
  return client.Validate();
}

absl::StatusOr<ModelSpec> SpamModelSpec(const SpamTrainerOptions& o, int num_servers) {
  ModelSpec model;
  model.tensors = DenseTensors(o);
  TableSpec table;
  table.name = kTokenTable;
  table.dim = o.model.dim;
  table.init = Initializer::Uniform(-o.init_scale, o.init_scale, o.seed);
  table.optimizer = Adagrad(o.row_lr, o.eps);
  table.admit_after = o.admit_after;
  model.tables.push_back(std::move(table));
  model.optimizer = Adagrad(o.dense_lr, o.eps);
  model.consistency = o.consistency;
  model.compression = o.compression;
  model.compress_min_bytes = o.compress_min_bytes;
  PS_ASSIGN_OR_RETURN(model.placement, ParsePlacement(o.placement, model.tensors, num_servers, o.slice_bytes));
  if (o.table_shards < 0 || o.table_shards > kMaxTableShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("table_shards: ", o.table_shards, " not in [0, ", kMaxTableShards, "]"));
  }
  model.placement.table_shards = static_cast<uint32_t>(o.table_shards);
  return model;
}

size_t MaxDistinctIdsPerMessage(const SpamTrainerOptions& o) {
  size_t per_request = o.max_ids_per_request;
  const uint64_t frame = o.client.security.max_frame_bytes;
  if (frame > 0) per_request = std::min<size_t>(per_request, frame / (8 + 4 * static_cast<uint64_t>(o.model.dim)));
  return std::max<size_t>(1, per_request / static_cast<size_t>(o.batch_size));
}

void KeepDistinctPrefix(size_t max_distinct, std::vector<uint64_t>* ids) {
  absl::flat_hash_set<uint64_t> seen;
  for (size_t i = 0; i < ids->size(); ++i) {
    if (seen.insert((*ids)[i]).second && seen.size() > max_distinct) {
      ids->resize(i);
      return;
    }
  }
}

int64_t SpamStepsPerEpoch(int64_t train_messages, int num_workers, int batch_size) {
  const int64_t per_worker = train_messages / num_workers;
  return (per_worker + batch_size - 1) / batch_size;
}

std::vector<std::pair<size_t, size_t>> IdChunks(const std::vector<LabeledTokens>& examples, size_t max_ids) {
  std::vector<std::pair<size_t, size_t>> chunks;
  absl::flat_hash_set<uint64_t> chunk, fresh;
  size_t begin = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    fresh.clear();
    for (uint64_t id : examples[i].ids) {
      if (!chunk.contains(id)) fresh.insert(id);
    }
    if (i > begin && chunk.size() + fresh.size() > max_ids) {
      chunks.emplace_back(begin, i);
      begin = i;
      chunk.clear();
      fresh.clear();
      fresh.insert(examples[i].ids.begin(), examples[i].ids.end());
    }
    chunk.insert(fresh.begin(), fresh.end());
  }
  if (begin < examples.size()) chunks.emplace_back(begin, examples.size());
  return chunks;
}

absl::StatusOr<SpamTrainResult> TrainSpam(const SpamTrainerOptions& options,
                                          const std::function<void(const TrainEvent&)>& on_event) {
  PS_RETURN_IF_ERROR(options.Validate());
  if (options.corpus != nullptr) return TrainWithCorpus(options, *options.corpus, on_event);
  // Read before connecting: a missing corpus fails before the job forms.
  PS_ASSIGN_OR_RETURN(const std::vector<SpamMessage> corpus, ReadSpamCorpus(options.data_dir));
  return TrainWithCorpus(options, corpus, on_event);
}

}  // namespace ps
