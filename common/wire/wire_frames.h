#ifndef PS_COMMON_WIRE_WIRE_FRAMES_H_
#define PS_COMMON_WIRE_WIRE_FRAMES_H_

// Compressed payload frames on the wire: how a push or a pull
// reply carries common/compress/compressor.h's frames in place of float32 values.
// A SliceData with `compressed` set has, in its payload frame, a dense
// slice's whole compressed frame, or a table shard's `rows` ids (an id
// section, common/wire/id_coding.h: delta coded where that is shorter) followed
// by the compressed frame of its rows x dim values.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/compress/compressor.h"
#include "common/wire/messages.h"
#include "zmq.hpp"

namespace ps {

inline absl::string_view AsView(const zmq::message_t& m) {
  return absl::string_view(static_cast<const char*>(m.data()), m.size());
}

// A message owning `bytes` (moved in, not copied).
zmq::message_t OwnedFrame(std::string bytes);

// The compressor of 16-bit pulls: fp16's or bf16's, shared (a Compressor
// is immutable); null for none (float32).
const Compressor* PullCompressor(CompressionKind kind);

// A table shard's push frame: the id section of `ids` (with `delta_ids`,
// delta coded where they ascend and that is shorter; raw otherwise), then
// the frame of `values` (ids x dim).
std::string RowsFrame(absl::Span<const uint64_t> ids, bool delta_ids, absl::Span<const float> values,
                      const Compressor& compressor);

// The floats the uncompressed payload of `meta` (compressed) would hold:
// a dense slice's `length` values; a table shard's `rows` ids (two floats'
// room each) then its `length` values. kInvalidArgument naming the slice
// and the problem for a frame that does not match `meta` or its own bytes.
absl::Status DecodePayload(const SliceData& meta, absl::string_view frame, std::vector<float>* out);

}  // namespace ps

#endif  // PS_COMMON_WIRE_WIRE_FRAMES_H_
