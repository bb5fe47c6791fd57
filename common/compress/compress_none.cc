// none: the floats as they are, bit for bit.
#include "common/compress/compressors_internal.h"

namespace ps::compress_internal {

void NoneCompressor::Encode(absl::Span<const float> values, uint64_t, std::string* out) const {
  AppendHeader(Header{CompressionKind::kNone, 0, values.size()}, out);
  AppendRaw(values.data(), values.size(), out);
}

absl::Status DecodeNone(absl::string_view payload, absl::Span<float> out) {
  if (absl::Status s = CheckPayload("none", payload, out.size(), 4); !s.ok()) return s;
  std::memcpy(out.data(), payload.data(), payload.size());
  return absl::OkStatus();
}

}  // namespace ps::compress_internal
