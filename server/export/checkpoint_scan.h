#ifndef PS_SERVER_EXPORT_CHECKPOINT_SCAN_H_
#define PS_SERVER_EXPORT_CHECKPOINT_SCAN_H_

// A server checkpoint read in place, for tools that take the trained model
// out of a job (ps_export) without loading it: one pass over the file checks
// its frame and checksum and notes where each slice's values and each table
// shard's rows lie; reads then fetch ranges of them. Memory stays that of
// the index and the caller's buffers, whatever the size of the file, so a
// table larger than the machine's memory can be read.
//
// The layout is the one server/store/checkpoint.h documents (checkpoint formats 1
// and 2, store formats 1 to 6), read here without a SliceStore: optimizer
// state, sync sums, clocks and admission sketches are stepped over.
//
// Not thread-safe: one CheckpointScan per thread (it owns a file descriptor).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/wire/messages.h"
#include "server/store/checkpoint.h"

namespace ps {

// Where one slice's data lies in the file.
struct ScannedSlice {
  Slice slice;
  uint64_t version = 0;
  uint64_t values_at = 0;  // dense: file offset of its slice.length floats
  // Table shards (slice.table): rows records (u64 id, u64 steps, then
  // floats_per_row floats, of which the first dim are the row) from rows_at.
  uint32_t dim = 0;
  uint64_t floats_per_row = 0;
  uint64_t rows = 0;
  uint64_t rows_at = 0;
  // Rows on the disk tier (not in the file: in the snapshot beside it,
  // TableSnapshotPath); those also in the file are the file's.
  uint64_t disk_rows = 0;
  uint64_t disk_only_rows = 0;  // of them, those not in the file
  uint32_t disk_log = 0;        // the log they are in (server/store/table_shard.h DiskLogOfSlice)
};

class CheckpointScan {
 public:
  // Scans the checkpoint at `path`. kNotFound when it does not exist;
  // kDataLoss naming the file and the problem (bad magic or format, a length
  // that disagrees with the file's size, truncated data, trailing bytes, a
  // checksum mismatch, a model or slice list that does not decode or
  // validate, a slice out of order); errno's code for a failing open or read.
  static absl::StatusOr<std::unique_ptr<CheckpointScan>> Open(const std::string& path);
  ~CheckpointScan();
  CheckpointScan(const CheckpointScan&) = delete;
  CheckpointScan& operator=(const CheckpointScan&) = delete;

  const std::string& path() const { return path_; }
  const CheckpointInfo& info() const { return info_; }
  // The model, the whole job's slice list and its number of workers.
  const CreateSlicesRequestMsg& spec() const { return spec_; }
  // The slices this server holds, in the file's order.
  const std::vector<ScannedSlice>& slices() const { return slices_; }
  // Where the disk tier's rows of this checkpoint are (TableSnapshotPath).
  std::string TableSnapshot() const;

  // Elements [first, first + out.size()) of dense slice `s` (one of
  // slices()). kOutOfRange past its end; errno's code for a failing read.
  absl::Status ReadValues(const ScannedSlice& s, uint64_t first, absl::Span<float> out) const;
  // The rows of table shard `s` in the file's order, up to `batch` at a
  // time: `fn(ids, rows)` with rows ids.size() x dim floats; its error ends
  // the walk and is returned.
  absl::Status ForEachRow(
      const ScannedSlice& s, size_t batch,
      absl::FunctionRef<absl::Status(absl::Span<const uint64_t>, absl::Span<const float>)> fn) const;

 private:
  CheckpointScan(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  absl::Status Pread(uint64_t at, void* out, size_t n) const;

  std::string path_;
  int fd_;
  CheckpointInfo info_;
  CreateSlicesRequestMsg spec_;
  std::vector<ScannedSlice> slices_;
  friend class ScanBuilder;
};

}  // namespace ps

#endif  // PS_SERVER_EXPORT_CHECKPOINT_SCAN_H_
