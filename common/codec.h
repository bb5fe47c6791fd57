#ifndef PS_COMMON_CODEC_H_
#define PS_COMMON_CODEC_H_

// The one place that turns message structs into Cap'n Proto header frames and
// back. Thread-safe (no state).

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "capnp/common.h"
#include "common/messages.h"
#include "kj/array.h"

namespace ps {

// Limits applied to every header we decode: a peer cannot make us walk or
// allocate more than this, whatever it sends.
inline constexpr uint64_t kMaxHeaderWords = 1u << 20;  // 8 MiB of header
inline constexpr int kMaxHeaderNesting = 16;

// Serialises `envelope` to the bytes of a header frame.
kj::Array<capnp::word> EncodeEnvelope(const Envelope& envelope);

// Parses a header frame. Never throws and never CHECK-fails on bad bytes:
// kDataLoss for bytes that are not a well-formed header (wrong length, a
// truncated or malformed message, a traversal limit hit, no body), kInvalidArgument
// for a well-formed header with values out of range (an unknown enum value).
// The protocol version is returned as received; callers compare it.
absl::StatusOr<Envelope> DecodeEnvelope(absl::Span<const uint8_t> bytes);

}  // namespace ps

#endif  // PS_COMMON_CODEC_H_
