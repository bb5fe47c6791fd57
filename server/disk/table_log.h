#ifndef PS_SERVER_DISK_TABLE_LOG_H_
#define PS_SERVER_DISK_TABLE_LOG_H_

// One table shard's rows on disk (server/disk/table_disk.h owns one per shard):
// a log of fixed-size records in segment files, with the index of where
// each id's latest record lies kept in memory, as Bitcask's keydir and
// FASTER's hash index do.
//
// A record is the row's id, step count and last-seen clock, then its
// floats (values, then optimizer state), padded to 8 bytes. A write
// appends a record through a write buffer to the head segment (a new one
// when it holds kRecordsPerSegment) and points the index at it; the old
// record is dead from then on. A segment whose records are all dead is
// deleted; when the dead records outnumber the live ones, the sealed
// segment with the fewest live records is compacted (its live records
// appended again, then the file deleted), so that the files stay within
// twice the live rows.
//
// Records are never changed once written, only appended or deleted with
// their file: a snapshot is hard links to the segment files plus the
// index's entries written beside them, and a store restored from one
// appends to new segments only.
//
// Memory: the index (server/disk/log_index.h: 8 bytes a slot, 10 to 20 a row)
// and one write buffer. Not thread-safe: the store (TableDisk) locks each
// log.

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/disk/log_index.h"

namespace ps {

// A row as stored.
struct DiskRow {
  uint64_t steps = 0;
  uint64_t last_seen = 0;
  std::vector<float> floats;
};

class TableLog {
 public:
  // At most 2^16 records per segment and 2^16 - 1 segments: a location is
  // one uint32_t (segment << 16 | record), below LogIndex::kNoLocation.
  static constexpr uint32_t kMaxRecordsPerSegment = 1 << 16;
  static constexpr uint32_t kMaxSegments = (1 << 16) - 1;
  static constexpr uint64_t kSegmentBytes = uint64_t{32} << 20;
  static constexpr uint64_t kBufferBytes = uint64_t{128} << 10;

  // An empty log of rows of `row_floats` floats in the new directory `dir`.
  // `tag_bits` below 32 only in tests (server/disk/log_index.h).
  static absl::StatusOr<std::unique_ptr<TableLog>> Create(const std::string& dir, size_t row_floats, bool direct_reads,
                                                          int tag_bits = 32);
  // A log in the new directory `dir` holding what the snapshot `source`
  // (TableLog::Snapshot's target) holds; kDataLoss naming the file when
  // the snapshot is unreadable or inconsistent.
  static absl::StatusOr<std::unique_ptr<TableLog>> Restore(const std::string& dir, const std::string& source,
                                                           bool direct_reads);
  ~TableLog();
  TableLog(const TableLog&) = delete;
  TableLog& operator=(const TableLog&) = delete;

  size_t row_floats() const { return row_floats_; }
  uint64_t rows() const { return index_.size(); }
  // Bytes a row takes in a file.
  size_t record_bytes() const { return record_bytes_; }
  // Bytes of the segment files, the write buffer's records included.
  uint64_t file_bytes() const { return file_bytes_; }
  // Bytes resident: the index and the write buffer.
  uint64_t memory_bytes() const;

  // Writes the row of `id` (floats.size() == row_floats()). `replaces`:
  // the caller knows that `id` has a record already (the index then finds
  // it without reading when no other id shares its tag; a wrong `false`
  // costs a read, never a second record). An I/O error (a full disk) is
  // returned and leaves the log as it was: the rows written before stay
  // readable, from the write buffer when they are not yet in the file.
  absl::Status Put(uint64_t id, uint64_t steps, uint64_t last_seen, absl::Span<const float> floats,
                   bool replaces = false);
  // Reads `id`'s row into `row`; false when the log has none, or its record
  // cannot be read (logged).
  bool Get(uint64_t id, DiskRow* row);
  // Get in two halves: where `id`'s record may lie (the index's candidates
  // for its tag), then a record read, true when it is `id`'s. ReadRow
  // changes nothing: calls of it may run at once on several threads (while
  // the log's owner holds its lock).
  LogIndex::Locations Locate(uint64_t id) const { return index_.Candidates(id); }
  bool ReadRow(uint64_t id, uint32_t location, DiskRow* row) const;
  void Delete(uint64_t id);
  // Visits up to `max_records` records, going on from where the last call
  // stopped (round the segments, the write buffer's records included):
  // for each live one, `drop(id, last_seen)` says whether to delete its
  // row. The rows deleted.
  uint64_t ScanLive(uint64_t max_records, absl::FunctionRef<bool(uint64_t id, uint64_t last_seen)> drop);
  // Compacts one sealed segment holding dead records (the one with the
  // fewest live); false when there is none.
  bool Compact();

  // Writes the log's files to disk and makes the new directory `target` a
  // snapshot of it (hard links, copies where the file system has none).
  absl::Status Snapshot(const std::string& target);
  // Every row of the snapshot `source` (by location: the same order every
  // time), read without restoring it; kDataLoss when a record is unreadable or its floats are
  // not `row_floats`.
  static absl::Status ForEachRow(const std::string& source, size_t row_floats,
                                 absl::FunctionRef<absl::Status(uint64_t id, const DiskRow& row)> fn);

 private:
  struct Segment {
    int fd = -1;         // -1: the number is free
    int direct_fd = -1;  // O_DIRECT, with direct reads
    uint32_t records = 0;
    uint32_t live = 0;
    bool unsynced = false;
  };

  TableLog(std::string dir, size_t row_floats, bool direct_reads, int tag_bits);
  // Where `id`'s own record lies (false: none); `trust_one`: the caller
  // knows it has one, so a single candidate is it without a read.
  // An error when a candidate cannot be read.
  absl::StatusOr<bool> FindOwn(uint64_t id, bool trust_one, uint32_t* location) const;
  // The id in the record at `location`; false when it cannot be read.
  bool RecordIdAt(uint32_t location, uint64_t* id) const;
  absl::Status OpenSegment(uint32_t number, bool create);
  void RemoveSegment(uint32_t number);
  absl::Status Flush();
  absl::Status Append(uint64_t id, uint64_t steps, uint64_t last_seen, const float* floats, uint32_t* location);
  void Kill(uint32_t location);
  // Compact(), among the segments at least half dead when `half_dead_only`.
  bool CompactOne(bool half_dead_only);
  // Records [first, first + n) of segment `number` into `out`, from the
  // write buffer when they are there (the head's from buffered_from_ on),
  // else from its file through the page cache: all on one side of that.
  bool ReadRecords(uint32_t number, uint32_t first, uint32_t n, char* out) const;
  // One record, past the page cache with direct reads.
  bool ReadRecord(uint32_t location, char* out) const;
  // Records a bulk pass (compaction, scans) reads at once: 1 MiB of them.
  uint32_t ChunkRecords() const {
    return std::max<uint32_t>(1, static_cast<uint32_t>((uint64_t{1} << 20) / record_bytes_));
  }
  std::string SegmentPath(uint32_t number) const;

  const std::string dir_;
  const size_t row_floats_;
  const size_t record_bytes_;
  const uint32_t per_segment_;
  const bool direct_reads_;
  const int tag_bits_;
  LogIndex index_;
  std::vector<Segment> segments_;
  int64_t head_ = -1;  // the segment appended to
  std::vector<char> buffer_;
  uint32_t buffered_from_ = 0;  // the head's records from here on are in buffer_
  uint64_t file_bytes_ = 0, dead_ = 0;
  uint32_t scan_segment_ = 0, scan_record_ = 0;  // where ScanLive goes on
};

}  // namespace ps

#endif  // PS_SERVER_DISK_TABLE_LOG_H_
