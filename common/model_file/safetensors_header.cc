#include "common/model_file/safetensors_header.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/json.h"
#include "common/base/raw_bytes.h"
#include "common/base/status_macros.h"
#include "common/model_file/json_cursor.h"

namespace ps::internal {
namespace {

constexpr size_t kAlignment = 8;

absl::string_view DTypeCode(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "F32";
    case DType::kFloat64: return "F64";
    case DType::kInt64: return "I64";
    case DType::kUInt64: return "U64";
  }
  return "";
}

std::optional<DType> DTypeOfCode(absl::string_view code) {
  for (const DType d : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kUInt64}) {
    if (code == DTypeCode(d)) return d;
  }
  return std::nullopt;
}

bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    uint32_t min = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (s.size() - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

struct Tensor {
  ArrayInfo info;
  uint64_t begin = 0;
  uint64_t end = 0;
};

std::string Quoted(absl::string_view name) { return absl::StrCat("'", absl::CHexEscape(name), "'"); }

// The fields of one tensor's object, as they are written. (A string and a
// flag rather than std::optional<std::string>: GCC 12 warns about that one.)
struct RawTensor {
  bool has_dtype = false;
  std::string dtype;
  std::optional<std::vector<uint64_t>> shape;
  std::optional<std::vector<uint64_t>> offsets;
};

// An array of at most `max` integers; more is an error with `code`.
absl::Status ParseInts(JsonCursor& c, size_t max, absl::StatusCode code, absl::string_view what,
                       std::vector<uint64_t>* out) {
  return c.Array([&]() -> absl::Status {
    if (out->size() == max) return absl::Status(code, absl::StrCat(what, " has more than ", max, " values"));
    PS_ASSIGN_OR_RETURN(const uint64_t v, c.Uint64());
    out->push_back(v);
    return absl::OkStatus();
  });
}

absl::StatusOr<RawTensor> ParseRawTensor(JsonCursor& c, const std::string& name) {
  RawTensor raw;
  PS_RETURN_IF_ERROR(c.Object([&](std::string key) -> absl::Status {
    if ((key == "dtype" && raw.has_dtype) || (key == "shape" && raw.shape) || (key == "data_offsets" && raw.offsets)) {
      return c.Error(absl::StrCat("tensor ", Quoted(name), ": field '", key, "' twice"));
    }
    if (key == "dtype") {
      PS_ASSIGN_OR_RETURN(raw.dtype, c.String());
      raw.has_dtype = true;
      return absl::OkStatus();
    }
    if (key == "shape") {
      return ParseInts(c, kMaxRank, absl::StatusCode::kInvalidArgument,
                       absl::StrCat("tensor ", Quoted(name), ": shape"), &raw.shape.emplace());
    }
    if (key == "data_offsets") {
      return ParseInts(c, 2, absl::StatusCode::kDataLoss, absl::StrCat("tensor ", Quoted(name), ": data_offsets"),
                       &raw.offsets.emplace());
    }
    return c.Error(absl::StrCat("tensor ", Quoted(name), ": unexpected field ", Quoted(key)));
  }));
  if (!raw.has_dtype || !raw.shape || !raw.offsets) {
    return c.Error(absl::StrCat("tensor ", Quoted(name), " lacks one of dtype, shape, data_offsets"));
  }
  return raw;
}

absl::StatusOr<Tensor> ParseTensor(JsonCursor& c, std::string name) {
  PS_ASSIGN_OR_RETURN(RawTensor raw, ParseRawTensor(c, name));
  Tensor t;
  const std::optional<DType> dtype = DTypeOfCode(raw.dtype);
  if (!dtype) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", Quoted(name), ": unsupported dtype ", Quoted(raw.dtype),
                                                   " (this build reads F32, F64, I64, U64)"));
  }
  if (raw.offsets->size() != 2 || raw.offsets->front() > raw.offsets->back()) {
    return absl::DataLossError(absl::StrCat("tensor ", Quoted(name), ": data_offsets [",
                                            absl::StrJoin(*raw.offsets, ", "), "] is not [begin, end]"));
  }
  t.begin = (*raw.offsets)[0];
  t.end = (*raw.offsets)[1];
  const std::optional<uint64_t> bytes = ArrayByteSize(*dtype, *raw.shape);
  if (!bytes || *bytes != t.end - t.begin) {
    return absl::DataLossError(absl::StrCat("tensor ", Quoted(name), ": data_offsets [", t.begin, ", ", t.end,
                                            "] span ", t.end - t.begin, " bytes, but ", raw.dtype, " shape ",
                                            ShapeString(*raw.shape), " needs ", bytes ? absl::StrCat(*bytes) : "more"));
  }
  t.info.name = std::move(name);
  t.info.dtype = *dtype;
  t.info.shape = std::move(*raw.shape);
  t.info.bytes = *bytes;
  return t;
}

absl::Status ParseMetadata(JsonCursor& c, std::map<std::string, std::string>* metadata) {
  return c.Object([&](std::string key) -> absl::Status {
    absl::StatusOr<std::string> value = c.String();
    if (!value.ok()) return c.Error(absl::StrCat("__metadata__ ", Quoted(key), " is not a string"));
    if (!metadata->emplace(std::move(key), *std::move(value)).second) return c.Error("a __metadata__ key twice");
    return absl::OkStatus();
  });
}

// Sorts the tensors into data order and checks that they tile the data.
absl::Status CheckLayout(std::vector<Tensor>& tensors, uint64_t data_bytes) {
  std::stable_sort(tensors.begin(), tensors.end(), [](const Tensor& a, const Tensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  for (const Tensor& t : tensors) {
    if (t.begin < expected) {
      return absl::DataLossError(absl::StrCat("tensor ", Quoted(t.info.name), " at [", t.begin, ", ", t.end,
                                              ") overlaps the tensor before it, which ends at ", expected));
    }
    if (t.begin > expected) {
      return absl::DataLossError(
          absl::StrCat("a gap of ", t.begin - expected, " bytes before tensor ", Quoted(t.info.name), " at ", t.begin));
    }
    expected = t.end;
  }
  if (expected > data_bytes) {
    return absl::DataLossError(
        absl::StrCat("truncated: the tensors need ", expected, " bytes of data, the file holds ", data_bytes));
  }
  if (expected < data_bytes) {
    return absl::DataLossError(
        absl::StrCat(data_bytes - expected, " bytes after the last tensor (which ends at ", expected, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSafetensorsNames(const std::string& path, const std::vector<ArraySpec>& arrays,
                                   const std::vector<uint64_t>& bytes,
                                   const std::map<std::string, std::string>& metadata) {
  uint64_t total = 0;
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i].name == kSafetensorsMetadataKey) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": a tensor may not be called __metadata__"));
    }
    if (!IsValidUtf8(arrays[i].name)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor name ", Quoted(arrays[i].name), " is not UTF-8"));
    }
    if (bytes[i] > UINT64_MAX - total) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": the tensors hold more than 2^64 bytes"));
    }
    total += bytes[i];
  }
  for (const auto& [key, value] : metadata) {
    if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": metadata ", Quoted(key), " is not UTF-8"));
    }
  }
  return absl::OkStatus();
}

std::string EncodeSafetensorsHeader(const std::vector<ArraySpec>& arrays, const std::vector<uint64_t>& bytes,
                                    const std::map<std::string, std::string>& metadata) {
  std::string json = "{";
  if (!metadata.empty()) {
    absl::StrAppend(&json, JsonQuote(kSafetensorsMetadataKey), ":{");
    for (const auto& [key, value] : metadata) {
      absl::StrAppend(&json, json.back() == '{' ? "" : ",", JsonQuote(key), ":", JsonQuote(value));
    }
    json += "}";
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < arrays.size(); ++i) {
    absl::StrAppend(&json, json.size() == 1 ? "" : ",", JsonQuote(arrays[i].name), ":{\"dtype\":\"",
                    DTypeCode(arrays[i].dtype), "\",\"shape\":[", absl::StrJoin(arrays[i].shape, ","),
                    "],\"data_offsets\":[", offset, ",", offset + bytes[i], "]}");
    offset += bytes[i];
  }
  json += "}";
  json.append((kAlignment - json.size() % kAlignment) % kAlignment, ' ');
  std::string out;
  PutRaw<uint64_t>(&out, json.size());
  return out + json;
}

absl::StatusOr<SafetensorsLayout> ParseSafetensorsHeader(absl::string_view json, uint64_t data_bytes) {
  JsonCursor c(json, "safetensors header");
  SafetensorsLayout layout;
  std::vector<Tensor> tensors;
  absl::flat_hash_set<std::string> names;
  bool has_metadata = false;
  PS_RETURN_IF_ERROR(c.Object([&](std::string key) -> absl::Status {
    if (key == kSafetensorsMetadataKey) {
      if (has_metadata) return c.Error("__metadata__ twice");
      has_metadata = true;
      return ParseMetadata(c, &layout.metadata);
    }
    if (!names.insert(key).second) return c.Error(absl::StrCat("tensor ", Quoted(key), " twice"));
    PS_ASSIGN_OR_RETURN(Tensor t, ParseTensor(c, std::move(key)));
    tensors.push_back(std::move(t));
    return absl::OkStatus();
  }));
  if (!c.AtEnd()) return c.Error("bytes after the JSON object");
  PS_RETURN_IF_ERROR(CheckLayout(tensors, data_bytes));
  layout.arrays.reserve(tensors.size());
  layout.begins.reserve(tensors.size());
  for (Tensor& t : tensors) {
    layout.arrays.push_back(std::move(t.info));
    layout.begins.push_back(t.begin);
  }
  return layout;
}

}  // namespace ps::internal
