#include "common/wire/id_coding.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

constexpr size_t kMaxVarintBytes = 10;  // ceil(64 / 7)

size_t VarintBytes(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

void AppendVarint(uint64_t v, std::string* out) {
  for (; v >= 0x80; v >>= 7) out->push_back(static_cast<char>((v & 0x7f) | 0x80));
  out->push_back(static_cast<char>(v));
}

// Reads the varint at `*at` of `in`, advancing `*at`.
absl::StatusOr<uint64_t> ReadVarint(absl::string_view in, size_t* at) {
  uint64_t v = 0;
  for (size_t i = 0; i < kMaxVarintBytes; ++i) {
    if (*at >= in.size()) return absl::InvalidArgumentError(absl::StrCat("id varint cut short at byte ", *at));
    const auto byte = static_cast<uint8_t>(in[(*at)++]);
    if (i == kMaxVarintBytes - 1 && byte > 1) {
      return absl::InvalidArgumentError(absl::StrCat("id varint ending at byte ", *at, " does not fit 64 bits"));
    }
    v |= uint64_t{byte & 0x7fu} << (7 * i);
    if ((byte & 0x80) == 0) return v;
  }
  return absl::InternalError("unreachable: a tenth byte ends a varint or is refused");
}

// The delta-coded section's bytes for `ids`, or 0 where they do not ascend strictly.
size_t DeltaBytes(absl::Span<const uint64_t> ids) {
  size_t bytes = 1;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0 && ids[i] <= ids[i - 1]) return 0;
    bytes += VarintBytes(i == 0 ? ids[0] : ids[i] - ids[i - 1]);
  }
  return bytes;
}

// Reads up to `count` delta-coded ids from in[1..]; with `to_end`, exactly
// as many as `in` holds (at most `count`). Returns the bytes taken.
absl::StatusOr<size_t> ReadDeltas(absl::string_view in, uint64_t count, bool to_end, std::vector<uint64_t>* out) {
  std::vector<uint64_t> ids;
  ids.reserve(std::min<uint64_t>(count, in.size()));
  size_t at = 1;
  while (to_end ? at < in.size() : ids.size() < count) {
    if (ids.size() == count)
      return absl::InvalidArgumentError(absl::StrCat("id section holds more than ", count, " ids"));
    absl::StatusOr<uint64_t> v = ReadVarint(in, &at);
    if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat("id ", ids.size(), ": ", v.status().message()));
    if (ids.empty()) {
      ids.push_back(*v);
      continue;
    }
    if (*v == 0 || *v > std::numeric_limits<uint64_t>::max() - ids.back()) {
      return absl::InvalidArgumentError(absl::StrCat("id ", ids.size(), ": a step of ", *v, " after ", ids.back(),
                                                     " (ids must ascend strictly within 64 bits)"));
    }
    ids.push_back(ids.back() + *v);
  }
  *out = std::move(ids);
  return at;
}

absl::Status CheckCoding(absl::string_view in) {
  if (in.empty()) return absl::InvalidArgumentError("id section of 0 bytes: no coding byte");
  if (const auto coding = static_cast<uint8_t>(in[0]); coding != kRawIds && coding != kDeltaIds) {
    return absl::InvalidArgumentError(absl::StrCat("id section of unknown coding ", int{coding}));
  }
  return absl::OkStatus();
}

void CopyRaw(absl::string_view in, uint64_t count, std::vector<uint64_t>* out) {
  out->resize(count);
  if (count > 0) std::memcpy(out->data(), in.data() + 1, count * sizeof(uint64_t));
}

}  // namespace

bool AppendDeltaIds(absl::Span<const uint64_t> ids, std::string* out) {
  const size_t delta = DeltaBytes(ids);
  if (delta == 0 || delta >= 1 + ids.size() * sizeof(uint64_t)) return false;
  out->reserve(out->size() + delta);
  out->push_back(static_cast<char>(kDeltaIds));
  for (size_t i = 0; i < ids.size(); ++i) AppendVarint(i == 0 ? ids[0] : ids[i] - ids[i - 1], out);
  return true;
}

void AppendIds(absl::Span<const uint64_t> ids, bool delta, std::string* out) {
  if (delta && AppendDeltaIds(ids, out)) return;
  out->push_back(static_cast<char>(kRawIds));
  out->append(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(uint64_t));
}

absl::StatusOr<size_t> DecodeIds(absl::string_view in, uint64_t count, std::vector<uint64_t>* out) {
  if (absl::Status s = CheckCoding(in); !s.ok()) return s;
  if (static_cast<uint8_t>(in[0]) == kDeltaIds) return ReadDeltas(in, count, /*to_end=*/false, out);
  if ((in.size() - 1) / sizeof(uint64_t) < count) {
    return absl::InvalidArgumentError(
        absl::StrCat("id section of ", in.size(), " bytes cannot hold ", count, " ids of 8 bytes"));
  }
  CopyRaw(in, count, out);
  return 1 + count * sizeof(uint64_t);
}

absl::Status DecodeDeltaIds(absl::string_view in, uint64_t max_ids, std::vector<uint64_t>* out) {
  if (absl::Status s = CheckCoding(in); !s.ok()) return s;
  if (static_cast<uint8_t>(in[0]) != kDeltaIds) {
    return absl::InvalidArgumentError(absl::StrCat("id section of coding ", int{static_cast<uint8_t>(in[0])},
                                                   " where only delta coding (", int{kDeltaIds}, ") is taken"));
  }
  return ReadDeltas(in, max_ids, /*to_end=*/true, out).status();
}

}  // namespace ps
