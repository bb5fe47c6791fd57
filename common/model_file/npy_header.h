#ifndef PS_COMMON_MODEL_FILE_NPY_HEADER_H_
#define PS_COMMON_MODEL_FILE_NPY_HEADER_H_

// Internal to common/model_file: the header of a .npy file (numpy's
// format.py, "NEP 1"):
//   "\x93NUMPY", u8 major, u8 minor, header length (u16 for version 1.0, u32
//   for 2.0 and 3.0), then that many bytes of a Python dict literal
//     {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
//   padded with spaces and ended by '\n' so that the data that follows
//   starts at a multiple of 64 bytes. Little-endian throughout.
// Thread-safe (no state).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/model_file/array_spec.h"

namespace ps::internal {

// Enough leading bytes to know the header's length, in any version.
inline constexpr size_t kNpyPrefixBytes = 12;
// The longest header read (numpy itself refuses more than 10000 bytes by default).
inline constexpr uint64_t kMaxNpyHeaderBytes = 1 << 20;

// The whole header for a C-order array: version 1.0, or 2.0 when the dict
// does not fit a u16 length; its size is a multiple of 64.
std::string EncodeNpyHeader(DType dtype, absl::Span<const uint64_t> shape);

// The header's total size (magic to '\n', where the data starts), from its
// first min(kNpyPrefixBytes, entry size) bytes. kDataLoss for a bad magic, a
// prefix too short or a length over kMaxNpyHeaderBytes; kInvalidArgument for
// a version other than 1.0, 2.0, 3.0.
absl::StatusOr<uint64_t> NpyHeaderSize(absl::string_view prefix);

struct NpyHeader {
  DType dtype = DType::kFloat32;
  std::vector<uint64_t> shape;
};

// Parses the whole header (NpyHeaderSize bytes). kDataLoss naming the
// problem for a dict that does not parse, lacks or repeats a key or has
// another; kInvalidArgument for a descr other than '<f4', '<f8', '<i8',
// '<u8', for fortran_order True or for more than kMaxRank dimensions.
absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view header);

}  // namespace ps::internal

#endif  // PS_COMMON_MODEL_FILE_NPY_HEADER_H_
