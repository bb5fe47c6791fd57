#ifndef PS_SERVER_STORE_TABLE_SHARD_H_
#define PS_SERVER_STORE_TABLE_SHARD_H_

// The rows of one embedding table that one server holds (the ids that
// TableRowShard places in it), with their optimizer state, created on first
// touch and evicted at the memory budget.
//
// Layout: no allocation per row. Rows live in slots of contiguous blocks of
// kRowsPerBlock slots, each slot dim values then the optimizer's state for
// dim elements; per slot an id, a step count (the optimizer's per-row step:
// Adam is lazy) and a CLOCK mark; an open-addressing map (absl's
// flat_hash_map, ids inline) takes an id to its slot.
//
// Eviction: CLOCK (second chance), an approximation of least recently used.
// A row touched by a pull or push is marked; when a new row needs room, the
// hand sweeps the slots, clearing marks, and evicts the first unmarked row.
// Chosen over LFU because embedding traffic drifts (new items, trends): a
// row once hot but no longer used would keep its LFU count and stay forever,
// and LFU needs aging and a heap per touch, where CLOCK costs one byte store.
//
// The disk tier (TableBudget::disk, server/disk/table_disk.h): an evicted row
// that changed since it came into memory is written there first (with its
// optimizer state and step count), and a row missing from memory is looked
// up there before it is created: nothing trained is lost. The rows a call
// misses are read in one batch (TableDisk::MultiGet) before the call's
// loop. A row read back keeps its disk copy until it changes; a row that
// cannot be written (the store is at --table_disk_max_gb or failing) is not
// evicted, and when nothing else can be, the new row is refused and counted
// (rejections, gradients_dropped, disk_refusals). Without a disk tier, an
// evicted row's training is lost.
//
// Expiry (TableSpec::expire_after_steps N > 0): every Apply is one update
// of the shard; a row untouched for N updates is dropped (its disk copy
// too), counted in expired. Memory rows go in a sweep every N/4 updates;
// disk rows when next looked up (their stored last-seen update says so),
// or in the sweeps, which scan the disk tier's records (a third of them or
// more each time).
// With expiry every touched row counts as changed, so that its disk copy
// carries when it was last seen.
//
// Admission: with admit_after N > 1, an id gets a row only once it has been
// pulled N times (a count-min sketch counts pulls of ids without a row);
// until then it reads as its initial row and its gradients are dropped. A
// row evicted and touched again is re-created from its initial values.
//
// Not thread-safe: one thread at a time per shard. Shards of different
// tables may run on different threads at once: the budget they share is
// atomic.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/model/model_spec.h"
#include "common/wire/messages.h"
#include "server/disk/table_disk.h"
#include "server/optim/optimizer.h"
#include "server/store/count_min_sketch.h"
#include "server/store/row_changes.h"

namespace ps {

class TableDisk;  // server/disk/table_disk.h

// The memory the tables of one store may take, shared by their shards, and
// the disk tier they spill to (null: none, evicted rows are lost).
struct TableBudget {
  uint64_t limit = 0;  // bytes; 0: no bound
  std::atomic<uint64_t> used{0};
  TableDisk* disk = nullptr;
};

class TableShard {
 public:
  static constexpr uint32_t kRowsPerBlock = 1024;
  // What a row costs besides its floats: id, step count, last update seen, marks, and its share
  // of the id map (at the map's lowest load).
  static constexpr uint64_t kRowOverheadBytes = 8 + 8 + 8 + 2 + 2 * (8 + 4 + 1);

  // `spec`, `optimizer` and `budget` are borrowed and must outlive the
  // shard; `optimizer` is the table's (ModelSpec::TableOptimizer);
  // `disk_log`: the disk tier's log its rows go to (DiskLogOfSlice).
  TableShard(const TableSpec& spec, const Optimizer& optimizer, TableBudget* budget, uint32_t table_index,
             uint32_t disk_log);
  ~TableShard();
  TableShard(const TableShard&) = delete;
  TableShard& operator=(const TableShard&) = delete;

  int dim() const { return spec_.dim; }
  // Bytes one row costs against the budget.
  uint64_t RowBytes() const { return row_floats_ * sizeof(float) + kRowOverheadBytes; }
  // Floats a row keeps: its dim values, then its optimizer state.
  uint64_t RowFloats() const { return row_floats_; }

  // Writes the rows of `ids` into `out` (ids.size() x dim, row i at i * dim),
  // creating the rows of admitted ids that have none; `count`: the read
  // counts towards admission (false: a pull read before, re-sent).
  // Requires out.size() == ids.size() * dim.
  void Read(absl::Span<const uint64_t> ids, absl::Span<float> out, bool count = true);
  // Applies `grad_scale` x the gradient rows `grads` (ids.size() x dim) of
  // distinct `ids` with the table's optimizer, row by row.
  void Apply(absl::Span<const uint64_t> ids, absl::Span<const float> grads, float grad_scale);
  // Sets the rows of distinct `ids` to `rows` (ids.size() x dim): loaded
  // rows, admitted whatever the admission rule, their optimizer state and
  // step count reset. A row that finds no slot (every row in the budget
  // touched since the hand last passed) is counted as dropped.
  void Assign(absl::Span<const uint64_t> ids, absl::Span<const float> rows);

  // Sync steps: adds gradient rows to the pending step's sum (ids need not
  // be distinct across calls); ApplyPending applies grad_scale x the sum and
  // empties it.
  void Accumulate(absl::Span<const uint64_t> ids, absl::Span<const float> grads);
  void ApplyPending(float grad_scale);
  bool has_pending() const { return !pending_ids_.empty(); }

  // Counters and sizes now.
  TableStatsMsg Stats() const;
  uint64_t rows() const { return index_.size(); }
  // Rows with a disk copy (Stats' disk_rows counts those only there).
  uint64_t disk_rows() const { return disk_rows_; }
  uint32_t disk_log() const { return disk_log_; }
  // Whether the shard's disk rows are in a log of their own (not shared
  // with the table's other shards): they can be copied and dropped with it.
  bool own_disk_log() const { return (disk_log_ & kKeyedDiskLog) != 0; }
  // The log its rows are in now: the disk tier's restore renamed its
  // table's shared log, which held its rows alone, to `log`
  // (SliceStore::OwnDiskLogs). Only before the shard uses the disk tier.
  void set_disk_log(uint32_t log) { disk_log_ = log; }
  // The rows that changed and those that went (expired, or evicted with no
  // disk tier), for serving replicas (server/store/row_changes.h); records
  // nothing until enabled. Rows made by a pull hold their initial values,
  // which a replica gives for any id it lacks: they are not recorded.
  RowChanges& changes() { return changes_; }
  // For a serving round: the values (dim each) of the rows of `ids` held in
  // memory or on the disk tier into `out` (ids.size() x dim), 1 in `found`
  // for each; an id without a row is left untouched, 0. Creates, marks and
  // counts nothing.
  void Peek(absl::Span<const uint64_t> ids, absl::Span<float> out, absl::Span<uint8_t> found) const;
  // Every row the shard holds, in memory then on the disk tier (those only
  // there), through `fn(id, values)` (dim values). The disk tier's rows of
  // a log shared with other shards are all given: the caller keeps its own.
  absl::Status ForEachRow(absl::FunctionRef<void(uint64_t, absl::Span<const float>)> fn) const;
  // The most ids it keeps before a replica behind them gets a snapshot.
  static constexpr uint64_t kMaxRecordedChanges = uint64_t{1} << 21;
  // Memory held: blocks, per-slot arrays, id map, pending sum, sketch.
  uint64_t Bytes() const;
  // The row of `id` if it has one (values then optimizer state), for tests.
  std::optional<std::vector<float>> RowOf(uint64_t id) const;

  // Appends the shard's whole state (rows with their state and step counts,
  // the pending sync sum, the sketch, the counters) to *out; `between` runs
  // after every 64K rows. The disk tier's rows are not in it: the
  // checkpoint snapshots the store beside it (server/checkpointer.h); each
  // memory row's disk flags are, so that the two agree when restored.
  void Encode(
      std::string* out, absl::FunctionRef<void()> between = [] {}) const;
  // Reads what Encode wrote from the front of *data (consuming it) into this
  // shard, which must be empty. kDataLoss naming the problem: truncated,
  // a row size or sketch that does not match the table, a repeated id;
  // kResourceExhausted when the rows exceed the budget, unless
  // `past_budget` (a copy of a shard for a server with a disk tier, which
  // EvictToBudget then brings within it). `format`: the store format that
  // wrote it (3: no disk tier fields).
  absl::Status Decode(absl::string_view* data, uint32_t format, bool past_budget = false);
  // Evicts rows (to the disk tier) while the budget is exceeded and a row
  // can go.
  void EvictToBudget();
  // The newest store format whose table shard bytes Encode writes (later
  // store formats changed nothing in them).
  static constexpr uint32_t kFormat = 4;

 private:
  float* Slot(uint32_t slot) {
    return blocks_[slot / kRowsPerBlock].get() + static_cast<size_t>(slot % kRowsPerBlock) * row_floats_;
  }
  const float* Slot(uint32_t slot) const {
    return blocks_[slot / kRowsPerBlock].get() + static_cast<size_t>(slot % kRowsPerBlock) * row_floats_;
  }
  // The slot of `id`'s row, creating it (from its initial values) when the
  // id is admitted and there is room; -1 otherwise. `pulled`: this is a
  // pull, which counts towards admission; `admit`: create it whatever the
  // admission rule says.
  int64_t FindOrCreate(uint64_t id, bool pulled, bool admit = false);
  bool Admitted(uint64_t id, bool pulled);
  // Starts a call (Read, Apply, Assign) on `ids`. With a disk tier: reads
  // the rows of `ids` that memory misses from disk, in one batch, into
  // fetched_ (FindOrCreate takes them from there).
  void FetchMissing(absl::Span<const uint64_t> ids);
  // `id`'s disk row (from fetched_, or one read), true when it has one.
  bool TakeDiskRow(uint64_t id, TableDisk::Row* row);
  // Writes the row in `slot` to disk when it changed since it came into
  // memory; false when it cannot go (it must stay).
  bool Spill(uint32_t slot);
  // Apply's row `id` found no room in memory (every row of the shard in it
  // touched by this call, the server's other shards holding the rest of the
  // budget): with a disk tier, updated where it lies on disk (or made there
  // when it is admitted), as it would be in memory; false when it cannot
  // be (no disk tier, not admitted, the disk refuses): dropped.
  bool ApplyOnDisk(uint64_t id, absl::Span<const float> grad, float grad_scale);
  // Writes row `id` to the disk tier (`replaces`: it has a disk row), counted;
  // false when the disk refuses it, logged as `refused` and counted.
  bool PutOnDisk(uint64_t id, uint64_t steps, uint64_t seen, absl::Span<const float> floats, bool replaces,
                 const char* refused);
  // `id`'s initial values, then a zero optimizer state, into `row`.
  void InitialRow(uint64_t id, float* row) const;
  // Expiry: whether a row last seen at update `seen` is gone; drops the
  // memory rows that are (Sweep), or the disk row `id` (DropDiskRow).
  bool Expired(uint64_t seen) const { return spec_.expire_after_steps > 0 && now_ - seen > spec_.expire_after_steps; }
  void Sweep();
  void DropDiskRow(uint64_t id);
  void FreeSlot(uint32_t slot);
  // A free slot, evicting a row when the budget is reached; -1 when there
  // is no room and nothing of this shard's to evict.
  int64_t TakeSlot();
  bool EvictOne();
  uint32_t NewSlot();
  absl::Status DecodePendingAndSketch(absl::string_view* data, const std::string& name);
  absl::Status DecodeDiskFlags(absl::string_view* data, uint32_t format, uint64_t rows, const std::string& name);

  const TableSpec spec_;
  const Optimizer& optimizer_;
  TableBudget* const budget_;
  const uint32_t table_index_;
  uint32_t disk_log_;
  const uint64_t row_floats_;  // dim + optimizer state per row

  std::vector<std::unique_ptr<float[]>> blocks_;
  std::vector<uint64_t> slot_id_;
  std::vector<uint64_t> slot_steps_;
  std::vector<uint8_t> slot_mark_;   // 0 free, 1 held, 2 held and touched since the hand passed
  std::vector<uint8_t> slot_disk_;   // disk tier: kDirty (changed since read or made), kOnDisk (has a disk copy)
  std::vector<uint64_t> slot_seen_;  // the update (now_) of the row's last touch
  uint64_t now_ = 0;                 // updates applied (Apply calls)
  uint64_t next_sweep_ = 0;          // expiry: the update of the next sweep
  std::vector<uint32_t> free_;
  uint32_t hand_ = 0;
  absl::flat_hash_map<uint64_t, uint32_t> index_;
  std::unique_ptr<CountMinSketch> sketch_;  // admit_after > 1 only
  RowChanges changes_{kMaxRecordedChanges};

  // Sync: the pending step's gradient sum by id.
  absl::flat_hash_map<uint64_t, uint32_t> pending_index_;
  std::vector<uint64_t> pending_ids_;
  std::vector<float> pending_sum_;

  // For the rest of the current call: the disk refused a row (a full
  // store: rows that changed stay), and no row could be evicted (new rows
  // are refused without another sweep of the slots).
  bool disk_refused_ = false, no_room_ = false;
  // Disk rows read for the current call (FetchMissing), by id, and the ids
  // its batch read found none for.
  absl::flat_hash_map<uint64_t, TableDisk::Row> fetched_;
  absl::flat_hash_set<uint64_t> absent_;

  uint64_t evictions_ = 0, admissions_ = 0, rejections_ = 0, dropped_ = 0, pulled_ = 0, pushed_ = 0;
  uint64_t disk_rows_ = 0, disk_reads_ = 0, disk_writes_ = 0, disk_refusals_ = 0, expired_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_STORE_TABLE_SHARD_H_
