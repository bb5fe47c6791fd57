// SliceStore's side of forwarding sync steps as their sums
// (server/store/step_forwarding.h): which slices travel so, the steps recorded as
// they complete, and a backup completing a step from its primary's sum.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/compress/compressor.h"
#include "server/store/consistency_policy.h"
#include "server/store/slice_store.h"

namespace ps {
namespace {

// What one pushed value costs on the wire under `spec` (its frames'
// headers aside).
double PushBytesPerValue(const CompressionSpec& spec) {
  switch (spec.kind) {
    case CompressionKind::kNone: return 4.0;
    case CompressionKind::kFp16:
    case CompressionKind::kBf16: return 2.0;
    case CompressionKind::kTopK: return 8.0 * spec.ratio;     // the kept values and their indices
    case CompressionKind::kRandomK: return 4.0 * spec.ratio;  // the kept values (the indices come from a seed)
    case CompressionKind::kOneBit: return 0.125;
  }
  return 4.0;
}

}  // namespace

bool SliceStore::ForwardsSteps(uint32_t key) const {
  const SliceState* found = model_ != nullptr ? Find(key) : nullptr;
  if (found == nullptr) return false;
  const SliceState& s = *found;
  if (s.table != nullptr || IsBuffer(s) || !PolicyOf(s).HasSteps()) return false;
  int holders = 0;
  for (int w = 0; w < num_workers_; ++w) holders += Holds(s, w) ? 1 : 0;
  // One holder: the step's sum is its push, which travels as it came (shared, not copied).
  return holders >= 2 && holders * PushBytesPerValue(Compression(key)) >= 4.0;
}

void SliceStore::SetStepForwarding(std::function<bool(uint32_t)> record, std::function<bool(uint32_t)> follow) {
  record_steps_ = std::move(record);
  follow_steps_ = std::move(follow);
}

bool SliceStore::InStep(uint32_t key, int worker, int64_t clock) const {
  const SliceState* s = model_ != nullptr ? Find(key) : nullptr;
  return s != nullptr && worker >= 0 && worker < num_workers_ && static_cast<int64_t>(s->version) == clock &&
         s->pushed[worker] != 0;
}

bool SliceStore::Skips(uint32_t key, int worker, int64_t clock) const {
  const SliceState* s = model_ != nullptr ? Find(key) : nullptr;
  return s != nullptr && worker >= 0 && worker < num_workers_ && Skipped(*s, worker, clock);
}

std::vector<SliceStore::CompletedStep> SliceStore::TakeCompletedSteps() { return std::exchange(completed_, {}); }

SliceStore::StepWatch SliceStore::Watch(const SliceState& s) const {
  StepWatch watch;
  if (!record_steps_ || !record_steps_(s.slice.key)) return watch;
  watch.on = true;
  watch.version = s.version;
  watch.arrived = s.arrived;
  for (size_t w = 0; w < s.pushed.size(); ++w) {
    if (s.pushed[w]) watch.workers.push_back(static_cast<int32_t>(w));
  }
  return watch;
}

std::optional<SliceStore::CompletedStep> SliceStore::Completed(const SliceState& s, StepWatch watch) {
  if (!watch.on || s.version == watch.version) return std::nullopt;
  CompletedStep step{s.slice.key, watch.version, std::move(watch.workers), {}};
  if (watch.arrived > 0) step.sum = s.sum;
  return step;
}

bool SliceStore::Recorded(const SliceState& s) const {
  return record_steps_ && PolicyOf(s).HasSteps() && record_steps_(s.slice.key);
}

SliceStore::CompletedStep SliceStore::Due(const SliceState& s) {
  CompletedStep step{s.slice.key, s.version, {}, s.sum};
  for (size_t w = 0; w < s.pushed.size(); ++w) {
    if (s.pushed[w]) step.workers.push_back(static_cast<int32_t>(w));
  }
  return step;
}

void SliceStore::CompleteDueSteps() {
  if (due_.empty()) return;
  std::vector<uint8_t> ran(due_.size(), 0);
  pool_->ParallelFor(due_.size(),
                     [&](size_t i) { ran[i] = PolicyOf(*due_[i]).CompleteForwardedStep(*due_[i], *optimizer_); });
  for (uint8_t r : ran) stats_.updates_applied += r;
  due_.clear();
}

bool SliceStore::SettleAll() {
  std::vector<SliceState*> all;
  all.reserve(slices_.size());
  for (auto& [key, s] : slices_) {
    if (!follow_steps_ || !follow_steps_(key)) all.push_back(s.get());
  }
  std::vector<uint8_t> settled(all.size(), 0), ran(all.size(), 0);
  std::vector<std::optional<CompletedStep>> done(all.size());
  pool_->ParallelFor(all.size(), [&](size_t i) {
    bool r = false;
    StepWatch watch = Watch(*all[i]);
    settled[i] = PolicyOf(*all[i]).Settle(*all[i], *optimizer_, Waited(*all[i]), &r);
    ran[i] = r;
    done[i] = Completed(*all[i], std::move(watch));
  });
  for (uint8_t r : ran) stats_.updates_applied += r;
  for (std::optional<CompletedStep>& d : done) {
    if (d.has_value()) completed_.push_back(std::move(*d));
  }
  return std::find(settled.begin(), settled.end(), 1) != settled.end();
}

bool SliceStore::Resettle() { return model_ != nullptr && SettleAll(); }

absl::StatusOr<bool> SliceStore::CheckStep(const CompletedStep& step, uint64_t at) const {
  const SliceState* found = Find(step.key);
  if (found == nullptr) return absl::NotFoundError(absl::StrCat("no slice with key ", step.key));
  const SliceState& s = *found;
  if (!ForwardsSteps(step.key)) {
    return absl::FailedPreconditionError(absl::StrCat("the steps of ", SliceName(s), " do not travel as sums"));
  }
  if (step.step < at) return false;  // held already (a new primary sends its last step again)
  if (step.workers.empty() != step.sum.empty() || (!step.sum.empty() && step.sum.size() != s.values.size())) {
    return absl::InvalidArgumentError(absl::StrCat("step ", step.step, " of ", SliceName(s), ": a sum of ",
                                                   step.sum.size(), " values from ", step.workers.size(),
                                                   " pushes; the slice has ", s.values.size()));
  }
  for (size_t i = 0; i < step.workers.size(); ++i) {
    if (step.workers[i] < 0 || step.workers[i] >= num_workers_ || (i > 0 && step.workers[i] <= step.workers[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("step ", step.step, " of ", SliceName(s), ": workers must be ",
                                                     "ascending ranks below ", num_workers_, ", not ", step.workers[i],
                                                     " at ", i));
    }
  }
  if (!allow_nonfinite_ && std::any_of(step.sum.begin(), step.sum.end(), [](float v) { return !std::isfinite(v); })) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step.step, " of ", SliceName(s), ": NaN or Inf in its sum"));
  }
  if (step.step > at) {
    return absl::FailedPreconditionError(absl::StrCat("step ", step.step, " of ", SliceName(s),
                                                      ": the slice is at step ", at,
                                                      " (an earlier step never reached it)"));
  }
  return true;
}

absl::StatusOr<bool> SliceStore::ApplyStep(CompletedStep step) {
  const SliceState* found = Find(step.key);
  PS_ASSIGN_OR_RETURN(const bool applies, CheckStep(step, found != nullptr ? found->version : 0));
  if (applies) CompleteStep(std::move(step));
  return applies;
}

void SliceStore::CompleteStep(CompletedStep step) {
  SliceState& s = *slices_.at(step.key);
  if (!step.sum.empty()) s.sum = std::move(step.sum);
  std::fill(s.pushed.begin(), s.pushed.end(), 0);
  for (int32_t w : step.workers) {
    s.pushed[w] = 1;
    s.worker_clock[w] = std::max(s.worker_clock[w], static_cast<int64_t>(step.step) + 1);
  }
  s.arrived = static_cast<int>(step.workers.size());
  stats_.updates_applied += PolicyOf(s).CompleteForwardedStep(s, *optimizer_) ? 1 : 0;
}

bool SliceStore::HoldsStepWithAnotherSum(const CompletedStep& step, absl::Span<const int32_t> last_workers) const {
  const SliceState* s = Find(step.key);
  if (s == nullptr || step.step + 1 != s->version || s->arrived != 0 || step.sum.empty() ||
      s->sum.size() != step.sum.size()) {
    return false;
  }
  return !std::equal(step.workers.begin(), step.workers.end(), last_workers.begin(), last_workers.end()) ||
         std::memcmp(s->sum.data(), step.sum.data(), step.sum.size() * sizeof(float)) != 0;
}

absl::StatusOr<std::vector<bool>> SliceStore::ApplySteps(std::vector<CompletedStep> steps) {
  absl::flat_hash_map<uint32_t, uint64_t> at;  // each slice's version once the steps before apply
  std::vector<bool> applied;
  for (const CompletedStep& step : steps) {
    const SliceState* s = Find(step.key);
    auto [it, fresh] = at.try_emplace(step.key, s != nullptr ? s->version : 0);
    PS_ASSIGN_OR_RETURN(const bool applies, CheckStep(step, it->second));
    if (applies) ++it->second;
    applied.push_back(applies);
  }
  // Checked once (the sums' NaN scan is the backup's hot path), then applied.
  for (size_t i = 0; i < steps.size(); ++i) {
    if (applied[i]) CompleteStep(std::move(steps[i]));
  }
  return applied;
}

}  // namespace ps
