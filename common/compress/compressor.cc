#include "common/compress/compressor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/status_macros.h"
#include "common/compress/compressors_internal.h"

namespace ps {
namespace {

using compress_internal::Header;

// Reads a T at `at` of `bytes` (the caller checked the size).
template <typename T>
T Load(absl::string_view bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

absl::StatusOr<CompressionKind> KindNamed(absl::string_view name) {
  if (name == "none") return CompressionKind::kNone;
  if (name == "fp16") return CompressionKind::kFp16;
  if (name == "bf16") return CompressionKind::kBf16;
  if (name == "topk") return CompressionKind::kTopK;
  if (name == "randomk") return CompressionKind::kRandomK;
  if (name == "onebit") return CompressionKind::kOneBit;
  return absl::InvalidArgumentError("not one of none, fp16, bf16, topk:R, randomk:R, onebit");
}

const char* KindName(CompressionKind kind) {
  switch (kind) {
    case CompressionKind::kNone: return "none";
    case CompressionKind::kFp16: return "fp16";
    case CompressionKind::kBf16: return "bf16";
    case CompressionKind::kTopK: return "topk";
    case CompressionKind::kRandomK: return "randomk";
    case CompressionKind::kOneBit: return "onebit";
  }
  return "?";
}

// One option after the push's kind (",pull=...", ",warmup=N", ",ids=...") into `spec`.
absl::Status ParseOption(absl::string_view option, CompressionSpec& spec) {
  const bool sparse = spec.kind == CompressionKind::kTopK || spec.kind == CompressionKind::kRandomK;
  if (absl::ConsumePrefix(&option, "warmup=")) {
    if (!sparse) return absl::InvalidArgumentError("warmup= follows topk or randomk only");
    if (!absl::SimpleAtoi(option, &spec.warmup)) return absl::InvalidArgumentError("warmup= takes a count of steps");
  } else if (absl::ConsumePrefix(&option, "ids=")) {
    if (option != "raw" && option != "delta") return absl::InvalidArgumentError("takes ids=delta or ids=raw");
    spec.raw_ids = option == "raw";
  } else if (absl::ConsumePrefix(&option, "pull=")) {
    if (option == "delta") {
      if (DefaultPull(spec.kind) == spec.kind) {
        return absl::InvalidArgumentError("pull=delta follows topk, randomk or onebit only");
      }
      spec.pull = spec.kind;
      return absl::OkStatus();
    }
    absl::StatusOr<CompressionKind> kind = KindNamed(option);
    if (!kind.ok() || DefaultPull(*kind) != *kind) {
      return absl::InvalidArgumentError("takes pull=none, pull=fp16, pull=bf16 or pull=delta");
    }
    spec.pull = *kind;
  } else {
    return absl::InvalidArgumentError(
        "after ',' come pull=none|fp16|bf16|delta, warmup=N and ids=delta|raw, once each");
  }
  return absl::OkStatus();
}

}  // namespace

CompressionKind DefaultPull(CompressionKind kind) {
  if (kind == CompressionKind::kNone || kind == CompressionKind::kFp16) return kind;
  return CompressionKind::kBf16;
}

uint64_t CompressionSeed(int worker, int64_t step, uint32_t key) {
  uint64_t x = (static_cast<uint64_t>(static_cast<uint32_t>(worker)) << 32 | key) ^
               (static_cast<uint64_t>(step) * 0x9e3779b97f4a7c15ULL);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;  // splitmix64's finaliser
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

absl::StatusOr<CompressionSpec> CompressionSpec::Parse(absl::string_view text) {
  const auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("compression '", text, "': ", why));
  };
  absl::string_view push = text.substr(0, text.find(','));
  const absl::string_view name = push.substr(0, push.find(':'));
  CompressionSpec spec;
  absl::StatusOr<CompressionKind> kind = KindNamed(name);
  if (!kind.ok()) return refuse(kind.status().message());
  spec.kind = *kind;
  const bool sparse = spec.kind == CompressionKind::kTopK || spec.kind == CompressionKind::kRandomK;
  const bool has_ratio = push.size() > name.size();
  if (sparse != has_ratio) return refuse(sparse ? "give the ratio of values kept, e.g. topk:0.01" : "takes no ratio");
  if (sparse &&
      (!absl::SimpleAtod(push.substr(name.size() + 1), &spec.ratio) || !(spec.ratio > 0.0) || spec.ratio > 1.0)) {
    return refuse("the ratio must be in (0, 1]");
  }
  spec.pull = DefaultPull(spec.kind);
  if (push.size() == text.size()) return spec;
  std::vector<absl::string_view> given;  // the options' names
  for (absl::string_view option : absl::StrSplit(text.substr(push.size() + 1), ',')) {
    const absl::string_view name = option.substr(0, option.find('='));
    if (std::find(given.begin(), given.end(), name) != given.end()) return refuse(absl::StrCat(name, "= given twice"));
    given.push_back(name);
    if (absl::Status s = ParseOption(option, spec); !s.ok()) return refuse(s.message());
  }
  return spec;
}

int CompressionSpec::StageAt(int64_t step) const {
  if (step < 0 || static_cast<uint64_t>(step) >= warmup) return kWarmupStages;
  return static_cast<int>(step * kWarmupStages / warmup);
}

CompressionSpec CompressionSpec::AtStage(int stage) const {
  CompressionSpec at = *this;
  if (stage < kWarmupStages) at.ratio = std::pow(ratio, static_cast<double>(stage + 1) / (kWarmupStages + 1));
  at.warmup = 0;
  return at;
}

std::string CompressionSpec::ToString() const {
  std::string out = KindName(kind);
  if (kind == CompressionKind::kTopK || kind == CompressionKind::kRandomK) absl::StrAppend(&out, ":", ratio);
  if (delta_pull()) {
    absl::StrAppend(&out, ",pull=delta");
  } else if (pull != DefaultPull(kind)) {
    absl::StrAppend(&out, ",pull=", KindName(pull));
  }
  if (warmup != 0) absl::StrAppend(&out, ",warmup=", warmup);
  if (raw_ids) absl::StrAppend(&out, ",ids=raw");
  return out;
}

std::unique_ptr<Compressor> Compressor::Create(const CompressionSpec& spec) {
  switch (spec.kind) {
    case CompressionKind::kNone: return std::make_unique<compress_internal::NoneCompressor>();
    case CompressionKind::kFp16: return std::make_unique<compress_internal::Fp16Compressor>();
    case CompressionKind::kBf16: return std::make_unique<compress_internal::Bf16Compressor>();
    case CompressionKind::kTopK: return std::make_unique<compress_internal::TopKCompressor>(spec.ratio);
    case CompressionKind::kRandomK: return std::make_unique<compress_internal::RandomKCompressor>(spec.ratio);
    case CompressionKind::kOneBit: return std::make_unique<compress_internal::OneBitCompressor>();
  }
  return nullptr;
}

absl::StatusOr<std::pair<CompressionKind, uint64_t>> FrameHeader(absl::string_view frame) {
  if (frame.size() < kCompressionHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("compressed frame of ", frame.size(), " bytes: shorter than its ",
                                                   kCompressionHeaderBytes, "-byte header"));
  }
  const uint8_t kind = Load<uint8_t>(frame, 0), index_bytes = Load<uint8_t>(frame, 1);
  if (kind > static_cast<uint8_t>(CompressionKind::kOneBit)) {
    return absl::InvalidArgumentError(absl::StrCat("compressed frame of unknown kind ", kind));
  }
  const bool sparse =
      kind == static_cast<uint8_t>(CompressionKind::kTopK) || kind == static_cast<uint8_t>(CompressionKind::kRandomK);
  const uint64_t n = Load<uint64_t>(frame, 8);
  const uint8_t want = !sparse ? 0 : n < (uint64_t{1} << 32) ? 4 : 8;
  if (index_bytes != want || Load<uint16_t>(frame, 2) != 0 || Load<uint32_t>(frame, 4) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("compressed frame header of kind ", kind, " and ", n,
                                                   " values: index width ", index_bytes, " (want ", want,
                                                   ") or reserved bytes not 0"));
  }
  return std::make_pair(static_cast<CompressionKind>(kind), n);
}

absl::Status DecodeFrame(absl::string_view frame, absl::Span<float> out) {
  auto header = FrameHeader(frame);
  if (!header.ok()) return header.status();
  const auto [kind, n] = *header;
  if (n != out.size()) {
    return absl::InvalidArgumentError(absl::StrCat("compressed frame of ", n, " values for a tensor of ", out.size()));
  }
  const absl::string_view payload = frame.substr(kCompressionHeaderBytes);
  switch (kind) {
    case CompressionKind::kNone: return compress_internal::DecodeNone(payload, out);
    case CompressionKind::kFp16: return compress_internal::DecodeFp16(payload, out);
    case CompressionKind::kBf16: return compress_internal::DecodeBf16(payload, out);
    case CompressionKind::kTopK:
    case CompressionKind::kRandomK:
      return compress_internal::DecodeSparse(Header{kind, Load<uint8_t>(frame, 1), n}, payload, out);
    case CompressionKind::kOneBit: return compress_internal::DecodeOneBit(payload, out);
  }
  return absl::InternalError("unreachable");
}

absl::Status ErrorFeedback::Encode(const Compressor& compressor, absl::Span<const float> values, uint64_t seed,
                                   std::string* out) {
  if (values.size() != residual_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("error feedback for ", residual_.size(), " values given ", values.size()));
  }
  for (size_t i = 0; i < values.size(); ++i) sum_[i] = values[i] + residual_[i];
  const size_t start = out->size();
  compressor.Encode(sum_, seed, out);
  // What the receiver will decode, subtracted: the new residual.
  if (absl::Status s = DecodeFrame(absl::string_view(*out).substr(start), absl::MakeSpan(residual_)); !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < values.size(); ++i) residual_[i] = sum_[i] - residual_[i];
  return absl::OkStatus();
}

namespace compress_internal {

void AppendHeader(const Header& header, std::string* out) {
  char bytes[kCompressionHeaderBytes] = {};
  bytes[0] = static_cast<char>(header.kind);
  bytes[1] = static_cast<char>(header.index_bytes);
  std::memcpy(bytes + 8, &header.n, sizeof(header.n));
  out->append(bytes, sizeof(bytes));
}

uint64_t KeptOf(double ratio, uint64_t n) {
  if (n == 0) return 0;
  const auto k = static_cast<uint64_t>(std::ceil(ratio * static_cast<double>(n)));
  return std::min<uint64_t>(n, std::max<uint64_t>(k, 1));
}

uint64_t SparseFrameBytes(uint64_t n, uint64_t k) {
  return kCompressionHeaderBytes + 8 + k * ((n < (uint64_t{1} << 32) ? 4 : 8) + 4);
}

void AppendSparse(CompressionKind kind, uint64_t n, const std::vector<uint64_t>& indices,
                  const std::vector<float>& values, std::string* out) {
  const uint8_t index_bytes = n < (uint64_t{1} << 32) ? 4 : 8;
  AppendHeader(Header{kind, index_bytes, n}, out);
  const uint64_t k = indices.size();
  AppendRaw(&k, 1, out);
  if (index_bytes == 4) {
    std::vector<uint32_t> narrow(indices.begin(), indices.end());
    AppendRaw(narrow.data(), narrow.size(), out);
  } else {
    AppendRaw(indices.data(), indices.size(), out);
  }
  AppendRaw(values.data(), values.size(), out);
}

void Append16(CompressionKind kind, absl::Span<const float> values, To16 to16, std::string* out) {
  AppendHeader(Header{kind, 0, values.size()}, out);
  std::vector<uint16_t> half(values.size());
  to16(values.data(), half.data(), values.size());
  AppendRaw(half.data(), half.size(), out);
}

absl::Status Decode16(absl::string_view what, absl::string_view payload, absl::Span<float> out, From16 from16) {
  PS_RETURN_IF_ERROR(CheckPayload(what, payload, out.size(), 2));
  std::vector<uint16_t> half(out.size());
  std::memcpy(half.data(), payload.data(), payload.size());
  from16(half.data(), out.data(), out.size());
  return absl::OkStatus();
}

absl::Status CheckPayload(absl::string_view what, absl::string_view payload, uint64_t n, uint64_t bytes) {
  if (n > std::numeric_limits<uint64_t>::max() / bytes || payload.size() != n * bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " frame of ", n, " values: ", payload.size(), " bytes of payload, not ", n, " x ", bytes));
  }
  return absl::OkStatus();
}

absl::Status DecodeSparse(const Header& header, absl::string_view payload, absl::Span<float> out) {
  if (payload.size() < 8) return absl::InvalidArgumentError("sparse frame without its value count");
  const uint64_t k = Load<uint64_t>(payload, 0);
  const absl::string_view rest = payload.substr(8);
  if (k > header.n) {
    return absl::InvalidArgumentError(absl::StrCat("sparse frame of ", k, " values for a tensor of ", header.n));
  }
  PS_RETURN_IF_ERROR(CheckPayload("sparse", rest, k, header.index_bytes + 4));
  uint64_t last = 0;
  for (uint64_t i = 0; i < k; ++i) {  // every index checked before anything is written
    const uint64_t index = header.index_bytes == 4 ? Load<uint32_t>(rest, 4 * i) : Load<uint64_t>(rest, 8 * i);
    if (index >= header.n || (i > 0 && index <= last)) {
      return absl::InvalidArgumentError(absl::StrCat("sparse frame: index ", index, " (the ", i + 1, "th of ", k,
                                                     ") out of range [0, ", header.n, ") or not ascending"));
    }
    last = index;
  }
  std::fill(out.begin(), out.end(), 0.0f);
  const size_t values_at = k * header.index_bytes;
  for (uint64_t i = 0; i < k; ++i) {
    const uint64_t index = header.index_bytes == 4 ? Load<uint32_t>(rest, 4 * i) : Load<uint64_t>(rest, 8 * i);
    out[index] = Load<float>(rest, values_at + 4 * i);
  }
  return absl::OkStatus();
}

}  // namespace compress_internal
}  // namespace ps
