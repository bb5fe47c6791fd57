#include "worker/train/stage_trainer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "worker/models/mlp.h"
#include "worker/train/stage_link.h"
#include "worker/train/trainer_internal.h"

namespace ps {
namespace {

constexpr int kMaxStages = 64;
constexpr int kMaxMicroBatches = 1024;
// How often a stage waiting for a neighbour looks whether it is still alive.
constexpr absl::Duration kWatchEvery = absl::Milliseconds(250);

using Kind = StageLink::Kind;

// The share of a stage's busy time it spent waiting for its neighbours.
double Bubble(absl::Duration wait, absl::Duration compute) {
  const double busy = absl::ToDoubleSeconds(wait + compute);
  return busy > 0 ? absl::ToDoubleSeconds(wait) / busy : 0;
}

// Where a worker stands: stage `stage` of group `group`.
struct Place {
  int group = 0;
  int groups = 1;
  int stage = 0;
  int stages = 1;
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
  int RankOf(int s) const { return group * stages + s; }
  std::string Name(int s) const { return absl::StrCat("stage ", s, " of group ", group, " (worker ", RankOf(s), ")"); }
};

// One stage's run. Not thread-safe.
class Pipeline : private RunLog {
 public:
  Pipeline(const TrainerOptions& o, KVClient* client, MlpStage* stage, const Place& place, StageLink* prev,
           StageLink* next, const Dataset& train, const Dataset& test,
           const std::function<void(const TrainEvent&)>& on_event)
      : RunLog(o, client, on_event, StepsPerEpoch(train.count, place.groups, o.batch_size)),
        stage_(stage),
        place_(place),
        prev_(prev),
        next_(next),
        train_(train),
        test_(test),
        micro_rows_((o.batch_size + o.micro_batches - 1) / o.micro_batches),
        shard_(Shard(train.count, place.group, place.groups, o.seed)),
        x_(place.first() ? static_cast<size_t>(o.batch_size) * train.features() : 0),
        y_(o.batch_size) {}
  // A request in flight writes into the stage's buffers: wait for it first.
  ~Pipeline() {
    if (ticket_ != 0) (void)client_->Wait(ticket_);
  }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  absl::StatusOr<TrainResult> Go();
  int64_t steps_per_epoch() const { return steps_per_epoch_; }

 private:
  int Rows(int micro, int batch) const { return std::min(micro_rows_, batch - micro * micro_rows_); }
  // The step of `batch` samples from shard_[first].
  absl::Status Step(int64_t first, int batch);
  absl::Status Forward(int micro, int batch);
  // Micro-batch slot `slot` forward on `rows` rows: the input is `own` on
  // stage 0, else the next `kind` message (step, micro) from the previous
  // stage. The last stage adds its loss times rows to *loss and its right
  // answers to *correct; the others send their output on as `kind`.
  absl::Status ForwardOne(Kind kind, uint64_t step, int micro, int slot, int rows, const float* own,
                          const int32_t* labels, double* loss, int* correct);
  absl::Status Backward(int micro, int batch);
  // The step's loss and right answers: computed by the last stage, passed
  // back along the chain.
  absl::Status ShareStepResult(int batch);
  // The next message from the neighbour `neighbour` on `link`, which must
  // have `rows` rows of `cols`, watching that the neighbour is still in the job.
  absl::StatusOr<StageLink::Tensor> Receive(StageLink* link, int neighbour, Kind kind, uint64_t step, int micro,
                                            int rows, int cols);
  absl::Status Send(StageLink* link, Kind kind, uint64_t step, int micro, int rows, int cols, std::vector<float> data);
  void IssuePull(int64_t clock);
  void IssueExchange(int64_t clock);
  absl::Status Collect();
  // The test set's accuracy and mean loss into *result.
  absl::Status Evaluate(int epoch, bool final, Mlp::Evaluation* result);
  absl::Status EvaluateChunk(uint64_t eval, int chunk, double* loss, int64_t* correct);
  void ReportProgress(int epoch, bool force);
  bool EvaluatesNow(int64_t step_in_epoch) const;

  MlpStage* const stage_;
  const Place place_;
  StageLink* const prev_;  // null for stage 0
  StageLink* const next_;  // null for the last stage
  const Dataset& train_;
  const Dataset& test_;
  const int micro_rows_;
  std::vector<int64_t> shard_;
  std::vector<float> x_;    // stage 0: the step's images
  std::vector<int32_t> y_;  // the last stage: the step's labels
  KVClient::Ticket ticket_ = 0;
  uint64_t evals_ = 0;
  double step_loss_ = 0;  // the last stage: summed over the step's micro-batches
  int step_correct_ = 0;
  // What the training pipeline costs this stage (an evaluation's share is
  // not counted): forward and backward compute, waits for the neighbours,
  // bytes sent to them.
  struct LinkCounters {
    absl::Duration compute, wait;
    int64_t bytes_sent = 0;
  } counters_;
};

absl::StatusOr<StageLink::Tensor> Pipeline::Receive(StageLink* link, int neighbour, Kind kind, uint64_t step, int micro,
                                                    int rows, int cols) {
  const absl::Time t0 = absl::Now();
  const absl::Time deadline = t0 + o_.client.request_timeout;
  for (;;) {
    absl::StatusOr<StageLink::Tensor> got =
        link->Receive(kind, step, micro, cols, rows, std::min(kWatchEvery, deadline - absl::Now()));
    const bool waiting = !got.ok() && got.status().code() == absl::StatusCode::kDeadlineExceeded;
    if (!waiting) {
      counters_.wait += absl::Now() - t0;
      if (got.ok() && got->rows == rows) return got;
      const std::string why = got.ok() ? absl::StrCat("micro-batch ", micro, " of step ", step, " from ",
                                                      place_.Name(neighbour), " has ", got->rows, " rows, not ", rows)
                                       : std::string(got.status().message());
      return absl::Status(got.ok() ? absl::StatusCode::kInvalidArgument : got.status().code(),
                          absl::StrCat(place_.Name(place_.stage), ": ", why, "; its group cannot go on"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          place_.Name(place_.stage), ": nothing from ", place_.Name(neighbour), " for ",
          absl::FormatDuration(o_.client.request_timeout), " (--request_timeout) while it waited for micro-batch ",
          micro, " of step ", step, "; its group cannot go on"));
    }
    if (!client_->Worker(place_.RankOf(neighbour)).ok()) {
      return absl::UnavailableError(absl::StrCat(place_.Name(neighbour), " left the job; ", place_.Name(place_.stage),
                                                 " cannot go on without it: group ", place_.group,
                                                 " ends (the other groups go on)"));
    }
  }
}

absl::Status Pipeline::Send(StageLink* link, Kind kind, uint64_t step, int micro, int rows, int cols,
                            std::vector<float> data) {
  counters_.bytes_sent += static_cast<int64_t>(data.size() * sizeof(float));
  return link->Send(kind, step, micro, rows, cols, std::move(data));
}

absl::Status Pipeline::ForwardOne(Kind kind, uint64_t step, int micro, int slot, int rows, const float* own,
                                  const int32_t* labels, double* loss, int* correct) {
  StageLink::Tensor got;
  const float* input = own;
  if (!place_.first()) {
    PS_ASSIGN_OR_RETURN(got, Receive(prev_, place_.stage - 1, kind, step, micro, rows, stage_->in_width()));
    input = got.data().data();
  }
  const absl::Time t0 = absl::Now();
  if (place_.last()) {
    *loss += static_cast<double>(stage_->Forward(slot, input, rows, labels, nullptr, correct)) * rows;
    counters_.compute += absl::Now() - t0;
    return absl::OkStatus();
  }
  std::vector<float> out(static_cast<size_t>(rows) * stage_->out_width());
  stage_->Forward(slot, input, rows, nullptr, out.data(), nullptr);
  counters_.compute += absl::Now() - t0;
  return Send(next_, kind, step, micro, rows, stage_->out_width(), std::move(out));
}

absl::Status Pipeline::Forward(int micro, int batch) {
  const size_t offset = static_cast<size_t>(micro) * micro_rows_;
  const float* images = place_.first() ? x_.data() + offset * stage_->in_width() : nullptr;
  return ForwardOne(Kind::kActivations, clock_, micro, micro, Rows(micro, batch), images, y_.data() + offset,
                    &step_loss_, &step_correct_);
}

absl::Status Pipeline::Backward(int micro, int batch) {
  const int rows = Rows(micro, batch);
  StageLink::Tensor got;
  const float* grad_out = nullptr;
  if (!place_.last()) {
    PS_ASSIGN_OR_RETURN(got,
                        Receive(next_, place_.stage + 1, Kind::kGradients, clock_, micro, rows, stage_->out_width()));
    grad_out = got.data().data();
  }
  std::vector<float> grad_in(place_.first() ? 0 : static_cast<size_t>(rows) * stage_->in_width());
  const absl::Time t0 = absl::Now();
  stage_->Backward(micro, grad_out, place_.first() ? nullptr : grad_in.data());
  counters_.compute += absl::Now() - t0;
  if (place_.first()) return absl::OkStatus();
  return Send(prev_, Kind::kGradients, clock_, micro, rows, stage_->in_width(), std::move(grad_in));
}

absl::Status Pipeline::ShareStepResult(int batch) {
  const int micro = (batch + micro_rows_ - 1) / micro_rows_;  // after the step's last micro-batch
  if (!place_.last()) {
    PS_ASSIGN_OR_RETURN(StageLink::Tensor got,
                        Receive(next_, place_.stage + 1, Kind::kStepResult, clock_, micro, 1, 2));
    step_loss_ = got.data()[0];
    step_correct_ = static_cast<int>(got.data()[1]);
  }
  if (!place_.first()) {
    PS_RETURN_IF_ERROR(Send(prev_, Kind::kStepResult, clock_, micro, 1, 2,
                            {static_cast<float>(step_loss_), static_cast<float>(step_correct_)}));
  }
  if (!std::isfinite(step_loss_)) {
    return absl::InternalError(absl::StrCat("step ", clock_, ", ", place_.Name(place_.stage), ": loss is ", step_loss_,
                                            "; stopping instead of pushing garbage; lower --lr"));
  }
  return absl::OkStatus();
}

void Pipeline::IssuePull(int64_t clock) {
  const int base = 2 * stage_->range().first;
  std::vector<TensorBuffer> out;
  for (int t = 0; t < stage_->num_tensors(); ++t) out.push_back({base + t, stage_->host_param(t)});
  ticket_ = client_->Pull(out, clock);
}

void Pipeline::IssueExchange(int64_t clock) {
  const int base = 2 * stage_->range().first;
  std::vector<ConstTensorBuffer> grads;
  std::vector<TensorBuffer> params;
  for (int t = 0; t < stage_->num_tensors(); ++t) {
    grads.push_back({base + t, stage_->host_grad(t)});
    params.push_back({base + t, stage_->host_param(t)});
  }
  ticket_ = client_->PushPull(grads, params, clock);
}

absl::Status Pipeline::Collect() {
  if (ticket_ == 0) return absl::OkStatus();
  const absl::Time t0 = absl::Now();
  const absl::Status status = client_->Wait(ticket_);
  ticket_ = 0;
  waited_ += absl::Now() - t0;
  PS_RETURN_IF_ERROR(status);
  stage_->ParamsToDevice();
  return absl::OkStatus();
}

absl::Status Pipeline::Step(int64_t first, int batch) {
  const int f = train_.features();
  for (int i = 0; i < batch; ++i) {
    const int64_t idx = shard_[first + i];
    if (place_.first()) std::copy_n(train_.images.data() + idx * f, f, x_.data() + static_cast<size_t>(i) * f);
    y_[i] = train_.labels[idx];
  }
  PS_RETURN_IF_ERROR(Collect());
  stage_->BeginStep(batch);
  step_loss_ = 0;
  step_correct_ = 0;
  // 1F1B: K - 1 - k forward passes ahead, then one forward, one backward.
  const int n = (batch + micro_rows_ - 1) / micro_rows_;
  const int ahead = std::min(place_.stages - 1 - place_.stage, n);
  int forward = 0;
  while (forward < ahead) PS_RETURN_IF_ERROR(Forward(forward++, batch));
  for (int backward = 0; backward < n; ++backward) {
    if (forward < n) PS_RETURN_IF_ERROR(Forward(forward++, batch));
    PS_RETURN_IF_ERROR(Backward(backward, batch));
  }
  PS_RETURN_IF_ERROR(ShareStepResult(batch));
  stage_->FinishStep();
  IssueExchange(clock_);
  ++clock_;
  Count(batch, step_loss_, step_correct_);
  return absl::OkStatus();
}

absl::Status Pipeline::EvaluateChunk(uint64_t eval, int chunk, double* loss, int64_t* correct) {
  const int rows = static_cast<int>(std::min<int64_t>(micro_rows_, test_.count - int64_t{chunk} * micro_rows_));
  const size_t offset = static_cast<size_t>(chunk) * micro_rows_;
  const float* images = place_.first() ? test_.images.data() + offset * stage_->in_width() : nullptr;
  int right = 0;
  PS_RETURN_IF_ERROR(
      ForwardOne(Kind::kEvaluation, eval, chunk, 0, rows, images, test_.labels.data() + offset, loss, &right));
  *correct += right;
  return absl::OkStatus();
}

// The test set through the group's pipeline, in micro-batch chunks; the
// last stage's loss and accuracy come back to every stage.
absl::Status Pipeline::Evaluate(int epoch, bool final, Mlp::Evaluation* out) {
  const absl::Time t0 = absl::Now();
  const LinkCounters training = counters_;  // the evaluation's are not the training's
  const uint64_t eval = evals_++;
  const int chunks = static_cast<int>((test_.count + micro_rows_ - 1) / micro_rows_);
  double loss = 0;
  int64_t correct = 0;
  for (int c = 0; c < chunks; ++c) PS_RETURN_IF_ERROR(EvaluateChunk(eval, c, &loss, &correct));
  float result[2] = {static_cast<float>(loss / test_.count), static_cast<float>(correct) / test_.count};
  if (!place_.last()) {
    PS_ASSIGN_OR_RETURN(StageLink::Tensor got, Receive(next_, place_.stage + 1, Kind::kEvaluation, eval, chunks, 1, 2));
    std::copy_n(got.data().data(), 2, result);
  }
  if (!place_.first()) PS_RETURN_IF_ERROR(Send(prev_, Kind::kEvaluation, eval, chunks, 1, 2, {result[0], result[1]}));
  evaluating_ += absl::Now() - t0;
  counters_ = training;
  *out = Mlp::Evaluation{result[1], result[0]};
  EmitEval(epoch, final, result[1], result[0]);
  return absl::OkStatus();
}

void Pipeline::ReportProgress(int epoch, bool force) {
  MaybeReportProgress(epoch, force, [&] {
    return Fields{{"bubble", EventNumber(Bubble(counters_.wait, counters_.compute))}};
  });
}

bool Pipeline::EvaluatesNow(int64_t step_in_epoch) const {
  if (place_.group != 0 || clock_ >= steps_per_epoch_ * o_.epochs) return false;
  if (o_.eval_every > 0) return clock_ % o_.eval_every == 0;
  return step_in_epoch + 1 == steps_per_epoch_;
}

absl::StatusOr<TrainResult> Pipeline::Go() {
  Begin(0);  // stages never resume (RefuseResume)
  IssuePull(clock_);
  Mlp::Evaluation eval;
  for (int epoch = 1; epoch <= o_.epochs; ++epoch) {
    // Every stage of a group shuffles alike: stage 0's images and the last
    // stage's labels stay paired.
    std::mt19937_64 rng(o_.seed * 1000003 + epoch * 7919 + place_.group);
    std::shuffle(shard_.begin(), shard_.end(), rng);
    BeginEpoch();
    for (int64_t s = 0; s < steps_per_epoch_; ++s) {
      const int64_t first = s * o_.batch_size;
      PS_RETURN_IF_ERROR(Step(first, static_cast<int>(std::min<int64_t>(o_.batch_size, shard_.size() - first))));
      ReportProgress(epoch, false);
      if (!EvaluatesNow(s)) continue;
      PS_RETURN_IF_ERROR(Collect());  // evaluate the parameters the next step uses
      PS_RETURN_IF_ERROR(Evaluate(epoch, false, &eval));
      IssuePull(clock_);
    }
    ReportProgress(epoch, true);
  }
  PS_RETURN_IF_ERROR(Collect());
  const double train_s = absl::ToDoubleSeconds(absl::Now() - start_);
  PS_RETURN_IF_ERROR(client_->Barrier("train-done", o_.finish_timeout));
  IssuePull(clock_);
  PS_RETURN_IF_ERROR(Collect());
  PS_RETURN_IF_ERROR(Evaluate(o_.epochs, true, &eval));
  TrainResult r = Result(train_s);
  r.test_accuracy = eval.accuracy;
  r.test_loss = eval.loss;
  r.group = place_.group;
  r.stage = place_.stage;
  r.compute_s = absl::ToDoubleSeconds(counters_.compute);
  r.link_wait_s = absl::ToDoubleSeconds(counters_.wait);
  r.link_bytes_sent = counters_.bytes_sent;
  return r;
}

// This worker's links: stage k > 0 admits stage k - 1 on `listener`; once
// every stage has (a barrier: a dialer refused in the CURVE handshake is not
// let in later), stage k < K - 1 dials stage k + 1.
absl::Status Link(KVClient& client, const Place& place, const NodeSecurity& security, StageLink* listener,
                  std::unique_ptr<StageLink>* next) {
  if (!place.first()) {
    PS_ASSIGN_OR_RETURN(WorkerInfo prev, client.Worker(place.RankOf(place.stage - 1)));
    listener->Admit(prev.public_key);
  }
  PS_RETURN_IF_ERROR(client.Barrier("stage-links-admitted"));
  if (!place.last()) {
    PS_ASSIGN_OR_RETURN(WorkerInfo peer, client.Worker(place.RankOf(place.stage + 1)));
    PS_ASSIGN_OR_RETURN(*next, StageLink::Dial(peer.endpoint, security, peer.public_key, place.Name(place.stage + 1)));
  }
  return absl::OkStatus();
}

// A stage that has pushed already (it rejoins a running job, or the job
// resumes from checkpoints) is refused: the stages of its group would have
// to agree on the step to resume from, which is not built.
absl::Status RefuseResume(KVClient& client, const Place& place) {
  PS_ASSIGN_OR_RETURN(const int64_t pushed, client.ResumeStep());
  if (pushed == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      place.Name(place.stage), " has pushed up to step ", pushed,
      " of this job: a pipeline stage cannot rejoin a "
      "running job or resume one from checkpoints (its group would have to agree on the step); start the job afresh"));
}

absl::StatusOr<Place> PlaceOf(const KVClient& client, int stages) {
  if (client.num_workers() % stages != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--stages=", stages, " needs a multiple of ", stages,
                                                   " workers (groups of ", stages, " stages); the job has ",
                                                   client.num_workers()));
  }
  return Place{client.rank() / stages, client.num_workers() / stages, client.rank() % stages, stages};
}

TrainEvent StageStartEvent(const TrainerOptions& o, const KVClient& client, const Place& place, const MlpStage& stage,
                           int64_t shard, int64_t steps_per_epoch) {
  int64_t parameters = 0;  // the whole model's
  for (const TensorSpec& t : client.model().tensors) parameters += t.NumElements();
  return TrainEvent{"start",
                    {{"rank", absl::StrCat(client.rank())},
                     {"workers", absl::StrCat(client.num_workers())},
                     {"servers", absl::StrCat(client.num_servers())},
                     {"group", absl::StrCat(place.group)},
                     {"groups", absl::StrCat(place.groups)},
                     {"stage", absl::StrCat(place.stage)},
                     {"stages", absl::StrCat(place.stages)},
                     {"layers", EventString(absl::StrCat(stage.range().first, "..", stage.range().last - 1))},
                     {"micro_batches", absl::StrCat(o.micro_batches)},
                     {"parameters", absl::StrCat(parameters)},
                     {"stage_parameters", absl::StrCat(stage.NumParameters())},
                     {"shard", absl::StrCat(shard)},
                     {"steps_per_epoch", absl::StrCat(steps_per_epoch)},
                     {"epochs", absl::StrCat(o.epochs)},
                     {"total_steps", absl::StrCat(steps_per_epoch * o.epochs)},
                     {"start_step", "0"},
                     {"consistency", EventString(o.consistency.ToString())},
                     {"device", EventString(o.backend.device)},
                     {"placement", EventString(absl::StrReplaceAll(
                                       client.partition_map().Describe(client.model().tensors), {{"\n", "; "}}))}}};
}

TrainEvent StageDoneEvent(int rank, const TrainResult& r) {
  TrainEvent e = DoneEvent(rank, r);
  e.fields.insert(e.fields.end(),
                  {{"group", absl::StrCat(r.group)},
                   {"stage", absl::StrCat(r.stage)},
                   {"compute_s", EventNumber(r.compute_s)},
                   {"link_wait_s", EventNumber(r.link_wait_s)},
                   {"bubble", EventNumber(Bubble(absl::Seconds(r.link_wait_s), absl::Seconds(r.compute_s)))},
                   {"link_bytes_per_step", EventNumber(r.steps ? double(r.link_bytes_sent) / r.steps : 0)}});
  return e;
}

// The model every stage registers: all the layers, each tensor marked with
// its stage, placed over the job's servers by --placement.
absl::StatusOr<ModelSpec> StagedModel(const TrainerOptions& o, const std::vector<LayerRange>& ranges,
                                      int64_t train_count, const KVClient& client, int groups) {
  ModelSpec model;
  model.tensors = StagedTensorSpecs(o.layers, ranges, o.seed);
  model.stages = o.stages;
  model.consistency = o.consistency;
  model.optimizer = WithDecaySteps(o, train_count, groups);
  PS_ASSIGN_OR_RETURN(model.placement, ParsePlacement(o.placement, model.tensors, client.num_servers(), o.slice_bytes));
  return model;
}

// The backend of this worker's rank: with --gpu=-1 the GPU is the rank
// modulo the device count, and the rank is known only once joined (the
// backend made before that told a missing GPU early).
absl::Status BackendForRank(const TrainerOptions& o, int rank, std::unique_ptr<ComputeBackend>* backend) {
  if (o.backend.device != "cuda" || o.backend.gpu >= 0 || rank == o.backend.rank) return absl::OkStatus();
  BackendOptions by_rank = o.backend;
  by_rank.rank = rank;
  backend->reset();
  PS_ASSIGN_OR_RETURN(*backend, CreateBackend(by_rank));
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateStageOptions(const TrainerOptions& o) {
  if (o.stages < 1 || o.stages > kMaxStages) {
    return absl::InvalidArgumentError(absl::StrCat("stages: ", o.stages, " not in [1, ", kMaxStages, "]"));
  }
  if (o.micro_batches < 1 || o.micro_batches > std::min(kMaxMicroBatches, o.batch_size)) {
    return absl::InvalidArgumentError(absl::StrCat("micro_batches: ", o.micro_batches, " not in [1, ",
                                                   std::min(kMaxMicroBatches, o.batch_size), "] (the batch size)"));
  }
  if (o.stages > 1 && (o.pipeline || o.straggler_rank >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("stages: --stages=", o.stages, " does not combine with ",
                                                   o.pipeline ? "--pipeline" : "--straggler"));
  }
  if (!o.stage_layers.empty() && static_cast<int>(o.stage_layers.size()) != o.stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage_layers: ", o.stage_layers.size(), " counts for ", o.stages, " stages"));
  }
  if (static_cast<int>(o.layers.size()) - 1 < o.stages) {
    return absl::InvalidArgumentError(absl::StrCat("stages: ", o.stages,
                                                   " stages need at least as many layers; the "
                                                   "model has ",
                                                   o.layers.size() - 1));
  }
  return absl::OkStatus();
}

std::vector<TensorSpec> StagedTensorSpecs(const std::vector<int>& layers, const std::vector<LayerRange>& ranges,
                                          uint64_t seed) {
  std::vector<TensorSpec> all;
  for (size_t k = 0; k < ranges.size(); ++k) {
    for (TensorSpec& t : MlpStage::LayerSpecs(layers, ranges[k], seed, static_cast<int>(k)))
      all.push_back(std::move(t));
  }
  return all;
}

absl::StatusOr<TrainResult> TrainStages(const TrainerOptions& o,
                                        const std::function<void(const TrainEvent&)>& on_event) {
  PS_ASSIGN_OR_RETURN(Dataset train, Limit(LoadFashionMnist(o.data_dir, "train"), o.train_limit));
  PS_ASSIGN_OR_RETURN(Dataset test, Limit(LoadFashionMnist(o.data_dir, "t10k"), o.test_limit));
  PS_RETURN_IF_ERROR(CheckLayers(o, train));
  PS_ASSIGN_OR_RETURN(std::vector<LayerRange> ranges, o.stage_layers.empty()
                                                          ? BalanceStages(o.layers, o.stages)
                                                          : StagesOfCounts(o.layers, o.stage_layers));
  // A bad placement is refused before anything connects.
  PS_RETURN_IF_ERROR(
      ParsePlacement(o.placement, StagedTensorSpecs(o.layers, ranges, o.seed), kMaxServers, o.slice_bytes).status());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ComputeBackend> backend, CreateBackend(o.backend));
  PS_ASSIGN_OR_RETURN(NodeSecurity security, NodeSecurity::Load(o.client.security, Role::kWorker));
  // Bound (and announced) before joining; the predecessor is admitted once
  // the cluster view names it.
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<StageLink> listener,
      StageLink::Listen(absl::StrCat("tcp://", o.stage_host, ":0"), o.stage_host, security, "", "the previous stage"));
  KVClientOptions client_options = o.client;
  client_options.advertise = listener->endpoint();
  PS_ASSIGN_OR_RETURN(std::unique_ptr<KVClient> client, KVClient::Connect(client_options));
  PS_ASSIGN_OR_RETURN(const Place place, PlaceOf(*client, o.stages));
  PS_RETURN_IF_ERROR(BackendForRank(o, client->rank(), &backend));
  const int micro_rows = (o.batch_size + o.micro_batches - 1) / o.micro_batches;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<MlpStage> stage,
                      MlpStage::Create(o.layers, ranges[place.stage], micro_rows, o.micro_batches, backend.get()));
  PS_ASSIGN_OR_RETURN(const ModelSpec model, StagedModel(o, ranges, train.count, *client, place.groups));
  PS_RETURN_IF_ERROR(client->RegisterModel(model));
  PS_RETURN_IF_ERROR(RefuseResume(*client, place));
  std::unique_ptr<StageLink> next;
  PS_RETURN_IF_ERROR(Link(*client, place, security, listener.get(), &next));
  if (!place.first()) {  // only stage 0 reads images
    train.images = std::vector<float>();
    test.images = std::vector<float>();
  }
  Pipeline run(o, client.get(), stage.get(), place, place.first() ? nullptr : listener.get(), next.get(), train, test,
               on_event);
  if (on_event) {
    on_event(StageStartEvent(o, *client, place, *stage, train.count / place.groups, run.steps_per_epoch()));
  }
  ResetPeakRss();
  PS_ASSIGN_OR_RETURN(TrainResult result, run.Go());
  result.peak_rss_bytes = PeakRssBytes();
  result.shm_servers = client->stats().shm_servers;
  PS_RETURN_IF_ERROR(FinishRun(client.get(), StageDoneEvent(client->rank(), result), on_event));
  return result;
}

}  // namespace ps
