#ifndef PS_COMMON_MODEL_FILE_ARRAY_SPEC_H_
#define PS_COMMON_MODEL_FILE_ARRAY_SPEC_H_

// What a model file holds: named arrays of one element type and a shape,
// stored row-major (C order) and little-endian. Shared by ModelFileWriter
// and ModelFileReader (common/model_file/model_file_writer.h, _reader.h).
// Thread-safe (no state).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

// The element types the formats exchange. npy descr / safetensors dtype:
// kFloat32 '<f4' / F32, kFloat64 '<f8' / F64, kInt64 '<i8' / I64,
// kUInt64 '<u8' / U64.
enum class DType : uint8_t { kFloat32, kFloat64, kInt64, kUInt64 };

// Bytes per element: 4 or 8.
size_t DTypeSize(DType dtype);
// "float32", "float64", "int64", "uint64" (numpy's names), for messages.
absl::string_view DTypeName(DType dtype);

// One array as the writer's caller declares it.
struct ArraySpec {
  std::string name;  // "fc1.weight"; non-empty, unique within a file
  DType dtype = DType::kFloat32;
  // Row-major dimensions. {} is a 0-d scalar (one element); a 0 anywhere
  // makes an empty array (no bytes).
  std::vector<uint64_t> shape;
  bool operator==(const ArraySpec&) const = default;
};

// One array as a reader lists it.
struct ArrayInfo : ArraySpec {
  uint64_t bytes = 0;  // DTypeSize(dtype) times the product of shape
  bool operator==(const ArrayInfo&) const = default;
};

// The most dimensions an array may have, in either direction (numpy allows 64).
inline constexpr size_t kMaxRank = 64;

// DTypeSize(dtype) times the product of `shape`; nullopt when that does not
// fit in 63 bits (no file can hold it) or the rank passes kMaxRank.
std::optional<uint64_t> ArrayByteSize(DType dtype, absl::Span<const uint64_t> shape);

// "(3, 4)", "(5,)" or "()": the shape as numpy prints it, for messages.
std::string ShapeString(absl::Span<const uint64_t> shape);

}  // namespace ps

#endif  // PS_COMMON_MODEL_FILE_ARRAY_SPEC_H_
