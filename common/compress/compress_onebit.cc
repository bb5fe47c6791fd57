// onebit: the sign of each value (a bit; set: negative) and one scale, the
// mean magnitude, so that the frame keeps the tensor's L1 norm. Signs are
// read into a byte each (a loop that vectorises), then packed eight to a
// byte; a frame decodes through a table of the 256 bytes' eight values.
#include <array>
#include <bit>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/cpu_clones.h"
#include "common/compress/compressors_internal.h"

namespace ps::compress_internal {
namespace {

PS_CPU_CLONES void Signs(const float* __restrict in, uint8_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(std::bit_cast<uint32_t>(in[i]) >> 31);
}

float MeanMagnitude(absl::Span<const float> values) {
  double sum = 0;
  for (float x : values) sum += std::fabs(x);
  return values.empty() ? 0.0f : static_cast<float>(sum / static_cast<double>(values.size()));
}

}  // namespace

void OneBitCompressor::Encode(absl::Span<const float> values, uint64_t, std::string* out) const {
  const uint64_t n = values.size();
  AppendHeader(Header{CompressionKind::kOneBit, 0, n}, out);
  const float scale = MeanMagnitude(values);
  AppendRaw(&scale, 1, out);
  std::vector<uint8_t> signs(n + 8, 0), bits((n + 7) / 8);
  Signs(values.data(), signs.data(), n);
  for (uint64_t b = 0; b < bits.size(); ++b) {
    const uint8_t* s = signs.data() + 8 * b;
    bits[b] =
        static_cast<uint8_t>(s[0] | s[1] << 1 | s[2] << 2 | s[3] << 3 | s[4] << 4 | s[5] << 5 | s[6] << 6 | s[7] << 7);
  }
  AppendRaw(bits.data(), bits.size(), out);
}

absl::Status DecodeOneBit(absl::string_view payload, absl::Span<float> out) {
  const uint64_t n = out.size();
  if (payload.size() != 4 + (n + 7) / 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("onebit frame of ", n, " values: ", payload.size(), " bytes of payload, not 4 + ", (n + 7) / 8));
  }
  float scale;
  std::memcpy(&scale, payload.data(), sizeof(scale));
  if (!std::isfinite(scale) || scale < 0) {
    return absl::InvalidArgumentError(absl::StrCat("onebit frame: scale ", scale, " is not a finite value >= 0"));
  }
  std::array<std::array<float, 8>, 256> table;
  for (int byte = 0; byte < 256; ++byte) {
    for (int j = 0; j < 8; ++j) table[byte][j] = (byte >> j) & 1 ? -scale : scale;
  }
  const auto* bits = reinterpret_cast<const uint8_t*>(payload.data() + 4);
  const uint64_t whole = n / 8;
  for (uint64_t b = 0; b < whole; ++b) std::memcpy(out.data() + 8 * b, table[bits[b]].data(), 8 * sizeof(float));
  for (uint64_t i = 8 * whole; i < n; ++i) out[i] = table[bits[whole]][i % 8];
  return absl::OkStatus();
}

}  // namespace ps::compress_internal
