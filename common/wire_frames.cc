#include "common/wire_frames.h"

#include <cstring>

#include "absl/strings/str_cat.h"

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

std::string RowsFrame(absl::Span<const uint64_t> ids, absl::Span<const float> values, const Compressor& compressor) {
  std::string out(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(uint64_t));
  compressor.Encode(values, 0, &out);
  return out;
}

absl::Status DecodePayload(const SliceData& meta, absl::string_view frame, std::vector<float>* out) {
  const auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("compressed frame of slice ", meta.key, ": ", why));
  };
  const uint64_t id_bytes = uint64_t{meta.rows} * sizeof(uint64_t);
  if (frame.size() < id_bytes) {
    return refuse(absl::StrCat(frame.size(), " bytes cannot hold the ids of its ", meta.rows, " rows"));
  }
  const absl::string_view values = frame.substr(id_bytes);
  absl::StatusOr<std::pair<CompressionKind, uint64_t>> header = FrameHeader(values);
  if (!header.ok()) return refuse(header.status().message());
  if (header->second != meta.length) {
    return refuse(absl::StrCat("declares ", header->second, " values; the header says ", meta.length));
  }
  out->assign(id_bytes / sizeof(float) + meta.length, 0.0f);
  std::memcpy(out->data(), frame.data(), id_bytes);
  if (absl::Status s = DecodeFrame(values, absl::MakeSpan(*out).subspan(id_bytes / sizeof(float))); !s.ok()) {
    return refuse(s.message());
  }
  return absl::OkStatus();
}

}  // namespace ps
