#include "server/export/checkpoint_scan.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/durable_file.h"
#include "common/base/file_errors.h"
#include "common/base/status_macros.h"
#include "common/wire/codec.h"
#include "server/disk/table_disk.h"
#include "server/optim/optimizer.h"
#include "server/store/checkpoint_codec.h"

namespace ps {
namespace {

constexpr size_t kBufferBytes = 1 << 20;
// A slice's fixed fields: key, version, optimizer steps, arrived.
constexpr uint64_t kSliceHead = 4 + 8 + 8 + 4;
constexpr uint64_t kSketchDepth = 4;  // CountMinSketch::kDepth

}  // namespace

// Reads the body front to back through a buffer, checksumming every byte,
// and builds the scan's index. Every length is checked against what is left
// before anything is allocated for it.
class ScanBuilder {
 public:
  ScanBuilder(CheckpointScan* scan, uint64_t body_at, uint64_t body_bytes)
      : scan_(scan), at_(body_at), end_(body_at + body_bytes) {}

  absl::Status Build(uint32_t format, uint32_t want_crc);

 private:
  template <typename T>
  absl::Status Get(T* v, absl::string_view what) {
    return Read(v, sizeof(T), what);
  }
  absl::Status Read(void* out, uint64_t n, absl::string_view what);
  // Steps over n records of `size` bytes (checksummed all the same).
  absl::Status Skip(uint64_t n, uint64_t size, absl::string_view what);
  absl::Status Fill();
  absl::Status Info(uint32_t format);
  absl::Status Spec();
  absl::Status NextSlice(const Slice& slice, const Optimizer& optimizer);
  absl::Status Shard(ScannedSlice& s, const std::string& name);
  // Reads a shard's disk flags: the rows in the file that also have a disk
  // copy.
  absl::Status CountOnDisk(ScannedSlice& s, const std::string& name);
  absl::Status Truncated(absl::string_view what) const {
    return absl::DataLossError(absl::StrCat(scan_->path_, ": truncated: it ends inside ", what));
  }

  CheckpointScan* scan_;
  uint64_t at_;   // file offset of buf_[0]
  uint64_t end_;  // file offset where the body ends
  uint32_t store_format_ = 0;
  std::string buf_;
  size_t pos_ = 0;
  uLong crc_ = crc32(0L, Z_NULL, 0);
};

absl::Status ScanBuilder::Fill() {
  at_ += buf_.size();
  pos_ = 0;
  buf_.resize(std::min<uint64_t>(kBufferBytes, end_ - at_));
  PS_RETURN_IF_ERROR(scan_->Pread(at_, buf_.data(), buf_.size()));
  crc_ = crc32(crc_, reinterpret_cast<const Bytef*>(buf_.data()), static_cast<uInt>(buf_.size()));
  return absl::OkStatus();
}

absl::Status ScanBuilder::Read(void* out, uint64_t n, absl::string_view what) {
  if (n > end_ - at_ - pos_) return Truncated(what);
  auto* dst = static_cast<char*>(out);
  while (n > 0) {
    if (pos_ == buf_.size()) PS_RETURN_IF_ERROR(Fill());
    const size_t take = std::min<uint64_t>(n, buf_.size() - pos_);
    std::memcpy(dst, buf_.data() + pos_, take);
    pos_ += take;
    dst += take;
    n -= take;
  }
  return absl::OkStatus();
}

absl::Status ScanBuilder::Skip(uint64_t n, uint64_t size, absl::string_view what) {
  if (size != 0 && n > (end_ - at_ - pos_) / size) return Truncated(what);
  for (uint64_t left = n * size; left > 0;) {
    if (pos_ == buf_.size()) PS_RETURN_IF_ERROR(Fill());
    const size_t take = std::min<uint64_t>(left, buf_.size() - pos_);
    pos_ += take;
    left -= take;
  }
  return absl::OkStatus();
}

absl::Status ScanBuilder::Info(uint32_t format) {
  // The info is small: read it whole and parse it where the codec does.
  const uint64_t fixed = 4 + 8 + 8 + (format >= 2 ? 8 : 0) + 4;
  std::string head(fixed, '\0');
  PS_RETURN_IF_ERROR(Read(head.data(), fixed, "the checkpoint's info"));
  uint32_t n = 0;
  std::memcpy(&n, head.data() + fixed - 4, 4);
  const uint64_t seq_bytes = uint64_t{n} * (4 + 4 + 8);
  if (seq_bytes > end_ - at_ - pos_) return Truncated("the worker sequence numbers");
  head.resize(fixed + seq_bytes);
  PS_RETURN_IF_ERROR(Read(head.data() + fixed, seq_bytes, "the worker sequence numbers"));
  absl::string_view rest = head;
  PS_ASSIGN_OR_RETURN(scan_->info_, DecodeCheckpointInfo(format, &rest));
  return absl::OkStatus();
}

absl::Status ScanBuilder::Spec() {
  PS_RETURN_IF_ERROR(Get(&store_format_, "the store's format"));
  if (store_format_ < 1 || store_format_ > kStoreFormat) {
    return absl::DataLossError(absl::StrCat(scan_->path_, ": slice store format ", store_format_, " is unknown"));
  }
  uint64_t n = 0;
  PS_RETURN_IF_ERROR(Get(&n, "the model's length"));
  if (n > end_ - at_ - pos_) return Truncated("the model");
  std::vector<uint8_t> bytes(n);
  PS_RETURN_IF_ERROR(Read(bytes.data(), n, "the model"));
  absl::StatusOr<Envelope> env = DecodeEnvelope(bytes);
  auto* spec = env.ok() ? std::get_if<CreateSlicesRequestMsg>(&env->body) : nullptr;
  if (spec == nullptr || !spec->model.Validate().ok() || spec->num_workers < 1) {
    return absl::DataLossError(absl::StrCat(scan_->path_, ": the model and slice list do not decode or validate"));
  }
  scan_->spec_ = std::move(*spec);
  const auto workers = static_cast<uint64_t>(scan_->spec_.num_workers);
  PS_RETURN_IF_ERROR(Skip(workers + 3 * 8, 1, "the active workers and counters"));
  uint64_t buckets = 0;
  PS_RETURN_IF_ERROR(Get(&buckets, "the staleness histogram"));
  return Skip(buckets, 8, "the staleness histogram");
}

absl::Status ScanBuilder::CountOnDisk(ScannedSlice& s, const std::string& name) {
  constexpr uint8_t kOnDisk = 2;  // TableShard's flag
  uint8_t flags[4096];
  uint64_t both = 0;
  for (uint64_t done = 0; done < s.rows;) {
    const uint64_t n = std::min<uint64_t>(sizeof(flags), s.rows - done);
    PS_RETURN_IF_ERROR(Read(flags, n, absl::StrCat(name, "'s disk flags")));
    for (uint64_t i = 0; i < n; ++i) both += (flags[i] & kOnDisk) ? 1 : 0;
    done += n;
  }
  if (both > s.disk_rows) {
    return absl::DataLossError(absl::StrCat(scan_->path_, ": ", name, " has ", both,
                                            " rows with disk copies but counts ", s.disk_rows, " on disk"));
  }
  s.disk_only_rows = s.disk_rows - both;
  return Skip(s.rows, 8, absl::StrCat(name, "'s last-seen updates"));
}

absl::Status ScanBuilder::Shard(ScannedSlice& s, const std::string& name) {
  uint64_t counters[13];                           // six, then (store format 4) the disk tier's and expiry's seven
  uint8_t shared_log = store_format_ < 5 ? 1 : 0;  // its table's log (format 6: a flag)
  if (store_format_ >= 6) PS_RETURN_IF_ERROR(Get(&shared_log, name));
  if (shared_log > 1)
    return absl::DataLossError(absl::StrCat(scan_->path_, ": ", name, "'s disk log flag is ", int{shared_log}));
  PS_RETURN_IF_ERROR(Get(&s.dim, name));
  PS_RETURN_IF_ERROR(Get(&s.floats_per_row, name));
  PS_RETURN_IF_ERROR(Read(counters, (store_format_ >= 4 ? 13 : 6) * sizeof(uint64_t), name));
  s.disk_rows = store_format_ >= 4 ? counters[6] : 0;
  s.disk_log = shared_log ? s.slice.tensor : DiskLogOfSlice(s.slice.key);
  PS_RETURN_IF_ERROR(Get(&s.rows, name));
  const auto& spec = scan_->spec_.model.tables[s.slice.tensor];
  if (s.dim != static_cast<uint32_t>(spec.dim) || s.floats_per_row < s.dim) {
    return absl::DataLossError(absl::StrCat(scan_->path_, ": ", name, " has rows of ", s.dim, " values; table '",
                                            spec.name, "' has ", spec.dim));
  }
  s.rows_at = at_ + pos_;
  PS_RETURN_IF_ERROR(Skip(s.rows, 16 + s.floats_per_row * sizeof(float), absl::StrCat(name, "'s rows")));
  if (store_format_ >= 4) PS_RETURN_IF_ERROR(CountOnDisk(s, name));
  uint64_t pending = 0;
  PS_RETURN_IF_ERROR(Get(&pending, name));
  PS_RETURN_IF_ERROR(Skip(pending, 8 + s.dim * sizeof(float), absl::StrCat(name, "'s pending gradients")));
  uint32_t width = 0;
  PS_RETURN_IF_ERROR(Get(&width, name));
  return Skip(uint64_t{width} * kSketchDepth, 2, absl::StrCat(name, "'s admission sketch"));
}

absl::Status ScanBuilder::NextSlice(const Slice& slice, const Optimizer& optimizer) {
  const std::string name = absl::StrCat("slice ", slice.key);
  ScannedSlice& s = scan_->slices_.emplace_back();
  s.slice = slice;
  uint32_t key = 0, arrived = 0;
  uint64_t steps = 0;
  PS_RETURN_IF_ERROR(Get(&key, name));
  if (key != slice.key) {
    return absl::DataLossError(absl::StrCat(scan_->path_, ": slice ", key, " where slice ", slice.key, " belongs"));
  }
  PS_RETURN_IF_ERROR(Get(&s.version, name));
  PS_RETURN_IF_ERROR(Get(&steps, name));
  PS_RETURN_IF_ERROR(Get(&arrived, name));
  const auto workers = static_cast<uint64_t>(scan_->spec_.num_workers);
  PS_RETURN_IF_ERROR(Skip(workers, 1 + 8 + 8, name));  // pushed, clocks, join steps
  if (store_format_ >= 2) {
    uint8_t has_floor = 0;
    PS_RETURN_IF_ERROR(Get(&has_floor, name));
    if (has_floor > 1) return absl::DataLossError(absl::StrCat(scan_->path_, ": ", name, ": bad floor flag"));
    PS_RETURN_IF_ERROR(Skip(has_floor * workers, 8, name));
  }
  s.values_at = at_ + pos_;
  const uint64_t floats = slice.length + optimizer.StateSize(slice.length) + (arrived > 0 ? slice.length : 0);
  PS_RETURN_IF_ERROR(Skip(floats, sizeof(float), absl::StrCat(name, "'s values")));
  return slice.table ? Shard(s, name) : absl::OkStatus();
}

absl::Status ScanBuilder::Build(uint32_t format, uint32_t want_crc) {
  PS_RETURN_IF_ERROR(Info(format));
  PS_RETURN_IF_ERROR(Spec());
  const ModelSpec& model = scan_->spec_.model;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, Optimizer::Create(model.optimizer));
  PS_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Optimizer>> tables, TableOptimizers(model));
  for (const Slice& slice : scan_->spec_.slices) {
    if (slice.table && store_format_ < 3) {
      return absl::DataLossError(absl::StrCat(scan_->path_, ": a table shard in a store of format ", store_format_));
    }
    PS_RETURN_IF_ERROR(NextSlice(slice, slice.table ? *tables[slice.tensor] : *optimizer));
  }
  if (at_ + pos_ != end_) {
    return absl::DataLossError(absl::StrCat(scan_->path_, ": ", end_ - at_ - pos_, " bytes after the last slice"));
  }
  if (crc_ != want_crc) return absl::DataLossError(absl::StrCat(scan_->path_, ": checksum mismatch"));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CheckpointScan>> CheckpointScan::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no checkpoint at ", path));
    return ErrnoError(errno, "opening", path);
  }
  std::unique_ptr<CheckpointScan> scan(new CheckpointScan(path, fd));
  PS_ASSIGN_OR_RETURN(const FramedHeader header, ReadFramedHeader(fd, path, kCheckpointFile));
  ScanBuilder builder(scan.get(), kFramedHeaderBytes, header.body_bytes);
  PS_RETURN_IF_ERROR(builder.Build(header.format, header.crc));
  return scan;
}

CheckpointScan::~CheckpointScan() { ::close(fd_); }

absl::Status CheckpointScan::Pread(uint64_t at, void* out, size_t n) const {
  auto* dst = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, dst, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoError(errno, "reading", path_);
    if (got == 0) return absl::DataLossError(absl::StrCat(path_, ": shorter than it was (changed while read?)"));
    dst += got;
    at += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::Status CheckpointScan::ReadValues(const ScannedSlice& s, uint64_t first, absl::Span<float> out) const {
  if (s.slice.table || first > s.slice.length || out.size() > s.slice.length - first) {
    return absl::OutOfRangeError(
        absl::StrCat("values [", first, ", ", first + out.size(), ") of slice ", s.slice.key, " of ", s.slice.length));
  }
  return Pread(s.values_at + first * sizeof(float), out.data(), out.size() * sizeof(float));
}

std::string CheckpointScan::TableSnapshot() const {
  return TableSnapshotPath(std::filesystem::path(path_).parent_path().string(), info_.server_rank, info_.number);
}

absl::Status CheckpointScan::ForEachRow(
    const ScannedSlice& s, size_t batch,
    absl::FunctionRef<absl::Status(absl::Span<const uint64_t>, absl::Span<const float>)> fn) const {
  const uint64_t record = 16 + s.floats_per_row * sizeof(float);
  batch = std::max<size_t>(1, std::min<uint64_t>(batch, kBufferBytes / record + 1));
  std::string raw;
  std::vector<uint64_t> ids;
  std::vector<float> rows;
  for (uint64_t done = 0; done < s.rows;) {
    const uint64_t n = std::min<uint64_t>(batch, s.rows - done);
    raw.resize(n * record);
    PS_RETURN_IF_ERROR(Pread(s.rows_at + done * record, raw.data(), raw.size()));
    ids.resize(n);
    rows.resize(n * s.dim);
    for (uint64_t i = 0; i < n; ++i) {
      std::memcpy(&ids[i], raw.data() + i * record, 8);
      std::memcpy(rows.data() + i * s.dim, raw.data() + i * record + 16, s.dim * sizeof(float));
    }
    PS_RETURN_IF_ERROR(fn(ids, rows));
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace ps
