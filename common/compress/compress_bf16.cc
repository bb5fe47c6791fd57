// bf16: the float's top 16 bits, rounded to nearest (ties to even); a NaN
// stays a NaN (its quiet bit set, so that rounding cannot make it infinity).
#include <bit>

#include "common/base/cpu_clones.h"
#include "common/compress/compressors_internal.h"

namespace ps::compress_internal {
namespace {

PS_CPU_CLONES void ToBf16(const float* __restrict in, uint16_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = std::bit_cast<uint32_t>(in[i]);
    const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    const bool nan = (b & 0x7fffffffu) > 0x7f800000u;
    out[i] = static_cast<uint16_t>(nan ? (b >> 16) | 0x40u : rounded);
  }
}

PS_CPU_CLONES void FromBf16(const uint16_t* __restrict in, float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(static_cast<uint32_t>(in[i]) << 16);
}

}  // namespace

void Bf16Compressor::Encode(absl::Span<const float> values, uint64_t, std::string* out) const {
  Append16(CompressionKind::kBf16, values, ToBf16, out);
}

absl::Status DecodeBf16(absl::string_view payload, absl::Span<float> out) {
  return Decode16("bf16", payload, out, FromBf16);
}

}  // namespace ps::compress_internal
