#include "server/store/checkpoint_codec.h"

#include <cstring>
#include <memory>
#include <new>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/raw_bytes.h"
#include "common/base/status_macros.h"
#include "common/wire/codec.h"
#include "server/optim/optimizer.h"
#include "server/store/consistency_policy.h"
#include "server/store/slice_state.h"

namespace ps {
namespace {

constexpr size_t kSeqBytes = 4 + 4 + 8;

// Reads the store's part of a body. Every read checks that the bytes are
// there before it allocates, so a length field cannot make us allocate more
// than the data holds.
class StoreReader {
 public:
  explicit StoreReader(absl::string_view data) : data_(data) {}
  StoreReader(const StoreReader&) = delete;
  StoreReader& operator=(const StoreReader&) = delete;

  size_t remaining() const { return data_.size(); }
  // Table shards may take more than the budget (a copy for a server with a
  // disk tier: TableShard::Decode's past_budget).
  void set_past_budget(bool past_budget) { past_budget_ = past_budget; }
  // A copy of a slice (AddSliceImage), not a checkpoint: its table shards
  // keep their rows in logs of their own.
  void set_copy(bool copy) { copy_ = copy; }
  absl::Status Format();
  absl::StatusOr<CreateSlicesRequestMsg> Spec();
  absl::Status Active(int num_workers, std::vector<uint8_t>* active);
  absl::Status Stats(StatsReplyMsg* stats);
  // `tables`: the table shards' optimizers and budget (StoreContents).
  absl::StatusOr<std::unique_ptr<SliceState>> NextSlice(const CreateSlicesRequestMsg& spec, const Slice& slice,
                                                        const Optimizer& optimizer, const StoreContents& tables,
                                                        TableBudget* budget);

 private:
  template <typename T>
  absl::Status Get(T* v, absl::string_view what) {
    if (data_.size() < sizeof(T)) return Truncated(what);
    *v = TakeRaw<T>(&data_);
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

  static absl::Status Truncated(absl::string_view what) {
    return absl::DataLossError(absl::StrCat("slice store data is truncated: it ends inside ", what));
  }
  absl::Status SliceCounters(const CreateSlicesRequestMsg& spec, SliceState& s);
  absl::Status Floors(uint64_t workers, const std::string& name, SliceState& s);
  absl::StatusOr<uint32_t> DiskLog(const Slice& slice, const std::string& name);

  absl::string_view data_;
  uint32_t format_ = kStoreFormat;
  bool past_budget_ = false;
  bool copy_ = false;
};

absl::Status StoreReader::Format() {
  PS_RETURN_IF_ERROR(Get(&format_, "the format version"));
  if (format_ < 1 || format_ > kStoreFormat) {
    return absl::DataLossError(
        absl::StrCat("slice store format ", format_, " is not one this build reads (1 to ", kStoreFormat, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<CreateSlicesRequestMsg> StoreReader::Spec() {
  uint64_t n = 0;
  PS_RETURN_IF_ERROR(Get(&n, "the model's length"));
  if (n > data_.size()) return Truncated("the model");
  const absl::Span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(data_.data()), n);
  data_.remove_prefix(n);
  absl::StatusOr<Envelope> env = DecodeEnvelope(bytes);
  if (!env.ok()) {
    return absl::DataLossError(absl::StrCat("the model and slice list do not decode: ", env.status().message()));
  }
  auto* spec = std::get_if<CreateSlicesRequestMsg>(&env->body);
  if (spec == nullptr) {
    return absl::DataLossError(
        absl::StrCat("the model record holds a ", BodyName(env->body), " message, not a createSlicesRequest"));
  }
  if (absl::Status s = spec->model.Validate(); !s.ok()) {
    return absl::DataLossError(absl::StrCat("the model does not validate: ", s.message()));
  }
  if (spec->num_workers < 1) {
    return absl::DataLossError(absl::StrCat("num_workers is ", spec->num_workers));
  }
  return std::move(*spec);
}

absl::Status StoreReader::Active(int num_workers, std::vector<uint8_t>* active) {
  PS_RETURN_IF_ERROR(GetArray(static_cast<uint64_t>(num_workers), active, "the active workers"));
  for (int w = 0; w < num_workers; ++w) {
    if ((*active)[w] > 1) {
      return absl::DataLossError(absl::StrCat("active flag of worker ", w, " is ", int{(*active)[w]}));
    }
  }
  return absl::OkStatus();
}

absl::Status StoreReader::Stats(StatsReplyMsg* stats) {
  PS_RETURN_IF_ERROR(Get(&stats->pushes_applied, "the counters"));
  PS_RETURN_IF_ERROR(Get(&stats->updates_applied, "the counters"));
  PS_RETURN_IF_ERROR(Get(&stats->staleness_max, "the counters"));
  uint64_t buckets = 0;
  PS_RETURN_IF_ERROR(Get(&buckets, "the counters"));
  if (buckets != 0 && buckets != SliceStore::kStalenessBuckets) {
    return absl::DataLossError(
        absl::StrCat("staleness histogram has ", buckets, " buckets, not 0 or ", SliceStore::kStalenessBuckets));
  }
  return GetArray(buckets, &stats->staleness_histogram, "the staleness histogram");
}

absl::StatusOr<std::unique_ptr<SliceState>> StoreReader::NextSlice(const CreateSlicesRequestMsg& spec,
                                                                   const Slice& slice, const Optimizer& optimizer,
                                                                   const StoreContents& tables, TableBudget* budget) {
  const std::string name = absl::StrCat("slice ", slice.key);
  uint32_t key = 0;
  PS_RETURN_IF_ERROR(Get(&key, name));
  if (key != slice.key) {
    return absl::DataLossError(
        absl::StrCat("slice data out of order: expected slice ", slice.key, ", found slice ", key));
  }
  // The per-worker vectors are sized as they are read, so their size never
  // exceeds what the data holds.
  auto s = std::make_unique<SliceState>();
  s->slice = slice;
  PS_RETURN_IF_ERROR(SliceCounters(spec, *s));
  PS_RETURN_IF_ERROR(GetArray(slice.length, &s->values, absl::StrCat(name, "'s values")));
  PS_RETURN_IF_ERROR(
      GetArray(optimizer.StateSize(slice.length), &s->optimizer_state, absl::StrCat(name, "'s optimizer state")));
  if (s->arrived > 0) {
    PS_RETURN_IF_ERROR(GetArray(slice.length, &s->sum, absl::StrCat(name, "'s step sum")));
  }
  if (slice.table) {
    PS_ASSIGN_OR_RETURN(const uint32_t log, DiskLog(slice, name));
    s->table = std::make_unique<TableShard>(spec.model.tables[slice.tensor], *tables.table_optimizers[slice.tensor],
                                            budget, slice.tensor, log);
    PS_RETURN_IF_ERROR(s->table->Decode(&data_, format_, past_budget_));
    if (s->table->has_pending() && s->arrived == 0) {
      return absl::DataLossError(absl::StrCat(name, ": pending table gradients but no push arrived"));
    }
  }
  return s;
}

// The disk tier's log of table shard `slice`: its own (store format 5 on),
// or its table's, shared with the table's other shards on the server (store
// format 4, and format 6 where its flag says so; SliceStore::DiskLogRenames
// may make it the shard's own at the disk tier's restore).
absl::StatusOr<uint32_t> StoreReader::DiskLog(const Slice& slice, const std::string& name) {
  bool shared = format_ < 5;
  if (format_ >= 6) {
    uint8_t flag = 0;
    PS_RETURN_IF_ERROR(Get(&flag, absl::StrCat(name, "'s disk log")));
    if (flag > 1) return absl::DataLossError(absl::StrCat(name, ": disk log flag ", int{flag}, " (0 or 1)"));
    shared = flag == 1;
  }
  if (!shared) return DiskLogOfSlice(slice.key);
  if (copy_) {
    return absl::DataLossError(absl::StrCat(name, ": a copy of a table shard whose disk rows share its table's log"));
  }
  return slice.tensor;
}

// The steps below which a rank's pushes skip the slice (format 2): none, or
// one per worker, never above the worker's clock.
absl::Status StoreReader::Floors(uint64_t workers, const std::string& name, SliceState& s) {
  if (format_ < 2) return absl::OkStatus();
  uint8_t has_floor = 0;
  PS_RETURN_IF_ERROR(Get(&has_floor, name));
  if (has_floor > 1) return absl::DataLossError(absl::StrCat(name, ": bad floor flag ", int{has_floor}));
  if (has_floor == 0) return absl::OkStatus();
  PS_RETURN_IF_ERROR(GetArray(workers, &s.floor, name));
  for (uint64_t w = 0; w < workers; ++w) {
    if (s.floor[w] < 0 || s.floor[w] > s.worker_clock[w]) {
      return absl::DataLossError(absl::StrCat(name, ": worker ", w, "'s floor ", s.floor[w],
                                              " is outside [0, its clock ", s.worker_clock[w], "]"));
    }
  }
  return absl::OkStatus();
}

// The scalars and per-worker vectors of one slice, with the invariants the
// store keeps between calls.
absl::Status StoreReader::SliceCounters(const CreateSlicesRequestMsg& spec, SliceState& s) {
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
    return absl::DataLossError(
        absl::StrCat(name, " has ", s.optimizer_steps, " optimizer steps but version ", s.version));
  }
  const bool sync = spec.model.ConsistencyOf(s.slice.table, s.slice.tensor).mode == ConsistencyMode::kSync;
  uint64_t pushed = 0;
  for (uint64_t w = 0; w < workers; ++w) {
    if (s.pushed[w] > 1 || (s.pushed[w] && !sync)) {
      return absl::DataLossError(absl::StrCat(name, ": bad pushed flag for worker ", w));
    }
    pushed += s.pushed[w];
    if (s.worker_clock[w] < 0 || s.worker_clock[w] > kMaxClock + 1) {
      return absl::DataLossError(
          absl::StrCat(name, ": clock of worker ", w, " is ", s.worker_clock[w], ", outside [0, ", kMaxClock + 1, "]"));
    }
    const uint64_t join_max = !sync ? 0 : s.pushed[w] ? s.version : s.version + 1;
    if (s.join_step[w] > join_max) {
      return absl::DataLossError(absl::StrCat(name, ": worker ", w, " joins at step ", s.join_step[w],
                                              ", after the slice's step ", s.version));
    }
  }
  if (arrived != pushed) {
    return absl::DataLossError(
        absl::StrCat(name, ": ", arrived, " pushes arrived but ", pushed, " workers marked as pushed"));
  }
  s.arrived = static_cast<int>(arrived);
  return absl::OkStatus();
}

// Every slice of `spec`, in its order, checked against the model and the
// consistency mode.
absl::Status ReadSlices(StoreReader& in, const CreateSlicesRequestMsg& spec, const Optimizer& optimizer,
                        TableBudget* budget, StoreContents* contents) {
  for (const Slice& slice : spec.slices) {
    const std::unique_ptr<ConsistencyPolicy> policy =
        ConsistencyPolicy::Create(spec.model.ConsistencyOf(slice.table, slice.tensor));
    if (!SliceFits(spec.model, slice) || contents->states.contains(slice.key)) {
      return absl::DataLossError(absl::StrCat("slice ", slice.key, " does not fit the model"));
    }
    PS_ASSIGN_OR_RETURN(std::unique_ptr<SliceState> s, in.NextSlice(spec, slice, optimizer, *contents, budget));
    if (policy->HasDueStep(*s, HoldersOf(spec.model, slice, contents->active))) {
      return absl::DataLossError(
          absl::StrCat("slice ", slice.key, ": step ", s->version, " has every push it waits for but was not applied"));
    }
    contents->states.emplace(slice.key, std::move(s));
  }
  if (in.remaining() != 0) {
    return absl::DataLossError(absl::StrCat("slice store data has ", in.remaining(), " bytes after the last slice"));
  }
  return absl::OkStatus();
}

// Parses and checks the whole store's part; the budget of `store` is checked
// as soon as the model is known, before the floats are copied.
// `copy`: the slices go into a store that holds the model already (a new
// copy of a slice, --replicas): its memory budget and tables' share stay.
absl::StatusOr<StoreContents> ReadStore(absl::string_view data, const SliceStore& store, bool copy = false) {
  StoreReader in(data);
  in.set_past_budget(copy && store.table_disk() != nullptr);  // rows past it go to disk (AddSliceImage)
  in.set_copy(copy);
  PS_RETURN_IF_ERROR(in.Format());
  PS_ASSIGN_OR_RETURN(CreateSlicesRequestMsg spec, in.Spec());
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = Optimizer::Create(spec.model.optimizer);
  if (!optimizer.ok()) {
    return absl::DataLossError(absl::StrCat("the optimizer does not validate: ", optimizer.status().message()));
  }
  if (!copy) PS_RETURN_IF_ERROR(store.CheckMemory(spec.model, spec.slices, **optimizer));
  StoreContents contents;
  absl::StatusOr<std::vector<std::unique_ptr<Optimizer>>> table_optimizers = TableOptimizers(spec.model);
  if (!table_optimizers.ok()) {
    return absl::DataLossError(
        absl::StrCat("a table's optimizer does not validate: ", table_optimizers.status().message()));
  }
  contents.table_optimizers = std::move(*table_optimizers);
  if (!copy) store.SetTableBudget(spec.model, spec.slices, **optimizer);
  PS_RETURN_IF_ERROR(in.Active(spec.num_workers, &contents.active));
  PS_RETURN_IF_ERROR(in.Stats(&contents.stats));
  PS_RETURN_IF_ERROR(ReadSlices(in, spec, **optimizer, store.table_budget(), &contents));
  contents.model = std::move(spec.model);
  contents.slices = std::move(spec.slices);
  contents.num_workers = spec.num_workers;
  return contents;
}

// The model, slice list and num_workers as the wire's CreateSlicesRequest
// (the codec bounds and checks it when it is read back).
kj::Array<capnp::word> EncodeSpec(const SliceStore& store, const std::vector<Slice>& slices) {
  CreateSlicesRequestMsg spec;
  spec.model = store.model();
  spec.slices = slices;
  spec.num_workers = store.num_workers();
  Envelope envelope;
  envelope.body = std::move(spec);
  return EncodeEnvelope(envelope);
}

void PutSlice(const SliceState& s, std::string* out, absl::FunctionRef<void()> between) {
  PutRaw<uint32_t>(out, s.slice.key);
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
  if (s.table != nullptr) {
    // Format 6: its disk rows are in its table's log (none there: a log
    // of its own when restored, and a copy may take it).
    PutRaw<uint8_t>(out, !s.table->own_disk_log() && s.table->disk_rows() > 0 ? 1 : 0);
    s.table->Encode(out, between);
  }
  between();
}

}  // namespace

std::string EncodeCheckpointInfo(const CheckpointInfo& info) {
  std::string out;
  out.reserve(4 + 8 + 8 + 8 + 4 + info.seqs.size() * kSeqBytes);
  PutRaw<int32_t>(&out, info.server_rank);
  PutRaw<uint64_t>(&out, info.number);
  PutRaw<int64_t>(&out, info.unix_ms);
  PutRaw<uint64_t>(&out, info.incarnation);
  PutRaw<uint32_t>(&out, static_cast<uint32_t>(info.seqs.size()));
  for (const WorkerSeq& s : info.seqs) {
    PutRaw<int32_t>(&out, s.rank);
    PutRaw<uint32_t>(&out, s.node_id);
    PutRaw<uint64_t>(&out, s.last_seq);
  }
  return out;
}

absl::StatusOr<CheckpointInfo> DecodeCheckpointInfo(uint32_t format, absl::string_view* body) {
  const size_t fixed = 4 + 8 + 8 + (format >= 2 ? 8 : 0) + 4;
  if (body->size() < fixed) return absl::DataLossError("body too short for its info");
  CheckpointInfo info;
  info.server_rank = TakeRaw<int32_t>(body);
  info.number = TakeRaw<uint64_t>(body);
  info.unix_ms = TakeRaw<int64_t>(body);
  if (format >= 2) info.incarnation = TakeRaw<uint64_t>(body);
  const uint32_t n = TakeRaw<uint32_t>(body);
  if (n > body->size() / kSeqBytes) {
    return absl::DataLossError(absl::StrCat("body too short for its ", n, " worker sequence numbers"));
  }
  info.seqs.resize(n);
  for (WorkerSeq& s : info.seqs) {
    s.rank = TakeRaw<int32_t>(body);
    s.node_id = TakeRaw<uint32_t>(body);
    s.last_seq = TakeRaw<uint64_t>(body);
  }
  return info;
}

namespace {

// EncodeStore of `slices` only.
absl::Status EncodeSlices(const SliceStore& store, const std::vector<Slice>& slices, std::string* out,
                          absl::FunctionRef<void()> between) {
  if (!store.has_model()) {
    return absl::FailedPreconditionError("no model registered on this server yet: nothing to serialize");
  }
  const kj::Array<capnp::word> words = EncodeSpec(store, slices);
  const kj::ArrayPtr<const kj::byte> spec = words.asBytes();
  const uint64_t workers = store.num_workers();
  // One allocation for the whole image: the floats dominate.
  uint64_t size = 64 + spec.size() + workers + SliceStore::kStalenessBuckets * 8;
  for (const Slice& slice : slices) {
    const SliceState& s = store.State(slice.key);
    size += 33 + workers * 25 + (s.values.size() * (s.arrived > 0 ? 2 : 1) + s.optimizer_state.size()) * sizeof(float);
    if (s.table != nullptr) size += s.table->rows() * s.table->RowBytes();  // a little more than each row takes
  }
  out->clear();
  out->reserve(size);
  PutRaw<uint32_t>(out, kStoreFormat);
  PutRaw<uint64_t>(out, spec.size());
  out->append(reinterpret_cast<const char*>(spec.begin()), spec.size());
  PutRawArray<uint8_t>(out, store.active());
  const StatsReplyMsg& stats = store.stats();
  PutRaw<uint64_t>(out, stats.pushes_applied);
  PutRaw<uint64_t>(out, stats.updates_applied);
  PutRaw<uint64_t>(out, stats.staleness_max);
  PutRaw<uint64_t>(out, stats.staleness_histogram.size());
  PutRawArray<uint64_t>(out, stats.staleness_histogram);
  for (const Slice& slice : slices) PutSlice(store.State(slice.key), out, between);
  return absl::OkStatus();
}

}  // namespace

absl::Status EncodeStore(const SliceStore& store, std::string* out, absl::FunctionRef<void()> between) {
  if (!store.has_model()) {
    return absl::FailedPreconditionError("no model registered on this server yet: nothing to serialize");
  }
  return EncodeSlices(store, store.slice_list(), out, between);
}

namespace {

// The rows of table shard `s` on `store`'s disk tier, as SliceImage's
// disk_rows.
absl::Status EncodeDiskRows(const SliceStore& store, const SliceState& s, std::string* out) {
  const TableShard& table = *s.table;
  if (!table.own_disk_log()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "slice ", s.slice.key, " has ", table.disk_rows(),
        " rows on the disk tier in its table's shared log (restored from an older checkpoint): a copy cannot take "
        "them apart"));
  }
  uint64_t rows = 0;
  PS_RETURN_IF_ERROR(
      store.table_disk()->ExportShard(table.disk_log(), [&](uint64_t id, const DiskRow& row) -> absl::Status {
        PutRaw<uint64_t>(out, id);
        PutRaw<uint64_t>(out, row.steps);
        PutRaw<uint64_t>(out, row.last_seen);
        PutRawArray<float>(out, absl::MakeConstSpan(row.floats));
        ++rows;
        return absl::OkStatus();
      }));
  if (rows != table.disk_rows()) {
    return absl::DataLossError(absl::StrCat("slice ", s.slice.key, ": its disk log holds ", rows,
                                            " rows, and the shard counts ", table.disk_rows()));
  }
  return absl::OkStatus();
}

// Writes AddSliceImage's `disk_rows` to `store`'s disk tier: those of
// `table`, the one table shard of the copy that counts rows on disk (null:
// none does).
absl::Status PutDiskRows(const TableShard* table, size_t slices, absl::string_view disk_rows, SliceStore* store) {
  if (table == nullptr || slices != 1) {
    return absl::InvalidArgumentError(absl::StrCat(disk_rows.size(), " bytes of disk rows with ", slices, " slices, ",
                                                   table == nullptr ? "none" : "one",
                                                   " a table shard that counts rows on disk"));
  }
  TableDisk* disk = store->table_disk();
  if (disk == nullptr) {
    return absl::FailedPreconditionError(
        "a table shard copy with rows on the disk tier: start this server with --table_disk_dir");
  }
  const uint64_t floats = table->RowFloats();
  const uint64_t record = 24 + floats * sizeof(float);
  if (disk_rows.size() != table->disk_rows() * record) {
    return absl::InvalidArgumentError(
        absl::StrCat(disk_rows.size(), " bytes of disk rows for ", table->disk_rows(), " rows of ", record, " bytes"));
  }
  disk->DropShard(table->disk_log());  // what an earlier copy left
  std::vector<float> row(floats);
  while (!disk_rows.empty()) {
    const auto id = TakeRaw<uint64_t>(&disk_rows);
    const auto steps = TakeRaw<uint64_t>(&disk_rows);
    const auto seen = TakeRaw<uint64_t>(&disk_rows);
    std::memcpy(row.data(), disk_rows.data(), floats * sizeof(float));
    disk_rows.remove_prefix(floats * sizeof(float));
    if (absl::Status s = disk->Put(table->disk_log(), id, steps, seen, row); !s.ok()) {
      disk->DropShard(table->disk_log());
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SliceImage> EncodeSliceImage(const SliceStore& store, uint32_t key) {
  if (!store.has_model()) return absl::FailedPreconditionError("no model registered on this server yet");
  for (const Slice& slice : store.slice_list()) {
    if (slice.key != key) continue;
    const SliceState& s = store.State(key);
    SliceImage out;
    if (s.table != nullptr && s.table->disk_rows() > 0) PS_RETURN_IF_ERROR(EncodeDiskRows(store, s, &out.disk_rows));
    PS_RETURN_IF_ERROR(EncodeSlices(store, {slice}, &out.image, [] {}));
    return out;
  }
  return absl::NotFoundError(absl::StrCat("this server holds no slice ", key));
}

absl::Status AddSliceImage(absl::string_view image, absl::string_view disk_rows, SliceStore* store) {
  if (!store->has_model()) return absl::FailedPreconditionError("this server holds no model to add a slice copy to");
  try {
    PS_ASSIGN_OR_RETURN(StoreContents contents, ReadStore(image, *store, /*copy=*/true));
    PS_RETURN_IF_ERROR(store->CheckCopies(contents));  // before the disk tier changes
    const TableShard* on_disk = nullptr;
    for (const auto& [key, s] : contents.states) {
      if (s->table != nullptr && s->table->disk_rows() > 0) on_disk = s->table.get();
    }
    if (on_disk != nullptr || !disk_rows.empty()) {
      PS_RETURN_IF_ERROR(PutDiskRows(on_disk, contents.states.size(), disk_rows, store));
    }
    // Rows past this server's budget (it holds other shards) go to its disk tier.
    for (const auto& [key, s] : contents.states) {
      if (s->table != nullptr) s->table->EvictToBudget();
    }
    return store->AddCopies(std::move(contents));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory adding a slice copy");
  }
}

absl::Status DecodeStore(absl::string_view data, SliceStore* store) {
  if (store->has_model()) {
    return absl::FailedPreconditionError("cannot restore a checkpoint into a server that already holds a model");
  }
  try {
    PS_ASSIGN_OR_RETURN(StoreContents contents, ReadStore(data, *store));
    return store->Adopt(std::move(contents));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory restoring the slice store");
  }
}

}  // namespace ps
