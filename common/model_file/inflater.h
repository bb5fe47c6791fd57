#ifndef PS_COMMON_MODEL_FILE_INFLATER_H_
#define PS_COMMON_MODEL_FILE_INFLATER_H_

// Internal to common/model_file: one deflated zip entry inflated front to
// back (numpy.savez_compressed writes these), for ranged reads that may only
// move forward. Not thread-safe.

#include <zlib.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model_file/file_io.h"
#include "common/model_file/zip.h"

namespace ps::internal {

class Inflater {
 public:
  // Borrows `file` and `entry` (a deflated entry of ReadZipDirectory's) for
  // its whole life. kInternal if zlib cannot start.
  static absl::StatusOr<std::unique_ptr<Inflater>> Start(const InputFile* file, const ZipEntry* entry);
  ~Inflater();
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Uncompressed bytes produced so far: where the next Read may start.
  uint64_t position() const { return position_; }

  // Inflates and drops the bytes up to `offset`, then fills `out` with
  // [offset, offset + out.size()). Requires position() <= offset and
  // offset + out.size() <= the entry's uncompressed size. When the read
  // reaches the entry's end it also checks that the deflate stream ends
  // there, uses all the compressed bytes, and that the CRC-32 matches.
  // kDataLoss naming the file, the entry and the problem (corrupt or
  // truncated deflate data, a size or CRC mismatch); after an error the
  // inflater is unusable. The code of errno for a failing read.
  absl::Status Read(uint64_t offset, absl::Span<char> out);

 private:
  Inflater(const InputFile* file, const ZipEntry* entry) : file_(file), entry_(entry) {}
  absl::Status Produce(char* out, uint64_t n);
  absl::Status Step(char* out, size_t n, size_t* produced);
  absl::Status Refill();
  absl::Status CheckEnd();
  absl::Status Error(absl::string_view what) const;

  const InputFile* const file_;
  const ZipEntry* const entry_;
  z_stream stream_{};
  bool started_ = false;
  bool ended_ = false;     // inflate() said Z_STREAM_END
  std::string input_;      // compressed bytes read, not yet all inflated
  uint64_t consumed_ = 0;  // compressed bytes read from the file
  uint64_t position_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace ps::internal

#endif  // PS_COMMON_MODEL_FILE_INFLATER_H_
