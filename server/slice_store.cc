#include "server/slice_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/initializer.h"
#include "common/status_macros.h"

namespace ps {
namespace {

// Pushes with staleness at or above this land in the last histogram bucket;
// the exact maximum is kept apart.
constexpr size_t kStalenessBuckets = 256;
// Clocks beyond this are refused, so clock arithmetic never overflows.
constexpr int64_t kMaxClock = int64_t{1} << 53;

bool AllFinite(absl::Span<const float> v) {
  // Exponent bits all ones means NaN or Inf. An integer OR-reduction has no
  // dependency on float rounding, so the compiler vectorises it.
  const auto* bits = reinterpret_cast<const uint32_t*>(v.data());
  uint32_t bad = 0;
  for (size_t i = 0; i < v.size(); ++i) bad |= (bits[i] & 0x7f800000u) == 0x7f800000u;
  return bad == 0;
}

void AddInto(float* __restrict sum, const float* __restrict grad, size_t n) {
  for (size_t i = 0; i < n; ++i) sum[i] += grad[i];
}

}  // namespace

struct SliceStore::SliceState {
  Slice slice;
  std::vector<float> values;
  std::vector<float> optimizer_state;
  uint64_t version = 0;          // sync: steps applied; async/ssp: pushes applied
  uint64_t optimizer_steps = 0;  // updates the optimizer has made
  // sync: the running sum of step `version`'s pushes, and who has pushed.
  std::vector<float> sum;
  int arrived = 0;
  std::vector<uint8_t> pushed;
  // ssp/async: per worker, one past the last clock it pushed here.
  std::vector<int64_t> worker_clock;
};

SliceStore::~SliceStore() = default;

SliceStore::SliceStore(ThreadPool* pool, bool allow_nonfinite, uint64_t max_bytes)
    : pool_(pool), allow_nonfinite_(allow_nonfinite), max_bytes_(max_bytes) {}

absl::Status SliceStore::Create(const ModelSpec& model, const std::vector<Slice>& slices,
                                int num_workers) {
  if (model_ != nullptr) {
    if (*model_ == model && slice_list_ == slices && num_workers_ == num_workers) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError("server already holds a different model");
  }
  PS_RETURN_IF_ERROR(model.Validate());
  if (num_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_workers is ", num_workers));
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, Optimizer::Create(model.optimizer));
  PS_RETURN_IF_ERROR(CheckMemory(model, slices, *optimizer));
  try {
    return Allocate(model, slices, num_workers, std::move(optimizer));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory allocating ", slices.size(), " slices on this server"));
  }
}

absl::Status SliceStore::CheckMemory(const ModelSpec& model, const std::vector<Slice>& slices,
                                     const Optimizer& optimizer) const {
  if (max_bytes_ == 0) return absl::OkStatus();
  // Values, optimizer state and, in sync mode, the running sum of a step.
  const bool sync = model.consistency.mode == ConsistencyMode::kSync;
  long double need = 0;
  for (const Slice& slice : slices) {
    need += (static_cast<long double>(slice.length) * (1 + (sync ? 1 : 0)) + optimizer.StateSize(slice.length)) *
            sizeof(float);
  }
  if (need <= max_bytes_) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the model needs ", static_cast<uint64_t>(need / (1 << 20)), " MiB on this server; its budget is ",
      max_bytes_ >> 20, " MiB (ps_server --max_memory_mb); add servers or shrink the model"));
}

absl::Status SliceStore::Allocate(const ModelSpec& model, const std::vector<Slice>& slices, int num_workers,
                                  std::unique_ptr<Optimizer> optimizer) {
  absl::flat_hash_map<uint32_t, std::unique_ptr<SliceState>> states;
  for (const Slice& slice : slices) {
    const uint64_t n = slice.tensor < model.tensors.size()
                           ? static_cast<uint64_t>(model.tensors[slice.tensor].NumElements())
                           : 0;
    // Written so that no sum can wrap around: these values come off the wire.
    if (slice.length == 0 || slice.length > n || slice.offset > n - slice.length ||
        states.contains(slice.key)) {
      return absl::InvalidArgumentError(absl::StrCat("slice ", slice.key, " does not fit the model"));
    }
    auto s = std::make_unique<SliceState>();
    s->slice = slice;
    s->values.resize(slice.length);
    FillInitialValues(model.tensors[slice.tensor], slice.offset, absl::MakeSpan(s->values));
    s->optimizer_state.assign(optimizer->StateSize(slice.length), 0.0f);
    s->pushed.assign(num_workers, 0);
    s->worker_clock.assign(num_workers, 0);
    states.emplace(slice.key, std::move(s));
  }
  model_ = std::make_unique<ModelSpec>(model);
  slice_list_ = slices;
  optimizer_ = std::move(optimizer);
  num_workers_ = num_workers;
  slices_ = std::move(states);
  stats_.slices_held = static_cast<uint32_t>(slices_.size());
  stats_.held_keys.clear();
  for (const Slice& slice : slices) stats_.held_keys.push_back(slice.key);
  std::sort(stats_.held_keys.begin(), stats_.held_keys.end());
  return absl::OkStatus();
}

const SliceStore::SliceState* SliceStore::Find(uint32_t key) const {
  auto it = slices_.find(key);
  return it == slices_.end() ? nullptr : it->second.get();
}

std::string SliceStore::SliceName(const SliceState& s) const {
  return absl::StrCat("slice ", s.slice.key, " of '", model_->tensors[s.slice.tensor].name, "' [",
                      s.slice.offset, ", ", s.slice.offset + s.slice.length, ")");
}

absl::Status SliceStore::ValidateSyncStep(const SliceState& s, int worker, int64_t clock) const {
  const auto version = static_cast<int64_t>(s.version);
  if (clock < version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "push for step ", clock, " to ", SliceName(s), ": step already applied (slice is at step ",
        version, ")"));
  }
  if (clock > version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "push for step ", clock, " to ", SliceName(s), ": slice is still at step ", version,
        "; pull step ", clock, " first"));
  }
  if (s.pushed[worker]) {
    return absl::AlreadyExistsError(absl::StrCat("worker ", worker, " already pushed step ", clock,
                                                 " to ", SliceName(s)));
  }
  return absl::OkStatus();
}

absl::Status SliceStore::ValidatePush(int worker, const PushRequestMsg& push,
                                      absl::Span<const absl::Span<const float>> payloads) const {
  if (model_ == nullptr) return absl::FailedPreconditionError("no model registered on this server yet");
  if (worker < 0 || worker >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat("worker rank ", worker, " out of range"));
  }
  if (push.clock < 0 || push.clock > kMaxClock) {
    return absl::InvalidArgumentError(absl::StrCat("push clock ", push.clock, " outside [0, ", kMaxClock, "]"));
  }
  if (payloads.size() != push.slices.size()) {
    return absl::InvalidArgumentError(absl::StrCat("push lists ", push.slices.size(),
                                                   " slices but carries ", payloads.size(),
                                                   " payload frames"));
  }
  const bool sync = model_->consistency.mode == ConsistencyMode::kSync;
  absl::flat_hash_map<uint32_t, bool> seen;
  for (size_t i = 0; i < push.slices.size(); ++i) {
    const SliceData& meta = push.slices[i];
    const SliceState* s = Find(meta.key);
    if (s == nullptr) return absl::NotFoundError(absl::StrCat("unknown slice key ", meta.key));
    if (!seen.emplace(meta.key, true).second) {
      return absl::InvalidArgumentError(absl::StrCat("slice key ", meta.key, " repeated in push"));
    }
    if (meta.length != s->slice.length || payloads[i].size() != s->slice.length) {
      return absl::InvalidArgumentError(absl::StrCat(
          "push to ", SliceName(*s), ": header says ", meta.length, " floats, payload has ",
          payloads[i].size(), ", slice has ", s->slice.length));
    }
    if (sync) PS_RETURN_IF_ERROR(ValidateSyncStep(*s, worker, push.clock));
  }
  if (allow_nonfinite_) return absl::OkStatus();
  // The one full pass over the payload before it is applied: spread it.
  std::vector<uint8_t> finite(payloads.size());
  pool_->ParallelFor(payloads.size(), [&](size_t i) { finite[i] = AllFinite(payloads[i]); });
  for (size_t i = 0; i < payloads.size(); ++i) {
    if (!finite[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "push to ", SliceName(*Find(push.slices[i].key)), ": gradient contains NaN or Inf"));
    }
  }
  return absl::OkStatus();
}

bool SliceStore::ApplySlice(SliceState& s, int worker, const SliceData& meta,
                            absl::Span<const float> grad) {
  if (model_->consistency.mode != ConsistencyMode::kSync) {
    optimizer_->Update(absl::MakeSpan(s.values), absl::MakeSpan(s.optimizer_state), grad, 1.0f,
                       s.optimizer_steps++);
    ++s.version;
    return true;
  }
  if (s.arrived == 0) {
    s.sum.resize(s.values.size());
    std::memcpy(s.sum.data(), grad.data(), grad.size() * sizeof(float));
  } else {
    AddInto(s.sum.data(), grad.data(), grad.size());
  }
  s.pushed[worker] = 1;
  if (++s.arrived < num_workers_) return false;
  optimizer_->Update(absl::MakeSpan(s.values), absl::MakeSpan(s.optimizer_state), s.sum,
                     1.0f / static_cast<float>(num_workers_), s.optimizer_steps++);
  ++s.version;
  s.arrived = 0;
  std::fill(s.pushed.begin(), s.pushed.end(), 0);
  return true;
}

absl::Status SliceStore::Push(int worker, const PushRequestMsg& push,
                              absl::Span<const absl::Span<const float>> payloads) {
  PS_RETURN_IF_ERROR(ValidatePush(worker, push, payloads));
  const size_t n = push.slices.size();
  std::vector<SliceState*> states(n);
  std::vector<uint64_t> staleness(n, 0);
  std::vector<uint8_t> updated(n, 0);
  for (size_t i = 0; i < n; ++i) {
    states[i] = slices_.find(push.slices[i].key)->second.get();
    const uint64_t base = push.slices[i].version;
    if (model_->consistency.mode != ConsistencyMode::kSync && base < states[i]->version) {
      staleness[i] = states[i]->version - base;
    }
  }
  pool_->ParallelFor(n, [&](size_t i) {
    updated[i] = ApplySlice(*states[i], worker, push.slices[i], payloads[i]);
  });
  if (stats_.staleness_histogram.empty()) stats_.staleness_histogram.assign(kStalenessBuckets, 0);
  for (size_t i = 0; i < n; ++i) {
    SliceState& s = *states[i];
    s.worker_clock[worker] = std::max(s.worker_clock[worker], push.clock + 1);
    ++stats_.staleness_histogram[std::min(staleness[i], kStalenessBuckets - 1)];
    stats_.staleness_max = std::max(stats_.staleness_max, staleness[i]);
    stats_.updates_applied += updated[i];
  }
  ++stats_.pushes_applied;
  return absl::OkStatus();
}

absl::Status SliceStore::CheckPull(const PullRequestMsg& pull) const {
  if (model_ == nullptr) return absl::FailedPreconditionError("no model registered on this server yet");
  if (pull.clock < 0 || pull.clock > kMaxClock) {
    return absl::InvalidArgumentError(absl::StrCat("pull clock ", pull.clock, " outside [0, ", kMaxClock, "]"));
  }
  absl::flat_hash_map<uint32_t, bool> seen;
  for (uint32_t key : pull.keys) {
    if (Find(key) == nullptr) return absl::NotFoundError(absl::StrCat("unknown slice key ", key));
    if (!seen.emplace(key, true).second) {
      return absl::InvalidArgumentError(absl::StrCat("slice key ", key, " repeated in pull"));
    }
  }
  return absl::OkStatus();
}

int64_t SliceStore::MinWorkerClock(const SliceState& s) const {
  return *std::min_element(s.worker_clock.begin(), s.worker_clock.end());
}

bool SliceStore::PullReady(const PullRequestMsg& pull) const {
  const Consistency& c = model_->consistency;
  if (c.mode == ConsistencyMode::kAsync) return true;
  for (uint32_t key : pull.keys) {
    const SliceState& s = *Find(key);
    if (c.mode == ConsistencyMode::kSync && static_cast<int64_t>(s.version) < pull.clock) return false;
    if (c.mode == ConsistencyMode::kSsp && MinWorkerClock(s) < pull.clock - c.staleness) return false;
  }
  return true;
}

std::string SliceStore::DescribeWait(const PullRequestMsg& pull) const {
  const Consistency& c = model_->consistency;
  for (uint32_t key : pull.keys) {
    const SliceState& s = *Find(key);
    std::vector<int> behind;
    for (int w = 0; w < num_workers_; ++w) {
      const bool late = c.mode == ConsistencyMode::kSync
                            ? !s.pushed[w]
                            : s.worker_clock[w] < pull.clock - c.staleness;
      if (late) behind.push_back(w);
    }
    if (c.mode == ConsistencyMode::kSync && static_cast<int64_t>(s.version) < pull.clock) {
      return absl::StrCat(SliceName(s), " is at step ", s.version, ", pull wants step ", pull.clock,
                          "; step ", s.version, " still needs pushes from workers [",
                          absl::StrJoin(behind, ","), "]");
    }
    if (c.mode == ConsistencyMode::kSsp && MinWorkerClock(s) < pull.clock - c.staleness) {
      return absl::StrCat(SliceName(s), ": pull at clock ", pull.clock, " with staleness ",
                          c.staleness, " needs every worker at clock ", pull.clock - c.staleness,
                          "; workers behind: [", absl::StrJoin(behind, ","), "]");
    }
  }
  return "nothing";
}

absl::Span<const float> SliceStore::Values(uint32_t key) const { return Find(key)->values; }
uint64_t SliceStore::Version(uint32_t key) const { return Find(key)->version; }

}  // namespace ps
