#ifndef PS_COMMON_MODEL_FILE_MODEL_FILE_WRITER_H_
#define PS_COMMON_MODEL_FILE_MODEL_FILE_WRITER_H_

// Writes the model files users exchange with numpy and PyTorch, streaming:
// the caller declares every array up front, then hands over each array's
// bytes in declaration order, in pieces of any size. Memory stays bounded by
// a 1 MiB buffer plus one directory entry per array, whatever the arrays'
// sizes, so a 10^7 x 64 float table exports without being held.
//
// The format follows the path's extension:
//   .npz          numpy's zip of .npy files, as numpy.savez writes it and
//                 numpy.load reads it: one stored (uncompressed) entry
//                 NAME.npy per array, each a .npy version 1.0 file (2.0 when
//                 the header needs it) whose data starts at a multiple of 64
//                 bytes into the entry. ZIP64 extra fields and end records are
//                 written where an entry, an offset, the directory or the
//                 entry count passes the 32-bit (16-bit for the count) fields.
//   .safetensors  Hugging Face's format: u64 little-endian header length N,
//                 N bytes of JSON (padded with spaces to a multiple of 8)
//                 naming each tensor's dtype, shape and data_offsets plus
//                 "__metadata__", then the tensors' bytes back to back in
//                 declaration order.
//
// The file is written to PATH.tmp and renamed over PATH by Close() after an
// fsync (then the directory is fsync'd), so PATH never holds half a file: a
// crash, an error or a writer destroyed before Close() leaves PATH as it was
// (the .tmp is removed, except after a crash).
//
// Not thread-safe: one thread at a time.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_file/array_spec.h"

namespace ps {

class ModelFileWriter {
 public:
  // Starts PATH.tmp (creating the directory if missing) for `arrays`, in
  // that order; `metadata` becomes safetensors' "__metadata__" (string
  // values only).
  // Errors: kInvalidArgument naming the path and the problem for an
  // extension other than .npz or .safetensors, an empty or duplicate name, a
  // name too long for a zip entry (65531 bytes), "__metadata__" as a
  // safetensors tensor name, a shape whose size does not fit in 63 bits or
  // with more than kMaxRank dimensions, or metadata for an .npz (which has
  // nowhere to keep it); the code of errno for a failing mkdir or open.
  static absl::StatusOr<std::unique_ptr<ModelFileWriter>> Create(
      const std::string& path, const std::vector<ArraySpec>& arrays,
      const std::map<std::string, std::string>& metadata = {});

  // Removes PATH.tmp unless Close() succeeded; PATH is left as it was.
  virtual ~ModelFileWriter() = default;
  ModelFileWriter(const ModelFileWriter&) = delete;
  ModelFileWriter& operator=(const ModelFileWriter&) = delete;

  // Appends `data` to the array being written: arrays()[current()], which
  // still needs remaining() bytes. Once an array has all its bytes the writer
  // moves on to the next one that has any (empty arrays need no Append).
  // A piece may split an element but never crosses into the next array.
  // Errors: kInvalidArgument when data.size() > remaining() (nothing is
  // written; the writer stays usable); kFailedPrecondition after Close() or
  // after an earlier write failed; the code of errno for a failing write
  // (the writer is then unusable and the .tmp removed).
  virtual absl::Status Append(absl::string_view data) = 0;

  // Writes what ends the file (an .npz's central directory and end
  // records), fsyncs it, renames it over PATH and fsyncs the directory.
  // Errors: kFailedPrecondition naming the first array short of bytes and
  // how many it has (PATH is not touched; the writer stays usable), or after
  // Close() or a failed write; the code of errno for a failing write, fsync
  // or rename (the .tmp is removed).
  virtual absl::Status Close() = 0;

  // The declared arrays, in file order.
  virtual const std::vector<ArraySpec>& arrays() const = 0;
  // The index of the array Append() feeds; arrays().size() once every array
  // has all its bytes.
  virtual size_t current() const = 0;
  // The bytes arrays()[current()] still needs; 0 once all are complete.
  virtual uint64_t remaining() const = 0;

 protected:
  ModelFileWriter() = default;
};

}  // namespace ps

#endif  // PS_COMMON_MODEL_FILE_MODEL_FILE_WRITER_H_
