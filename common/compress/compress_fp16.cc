// fp16: IEEE half precision, rounded to nearest (ties to even); values past
// 65504 become infinity, NaN stays NaN, small ones become subnormal or 0.
// Bit arithmetic with no branch in the loops, so that they vectorise on
// every CPU (a cast to _Float16 does not, with GCC 12).
#include <bit>

#include "common/base/cpu_clones.h"
#include "common/compress/compressors_internal.h"

namespace ps::compress_internal {
namespace {

PS_CPU_CLONES void ToHalf(const float* __restrict in, uint16_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t f = std::bit_cast<uint32_t>(in[i]);
    const uint32_t sign = f & 0x80000000u;
    f ^= sign;
    const uint32_t big = f > (255u << 23) ? 0x7e00u : 0x7c00u;  // NaN, or past the range: infinity
    // Below 2^-14: the float's addition rounds the value into a subnormal half.
    const float sub = std::bit_cast<float>(f) + std::bit_cast<float>(126u << 23);
    const uint32_t small = std::bit_cast<uint32_t>(sub) - (126u << 23);
    const uint32_t normal = (f + ((15u - 127u) << 23) + 0xfffu + ((f >> 13) & 1u)) >> 13;
    const uint32_t o = f >= (143u << 23) ? big : f < (113u << 23) ? small : normal;
    out[i] = static_cast<uint16_t>(o | (sign >> 16));
  }
}

PS_CPU_CLONES void FromHalf(const uint16_t* __restrict in, float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t h = in[i];
    uint32_t o = (h & 0x7fffu) << 13;
    const uint32_t exp = o & (0x7c00u << 13);
    o += (127u - 15u) << 23;
    const uint32_t inf_nan = o + ((128u - 16u) << 23);
    const uint32_t subnormal =
        std::bit_cast<uint32_t>(std::bit_cast<float>(o + (1u << 23)) - std::bit_cast<float>(113u << 23));
    o = exp == (0x7c00u << 13) ? inf_nan : exp == 0 ? subnormal : o;
    out[i] = std::bit_cast<float>(o | ((h & 0x8000u) << 16));
  }
}

}  // namespace

void Fp16Compressor::Encode(absl::Span<const float> values, uint64_t, std::string* out) const {
  Append16(CompressionKind::kFp16, values, ToHalf, out);
}

absl::Status DecodeFp16(absl::string_view payload, absl::Span<float> out) {
  return Decode16("fp16", payload, out, FromHalf);
}

}  // namespace ps::compress_internal
