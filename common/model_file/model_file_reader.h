#ifndef PS_COMMON_MODEL_FILE_MODEL_FILE_READER_H_
#define PS_COMMON_MODEL_FILE_MODEL_FILE_READER_H_

// Reads the model files ModelFileWriter writes (common/model_file/
// model_file_writer.h describes both formats) and those numpy and the
// safetensors library write: it lists the arrays and reads byte ranges of
// one array without loading the file.
//
//   .npz          entries stored (numpy.savez) or deflated
//                 (numpy.savez_compressed), ZIP64 or not. A ranged read of a
//                 stored entry reads just that range; one of a deflated entry
//                 inflates from the entry's start, except that a read at or
//                 after where the previous read of that entry ended goes on
//                 from there (so reading an entry front to back in pieces
//                 inflates it once). The entry's CRC-32 is checked when a
//                 read reaches the end of the entry, over the whole entry.
//   .safetensors  dtypes F32, F64, I64, U64; header at most 100 MB.
//
// Open() checks the whole structure before it returns: every length and
// offset against the file's size, the zip records and the .npy headers (or
// the safetensors JSON), dtypes, shapes against sizes, entries that overlap
// or leave gaps. Whatever a corrupt length says, Open() allocates no more
// than a small multiple of the file's size, and ReadAll() the array's size,
// which is within the file for stored data and at most 1032 times the
// compressed size (deflate's limit) for deflated data.
//
// Thread-safe: an .npz reader serialises reads with a mutex (they share
// CRC and inflate state); safetensors reads are independent preads.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/model_file/array_spec.h"

namespace ps {

class ModelFileReader {
 public:
  // Opens `path`, choosing the format by its extension (.npz, .safetensors).
  // Errors: kInvalidArgument naming the extension for any other; kNotFound
  // when there is no file (kInvalidArgument for a directory); kDataLoss
  // naming the file, the entry and the problem for a file that is not what
  // it claims (bad magic, truncated, malformed zip record, .npy header or
  // JSON, a size that disagrees with the shape, overlapping entries);
  // kInvalidArgument for a well-formed file this library does not read
  // (another dtype, fortran_order True, a zip method other than stored or
  // deflated, encryption, a zip entry that is not a .npy); the code of errno
  // for a failing open or read.
  static absl::StatusOr<std::unique_ptr<ModelFileReader>> Open(const std::string& path);

  virtual ~ModelFileReader() = default;
  ModelFileReader(const ModelFileReader&) = delete;
  ModelFileReader& operator=(const ModelFileReader&) = delete;

  // The arrays in file order (an .npz entry's name without ".npy").
  virtual const std::vector<ArrayInfo>& arrays() const = 0;
  // The array called `name`, or null. Valid as long as the reader.
  virtual const ArrayInfo* Find(absl::string_view name) const = 0;
  // Safetensors' "__metadata__"; empty for an .npz.
  virtual const std::map<std::string, std::string>& metadata() const = 0;

  // Fills `out` with bytes [byte_offset, byte_offset + out.size()) of the
  // array `name`. Errors: kNotFound for an unknown name; kOutOfRange when
  // the range passes the array's end; kDataLoss naming the file, the entry
  // and the problem for a CRC mismatch (when the read reaches the entry's
  // end), a truncated file or corrupt deflate data; the code of errno for a
  // failing read.
  virtual absl::Status ReadRange(absl::string_view name, uint64_t byte_offset, absl::Span<char> out) = 0;

  // All of the array's bytes (its CRC checked, for an .npz); errors as
  // ReadRange.
  absl::StatusOr<std::string> ReadAll(absl::string_view name);

 protected:
  ModelFileReader() = default;
};

}  // namespace ps

#endif  // PS_COMMON_MODEL_FILE_MODEL_FILE_READER_H_
