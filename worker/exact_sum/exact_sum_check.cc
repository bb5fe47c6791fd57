#include "worker/exact_sum/exact_sum_check.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/hash.h"
#include "common/base/status_macros.h"
#include "common/wire/wire_frames.h"
#include "glog/logging.h"

namespace ps {
namespace {

// The integer gradient component of worker w at step s for element i.
int64_t H(int w, int64_t s, int64_t i) { return 1 + (w + s + i) % 5; }

// The embedding table "rows": table_ids ids spread over the 64-bit space
// (or 0 .. table_ids - 1, with dense_table_ids),
// of which each worker pushes kRowsPerStep per step, some of them twice
// (k*k mod 200 repeats), with integer gradients; with more than 200 ids,
// each step's 200 possible rows are shifted by an offset of its own, so
// that the steps spread their pushes over the whole table.
constexpr int kRowsPerStep = 32;
constexpr int kRowDim = 4;
uint64_t TableId(int i, bool dense) { return dense ? static_cast<uint64_t>(i) : Mix64(static_cast<uint64_t>(i) + 1); }
int RowIndex(int ids, int w, int64_t s, int k) {
  const int64_t stride = std::max(1, ids / 200);
  return static_cast<int>(((w * 37 + s * 11 + k * k) % 200 * stride + (s * 7 + w) % stride) % ids);
}
int64_t G(int w, int64_t s, int k, int j) { return 1 + (w + 2 * s + k + j) % 3; }

class ExactSumCheck {
 public:
  ExactSumCheck(const ExactSumOptions& options, KVClient* client)
      : options_(options),
        client_(client),
        w_(client->num_workers()),
        sync_(options.consistency.mode == ConsistencyMode::kSync),
        // Sync applies the mean of W pushes: scale by W so the mean is the sum.
        mult_(sync_ ? w_ : 1),
        clock_(w_),
        dense_(options.dense_elements),
        bias_(10),
        expected_(options.dense_elements, 0.0),
        rows_(options.table_ids * kRowDim),
        expected_rows_(options.table_ids * kRowDim, 0.0),
        g_clock_(w_, 0.0f),
        g_dense_(options.dense_elements),
        g_bias_(10, 0.0f),
        row_ids_(kRowsPerStep),
        g_rows_(kRowsPerStep * kRowDim) {
    for (int i = 0; i < options.table_ids; ++i) all_ids_.push_back(TableId(i, options.dense_table_ids));
  }

  absl::StatusOr<ExactSumResult> Run();

 private:
  // Pushes step `s`'s gradients, pulls step s + 1 and checks what came back.
  absl::Status DoStep(int64_t s);
  ExactSumResult Result(int64_t steps) const;
  absl::Status Resume();
  absl::Status PullAll(int64_t step);
  absl::Status CheckPulled(int64_t clock, bool final);
  absl::Status CheckRows(int64_t clock) const;
  void AdvanceExpected(int64_t step);
  // The dense tensor's change at `step` when it travels compressed: each
  // worker's gradient through its simulated compressor (sims_).
  void AdvanceCompressed(int64_t step);

  const ExactSumOptions& options_;
  KVClient* const client_;
  const int w_;
  const bool sync_;
  const int mult_;
  int t_clock_ = 0, t_dense_ = 0, t_bias_ = 0, t_rows_ = 0;
  std::vector<float> clock_, dense_, bias_;
  std::vector<double> expected_;  // what `dense` holds once every push up to a step is in
  std::vector<uint64_t> all_ids_;
  std::vector<float> rows_;            // every row of the table, as last pulled
  std::vector<double> expected_rows_;  // likewise for the table's rows
  // This worker's gradients of a step.
  std::vector<float> g_clock_, g_dense_, g_bias_;
  std::vector<uint64_t> row_ids_;
  std::vector<float> g_rows_;
  int64_t max_lag_ = 0;
  // The first step this run pushes (KVClient::ResumeStep), and whether a
  // resumed run's pulls have caught up with what the servers held at its start.
  int64_t start_ = 0;
  bool caught_up_ = true;
  std::vector<std::unique_ptr<PushCompression>> sims_;  // per worker, when "dense" compresses
};

absl::Status ExactSumCheck::Resume() {
  PS_ASSIGN_OR_RETURN(start_, client_->ResumeStep());
  if (start_ < 0 || start_ > options_.steps) {
    return absl::FailedPreconditionError(absl::StrCat("the servers hold ", start_, " steps of worker ", client_->rank(),
                                                      ", and this run has --steps=", options_.steps));
  }
  caught_up_ = start_ == 0;
  if (client_->model().TensorCompression(t_dense_).kind != CompressionKind::kNone) {
    if (start_ > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("this run resumes at step ", start_, " with --compression=", options_.compression.ToString(),
                       ": the workers' error feedback started again from zero, which the check cannot know"));
    }
    for (int w = 0; w < w_; ++w)
      sims_.push_back(std::make_unique<PushCompression>(client_->model(), client_->partition_map()));
  }
  for (int64_t s = 0; s < start_; ++s) AdvanceExpected(s);
  // Admission counts pulls: enough of them that every row exists before
  // the first push to it, or its gradient would be dropped.
  for (int i = 0; i < std::max(options_.admit_after, 1); ++i) PS_RETURN_IF_ERROR(PullAll(start_));
  return CheckPulled(start_, false);
}

absl::Status ExactSumCheck::PullAll(int64_t step) {
  const TensorBuffer params[] = {
      {t_clock_, absl::MakeSpan(clock_)}, {t_dense_, absl::MakeSpan(dense_)}, {t_bias_, absl::MakeSpan(bias_)}};
  const RowBuffer rows[] = {{t_rows_, all_ids_, absl::MakeSpan(rows_)}};
  return client_->ExchangeAndWait({.pull = params, .pull_rows = rows, .pull_step = step});
}

void ExactSumCheck::AdvanceCompressed(int64_t step) {
  std::vector<float> grad(options_.dense_elements), decoded;
  for (int w = 0; w < w_; ++w) {
    for (int64_t i = 0; i < options_.dense_elements; ++i) grad[i] = static_cast<float>(-mult_ * H(w, step, i));
    for (uint32_t key : client_->partition_map().SlicesOfTensor(t_dense_)) {
      const Slice& slice = client_->partition_map().slices()[key];
      const zmq::message_t frame =
          sims_[w]->Encode(key, absl::MakeConstSpan(grad).subspan(slice.offset, slice.length), w, step);
      decoded.assign(slice.length, 0.0f);
      CHECK(DecodeFrame(AsView(frame), absl::MakeSpan(decoded)).ok());
      // SGD with lr 1 (sync: of the mean of W pushes).
      for (uint64_t j = 0; j < slice.length; ++j) expected_[slice.offset + j] -= decoded[j] / mult_;
    }
  }
}

void ExactSumCheck::AdvanceExpected(int64_t step) {
  if (!sims_.empty()) {
    AdvanceCompressed(step);
  } else {
    for (int64_t i = 0; i < options_.dense_elements; ++i) {
      for (int w = 0; w < w_; ++w) expected_[i] += static_cast<double>(H(w, step, i));
    }
  }
  for (int w = 0; w < w_; ++w) {
    for (int k = 0; k < kRowsPerStep; ++k) {
      for (int j = 0; j < kRowDim; ++j)
        expected_rows_[RowIndex(options_.table_ids, w, step, k) * kRowDim + j] += G(w, step, k, j);
    }
  }
}

absl::Status ExactSumCheck::CheckRows(int64_t clock) const {
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (rows_[i] != static_cast<float>(expected_rows_[i])) {
      return absl::DataLossError(absl::StrCat("step ", clock, ": row ", all_ids_[i / kRowDim], "[", i % kRowDim,
                                              "] of table 'rows' is ", rows_[i], ", want exactly ", expected_rows_[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status ExactSumCheck::CheckPulled(int64_t clock, bool final) {
  const int me = client_->rank();
  // A resumed run may find its own pushes further along on the server of the
  // "clock" slice than ResumeStep (the minimum over servers) says, until its
  // steps pass that point; from then on the count must be exact again.
  if (clock_[me] == static_cast<float>(clock)) caught_up_ = true;
  if (clock_[me] < static_cast<float>(clock) || (caught_up_ && clock_[me] != static_cast<float>(clock))) {
    return absl::DataLossError(
        absl::StrCat("step ", clock, ": worker ", me, " sees ", clock_[me], " of its own pushes applied"));
  }
  const float slowest = *std::min_element(clock_.begin(), clock_.end());
  max_lag_ = std::max<int64_t>(max_lag_, clock - static_cast<int64_t>(slowest));
  // Checkpoints of different servers are not coordinated: after a whole-job
  // restart a slice may be a few steps ahead, so a resumed run checks sync
  // exactly only at the end.
  const bool exact = (sync_ && start_ == 0) || final;
  const int64_t bound = options_.consistency.mode == ConsistencyMode::kSsp ? options_.consistency.staleness : -1;
  for (int w = 0; w < w_; ++w) {
    if (exact && clock_[w] != static_cast<float>(clock)) {
      return absl::DataLossError(
          absl::StrCat("step ", clock, ": pulled clock of worker ", w, " is ", clock_[w], ", want exactly ", clock));
    }
    if (bound >= 0 && clock_[w] < static_cast<float>(clock - bound)) {
      return absl::DataLossError(absl::StrCat("step ", clock, ": worker ", w, " is at ", clock_[w],
                                              ", more than ssp bound ", bound, " behind"));
    }
  }
  if (!exact) return absl::OkStatus();
  for (int64_t i = 0; i < options_.dense_elements; ++i) {
    if (dense_[i] != static_cast<float>(expected_[i])) {
      return absl::DataLossError(
          absl::StrCat("step ", clock, ": dense[", i, "] is ", dense_[i], ", want exactly ", expected_[i]));
    }
  }
  for (float b : bias_) {
    if (b != 0.5f) return absl::DataLossError(absl::StrCat("bias is ", b, ", want 0.5 (never pushed)"));
  }
  return CheckRows(clock);
}

absl::Status ExactSumCheck::DoStep(int64_t s) {
  const int me = client_->rank();
  const absl::Duration compute =
      options_.step_time + (me == options_.slow_rank ? options_.slow_step : absl::ZeroDuration());
  if (compute > absl::ZeroDuration()) std::this_thread::sleep_for(absl::ToChronoNanoseconds(compute));
  g_clock_[me] = static_cast<float>(-mult_);
  for (int64_t i = 0; i < options_.dense_elements; ++i) g_dense_[i] = static_cast<float>(-mult_ * H(me, s, i));
  for (int k = 0; k < kRowsPerStep; ++k) {
    row_ids_[k] = TableId(RowIndex(options_.table_ids, me, s, k), options_.dense_table_ids);
    for (int j = 0; j < kRowDim; ++j) g_rows_[k * kRowDim + j] = static_cast<float>(-mult_ * G(me, s, k, j));
  }
  const ConstTensorBuffer grads[] = {{t_clock_, g_clock_}, {t_dense_, g_dense_}, {t_bias_, g_bias_}};
  const ConstRowBuffer row_grads[] = {{t_rows_, row_ids_, g_rows_}};
  const TensorBuffer params[] = {
      {t_clock_, absl::MakeSpan(clock_)}, {t_dense_, absl::MakeSpan(dense_)}, {t_bias_, absl::MakeSpan(bias_)}};
  const RowBuffer rows[] = {{t_rows_, all_ids_, absl::MakeSpan(rows_)}};
  PS_RETURN_IF_ERROR(client_->ExchangeAndWait(
      {.push = grads, .push_rows = row_grads, .step = s, .pull = params, .pull_rows = rows, .pull_step = s + 1}));
  AdvanceExpected(s);
  return CheckPulled(s + 1, false);
}

ExactSumResult ExactSumCheck::Result(int64_t steps) const {
  ExactSumResult result;
  result.rank = client_->rank();
  result.num_workers = w_;
  result.steps = static_cast<int>(steps);
  result.start_step = start_;
  for (int64_t i = 0; i < options_.dense_elements; ++i) {
    result.dense_sum += dense_[i];
    result.expected_sum += expected_[i];
  }
  result.clocks = clock_;
  result.max_lag_seen = max_lag_;
  result.placement = client_->partition_map().Describe(client_->model().tensors);
  return result;
}

absl::StatusOr<ExactSumResult> ExactSumCheck::Run() {
  PS_ASSIGN_OR_RETURN(t_clock_, client_->TensorIndex("clock"));
  PS_ASSIGN_OR_RETURN(t_dense_, client_->TensorIndex("dense"));
  PS_ASSIGN_OR_RETURN(t_bias_, client_->TensorIndex("bias"));
  PS_ASSIGN_OR_RETURN(t_rows_, client_->TableIndex("rows"));
  PS_RETURN_IF_ERROR(Resume());
  int64_t s = start_;
  absl::Duration longest;
  for (; s < options_.steps && !(options_.stop != nullptr && options_.stop->load()); ++s) {
    const absl::Time t0 = absl::Now();
    PS_RETURN_IF_ERROR(DoStep(s));
    longest = std::max(longest, absl::Now() - t0);
    if (options_.progress_every > 0 && (s + 1) % options_.progress_every == 0 && options_.on_progress) {
      options_.on_progress(s + 1);
    }
  }
  PS_RETURN_IF_ERROR(client_->Barrier("exact-sum-done"));
  PS_RETURN_IF_ERROR(PullAll(s));
  PS_RETURN_IF_ERROR(CheckPulled(s, true));
  ExactSumResult result = Result(s);
  result.longest_step = longest;
  return result;
}

}  // namespace

absl::Status ExactSumOptions::Validate() const {
  if (steps < 1 || steps > 1000000) return absl::InvalidArgumentError(absl::StrCat("steps: ", steps));
  if (dense_elements < 1 || dense_elements > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("dense_elements: ", dense_elements));
  }
  if (table_ids < 1 || table_ids > (1 << 17)) return absl::InvalidArgumentError(absl::StrCat("table_ids: ", table_ids));
  if (table_shards < 0 || table_shards > kMaxTableShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("table_shards: ", table_shards, " not in [0, ", kMaxTableShards, "]"));
  }
  if (admit_after < 0 || admit_after > 1000)
    return absl::InvalidArgumentError(absl::StrCat("admit_after: ", admit_after));
  if (progress_every < 0) return absl::InvalidArgumentError(absl::StrCat("progress_every: ", progress_every));
  if (step_time < absl::ZeroDuration() || slow_step < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("step_time and slow_step: must be >= 0");
  }
  if (compression.delta_pull()) {
    return absl::InvalidArgumentError("compression: pull=delta gives the workers a lossy copy; not checkable exactly");
  }
  if (compression.kind == CompressionKind::kOneBit) {
    return absl::InvalidArgumentError("compression: onebit's scale is no integer; its sums cannot be checked exactly");
  }
  return client.Validate();
}

ModelSpec ExactSumModel(const ExactSumOptions& options, int num_workers) {
  ModelSpec model;
  model.tensors = {{"clock", {num_workers}, Initializer::Zeros()},
                   {"dense", {options.dense_elements}, Initializer::Zeros()},
                   {"bias", {10}, Initializer::Constant(0.5f)}};
  model.optimizer.kind = OptimizerKind::kSgd;
  model.optimizer.learning_rate = 1.0f;
  model.consistency = options.consistency;
  model.placement.slice_bytes = options.slice_bytes;
  model.compression = options.compression;
  model.compress_min_bytes = options.compress_min_bytes;
  model.placement.table_shards = static_cast<uint32_t>(options.table_shards);
  model.tables = {{"rows", kRowDim, Initializer::Zeros()}};
  model.tables[0].admit_after = static_cast<uint32_t>(options.admit_after);
  return model;
}

absl::StatusOr<ExactSumResult> RunExactSumCheck(const ExactSumOptions& options) {
  PS_RETURN_IF_ERROR(options.Validate());
  PS_ASSIGN_OR_RETURN(std::unique_ptr<KVClient> client, KVClient::Connect(options.client));
  if (options.stop != nullptr && client->num_workers() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a check that stops when told needs a job of one worker; this "
                     "one has ",
                     client->num_workers()));
  }
  PS_RETURN_IF_ERROR(client->RegisterModel(ExactSumModel(options, client->num_workers())));
  ExactSumCheck check(options, client.get());
  PS_ASSIGN_OR_RETURN(ExactSumResult result, check.Run());
  result.client = client->stats();
  for (int s = 0; s < client->num_servers(); ++s) {
    PS_ASSIGN_OR_RETURN(std::optional<ServerStats> stats, client->LiveServerStats(s));
    if (!stats.has_value()) continue;  // a dead server whose slices failed over (--replicas)
    for (const ServerStats::Table& t : stats->tables) result.table_disk_rows += t.disk_rows;
    result.server_bytes_in += stats->bytes_in;
    result.server_bytes_out += stats->bytes_out;
  }
  PS_RETURN_IF_ERROR(client->Finish());
  return result;
}

}  // namespace ps
