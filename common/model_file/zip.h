#ifndef PS_COMMON_MODEL_FILE_ZIP_H_
#define PS_COMMON_MODEL_FILE_ZIP_H_

// Internal to common/model_file: the zip records of an .npz (PKWARE's
// APPNOTE.TXT 6.3), little-endian:
//   per entry: local file header (30 bytes + name + extra), data
//   central directory: one header per entry (46 bytes + name + extra +
//     comment)
//   ZIP64 end of central directory record (56 bytes) and locator (20), only
//     where a count, size or offset overflows its field (or when forced)
//   end of central directory record (22 bytes + comment)
// A field that overflows holds all ones and its value moves to the entry's
// ZIP64 extra field (id 0x0001): uncompressed size, compressed size, local
// header offset, in that order, each present only when its field overflows.
// Thread-safe (no state).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_file/file_io.h"

namespace ps::internal {

inline constexpr uint16_t kZipStored = 0;
inline constexpr uint16_t kZipDeflated = 8;
// A 32-bit size or offset at or over this is written in a ZIP64 field.
inline constexpr uint64_t kZip64Threshold = 0xFFFFFFFF;
// Where the CRC-32 sits in a local header, for writing it once known.
inline constexpr size_t kLocalHeaderCrcOffset = 14;

struct ZipEntry {
  std::string name;  // "fc1.weight.npy"
  uint16_t flags = 0;
  uint16_t method = kZipStored;
  uint32_t crc = 0;
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t header_offset = 0;  // where its local header starts
  uint64_t data_offset = 0;    // where its data starts (ReadZipDirectory sets it)
};

// An entry's local header with its sizes and CRC; with a ZIP64 extra field
// holding both sizes when `zip64` (then both 32-bit fields are all ones).
std::string ZipLocalHeader(const ZipEntry& entry, bool zip64);

// The entry's central directory header; ZIP64 fields for those values that
// overflow, or for all three when `force_zip64`.
std::string ZipCentralHeader(const ZipEntry& entry, bool force_zip64);

// The end records for a directory of `entries` entries at
// [directory_offset, directory_offset + directory_size), to be written right
// after it: the ZIP64 record and locator when a value overflows or
// `force_zip64`, then the classic record.
std::string ZipEndRecords(uint64_t entries, uint64_t directory_offset, uint64_t directory_size, bool force_zip64);

// The entries of the zip archive `file`, in directory order, each with its
// data_offset, checked: the end records, every directory header and local
// header within the file and consistent with each other, data before the
// directory, no two entries overlapping. kDataLoss naming the file, the entry
// and the problem; kInvalidArgument for what this build does not read
// (several disks, encryption, a method other than stored or deflated).
absl::StatusOr<std::vector<ZipEntry>> ReadZipDirectory(const InputFile& file);

}  // namespace ps::internal

#endif  // PS_COMMON_MODEL_FILE_ZIP_H_
