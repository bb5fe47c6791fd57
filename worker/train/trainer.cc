#include "worker/train/trainer.h"

#include <malloc.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"
#include "worker/client/model_init.h"
#include "worker/client/push_buffers.h"
#include "worker/models/mlp.h"
#include "worker/train/push_pool_memory.h"
#include "worker/train/stage_trainer.h"
#include "worker/train/trainer_internal.h"

namespace ps {
namespace {

// Event values are JSON rendered here (TrainEvent::fields).
std::string Num(double v) { return EventNumber(v); }
std::string Str(absl::string_view s) { return EventString(s); }

class Run : private RunLog {
 public:
  // `pool` gives each step's gradients their own buffers (pushes keep them
  // without a copy); it allocates the backend's host memory from `memory`,
  // which says when that failed.
  Run(const TrainerOptions& options, KVClient* client, Mlp* mlp, PushBufferPool* pool, const PushPoolMemory* memory,
      const Dataset& train, const Dataset& test, const std::function<void(const TrainEvent&)>& on_event)
      : RunLog(options, client, on_event, StepsPerEpoch(train.count, client->num_workers(), options.batch_size)),
        mlp_(mlp),
        pool_(pool),
        pool_memory_(memory),
        lent_(mlp->num_tensors()),
        train_(train),
        test_(test),
        pipelined_(options.pipeline),
        ready_(mlp->num_layers()),
        later_(mlp->num_layers()),
        shard_(Shard(train.count, client->rank(), client->num_workers(), options.seed)),
        x_(static_cast<size_t>(o_.batch_size) * train.features()),
        y_(o_.batch_size),
        straggler_(client->rank() == options.straggler_rank && options.straggler_factor > 1) {
    if (!pipelined_) {
      CutIntoPieces();
      return;
    }
    for (int set = 0; set < 2; ++set) {
      for (int t = 0; t < mlp->num_tensors(); ++t) shadow_[set].emplace_back(mlp->host_param(t).size());
    }
  }

  // Exchanges still in flight (a run that ends with an error) write into and
  // send from this object's buffers: wait for each (bounded by the request
  // timeout) before they go.
  ~Run() {
    for (auto* exchanges : {&ready_, &later_}) {
      for (Exchange& e : *exchanges) {
        if (e.ticket != 0) (void)client_->Wait(e.ticket);
      }
    }
    for (auto& pieces : pieces_) {
      for (const Piece& p : pieces) (void)client_->Wait(p.ticket);
    }
  }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  // Trains from step `start` (a rejoining worker resumes mid-run; the
  // shard's order in each epoch depends only on the seed, epoch and rank).
  absl::StatusOr<TrainResult> Go(int64_t start);
  int64_t steps_per_epoch() const { return steps_per_epoch_; }

 private:
  // A request bringing a layer's parameters: into host_param directly
  // (shadow < 0), or into shadow_[shadow], copied over when collected.
  struct Exchange {
    KVClient::Ticket ticket = 0;
    int shadow = -1;
  };

  // A part of a layer's weight in flight: its slices up to element `end`.
  struct Piece {
    KVClient::Ticket ticket = 0;
    uint64_t end = 0;
  };

  // Without pipelining: a layer whose weight spans several slices is
  // computed and exchanged in pieces (Mlp::SetWeightPieces), one per slice,
  // as P3 does: the first slices' gradients travel and are applied while
  // the backward pass computes the rest (on a device, each piece's download
  // on its own stream), and the next forward pass starts on the first
  // slices' parameters while the last arrive (on a device, each piece
  // uploaded as it lands).
  void CutIntoPieces();
  // Rows [0, end_row) of `layer`'s weight gradient are ready: pushes the
  // slices that lie within them, each pulling its next parameters.
  void IssuePiece(int layer, int end_row, int64_t clock);
  // The forward pass needs rows [0, end_row) of `layer`'s weight (all rows:
  // and the bias): waits for the pieces, or the whole exchange, bringing them.
  void WaitRows(int layer, int end_row);
  absl::Status WaitLayers();
  // Every exchange of `exchanges`; with `skip_pieced`, not those of layers
  // in pieces (the forward pass waits for those itself).
  absl::Status Collect(std::vector<Exchange>& exchanges, bool skip_pieced = false);
  absl::Status CollectPieces();
  void IssuePull(int64_t clock);
  void IssueExchange(int layer, int64_t clock);
  absl::Status Step(int epoch, int64_t first, int batch);
  void ReportProgress(int epoch, bool force);
  void Evaluate(int epoch, bool final, Mlp::Evaluation* out);
  // A mid-run evaluation of the parameters the next step would use.
  absl::Status EvaluateNow(int epoch, Mlp::Evaluation* out);

  // A "span" event of this step from t0 to t1 when it is traced
  // (TrainerOptions::trace_steps); `layer` -1: all of them.
  void Trace(const char* what, int layer, absl::Time t0, absl::Time t1) const;
  // A point of the timeline (a push sent) now.
  void Mark(const char* what, int layer) const;
  bool Traced() const { return clock_ >= o_.trace_from && clock_ < o_.trace_from + o_.trace_steps; }
  // This step's gradients go to buffers of their own (LendGrads), which its
  // pushes keep, without a copy, for as long as they may be sent again.
  void LendGrads();
  ConstTensorBuffer Grad(int t, uint64_t from, uint64_t n) const;
  ConstTensorBuffer Grad(int t) const { return Grad(t, 0, mlp_->host_grad(t).size()); }

  Mlp* const mlp_;
  PushBufferPool* const pool_;
  const PushPoolMemory* const pool_memory_;
  std::vector<std::shared_ptr<float>> lent_;  // per tensor: this step's gradient buffer
  const Dataset& train_;
  const Dataset& test_;
  // Pipelined (async, ssp:K>=1): step t+2 computes with the parameters the
  // exchange of step t pulled, so that exchange has all of step t+1 to
  // travel, and no worker waits on the network while it could compute. Each
  // of the two exchanges in flight has its own parameter copies (and every
  // step its own gradient buffers).
  const bool pipelined_;
  std::vector<Exchange> ready_;                            // per layer: what the next step computes with
  std::vector<Exchange> later_;                            // pipelined: per layer, issued last step
  std::array<std::vector<std::vector<float>>, 2> shadow_;  // [set][tensor]
  std::vector<int64_t> shard_;
  std::vector<float> x_;
  std::vector<int32_t> y_;
  absl::Duration straggled_;
  const bool straggler_;
  absl::Duration compute_ema_;  // of TrainStep
  // Layers in pieces: where each weight slice ends (empty: a whole layer),
  // how many this step has pushed, the pieces in flight, and how far the
  // weight is known to be in host_param (kAll: and the bias).
  static constexpr uint64_t kAll = ~uint64_t{0};
  std::vector<std::vector<uint64_t>> slice_ends_;
  std::vector<size_t> pushed_;
  std::vector<std::vector<Piece>> pieces_;
  std::vector<uint64_t> arrived_;
  std::vector<int> uploaded_;  // a device's: the rows of each layer's weight uploaded this step
  absl::Status piece_status_;  // the first failed wait of a piece
};

void Run::CutIntoPieces() {
  const int layers = mlp_->num_layers();
  slice_ends_.resize(layers);
  pushed_.assign(layers, 0);
  pieces_.resize(layers);
  arrived_.assign(layers, 0);
  uploaded_.assign(layers, 0);
  const PartitionMap& map = client_->partition_map();
  for (int layer = 0; layer < layers; ++layer) {
    const absl::Span<const uint32_t> keys = map.SlicesOfTensor(2 * layer);
    if (keys.size() < 2) continue;
    const uint64_t out = static_cast<uint64_t>(mlp_->layers()[layer + 1]);
    std::vector<int> rows;
    for (uint32_t key : keys) {
      const uint64_t end = map.slices()[key].offset + map.slices()[key].length;
      slice_ends_[layer].push_back(end);
      const int row = static_cast<int>((end + out - 1) / out);  // the row holding its last element, + 1
      if (rows.empty() || rows.back() < row) rows.push_back(row);
    }
    const absl::Status cut = mlp_->SetWeightPieces(layer, rows);
    CHECK(cut.ok()) << cut;  // the rows come from the slices, which tile the weight
  }
}

void Run::Mark(const char* what, int layer) const {
  if (!Traced()) return;  // no clock read on the steps not traced
  const absl::Time now = absl::Now();
  Trace(what, layer, now, now);
}

void Run::Trace(const char* what, int layer, absl::Time t0, absl::Time t1) const {
  if (!Traced()) return;
  Emit("span", {{"step", absl::StrCat(clock_)},
                {"what", Str(what)},
                {"layer", absl::StrCat(layer)},
                {"start_us", absl::StrCat(absl::ToInt64Microseconds(t0 - start_))},
                {"end_us", absl::StrCat(absl::ToInt64Microseconds(t1 - start_))}});
}

void Run::LendGrads() {
  for (int t = 0; t < mlp_->num_tensors(); ++t) {
    lent_[t] = pool_->Take(mlp_->host_grad(t).size());
    mlp_->SetHostGrad(t, lent_[t].get());
  }
}

ConstTensorBuffer Run::Grad(int t, uint64_t from, uint64_t n) const {
  return {t, mlp_->host_grad(t).subspan(from, n), from, lent_[t]};
}

void Run::IssuePiece(int layer, int end_row, int64_t clock) {
  if (!piece_status_.ok()) return;  // this step fails; push nothing computed from it
  const uint64_t done = static_cast<uint64_t>(end_row) * mlp_->layers()[layer + 1];
  const std::vector<uint64_t>& ends = slice_ends_[layer];
  size_t& k = pushed_[layer];
  if (k == 0) arrived_[layer] = uploaded_[layer] = 0;  // this step's exchange begins
  const uint64_t from = k == 0 ? 0 : ends[k - 1];
  while (k < ends.size() && ends[k] <= done) ++k;
  if (k == 0 || ends[k - 1] == from) return;  // no slice complete yet
  const int w = 2 * layer;
  const uint64_t n = ends[k - 1] - from;
  const ConstTensorBuffer grads[] = {Grad(w, from, n)};
  TensorBuffer params[] = {{w, mlp_->host_param(w).subspan(from, n), from}};
  pieces_[layer].push_back({client_->PushPull(grads, params, clock), ends[k - 1]});
  Mark("push", layer);
}

void Run::WaitRows(int layer, int end_row) {
  const absl::Time t0 = absl::Now();
  const bool all = end_row == mlp_->layers()[layer];
  const uint64_t need = all ? kAll : static_cast<uint64_t>(end_row) * mlp_->layers()[layer + 1];
  std::vector<Piece>& pieces = pieces_[layer];
  size_t i = 0;
  for (; i < pieces.size() && arrived_[layer] < need && piece_status_.ok(); ++i) {
    piece_status_.Update(client_->Wait(pieces[i].ticket));
    arrived_[layer] = pieces[i].end;
  }
  pieces.erase(pieces.begin(), pieces.begin() + static_cast<std::ptrdiff_t>(i));
  if (arrived_[layer] < need && piece_status_.ok()) {  // the bias, or a whole pull
    Exchange& e = ready_[layer];
    if (e.ticket != 0) piece_status_.Update(client_->Wait(e.ticket));
    e = Exchange{};
    arrived_[layer] = kAll;
  }
  // A device computes from its own copy: the rows here now go up as they
  // land (the bias with the last), on the backend's upload stream.
  if (piece_status_.ok() && end_row > uploaded_[layer]) {
    mlp_->RowsToDevice(layer, uploaded_[layer], end_row);
    uploaded_[layer] = end_row;
  }
  const absl::Time t1 = absl::Now();
  waited_ += t1 - t0;
  Trace("wait", layer, t0, t1);
}

absl::Status Run::CollectPieces() {
  for (int layer = 0; layer < static_cast<int>(pieces_.size()); ++layer) {
    if (!slice_ends_[layer].empty()) WaitRows(layer, mlp_->layers()[layer]);
  }
  return piece_status_;
}

void Run::IssuePull(int64_t clock) {
  // The pull writes host_param, which an upload may still be reading from.
  mlp_->Synchronize();
  for (int layer = 0; layer < mlp_->num_layers(); ++layer) {
    TensorBuffer out[] = {{2 * layer, mlp_->host_param(2 * layer)}, {2 * layer + 1, mlp_->host_param(2 * layer + 1)}};
    ready_[layer] = Exchange{client_->Pull(out, clock), -1};
    if (!arrived_.empty()) arrived_[layer] = uploaded_[layer] = 0;
  }
}

// Called as soon as the backward pass is done with `layer`: pushes its
// gradients, and the pull of its next parameters rides on the same request.
void Run::IssueExchange(int layer, int64_t clock) {
  const int w = 2 * layer, b = 2 * layer + 1;
  Mark("push", layer);
  if (!pipelined_ && !slice_ends_[layer].empty()) {  // the weight went in pieces
    pushed_[layer] = 0;
    if (!piece_status_.ok()) return;
    const ConstTensorBuffer grads[] = {Grad(b)};
    TensorBuffer params[] = {{b, mlp_->host_param(b)}};
    ready_[layer] = Exchange{client_->PushPull(grads, params, clock), -1};
    return;
  }
  const ConstTensorBuffer grads[] = {Grad(w), Grad(b)};
  if (!pipelined_) {
    TensorBuffer params[] = {{w, mlp_->host_param(w)}, {b, mlp_->host_param(b)}};
    ready_[layer] = Exchange{client_->PushPull(grads, params, clock), -1};
    return;
  }
  // The next step computes its gradients in buffers of its own while this
  // push may still be on its way (LendGrads).
  const int set = static_cast<int>(clock % 2);
  TensorBuffer params[] = {{w, absl::MakeSpan(shadow_[set][w])}, {b, absl::MakeSpan(shadow_[set][b])}};
  // Asks for the parameters as of the step that will use them, so an ssp
  // bound holds for that step.
  later_[layer] =
      Exchange{client_->Exchange({.push = grads, .step = clock, .pull = params, .pull_step = clock + 2}), set};
}

absl::Status Run::Collect(std::vector<Exchange>& exchanges, bool skip_pieced) {
  if (!skip_pieced) PS_RETURN_IF_ERROR(CollectPieces());
  const absl::Time t0 = absl::Now();
  for (int layer = 0; layer < mlp_->num_layers(); ++layer) {
    Exchange& e = exchanges[layer];
    if (e.ticket == 0 || (skip_pieced && !slice_ends_[layer].empty())) continue;
    const absl::Time waiting = absl::Now();
    const absl::Status status = client_->Wait(e.ticket);
    if (Traced()) Trace("wait", layer, waiting, absl::Now());
    e.ticket = 0;  // answered or failed: nothing is in flight for it any more
    PS_RETURN_IF_ERROR(status);
    if (e.shadow >= 0) {
      for (int t : {2 * layer, 2 * layer + 1}) {
        const std::vector<float>& from = shadow_[e.shadow][t];
        std::copy(from.begin(), from.end(), mlp_->host_param(t).begin());
      }
    }
    mlp_->ParamsToDevice(layer);
    e = Exchange{};
  }
  waited_ += absl::Now() - t0;
  return absl::OkStatus();
}

// Layer by layer, so the forward pass of layer 0 could start while the
// parameters of later layers are still arriving.
absl::Status Run::WaitLayers() { return Collect(ready_, /*skip_pieced=*/!pipelined_); }

absl::Status Run::Step(int epoch, int64_t first, int batch) {
  const int f = train_.features();
  for (int i = 0; i < batch; ++i) {
    const int64_t idx = shard_[first + i];
    std::copy_n(train_.images.data() + idx * f, f, x_.data() + static_cast<size_t>(i) * f);
    y_[i] = train_.labels[idx];
  }
  PS_RETURN_IF_ERROR(WaitLayers());
  // Pipelined: ready_ held the exchange of step t-2, now collected; the one
  // of step t-1 becomes what step t+1 computes with, and this step's goes
  // into the emptied later_.
  if (pipelined_) std::swap(ready_, later_);
  const int64_t clock = clock_;
  if (straggler_) {
    const absl::Duration extra = (o_.straggler_factor - 1) * compute_ema_;
    absl::SleepFor(extra);
    straggled_ += extra;
  }
  int correct = 0;
  const absl::Time t0 = absl::Now();
  LendGrads();
  // A buffer the backend could not give (pinned memory): the run ends with
  // that error before the model writes there.
  PS_RETURN_IF_ERROR(pool_memory_->failure());
  Mlp::StepHooks hooks{.layer_done = [&](int layer) { IssueExchange(layer, clock); }};
  if (!pipelined_) {
    hooks.rows_done = [&](int layer, int end_row) { IssuePiece(layer, end_row, clock); };
    hooks.need_rows = [&](int layer, int end_row) { WaitRows(layer, end_row); };
  }
  const float loss = mlp_->TrainStep(x_.data(), y_.data(), batch, hooks, &correct);
  PS_RETURN_IF_ERROR(piece_status_);
  const absl::Time t1 = absl::Now();
  Trace("compute", -1, t0, t1);  // the waits for pieces within it included
  // A moving average keeps the emulated slowness steady through noise.
  const absl::Duration took = t1 - t0;
  compute_ema_ = clock == 0 ? took : compute_ema_ * 0.9 + took * 0.1;
  ++clock_;
  if (!std::isfinite(loss)) {
    return absl::InternalError(absl::StrCat("step ", clock, " (epoch ", epoch, ") worker ", client_->rank(),
                                            ": loss is ", loss,
                                            "; stopping instead of pushing garbage "
                                            "(the servers refuse non-finite gradients); lower --lr"));
  }
  Count(batch, static_cast<double>(loss) * batch, correct);
  return absl::OkStatus();
}

void Run::ReportProgress(int epoch, bool force) {
  MaybeReportProgress(epoch, force, [&] { return Fields{{"straggle_s", Num(absl::ToDoubleSeconds(straggled_))}}; });
}

void Run::Evaluate(int epoch, bool final, Mlp::Evaluation* out) {
  const absl::Time t0 = absl::Now();
  *out = mlp_->Evaluate(test_.images.data(), test_.labels.data(), test_.count);
  evaluating_ += absl::Now() - t0;
  EmitEval(epoch, final, out->accuracy, out->loss);
}

absl::Status Run::EvaluateNow(int epoch, Mlp::Evaluation* out) {
  if (pipelined_) {  // host_param already holds them; the exchanges stay in flight
    Evaluate(epoch, false, out);
    return absl::OkStatus();
  }
  // Every parameter in place first, the pieces of a layer exchanged in pieces
  // included (WaitLayers leaves those to the forward pass, which waits for
  // each as it needs it; the evaluation does not): the evaluation once read
  // such a layer while its pieces' pulls were still landing.
  PS_RETURN_IF_ERROR(Collect(ready_));
  Evaluate(epoch, false, out);
  IssuePull(clock_);  // the wait used up the tickets of the next step
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> Run::Go(int64_t start) {
  Begin(start);
  IssuePull(clock_);
  Mlp::Evaluation eval;
  for (int epoch = static_cast<int>(start / steps_per_epoch_) + 1; epoch <= o_.epochs; ++epoch) {
    std::mt19937_64 rng(o_.seed * 1000003 + epoch * 7919 + client_->rank());
    std::shuffle(shard_.begin(), shard_.end(), rng);
    BeginEpoch();
    for (int64_t s = clock_ - (epoch - 1) * steps_per_epoch_; s < steps_per_epoch_; ++s) {
      const int64_t first = s * o_.batch_size;
      const int batch = static_cast<int>(std::min<int64_t>(o_.batch_size, shard_.size() - first));
      PS_RETURN_IF_ERROR(Step(epoch, first, batch));
      ReportProgress(epoch, false);
      const bool interval = o_.eval_every > 0 && clock_ % o_.eval_every == 0;
      if (client_->rank() == 0 && interval && clock_ < steps_per_epoch_ * o_.epochs) {
        PS_RETURN_IF_ERROR(EvaluateNow(epoch, &eval));
      }
    }
    ReportProgress(epoch, true);
    if (client_->rank() == 0 && o_.eval_every == 0 && epoch < o_.epochs) {
      PS_RETURN_IF_ERROR(EvaluateNow(epoch, &eval));
    }
  }
  PS_RETURN_IF_ERROR(Collect(ready_));
  PS_RETURN_IF_ERROR(Collect(later_));
  const double train_s = absl::ToDoubleSeconds(absl::Now() - start_);
  // Everyone's last push is in: the final parameters are the same for all.
  PS_RETURN_IF_ERROR(client_->Barrier("train-done", o_.finish_timeout));
  IssuePull(clock_);
  PS_RETURN_IF_ERROR(WaitLayers());
  Evaluate(o_.epochs, true, &eval);
  TrainResult r = Result(train_s);
  r.test_accuracy = eval.accuracy;
  r.test_loss = eval.loss;
  r.straggle_s = absl::ToDoubleSeconds(straggled_);
  return r;
}

}  // namespace

std::vector<int64_t> Shard(int64_t n, int rank, int workers, uint64_t seed) {
  std::vector<int64_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  const int64_t size = n / workers;
  return std::vector<int64_t>(all.begin() + rank * size, all.begin() + (rank + 1) * size);
}

absl::Status CheckLayers(const TrainerOptions& o, const Dataset& train) {
  if (o.layers.front() != train.features()) {
    return absl::InvalidArgumentError(absl::StrCat("layers: first layer is ", o.layers.front(), " but the images have ",
                                                   train.features(), " pixels"));
  }
  if (o.layers.back() != 10) {
    return absl::InvalidArgumentError(
        absl::StrCat("layers: last layer is ", o.layers.back(), " but Fashion-MNIST has 10 classes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> Limit(absl::StatusOr<Dataset> data, int64_t limit) {
  if (!data.ok() || limit <= 0 || limit >= data->count) return data;
  data->count = limit;
  data->images.resize(static_cast<size_t>(limit) * data->features());
  data->images.shrink_to_fit();  // the rest is not kept resident
  data->labels.resize(limit);
  data->labels.shrink_to_fit();
  return data;
}

void ResetPeakRss() {
  malloc_trim(0);  // hand back the heap the data set's decoding freed
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

int64_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    int64_t kib = 0;
    if (absl::StartsWith(line, "VmHWM:") &&
        absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(line.substr(6)), " kB"), &kib)) {
      return kib * 1024;
    }
  }
  return 0;
}

absl::Status ParseStraggler(const std::string& flag, TrainerOptions* options) {
  if (flag.empty()) return absl::OkStatus();
  std::vector<std::string> parts = absl::StrSplit(flag, ':');
  int rank = -1;
  double factor = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &rank) || !absl::SimpleAtod(parts[1], &factor) || rank < 0 ||
      !(factor >= 1 && factor <= 1000)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "straggler: expected RANK:FACTOR with RANK >= 0 and FACTOR in [1, 1000] (e.g. 1:3), got '", flag, "'"));
  }
  options->straggler_rank = rank;
  options->straggler_factor = factor;
  return absl::OkStatus();
}

OptimizerConfig TrainerOptions::DefaultOptimizer() {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.learning_rate = 1e-3f;
  c.lr_schedule = LrSchedule::kCosine;
  c.min_lr_ratio = 0.05f;
  return c;
}

absl::Status TrainerOptions::Validate() const {
  if (layers.size() < 2) return absl::InvalidArgumentError("layers: need at least an input and an output size");
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 1 || layers[i] > 65536) {
      return absl::InvalidArgumentError(absl::StrCat("layers: size ", i, " is ", layers[i], "; must be in [1, 65536]"));
    }
  }
  if (batch_size < 1 || batch_size > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size: ", batch_size, " not in [1, 65536]"));
  }
  if (epochs < 1 || epochs > 100000) return absl::InvalidArgumentError(absl::StrCat("epochs: ", epochs));
  if (eval_every < 0) return absl::InvalidArgumentError(absl::StrCat("eval_every: ", eval_every));
  if (trace_from < 0 || trace_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("trace: from ", trace_from, ", ", trace_steps, " steps"));
  }
  if (train_limit < 0 || test_limit < 0) return absl::InvalidArgumentError("train_limit/test_limit: negative");
  if (progress_every <= absl::ZeroDuration()) return absl::InvalidArgumentError("progress_every: must be positive");
  if (!init_from.empty() && stages > 1) {
    return absl::InvalidArgumentError("init_from: not with pipeline stages (stages > 1) yet");
  }
  if (!(straggler_factor >= 1 && straggler_factor <= 1000)) {
    return absl::InvalidArgumentError(absl::StrCat("straggler factor ", straggler_factor, " not in [1, 1000]"));
  }
  const bool may_pipeline = consistency.mode == ConsistencyMode::kAsync ||
                            (consistency.mode == ConsistencyMode::kSsp && consistency.staleness >= 1);
  if (pipeline && !may_pipeline) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline: computing on parameters one exchange old needs async or ssp:K with K >= 1, not ",
                     consistency.ToString()));
  }
  OptimizerConfig probe = optimizer;
  if (probe.lr_schedule == LrSchedule::kCosine && probe.decay_steps == 0) probe.decay_steps = 1;
  PS_RETURN_IF_ERROR(probe.Validate());
  PS_RETURN_IF_ERROR(ValidateStageOptions(*this));
  return client.Validate();
}

absl::StatusOr<PlacementSpec> ParsePlacement(const std::string& flag, const std::vector<TensorSpec>& tensors,
                                             int num_servers, uint64_t slice_bytes) {
  PlacementSpec p;
  p.slice_bytes = slice_bytes;
  if (flag == "auto") return p;
  if (flag == "layer") {
    p.rule = PlacementRule::kLayer;
    return p;
  }
  std::ifstream in(flag);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("placement: '", flag, "' is not auto, layer or a readable file"));
  }
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::string_view text = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (text.empty()) continue;
    std::vector<std::string> parts = absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    int rank = -1;
    const std::string where = absl::StrCat("placement file ", flag, " line ", number, ": ");
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &rank)) {
      return absl::InvalidArgumentError(absl::StrCat(where, "expected 'tensor_name server_rank', got '", text, "'"));
    }
    const bool known =
        std::any_of(tensors.begin(), tensors.end(), [&](const TensorSpec& t) { return t.name == parts[0]; });
    if (!known) return absl::InvalidArgumentError(absl::StrCat(where, "no tensor named '", parts[0], "' in the model"));
    if (rank < 0 || rank >= num_servers) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "server ", rank, " does not exist (the job has ", num_servers, " servers)"));
    }
    if (!p.explicit_ranks.emplace(parts[0], rank).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, "tensor '", parts[0], "' placed twice"));
    }
  }
  return p;
}

// The optimizer configuration, its learning-rate decay (when not given)
// spread over every update of the run: every push is an update of a slice
// except in sync mode, where the W pushes of a step make one.
OptimizerConfig WithDecaySteps(const TrainerOptions& options, int64_t train_count, int num_workers) {
  OptimizerConfig config = options.optimizer;
  if (config.decay_steps != 0) return config;
  const int64_t steps_per_epoch = (train_count / num_workers + options.batch_size - 1) / options.batch_size;
  const int64_t per_step = options.consistency.mode == ConsistencyMode::kSync ? 1 : num_workers;
  config.decay_steps = static_cast<uint64_t>(steps_per_epoch * options.epochs * per_step);
  return config;
}

// The "start" event: who this worker is in the job, and the run ahead.
TrainEvent StartEvent(const TrainerOptions& options, const KVClient& client, const Mlp& mlp, const std::string& device,
                      int64_t shard, int64_t steps_per_epoch, int64_t start_step) {
  const std::string placement = client.partition_map().Describe(client.model().tensors);
  std::vector<std::string> pieces;  // layers exchanged in pieces (Run::CutIntoPieces)
  for (int layer = 0; layer < mlp.num_layers(); ++layer) {
    const size_t n = mlp.weight_pieces(layer).size();
    if (n > 1) pieces.push_back(absl::StrCat("fc", layer, ".weight:", n));
  }
  return TrainEvent{"start",
                    {{"rank", absl::StrCat(client.rank())},
                     {"workers", absl::StrCat(client.num_workers())},
                     {"servers", absl::StrCat(client.num_servers())},
                     {"parameters", absl::StrCat(mlp.NumParameters())},
                     {"shard", absl::StrCat(shard)},
                     {"steps_per_epoch", absl::StrCat(steps_per_epoch)},
                     {"epochs", absl::StrCat(options.epochs)},
                     {"total_steps", absl::StrCat(steps_per_epoch * options.epochs)},
                     {"start_step", absl::StrCat(start_step)},
                     {"consistency", Str(options.consistency.ToString())},
                     {"compression", Str(options.compression.ToString())},
                     {"device", Str(device)},
                     {"pipeline", options.pipeline ? "true" : "false"},
                     {"pieces", Str(absl::StrJoin(pieces, ","))},
                     {"placement", Str(absl::StrReplaceAll(placement, {{"\n", "; "}}))}}};
}

void RunLog::Emit(const std::string& kind, Fields fields) const {
  if (!on_event_) return;
  fields.insert(fields.begin(), {"rank", absl::StrCat(client_->rank())});
  on_event_(TrainEvent{kind, std::move(fields)});
}

void RunLog::Begin(int64_t start) {
  start_ = last_progress_ = absl::Now();
  clock_ = first_step_ = start;
}

void RunLog::Count(int batch, double loss_sum, int64_t correct) {
  samples_ += batch;
  loss_sum_ += loss_sum;
  loss_count_ += batch;
  correct_ += correct;
}

void RunLog::MaybeReportProgress(int epoch, bool force, absl::FunctionRef<Fields()> extra) {
  const absl::Time now = absl::Now();
  if (!force && now - last_progress_ < o_.progress_every) return;
  last_progress_ = now;
  const double elapsed = absl::ToDoubleSeconds(now - start_);
  const int64_t total = steps_per_epoch_ * o_.epochs;
  const int64_t done = clock_ - first_step_;  // by this process (a rejoined one started later)
  const double per_sample = loss_count_ ? 1.0 / loss_count_ : 0;
  Fields fields = {{"epoch", absl::StrCat(epoch)},
                   {"epochs", absl::StrCat(o_.epochs)},
                   {"step", absl::StrCat(clock_)},
                   {"total_steps", absl::StrCat(total)},
                   {"loss", Num(loss_sum_ * per_sample)},
                   {"train_accuracy", Num(correct_ * per_sample)},
                   {"samples_per_s", Num(elapsed > 0 ? samples_ / elapsed : 0)},
                   {"elapsed_s", Num(elapsed)},
                   {"eta_s", Num(done > 0 ? elapsed * (total - clock_) / done : 0)},
                   {"wait_s", Num(absl::ToDoubleSeconds(waited_))}};
  for (auto& field : extra()) fields.push_back(std::move(field));
  Emit("progress", std::move(fields));
}

void RunLog::EmitEval(int epoch, bool final, double accuracy, double loss) const {
  Emit("eval", {{"epoch", absl::StrCat(epoch)},
                {"step", absl::StrCat(clock_)},
                {"elapsed_s", Num(absl::ToDoubleSeconds(absl::Now() - start_))},
                {"train_loss", Num(loss_count_ ? loss_sum_ / loss_count_ : 0)},
                {"test_accuracy", Num(accuracy)},
                {"test_loss", Num(loss)},
                {"final", final ? "true" : "false"}});
}

TrainResult RunLog::Result(double train_s) const {
  TrainResult r;
  r.samples = samples_;
  r.wall_s = train_s;
  r.wait_s = absl::ToDoubleSeconds(waited_);
  r.eval_s = absl::ToDoubleSeconds(evaluating_);
  r.steps = clock_;
  return r;
}

int64_t StepsPerEpoch(int64_t count, int replicas, int batch_size) {
  return (count / replicas + batch_size - 1) / batch_size;
}

// The "done" event: this worker's result.
TrainEvent DoneEvent(int rank, const TrainResult& result) {
  return TrainEvent{"done",
                    {{"rank", absl::StrCat(rank)},
                     {"test_accuracy", Num(result.test_accuracy)},
                     {"test_loss", Num(result.test_loss)},
                     {"samples", absl::StrCat(result.samples)},
                     {"steps", absl::StrCat(result.steps)},
                     {"wall_s", Num(result.wall_s)},
                     {"samples_per_s", Num(result.wall_s > 0 ? result.samples / result.wall_s : 0)},
                     {"wait_s", Num(result.wait_s)},
                     {"straggle_s", Num(result.straggle_s)},
                     {"eval_s", Num(result.eval_s)},
                     {"shm_servers", absl::StrCat(result.shm_servers)},
                     {"peak_rss_bytes", absl::StrCat(result.peak_rss_bytes)}}};
}

namespace {

// The model a run registers, but for its placement (which needs the job's server count).
ModelSpec ModelOf(const TrainerOptions& options, const Mlp& mlp) {
  ModelSpec model;
  model.tensors = mlp.TensorSpecs(options.seed);
  model.consistency = options.consistency;
  model.compression = options.compression;
  model.compress_min_bytes = options.compress_min_bytes;
  return model;
}

}  // namespace

absl::StatusOr<TrainResult> Train(const TrainerOptions& options,
                                  const std::function<void(const TrainEvent&)>& on_event) {
  PS_RETURN_IF_ERROR(options.Validate());
  if (options.stages > 1) return TrainStages(options, on_event);
  PS_ASSIGN_OR_RETURN(Dataset train, Limit(LoadFashionMnist(options.data_dir, "train"), options.train_limit));
  PS_ASSIGN_OR_RETURN(Dataset test, Limit(LoadFashionMnist(options.data_dir, "t10k"), options.test_limit));
  PS_RETURN_IF_ERROR(CheckLayers(options, train));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ComputeBackend> backend, CreateBackend(options.backend));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Mlp> mlp, Mlp::Create(options.layers, options.batch_size, backend.get()));
  ModelSpec model = ModelOf(options, *mlp);
  // A bad placement is refused before anything connects; the server ranks
  // are checked again once the job's server count is known.
  PS_RETURN_IF_ERROR(ParsePlacement(options.placement, model.tensors, kMaxServers, options.slice_bytes).status());
  if (!options.init_from.empty()) PS_RETURN_IF_ERROR(CheckModelFile(model, options.init_from));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<KVClient> client, KVClient::Connect(options.client));
  if (options.backend.device == "cuda" && options.backend.gpu < 0 && client->rank() != options.backend.rank) {
    // The backend was made before the rank was known (so that a missing GPU
    // fails before joining); --gpu=-1 means rank modulo the device count.
    BackendOptions by_rank = options.backend;
    by_rank.rank = client->rank();
    mlp.reset();
    PS_ASSIGN_OR_RETURN(backend, CreateBackend(by_rank));
    PS_ASSIGN_OR_RETURN(mlp, Mlp::Create(options.layers, options.batch_size, backend.get()));
  }
  PS_ASSIGN_OR_RETURN(model.placement,
                      ParsePlacement(options.placement, model.tensors, client->num_servers(), options.slice_bytes));
  model.optimizer = WithDecaySteps(options, train.count, client->num_workers());
  PS_RETURN_IF_ERROR(client->RegisterModel(model));
  if (!options.init_from.empty()) {
    PS_RETURN_IF_ERROR(StartFromModelFile(*client, options.init_from, options.client.register_timeout));
  }

  // 0 for a new job; a restarted worker continues where its pushes ended.
  PS_ASSIGN_OR_RETURN(const int64_t start_step, client->ResumeStep());
  ComputeBackend* const b = backend.get();  // outlives the client, which may hold the pool's buffers last
  // Held by the pool's functions too: its buffers may come back after the pool is gone.
  auto memory =
      std::make_shared<PushPoolMemory>([b](size_t n) { return b->AllocHost(n); }, [b](float* p) { b->FreeHost(p); });
  PushBufferPool pool([memory](size_t n) { return memory->Alloc(n); }, [memory](float* p) { memory->Free(p); });
  Run run(options, client.get(), mlp.get(), &pool, memory.get(), train, test, on_event);
  if (on_event) {
    on_event(StartEvent(options, *client, *mlp, backend->name(), train.count / client->num_workers(),
                        run.steps_per_epoch(), start_step));
  }
  ResetPeakRss();
  PS_ASSIGN_OR_RETURN(TrainResult result, run.Go(start_step));
  result.peak_rss_bytes = PeakRssBytes();
  result.shm_servers = client->stats().shm_servers;
  PS_RETURN_IF_ERROR(FinishRun(client.get(), DoneEvent(client->rank(), result), on_event));
  return result;
}

}  // namespace ps
