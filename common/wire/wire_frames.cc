#include "common/wire/wire_frames.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/wire/id_coding.h"

namespace ps {
namespace {

void FreeString(void* /*data*/, void* hint) { delete static_cast<std::string*>(hint); }

}  // namespace

zmq::message_t OwnedFrame(std::string bytes) {
  auto* owned = new std::string(std::move(bytes));
  return zmq::message_t(owned->data(), owned->size(), &FreeString, owned);
}

const Compressor* PullCompressor(CompressionKind kind) {
  static const Compressor* const fp16 = Compressor::Create({.kind = CompressionKind::kFp16}).release();
  static const Compressor* const bf16 = Compressor::Create({.kind = CompressionKind::kBf16}).release();
  if (kind == CompressionKind::kFp16) return fp16;
  if (kind == CompressionKind::kBf16) return bf16;
  return nullptr;
}

std::string RowsFrame(absl::Span<const uint64_t> ids, bool delta_ids, absl::Span<const float> values,
                      const Compressor& compressor) {
  std::string out;
  AppendIds(ids, delta_ids, &out);
  compressor.Encode(values, 0, &out);
  return out;
}

absl::Status DecodePayload(const SliceData& meta, absl::string_view frame, std::vector<float>* out) {
  const auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("compressed frame of slice ", meta.key, ": ", why));
  };
  std::vector<uint64_t> ids;  // a dense slice (no rows) has no id section
  absl::StatusOr<size_t> id_bytes = meta.rows == 0 ? 0 : DecodeIds(frame, meta.rows, &ids);
  if (!id_bytes.ok()) return refuse(absl::StrCat("the ids of its ", meta.rows, " rows: ", id_bytes.status().message()));
  const absl::string_view values = frame.substr(*id_bytes);
  absl::StatusOr<std::pair<CompressionKind, uint64_t>> header = FrameHeader(values);
  if (!header.ok()) return refuse(header.status().message());
  if (header->second != meta.length) {
    return refuse(absl::StrCat("declares ", header->second, " values; the header says ", meta.length));
  }
  const size_t id_floats = ids.size() * sizeof(uint64_t) / sizeof(float);
  out->assign(id_floats + meta.length, 0.0f);
  if (!ids.empty()) std::memcpy(out->data(), ids.data(), ids.size() * sizeof(uint64_t));
  if (absl::Status s = DecodeFrame(values, absl::MakeSpan(*out).subspan(id_floats)); !s.ok()) {
    return refuse(s.message());
  }
  return absl::OkStatus();
}

}  // namespace ps
