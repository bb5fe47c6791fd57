#ifndef PS_COMMON_MODEL_FILE_FILE_IO_H_
#define PS_COMMON_MODEL_FILE_FILE_IO_H_

// Internal to common/model_file: the file access both formats share. A
// reader's file read at offsets, and a writer's file that appears under its
// name only once complete (the way common/base/durable_file.h writes, but
// streamed).

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/base/file_errors.h"

namespace ps::internal {

using ::ps::ErrnoError;  // common/base/file_errors.h

// `status` with "prefix" in front of its message, same code.
absl::Status Annotate(const absl::Status& status, absl::string_view prefix);

// A file opened for reading at offsets. Thread-safe (pread only; the size is
// read once at Open()).
class InputFile {
 public:
  // kNotFound "no file at PATH"; kInvalidArgument for a path that is not a
  // regular file; the code of errno for another failure.
  static absl::StatusOr<std::unique_ptr<InputFile>> Open(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }

  // Fills `out` from `offset`. kDataLoss "PATH: truncated: ..." (with
  // `what`, e.g. "entry 'x.npy' data") when the range passes the file's
  // size, checked before reading; the code of errno for a failing read.
  absl::Status ReadAt(uint64_t offset, absl::Span<char> out, absl::string_view what) const;

 private:
  InputFile(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}

  const std::string path_;
  const int fd_;
  const uint64_t size_;
};

// PATH.tmp, written front to back through a 1 MiB buffer, with patches to
// bytes already written; Commit() renames it over PATH. Not thread-safe.
class AtomicOutputFile {
 public:
  // Creates the directory if missing and PATH.tmp (truncating a leftover).
  // The code of errno for a failing mkdir or open.
  static absl::StatusOr<std::unique_ptr<AtomicOutputFile>> Create(const std::string& path);
  // Removes PATH.tmp unless Commit() succeeded.
  ~AtomicOutputFile();
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;

  const std::string& path() const { return path_; }
  // Bytes written so far, buffered ones included: where the next Write goes.
  uint64_t position() const { return position_; }

  absl::Status Write(absl::string_view data);
  // Overwrites bytes already written. Requires offset + data.size() <= position().
  absl::Status WriteAt(uint64_t offset, absl::string_view data);
  // Flushes, fsyncs and closes PATH.tmp, renames it over PATH and fsyncs the
  // directory. Call at most once.
  absl::Status Commit();

 private:
  AtomicOutputFile(std::string path, std::string dir, int fd);
  absl::Status Flush();
  absl::Status WriteOut(uint64_t offset, absl::string_view data);

  const std::string path_;
  const std::string tmp_;
  const std::string dir_;
  int fd_;
  bool committed_ = false;
  uint64_t position_ = 0;
  std::string buffer_;  // the bytes [position_ - buffer_.size(), position_)
};

}  // namespace ps::internal

#endif  // PS_COMMON_MODEL_FILE_FILE_IO_H_
