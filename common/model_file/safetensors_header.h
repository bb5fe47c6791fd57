#ifndef PS_COMMON_MODEL_FILE_SAFETENSORS_HEADER_H_
#define PS_COMMON_MODEL_FILE_SAFETENSORS_HEADER_H_

// Internal to common/model_file: the header of a .safetensors file
// (https://huggingface.co/docs/safetensors):
//   u64 little-endian N, then N bytes of JSON
//     {"__metadata__": {"k": "v"},
//      "fc1.weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}, ...}
//   padded with spaces so that the data starts at a multiple of 8; offsets
//   count from the data's start, and the tensors cover the data exactly, no
//   gaps, no overlaps.
// Thread-safe (no state).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_file/array_spec.h"

namespace ps::internal {

// The most header bytes read, as the safetensors library allows.
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;
inline constexpr absl::string_view kSafetensorsMetadataKey = "__metadata__";

// kInvalidArgument naming `path` for what a header cannot hold: the name
// "__metadata__", names and metadata that are not valid UTF-8 (JSON text
// must be), or sizes whose sum passes 2^64.
absl::Status CheckSafetensorsNames(const std::string& path, const std::vector<ArraySpec>& arrays,
                                   const std::vector<uint64_t>& bytes,
                                   const std::map<std::string, std::string>& metadata);

// N and the padded JSON for `arrays` (of `bytes` each) laid out back to back
// in that order, "__metadata__" first when not empty.
std::string EncodeSafetensorsHeader(const std::vector<ArraySpec>& arrays, const std::vector<uint64_t>& bytes,
                                    const std::map<std::string, std::string>& metadata);

struct SafetensorsLayout {
  std::vector<ArrayInfo> arrays;  // in data order
  std::vector<uint64_t> begins;   // each one's first byte, from the data's start
  std::map<std::string, std::string> metadata;
};

// Parses the JSON (the N bytes) for a data section of `data_bytes`.
// kDataLoss for JSON that does not parse, repeated keys, a tensor lacking a
// field or with another, metadata values that are not strings, offsets
// whose span disagrees with dtype and shape, gaps, overlaps or bytes not
// covered; kInvalidArgument for a dtype other than F32, F64, I64, U64 or
// more than kMaxRank dimensions. Messages name the tensor, not the file.
absl::StatusOr<SafetensorsLayout> ParseSafetensorsHeader(absl::string_view json, uint64_t data_bytes);

}  // namespace ps::internal

#endif  // PS_COMMON_MODEL_FILE_SAFETENSORS_HEADER_H_
