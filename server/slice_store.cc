#include "server/slice_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/codec.h"
#include "common/initializer.h"
#include "common/raw_bytes.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/consistency_policy.h"
#include "server/slice_state.h"

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

// Written so that no sum can wrap around: slices come off the wire or a file.
bool SliceFits(const ModelSpec& model, const Slice& slice) {
  const uint64_t n = slice.tensor < model.tensors.size()
                         ? static_cast<uint64_t>(model.tensors[slice.tensor].NumElements())
                         : 0;
  return slice.length > 0 && slice.length <= n && slice.offset <= n - slice.length;
}

// ---- serialised form --------------------------------------------------------
//
// Serialize() writes, all integers and floats little-endian:
//   u32 kStoreFormat
//   u64 n, then n bytes: EncodeEnvelope of a CreateSlicesRequestMsg holding the
//       model, the slice list and num_workers (the codec bounds and checks it)
//   u8 x num_workers: active flags
//   u64 pushes_applied, u64 updates_applied, u64 staleness_max,
//   u64 h (0 or kStalenessBuckets), u64 x h: the staleness histogram
//   per slice, in slice-list order:
//     u32 key, u64 version, u64 optimizer_steps, u32 arrived,
//     u8 x W pushed, i64 x W worker_clock, u64 x W join_step,
//     (format 2) u8 has_floor, then i64 x W floor when it is 1,
//     f32 x length values, f32 x StateSize(length) optimizer state,
//     f32 x length sum (only when arrived > 0)
// and nothing after the last slice.
constexpr uint32_t kStoreFormat = 2;  // format 1 (no floors) is read too

}  // namespace


// Reads what Serialize wrote. Every read checks that the bytes are there
// before it allocates, so a length field cannot make us allocate more than
// the data holds.
class SliceStore::Reader {
 public:
  explicit Reader(absl::string_view data) : data_(data) {}
  void set_format(uint32_t format) { format_ = format; }
  size_t remaining() const { return data_.size(); }

  template <typename T>
  absl::Status Get(T* v, absl::string_view what) {
    if (data_.size() < sizeof(T)) return Truncated(what);
    std::memcpy(v, data_.data(), sizeof(T));
    data_.remove_prefix(sizeof(T));
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status GetArray(uint64_t n, std::vector<T>* v, absl::string_view what) {
    if (n > data_.size() / sizeof(T)) return Truncated(what);
    v->resize(n);
    std::memcpy(v->data(), data_.data(), n * sizeof(T));
    data_.remove_prefix(n * sizeof(T));
    return absl::OkStatus();
  }

  absl::StatusOr<CreateSlicesRequestMsg> Spec();
  absl::Status Active(int num_workers, std::vector<uint8_t>* active);
  absl::Status Stats(StatsReplyMsg* stats);
  absl::StatusOr<std::unique_ptr<SliceState>> NextSlice(const CreateSlicesRequestMsg& spec,
                                                        const Slice& slice,
                                                        const Optimizer& optimizer);

 private:
  static absl::Status Truncated(absl::string_view what) {
    return absl::DataLossError(absl::StrCat("slice store data is truncated: it ends inside ", what));
  }
  absl::Status SliceCounters(const CreateSlicesRequestMsg& spec, SliceState& s);
  absl::Status Floors(uint64_t workers, const std::string& name, SliceState& s);

  absl::string_view data_;
  uint32_t format_ = kStoreFormat;
};

absl::StatusOr<CreateSlicesRequestMsg> SliceStore::Reader::Spec() {
  uint64_t n = 0;
  PS_RETURN_IF_ERROR(Get(&n, "the model's length"));
  if (n > data_.size()) return Truncated("the model");
  const absl::Span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(data_.data()), n);
  data_.remove_prefix(n);
  absl::StatusOr<Envelope> env = DecodeEnvelope(bytes);
  if (!env.ok()) {
    return absl::DataLossError(absl::StrCat("the model and slice list do not decode: ",
                                            env.status().message()));
  }
  auto* spec = std::get_if<CreateSlicesRequestMsg>(&env->body);
  if (spec == nullptr) {
    return absl::DataLossError(absl::StrCat("the model record holds a ", BodyName(env->body),
                                            " message, not a createSlicesRequest"));
  }
  if (absl::Status s = spec->model.Validate(); !s.ok()) {
    return absl::DataLossError(absl::StrCat("the model does not validate: ", s.message()));
  }
  if (spec->num_workers < 1) {
    return absl::DataLossError(absl::StrCat("num_workers is ", spec->num_workers));
  }
  return std::move(*spec);
}

absl::Status SliceStore::Reader::Active(int num_workers, std::vector<uint8_t>* active) {
  PS_RETURN_IF_ERROR(GetArray(static_cast<uint64_t>(num_workers), active, "the active workers"));
  for (int w = 0; w < num_workers; ++w) {
    if ((*active)[w] > 1) {
      return absl::DataLossError(absl::StrCat("active flag of worker ", w, " is ",
                                              int{(*active)[w]}));
    }
  }
  return absl::OkStatus();
}

absl::Status SliceStore::Reader::Stats(StatsReplyMsg* stats) {
  PS_RETURN_IF_ERROR(Get(&stats->pushes_applied, "the counters"));
  PS_RETURN_IF_ERROR(Get(&stats->updates_applied, "the counters"));
  PS_RETURN_IF_ERROR(Get(&stats->staleness_max, "the counters"));
  uint64_t buckets = 0;
  PS_RETURN_IF_ERROR(Get(&buckets, "the counters"));
  if (buckets != 0 && buckets != kStalenessBuckets) {
    return absl::DataLossError(absl::StrCat("staleness histogram has ", buckets,
                                            " buckets, not 0 or ", kStalenessBuckets));
  }
  return GetArray(buckets, &stats->staleness_histogram, "the staleness histogram");
}

absl::StatusOr<std::unique_ptr<SliceState>> SliceStore::Reader::NextSlice(
    const CreateSlicesRequestMsg& spec, const Slice& slice, const Optimizer& optimizer) {
  const std::string name = absl::StrCat("slice ", slice.key);
  uint32_t key = 0;
  PS_RETURN_IF_ERROR(Get(&key, name));
  if (key != slice.key) {
    return absl::DataLossError(absl::StrCat("slice data out of order: expected slice ", slice.key,
                                            ", found slice ", key));
  }
  // Not EmptySlice: the per-worker vectors are sized as they are read, so
  // their size never exceeds what the data holds.
  auto s = std::make_unique<SliceState>();
  s->slice = slice;
  PS_RETURN_IF_ERROR(SliceCounters(spec, *s));
  PS_RETURN_IF_ERROR(GetArray(slice.length, &s->values, absl::StrCat(name, "'s values")));
  PS_RETURN_IF_ERROR(GetArray(optimizer.StateSize(slice.length), &s->optimizer_state,
                              absl::StrCat(name, "'s optimizer state")));
  if (s->arrived > 0) {
    PS_RETURN_IF_ERROR(GetArray(slice.length, &s->sum, absl::StrCat(name, "'s step sum")));
  }
  return s;
}

// The steps below which a rank's pushes skip the slice (format 2): none, or
// one per worker, never above the worker's clock.
absl::Status SliceStore::Reader::Floors(uint64_t workers, const std::string& name, SliceState& s) {
  if (format_ < 2) return absl::OkStatus();
  uint8_t has_floor = 0;
  PS_RETURN_IF_ERROR(Get(&has_floor, name));
  if (has_floor > 1) return absl::DataLossError(absl::StrCat(name, ": bad floor flag ", int{has_floor}));
  if (has_floor == 0) return absl::OkStatus();
  PS_RETURN_IF_ERROR(GetArray(workers, &s.floor, name));
  for (uint64_t w = 0; w < workers; ++w) {
    if (s.floor[w] < 0 || s.floor[w] > s.worker_clock[w]) {
      return absl::DataLossError(absl::StrCat(name, ": worker ", w, "'s floor ", s.floor[w], " is outside [0, its clock ",
                                              s.worker_clock[w], "]"));
    }
  }
  return absl::OkStatus();
}

// The scalars and per-worker vectors of one slice, with the invariants the
// store keeps between calls.
absl::Status SliceStore::Reader::SliceCounters(const CreateSlicesRequestMsg& spec, SliceState& s) {
  const std::string name = absl::StrCat("slice ", s.slice.key);
  const auto workers = static_cast<uint64_t>(spec.num_workers);
  PS_RETURN_IF_ERROR(Get(&s.version, name));
  PS_RETURN_IF_ERROR(Get(&s.optimizer_steps, name));
  uint32_t arrived = 0;
  PS_RETURN_IF_ERROR(Get(&arrived, name));
  PS_RETURN_IF_ERROR(GetArray(workers, &s.pushed, name));
  PS_RETURN_IF_ERROR(GetArray(workers, &s.worker_clock, name));
  PS_RETURN_IF_ERROR(GetArray(workers, &s.join_step, name));
  PS_RETURN_IF_ERROR(Floors(workers, name, s));
  if (s.optimizer_steps > s.version) {
    return absl::DataLossError(absl::StrCat(name, " has ", s.optimizer_steps,
                                            " optimizer steps but version ", s.version));
  }
  const bool sync = spec.model.consistency.mode == ConsistencyMode::kSync;
  uint64_t pushed = 0;
  for (uint64_t w = 0; w < workers; ++w) {
    if (s.pushed[w] > 1 || (s.pushed[w] && !sync)) {
      return absl::DataLossError(absl::StrCat(name, ": bad pushed flag for worker ", w));
    }
    pushed += s.pushed[w];
    if (s.worker_clock[w] < 0 || s.worker_clock[w] > kMaxClock + 1) {
      return absl::DataLossError(absl::StrCat(name, ": clock of worker ", w, " is ",
                                              s.worker_clock[w], ", outside [0, ", kMaxClock + 1, "]"));
    }
    const uint64_t join_max = !sync ? 0 : s.pushed[w] ? s.version : s.version + 1;
    if (s.join_step[w] > join_max) {
      return absl::DataLossError(absl::StrCat(name, ": worker ", w, " joins at step ",
                                              s.join_step[w], ", after the slice's step ",
                                              s.version));
    }
  }
  if (arrived != pushed) {
    return absl::DataLossError(absl::StrCat(name, ": ", arrived, " pushes arrived but ", pushed,
                                            " workers marked as pushed"));
  }
  s.arrived = static_cast<int>(arrived);
  return absl::OkStatus();
}

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

std::unique_ptr<SliceState> SliceStore::EmptySlice(const Slice& slice, int num_workers) {
  auto s = std::make_unique<SliceState>();
  s->slice = slice;
  s->pushed.assign(num_workers, 0);
  s->worker_clock.assign(num_workers, 0);
  s->join_step.assign(num_workers, 0);
  return s;
}

absl::Status SliceStore::Allocate(const ModelSpec& model, const std::vector<Slice>& slices, int num_workers,
                                  std::unique_ptr<Optimizer> optimizer) {
  absl::flat_hash_map<uint32_t, std::unique_ptr<SliceState>> states;
  for (const Slice& slice : slices) {
    if (!SliceFits(model, slice) || states.contains(slice.key)) {
      return absl::InvalidArgumentError(absl::StrCat("slice ", slice.key, " does not fit the model"));
    }
    auto s = EmptySlice(slice, num_workers);
    s->values.resize(slice.length);
    FillInitialValues(model.tensors[slice.tensor], slice.offset, absl::MakeSpan(s->values));
    s->optimizer_state.assign(optimizer->StateSize(slice.length), 0.0f);
    states.emplace(slice.key, std::move(s));
  }
  Install(model, slices, num_workers, std::move(optimizer), std::move(states),
          std::vector<uint8_t>(num_workers, 1));
  return absl::OkStatus();
}

void SliceStore::Install(const ModelSpec& model, const std::vector<Slice>& slices, int num_workers,
                         std::unique_ptr<Optimizer> optimizer,
                         absl::flat_hash_map<uint32_t, std::unique_ptr<SliceState>> states,
                         std::vector<uint8_t> active) {
  model_ = std::make_unique<ModelSpec>(model);
  slice_list_ = slices;
  optimizer_ = std::move(optimizer);
  policy_ = ConsistencyPolicy::Create(model.consistency);
  num_workers_ = num_workers;
  active_ = std::move(active);
  slices_ = std::move(states);
  stats_.slices_held = static_cast<uint32_t>(slices_.size());
  stats_.held_keys.clear();
  for (const Slice& slice : slices) stats_.held_keys.push_back(slice.key);
  std::sort(stats_.held_keys.begin(), stats_.held_keys.end());
}

const SliceState* SliceStore::Find(uint32_t key) const {
  auto it = slices_.find(key);
  return it == slices_.end() ? nullptr : it->second.get();
}

std::string SliceStore::SliceName(const SliceState& s) const {
  return absl::StrCat("slice ", s.slice.key, " of '", model_->tensors[s.slice.tensor].name, "' [",
                      s.slice.offset, ", ", s.slice.offset + s.slice.length, ")");
}

absl::Status SliceStore::ValidatePush(int worker, const PushRequestMsg& push,
                                      absl::Span<const absl::Span<const float>> payloads) const {
  if (model_ == nullptr) return absl::FailedPreconditionError("no model registered on this server yet");
  if (worker < 0 || worker >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat("worker rank ", worker, " out of range"));
  }
  if (!active_[worker]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", worker, " has been removed from the job; its pushes are refused until it joins again"));
  }
  if (push.clock < 0 || push.clock > kMaxClock) {
    return absl::InvalidArgumentError(absl::StrCat("push clock ", push.clock, " outside [0, ", kMaxClock, "]"));
  }
  if (payloads.size() != push.slices.size()) {
    return absl::InvalidArgumentError(absl::StrCat("push lists ", push.slices.size(),
                                                   " slices but carries ", payloads.size(),
                                                   " payload frames"));
  }
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
    if (!Skipped(*s, worker, push.clock)) {
      PS_RETURN_IF_ERROR(policy_->CheckPush(*s, worker, push.clock, [&] { return SliceName(*s); }));
    }
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

bool SliceStore::Skipped(const SliceState& s, int worker, int64_t clock) {
  return !s.floor.empty() && clock < s.floor[worker];
}

absl::Status SliceStore::Push(int worker, const PushRequestMsg& push,
                              absl::Span<const absl::Span<const float>> payloads) {
  PS_RETURN_IF_ERROR(ValidatePush(worker, push, payloads));
  // The slices this push applies to (not skipped), their states and staleness.
  std::vector<size_t> index;
  std::vector<SliceState*> states;
  std::vector<uint64_t> staleness;
  for (size_t i = 0; i < push.slices.size(); ++i) {
    SliceState* s = slices_.find(push.slices[i].key)->second.get();
    if (Skipped(*s, worker, push.clock)) {
      ++stats_.slices_skipped;
      continue;
    }
    const uint64_t base = push.slices[i].version;
    const bool stale = policy_->MeasuresStaleness() && base < s->version;
    index.push_back(i);
    states.push_back(s);
    staleness.push_back(stale ? s->version - base : 0);
  }
  if (states.empty() && !push.slices.empty()) return absl::OkStatus();  // every slice was applied before
  std::vector<uint8_t> updated(states.size(), 0);
  pool_->ParallelFor(states.size(), [&](size_t j) {
    updated[j] = policy_->Apply(*states[j], worker, payloads[index[j]], *optimizer_, active_);
  });
  if (stats_.staleness_histogram.empty()) stats_.staleness_histogram.assign(kStalenessBuckets, 0);
  for (size_t j = 0; j < states.size(); ++j) {
    SliceState& s = *states[j];
    s.worker_clock[worker] = std::max(s.worker_clock[worker], push.clock + 1);
    ++stats_.staleness_histogram[std::min(staleness[j], kStalenessBuckets - 1)];
    stats_.staleness_max = std::max(stats_.staleness_max, staleness[j]);
    stats_.updates_applied += updated[j];
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

bool SliceStore::PullReady(const PullRequestMsg& pull) const {
  for (uint32_t key : pull.keys) {
    if (!policy_->PullReady(*Find(key), pull.clock, active_)) return false;
  }
  return true;
}

bool SliceStore::PushAhead(const PushRequestMsg& push) const {
  if (model_ == nullptr) return false;
  for (const SliceData& meta : push.slices) {
    const SliceState* s = Find(meta.key);
    if (s != nullptr && policy_->PushAhead(*s, push.clock)) return true;
  }
  return false;
}

std::string SliceStore::DescribeWait(const PullRequestMsg& pull) const {
  for (uint32_t key : pull.keys) {
    const SliceState& s = *Find(key);
    std::string wait = policy_->DescribeWait(s, pull.clock, active_, [&] { return SliceName(s); });
    if (!wait.empty()) return wait;
  }
  return "nothing";
}

absl::Span<const float> SliceStore::Values(uint32_t key) const { return Find(key)->values; }
uint64_t SliceStore::Version(uint32_t key) const { return Find(key)->version; }

// ---- workers leaving and joining ----------------------------------------------

bool SliceStore::SetWorkerActive(int worker, bool active) {
  CHECK(model_ != nullptr) << "SetWorkerActive before a model exists";
  CHECK(worker >= 0 && worker < num_workers_) << "worker " << worker << " out of range";
  if ((active_[worker] != 0) == active) return false;
  if (active) {
    for (auto& [key, s] : slices_) policy_->Rejoin(*s, worker, active_);
  }
  active_[worker] = active ? 1 : 0;
  std::vector<SliceState*> all;
  all.reserve(slices_.size());
  for (auto& [key, s] : slices_) all.push_back(s.get());
  std::vector<uint8_t> settled(all.size(), 0), ran(all.size(), 0);
  pool_->ParallelFor(all.size(), [&](size_t i) {
    bool r = false;
    settled[i] = policy_->Settle(*all[i], *optimizer_, active_, &r);
    ran[i] = r;
  });
  for (uint8_t r : ran) stats_.updates_applied += r;
  const bool any_settled = std::find(settled.begin(), settled.end(), 1) != settled.end();
  return any_settled || (!active && policy_->LeavingFreesPulls());
}

void SliceStore::SkipStepsAlreadyApplied(int worker) {
  CHECK(model_ != nullptr) << "SkipStepsAlreadyApplied before a model exists";
  CHECK(worker >= 0 && worker < num_workers_) << "worker " << worker << " out of range";
  for (auto& [key, s] : slices_) {
    if (s->floor.empty()) s->floor.assign(num_workers_, 0);
    s->floor[worker] = s->worker_clock[worker];
  }
}

bool SliceStore::IsWorkerActive(int worker) const {
  CHECK(model_ != nullptr) << "IsWorkerActive before a model exists";
  CHECK(worker >= 0 && worker < num_workers_) << "worker " << worker << " out of range";
  return active_[worker] != 0;
}

int64_t SliceStore::WorkerClock(int worker) const {
  CHECK(model_ != nullptr) << "WorkerClock before a model exists";
  CHECK(worker >= 0 && worker < num_workers_) << "worker " << worker << " out of range";
  if (slices_.empty()) return 0;
  int64_t clock = std::numeric_limits<int64_t>::max();
  for (const auto& [key, s] : slices_) clock = std::min(clock, s->worker_clock[worker]);
  return clock;
}

uint64_t SliceStore::MinVersion() const {
  if (slices_.empty()) return 0;
  uint64_t v = std::numeric_limits<uint64_t>::max();
  for (const auto& [key, s] : slices_) v = std::min(v, s->version);
  return v;
}

uint64_t SliceStore::MaxVersion() const {
  uint64_t v = 0;
  for (const auto& [key, s] : slices_) v = std::max(v, s->version);
  return v;
}

// ---- checkpoints ----------------------------------------------------------------

absl::Status SliceStore::Serialize(std::string* out) const {
  if (model_ == nullptr) {
    return absl::FailedPreconditionError("no model registered on this server yet: nothing to serialize");
  }
  CreateSlicesRequestMsg spec;
  spec.model = *model_;
  spec.slices = slice_list_;
  spec.num_workers = num_workers_;
  Envelope envelope;
  envelope.body = std::move(spec);
  const kj::Array<capnp::word> words = EncodeEnvelope(envelope);
  const kj::ArrayPtr<const kj::byte> spec_bytes = words.asBytes();

  // One allocation for the whole image: the floats dominate.
  uint64_t size = 64 + spec_bytes.size() + num_workers_ + kStalenessBuckets * 8;
  for (const auto& [key, s] : slices_) {
    size += 33 + num_workers_ * 25 +
            (s->values.size() * (s->arrived > 0 ? 2 : 1) + s->optimizer_state.size()) * sizeof(float);
  }
  out->clear();
  out->reserve(size);
  PutRaw<uint32_t>(out, kStoreFormat);
  PutRaw<uint64_t>(out, spec_bytes.size());
  out->append(reinterpret_cast<const char*>(spec_bytes.begin()), spec_bytes.size());
  PutRawArray<uint8_t>(out, active_);
  PutRaw<uint64_t>(out, stats_.pushes_applied);
  PutRaw<uint64_t>(out, stats_.updates_applied);
  PutRaw<uint64_t>(out, stats_.staleness_max);
  PutRaw<uint64_t>(out, stats_.staleness_histogram.size());
  PutRawArray<uint64_t>(out, stats_.staleness_histogram);
  for (const Slice& slice : slice_list_) {
    const SliceState& s = *Find(slice.key);
    PutRaw<uint32_t>(out, slice.key);
    PutRaw<uint64_t>(out, s.version);
    PutRaw<uint64_t>(out, s.optimizer_steps);
    PutRaw<uint32_t>(out, static_cast<uint32_t>(s.arrived));
    PutRawArray<uint8_t>(out, s.pushed);
    PutRawArray<int64_t>(out, s.worker_clock);
    PutRawArray<uint64_t>(out, s.join_step);
    PutRaw<uint8_t>(out, s.floor.empty() ? 0 : 1);
    PutRawArray<int64_t>(out, s.floor);
    PutRawArray<float>(out, s.values);
    PutRawArray<float>(out, s.optimizer_state);
    if (s.arrived > 0) PutRawArray<float>(out, s.sum);
  }
  return absl::OkStatus();
}

absl::Status SliceStore::Restore(absl::string_view data) {
  if (model_ != nullptr) {
    return absl::FailedPreconditionError("cannot restore a checkpoint into a server that already holds a model");
  }
  try {
    return RestoreFrom(data);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory restoring the slice store");
  }
}

absl::Status SliceStore::RestoreFrom(absl::string_view data) {
  Reader in(data);
  uint32_t format = 0;
  PS_RETURN_IF_ERROR(in.Get(&format, "the format version"));
  if (format < 1 || format > kStoreFormat) {
    return absl::DataLossError(absl::StrCat("slice store format ", format,
                                            " is not one this build reads (1 to ", kStoreFormat, ")"));
  }
  in.set_format(format);
  PS_ASSIGN_OR_RETURN(const CreateSlicesRequestMsg spec, in.Spec());
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = Optimizer::Create(spec.model.optimizer);
  if (!optimizer.ok()) {
    return absl::DataLossError(absl::StrCat("the optimizer does not validate: ", optimizer.status().message()));
  }
  PS_RETURN_IF_ERROR(CheckMemory(spec.model, spec.slices, **optimizer));
  std::vector<uint8_t> active;
  PS_RETURN_IF_ERROR(in.Active(spec.num_workers, &active));
  StatsReplyMsg stats;
  PS_RETURN_IF_ERROR(in.Stats(&stats));
  const std::unique_ptr<ConsistencyPolicy> policy = ConsistencyPolicy::Create(spec.model.consistency);
  absl::flat_hash_map<uint32_t, std::unique_ptr<SliceState>> states;
  for (const Slice& slice : spec.slices) {
    if (!SliceFits(spec.model, slice) || states.contains(slice.key)) {
      return absl::DataLossError(absl::StrCat("slice ", slice.key, " does not fit the model"));
    }
    PS_ASSIGN_OR_RETURN(std::unique_ptr<SliceState> s, in.NextSlice(spec, slice, **optimizer));
    if (policy->HasDueStep(*s, active)) {
      return absl::DataLossError(absl::StrCat("slice ", slice.key, ": step ", s->version,
                                              " has every push it waits for but was not applied"));
    }
    states.emplace(slice.key, std::move(s));
  }
  if (in.remaining() != 0) {
    return absl::DataLossError(absl::StrCat("slice store data has ", in.remaining(),
                                            " bytes after the last slice"));
  }
  Install(spec.model, spec.slices, spec.num_workers, *std::move(optimizer), std::move(states),
          std::move(active));
  stats_.pushes_applied = stats.pushes_applied;
  stats_.updates_applied = stats.updates_applied;
  stats_.staleness_max = stats.staleness_max;
  stats_.staleness_histogram = std::move(stats.staleness_histogram);
  return absl::OkStatus();
}

}  // namespace ps
