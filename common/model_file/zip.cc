#include "common/model_file/zip.h"

#include <algorithm>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/raw_bytes.h"
#include "common/base/status_macros.h"

namespace ps::internal {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50;
constexpr uint32_t kLocatorSig = 0x07064b50;
constexpr size_t kLocalBytes = 30;
constexpr size_t kCentralBytes = 46;
constexpr size_t kEndBytes = 22;
constexpr size_t kEnd64Bytes = 56;
constexpr size_t kLocatorBytes = 20;
constexpr uint64_t kMax32 = 0xFFFFFFFF;
constexpr uint64_t kMax16 = 0xFFFF;
constexpr uint16_t kZip64ExtraId = 1;
constexpr uint16_t kVersion = 20;    // stored and deflated entries
constexpr uint16_t kVersion64 = 45;  // ZIP64 records
constexpr uint16_t kMadeByUnix = 3 << 8;
constexpr uint16_t kFlagEncrypted = 1 << 0;
constexpr uint16_t kFlagStrongEncryption = 1 << 6;
constexpr uint16_t kFlagUtf8 = 1 << 11;
constexpr uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;  // 1980-01-01 at 00:00: reproducible files
// Deflate cannot expand data more than 1032:1 (zlib's "zlib tech" notes); a
// claim beyond that is a corrupt directory, not a big array.
constexpr uint64_t kMaxDeflateRatio = 1032;

uint16_t NameFlags(const std::string& name) {
  const bool ascii = std::all_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  return ascii ? 0 : kFlagUtf8;
}

uint32_t Field32(uint64_t v, bool zip64) { return zip64 ? static_cast<uint32_t>(kMax32) : static_cast<uint32_t>(v); }

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

absl::Status EntryCorrupt(const std::string& path, const std::string& name, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": entry '", absl::CHexEscape(name), "': ", what));
}

struct EndInfo {
  uint64_t entries = 0;
  uint64_t directory_offset = 0;
  uint64_t directory_size = 0;
  uint64_t directory_limit = 0;  // where the end records start
};

// Where the classic end record starts: the last signature whose comment
// ends exactly at the end of the file.
absl::StatusOr<uint64_t> FindEndRecord(const InputFile& file, std::string* tail) {
  const uint64_t tail_bytes = std::min<uint64_t>(file.size(), kEndBytes + kMax16);
  tail->assign(tail_bytes, '\0');
  PS_RETURN_IF_ERROR(file.ReadAt(file.size() - tail_bytes, absl::MakeSpan(*tail), "the end record"));
  for (size_t p = tail_bytes - kEndBytes + 1; p-- > 0;) {
    absl::string_view at = absl::string_view(*tail).substr(p);
    if (TakeRaw<uint32_t>(&at) != kEndSig) continue;
    at.remove_prefix(16);
    if (p + kEndBytes + TakeRaw<uint16_t>(&at) == tail_bytes) return file.size() - tail_bytes + p;
  }
  return Corrupt(file.path(), "no end of central directory record: the file is truncated or not a zip");
}

// Replaces the classic values with those of the ZIP64 record.
absl::Status ReadEnd64(const InputFile& file, uint64_t locator_at, EndInfo* end, uint32_t* disks) {
  char locator[kLocatorBytes];
  PS_RETURN_IF_ERROR(file.ReadAt(locator_at, absl::MakeSpan(locator), "the ZIP64 locator"));
  absl::string_view in(locator, sizeof(locator));
  in.remove_prefix(8);  // signature, disk
  const uint64_t record_at = TakeRaw<uint64_t>(&in);
  if (record_at > locator_at || locator_at - record_at < kEnd64Bytes) {
    return Corrupt(file.path(), absl::StrCat("the ZIP64 end record offset ", record_at, " is not before its locator"));
  }
  char record[kEnd64Bytes];
  PS_RETURN_IF_ERROR(file.ReadAt(record_at, absl::MakeSpan(record), "the ZIP64 end record"));
  in = absl::string_view(record, sizeof(record));
  if (TakeRaw<uint32_t>(&in) != kEnd64Sig) return Corrupt(file.path(), "bad ZIP64 end record signature");
  in.remove_prefix(8 + 2 + 2);  // record size, versions
  *disks = TakeRaw<uint32_t>(&in) | TakeRaw<uint32_t>(&in);
  const uint64_t on_disk = TakeRaw<uint64_t>(&in);
  end->entries = TakeRaw<uint64_t>(&in);
  if (on_disk != end->entries) *disks = 1;
  end->directory_size = TakeRaw<uint64_t>(&in);
  end->directory_offset = TakeRaw<uint64_t>(&in);
  end->directory_limit = record_at;
  return absl::OkStatus();
}

absl::StatusOr<EndInfo> ReadEndRecords(const InputFile& file) {
  std::string tail;
  PS_ASSIGN_OR_RETURN(const uint64_t end_at, FindEndRecord(file, &tail));
  absl::string_view in = absl::string_view(tail).substr(tail.size() - (file.size() - end_at) + 4);
  uint32_t disks = TakeRaw<uint16_t>(&in) | TakeRaw<uint16_t>(&in);
  const uint16_t on_disk = TakeRaw<uint16_t>(&in);
  EndInfo end;
  end.entries = TakeRaw<uint16_t>(&in);
  if (on_disk != end.entries) disks = 1;
  end.directory_size = TakeRaw<uint32_t>(&in);
  end.directory_offset = TakeRaw<uint32_t>(&in);
  end.directory_limit = end_at;
  char sig[4] = {};
  if (end_at >= kLocatorBytes) {
    PS_RETURN_IF_ERROR(file.ReadAt(end_at - kLocatorBytes, absl::MakeSpan(sig), "the ZIP64 locator"));
    absl::string_view s(sig, 4);
    if (TakeRaw<uint32_t>(&s) == kLocatorSig) PS_RETURN_IF_ERROR(ReadEnd64(file, end_at - kLocatorBytes, &end, &disks));
  }
  if (disks != 0) return absl::InvalidArgumentError(absl::StrCat(file.path(), ": a zip archive on several disks"));
  if (end.directory_offset > end.directory_limit || end.directory_size != end.directory_limit - end.directory_offset) {
    return Corrupt(file.path(), absl::StrCat("the central directory [", end.directory_offset, ", +", end.directory_size,
                                             ") does not end where the end records start (", end.directory_limit, ")"));
  }
  if (end.entries > end.directory_size / kCentralBytes) {
    return Corrupt(file.path(), absl::StrCat(end.entries, " entries cannot fit in a central directory of ",
                                             end.directory_size, " bytes"));
  }
  return end;
}

// Takes the values whose 32-bit fields are all ones from the ZIP64 extra
// field, in the order APPNOTE 4.5.3 gives.
absl::Status ApplyZip64Extra(absl::string_view extra, const std::string& path, ZipEntry* e) {
  uint64_t* fields[] = {&e->uncompressed_size, &e->compressed_size, &e->header_offset};
  bool wanted[3];
  bool any = false;
  for (int i = 0; i < 3; ++i) any |= wanted[i] = *fields[i] == kMax32;
  if (!any) return absl::OkStatus();
  while (extra.size() >= 4) {
    const uint16_t id = TakeRaw<uint16_t>(&extra);
    const uint16_t len = TakeRaw<uint16_t>(&extra);
    if (len > extra.size()) return EntryCorrupt(path, e->name, "an extra field runs past its header");
    absl::string_view block = extra.substr(0, len);
    extra.remove_prefix(len);
    if (id != kZip64ExtraId) continue;
    for (int i = 0; i < 3; ++i) {
      if (!wanted[i]) continue;
      if (block.size() < 8) return EntryCorrupt(path, e->name, "the ZIP64 extra field is too short");
      *fields[i] = TakeRaw<uint64_t>(&block);
    }
    return absl::OkStatus();
  }
  return EntryCorrupt(path, e->name, "a size or offset is all ones but there is no ZIP64 extra field");
}

absl::Status CheckEntry(const std::string& path, const ZipEntry& e, bool other_disk) {
  if (other_disk) return absl::InvalidArgumentError(absl::StrCat(path, ": a zip archive on several disks"));
  if (e.flags & (kFlagEncrypted | kFlagStrongEncryption)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": entry '", absl::CHexEscape(e.name), "' is encrypted"));
  }
  if (e.method != kZipStored && e.method != kZipDeflated) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": entry '", absl::CHexEscape(e.name),
                                                   "': compression method ", e.method,
                                                   " (this build reads stored (0) and deflated (8) entries)"));
  }
  if (e.method == kZipStored && e.compressed_size != e.uncompressed_size) {
    return EntryCorrupt(
        path, e.name,
        absl::StrCat("stored, but its sizes differ (", e.compressed_size, " and ", e.uncompressed_size, ")"));
  }
  if (e.method == kZipDeflated && e.uncompressed_size / kMaxDeflateRatio > e.compressed_size) {
    return EntryCorrupt(
        path, e.name,
        absl::StrCat(e.uncompressed_size, " bytes cannot inflate from ", e.compressed_size, " compressed bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ZipEntry> ParseCentralHeader(absl::string_view* dir, const std::string& path, uint64_t index) {
  if (dir->size() < kCentralBytes || TakeRaw<uint32_t>(dir) != kCentralSig) {
    return Corrupt(path, absl::StrCat("central directory header ", index, " is truncated or has a bad signature"));
  }
  ZipEntry e;
  dir->remove_prefix(4);  // versions
  e.flags = TakeRaw<uint16_t>(dir);
  e.method = TakeRaw<uint16_t>(dir);
  dir->remove_prefix(4);  // time, date
  e.crc = TakeRaw<uint32_t>(dir);
  e.compressed_size = TakeRaw<uint32_t>(dir);
  e.uncompressed_size = TakeRaw<uint32_t>(dir);
  const uint16_t name_len = TakeRaw<uint16_t>(dir);
  const uint16_t extra_len = TakeRaw<uint16_t>(dir);
  const uint16_t comment_len = TakeRaw<uint16_t>(dir);
  const bool other_disk = TakeRaw<uint16_t>(dir) != 0;
  dir->remove_prefix(6);  // attributes
  e.header_offset = TakeRaw<uint32_t>(dir);
  if (dir->size() < size_t{name_len} + extra_len + comment_len) {
    return Corrupt(path, absl::StrCat("central directory header ", index, " runs past the directory"));
  }
  e.name = std::string(dir->substr(0, name_len));
  PS_RETURN_IF_ERROR(ApplyZip64Extra(dir->substr(name_len, extra_len), path, &e));
  dir->remove_prefix(size_t{name_len} + extra_len + comment_len);
  PS_RETURN_IF_ERROR(CheckEntry(path, e, other_disk));
  return e;
}

// Sets e->data_offset from the local header, which must agree with the
// directory and leave the data before `limit` (the directory's start).
absl::Status ReadLocalHeader(const InputFile& file, uint64_t limit, ZipEntry* e) {
  if (e->header_offset > limit || limit - e->header_offset < kLocalBytes) {
    return EntryCorrupt(file.path(), e->name,
                        absl::StrCat("its local header at ", e->header_offset, " is not before the directory"));
  }
  char raw[kLocalBytes];
  PS_RETURN_IF_ERROR(file.ReadAt(e->header_offset, absl::MakeSpan(raw), "a local header"));
  absl::string_view in(raw, sizeof(raw));
  if (TakeRaw<uint32_t>(&in) != kLocalSig) return EntryCorrupt(file.path(), e->name, "bad local header signature");
  in.remove_prefix(4);  // version, flags
  if (TakeRaw<uint16_t>(&in) != e->method) {
    return EntryCorrupt(file.path(), e->name, "the local header and the directory disagree on the method");
  }
  in.remove_prefix(16);  // time, date, crc, sizes: the directory's are the ones that count
  const uint16_t name_len = TakeRaw<uint16_t>(&in);
  const uint16_t extra_len = TakeRaw<uint16_t>(&in);
  e->data_offset = e->header_offset + kLocalBytes + name_len + extra_len;
  if (e->data_offset > limit || e->compressed_size > limit - e->data_offset) {
    return EntryCorrupt(file.path(), e->name,
                        absl::StrCat("its data [", e->data_offset, ", +", e->compressed_size,
                                     ") runs into the central directory at ", limit));
  }
  std::string name(name_len, '\0');
  PS_RETURN_IF_ERROR(file.ReadAt(e->header_offset + kLocalBytes, absl::MakeSpan(name), "a local header"));
  if (name != e->name) {
    return EntryCorrupt(file.path(), e->name, absl::StrCat("its local header names '", absl::CHexEscape(name), "'"));
  }
  return absl::OkStatus();
}

absl::Status CheckNoOverlap(const std::string& path, const std::vector<ZipEntry>& entries) {
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return entries[a].header_offset < entries[b].header_offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const ZipEntry& prev = entries[order[i - 1]];
    const ZipEntry& next = entries[order[i]];
    if (prev.data_offset + prev.compressed_size > next.header_offset) {
      return Corrupt(path, absl::StrCat("entries '", absl::CHexEscape(prev.name), "' and '",
                                        absl::CHexEscape(next.name), "' overlap"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMagic(const InputFile& file) {
  char magic[4] = {};
  if (file.size() < kEndBytes) {
    return Corrupt(file.path(), absl::StrCat("truncated or not a zip file: ", file.size(),
                                             " bytes, fewer than an end record's ", kEndBytes));
  }
  PS_RETURN_IF_ERROR(file.ReadAt(0, absl::MakeSpan(magic), "the magic"));
  absl::string_view in(magic, 4);
  const uint32_t sig = TakeRaw<uint32_t>(&in);
  if (sig != kLocalSig && sig != kEndSig) {
    return Corrupt(file.path(), absl::StrCat("bad magic: not a zip file (it starts '",
                                             absl::CHexEscape(absl::string_view(magic, 4)), "', not 'PK\\003\\004')"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ZipLocalHeader(const ZipEntry& entry, bool zip64) {
  std::string out;
  PutRaw<uint32_t>(&out, kLocalSig);
  PutRaw<uint16_t>(&out, zip64 ? kVersion64 : kVersion);
  PutRaw<uint16_t>(&out, NameFlags(entry.name));
  PutRaw<uint16_t>(&out, entry.method);
  PutRaw<uint16_t>(&out, 0);
  PutRaw<uint16_t>(&out, kDosDate);
  PutRaw<uint32_t>(&out, entry.crc);
  PutRaw<uint32_t>(&out, Field32(entry.compressed_size, zip64));
  PutRaw<uint32_t>(&out, Field32(entry.uncompressed_size, zip64));
  PutRaw<uint16_t>(&out, static_cast<uint16_t>(entry.name.size()));
  PutRaw<uint16_t>(&out, zip64 ? 20 : 0);
  out += entry.name;
  if (zip64) {
    PutRaw<uint16_t>(&out, kZip64ExtraId);
    PutRaw<uint16_t>(&out, 16);
    PutRaw<uint64_t>(&out, entry.uncompressed_size);
    PutRaw<uint64_t>(&out, entry.compressed_size);
  }
  return out;
}

std::string ZipCentralHeader(const ZipEntry& entry, bool force_zip64) {
  const bool big_u = force_zip64 || entry.uncompressed_size >= kMax32;
  const bool big_c = force_zip64 || entry.compressed_size >= kMax32;
  const bool big_offset = force_zip64 || entry.header_offset >= kMax32;
  std::string extra;
  if (big_u || big_c || big_offset) {
    PutRaw<uint16_t>(&extra, kZip64ExtraId);
    PutRaw<uint16_t>(&extra, static_cast<uint16_t>(8 * (big_u + big_c + big_offset)));
    if (big_u) PutRaw<uint64_t>(&extra, entry.uncompressed_size);
    if (big_c) PutRaw<uint64_t>(&extra, entry.compressed_size);
    if (big_offset) PutRaw<uint64_t>(&extra, entry.header_offset);
  }
  const uint16_t version = extra.empty() ? kVersion : kVersion64;
  std::string out;
  PutRaw<uint32_t>(&out, kCentralSig);
  PutRaw<uint16_t>(&out, kMadeByUnix | version);
  PutRaw<uint16_t>(&out, version);
  PutRaw<uint16_t>(&out, NameFlags(entry.name));
  PutRaw<uint16_t>(&out, entry.method);
  PutRaw<uint16_t>(&out, 0);
  PutRaw<uint16_t>(&out, kDosDate);
  PutRaw<uint32_t>(&out, entry.crc);
  PutRaw<uint32_t>(&out, Field32(entry.compressed_size, big_c));
  PutRaw<uint32_t>(&out, Field32(entry.uncompressed_size, big_u));
  PutRaw<uint16_t>(&out, static_cast<uint16_t>(entry.name.size()));
  PutRaw<uint16_t>(&out, static_cast<uint16_t>(extra.size()));
  PutRaw<uint16_t>(&out, 0);               // comment
  PutRaw<uint16_t>(&out, 0);               // disk
  PutRaw<uint16_t>(&out, 0);               // internal attributes
  PutRaw<uint32_t>(&out, 0100644u << 16);  // external: a regular file, rw-r--r--
  PutRaw<uint32_t>(&out, Field32(entry.header_offset, big_offset));
  out += entry.name;
  out += extra;
  return out;
}

std::string ZipEndRecords(uint64_t entries, uint64_t directory_offset, uint64_t directory_size, bool force_zip64) {
  const bool zip64 = force_zip64 || entries >= kMax16 || directory_size >= kMax32 || directory_offset >= kMax32;
  std::string out;
  if (zip64) {
    PutRaw<uint32_t>(&out, kEnd64Sig);
    PutRaw<uint64_t>(&out, kEnd64Bytes - 12);
    PutRaw<uint16_t>(&out, kMadeByUnix | kVersion64);
    PutRaw<uint16_t>(&out, kVersion64);
    PutRaw<uint32_t>(&out, 0);
    PutRaw<uint32_t>(&out, 0);
    PutRaw<uint64_t>(&out, entries);
    PutRaw<uint64_t>(&out, entries);
    PutRaw<uint64_t>(&out, directory_size);
    PutRaw<uint64_t>(&out, directory_offset);
    PutRaw<uint32_t>(&out, kLocatorSig);
    PutRaw<uint32_t>(&out, 0);
    PutRaw<uint64_t>(&out, directory_offset + directory_size);
    PutRaw<uint32_t>(&out, 1);
  }
  const auto count = static_cast<uint16_t>(zip64 ? kMax16 : entries);
  PutRaw<uint32_t>(&out, kEndSig);
  PutRaw<uint16_t>(&out, 0);
  PutRaw<uint16_t>(&out, 0);
  PutRaw<uint16_t>(&out, count);
  PutRaw<uint16_t>(&out, count);
  PutRaw<uint32_t>(&out, Field32(directory_size, zip64));
  PutRaw<uint32_t>(&out, Field32(directory_offset, zip64));
  PutRaw<uint16_t>(&out, 0);
  return out;
}

absl::StatusOr<std::vector<ZipEntry>> ReadZipDirectory(const InputFile& file) {
  PS_RETURN_IF_ERROR(CheckMagic(file));
  PS_ASSIGN_OR_RETURN(const EndInfo end, ReadEndRecords(file));
  std::string directory(end.directory_size, '\0');  // within the file, checked above
  PS_RETURN_IF_ERROR(file.ReadAt(end.directory_offset, absl::MakeSpan(directory), "the central directory"));
  absl::string_view in(directory);
  std::vector<ZipEntry> entries;
  entries.reserve(end.entries);
  for (uint64_t i = 0; i < end.entries; ++i) {
    PS_ASSIGN_OR_RETURN(ZipEntry e, ParseCentralHeader(&in, file.path(), i));
    PS_RETURN_IF_ERROR(ReadLocalHeader(file, end.directory_offset, &e));
    entries.push_back(std::move(e));
  }
  if (!in.empty()) {
    return Corrupt(file.path(),
                   absl::StrCat(in.size(), " bytes left in the central directory after its ", end.entries, " entries"));
  }
  PS_RETURN_IF_ERROR(CheckNoOverlap(file.path(), entries));
  return entries;
}

}  // namespace ps::internal
