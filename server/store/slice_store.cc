#include "server/store/slice_store.h"

#include "common/base/cpu_clones.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/model/initializer.h"
#include "glog/logging.h"
#include "server/store/consistency_policy.h"
#include "server/store/slice_state.h"

namespace ps {
namespace {

PS_CPU_CLONES bool AllFinite(absl::Span<const float> v) {
  // Exponent bits all ones means NaN or Inf. An integer OR-reduction has no
  // dependency on float rounding, so the compiler vectorises it.
  const auto* bits = reinterpret_cast<const uint32_t*>(v.data());
  uint32_t bad = 0;
  for (size_t i = 0; i < v.size(); ++i) bad |= (bits[i] & 0x7f800000u) == 0x7f800000u;
  return bad == 0;
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Optimizer>>> TableOptimizers(const ModelSpec& model) {
  std::vector<std::unique_ptr<Optimizer>> out;
  for (size_t t = 0; t < model.tables.size(); ++t) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> o, Optimizer::Create(model.TableOptimizer(t)));
    out.push_back(std::move(o));
  }
  return out;
}

SliceStore::~SliceStore() = default;

SliceStore::SliceStore(ThreadPool* pool, bool allow_nonfinite, uint64_t max_bytes)
    : pool_(pool), allow_nonfinite_(allow_nonfinite), max_bytes_(max_bytes) {}

absl::Status SliceStore::Create(const ModelSpec& model, const std::vector<Slice>& slices, int num_workers,
                                absl::FunctionRef<void()> between) {
  if (model_ != nullptr) {
    if (*model_ == model && slice_list_ == slices && num_workers_ == num_workers) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError("server already holds a different model");
  }
  if (num_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_workers is ", num_workers));
  }
  PS_RETURN_IF_ERROR(model.ValidateFor(num_workers));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, Optimizer::Create(model.optimizer));
  PS_RETURN_IF_ERROR(CheckMemory(model, slices, *optimizer));
  SetTableBudget(model, slices, *optimizer);
  try {
    return Allocate(model, slices, num_workers, std::move(optimizer), between);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory allocating ", slices.size(), " slices on this server"));
  }
}

namespace {

// The floats a slice keeps: values, optimizer state, in sync mode the
// running sum of a step, and with delta pulls what the workers hold (ref).
// None for a slice outside the model (refused when the store is made: a
// slice list comes off the wire).
uint64_t SliceFloats(const ModelSpec& model, const Slice& slice, const Optimizer& optimizer) {
  if (!SliceFits(model, slice)) return 0;
  const bool sync = model.ConsistencyOf(slice.table, slice.tensor).mode == ConsistencyMode::kSync;
  const bool delta = !slice.table && model.TensorCompression(slice.tensor).delta_pull();
  return slice.length * (1 + (sync ? 1 : 0) + (delta ? 1 : 0)) + optimizer.StateSize(slice.length);
}

}  // namespace

absl::Status SliceStore::CheckMemory(const ModelSpec& model, const std::vector<Slice>& slices,
                                     const Optimizer& optimizer) const {
  if (max_bytes_ == 0) return absl::OkStatus();
  long double need = 0;
  for (const Slice& slice : slices)
    need += static_cast<long double>(SliceFloats(model, slice, optimizer)) * sizeof(float);
  // A table needs at least one row on each shard to work at all.
  for (const Slice& slice : slices) {
    if (!slice.table || !SliceFits(model, slice)) continue;
    const TableSpec& table = model.tables[slice.tensor];
    need += (table.dim + optimizer.StateSize(table.dim)) * sizeof(float) + TableShard::kRowOverheadBytes;
  }
  if (need <= max_bytes_) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("the model needs ", static_cast<uint64_t>(need / (1 << 20)), " MiB on this server; its budget is ",
                   max_bytes_ >> 20, " MiB (ps_server --max_memory_mb); add servers or shrink the model"));
}

void SliceStore::SetTableBudget(const ModelSpec& model, const std::vector<Slice>& slices,
                                const Optimizer& optimizer) const {
  uint64_t dense = 0;
  for (const Slice& slice : slices) dense += SliceFloats(model, slice, optimizer) * sizeof(float);
  // The disk tier's cache and memtables come out of the tables' share.
  if (table_budget_.disk != nullptr) dense += table_budget_.disk->memory_bytes();
  table_budget_.limit = max_bytes_ == 0 ? 0 : std::max<uint64_t>(1, max_bytes_ - std::min(dense, max_bytes_));
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
                                  std::unique_ptr<Optimizer> optimizer, absl::FunctionRef<void()> between) {
  PS_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Optimizer>> table_optimizers, TableOptimizers(model));
  absl::flat_hash_map<uint32_t, std::unique_ptr<SliceState>> states;
  for (const Slice& slice : slices) {
    if (!SliceFits(model, slice) || states.contains(slice.key)) {
      return absl::InvalidArgumentError(absl::StrCat("slice ", slice.key, " does not fit the model"));
    }
    auto s = EmptySlice(slice, num_workers);
    if (slice.table) {
      s->table = std::make_unique<TableShard>(model.tables[slice.tensor], *table_optimizers[slice.tensor],
                                              &table_budget_, slice.tensor, DiskLogOfSlice(slice.key));
    } else {
      s->values.resize(slice.length);
      FillInitialValues(model.tensors[slice.tensor], slice.offset, absl::MakeSpan(s->values));
      s->optimizer_state.assign(optimizer->StateSize(slice.length), 0.0f);
    }
    states.emplace(slice.key, std::move(s));
    between();
  }
  Install(model, slices, num_workers, std::move(optimizer), std::move(table_optimizers), std::move(states),
          std::vector<uint8_t>(num_workers, 1));
  return absl::OkStatus();
}

void SliceStore::Install(const ModelSpec& model, const std::vector<Slice>& slices, int num_workers,
                         std::unique_ptr<Optimizer> optimizer, std::vector<std::unique_ptr<Optimizer>> table_optimizers,
                         absl::flat_hash_map<uint32_t, std::unique_ptr<SliceState>> states,
                         std::vector<uint8_t> active) {
  model_ = std::make_unique<ModelSpec>(model);
  slice_list_ = slices;
  optimizer_ = std::move(optimizer);
  table_optimizers_ = std::move(table_optimizers);
  policy_ = ConsistencyPolicy::Create(model.consistency);
  table_policies_.clear();
  for (const TableSpec& t : model.tables) {
    table_policies_.push_back(t.consistency.has_value() ? ConsistencyPolicy::Create(*t.consistency) : nullptr);
  }
  num_workers_ = num_workers;
  active_ = std::move(active);
  RefreshWaited();
  slices_ = std::move(states);
  CountHeld();
}

void SliceStore::CountHeld() {
  stats_.slices_held = static_cast<uint32_t>(slices_.size());
  stats_.held_keys.clear();
  for (const Slice& slice : slice_list_) stats_.held_keys.push_back(slice.key);
  std::sort(stats_.held_keys.begin(), stats_.held_keys.end());
}

absl::Span<const uint8_t> SliceStore::Waited(const SliceState& s) const {
  if (stage_active_.empty() || s.table != nullptr) return active_;
  return stage_active_[model_->tensors[s.slice.tensor].stage];
}

void SliceStore::RefreshWaited() {
  stage_active_.clear();
  if (model_->stages <= 1) return;
  for (int k = 0; k < model_->stages; ++k) stage_active_.push_back(StageHolders(*model_, k, active_));
}

const ConsistencyPolicy& SliceStore::PolicyOf(const SliceState& s) const {
  const ConsistencyPolicy* own = s.table != nullptr ? table_policies_[s.slice.tensor].get() : nullptr;
  return own != nullptr ? *own : *policy_;
}

bool SliceStore::IsBuffer(const SliceState& s) const {
  return s.table == nullptr && model_->tensors[s.slice.tensor].buffer;
}

bool SliceStore::Holds(const SliceState& s, int worker) const {
  return stage_active_.empty() || s.table != nullptr ||
         model_->StageOf(worker) == model_->tensors[s.slice.tensor].stage;
}

absl::Status SliceStore::CheckHolder(const SliceState& s, int worker) const {
  if (Holds(s, worker)) return absl::OkStatus();
  const int stage = model_->tensors[s.slice.tensor].stage;
  return absl::FailedPreconditionError(
      absl::StrCat("worker ", worker, " is stage ", model_->StageOf(worker), " of ", model_->stages, " and pushed ",
                   SliceName(s), ", which stage ", stage, " holds; a stage pushes only the tensors of its own layers"));
}

const SliceState* SliceStore::Find(uint32_t key) const {
  auto it = slices_.find(key);
  return it == slices_.end() ? nullptr : it->second.get();
}

std::string SliceStore::SliceName(const SliceState& s) const {
  if (s.table != nullptr) {
    return absl::StrCat("slice ", s.slice.key, " (table '", model_->tables[s.slice.tensor].name, "' on server ",
                        s.slice.server, ")");
  }
  return absl::StrCat("slice ", s.slice.key, " of '", model_->tensors[s.slice.tensor].name, "' [", s.slice.offset, ", ",
                      s.slice.offset + s.slice.length, ")");
}

absl::StatusOr<Gradient> SliceStore::TableGradient(const SliceState& s, const SliceData& meta,
                                                   absl::Span<const float> payload) const {
  const uint64_t dim = s.table->dim();
  const uint64_t rows = meta.rows;
  if (rows > kMaxRowsPerRequest) {
    return absl::InvalidArgumentError(
        absl::StrCat("push to ", SliceName(s), ": ", rows, " rows; at most ", kMaxRowsPerRequest, " in one request"));
  }
  // Each id takes the room of two floats.
  if (meta.length != rows * dim || payload.size() != rows * (2 + dim)) {
    return absl::InvalidArgumentError(absl::StrCat("push to ", SliceName(s), ": header says ", rows, " rows and ",
                                                   meta.length, " floats; rows of dim ", dim, " need ", rows * dim,
                                                   " floats and a frame of ", rows * (8 + 4 * dim),
                                                   " bytes; the frame has ", payload.size() * sizeof(float), " bytes"));
  }
  const auto* ids = reinterpret_cast<const uint64_t*>(payload.data());
  return Gradient(payload.subspan(2 * rows), absl::MakeConstSpan(ids, rows));
}

absl::Status SliceStore::CheckDeclared(const SliceData& meta) const {
  const SliceState* s = Find(meta.key);
  if (s == nullptr) return absl::NotFoundError(absl::StrCat("unknown slice key ", meta.key));
  if (s->table == nullptr) {
    if (meta.rows == 0 && meta.length == s->slice.length) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("push to ", SliceName(*s), ": header says ", meta.length, " floats",
                                                   meta.rows ? " in rows" : "", ", slice has ", s->slice.length));
  }
  const uint64_t dim = s->table->dim();
  if (meta.rows <= kMaxRowsPerRequest && meta.length == uint64_t{meta.rows} * dim) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "push to ", SliceName(*s), ": header says ", meta.rows, " rows and ", meta.length, " floats; rows of dim ", dim,
      " need ", uint64_t{meta.rows} * dim, " floats, at most ", kMaxRowsPerRequest, " rows in one request"));
}

absl::Status SliceStore::CheckPushHeader(int worker, const PushRequestMsg& push, size_t frames) const {
  if (model_ == nullptr) return absl::FailedPreconditionError("no model registered on this server yet");
  if (worker < 0 || worker >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat("worker rank ", worker, " out of range"));
  }
  if (!active_[worker]) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker, " has been removed from the job; its pushes are refused until it joins again"));
  }
  if (push.clock < 0 || push.clock > kMaxClock) {
    return absl::InvalidArgumentError(absl::StrCat("push clock ", push.clock, " outside [0, ", kMaxClock, "]"));
  }
  if (frames != push.slices.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("push lists ", push.slices.size(), " slices but carries ", frames, " payload frames"));
  }
  return absl::OkStatus();
}

absl::Status SliceStore::ValidatePush(int worker, const PushRequestMsg& push,
                                      absl::Span<const absl::Span<const float>> payloads,
                                      std::vector<Gradient>* grads) const {
  PS_RETURN_IF_ERROR(CheckPushHeader(worker, push, payloads.size()));
  absl::flat_hash_map<uint32_t, bool> seen;
  grads->clear();
  for (size_t i = 0; i < push.slices.size(); ++i) {
    const SliceData& meta = push.slices[i];
    const SliceState* s = Find(meta.key);
    if (s == nullptr) return absl::NotFoundError(absl::StrCat("unknown slice key ", meta.key));
    if (!seen.emplace(meta.key, true).second) {
      return absl::InvalidArgumentError(absl::StrCat("slice key ", meta.key, " repeated in push"));
    }
    if (s->table != nullptr) {
      PS_ASSIGN_OR_RETURN(Gradient g, TableGradient(*s, meta, payloads[i]));
      grads->push_back(g);
    } else if (meta.rows != 0 || meta.length != s->slice.length || payloads[i].size() != s->slice.length) {
      return absl::InvalidArgumentError(absl::StrCat("push to ", SliceName(*s), ": header says ", meta.length,
                                                     " floats", meta.rows ? " in rows" : "", ", payload has ",
                                                     payloads[i].size(), ", slice has ", s->slice.length));
    } else {
      grads->push_back(Gradient(payloads[i]));
    }
    if (!push.assign && IsBuffer(*s)) {
      return absl::InvalidArgumentError(
          absl::StrCat("push to ", SliceName(*s), ": a buffer is set with assign, it takes no gradients"));
    }
    PS_RETURN_IF_ERROR(CheckHolder(*s, worker));
    if (!push.assign && !Skipped(*s, worker, push.clock)) {
      PS_RETURN_IF_ERROR(PolicyOf(*s).CheckPush(*s, worker, push.clock, [&] { return SliceName(*s); }));
    }
  }
  if (allow_nonfinite_) return absl::OkStatus();
  // The one full pass over the payload before it is applied: spread it.
  std::vector<uint8_t> finite(grads->size());
  pool_->ParallelFor(grads->size(), [&](size_t i) { finite[i] = AllFinite((*grads)[i].values); });
  for (size_t i = 0; i < grads->size(); ++i) {
    if (!finite[i]) {
      return absl::InvalidArgumentError(absl::StrCat("push to ", SliceName(*Find(push.slices[i].key)), ": ",
                                                     push.assign ? "values contain" : "gradient contains",
                                                     " NaN or Inf"));
    }
  }
  return absl::OkStatus();
}

bool SliceStore::Skipped(const SliceState& s, int worker, int64_t clock) {
  return !s.floor.empty() && clock < s.floor[worker];
}

absl::Status SliceStore::Push(int worker, const PushRequestMsg& push,
                              absl::Span<const absl::Span<const float>> payloads) {
  std::vector<Gradient> grads;
  PS_RETURN_IF_ERROR(ValidatePush(worker, push, payloads, &grads));
  if (push.assign) {
    Assign(push, grads);
    return absl::OkStatus();
  }
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
    const bool stale = PolicyOf(*s).MeasuresStaleness() && base < s->version;
    index.push_back(i);
    states.push_back(s);
    staleness.push_back(stale ? s->version - base : 0);
  }
  if (states.empty() && !push.slices.empty()) return absl::OkStatus();  // every slice was applied before
  std::vector<uint8_t> updated(states.size(), 0);
  std::vector<std::optional<CompletedStep>> done(states.size());
  pool_->ParallelFor(states.size(), [&](size_t j) {
    SliceState& s = *states[j];
    if (Recorded(s)) {  // a step that now has all its pushes completes in CompleteDueSteps
      if (PolicyOf(s).Accumulate(s, worker, grads[index[j]], Waited(s))) done[j] = Due(s);
    } else {
      updated[j] = PolicyOf(s).Apply(s, worker, grads[index[j]], *optimizer_, Waited(s));
    }
  });
  for (size_t j = 0; j < states.size(); ++j) {
    if (!done[j].has_value()) continue;
    completed_.push_back(std::move(*done[j]));
    due_.push_back(states[j]);
  }
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
  auto check = [&](uint32_t key, bool table) -> absl::Status {
    const SliceState* s = Find(key);
    if (s == nullptr) return absl::NotFoundError(absl::StrCat("unknown slice key ", key));
    if (!seen.emplace(key, true).second) {
      return absl::InvalidArgumentError(absl::StrCat("slice key ", key, " repeated in pull"));
    }
    if ((s->table != nullptr) != table) {
      return absl::InvalidArgumentError(
          absl::StrCat(SliceName(*s), table ? " has no rows: pull it by key" : " is a table shard: pull rows of it"));
    }
    return absl::OkStatus();
  };
  for (uint32_t key : pull.keys) PS_RETURN_IF_ERROR(check(key, false));
  if (!pull.have.empty() && pull.have.size() != pull.keys.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pull of ", pull.keys.size(), " slices says which versions it holds of ", pull.have.size()));
  }
  for (const RowsRequest& rows : pull.rows) {
    PS_RETURN_IF_ERROR(check(rows.key, true));
    if (rows.ids.size() > kMaxRowsPerRequest) {
      return absl::InvalidArgumentError(absl::StrCat("pull of ", rows.ids.size(), " rows of ",
                                                     SliceName(*Find(rows.key)), "; at most ", kMaxRowsPerRequest,
                                                     " in one request"));
    }
  }
  return absl::OkStatus();
}

namespace {

// Whether `fn` holds for some key a pull reads, dense or table shard.
template <typename Fn>
bool AnyPulledKey(const PullRequestMsg& pull, Fn fn) {
  for (uint32_t key : pull.keys) {
    if (fn(key)) return true;
  }
  for (const RowsRequest& rows : pull.rows) {
    if (fn(rows.key)) return true;
  }
  return false;
}

}  // namespace

bool SliceStore::PullReady(const PullRequestMsg& pull) const {
  return !AnyPulledKey(pull, [&](uint32_t key) {
    const SliceState& s = *Find(key);
    return !IsBuffer(s) && !PolicyOf(s).PullReady(s, pull.clock, Waited(s));
  });
}

void SliceStore::Assign(const PushRequestMsg& push, absl::Span<const Gradient> values) {
  std::vector<SliceState*> states(push.slices.size());
  for (size_t i = 0; i < push.slices.size(); ++i) states[i] = slices_.find(push.slices[i].key)->second.get();
  pool_->ParallelFor(states.size(), [&](size_t i) {
    SliceState& s = *states[i];
    if (s.table != nullptr) {
      s.table->Assign(values[i].ids, values[i].values);
      return;
    }
    std::copy(values[i].values.begin(), values[i].values.end(), s.values.begin());
    s.delta = DeltaPull{};  // at the same version: what workers hold is no longer a step behind
    std::fill(s.optimizer_state.begin(), s.optimizer_state.end(), 0.0f);
    s.optimizer_steps = 0;
  });
  ++stats_.assigns_applied;
}

bool SliceStore::PushAhead(const PushRequestMsg& push) const {
  if (model_ == nullptr || push.assign) return false;
  for (const SliceData& meta : push.slices) {
    const SliceState* s = Find(meta.key);
    if (s != nullptr && PolicyOf(*s).PushAhead(*s, push.clock)) return true;
  }
  return false;
}

std::string SliceStore::DescribeWait(const PullRequestMsg& pull) const {
  std::string wait;
  AnyPulledKey(pull, [&](uint32_t key) {
    const SliceState& s = *Find(key);
    wait = PolicyOf(s).DescribeWait(s, pull.clock, Waited(s), [&] { return SliceName(s); });
    return !wait.empty();
  });
  return wait.empty() ? "nothing" : wait;
}

std::vector<TableDisk::Rename> SliceStore::DiskLogRenames() const {
  absl::flat_hash_map<uint32_t, int> shards;  // per table, its shards here
  for (const auto& [key, s] : slices_) {
    if (s->table != nullptr) ++shards[s->slice.tensor];
  }
  std::vector<TableDisk::Rename> out;
  for (const auto& [key, s] : slices_) {
    if (s->table == nullptr || s->table->own_disk_log() || shards[s->slice.tensor] != 1) continue;
    out.push_back(TableDisk::Rename{s->table->disk_log(), DiskLogOfSlice(key), s->table->disk_rows()});
  }
  return out;
}

void SliceStore::OwnDiskLogs(const std::vector<TableDisk::Rename>& renames) {
  for (const TableDisk::Rename& r : renames) {
    if (r.done) slices_.at(r.to & ~kKeyedDiskLog)->table->set_disk_log(r.to);
  }
}

uint64_t SliceStore::DiskRows() const {
  uint64_t rows = 0;
  for (const auto& [key, s] : slices_) rows += s->table != nullptr ? s->table->disk_rows() : 0;
  return rows;
}

TableShard* SliceStore::Table(uint32_t key) { return slices_.find(key)->second->table.get(); }

std::vector<TableStatsMsg> SliceStore::TableStats() const {
  std::vector<TableStatsMsg> out;
  for (const Slice& slice : slice_list_) {
    if (slice.table) out.push_back(Find(slice.key)->table->Stats());
  }
  return out;
}

absl::Span<const float> SliceStore::Values(uint32_t key) const { return Find(key)->values; }
uint64_t SliceStore::Version(uint32_t key) const { return Find(key)->version; }
CompressionSpec SliceStore::Compression(uint32_t key) const {
  const Slice& slice = Find(key)->slice;
  return slice.table ? model_->TableCompression(slice.tensor) : model_->TensorCompression(slice.tensor);
}
DeltaReply SliceStore::PullDelta(uint32_t key, uint64_t have) {
  SliceState& s = *slices_.find(key)->second;
  return ps::PullDelta(s.delta, s.version, s.values, have, Compression(key));
}

// ---- workers leaving and joining ----------------------------------------------

bool SliceStore::SetWorkerActive(int worker, bool active) {
  CHECK(model_ != nullptr) << "SetWorkerActive before a model exists";
  CHECK(worker >= 0 && worker < num_workers_) << "worker " << worker << " out of range";
  if ((active_[worker] != 0) == active) return false;
  if (active) {
    for (auto& [key, s] : slices_) PolicyOf(*s).Rejoin(*s, worker, Waited(*s));
  }
  active_[worker] = active ? 1 : 0;
  RefreshWaited();
  const bool any_settled = SettleAll();
  bool frees_pulls = policy_->LeavingFreesPulls();
  for (const auto& p : table_policies_) frees_pulls = frees_pulls || (p != nullptr && p->LeavingFreesPulls());
  return any_settled || (!active && frees_pulls);
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
  // With pipeline stages, only the slices of the worker's stage: it never
  // pushes the others (none here: the largest clock, no say in the minimum).
  int64_t clock = std::numeric_limits<int64_t>::max();
  for (const auto& [key, s] : slices_) {
    if (Holds(*s, worker) && !IsBuffer(*s)) clock = std::min(clock, s->worker_clock[worker]);
  }
  return clock;
}

uint64_t SliceStore::MinVersion() const {
  if (slices_.empty()) return 0;
  uint64_t v = std::numeric_limits<uint64_t>::max();
  for (const auto& [key, s] : slices_) {
    if (!IsBuffer(*s)) v = std::min(v, s->version);
  }
  return v == std::numeric_limits<uint64_t>::max() ? 0 : v;
}

uint64_t SliceStore::MaxVersion() const {
  uint64_t v = 0;
  for (const auto& [key, s] : slices_) v = std::max(v, s->version);
  return v;
}

// ---- checkpoints ----------------------------------------------------------------

const SliceState& SliceStore::State(uint32_t key) const { return *Find(key); }

absl::Status SliceStore::Adopt(StoreContents contents) {
  CHECK(model_ == nullptr) << "Adopt into a store that already holds a model";
  const auto workers = static_cast<size_t>(contents.num_workers);
  CHECK_EQ(contents.active.size(), workers);
  CHECK_EQ(contents.states.size(), contents.slices.size());
  for (const auto& [key, s] : contents.states) {
    CHECK(s->pushed.size() == workers && s->worker_clock.size() == workers && s->join_step.size() == workers &&
          (s->floor.empty() || s->floor.size() == workers))
        << "slice " << key << ": per-worker state not sized for " << workers << " workers";
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, Optimizer::Create(contents.model.optimizer));
  PS_RETURN_IF_ERROR(CheckMemory(contents.model, contents.slices, *optimizer));
  CHECK_EQ(contents.table_optimizers.size(), contents.model.tables.size());
  Install(contents.model, contents.slices, contents.num_workers, std::move(optimizer),
          std::move(contents.table_optimizers), std::move(contents.states), std::move(contents.active));
  stats_.pushes_applied = contents.stats.pushes_applied;
  stats_.updates_applied = contents.stats.updates_applied;
  stats_.staleness_max = contents.stats.staleness_max;
  stats_.staleness_histogram = std::move(contents.stats.staleness_histogram);
  return absl::OkStatus();
}

absl::Status SliceStore::AddCopies(StoreContents contents) {
  PS_RETURN_IF_ERROR(CheckCopies(contents));
  for (auto& [key, s] : contents.states) {
    if (!slices_.contains(key)) slice_list_.push_back(s->slice);
    slices_[key] = std::move(s);
  }
  for (auto& o : contents.table_optimizers) copied_optimizers_.push_back(std::move(o));
  CountHeld();
  return absl::OkStatus();
}

absl::Status SliceStore::CheckCopies(const StoreContents& contents) const {
  if (model_ == nullptr) return absl::FailedPreconditionError("a slice copy for a server that holds no model");
  if (contents.model != *model_ || contents.num_workers != num_workers_) {
    return absl::FailedPreconditionError("a slice copy of another model or worker count than this server's");
  }
  const auto workers = static_cast<size_t>(num_workers_);
  for (const auto& [key, s] : contents.states) {
    if (s->pushed.size() != workers || s->worker_clock.size() != workers || s->join_step.size() != workers ||
        (!s->floor.empty() && s->floor.size() != workers)) {
      return absl::FailedPreconditionError(absl::StrCat("slice copy ", key, ": per-worker state of another size"));
    }
  }
  return absl::OkStatus();
}

absl::Status SliceStore::Retain(const ModelSpec& model, const std::vector<Slice>& slices, int num_workers) {
  if (model_ == nullptr || model != *model_ || num_workers != num_workers_) {
    return absl::FailedPreconditionError("server already holds a different model");
  }
  absl::flat_hash_set<uint32_t> keep;
  for (const Slice& slice : slices) {
    auto it = slices_.find(slice.key);
    if (it == slices_.end() || !(it->second->slice == slice)) {
      return absl::FailedPreconditionError(absl::StrCat("slice ", slice.key, " (", slice.table ? "table " : "tensor ",
                                                        slice.tensor, ", offset ", slice.offset,
                                                        ") is not in this server's checkpoint"));
    }
    keep.insert(slice.key);
  }
  std::erase_if(slice_list_, [&](const Slice& slice) { return !keep.contains(slice.key); });
  absl::erase_if(slices_, [&](auto& entry) {
    if (keep.contains(entry.first)) return false;
    DropDiskRows(*entry.second);
    return true;
  });
  CountHeld();
  return absl::OkStatus();
}

void SliceStore::DropDiskRows(const SliceState& s) {
  if (s.table != nullptr && s.table->own_disk_log() && table_budget_.disk != nullptr) {
    table_budget_.disk->DropShard(s.table->disk_log());
  }
}

void SliceStore::Drop(uint32_t key) {
  auto it = slices_.find(key);
  if (it == slices_.end()) return;
  DropDiskRows(*it->second);
  slices_.erase(it);
  std::erase_if(slice_list_, [&](const Slice& slice) { return slice.key == key; });
  CountHeld();
}

std::vector<SliceData> SliceStore::Held() const {
  std::vector<SliceData> held;
  for (const Slice& slice : slice_list_) {
    const SliceState& s = *slices_.at(slice.key);
    held.push_back(
        SliceData{slice.key, slice.length, s.version, s.table != nullptr ? static_cast<uint32_t>(s.table->rows()) : 0});
  }
  return held;
}

}  // namespace ps
