#ifndef PS_COMMON_COMPRESS_COMPRESSOR_H_
#define PS_COMMON_COMPRESS_COMPRESSOR_H_

// Gradient and parameter compression: a Compressor turns a dense
// float tensor into a self-describing frame and back. One implementation
// per file (common/compress_*.cc), as the optimizers are:
//
//   none        the floats as they are (bit-identical)
//   fp16, bf16  each value rounded to 16 bits (nearest, ties to even);
//               fp16 keeps 11 significant bits up to 65504 (larger values
//               become infinity), bf16 keeps 8 bits and float's range
//   topk:R      the ceil(R n) values of largest magnitude, with their indices
//   randomk:R   ceil(R n) values, as they are, at indices drawn at random
//               (seeded per frame: the same seed draws the same indices)
//   onebit      the sign of each value, times one scale: the mean magnitude
//
// The lossy ones are meant with error feedback (ErrorFeedback below): what a
// frame dropped is added to the next tensor, so that over steps nothing is
// lost but the last residual.
//
// Frame (little-endian): a 16-byte header {u8 kind, u8 index bytes (4 or 8
// for sparse frames, 0 otherwise), u16 0, u32 0, u64 n (the tensor's
// elements)}, then per kind: none n floats; fp16/bf16 n 16-bit values;
// topk/randomk u64 k, then k indices ascending (u32 when n < 2^32, else
// u64), then k floats; onebit a float scale, then ceil(n / 8) bytes of sign
// bits (bit i of byte i / 8 set: value i is negative). Decode refuses a
// frame whose kind, declared sizes, indices or scale do not match its bytes
// (kInvalidArgument naming the problem) and writes nothing then.
//
// Thread-safe: a Compressor is immutable.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

enum class CompressionKind : uint8_t { kNone = 0, kFp16 = 1, kBf16 = 2, kTopK = 3, kRandomK = 4, kOneBit = 5 };

inline constexpr size_t kCompressionHeaderBytes = 16;

// What `--compression` names: a kind and, for topk and randomk, the ratio
// of values kept (0 < ratio <= 1), for pushes; and how pulls travel: none,
// fp16 or bf16 (the server keeps float32 parameters, the master copy of
// mixed-precision training, and sends them rounded to 16 bits). Unless
// ",pull=K" says otherwise, pulls are fp16 for fp16 pushes, bf16 for bf16,
// topk, randomk and onebit, and float32 for none. ",pull=delta" (topk,
// randomk and onebit): pulls are the change since the worker's last pull,
// compressed as the pushes are (server/store/delta_pull.h); `pull` is then the
// push's kind.
// ",warmup=N" (topk and randomk): deep gradient compression's warm-up (Lin
// et al., ICLR 2018): the first N steps keep more values, the ratio falling
// geometrically from R^(1/(S+1)) towards R over S = kWarmupStages equal
// stages (stage i of steps [i N / S, (i + 1) N / S) keeps
// R^((i + 1) / (S + 1))), then R, so that the early steps, when gradients
// change fastest, do not wait on error feedback. Delta pulls follow the
// same schedule by the slice's version: the step in sync, but one version
// per worker's push in async and ssp, where they end their warm-up about
// W times sooner than the pushes.
// The 16-bit kind pulls take by default for pushes of `kind`.
CompressionKind DefaultPull(CompressionKind kind);

inline constexpr int kWarmupStages = 4;

struct CompressionSpec {
  CompressionKind kind = CompressionKind::kNone;
  double ratio = 1.0;
  CompressionKind pull = CompressionKind::kNone;
  uint32_t warmup = 0;  // steps of the ratio's warm-up (topk and randomk)
  // A table's ids in pushes and pulls as they are (",ids=raw"), not sorted
  // and delta coded where that is shorter (common/wire/id_coding.h).
  bool raw_ids = false;

  // "none", "fp16", "bf16", "topk:R", "randomk:R", "onebit", each
  // optionally followed by ",pull=none|fp16|bf16" (or ",pull=delta" after
  // topk, randomk and onebit), after topk and randomk ",warmup=N", and
  // ",ids=delta|raw", in any order; kInvalidArgument naming what is wrong
  // otherwise.
  static absl::StatusOr<CompressionSpec> Parse(absl::string_view text);
  // What Parse reads back as this (the pull said only where not the default).
  std::string ToString() const;
  bool compresses() const { return kind != CompressionKind::kNone || pull != CompressionKind::kNone; }
  // Pulls are compressed deltas (",pull=delta").
  bool delta_pull() const { return pull == kind && DefaultPull(kind) != kind; }
  // The warm-up's stage at `step` (0 first): kWarmupStages once it is over.
  int StageAt(int64_t step) const;
  // This spec as it compresses in warm-up stage `stage` (its ratio, no
  // warm-up); as it is, warm-up aside, from kWarmupStages on.
  CompressionSpec AtStage(int stage) const;
  // AtStage(StageAt(step)).
  CompressionSpec AtStep(int64_t step) const { return AtStage(StageAt(step)); }
  bool operator==(const CompressionSpec&) const = default;
};

// The seed of randomk's draw for one slice of one worker's push at one step:
// the worker and a check of its sums (worker/exact_sum) draw alike.
uint64_t CompressionSeed(int worker, int64_t step, uint32_t key);

class Compressor {
 public:
  virtual ~Compressor() = default;
  static std::unique_ptr<Compressor> Create(const CompressionSpec& spec);

  virtual CompressionKind kind() const = 0;
  // Appends the frame of `values` to *out. `seed`: randomk's draw (the same
  // seed, the same indices); the others ignore it.
  virtual void Encode(absl::Span<const float> values, uint64_t seed, std::string* out) const = 0;
  // Bytes of the frame of n values.
  virtual uint64_t FrameBytes(uint64_t n) const = 0;
};

// The frame's values into `out` (its size must be the frame's n): values a
// sparse frame does not carry become 0. Any kind, whoever encoded it.
absl::Status DecodeFrame(absl::string_view frame, absl::Span<float> out);
// The kind and element count a frame declares (its header alone checked).
absl::StatusOr<std::pair<CompressionKind, uint64_t>> FrameHeader(absl::string_view frame);

// Error feedback on the sender (1-bit SGD, Seide et al. 2014; top-k with
// memory, Stich et al. 2018): each tensor compressed is the new one plus
// what the last frame left out, and what this frame leaves out is kept.
class ErrorFeedback {
 public:
  explicit ErrorFeedback(size_t n) : residual_(n, 0.0f), sum_(n) {}
  // Appends the frame of values + residual to *out and keeps the new
  // residual; kInvalidArgument when the sizes differ.
  absl::Status Encode(const Compressor& compressor, absl::Span<const float> values, uint64_t seed, std::string* out);
  absl::Span<const float> residual() const { return residual_; }

 private:
  std::vector<float> residual_, sum_;
};

}  // namespace ps

#endif  // PS_COMMON_COMPRESS_COMPRESSOR_H_
