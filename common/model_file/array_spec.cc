#include "common/model_file/array_spec.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps {

size_t DTypeSize(DType dtype) { return dtype == DType::kFloat32 ? 4 : 8; }

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt64: return "int64";
    case DType::kUInt64: return "uint64";
  }
  return "unknown";
}

std::optional<uint64_t> ArrayByteSize(DType dtype, absl::Span<const uint64_t> shape) {
  if (shape.size() > kMaxRank) return std::nullopt;
  // Any 0 dimension makes the array empty, whatever the others say.
  for (const uint64_t d : shape) {
    if (d == 0) return 0;
  }
  constexpr uint64_t kLimit = std::numeric_limits<int64_t>::max();
  uint64_t bytes = DTypeSize(dtype);
  for (const uint64_t d : shape) {
    if (d > kLimit / bytes) return std::nullopt;
    bytes *= d;
  }
  return bytes;
}

std::string ShapeString(absl::Span<const uint64_t> shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

}  // namespace ps
