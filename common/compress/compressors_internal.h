#ifndef PS_COMMON_COMPRESS_COMPRESSORS_INTERNAL_H_
#define PS_COMMON_COMPRESS_COMPRESSORS_INTERNAL_H_

// The compressors behind Compressor::Create and the decoders behind
// DecodeFrame (common/compress/compressor.h says what each does and the frame's
// layout). Internal to common/: other modules use compressor.h. Each kind is
// in its own compress_*.cc, which common/CMakeLists.txt compiles with -O3 so
// that its loops vectorise (scripts/check_vectorized.sh).

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/compress/compressor.h"

namespace ps::compress_internal {

// The header's fields, as written.
struct Header {
  CompressionKind kind = CompressionKind::kNone;
  uint8_t index_bytes = 0;
  uint64_t n = 0;
};

void AppendHeader(const Header& header, std::string* out);

// Appends `count` objects of trivially copyable T.
template <typename T>
void AppendRaw(const T* p, size_t count, std::string* out) {
  out->append(reinterpret_cast<const char*>(p), count * sizeof(T));
}

// Values kept of n at `ratio`: ceil(ratio n), at least 1 of a non-empty tensor.
uint64_t KeptOf(double ratio, uint64_t n);

// A sparse frame (topk, randomk): `indices` ascending, `values` theirs.
void AppendSparse(CompressionKind kind, uint64_t n, const std::vector<uint64_t>& indices,
                  const std::vector<float>& values, std::string* out);
uint64_t SparseFrameBytes(uint64_t n, uint64_t k);

// Decoders of each kind's payload (after the header) into `out`, whose
// size is the header's n; kInvalidArgument naming the problem.
absl::Status DecodeNone(absl::string_view payload, absl::Span<float> out);
absl::Status DecodeFp16(absl::string_view payload, absl::Span<float> out);
absl::Status DecodeBf16(absl::string_view payload, absl::Span<float> out);
absl::Status DecodeSparse(const Header& header, absl::string_view payload, absl::Span<float> out);
absl::Status DecodeOneBit(absl::string_view payload, absl::Span<float> out);

// 16-bit frames (fp16, bf16): `to16` converts n floats, `from16` n halves back.
using To16 = void (*)(const float* __restrict, uint16_t* __restrict, size_t);
using From16 = void (*)(const uint16_t* __restrict, float* __restrict, size_t);
void Append16(CompressionKind kind, absl::Span<const float> values, To16 to16, std::string* out);
absl::Status Decode16(absl::string_view what, absl::string_view payload, absl::Span<float> out, From16 from16);

// The payload of `n` values of `bytes` each must be exactly `payload`'s size.
absl::Status CheckPayload(absl::string_view what, absl::string_view payload, uint64_t n, uint64_t bytes);

class NoneCompressor final : public Compressor {
 public:
  CompressionKind kind() const override { return CompressionKind::kNone; }
  void Encode(absl::Span<const float> values, uint64_t seed, std::string* out) const override;
  uint64_t FrameBytes(uint64_t n) const override { return kCompressionHeaderBytes + 4 * n; }
};

class Fp16Compressor final : public Compressor {
 public:
  CompressionKind kind() const override { return CompressionKind::kFp16; }
  void Encode(absl::Span<const float> values, uint64_t seed, std::string* out) const override;
  uint64_t FrameBytes(uint64_t n) const override { return kCompressionHeaderBytes + 2 * n; }
};

class Bf16Compressor final : public Compressor {
 public:
  CompressionKind kind() const override { return CompressionKind::kBf16; }
  void Encode(absl::Span<const float> values, uint64_t seed, std::string* out) const override;
  uint64_t FrameBytes(uint64_t n) const override { return kCompressionHeaderBytes + 2 * n; }
};

class TopKCompressor final : public Compressor {
 public:
  explicit TopKCompressor(double ratio) : ratio_(ratio) {}
  CompressionKind kind() const override { return CompressionKind::kTopK; }
  void Encode(absl::Span<const float> values, uint64_t seed, std::string* out) const override;
  uint64_t FrameBytes(uint64_t n) const override { return SparseFrameBytes(n, KeptOf(ratio_, n)); }

 private:
  const double ratio_;
};

class RandomKCompressor final : public Compressor {
 public:
  explicit RandomKCompressor(double ratio) : ratio_(ratio) {}
  CompressionKind kind() const override { return CompressionKind::kRandomK; }
  void Encode(absl::Span<const float> values, uint64_t seed, std::string* out) const override;
  uint64_t FrameBytes(uint64_t n) const override { return SparseFrameBytes(n, KeptOf(ratio_, n)); }

 private:
  const double ratio_;
};

class OneBitCompressor final : public Compressor {
 public:
  CompressionKind kind() const override { return CompressionKind::kOneBit; }
  void Encode(absl::Span<const float> values, uint64_t seed, std::string* out) const override;
  uint64_t FrameBytes(uint64_t n) const override { return kCompressionHeaderBytes + 4 + (n + 7) / 8; }
};

}  // namespace ps::compress_internal

#endif  // PS_COMMON_COMPRESS_COMPRESSORS_INTERNAL_H_
