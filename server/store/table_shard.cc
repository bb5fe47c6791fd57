#include "server/store/table_shard.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/raw_bytes.h"
#include "common/base/status_macros.h"
#include "common/model/initializer.h"
#include "glog/logging.h"

namespace ps {
namespace {

enum Mark : uint8_t { kFree = 0, kHeld = 1, kTouched = 2 };
enum DiskFlag : uint8_t { kDirty = 1, kOnDisk = 2 };

void AddInto(float* __restrict sum, const float* __restrict grad, size_t n) {
  for (size_t i = 0; i < n; ++i) sum[i] += grad[i];
}

absl::Status Truncated(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("table data is truncated: it ends inside ", what));
}

template <typename T>
absl::Status Take(absl::string_view* data, T* v, absl::string_view what) {
  if (data->size() < sizeof(T)) return Truncated(what);
  *v = TakeRaw<T>(data);
  return absl::OkStatus();
}

// `n` elements of T, checked against what *data holds before anything is
// allocated.
template <typename T>
absl::StatusOr<absl::Span<const T>> TakeArray(absl::string_view* data, uint64_t n, absl::string_view what) {
  if (n > data->size() / sizeof(T)) return Truncated(what);
  absl::Span<const T> out(reinterpret_cast<const T*>(data->data()), n);
  data->remove_prefix(n * sizeof(T));
  return out;
}

}  // namespace

TableShard::TableShard(const TableSpec& spec, const Optimizer& optimizer, TableBudget* budget, uint32_t table_index,
                       uint32_t disk_log)
    : spec_(spec),
      optimizer_(optimizer),
      budget_(budget),
      table_index_(table_index),
      disk_log_(disk_log),
      row_floats_(static_cast<uint64_t>(spec.dim) + optimizer.StateSize(spec.dim)) {
  if (spec.admit_after > 1) sketch_ = std::make_unique<CountMinSketch>();
}

TableShard::~TableShard() { budget_->used.fetch_sub(index_.size() * RowBytes()); }

bool TableShard::Admitted(uint64_t id, bool pulled) {
  if (sketch_ == nullptr) return true;
  const uint32_t seen = pulled ? sketch_->Add(id) : sketch_->Estimate(id);
  return seen >= spec_.admit_after;
}

uint32_t TableShard::NewSlot() {
  const auto slot = static_cast<uint32_t>(slot_id_.size());
  if (slot % kRowsPerBlock == 0) {
    blocks_.push_back(std::make_unique<float[]>(static_cast<size_t>(kRowsPerBlock) * row_floats_));
  }
  slot_id_.push_back(0);
  slot_steps_.push_back(0);
  slot_mark_.push_back(kFree);
  slot_disk_.push_back(0);
  slot_seen_.push_back(0);
  return slot;
}

bool TableShard::EvictOne() {
  if (index_.empty()) return false;
  // Two sweeps at most: the first clears every mark it passes.
  for (size_t n = 0; n < 2 * slot_mark_.size() + 1; ++n) {
    if (hand_ >= slot_mark_.size()) hand_ = 0;
    const uint32_t slot = hand_++;
    if (slot_mark_[slot] == kTouched) {
      slot_mark_[slot] = kHeld;
    } else if (slot_mark_[slot] == kHeld && !(disk_refused_ && (slot_disk_[slot] & kDirty)) && Spill(slot)) {
      if (budget_->disk == nullptr) changes_.Removed(slot_id_[slot]);
      FreeSlot(slot);
      ++evictions_;
      return true;
    }
  }
  return false;
}

void TableShard::FreeSlot(uint32_t slot) {
  index_.erase(slot_id_[slot]);
  slot_mark_[slot] = kFree;
  free_.push_back(slot);
  budget_->used.fetch_sub(RowBytes());
}

void TableShard::DropDiskRow(uint64_t id) {
  budget_->disk->Delete(disk_log_, id);
  --disk_rows_;
}

void TableShard::Sweep() {
  next_sweep_ = now_ + std::max<uint64_t>(1, spec_.expire_after_steps / 4);
  for (uint32_t slot = 0; slot < slot_mark_.size(); ++slot) {
    if (slot_mark_[slot] == kFree || !Expired(slot_seen_[slot])) continue;
    if (slot_disk_[slot] & kOnDisk) DropDiskRow(slot_id_[slot]);
    changes_.Removed(slot_id_[slot]);
    FreeSlot(slot);
    ++expired_;
  }
  if (budget_->disk == nullptr || disk_rows_ == 0) return;
  // The disk rows too, a third of them or more a sweep (so every one within
  // N updates, the sweeps coming every N/4), those in memory left: their
  // disk copy's last-seen update is older than the row's.
  const uint64_t dropped =
      budget_->disk->ScanLive(disk_log_, std::max<uint64_t>(4096, disk_rows_ / 3 + 1), [&](uint64_t id, uint64_t seen) {
        if (index_.contains(id) || !Expired(seen)) return false;
        changes_.Removed(id);
        return true;
      });
  disk_rows_ -= std::min(dropped, disk_rows_);
  expired_ += dropped;
}

bool TableShard::Spill(uint32_t slot) {
  if (budget_->disk == nullptr || !(slot_disk_[slot] & kDirty)) return true;
  if (!PutOnDisk(slot_id_[slot], slot_steps_[slot], slot_seen_[slot], absl::MakeConstSpan(Slot(slot), row_floats_),
                 (slot_disk_[slot] & kOnDisk) != 0, "stays in memory")) {
    return false;
  }
  slot_disk_[slot] = kOnDisk;
  return true;
}

bool TableShard::PutOnDisk(uint64_t id, uint64_t steps, uint64_t seen, absl::Span<const float> floats, bool replaces,
                           const char* refused) {
  const absl::Status s = budget_->disk->Put(disk_log_, id, steps, seen, floats, replaces);
  if (!s.ok()) {
    LOG_EVERY_N(WARNING, 10000) << "table '" << spec_.name << "': row " << id << " " << refused << ": " << s;
    ++disk_refusals_;
    disk_refused_ = true;
    return false;
  }
  if (!replaces) ++disk_rows_;
  absent_.erase(id);  // made within this call, on disk now
  ++disk_writes_;
  return true;
}

bool TableShard::ApplyOnDisk(uint64_t id, absl::Span<const float> grad, float grad_scale) {
  if (budget_->disk == nullptr || !no_room_) return false;
  TableDisk::Row row;
  const bool on_disk = disk_rows_ > 0 && TakeDiskRow(id, &row);  // fetched_ holds it: FindOrCreate put it back
  if (!on_disk) {
    if (!Admitted(id, /*pulled=*/false)) return false;
    row.floats.resize(row_floats_);
    InitialRow(id, row.floats.data());
    row.steps = 0;
  }
  const size_t dim = spec_.dim;
  const absl::Span<float> floats = absl::MakeSpan(row.floats);
  optimizer_.Update(floats.first(dim), floats.subspan(dim), grad, grad_scale, row.steps++);
  if (!PutOnDisk(id, row.steps, now_, floats, on_disk, "found no room in memory or on disk")) return false;
  if (!on_disk) ++admissions_;
  return true;
}

void TableShard::FetchMissing(absl::Span<const uint64_t> ids) {
  fetched_.clear();
  absent_.clear();
  disk_refused_ = no_room_ = false;
  if (budget_->disk == nullptr || disk_rows_ == 0) return;
  std::vector<uint64_t> missing;
  for (uint64_t id : ids) {
    if (!index_.contains(id)) missing.push_back(id);
  }
  if (missing.empty()) return;
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  std::vector<TableDisk::Row> rows;
  std::vector<bool> found;
  budget_->disk->MultiGet(disk_log_, missing, row_floats_, &rows, &found);
  for (size_t i = 0; i < missing.size(); ++i) {
    if (found[i]) {
      fetched_.emplace(missing[i], std::move(rows[i]));
    } else {
      absent_.insert(missing[i]);
    }
  }
}

bool TableShard::TakeDiskRow(uint64_t id, TableDisk::Row* row) {
  if (auto it = fetched_.find(id); it != fetched_.end()) {
    *row = std::move(it->second);
    fetched_.erase(it);
    return true;
  }
  // Not read for this call: it went to disk within the call, or has no
  // disk row (known when the call's batch read missed it).
  if (absent_.contains(id)) return false;
  std::vector<TableDisk::Row> rows;
  std::vector<bool> found;
  budget_->disk->MultiGet(disk_log_, absl::MakeConstSpan(&id, 1), row_floats_, &rows, &found);
  if (!found[0]) return false;
  *row = std::move(rows[0]);
  return true;
}

int64_t TableShard::TakeSlot() {
  const uint64_t cost = RowBytes();
  if (budget_->limit > 0) {
    // Another table's shard may take room meanwhile: the reservation is
    // atomic, and a failed one is given back before evicting.
    while (budget_->used.fetch_add(cost) + cost > budget_->limit) {
      budget_->used.fetch_sub(cost);
      if (no_room_ || !EvictOne()) {
        no_room_ = true;
        return -1;
      }
    }
  } else {
    budget_->used.fetch_add(cost);
  }
  if (!free_.empty()) {
    const uint32_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  return NewSlot();
}

int64_t TableShard::FindOrCreate(uint64_t id, bool pulled, bool admit) {
  const uint8_t touched = spec_.expire_after_steps > 0 ? kDirty : 0;  // its disk copy must say when
  if (auto it = index_.find(id); it != index_.end()) {
    slot_mark_[it->second] = kTouched;
    slot_seen_[it->second] = now_;
    slot_disk_[it->second] |= touched;
    return it->second;
  }
  TableDisk::Row stored;
  bool on_disk = budget_->disk != nullptr && disk_rows_ > 0 && TakeDiskRow(id, &stored);
  if (on_disk && Expired(stored.last_seen)) {
    changes_.Removed(id);
    DropDiskRow(id);
    ++expired_;
    on_disk = false;
  }
  if (!on_disk && !admit && !Admitted(id, pulled)) return -1;
  const int64_t taken = TakeSlot();
  if (taken < 0) {
    if (on_disk) fetched_.emplace(id, std::move(stored));  // no room: Read reads it from there
    return -1;
  }
  const auto slot = static_cast<uint32_t>(taken);
  slot_id_[slot] = id;
  slot_mark_[slot] = kTouched;
  slot_seen_[slot] = now_;
  index_.emplace(id, slot);
  float* row = Slot(slot);
  if (on_disk) {
    std::copy(stored.floats.begin(), stored.floats.end(), row);
    slot_steps_[slot] = stored.steps;
    slot_disk_[slot] = kOnDisk | touched;
    ++disk_reads_;
    return slot;
  }
  InitialRow(id, row);
  slot_steps_[slot] = 0;
  slot_disk_[slot] = 0;  // equal to its initial row: nothing to write until it changes
  ++admissions_;
  return slot;
}

void TableShard::Read(absl::Span<const uint64_t> ids, absl::Span<float> out, bool count) {
  const size_t dim = spec_.dim;
  FetchMissing(ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    float* dst = out.data() + i * dim;
    const int64_t slot = FindOrCreate(ids[i], /*pulled=*/count);
    if (auto disk = slot < 0 ? fetched_.find(ids[i]) : fetched_.end(); disk != fetched_.end()) {
      // A disk row with no room in memory: read through, left on disk.
      std::memcpy(dst, disk->second.floats.data(), dim * sizeof(float));
      ++disk_reads_;
    } else if (slot < 0) {
      FillInitialRow(spec_, ids[i], absl::MakeSpan(dst, dim));
      ++rejections_;
    } else {
      std::memcpy(dst, Slot(static_cast<uint32_t>(slot)), dim * sizeof(float));
    }
  }
  pulled_ += ids.size();
}

void TableShard::Apply(absl::Span<const uint64_t> ids, absl::Span<const float> grads, float grad_scale) {
  const size_t dim = spec_.dim;
  const size_t state = row_floats_ - dim;
  ++now_;
  if (spec_.expire_after_steps > 0 && now_ >= next_sweep_) Sweep();
  FetchMissing(ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t slot = FindOrCreate(ids[i], /*pulled=*/false);
    if (slot < 0) {
      if (ApplyOnDisk(ids[i], grads.subspan(i * dim, dim), grad_scale)) {
        changes_.Changed(ids[i]);
      } else {
        ++dropped_;
      }
      continue;
    }
    changes_.Changed(ids[i]);
    slot_disk_[slot] |= kDirty;
    float* row = Slot(static_cast<uint32_t>(slot));
    optimizer_.Update(absl::MakeSpan(row, dim), absl::MakeSpan(row + dim, state), grads.subspan(i * dim, dim),
                      grad_scale, slot_steps_[slot]++);
  }
  pushed_ += ids.size();
}

void TableShard::Assign(absl::Span<const uint64_t> ids, absl::Span<const float> rows) {
  const size_t dim = spec_.dim;
  FetchMissing(ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t slot = FindOrCreate(ids[i], /*pulled=*/false, /*admit=*/true);
    if (slot < 0) {
      ++dropped_;
      continue;
    }
    changes_.Changed(ids[i]);
    slot_disk_[slot] |= kDirty;
    float* row = Slot(static_cast<uint32_t>(slot));
    std::copy(rows.begin() + i * dim, rows.begin() + (i + 1) * dim, row);
    std::fill(row + dim, row + row_floats_, 0.0f);
    slot_steps_[slot] = 0;
  }
}

void TableShard::Accumulate(absl::Span<const uint64_t> ids, absl::Span<const float> grads) {
  const size_t dim = spec_.dim;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto [it, fresh] = pending_index_.try_emplace(ids[i], static_cast<uint32_t>(pending_ids_.size()));
    const float* grad = grads.data() + i * dim;
    if (fresh) {
      pending_ids_.push_back(ids[i]);
      pending_sum_.insert(pending_sum_.end(), grad, grad + dim);
    } else {
      AddInto(pending_sum_.data() + static_cast<size_t>(it->second) * dim, grad, dim);
    }
  }
}

void TableShard::ApplyPending(float grad_scale) {
  Apply(pending_ids_, pending_sum_, grad_scale);
  pending_index_.clear();
  pending_ids_.clear();
  pending_sum_.clear();
}

TableStatsMsg TableShard::Stats() const {
  // The disk's rows that memory does not hold too (a row read back keeps
  // its disk copy): rows + disk_rows is the table.
  uint64_t both = 0;
  for (uint32_t slot = 0; slot < slot_mark_.size(); ++slot) {
    both += slot_mark_[slot] != kFree && (slot_disk_[slot] & kOnDisk) ? 1 : 0;
  }
  const uint64_t disk_only = disk_rows_ - std::min(both, disk_rows_);
  return TableStatsMsg{table_index_, index_.size(), Bytes(),   evictions_,  admissions_,  rejections_,    dropped_,
                       pulled_,      pushed_,       disk_only, disk_reads_, disk_writes_, disk_refusals_, expired_};
}

uint64_t TableShard::Bytes() const {
  const uint64_t slots = slot_id_.capacity() * (sizeof(uint64_t) * 3 + 2) + free_.capacity() * sizeof(uint32_t);
  const uint64_t map = index_.capacity() * (sizeof(std::pair<uint64_t, uint32_t>) + 1);
  const uint64_t pending = pending_index_.capacity() * (sizeof(std::pair<uint64_t, uint32_t>) + 1) +
                           pending_ids_.capacity() * sizeof(uint64_t) + pending_sum_.capacity() * sizeof(float);
  return blocks_.size() * kRowsPerBlock * row_floats_ * sizeof(float) + slots + map + pending +
         (sketch_ ? sketch_->bytes() : 0);
}

void TableShard::Peek(absl::Span<const uint64_t> ids, absl::Span<float> out, absl::Span<uint8_t> found) const {
  const size_t dim = spec_.dim;
  std::vector<uint64_t> missing;
  std::vector<size_t> at;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = index_.find(ids[i]);
    found[i] = it != index_.end();
    if (found[i]) {
      std::memcpy(out.data() + i * dim, Slot(it->second), dim * sizeof(float));
    } else if (budget_->disk != nullptr) {
      missing.push_back(ids[i]);
      at.push_back(i);
    }
  }
  if (missing.empty()) return;
  std::vector<TableDisk::Row> rows;
  std::vector<bool> on_disk;
  budget_->disk->MultiGet(disk_log_, missing, row_floats_, &rows, &on_disk);
  for (size_t j = 0; j < missing.size(); ++j) {
    if (!on_disk[j] || Expired(rows[j].last_seen)) continue;
    std::memcpy(out.data() + at[j] * dim, rows[j].floats.data(), dim * sizeof(float));
    found[at[j]] = 1;
  }
}

absl::Status TableShard::ForEachRow(absl::FunctionRef<void(uint64_t, absl::Span<const float>)> fn) const {
  for (const auto& [id, slot] : index_) fn(id, absl::MakeConstSpan(Slot(slot), spec_.dim));
  if (budget_->disk == nullptr || disk_rows_ == 0) return absl::OkStatus();
  return budget_->disk->ExportShard(disk_log_, [&](uint64_t id, const TableDisk::Row& row) {
    if (!index_.contains(id) && !Expired(row.last_seen)) fn(id, absl::MakeConstSpan(row.floats.data(), spec_.dim));
    return absl::OkStatus();
  });
}

std::optional<std::vector<float>> TableShard::RowOf(uint64_t id) const {
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  const float* row = Slot(it->second);
  return std::vector<float>(row, row + row_floats_);
}

void TableShard::Encode(std::string* out, absl::FunctionRef<void()> between) const {
  PutRaw<uint32_t>(out, static_cast<uint32_t>(spec_.dim));
  PutRaw<uint64_t>(out, row_floats_);
  for (uint64_t c : {evictions_, admissions_, rejections_, dropped_, pulled_, pushed_}) PutRaw<uint64_t>(out, c);
  for (uint64_t c : {disk_rows_, disk_reads_, disk_writes_, disk_refusals_, expired_, now_, next_sweep_}) {
    PutRaw<uint64_t>(out, c);
  }
  PutRaw<uint64_t>(out, index_.size());
  // Slot order: a restored shard lays its rows out alike.
  for (uint32_t slot = 0; slot < slot_mark_.size(); ++slot) {
    if (slot_mark_[slot] == kFree) continue;
    PutRaw<uint64_t>(out, slot_id_[slot]);
    PutRaw<uint64_t>(out, slot_steps_[slot]);
    PutRawArray<float>(out, absl::MakeConstSpan(Slot(slot), row_floats_));
    if ((slot + 1) % (1u << 16) == 0) between();
  }
  for (uint32_t slot = 0; slot < slot_mark_.size(); ++slot) {
    if (slot_mark_[slot] != kFree) PutRaw<uint8_t>(out, slot_disk_[slot]);
  }
  for (uint32_t slot = 0; slot < slot_mark_.size(); ++slot) {
    if (slot_mark_[slot] != kFree) PutRaw<uint64_t>(out, slot_seen_[slot]);
  }
  PutRaw<uint64_t>(out, pending_ids_.size());
  PutRawArray<uint64_t>(out, pending_ids_);
  PutRawArray<float>(out, pending_sum_);
  PutRaw<uint32_t>(out, sketch_ ? sketch_->width() : 0);
  if (sketch_) PutRawArray<uint16_t>(out, sketch_->counters());
}

void TableShard::InitialRow(uint64_t id, float* row) const {
  FillInitialRow(spec_, id, absl::MakeSpan(row, spec_.dim));
  std::fill(row + spec_.dim, row + row_floats_, 0.0f);
}

void TableShard::EvictToBudget() {
  while (budget_->limit > 0 && budget_->used.load() > budget_->limit && EvictOne()) {
  }
}

absl::Status TableShard::Decode(absl::string_view* data, uint32_t format, bool past_budget) {
  const std::string name = absl::StrCat("table '", spec_.name, "'");
  uint32_t dim = 0;
  uint64_t row_floats = 0, rows = 0;
  PS_RETURN_IF_ERROR(Take(data, &dim, name));
  PS_RETURN_IF_ERROR(Take(data, &row_floats, name));
  if (dim != static_cast<uint32_t>(spec_.dim) || row_floats != row_floats_) {
    return absl::DataLossError(absl::StrCat(name, ": rows of ", dim, " values and ", row_floats,
                                            " floats in all; the table has ", spec_.dim, " and ", row_floats_));
  }
  for (uint64_t* c : {&evictions_, &admissions_, &rejections_, &dropped_, &pulled_, &pushed_}) {
    PS_RETURN_IF_ERROR(Take(data, c, name));
  }
  if (format >= 4) {
    for (uint64_t* c : {&disk_rows_, &disk_reads_, &disk_writes_, &disk_refusals_, &expired_, &now_, &next_sweep_}) {
      PS_RETURN_IF_ERROR(Take(data, c, name));
    }
  }
  PS_RETURN_IF_ERROR(Take(data, &rows, name));
  if (rows > data->size() / (16 + row_floats_ * sizeof(float))) return Truncated(absl::StrCat(name, "'s rows"));
  if (!past_budget && budget_->limit > 0 && budget_->used.load() + rows * RowBytes() > budget_->limit) {
    return absl::ResourceExhaustedError(absl::StrCat(name, ": ", rows, " rows need ", rows * RowBytes() >> 20,
                                                     " MiB, over this server's memory budget"));
  }
  index_.reserve(rows);
  for (uint64_t r = 0; r < rows; ++r) {
    const uint64_t id = TakeRaw<uint64_t>(data);
    const uint32_t slot = NewSlot();
    slot_id_[slot] = id;
    slot_steps_[slot] = TakeRaw<uint64_t>(data);
    slot_mark_[slot] = kHeld;
    std::memcpy(Slot(slot), data->data(), row_floats_ * sizeof(float));
    data->remove_prefix(row_floats_ * sizeof(float));
    if (!index_.emplace(id, slot).second) return absl::DataLossError(absl::StrCat(name, ": row ", id, " twice"));
    budget_->used.fetch_add(RowBytes());
  }
  PS_RETURN_IF_ERROR(DecodeDiskFlags(data, format, rows, name));
  return DecodePendingAndSketch(data, name);
}

absl::Status TableShard::DecodeDiskFlags(absl::string_view* data, uint32_t format, uint64_t rows,
                                         const std::string& name) {
  if (format < 4) {  // no disk tier then: every row counts as changed
    std::fill(slot_disk_.begin(), slot_disk_.end(), kDirty);
    return absl::OkStatus();
  }
  PS_ASSIGN_OR_RETURN(absl::Span<const uint8_t> flags, TakeArray<uint8_t>(data, rows, name + "'s disk flags"));
  PS_ASSIGN_OR_RETURN(absl::Span<const uint64_t> seen, TakeArray<uint64_t>(data, rows, name + "'s last updates"));
  for (uint64_t r = 0; r < rows; ++r) {
    if (flags[r] > (kDirty | kOnDisk)) return absl::DataLossError(absl::StrCat(name, ": bad disk flags"));
    if (seen[r] > now_) return absl::DataLossError(absl::StrCat(name, ": a row seen after the shard's last update"));
    slot_disk_[r] = flags[r];
    slot_seen_[r] = seen[r];
  }
  if (disk_rows_ > 0 && budget_->disk == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " keeps ", disk_rows_, " rows on the disk tier: start this server with --table_disk_dir"));
  }
  return absl::OkStatus();
}

absl::Status TableShard::DecodePendingAndSketch(absl::string_view* data, const std::string& name) {
  const size_t dim = spec_.dim;
  uint64_t pending = 0;
  PS_RETURN_IF_ERROR(Take(data, &pending, name));
  PS_ASSIGN_OR_RETURN(absl::Span<const uint64_t> ids, TakeArray<uint64_t>(data, pending, name + "'s pending ids"));
  if (pending > data->size() / (dim * sizeof(float))) return Truncated(name + "'s pending sum");
  PS_ASSIGN_OR_RETURN(absl::Span<const float> sum, TakeArray<float>(data, pending * dim, name + "'s pending sum"));
  pending_ids_.assign(ids.begin(), ids.end());
  pending_sum_.assign(sum.begin(), sum.end());
  for (uint32_t i = 0; i < pending_ids_.size(); ++i) {
    if (!pending_index_.emplace(pending_ids_[i], i).second) {
      return absl::DataLossError(absl::StrCat(name, ": pending gradient of row ", pending_ids_[i], " twice"));
    }
  }
  uint32_t width = 0;
  PS_RETURN_IF_ERROR(Take(data, &width, name));
  if ((width != 0) != (sketch_ != nullptr) || (sketch_ && width != sketch_->width())) {
    return absl::DataLossError(
        absl::StrCat(name, ": admission sketch of width ", width, "; the table's is ", sketch_ ? sketch_->width() : 0));
  }
  if (sketch_) {
    PS_ASSIGN_OR_RETURN(absl::Span<const uint16_t> counters,
                        TakeArray<uint16_t>(data, uint64_t{width} * CountMinSketch::kDepth, name + "'s sketch"));
    sketch_->Restore(counters);
  }
  return absl::OkStatus();
}

}  // namespace ps
