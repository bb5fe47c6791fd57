// The .npz reader. Each entry's CRC-32 is followed by a cursor that
// advances with reads in order, so an entry read front to back (in pieces
// or whole) is read once; a read that reaches the end with the cursor
// behind it reads the rest for the CRC.

#include <zlib.h>

#include <algorithm>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/base/status_macros.h"
#include "common/model_file/array_index.h"
#include "common/model_file/inflater.h"
#include "common/model_file/npy_header.h"
#include "common/model_file/npz.h"
#include "common/model_file/zip.h"

namespace ps::internal {
namespace {

constexpr absl::string_view kSuffix = ".npy";
constexpr uint64_t kCrcChunk = 1 << 20;

uint32_t Crc(uint32_t crc, absl::Span<const char> data) {
  return static_cast<uint32_t>(crc32_z(crc, reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

class NpzReader final : public ModelFileReader {
 public:
  explicit NpzReader(std::unique_ptr<InputFile> file) : file_(std::move(file)) {}

  // Checks each entry's .npy header and lists its array.
  absl::Status Load(std::vector<ZipEntry> entries);

  const std::vector<ArrayInfo>& arrays() const override { return index_.arrays(); }
  const ArrayInfo* Find(absl::string_view name) const override { return index_.Find(name); }
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }

  absl::Status ReadRange(absl::string_view name, uint64_t byte_offset, absl::Span<char> out) override {
    PS_ASSIGN_OR_RETURN(const size_t i, index_.Locate(file_->path(), name, byte_offset, out.size()));
    absl::MutexLock lock(&mu_);
    return ReadEntry(i, members_[i].data_start + byte_offset, out);
  }

 private:
  struct Member {
    ZipEntry entry;
    uint64_t data_start = 0;  // where the array's bytes start in the entry: the .npy header's size
  };
  struct CrcCursor {
    uint64_t checked = 0;  // the CRC covers the entry's bytes [0, checked)
    uint32_t crc = 0;
  };

  absl::Status LoadMember(size_t i);
  // Fills out with the entry's (uncompressed) bytes [offset, offset + out.size()).
  absl::Status ReadEntry(size_t i, uint64_t offset, absl::Span<char> out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return members_[i].entry.method == kZipStored ? ReadStored(i, offset, out) : ReadDeflated(i, offset, out);
  }
  absl::Status ReadStored(size_t i, uint64_t offset, absl::Span<char> out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReadDeflated(size_t i, uint64_t offset, absl::Span<char> out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Extends the CRC of stored entry i to its end and compares it.
  absl::Status FinishCrc(size_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::string Where(size_t i) const {
    return absl::StrCat(file_->path(), ": entry '", absl::CHexEscape(members_[i].entry.name), "': ");
  }

  const std::unique_ptr<InputFile> file_;
  ArrayIndex index_;
  std::vector<Member> members_;  // as index_.arrays(); fixed after Load(): Inflater borrows entries
  const std::map<std::string, std::string> metadata_;  // an .npz has none
  absl::Mutex mu_;
  std::vector<CrcCursor> crc_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Inflater> inflater_ ABSL_GUARDED_BY(mu_);  // the last deflated entry read, if any
  size_t inflater_member_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::Status NpzReader::Load(std::vector<ZipEntry> entries) {
  members_.reserve(entries.size());
  {
    absl::MutexLock lock(&mu_);
    crc_.resize(entries.size());
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!absl::EndsWith(entries[i].name, kSuffix)) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_->path(), ": entry '", absl::CHexEscape(entries[i].name), "' is not a .npy array"));
    }
    members_.push_back(Member{std::move(entries[i])});
    PS_RETURN_IF_ERROR(LoadMember(i));
  }
  return absl::OkStatus();
}

absl::Status NpzReader::LoadMember(size_t i) {
  absl::MutexLock lock(&mu_);
  Member& m = members_[i];
  const uint64_t size = m.entry.uncompressed_size;
  std::string header(std::min<uint64_t>(size, kNpyPrefixBytes), '\0');
  PS_RETURN_IF_ERROR(ReadEntry(i, 0, absl::MakeSpan(header)));
  absl::StatusOr<uint64_t> header_size = NpyHeaderSize(header);
  if (!header_size.ok()) return Annotate(header_size.status(), Where(i));
  if (*header_size > size) {
    return absl::DataLossError(
        absl::StrCat(Where(i), "its .npy header of ", *header_size, " bytes is longer than the entry (", size, ")"));
  }
  const size_t prefix = header.size();
  header.resize(*header_size);
  PS_RETURN_IF_ERROR(ReadEntry(i, prefix, absl::MakeSpan(header).subspan(prefix)));
  absl::StatusOr<NpyHeader> parsed = ParseNpyHeader(header);
  if (!parsed.ok()) return Annotate(parsed.status(), Where(i));
  const std::optional<uint64_t> bytes = ArrayByteSize(parsed->dtype, parsed->shape);
  if (!bytes || *bytes != size - *header_size) {
    return absl::DataLossError(absl::StrCat(Where(i), "the .npy header says ", DTypeName(parsed->dtype), " shape ",
                                            ShapeString(parsed->shape), " but the entry holds ", size - *header_size,
                                            " bytes after the header"));
  }
  m.data_start = *header_size;
  ArrayInfo info;
  info.name = m.entry.name.substr(0, m.entry.name.size() - kSuffix.size());
  info.dtype = parsed->dtype;
  info.shape = std::move(parsed->shape);
  info.bytes = *bytes;
  if (!index_.Add(std::move(info))) return absl::DataLossError(absl::StrCat(Where(i), "a second entry of that name"));
  return absl::OkStatus();
}

absl::Status NpzReader::ReadStored(size_t i, uint64_t offset, absl::Span<char> out) {
  const ZipEntry& entry = members_[i].entry;
  PS_RETURN_IF_ERROR(
      file_->ReadAt(entry.data_offset + offset, out, absl::StrCat("entry '", absl::CHexEscape(entry.name), "'")));
  CrcCursor& cursor = crc_[i];
  const uint64_t end = offset + out.size();
  if (offset <= cursor.checked && end > cursor.checked) {
    cursor.crc = Crc(cursor.crc, out.subspan(cursor.checked - offset));
    cursor.checked = end;
  }
  if (end < entry.uncompressed_size) return absl::OkStatus();
  return FinishCrc(i);
}

absl::Status NpzReader::FinishCrc(size_t i) {
  const ZipEntry& entry = members_[i].entry;
  CrcCursor& cursor = crc_[i];
  std::string chunk;
  while (cursor.checked < entry.uncompressed_size) {
    chunk.resize(std::min(kCrcChunk, entry.uncompressed_size - cursor.checked));
    PS_RETURN_IF_ERROR(file_->ReadAt(entry.data_offset + cursor.checked, absl::MakeSpan(chunk),
                                     absl::StrCat("entry '", absl::CHexEscape(entry.name), "'")));
    cursor.crc = Crc(cursor.crc, chunk);
    cursor.checked += chunk.size();
  }
  if (cursor.crc != entry.crc) {
    return absl::DataLossError(absl::StrFormat("%sCRC-32 mismatch: the directory says %08x, the data has %08x",
                                               Where(i), entry.crc, cursor.crc));
  }
  return absl::OkStatus();
}

absl::Status NpzReader::ReadDeflated(size_t i, uint64_t offset, absl::Span<char> out) {
  if (inflater_ == nullptr || inflater_member_ != i || inflater_->position() > offset) {
    inflater_.reset();
    PS_ASSIGN_OR_RETURN(inflater_, Inflater::Start(file_.get(), &members_[i].entry));
    inflater_member_ = i;
  }
  const absl::Status s = inflater_->Read(offset, out);
  if (!s.ok()) inflater_.reset();
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelFileReader>> OpenNpzReader(const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> file, InputFile::Open(path));
  PS_ASSIGN_OR_RETURN(std::vector<ZipEntry> entries, ReadZipDirectory(*file));
  auto reader = std::make_unique<NpzReader>(std::move(file));
  PS_RETURN_IF_ERROR(reader->Load(std::move(entries)));
  return reader;
}

}  // namespace ps::internal
