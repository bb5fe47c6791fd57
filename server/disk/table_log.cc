#include "server/disk/table_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/file_errors.h"
#include "common/base/status_macros.h"
#include "glog/logging.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

constexpr size_t kHeaderBytes = 24;  // id, steps, last_seen
constexpr char kIndexMagic[8] = {'P', 'S', 'T', 'L', 'O', 'G', '0', '2'};
constexpr size_t kIndexHeaderBytes = sizeof(kIndexMagic) + 4 + 4 + 8;  // magic, row floats, tag bits, entries
constexpr size_t kIndexEntryBytes = 12;                                // key, location
constexpr uint64_t kDirectAlign = 4096;

size_t RecordBytes(size_t row_floats) { return (kHeaderBytes + row_floats * sizeof(float) + 7) / 8 * 8; }

constexpr uint32_t Location(uint32_t segment, uint32_t record) { return segment << 16 | record; }
// An index slot holding a location is never LogIndex's empty marker.
static_assert(Location(TableLog::kMaxSegments - 1, TableLog::kMaxRecordsPerSegment - 1) < LogIndex::kNoLocation);

// pread/pwrite of all `n` bytes, retrying short transfers; false with errno
// set on an error, or at the end of the file (errno 0).
template <typename Io, typename Buf>
bool FullIo(Io io, int fd, Buf buf, size_t n, uint64_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = io(fd, buf + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got == 0) errno = 0;
      return false;
    }
    done += static_cast<size_t>(got);
  }
  return true;
}

bool ReadAt(int fd, char* buf, size_t n, uint64_t offset) { return FullIo(::pread, fd, buf, n, offset); }
bool WriteAt(int fd, const char* buf, size_t n, uint64_t offset) { return FullIo(::pwrite, fd, buf, n, offset); }

void ParseRecord(const char* record, size_t row_floats, DiskRow* row) {
  std::memcpy(&row->steps, record + 8, 8);
  std::memcpy(&row->last_seen, record + 16, 8);
  row->floats.resize(row_floats);
  std::memcpy(row->floats.data(), record + kHeaderBytes, row_floats * sizeof(float));
}

uint64_t RecordId(const char* record) {
  uint64_t id;
  std::memcpy(&id, record, 8);
  return id;
}

// A snapshot's index: its rows' width and entries by location.
struct SnapshotIndex {
  uint32_t row_floats = 0;
  uint32_t tag_bits = 0;
  std::vector<LogIndex::Entry> entries;
};

absl::StatusOr<SnapshotIndex> ReadIndex(const std::string& source) {
  const std::string path = source + "/index";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot open the table snapshot index", path);
  std::string bytes;
  char chunk[1 << 16];
  ssize_t got;
  while ((got = read(fd, chunk, sizeof(chunk))) > 0) bytes.append(chunk, static_cast<size_t>(got));
  const int err = errno;
  close(fd);
  if (got < 0) return ErrnoError(err, "cannot read", path);
  SnapshotIndex index;
  uint64_t count = 0;
  if (bytes.size() >= kIndexHeaderBytes && std::memcmp(bytes.data(), kIndexMagic, sizeof(kIndexMagic)) == 0) {
    std::memcpy(&index.row_floats, bytes.data() + 8, 4);
    std::memcpy(&index.tag_bits, bytes.data() + 12, 4);
    std::memcpy(&count, bytes.data() + 16, 8);
  }
  if (index.row_floats == 0 || index.tag_bits < 1 || index.tag_bits > 32 ||
      count > (bytes.size() - std::min(bytes.size(), kIndexHeaderBytes)) / kIndexEntryBytes ||
      bytes.size() != kIndexHeaderBytes + count * kIndexEntryBytes) {
    return absl::DataLossError(absl::StrCat("table snapshot index ", path, ": ", bytes.size(),
                                            " bytes are not a table log index (truncated or another file)"));
  }
  index.entries.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    const char* e = bytes.data() + kIndexHeaderBytes + i * kIndexEntryBytes;
    std::memcpy(&index.entries[i].key, e, 8);
    std::memcpy(&index.entries[i].location, e + 8, 4);
  }
  return index;
}

// The segment number of a file named "<n>.seg"; false for other files.
bool SegmentNumber(const fs::path& file, uint32_t* number) {
  return file.extension() == ".seg" && absl::SimpleAtoi(file.stem().string(), number) &&
         *number < TableLog::kMaxSegments;
}

}  // namespace

TableLog::TableLog(std::string dir, size_t row_floats, bool direct_reads, int tag_bits)
    : dir_(std::move(dir)),
      row_floats_(row_floats),
      record_bytes_(RecordBytes(row_floats)),
      per_segment_(
          static_cast<uint32_t>(std::clamp<uint64_t>(kSegmentBytes / record_bytes_, 1, kMaxRecordsPerSegment))),
      direct_reads_(direct_reads),
      tag_bits_(tag_bits),
      index_(tag_bits) {}

TableLog::~TableLog() {
  for (Segment& s : segments_) {
    if (s.fd >= 0) close(s.fd);
    if (s.direct_fd >= 0) close(s.direct_fd);
  }
}

absl::StatusOr<std::unique_ptr<TableLog>> TableLog::Create(const std::string& dir, size_t row_floats, bool direct_reads,
                                                           int tag_bits) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot make ", dir, ": ", ec.message()));
  return std::unique_ptr<TableLog>(new TableLog(dir, row_floats, direct_reads, tag_bits));
}

absl::StatusOr<std::unique_ptr<TableLog>> TableLog::Restore(const std::string& dir, const std::string& source,
                                                            bool direct_reads) {
  PS_ASSIGN_OR_RETURN(SnapshotIndex index, ReadIndex(source));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<TableLog> log,
                      Create(dir, index.row_floats, direct_reads, static_cast<int>(index.tag_bits)));
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(source, ec)) {
    uint32_t number = 0;
    if (!SegmentNumber(e.path(), &number)) continue;
    const fs::path to = fs::path(dir) / e.path().filename();
    fs::create_hard_link(e.path(), to, ec);
    if (ec) fs::copy_file(e.path(), to, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot copy ", e.path().string(), ": ", ec.message()));
    PS_RETURN_IF_ERROR(log->OpenSegment(number, /*create=*/false));
  }
  if (ec) return absl::NotFoundError(absl::StrCat("table snapshot ", source, ": ", ec.message()));
  for (const LogIndex::Entry& e : index.entries) {
    const uint32_t number = e.location >> 16;
    const bool tag_ok = index.tag_bits == 32 || (e.key & 0xffffffffu) >> index.tag_bits == 0;
    if (!tag_ok || number >= log->segments_.size() || log->segments_[number].fd < 0 ||
        (e.location & 0xffff) >= log->segments_[number].records ||
        log->segments_[number].live >= log->segments_[number].records) {
      return absl::DataLossError(absl::StrCat("table snapshot ", source, ": a row lies in record ", e.location & 0xffff,
                                              " of segment ", number, ", which it does not hold"));
    }
    log->index_.AddEntry(e);
    ++log->segments_[number].live;
  }
  log->dead_ = log->file_bytes_ / log->record_bytes_ - log->index_.size();
  for (uint32_t n = 0; n < log->segments_.size(); ++n) {
    Segment& s = log->segments_[n];
    if (s.fd < 0) continue;
    s.unsynced = true;  // a copy (no hard link) is not yet on disk: the next snapshot syncs it
    if (s.live == 0) log->RemoveSegment(n);
  }
  return log;
}

std::string TableLog::SegmentPath(uint32_t number) const { return absl::StrCat(dir_, "/", number, ".seg"); }

absl::Status TableLog::OpenSegment(uint32_t number, bool create) {
  if (segments_.size() <= number) segments_.resize(number + 1);
  Segment& s = segments_[number];
  const std::string path = SegmentPath(number);
  // A new segment is always a new file: a snapshot may share the inode of
  // a file of that name that this log deleted (never truncate it).
  if (create && unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError(errno, "cannot replace", path);
  s.fd = open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0), 0644);
  if (s.fd < 0) return ErrnoError(errno, "cannot open the table segment", path);
  if (direct_reads_) {
    s.direct_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (s.direct_fd < 0) {
      const absl::Status error = ErrnoError(errno, "cannot open with O_DIRECT (--table_disk_direct_io)", path);
      close(s.fd);
      s = Segment{};
      return error;
    }
  }
  struct stat st;
  if (fstat(s.fd, &st) != 0) {
    const absl::Status error = ErrnoError(errno, "cannot stat", path);
    close(s.fd);
    if (s.direct_fd >= 0) close(s.direct_fd);
    s = Segment{};
    return error;
  }
  s.records = static_cast<uint32_t>(
      std::min<uint64_t>(static_cast<uint64_t>(st.st_size) / record_bytes_, kMaxRecordsPerSegment));
  file_bytes_ += uint64_t{s.records} * record_bytes_;
  return absl::OkStatus();
}

void TableLog::RemoveSegment(uint32_t number) {
  Segment& s = segments_[number];
  close(s.fd);
  if (s.direct_fd >= 0) close(s.direct_fd);
  const std::string path = SegmentPath(number);
  if (unlink(path.c_str()) != 0) LOG(ERROR) << ErrnoError(errno, "cannot delete the table segment", path);
  file_bytes_ -= uint64_t{s.records} * record_bytes_;
  dead_ -= s.records - s.live;
  s = Segment{};
}

uint64_t TableLog::memory_bytes() const {
  return index_.bytes() + buffer_.capacity() + segments_.capacity() * sizeof(Segment);
}

absl::Status TableLog::Flush() {
  if (head_ < 0) return absl::OkStatus();
  Segment& s = segments_[head_];
  const size_t n = s.records - buffered_from_;
  if (n == 0) return absl::OkStatus();
  if (!WriteAt(s.fd, buffer_.data(), n * record_bytes_, uint64_t{buffered_from_} * record_bytes_)) {
    return ErrnoError(errno == 0 ? EIO : errno, "cannot write the table segment", SegmentPath(head_));
  }
  buffered_from_ = s.records;
  s.unsynced = true;
  return absl::OkStatus();
}

absl::Status TableLog::Append(uint64_t id, uint64_t steps, uint64_t last_seen, const float* floats,
                              uint32_t* location) {
  if (head_ < 0 || segments_[head_].records == per_segment_) {
    PS_RETURN_IF_ERROR(Flush());
    uint32_t number = 0;
    while (number < segments_.size() && segments_[number].fd >= 0) ++number;
    if (number >= kMaxSegments) {
      return absl::ResourceExhaustedError(absl::StrCat("table log ", dir_, " has ", number, " segments, the most"));
    }
    PS_RETURN_IF_ERROR(OpenSegment(number, /*create=*/true));
    const int64_t sealed = head_;
    head_ = number;
    buffered_from_ = 0;
    if (sealed >= 0 && segments_[sealed].live == 0) RemoveSegment(static_cast<uint32_t>(sealed));
  }
  if (buffer_.empty()) buffer_.resize(std::max<uint64_t>(1, kBufferBytes / record_bytes_) * record_bytes_);
  Segment& head = segments_[head_];
  if ((head.records - buffered_from_ + 1) * record_bytes_ > buffer_.size()) PS_RETURN_IF_ERROR(Flush());
  char* record = buffer_.data() + (head.records - buffered_from_) * record_bytes_;
  std::memcpy(record, &id, 8);
  std::memcpy(record + 8, &steps, 8);
  std::memcpy(record + 16, &last_seen, 8);
  std::memcpy(record + kHeaderBytes, floats, row_floats_ * sizeof(float));
  std::memset(record + kHeaderBytes + row_floats_ * sizeof(float), 0, record_bytes_ - kHeaderBytes - row_floats_ * 4);
  *location = Location(static_cast<uint32_t>(head_), head.records++);
  ++head.live;
  file_bytes_ += record_bytes_;
  return absl::OkStatus();
}

void TableLog::Kill(uint32_t location) {
  const uint32_t number = location >> 16;
  Segment& s = segments_[number];
  --s.live;
  ++dead_;
  if (s.live == 0 && static_cast<int64_t>(number) != head_) RemoveSegment(number);
}

bool TableLog::RecordIdAt(uint32_t location, uint64_t* id) const {
  std::vector<char> record(record_bytes_);
  if (!ReadRecord(location, record.data())) return false;
  *id = RecordId(record.data());
  return true;
}

absl::StatusOr<bool> TableLog::FindOwn(uint64_t id, bool trust_one, uint32_t* location) const {
  const LogIndex::Locations candidates = index_.Candidates(id);
  if (candidates.size() == 1 && trust_one) {
    *location = candidates[0];
    return true;
  }
  for (uint32_t c : candidates) {
    uint64_t stored;
    if (!RecordIdAt(c, &stored)) {
      // Unreadable: whether it is `id`'s is unknown, and guessing "no" would
      // leave `id` two entries.
      return ErrnoError(errno == 0 ? EIO : errno, "cannot read a record of", SegmentPath(c >> 16));
    }
    if (stored == id) {
      *location = c;
      return true;
    }
  }
  return false;
}

absl::Status TableLog::Put(uint64_t id, uint64_t steps, uint64_t last_seen, absl::Span<const float> floats,
                           bool replaces) {
  uint32_t old;
  PS_ASSIGN_OR_RETURN(const bool had, FindOwn(id, replaces, &old));
  uint32_t location;
  PS_RETURN_IF_ERROR(Append(id, steps, last_seen, floats.data(), &location));
  if (had) {
    index_.Move(id, old, location);
    Kill(old);
  } else {
    index_.Add(id, location);
  }
  if (dead_ > index_.size() && dead_ >= per_segment_) CompactOne(/*half_dead_only=*/true);
  return absl::OkStatus();
}

uint64_t TableLog::ScanLive(uint64_t max_records, absl::FunctionRef<bool(uint64_t, uint64_t)> drop) {
  if (segments_.empty()) return 0;
  const uint32_t chunk_records = ChunkRecords();
  std::vector<char> chunk(uint64_t{chunk_records} * record_bytes_);
  uint64_t visited = 0, dropped = 0;
  size_t idle = 0;  // segments passed in a row with no record to visit: once round them all, stop
  while (visited < max_records && idle <= segments_.size()) {
    if (scan_segment_ >= segments_.size()) scan_segment_ = 0, scan_record_ = 0;
    const uint32_t number = scan_segment_;
    const Segment& s = segments_[number];
    const uint32_t end = s.fd < 0 ? 0 : s.records;
    if (scan_record_ >= end) {
      ++scan_segment_, scan_record_ = 0, ++idle;
      continue;
    }
    idle = 0;
    // A chunk lies in the file or in the write buffer, not across both.
    const bool head = static_cast<int64_t>(number) == head_;
    const uint32_t stop = head && scan_record_ < buffered_from_ ? buffered_from_ : end;
    const auto n =
        static_cast<uint32_t>(std::min<uint64_t>({chunk_records, stop - scan_record_, max_records - visited}));
    if (!ReadRecords(number, scan_record_, n, chunk.data())) {
      LOG(ERROR) << ErrnoError(errno == 0 ? EIO : errno, "cannot scan", SegmentPath(number));
      ++scan_segment_, scan_record_ = 0;
      continue;
    }
    for (uint32_t r = 0; r < n && segments_[number].fd >= 0; ++r) {
      const char* record = chunk.data() + uint64_t{r} * record_bytes_;
      const uint64_t id = RecordId(record);
      const uint32_t location = Location(number, scan_record_ + r);
      uint64_t last_seen;
      std::memcpy(&last_seen, record + 16, 8);
      if (index_.Holds(id, location) && drop(id, last_seen)) {
        index_.Remove(id, location);
        Kill(location);  // may delete the segment: the rest of the chunk is gone with it
        ++dropped;
      }
    }
    visited += n;
    scan_record_ += n;
    if (segments_[number].fd < 0) ++scan_segment_, scan_record_ = 0;
  }
  return dropped;
}

bool TableLog::Compact() { return CompactOne(/*half_dead_only=*/false); }

bool TableLog::CompactOne(bool half_dead_only) {
  int64_t best = -1;
  for (size_t n = 0; n < segments_.size(); ++n) {
    const Segment& s = segments_[n];
    if (s.fd < 0 || static_cast<int64_t>(n) == head_ || s.live == s.records) continue;
    if (half_dead_only && 2 * uint64_t{s.live} > s.records) continue;
    if (best < 0 || s.live < segments_[best].live) best = static_cast<int64_t>(n);
  }
  if (best < 0) return false;
  const auto number = static_cast<uint32_t>(best);
  if (segments_[number].live == 0) {  // e.g. restored with nothing live: nothing to move
    RemoveSegment(number);
    return true;
  }
  const uint32_t records = segments_[number].records;
  const uint32_t chunk_records = ChunkRecords();
  std::vector<char> chunk(uint64_t{chunk_records} * record_bytes_);
  DiskRow row;
  for (uint32_t first = 0; first < records && segments_[number].live > 0; first += chunk_records) {
    const uint32_t n = std::min(chunk_records, records - first);
    if (!ReadRecords(number, first, n, chunk.data())) {  // sealed: all in its file
      LOG(ERROR) << ErrnoError(errno == 0 ? EIO : errno, "compaction cannot read", SegmentPath(number));
      return false;
    }
    for (uint32_t r = 0; r < n; ++r) {
      const char* record = chunk.data() + uint64_t{r} * record_bytes_;
      const uint64_t id = RecordId(record);
      if (!index_.Holds(id, Location(number, first + r))) continue;
      ParseRecord(record, row_floats_, &row);
      uint32_t moved;
      if (absl::Status s = Append(id, row.steps, row.last_seen, row.floats.data(), &moved); !s.ok()) {
        LOG(ERROR) << "table log compaction: " << s;
        return false;
      }
      index_.Move(id, Location(number, first + r), moved);
      Kill(Location(number, first + r));          // removes the segment with its last live record
      if (segments_[number].fd < 0) return true;  // its number may be reused from here on
    }
  }
  // Live records the index names but the file does not hold (damage): the
  // segment stays, and compaction made no progress.
  LOG(ERROR) << "table log " << dir_ << ": segment " << number << " keeps " << segments_[number].live
             << " live records its file does not hold";
  return false;
}

bool TableLog::ReadRecords(uint32_t number, uint32_t first, uint32_t n, char* out) const {
  if (static_cast<int64_t>(number) == head_ && first >= buffered_from_) {
    std::memcpy(out, buffer_.data() + uint64_t{first - buffered_from_} * record_bytes_, uint64_t{n} * record_bytes_);
    return true;
  }
  return ReadAt(segments_[number].fd, out, uint64_t{n} * record_bytes_, uint64_t{first} * record_bytes_);
}

bool TableLog::ReadRecord(uint32_t location, char* out) const {
  const uint32_t number = location >> 16, record = location & 0xffff;
  const bool buffered = static_cast<int64_t>(number) == head_ && record >= buffered_from_;
  if (!direct_reads_ || buffered) return ReadRecords(number, record, 1, out);
  const Segment& s = segments_[number];
  const uint64_t offset = uint64_t{record} * record_bytes_;
  // O_DIRECT: whole aligned blocks into an aligned buffer.
  const uint64_t start = offset / kDirectAlign * kDirectAlign;
  const uint64_t span = (offset + record_bytes_ - start + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
  std::unique_ptr<char, decltype(&std::free)> aligned(static_cast<char*>(std::aligned_alloc(kDirectAlign, span)),
                                                      &std::free);
  ssize_t got;
  do {
    got = pread(s.direct_fd, aligned.get(), span, static_cast<off_t>(start));
  } while (got < 0 && errno == EINTR);
  if (got < static_cast<ssize_t>(offset - start + record_bytes_)) return false;
  std::memcpy(out, aligned.get() + (offset - start), record_bytes_);
  return true;
}

bool TableLog::ReadRow(uint64_t id, uint32_t location, DiskRow* row) const {
  std::vector<char> record(record_bytes_);
  errno = 0;
  if (!ReadRecord(location, record.data())) {
    LOG_EVERY_N(ERROR, 1000) << "table log " << dir_ << ": segment " << (location >> 16) << ", record "
                             << (location & 0xffff)
                             << " unreadable: " << (errno != 0 ? strerror(errno) : "past its end");
    return false;
  }
  if (RecordId(record.data()) != id) return false;  // another id with the same tag
  ParseRecord(record.data(), row_floats_, row);
  return true;
}

bool TableLog::Get(uint64_t id, DiskRow* row) {
  for (uint32_t c : index_.Candidates(id)) {
    if (ReadRow(id, c, row)) return true;
  }
  return false;
}

void TableLog::Delete(uint64_t id) {
  uint32_t location;
  absl::StatusOr<bool> found = FindOwn(id, /*trust_one=*/false, &location);
  if (!found.ok()) LOG(ERROR) << "table log " << dir_ << ": row " << id << " not deleted: " << found.status();
  if (!found.ok() || !*found) return;
  index_.Remove(id, location);
  Kill(location);
}

absl::Status TableLog::Snapshot(const std::string& target) {
  PS_RETURN_IF_ERROR(Flush());
  std::error_code ec;
  fs::create_directories(target, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot make ", target, ": ", ec.message()));
  for (uint32_t n = 0; n < segments_.size(); ++n) {
    Segment& s = segments_[n];
    if (s.fd < 0) continue;
    if (s.unsynced && fdatasync(s.fd) != 0) return ErrnoError(errno, "cannot sync", SegmentPath(n));
    s.unsynced = false;
    const fs::path to = fs::path(target) / absl::StrCat(n, ".seg");
    fs::create_hard_link(SegmentPath(n), to, ec);
    if (ec) fs::copy_file(SegmentPath(n), to, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot link ", SegmentPath(n), ": ", ec.message()));
  }
  std::vector<LogIndex::Entry> entries = index_.Entries();
  // By location: a reader of the snapshot reads the segments in order.
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.location < b.location; });
  std::string bytes(kIndexHeaderBytes + entries.size() * kIndexEntryBytes, '\0');
  const auto row_floats = static_cast<uint32_t>(row_floats_), tag_bits = static_cast<uint32_t>(tag_bits_);
  const uint64_t count = entries.size();
  std::memcpy(bytes.data(), kIndexMagic, sizeof(kIndexMagic));
  std::memcpy(bytes.data() + 8, &row_floats, 4);
  std::memcpy(bytes.data() + 12, &tag_bits, 4);
  std::memcpy(bytes.data() + 16, &count, 8);
  for (size_t i = 0; i < entries.size(); ++i) {
    std::memcpy(bytes.data() + kIndexHeaderBytes + i * kIndexEntryBytes, &entries[i].key, 8);
    std::memcpy(bytes.data() + kIndexHeaderBytes + i * kIndexEntryBytes + 8, &entries[i].location, 4);
  }
  const std::string path = target + "/index";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "cannot create", path);
  const bool ok = WriteAt(fd, bytes.data(), bytes.size(), 0) && fdatasync(fd) == 0;
  const int err = errno == 0 ? EIO : errno;
  close(fd);
  if (!ok) return ErrnoError(err, "cannot write", path);
  return FsyncDirectory(target);
}

absl::Status TableLog::ForEachRow(const std::string& source, size_t row_floats,
                                  absl::FunctionRef<absl::Status(uint64_t id, const DiskRow& row)> fn) {
  PS_ASSIGN_OR_RETURN(SnapshotIndex index, ReadIndex(source));
  if (index.row_floats != row_floats) {
    return absl::DataLossError(
        absl::StrCat("table snapshot ", source, " holds rows of ", index.row_floats, " floats, not ", row_floats));
  }
  absl::flat_hash_map<uint32_t, int> fds;
  absl::Status status = absl::OkStatus();
  std::vector<char> record(RecordBytes(row_floats));
  DiskRow row;
  const LogIndex keys(static_cast<int>(index.tag_bits));  // KeyOf, to check each record against its entry
  for (const auto& [key, location] : index.entries) {
    const uint32_t number = location >> 16;
    const std::string path = absl::StrCat(source, "/", number, ".seg");
    auto [it, opened] = fds.try_emplace(number, -1);
    if (opened) it->second = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (it->second < 0) {
      status = ErrnoError(errno, "cannot open the table snapshot segment", path);
      break;
    }
    if (!ReadAt(it->second, record.data(), record.size(), uint64_t{location & 0xffff} * record.size()) ||
        keys.KeyOf(RecordId(record.data())) != key) {
      status = absl::DataLossError(absl::StrCat("table snapshot ", path, ": record ", location & 0xffff,
                                                " unreadable or not the row its index names"));
      break;
    }
    ParseRecord(record.data(), row_floats, &row);
    status = fn(RecordId(record.data()), row);
    if (!status.ok()) break;
  }
  for (const auto& [number, fd] : fds) {
    if (fd >= 0) close(fd);
  }
  return status;
}

}  // namespace ps
