#ifndef PS_SERVER_DISK_TABLE_DISK_H_
#define PS_SERVER_DISK_TABLE_DISK_H_

// The disk tier of a server's embedding tables (`ps_server
// --table_disk_dir`): rows that the memory budget pushes out of a table
// shard go here, with their optimizer state and step count, and a pull or
// push of such a row reads it back (server/store/table_shard.h decides what goes
// and what comes back; this class only stores bytes).
//
// The store is one log per shard (server/disk/table_log.h): fixed-size records
// appended to segment files, an in-memory index of where each row lies, a
// segment compacted when most of it is dead. It was RocksDB first, as
// PaddlePaddle's SSDSparseTable; measured in table_disk_bench, RocksDB's
// writes, reads and compaction took 60% of the machine and the tier ran at
// a quarter of the in-memory rate. Rows here have a fixed size per shard
// and need no order, so a log with a hash index (Bitcask's keydir, FASTER's
// hybrid log) does the same work with one append per write and one pread
// per read, no sorting and no merging: a new id costs a hash lookup, not a
// filter probe and a read. What it gives up: the index is in memory (10 to
// 20 bytes a row on disk, server/disk/log_index.h, charged to the budget).
//
// Memory: each log's index and write buffer. `memory_bytes` of it is set
// aside from the tables' share of the budget (SliceStore::SetTableBudget);
// past that, what the store holds is added to the budget's `used` as it
// grows (ChargeTo), so that the shards evict to make room for it.
//
// The directory: DIR/LOCK (flock: one server per directory), DIR/OWNER
// (who made the store: a new server refuses a directory whose store it did
// not make, naming it), DIR/live/<shard>/ (the logs). Thread-safe: shards
// of different tables call it from the pool's threads at once; each log
// has its own lock.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/base/thread_pool.h"
#include "server/disk/table_log.h"

namespace ps {

// The log a table shard keeps its rows in: its own, named by its slice key
// with the top bit set (store format 5 on), so that the shard's disk rows
// go with it when it is copied to another server and leave with it when it
// is dropped; shards restored from a checkpoint of store format 4 share
// their table's log, named by the table's index, unless that log held one
// shard's rows alone (it is restored as that shard's own).
inline constexpr uint32_t kKeyedDiskLog = uint32_t{1} << 31;
inline uint32_t DiskLogOfSlice(uint32_t key) { return kKeyedDiskLog | key; }

class TableDisk {
 public:
  struct Options {
    std::string dir;
    // The most bytes of files the store may hold (0: no bound): at it, a
    // row that would go to disk stays in memory (or, with nothing left to
    // evict, is refused and counted).
    uint64_t max_bytes = 0;
    // Memory set aside for the store (its indexes and write buffers); past
    // it, it is charged to the budget as it grows (ChargeTo).
    uint64_t memory_bytes = uint64_t{32} << 20;
    // Read rows with O_DIRECT, past the page cache.
    bool direct_reads = false;
  };

  using Row = DiskRow;

  // Locks DIR and opens an empty store in it. `owner` says who makes it
  // (the job's scheduler and checkpoint directory), for the next one to
  // read. kInvalidArgument naming DIR: it does not exist and cannot be
  // made, is not a directory, is not writable; kFailedPrecondition: another
  // process holds its lock; it holds a store already, and this server is
  // new (`restoring` false: a new server's store starts empty, and another
  // job's rows are not ours to drop) or restores another owner's
  // checkpoints; the store does not open.
  static absl::StatusOr<std::unique_ptr<TableDisk>> Open(const Options& options, const std::string& owner,
                                                         bool restoring);
  ~TableDisk();
  TableDisk(const TableDisk&) = delete;
  TableDisk& operator=(const TableDisk&) = delete;

  const std::string& dir() const { return options_.dir; }
  uint64_t memory_bytes() const { return options_.memory_bytes; }
  // The counter that the store's memory past memory_bytes() is added to as
  // it grows and taken from as it shrinks (the tables' TableBudget::used).
  void ChargeTo(std::atomic<uint64_t>* used);

  // Writes a row; kResourceExhausted when the store is at max_bytes, the
  // I/O error otherwise (a full disk). Counted either way.
  // `replaces`: the row has a record already (TableLog::Put).
  absl::Status Put(uint32_t shard, uint64_t id, uint64_t steps, uint64_t last_seen, absl::Span<const float> floats,
                   bool replaces = false);
  // Reads the rows of `ids` in one batch: (*found)[i] says whether ids[i]
  // has a row, whose step count and floats (`row_floats` of them) go to
  // rows[i]. An I/O error is logged and reads as not found.
  void MultiGet(uint32_t shard, absl::Span<const uint64_t> ids, size_t row_floats, std::vector<Row>* rows,
                std::vector<bool>* found);
  void Delete(uint32_t shard, uint64_t id);
  // TableLog::ScanLive on `shard`'s log (0 when it has none).
  uint64_t ScanLive(uint32_t shard, uint64_t max_records, absl::FunctionRef<bool(uint64_t, uint64_t)> drop);

  // A snapshot of the store in `target` (which must not exist), sharing
  // its files by hard link where the file system allows (copies where it
  // does not): the logs' files, flushed and synced, and their indexes.
  absl::Status Snapshot(const std::string& target);
  // Replaces the store with snapshot `source`'s rows (its files linked,
  // never changed: the store appends to new ones); an empty `source`: an
  // empty store. kDataLoss naming the file when the snapshot is unreadable.
  // `renames`: a log of the snapshot restored under another number where
  // it holds `rows` rows (a table's shared log holding one shard's rows
  // alone, as that shard's own; server/store/checkpoint.h); `done` set for those.
  struct Rename {
    uint32_t from = 0, to = 0;
    uint64_t rows = 0;
    bool done = false;
  };
  absl::Status RestoreFrom(const std::string& source, std::vector<Rename>* renames = nullptr);

  // Bytes of files the store holds now (its write buffers included).
  uint64_t DiskBytes() const { return file_bytes_.load(); }
  uint64_t writes() const { return writes_.load(); }
  uint64_t reads() const { return reads_.load(); }
  uint64_t refusals() const { return refusals_.load(); }

  // Every live row of `shard` now, through `fn` (none when it has no log):
  // a snapshot of its log taken under its lock, read after it, then
  // removed; what a checkpoint taken now would hold. For a copy of the
  // shard sent to another server.
  absl::Status ExportShard(uint32_t shard, absl::FunctionRef<absl::Status(uint64_t id, const Row& row)> fn);
  // Deletes `shard`'s log and its files (its table shard left this
  // server); a later Put starts it afresh. Snapshots taken before keep
  // their own links to the files.
  void DropShard(uint32_t shard);

  // Every row of `shard` in the snapshot at `path` (the same order every
  // time), read without restoring it; `fn` gets the id and row.
  static absl::Status ForEachRow(const std::string& path, uint32_t shard, size_t row_floats,
                                 absl::FunctionRef<absl::Status(uint64_t id, const Row& row)> fn);

 private:
  struct Shard {
    absl::Mutex mu;
    std::unique_ptr<TableLog> log ABSL_GUARDED_BY(mu);
    uint64_t file_bytes ABSL_GUARDED_BY(mu) = 0;  // what Account last counted
    uint64_t memory ABSL_GUARDED_BY(mu) = 0;
  };

  TableDisk(Options options, int lock_fd);
  Shard* Find(uint32_t shard) const;
  // The shard's entry, with a log of `row_floats` made when it has none.
  absl::StatusOr<Shard*> Make(uint32_t shard, size_t row_floats);
  // Brings the store's totals (and the budget's charge) up to date with
  // `s`'s log, under its lock.
  void Account(Shard& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // The budget's charge brought up to what the store holds now.
  void Recharge();
  void CloseAll();
  // RestoreFrom: `log`, restored from snapshot `source`'s directory `path`
  // as *shard, restored again under the name a rename of `renames` gives
  // it, where it holds the rows the rename says.
  absl::Status MaybeRename(const std::string& source, const std::string& path, std::vector<Rename>* renames,
                           uint32_t* shard, std::unique_ptr<TableLog>* log);
  std::string LiveDir() const { return options_.dir + "/live"; }

  const Options options_;
  const int lock_fd_;
  mutable absl::Mutex mu_;  // the map; each entry has its own lock
  absl::flat_hash_map<uint32_t, std::unique_ptr<Shard>> shards_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> file_bytes_{0}, memory_{0};
  absl::Mutex charge_mu_;
  std::atomic<uint64_t>* charge_to_ ABSL_GUARDED_BY(charge_mu_) = nullptr;
  uint64_t charged_ ABSL_GUARDED_BY(charge_mu_) = 0;
  std::atomic<uint64_t> writes_{0}, reads_{0}, refusals_{0};
  // With direct reads: threads that wait on the disk's reads of a batch at
  // once (the disk serves many at a time; one thread would wait on each).
  std::unique_ptr<ThreadPool> readers_;
};

}  // namespace ps

#endif  // PS_SERVER_DISK_TABLE_DISK_H_
