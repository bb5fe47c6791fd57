#ifndef PS_COMMON_MODEL_FILE_STREAMING_WRITER_H_
#define PS_COMMON_MODEL_FILE_STREAMING_WRITER_H_

// Internal to common/model_file: what both formats' writers share, the
// contract of ModelFileWriter (which arrays are declared, how far the caller
// is, when a write failed) with hooks for the format. Not thread-safe.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_file/array_spec.h"
#include "common/model_file/file_io.h"
#include "common/model_file/model_file_writer.h"

namespace ps::internal {

// Each array's size in bytes; kInvalidArgument naming `path` and the array
// for an empty or duplicate name or a size ArrayByteSize refuses.
absl::StatusOr<std::vector<uint64_t>> CheckArraySpecs(const std::string& path, const std::vector<ArraySpec>& arrays);

class StreamingWriter : public ModelFileWriter {
 public:
  absl::Status Append(absl::string_view data) final;
  absl::Status Close() final;
  const std::vector<ArraySpec>& arrays() const final { return arrays_; }
  size_t current() const final { return current_; }
  uint64_t remaining() const final { return current_ < arrays_.size() ? bytes_[current_] - written_ : 0; }

 protected:
  // `bytes`: CheckArraySpecs(arrays).
  StreamingWriter(std::unique_ptr<AtomicOutputFile> file, std::vector<ArraySpec> arrays, std::vector<uint64_t> bytes);

  // Begins the first array (and ends the empty ones at the front); the
  // factory calls it once, right after construction.
  absl::Status Start();

  AtomicOutputFile& file() { return *file_; }
  uint64_t bytes(size_t index) const { return bytes_[index]; }

  // The format's hooks, called in file order: for each array BeginArray,
  // WriteArrayData for each piece (none for an empty array), EndArray; then
  // Finish once before the file is committed. An error makes the writer
  // unusable.
  virtual absl::Status BeginArray(size_t index) = 0;
  virtual absl::Status WriteArrayData(absl::string_view data) = 0;
  virtual absl::Status EndArray(size_t index) = 0;
  virtual absl::Status Finish() = 0;

 private:
  // Ends the arrays that have all their bytes and begins the next.
  absl::Status Advance();
  // Records `status` (an error), drops the .tmp and returns `status`.
  absl::Status Fail(absl::Status status);
  absl::Status CheckUsable() const;

  std::unique_ptr<AtomicOutputFile> file_;  // null after Close() or a failure
  const std::string path_;
  const std::vector<ArraySpec> arrays_;
  const std::vector<uint64_t> bytes_;
  size_t current_ = 0;
  uint64_t written_ = 0;  // bytes of arrays_[current_] written
  bool closed_ = false;
  absl::Status failure_;
};

}  // namespace ps::internal

#endif  // PS_COMMON_MODEL_FILE_STREAMING_WRITER_H_
