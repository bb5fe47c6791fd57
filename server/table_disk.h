#ifndef PS_SERVER_TABLE_DISK_H_
#define PS_SERVER_TABLE_DISK_H_

// The disk tier of a server's embedding tables (`ps_server
// --table_disk_dir`): rows that the memory budget pushes out of a table
// shard go here, with their optimizer state and step count, and a pull or
// push of such a row reads it back (server/table_shard.h decides what goes
// and what comes back; this class only stores bytes).
//
// The store is RocksDB (Debian's librocksdb-dev), as PaddlePaddle's
// SSDSparseTable: writing one by hand would mean a log, an index, garbage
// collection of overwritten rows, crash-safe snapshots and a read cache;
// RocksDB has all of them, tested, and two things this tier needs besides:
// checkpoints by hard link (a checkpoint costs the memtable's flush, not a
// copy of the store) and reads past the page cache (use_direct_reads).
//
// Key: the shard's slice key then the row id, both big-endian (a shard's
// rows lie together, in id order). Value: the row's step count, its
// last-seen clock, then its floats (values, then optimizer state).
//
// Memory: the block cache holds the index and filter blocks and the
// memtables' memory is charged to it (a WriteBufferManager), so that
// memory_bytes() bounds what the store keeps resident; the shards' budget
// leaves room for it.
//
// The directory: DIR/LOCK (flock: one server per directory), DIR/OWNER
// (who made the store: a new server refuses a directory whose store it did
// not make, naming it), DIR/live (the RocksDB). Not thread-safe beyond what
// RocksDB itself guarantees: one thread calls it (the shards' owner; shards
// of different tables on the pool's threads call Put/Get concurrently,
// which RocksDB allows, and the counters are atomic).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace rocksdb {
class DB;
class Cache;
}  // namespace rocksdb

namespace ps {

class TableDisk {
 public:
  struct Options {
    std::string dir;
    // The most bytes of files the store may hold (0: no bound): at it, a
    // row that would go to disk stays in memory (or, with nothing left to
    // evict, is refused and counted).
    uint64_t max_bytes = 0;
    // The store's memory (block cache, with the memtables charged to it).
    uint64_t memory_bytes = uint64_t{32} << 20;
    // Read rows with O_DIRECT, past the page cache.
    bool direct_reads = false;
  };

  // A row as stored.
  struct Row {
    uint64_t steps = 0;
    uint64_t last_seen = 0;
    std::vector<float> floats;
  };

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

  // Writes a row; kResourceExhausted when the store is at max_bytes, the
  // I/O error otherwise (a full disk). Counted either way.
  absl::Status Put(uint32_t shard, uint64_t id, uint64_t steps, uint64_t last_seen, absl::Span<const float> floats);
  // Reads the rows of `ids` in one batch: (*found)[i] says whether ids[i]
  // has a row, whose step count and floats (`row_floats` of them) go to
  // rows[i]. An I/O error is logged and reads as not found.
  void MultiGet(uint32_t shard, absl::Span<const uint64_t> ids, size_t row_floats, std::vector<Row>* rows,
                std::vector<bool>* found);
  absl::Status Delete(uint32_t shard, uint64_t id);
  // The ids of every row of `shard` in the store, in id order.
  absl::Status ForEachId(uint32_t shard, absl::FunctionRef<void(uint64_t)> fn) const;

  // A snapshot of the store in `target` (which must not exist), sharing
  // its files by hard link where the file system allows.
  absl::Status Snapshot(const std::string& target);
  // Replaces the store with a copy of snapshot `source` (hard links for
  // the immutable files, copies for the rest); an empty `source`: an empty
  // store.
  absl::Status RestoreFrom(const std::string& source);

  // Bytes of files the store holds now (approximately: the live files).
  uint64_t DiskBytes() const;
  uint64_t writes() const { return writes_.load(); }
  uint64_t reads() const { return reads_.load(); }
  uint64_t refusals() const { return refusals_.load(); }

  // Every row of `shard` in the snapshot (or store) at `path`, in id
  // order, read without opening it for writing; `fn` gets the id and row.
  static absl::Status ForEachRow(const std::string& path, uint32_t shard, size_t row_floats,
                                 absl::FunctionRef<absl::Status(uint64_t id, const Row& row)> fn);

 private:
  TableDisk(Options options, int lock_fd);
  absl::Status OpenDb();
  void CloseDb();

  const Options options_;
  const int lock_fd_;
  std::shared_ptr<rocksdb::Cache> cache_;
  std::unique_ptr<rocksdb::DB> db_;
  std::atomic<uint64_t> writes_{0}, reads_{0}, refusals_{0};
};

}  // namespace ps

#endif  // PS_SERVER_TABLE_DISK_H_
