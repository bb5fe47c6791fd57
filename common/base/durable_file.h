#ifndef PS_COMMON_BASE_DURABLE_FILE_H_
#define PS_COMMON_BASE_DURABLE_FILE_H_

// A file that holds one framed, checksummed record and is replaced
// atomically: what a server's checkpoint and the scheduler's state file are
// made of.
//
// Layout, integers little-endian:
//   offset  0  8 bytes  magic (the caller's, names the kind of file)
//   offset  8  u32      format version (the caller's)
//   offset 12  u64      body length in bytes
//   offset 20  u32      CRC-32 of the body (zlib's crc32)
//   offset 24  body; the file ends exactly where the body does.
//
// Free functions with no shared state: thread-safe (for different paths).

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

inline constexpr size_t kFramedHeaderBytes = 8 + 4 + 8 + 4;

// What a reader expects of a framed file.
struct FrameKind {
  absl::string_view magic;  // exactly 8 bytes
  absl::string_view name;   // for errors: "checkpoint"
  uint32_t min_format = 1;  // the format versions this build reads
  uint32_t max_format = 1;
};

struct FramedRecord {
  uint32_t format = 0;
  std::string body;
};

// A framed file's header, checked.
struct FramedHeader {
  uint32_t format = 0;
  uint64_t body_bytes = 0;  // exactly what follows the header in the file
  uint32_t crc = 0;         // of the body
};

// Writes the frame around the concatenated `body` pieces to `path`
// atomically: into PATH.tmp, fsync, rename over PATH, fsync the directory; a
// crash at any point leaves the previous file intact. Creates the directory
// if missing. Stores the file's size in *bytes when bytes is not null. For a
// failing mkdir/open/write/fsync/rename: the code of its errno with a
// message naming the path and strerror (the .tmp is removed). `between`
// runs after each 64 MiB checksummed or written (a server's heartbeats go on
// while a large checkpoint is written).
absl::Status WriteFramedFile(
    const std::string& path, const FrameKind& kind, uint32_t format, std::initializer_list<absl::string_view> body,
    uint64_t* bytes = nullptr, absl::FunctionRef<void()> between = [] {});

// Reads and checks a framed file. kNotFound ("no NAME at PATH") when it does
// not exist; kDataLoss naming the path and the problem for a bad magic, a
// format outside [min_format, max_format], a truncated file, trailing bytes
// or a checksum mismatch; the code of errno for an open or read that fails.
// Never allocates more than the file's real size, whatever the length field
// says.
absl::StatusOr<FramedRecord> ReadFramedFile(const std::string& path, const FrameKind& kind);

// The header of the framed file open as `fd` (`path` names it in errors),
// for readers that take the body in pieces: kDataLoss as ReadFramedFile's
// for a bad magic, a format outside the kind's, a file shorter than the
// header or a body length that disagrees with the file's size; the code of
// errno for a failing stat or read. The checksum is the caller's to check.
absl::StatusOr<FramedHeader> ReadFramedHeader(int fd, const std::string& path, const FrameKind& kind);

}  // namespace ps

#endif  // PS_COMMON_BASE_DURABLE_FILE_H_
